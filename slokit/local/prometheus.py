"""A real Prometheus on a loopback port, for tests, the demo and the rule-cost benchmark; plus promtool helpers.

`LocalPrometheus` writes a config (scrape jobs and rule files you give it), starts Debian's `prometheus` binary on
a free 127.0.0.1 port with its own data directory, waits for `/-/ready`, and answers instant and range queries
through the HTTP API (optionally with `stats=all`, which reports the samples a query touched: the cost figure
`bench/rule_cost.py` compares). `backfill_openmetrics` turns OpenMetrics text into TSDB blocks with
`promtool tsdb create-blocks-from openmetrics`, so a test can give Prometheus days of history in seconds; blocks
written before `start()` (or before a `restart()`) are loaded at startup.

Everything is bounded: every wait has a deadline, and `stop()` (also on context exit) ends the process group.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from slokit.local.procs import LOOPBACK, ManagedProcess, StartError, free_port

PROMETHEUS_BINARY = "prometheus"
PROMTOOL_BINARY = "promtool"


class PrometheusError(RuntimeError):
    """Prometheus answered with an error (bad query, unreachable) or a promtool command failed."""


def find_binary(name: str) -> str | None:
    """The path of a Prometheus tool (`prometheus`, `promtool`, `vmalert`) as the shell finds it: first on PATH.

    PATH, not a fixed /usr/bin: a team that puts a newer promtool first on PATH means that one (and `--help` says
    "on PATH"); commands print the path they used. None when it is not on PATH.
    """
    return shutil.which(name)


def _require_binary(name: str) -> str:
    path = find_binary(name)
    if path is None:
        raise StartError(f"{name} is not on PATH; on Debian run: apt-get install prometheus")
    return path


# ==============================================================================================================
# Query results
# ==============================================================================================================
@dataclass(frozen=True)
class Sample:
    """One series of a query answer: its labels and its (timestamp, value) points (one for instant queries)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]

    @property
    def value(self) -> float:
        """The value of an instant-query sample (the last point of a range)."""
        return self.points[-1][1]


@dataclass(frozen=True)
class QueryResult:
    """A parsed `/api/v1/query` or `/api/v1/query_range` answer."""

    result_type: str
    samples: tuple[Sample, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def samples_touched(self) -> int:
        """Samples the query loaded from storage (`stats=all`: samples.totalQueryableSamples); 0 without stats."""
        samples = self.stats.get("samples", {})
        return int(samples.get("totalQueryableSamples", 0))

    @property
    def eval_seconds(self) -> float:
        """Engine time the query took (`stats.timings.evalTotalTime`), 0 without stats."""
        return float(self.stats.get("timings", {}).get("evalTotalTime", 0.0))

    def by_labels(self, *names: str) -> dict[tuple[str, ...], float]:
        """Instant values keyed by the given label values, e.g. `by_labels("model", "class")`."""
        return {tuple(s.labels.get(n, "") for n in names): s.value for s in self.samples}

    def scalar(self) -> float:
        """The single value of a one-series (or scalar) answer; raises if there is not exactly one."""
        if len(self.samples) != 1:
            raise PrometheusError(
                f"expected one series, got {len(self.samples)}: {[dict(s.labels) for s in self.samples]}"
            )
        return self.samples[0].value


def _parse_value(raw: str) -> float:
    if raw in ("NaN", "+Inf", "-Inf"):
        return {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}[raw]
    return float(raw)


def _parse_result(data: Mapping[str, Any]) -> QueryResult:
    result_type = str(data["resultType"])
    raw = data["result"]
    samples: list[Sample] = []
    if result_type in ("scalar", "string"):
        samples.append(Sample({}, ((float(raw[0]), _parse_value(raw[1])),)))
    else:
        for item in raw:
            if "value" in item:
                points: tuple[tuple[float, float], ...] = ((float(item["value"][0]), _parse_value(item["value"][1])),)
            else:
                points = tuple((float(t), _parse_value(v)) for t, v in item.get("values", []))
            samples.append(Sample(dict(item["metric"]), points))
    return QueryResult(result_type, tuple(samples), dict(data.get("stats", {})))


# ==============================================================================================================
# The server
# ==============================================================================================================
@dataclass
class LocalPrometheus:
    """One Prometheus process with its own config and data directory under `workdir`.

    `scrape_configs` are Prometheus `scrape_configs` entries (plain data); `static_targets` is a shortcut for one
    job per name -> list of `host:port`. `rule_files` are copied into the config by absolute path, so a test can
    regenerate them and `reload()`.
    """

    workdir: Path
    scrape_configs: Sequence[Mapping[str, Any]] = ()
    static_targets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    rule_files: Sequence[Path] = ()
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    alertmanagers: Sequence[str] = ()  # host:port of Alertmanagers to send alerts to
    retention: str = "90d"
    extra_args: Sequence[str] = ()
    port: int = 0
    _process: ManagedProcess | None = field(default=None, init=False, repr=False)

    # -- paths -------------------------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        """The TSDB directory; put backfilled blocks here before `start()` or `restart()`."""
        return self.workdir / "data"

    @property
    def config_path(self) -> Path:
        """The generated prometheus.yml."""
        return self.workdir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        """Prometheus's output (quoted by start errors)."""
        return self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:39123."""
        return f"http://{LOOPBACK}:{self.port}"

    # -- config ------------------------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The prometheus.yml content as plain data."""
        scrape: list[dict[str, Any]] = [dict(c) for c in self.scrape_configs]
        for job, targets in self.static_targets.items():
            scrape.append({"job_name": job, "static_configs": [{"targets": list(targets)}]})
        data: dict[str, Any] = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(Path(p).resolve()) for p in self.rule_files],
            "scrape_configs": scrape,
        }
        if self.alertmanagers:
            data["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(self.alertmanagers)}]}]}
        return data

    def write_config(self) -> Path:
        """Write prometheus.yml; `reload()` applies a rewritten one to a running server."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False), encoding="utf-8")
        return self.config_path

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> LocalPrometheus:
        """Start on a free loopback port (or `port`) and wait until `/-/ready` answers."""
        binary = _require_binary(PROMETHEUS_BINARY)
        self.write_config()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        argv = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--web.enable-lifecycle",
            "--web.enable-admin-api",
            # Backfilled blocks may overlap each other and the head; 2.39+ allows it by default, older needs the flag.
            *(["--storage.tsdb.allow-overlapping-blocks"] if _needs_overlap_flag(binary) else []),
            *self.extra_args,
        ]
        self._process = ManagedProcess("prometheus", argv, self.log_path).start()
        self._process.wait_http(f"{self.url}/-/ready", timeout)
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); safe to call twice."""
        if self._process is not None:
            self._process.stop()
            self._process = None

    def restart(self, timeout: float = 60.0) -> LocalPrometheus:
        """Stop and start again on the same port and data directory (loads blocks added meanwhile)."""
        self.stop()
        return self.start(timeout)

    def reload(self) -> None:
        """Rewrite the config and ask the server to reload it (and re-read the rule files)."""
        self.write_config()
        self._request("/-/reload", method="POST", raw=True)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (or after a start that failed to become ready)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.running

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's log."""
        return self._process.log_tail(lines) if self._process is not None else ""

    def __enter__(self) -> LocalPrometheus:
        return self.start() if not self.running else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- HTTP API ----------------------------------------------------------------------------------------------
    def _request(
        self, path: str, params: Mapping[str, str] | None = None, *, method: str = "GET", raw: bool = False,
        timeout: float = 60.0,
    ) -> Any:  # fmt: skip
        query = urllib.parse.urlencode(dict(params or {}))
        url = f"{self.url}{path}"
        body: bytes | None = None
        if method == "POST":
            body = query.encode()
        elif query:
            url = f"{url}?{query}"
        request = urllib.request.Request(url, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("error", detail)
            raise PrometheusError(f"{method} {path} failed with {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"{method} {path}: Prometheus at {self.url} did not answer: {exc}") from None
        if raw:
            return payload
        answer = json.loads(payload)
        if answer.get("status") != "success":
            raise PrometheusError(f"{path}: {answer.get('error', answer)}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None, *, stats: bool = False) -> QueryResult:
        """Instant query at `at` (unix seconds; default now). With `stats`, the answer carries samples touched."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        if stats:
            params["stats"] = "all"
        return _parse_result(self._request("/api/v1/query", params, method="POST"))

    def query_range(self, expr: str, start: float, end: float, step: float, *, stats: bool = False) -> QueryResult:
        """Range query from `start` to `end` (unix seconds) every `step` seconds."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        if stats:
            params["stats"] = "all"
        return _parse_result(self._request("/api/v1/query_range", params, method="POST"))

    def raw_query_range(self, expr: str, start: str, end: str, step: float, *, timeout: float = 60.0) -> Any:
        """Range query with start and end given as the API's text (unix seconds), answered as the API's unparsed
        `data` (`resultType`, `result`): the cheap form for reading many points."""
        params = {"query": expr, "start": start, "end": end, "step": f"{step:g}"}
        return self._request("/api/v1/query_range", params, method="POST", timeout=timeout)

    def label_values(self, label: str, start: float | None = None, end: float | None = None) -> list[str]:
        """Values of a label (`__name__`: metric names) over a time range (`/api/v1/label/<name>/values`)."""
        params = {k: f"{v:.3f}" for k, v in (("start", start), ("end", end)) if v is not None}
        values: list[str] = self._request(f"/api/v1/label/{label}/values", params)
        return values

    def rules(self) -> list[dict[str, Any]]:
        """Loaded rule groups (`/api/v1/rules`), with each rule's health, last error and evaluation time."""
        groups: list[dict[str, Any]] = self._request("/api/v1/rules")["groups"]
        return groups

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (`/api/v1/alerts`)."""
        alerts: list[dict[str, Any]] = self._request("/api/v1/alerts")["alerts"]
        return alerts

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets with their health."""
        active: list[dict[str, Any]] = self._request("/api/v1/targets")["activeTargets"]
        return active

    # -- waiting -----------------------------------------------------------------------------------------------
    def wait_for(self, expr: str, timeout: float = 60.0, poll: float = 1.0, min_series: int = 1) -> QueryResult:
        """Poll an instant query until it returns at least `min_series` series; raise with the log if it never does."""
        deadline = time.monotonic() + timeout
        last: QueryResult | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise StartError(f"prometheus exited while waiting for {expr}:\n{self.log_tail()}")
            last = self.query(expr)
            if len(last.samples) >= min_series:
                return last
            time.sleep(poll)
        got = len(last.samples) if last else 0
        raise PrometheusError(f"{expr} returned {got} series within {timeout:.0f}s (wanted {min_series})")

    def wait_rules_evaluated(self, timeout: float = 60.0, poll: float = 0.5) -> None:
        """Wait until every loaded rule group has been evaluated at least once, and fail on any rule error."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            groups = self.rules()
            errors = [
                f"{g['name']}/{r.get('name')}: {r['lastError']}"
                for g in groups
                for r in g["rules"]
                if r.get("lastError")
            ]
            if errors:
                raise PrometheusError("rule evaluation failed:\n" + "\n".join(errors))
            if groups and all(not str(g.get("lastEvaluation", "0001")).startswith("0001") for g in groups):
                return
            time.sleep(poll)
        raise PrometheusError(f"rule groups were not all evaluated within {timeout:.0f}s")


def remote_query(base_url: str, expr: str, at: float, timeout: float = 120.0) -> QueryResult:
    """An instant query against any Prometheus-compatible server (one slokit did not start)."""
    query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    request = urllib.request.Request(f"{base_url.rstrip('/')}/api/v1/query", data=query.encode(), method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise PrometheusError(
            f"{base_url}: query failed with {exc.code}: {exc.read().decode(errors='replace')}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PrometheusError(f"{base_url} did not answer a query: {exc}") from None
    if answer.get("status") != "success":
        raise PrometheusError(f"{base_url}: {answer.get('error', answer)}")
    return _parse_result(answer["data"])


def _needs_overlap_flag(binary: str) -> bool:
    """Whether this Prometheus predates overlapping blocks by default (2.39)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except OSError:
        return False
    try:
        version = out.split("version ", 1)[1].split()[0].split("+")[0]
        major, minor = (int(x) for x in version.split(".")[:2])
    except (IndexError, ValueError):
        return False
    return (major, minor) < (2, 39)


# ==============================================================================================================
# OpenMetrics text and backfilling
# ==============================================================================================================
def _label_text(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class OpenMetricsWriter:
    """Builds OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.

    Families are declared once (`family()`), then samples added in any order per series; `text()` writes each
    family with its samples sorted by time, as promtool requires, and the closing `# EOF`.
    """

    _families: dict[str, str] = field(default_factory=dict)  # name -> type
    _lines: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def family(self, name: str, kind: str) -> None:
        """Declare a metric family (`counter`, `gauge`, `histogram`); counters are named without `_total`."""
        self._families.setdefault(name, kind)
        self._lines.setdefault(name, [])

    def sample(self, family: str, name: str, labels: Mapping[str, str], value: float, timestamp: float) -> None:
        """One sample of `name` (e.g. family `x`, name `x_bucket`) at unix `timestamp` seconds."""
        self._lines[family].append((timestamp, f"{name}{_label_text(labels)} {_format_number(value)} {timestamp:.3f}"))

    def text(self) -> str:
        """The OpenMetrics exposition."""
        out: list[str] = []
        for name, kind in self._families.items():
            out.append(f"# TYPE {name} {kind}")
            out.extend(line for _, line in sorted(self._lines[name], key=lambda item: item[0]))
        out.append("# EOF")
        return "\n".join(out) + "\n"


def _format_number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def backfill_openmetrics(
    text: str, data_dir: Path, *, workdir: Path | None = None, max_block_duration: str | None = None,
    timeout: float = 600.0,
) -> list[Path]:  # fmt: skip
    """Write TSDB blocks for OpenMetrics `text` into `data_dir` with promtool; returns the new block directories.

    Prometheus loads them when it (re)starts. `max_block_duration` (e.g. `24h`) makes fewer, larger blocks for
    long histories, which keeps startup and queries fast.
    """
    scratch = workdir or data_dir.parent
    scratch.mkdir(parents=True, exist_ok=True)
    source = scratch / f"backfill-{time.monotonic_ns()}.om"
    source.write_text(text, encoding="utf-8")
    try:
        return backfill_openmetrics_file(source, data_dir, max_block_duration=max_block_duration, timeout=timeout)
    finally:
        source.unlink(missing_ok=True)


def backfill_openmetrics_file(
    source: Path, data_dir: Path, *, max_block_duration: str | None = None, timeout: float = 600.0
) -> list[Path]:
    """`backfill_openmetrics` for a file already on disk: promtool reads it in place (nothing is copied)."""
    promtool = _require_binary(PROMTOOL_BINARY)
    data_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in data_dir.iterdir()}
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    if max_block_duration:
        argv.append(f"--max-block-duration={max_block_duration}")
    argv += [str(source), str(data_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PrometheusError(
            f"promtool backfill failed ({done.returncode}):\n{done.stderr[-4000:]}{done.stdout[-2000:]}"
        )
    return sorted(p for p in data_dir.iterdir() if p.name not in before and p.is_dir())


def backfill_rules(
    rule_files: Iterable[Path], server: LocalPrometheus, start: float, end: float, output_dir: Path, *,
    eval_interval: str = "60s", timeout: float = 600.0,
) -> list[Path]:  # fmt: skip
    """Evaluate recording rules over a past range against a running server (`promtool tsdb create-blocks-from
    rules`) and write the results as blocks into `output_dir`. Rules reading other recorded series see only what
    the server already stores, so chained levels need one call (and a restart with the new blocks) per level."""
    promtool = _require_binary(PROMTOOL_BINARY)
    output_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        promtool, "tsdb", "create-blocks-from", "rules",
        f"--url={server.url}", f"--start={int(start)}", f"--end={int(end)}", f"--output-dir={output_dir}",
        f"--eval-interval={eval_interval}", *(str(p) for p in rule_files),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PrometheusError(f"promtool rule backfill failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return sorted(p for p in output_dir.iterdir() if p.is_dir())


def move_blocks(blocks: Iterable[Path], data_dir: Path) -> None:
    """Move block directories into a (stopped) server's data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for block in blocks:
        shutil.move(str(block), str(data_dir / block.name))


# ==============================================================================================================
# promtool checks
# ==============================================================================================================
@dataclass(frozen=True)
class ToolResult:
    """Exit status and output of one promtool run."""

    argv: tuple[str, ...]
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        """Whether promtool exited 0."""
        return self.returncode == 0


def promtool(*args: str, cwd: Path | None = None, timeout: float = 300.0) -> ToolResult:
    """Run promtool with `args` and capture its output (stdout and stderr together)."""
    argv = (_require_binary(PROMTOOL_BINARY), *args)
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )  # fmt: skip
    return ToolResult(argv, done.returncode, done.stdout + done.stderr)


def check_rule_files(paths: Iterable[Path]) -> ToolResult:
    """`promtool check rules` on rule files."""
    return promtool("check", "rules", *(str(p) for p in paths))


def run_rule_tests(paths: Iterable[Path], timeout: float = 1200.0) -> ToolResult:
    """`promtool test rules` on unit-test files (rule_files inside them are relative to each test file).

    A spec's generated tests take one to two minutes on an idle 2-core machine; the limit leaves room for a busy
    one, where they have taken over five."""
    paths = list(paths)
    cwd = paths[0].parent if paths else None
    return promtool("test", "rules", *(str(p.resolve()) for p in paths), cwd=cwd, timeout=timeout)
