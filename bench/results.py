"""Results files of the benchmarks: one JSON document per benchmark, `bench/results/<name>.json`.

A figure in the README is only worth what its provenance is: which code it measured, on which machine, under
which load and settings, and how it varied between runs. Every benchmark therefore writes its figures through
`write()`, which adds the commit, the date, the machine (cores, CPU, load average before and after the run), the
settings, every run (not only the best) and `sources`: the files the benchmark measured, each with the SHA-256 of
its contents. tests/test_bench_results.py recomputes those hashes, so a results file whose measured code changed
since it was written fails the suite until the benchmark is re-run (editing the hash would need the new contents'
hash, which is the re-run's job, not a hand's). `commit` is HEAD when the file was written (and
`sources_modified_since_commit` says whether the measured files differed from it); a branch rebased afterwards no
longer holds that commit, so the sources' hashes, not the commit, are what ties a results file to the code.

Quoted figures: README.md and docs/*.md mark each figure they quote from a results file with an HTML comment after
the sentence, invisible when rendered::

    ... costs 0.15x to 0.38x of vLLM's logger
    <!-- bench exporter_overhead: record.ratio.min=0.15 record.ratio.max=0.38 -->

`quoted()` finds those markers; the test checks that each value is the results file's figure (at the quoted
precision) and that the value is written in the paragraph the marker closes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
SCHEMA = 1
# Which benchmark measures which files (globs relative to the repository root; a glob after `!` takes files out). A
# results file is stale when any of these changed; keep each list to what the figures depend on, plus the benchmark
# itself. The mutation harness sits among the generators but no benchmark runs it.
SOURCES: Mapping[str, tuple[str, ...]] = {
    "exporter_overhead": (
        "bench/exporter_overhead.py",
        "bench/frontend_overhead.py",
        "slokit/exporters/vllm.py",
        "slokit/exporters/classes.py",
    ),
    "soak": ("bench/soak.py", "tests/memory_probe.py", "slokit/exporters/vllm.py", "slokit/exporters/classes.py"),
    "probe_accuracy": ("bench/probe_accuracy.py", "slokit/probe/*.py", "slokit/local/emulator.py"),
    "rule_cost": (
        "bench/rule_cost.py",
        "slokit/generate/*.py",
        "!slokit/generate/mutants.py",
        "slokit/promql.py",
        "slokit/schema.py",
    ),
    "rule_cost_realistic": (
        "bench/rule_cost.py",
        "slokit/generate/*.py",
        "!slokit/generate/mutants.py",
        "slokit/promql.py",
        "slokit/schema.py",
    ),
    "fleet": (
        "bench/fleet.py",
        "slokit/fleet.py",
        "slokit/generate/**/*.py",
        "!slokit/generate/mutants.py",
        "slokit/schema.py",
    ),
    "autoscale": (
        "bench/autoscale.py",
        "slokit/autoscale/*.py",
        "slokit/generate/autoscale.py",
        "slokit/generate/k8s.py",
        "slokit/backtest/simulate.py",
        "examples/assistant.yaml",
        "examples/summarize.yaml",
    ),
    "fuzz": ("bench/fuzz.py", "slokit/spec/*.py", "slokit/exporters/classes.py", "slokit/exporters/webconfig.py"),
}
MARKER = re.compile(r"<!--\s*bench\s+(?P<name>[a-z_]+)\s*:(?P<body>[^>]*?)-->")
ASSIGNMENT = re.compile(r"(?P<key>[A-Za-z0-9_.]+)=(?P<value>-?[0-9][0-9,]*(?:\.[0-9]+)?)")


class ResultsError(Exception):
    """A results file or a quoted figure that cannot be read."""


# ==============================================================================================================
# Writing
# ==============================================================================================================
def source_files(name: str, root: Path = ROOT) -> list[str]:
    """The files benchmark `name` measures, as sorted repository-relative paths."""
    try:
        patterns = SOURCES[name]
    except KeyError:
        raise ResultsError(f"unknown benchmark {name!r}; known: {', '.join(sorted(SOURCES))}") from None
    found = _matching(patterns, root) - excluded_files(name, root)
    if not found:
        raise ResultsError(f"benchmark {name!r} names no existing source file ({patterns})")
    return sorted(found)


def _matching(patterns: Iterable[str], root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for pattern in patterns for p in root.glob(pattern) if p.is_file()}


def excluded_files(name: str, root: Path = ROOT) -> set[str]:
    """The files benchmark `name`'s `!` globs take out of its sources (they never count as measured)."""
    return _matching((p[1:] for p in SOURCES.get(name, ()) if p.startswith("!")), root)


def hash_sources(paths: Iterable[str], root: Path = ROOT) -> dict[str, Any]:
    """`{"files": {path: sha256}, "hash": sha256 over every path and file hash}`; a missing file hashes as ''."""
    files: dict[str, str] = {}
    for path in sorted(paths):
        target = root / path
        files[path] = hashlib.sha256(target.read_bytes()).hexdigest() if target.is_file() else ""
    return {"files": files, "hash": combined_hash(files)}


def combined_hash(files: Mapping[str, str]) -> str:
    """The one hash over every path and its file's hash, in path order (a results file's `sources.hash`)."""
    return hashlib.sha256("".join(f"{p}\0{files[p]}\n" for p in sorted(files)).encode()).hexdigest()


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> dict[str, Any]:
    """Cores, CPU model, OS, Python, and the load average now (the caller adds one before and one after)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "shared": True,  # these benchmarks run on a machine other work shares; compare only side-by-side ratios
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


@dataclass
class Recorder:
    """Collects one benchmark run's figures; `save()` writes the results file.

    Created at the start of a run so the load average before it is captured; `runs` holds one dict per repeated
    run (every one, favourable or not), `figures` the summary the README quotes (ranges over those runs).
    """

    name: str
    settings: dict[str, Any]
    started: str = ""
    load_before: list[float] | None = None

    def __post_init__(self) -> None:
        source_files(self.name)  # fail early on an unknown name
        self.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.load_before = load_average()

    def save(
        self,
        figures: Mapping[str, Any],
        runs: Sequence[Mapping[str, Any]],
        out_dir: Path = RESULTS_DIR,
        notes: str = "",
    ) -> Path:
        """Write `<out_dir>/<name>.json` and return its path."""
        paths = source_files(self.name)
        dirty = _git("status", "--porcelain", "--", *paths)
        document = {
            "schema": SCHEMA,
            "name": self.name,
            "commit": _git("rev-parse", "HEAD"),
            "sources_modified_since_commit": bool(dirty),
            "date": self.started,
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python", *(sys.argv or [""])]),
            "machine": {**machine(), "load_before": self.load_before, "load_after": load_average()},
            "settings": self.settings,
            "figures": _clean(figures),
            "runs": _clean(list(runs)),
            "notes": notes,
            "sources": hash_sources(paths),
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"results written to {path}", file=sys.stderr)
        return path


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None, tuples lists, floats rounded to 6 significant digits."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.6g}")
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def span(values: Sequence[float]) -> dict[str, float]:
    """min, median and max of a figure over runs (what the README quotes as a range)."""
    ordered = sorted(v for v in values if math.isfinite(v))
    if not ordered:
        return {"min": math.nan, "median": math.nan, "max": math.nan}
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"min": ordered[0], "median": median, "max": ordered[-1]}


# ==============================================================================================================
# Reading and checking
# ==============================================================================================================
def load(name: str, out_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    """The results file of benchmark `name`."""
    path = out_dir / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path} is missing: run `make bench` (or python bench/{name}.py)") from None
    except ValueError as exc:
        raise ResultsError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path} is not a JSON object")
    return data


def figure(data: Mapping[str, Any], key: str) -> Any:
    """A figure by dotted path under `figures` (e.g. `record.ratio_max`)."""
    node: Any = data.get("figures")
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ResultsError(f"{data.get('name')}: no figure {key!r}")
        node = node[part]
    return node


def stale_sources(data: Mapping[str, Any], root: Path = ROOT) -> list[str]:
    """The measured files whose contents differ from those the results were written from (or that appeared)."""
    recorded = (data.get("sources") or {}).get("files") or {}
    name = str(data.get("name", ""))
    now = set(source_files(name, root)) if name in SOURCES else set()
    current = hash_sources((set(recorded) | now) - excluded_files(name, root), root)["files"]
    return sorted(p for p, h in current.items() if recorded.get(p) != h)


@dataclass(frozen=True)
class Quote:
    """One figure quoted in a document: where, which results file and key, the value as written."""

    document: str
    line: int
    name: str
    key: str
    text: str  # the value as written in the marker, e.g. "0.15" or "1,847"
    paragraph: str  # the prose the marker closes (from the previous blank line), markers removed

    @property
    def value(self) -> float:
        return float(self.text.replace(",", ""))

    @property
    def decimals(self) -> int:
        return len(self.text.split(".", 1)[1]) if "." in self.text else 0


def quoted(document: Path, root: Path = ROOT) -> list[Quote]:
    """Every `<!-- bench NAME: key=value ... -->` marker of a Markdown document."""
    text = document.read_text(encoding="utf-8")
    quotes: list[Quote] = []
    for match in MARKER.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        start = text.rfind("\n\n", 0, match.start())
        paragraph = MARKER.sub(" ", text[start + 1 if start >= 0 else 0 : match.start()])
        assignments = list(ASSIGNMENT.finditer(match.group("body")))
        if not assignments or ASSIGNMENT.sub("", match.group("body")).strip():
            raise ResultsError(f"{document}:{line}: unreadable marker {match.group(0)!r} (want key=number ...)")
        for a in assignments:
            rel = document.relative_to(root).as_posix() if document.is_relative_to(root) else str(document)
            quotes.append(Quote(rel, line, match.group("name"), a.group("key"), a.group("value"), paragraph))
    return quotes


def check_quote(quote: Quote, data: Mapping[str, Any]) -> str | None:
    """Why a quote disagrees with its results file, or None when it agrees."""
    where = f"{quote.document}:{quote.line}"
    try:
        actual = figure(data, quote.key)
    except ResultsError as exc:
        return f"{where}: {exc}"
    if not isinstance(actual, (int, float)) or isinstance(actual, bool):
        return f"{where}: {quote.name}.{quote.key} is {actual!r}, not a number"
    tolerance = 0.5 * 10 ** (-quote.decimals) + 1e-9
    if abs(float(actual) - quote.value) > tolerance:
        return f"{where}: quotes {quote.name}.{quote.key} = {quote.text}, the results file has {actual}"
    if not re.search(rf"(?<![0-9.,]){re.escape(quote.text)}(?![0-9]|\.[0-9])", quote.paragraph):
        return f"{where}: {quote.text} ({quote.name}.{quote.key}) is not written in the paragraph the marker closes"
    return None
