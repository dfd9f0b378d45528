"""Evaluate the generated rules and alerts over history with the real Prometheus engine.

How, and why this way:

1. The raw history goes into a fresh TSDB on a Prometheus started on a loopback port: an OpenMetrics file is
   backfilled with `promtool tsdb create-blocks-from openmetrics` (promtool reads the file in place), a TSDB
   directory is copied, a live server's raw samples are read through its HTTP API (`metric[1h]` range selectors
   return the samples as stored) and backfilled.
2. The recording rules that the chosen alerts and the plots read (directly or through other records) run over the
   whole range one dependency level at a time (a level reads only the levels below it, and Prometheus loads each
   level's blocks when it restarts), each group at its own interval, exactly the expressions `slokit generate`
   writes: each rule's expression is range-queried at the evaluation times `promtool tsdb create-blocks-from
   rules` would use (same grid, same group phase), and the level's results go in with one
   `create-blocks-from openmetrics` (see slokit.backtest.recording): the same samples, in a few large blocks.
3. Each alert's expression is a range query at its group's interval (the instant query Prometheus would run at
   every evaluation), and `for` / `keep_firing_for` go through Prometheus's own pending/firing state machine
   (`apply_for`, a transcription of rules/alerting.go). PromQL is never re-implemented.

The alerts come from `slokit.generate`'s data model (`AlertRule`, `RuleGroup`): whatever the generator produces
is what is tested, grouped into families by `AlertRule.kind`.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from slokit import schema
from slokit.backtest.incidents import InputError, rfc3339
from slokit.backtest.recording import Rule, group_offset_ns, write_level
from slokit.generate.model import AlertKind, AlertRule, RecordingRule
from slokit.generate.rules import rule_groups
from slokit.local.prometheus import (
    LocalPrometheus,
    OpenMetricsWriter,
    PrometheusError,
    backfill_openmetrics,
    backfill_openmetrics_file,
    move_blocks,
    remote_query,
)
from slokit.promql import eq, number, one_of, selector
from slokit.report.reads import NoDataError, missing_warnings, no_data, spec_reads
from slokit.spec import Spec
from slokit.units import format_duration, parse_duration, prom_duration

ALIGN: Final = 600  # evaluation times are multiples of every group interval (30s, 1m, 2m)
MAX_POINTS: Final = 10_000  # Prometheus answers at most 11,000 points per series per range query
FIXED_P99_FOR: Final = 300.0
PHASE_FILE: Final = "slokit-backtest/rules.yaml"  # the rule-file path group phases hash (see run_recording_rules)

# Variant name -> the alert kinds it keeps (None: every generated alert).
FAMILIES: Final[Mapping[str, tuple[AlertKind, ...]]] = {
    "burn-rate": (AlertKind.BURN_RATE,),
    "tiers": (AlertKind.TIER,),
    "baseline": (AlertKind.BASELINE,),
}
ALL_VARIANTS: Final = ("slokit", *FAMILIES, "fixed-p99")

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """Progress lines on stderr (the default)."""
    print(f"backtest: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Candidate:
    """One alert rule as evaluated: its expression, hold times, static labels and evaluation interval."""

    name: str
    expr: str
    for_: float
    keep_firing_for: float
    labels: Mapping[str, str]
    interval: float
    kind: str  # AlertKind value, or "fixed_p99"

    @property
    def key(self) -> str:
        """Unique per rule: name plus its static labels."""
        return self.name + json.dumps(dict(sorted(self.labels.items())))


@dataclass(frozen=True)
class Firing:
    """One firing interval of one alert series: [start, end) in unix seconds (end: first evaluation not firing)."""

    alertname: str
    severity: str
    labels: Mapping[str, str]
    start: float
    end: float
    kind: str
    ongoing: bool = False  # still firing at the end of the range

    def to_data(self) -> dict[str, Any]:
        """backtest.json form."""
        return {
            "alertname": self.alertname, "severity": self.severity, "labels": dict(self.labels),
            "start": self.start, "end": self.end, "kind": self.kind, "ongoing": self.ongoing,
        }  # fmt: skip


@dataclass
class Evaluation:
    """Everything backtest measured, before scoring."""

    start: float  # first evaluation
    end: float
    alerts: dict[str, list[Firing]] = field(default_factory=dict)  # candidate key -> firings
    variants: dict[str, list[Candidate]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    p99: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # model/class/slo -> 1m points
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds it took


# ==============================================================================================================
# Which alerts each variant has
# ==============================================================================================================
def _seconds(value: Any) -> float:
    return parse_duration(value) if value not in (None, "", "0s") else 0.0


def generated_candidates(spec: Spec) -> list[Candidate]:
    """Every alert `slokit generate` writes for the spec, with its group's interval."""
    out = []
    for group in rule_groups(spec):
        for rule in group.rules:
            if isinstance(rule, AlertRule):
                data = rule.to_data()  # the rule-file form: `for` and `keep_firing_for` as written
                out.append(Candidate(
                    rule.name, rule.expr, _seconds(data.get("for")), _seconds(data.get("keep_firing_for")),
                    dict(data.get("labels", {})), parse_duration(group.interval), rule.kind.value,
                ))  # fmt: skip
    return out


def fixed_p99_candidates(spec: Spec, interval: float) -> list[Candidate]:
    """The straw man: page when the 5m p99 is over the objective threshold for 5 minutes, per objective."""
    out = []
    severity = spec.alerting.severity.label("page")
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            for model in rc.models:
                m = [
                    eq(schema.RULE_LABEL_SERVICE, spec.service), eq(schema.RULE_LABEL_MODEL, model),
                    eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value), eq("quantile", "0.99"),
                ]  # fmt: skip
                expr = f"{selector(schema.RECORD_LATENCY_QUANTILE, m)} > {number(slo.objective.threshold)}"
                labels = {"severity": severity, "service": spec.service, "slo": sli.value, "model": model,
                          "class": rc.name}  # fmt: skip
                out.append(Candidate("FixedP99AboveThreshold", expr, FIXED_P99_FOR, 0.0, labels, interval, "fixed_p99"))
    return out


def variant_candidates(spec: Spec, names: Sequence[str] | None = None) -> dict[str, list[Candidate]]:
    """Variant name -> its alerts. Unknown names raise InputError listing the known ones."""
    generated = generated_candidates(spec)
    interval = min((c.interval for c in generated), default=30.0)
    all_variants: dict[str, list[Candidate]] = {"slokit": generated}
    for name, kinds in FAMILIES.items():
        all_variants[name] = [c for c in generated if c.kind in {k.value for k in kinds}]
    all_variants["fixed-p99"] = fixed_p99_candidates(spec, interval)
    chosen = list(names) if names else list(ALL_VARIANTS)
    unknown = [n for n in chosen if n not in all_variants]
    if unknown:
        raise InputError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(ALL_VARIANTS)}")
    return {n: all_variants[n] for n in chosen}


# ==============================================================================================================
# Prometheus's alert state machine (rules/alerting.go, AlertingRule.Eval), one label set at a time
# ==============================================================================================================
def apply_for(
    active_times: Mapping[str, Sequence[float]], times: Sequence[float], for_: float, keep_firing_for: float
) -> dict[str, list[tuple[float, float | None]]]:
    """Firing intervals per label set, given at which evaluation times its expression returned it.

    As Prometheus: a new result is pending with activeAt = t (firing at once when `for` is 0); pending becomes
    firing at the first evaluation with t - activeAt >= for; a pending alert that disappears is dropped; a firing
    one that disappears resolves at that evaluation, unless `keep_firing_for` holds it (from the first missing
    evaluation, while t - keepFiringSince < keep_firing_for). End None: still firing at the last evaluation.
    """
    out: dict[str, list[tuple[float, float | None]]] = {}
    for key, seen in active_times.items():
        present = set(seen)
        state = "inactive"
        active_at = fired_at = keep_since = 0.0
        intervals: list[tuple[float, float | None]] = []
        for t in times:
            if t in present:
                keep_since = 0.0
                if state == "inactive":
                    state, active_at = "pending", t
                if state == "pending" and t - active_at >= for_:
                    state, fired_at = "firing", t
                continue
            if state == "pending":
                state = "inactive"
            elif state == "firing":
                if keep_firing_for > 0:
                    if keep_since == 0.0:
                        keep_since = t
                    if t - keep_since < keep_firing_for:
                        continue
                intervals.append((fired_at, t))
                state = "inactive"
        if state == "firing":
            intervals.append((fired_at, None))
        if intervals:
            out[key] = intervals
    return out


# ==============================================================================================================
# Loading history
# ==============================================================================================================
def source_metric_names(spec: Spec) -> list[str]:
    """Every raw series name the generated rules read, in the spec's source's spelling."""
    m = spec.metrics
    names: set[str] = set()
    for rc in spec.classes:
        for sli in rc.slos:
            base = spec.histogram(rc, sli).name
            names.update((base + "_bucket", base + "_count", base + "_sum"))
    engine = (m.requests_finished, m.requests_running, m.requests_waiting, m.kv_cache_usage, m.preemptions,
              m.generation_tokens, m.prompt_tokens)  # fmt: skip
    names.update(name for name in engine if name is not None)  # TGI has no KV-cache gauge or preemptions
    return sorted(names)


def _blocks_range(blocks: Sequence[Path]) -> tuple[float, float]:
    """First and last sample time (unix seconds) of backfilled blocks (meta.json maxTime is one past the last)."""
    lo, hi = float("inf"), float("-inf")
    for block in blocks:
        data = json.loads((block / "meta.json").read_text(encoding="utf-8"))
        lo, hi = min(lo, data["minTime"] / 1000), max(hi, (data["maxTime"] - 1) / 1000)
    return lo, hi


def load_openmetrics(path: Path, server: LocalPrometheus, workdir: Path, progress: Progress) -> tuple[float, float]:
    """Backfill an OpenMetrics file into the (stopped) server's TSDB; returns the time range of its samples.

    promtool reads the file where it is (it is never read into memory here); its errors name the bad line."""
    progress(f"backfilling {path} ({path.stat().st_size / 1e6:.0f} MB) with promtool")
    try:
        blocks = backfill_openmetrics_file(path, server.data_dir, max_block_duration="24h")
    except PrometheusError as exc:
        raise InputError(f"{path}: promtool cannot read it as OpenMetrics: {exc}") from None
    if not blocks:
        raise NoDataError(f"no data: {path} holds no timestamped samples; backtest needs scraped history "
                          "(`name{labels} value ts`)")  # fmt: skip
    return _blocks_range(blocks)


def load_tsdb(path: Path, server: LocalPrometheus) -> tuple[float, float]:
    """Copy a Prometheus TSDB directory's blocks (and WAL) into the server's data directory; returns its range."""
    metas = sorted(path.glob("*/meta.json"))
    if not metas and not (path / "wal").is_dir():
        raise InputError(f"{path}: not a Prometheus TSDB directory (no */meta.json blocks, no wal/)")
    lo, hi = float("inf"), float("-inf")
    for meta in metas:
        data = json.loads(meta.read_text(encoding="utf-8"))
        lo, hi = min(lo, data["minTime"] / 1000), max(hi, data["maxTime"] / 1000)
    shutil.copytree(path, server.data_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("lock", "queries.active"))
    return lo, hi


def load_remote(url: str, start: float, end: float, spec: Spec, server: LocalPrometheus, workdir: Path,
                progress: Progress) -> tuple[float, float]:  # fmt: skip
    """Read the spec's raw series from a live Prometheus, an hour at a time, and backfill them locally."""
    writer = OpenMetricsWriter()
    models = [m.name for m in spec.models]
    found = 0
    for name in source_metric_names(spec):
        family, kind = name, "gauge"
        if name.endswith("_total"):
            family, kind = name.removesuffix("_total"), "counter"
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix):
                family, kind = name.removesuffix(suffix), "histogram"
        writer.family(family, kind)
        t = start
        while t < end:
            upto = min(end, t + 3600)
            # A range selector returns the samples as stored (no resampling); (t, upto] per hour.
            label = spec.metrics.model_label  # None (TGI): one model, every series is its
            scope = [one_of(label, models)] if label else []
            expr = f"{selector(name, scope)}[{int(upto - t)}s]"
            try:
                answer = remote_query(url, expr, upto)
            except PrometheusError as exc:
                raise InputError(str(exc)) from None
            for sample in answer.samples:
                labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
                for ts, value in sample.points:
                    writer.sample(family, name, labels, value, ts)
                    found += 1
            t = upto
        progress(f"read {name} from {url}")
    if not found:
        raise no_data(spec, spec_reads(spec), url, f"between {rfc3339(start)} and {rfc3339(end)}")
    backfill_openmetrics(writer.text(), server.data_dir, workdir=workdir, max_block_duration="24h")
    return start, end


# ==============================================================================================================
# Recording rules, level by level
# ==============================================================================================================
def rule_levels(spec: Spec) -> list[list[tuple[str, RecordingRule]]]:
    """Recording rules by dependency depth (rules reading only raw series: 0), with their group names."""
    return dependency_levels([(g.name, r) for g in rule_groups(spec) for r in g.rules if isinstance(r, RecordingRule)])


def dependency_levels(rules: Sequence[tuple[str, RecordingRule]]) -> list[list[tuple[str, RecordingRule]]]:
    """(group name, rule) pairs by dependency depth: a rule reading only series no rule records is at 0, any other
    one level above the deepest record it reads. `promtool tsdb create-blocks-from rules` evaluates one level per
    run (a rule sees only what the server already stores)."""
    names = {r.record for _, r in rules}
    patterns = {n: re.compile(r"(?<![\w:])" + re.escape(n) + r"(?![\w:])") for n in names}
    exprs: dict[str, list[str]] = {}
    for _, rule in rules:
        exprs.setdefault(rule.record, []).append(rule.expr)
    depth: dict[str, int] = {}

    def level(record: str, seen: frozenset[str]) -> int:
        if record not in depth:
            deps = [
                n for n in names if n != record and n not in seen and any(patterns[n].search(e) for e in exprs[record])
            ]
            depth[record] = 1 + max((level(d, seen | {record}) for d in deps), default=-1)
        return depth[record]

    by_level: dict[int, list[tuple[str, RecordingRule]]] = {}
    for group, rule in rules:
        by_level.setdefault(level(rule.record, frozenset()), []).append((group, rule))
    return [by_level[k] for k in sorted(by_level)]


def needed_rules(rules: Sequence[tuple[str, RecordingRule]], readers: Sequence[str]) -> list[tuple[str, RecordingRule]]:
    """The rules whose records the expressions in `readers` read, directly or through other records."""
    exprs: dict[str, list[str]] = {}
    for _, rule in rules:
        exprs.setdefault(rule.record, []).append(rule.expr)
    patterns = {n: re.compile(r"(?<![\w:])" + re.escape(n) + r"(?![\w:])") for n in exprs}
    wanted: set[str] = set()
    todo = list(readers)
    while todo:
        expr = todo.pop()
        for name, pattern in patterns.items():
            if name not in wanted and pattern.search(expr):
                wanted.add(name)
                todo.extend(exprs[name])
    return [(g, r) for g, r in rules if r.record in wanted]


def run_recording_rules(spec: Spec, server: LocalPrometheus, start: float, end: float, workdir: Path,
                        progress: Progress, group_interval: float | None = None,
                        readers: Sequence[str] | None = None) -> None:  # fmt: skip
    """The recording rules over [start, end], one dependency level at a time; the server is running after.

    With `readers` (alert expressions, plot queries), only the records they read, directly or not, are evaluated.
    Each level: every rule's range queries on promtool's evaluation grid, one OpenMetrics file, one promtool
    backfill, a restart that loads the new blocks (see slokit.backtest.recording)."""
    groups = rule_groups(spec)
    rules = [(g.name, r) for g in groups for r in g.rules if isinstance(r, RecordingRule)]
    total = len(rules)
    if readers is not None:
        rules = needed_rules(rules, readers)
    levels = dependency_levels(rules)
    progress(f"recording rules: {len(rules)} of {total} read by the alerts and plots, in {len(levels)} levels")
    intervals = {g.name: int(group_interval or parse_duration(g.interval)) for g in groups}
    # The phase Prometheus (and promtool) give a group hashes its name and rule file path: a fixed path, so the
    # same history gives the same evaluation times, and the same results, on every run.
    rule_file = PHASE_FILE
    for depth, level in enumerate(levels):
        began = time.monotonic()
        evaluated = [
            Rule(r.record, r.expr, dict(r.labels), intervals[g], group_offset_ns(g, rule_file, intervals[g] * 10**9))
            for g, r in level
        ]
        path = workdir / f"level{depth}.om"
        stats = write_level(server, evaluated, int(start), int(end), path)
        queried = time.monotonic()
        if stats.samples:
            blocks = backfill_openmetrics_file(path, workdir / f"blocks{depth}", max_block_duration="10000h",
                                               timeout=3600)  # fmt: skip
        path.unlink()
        written = time.monotonic()
        if stats.samples:
            server.stop()
            move_blocks(blocks, server.data_dir)
            server.start(timeout=300)
        progress(f"recording rules level {depth + 1}/{len(levels)}: {len(level)} rules, {stats.series} series, "
                 f"{stats.samples} samples in {time.monotonic() - began:.1f}s (queries {queried - began:.1f}s, "
                 f"blocks {written - queried:.1f}s, restart {time.monotonic() - written:.1f}s)")  # fmt: skip


# ==============================================================================================================
# Alerts
# ==============================================================================================================
def _eval_times(start: float, end: float, interval: float) -> list[float]:
    first = start + (-start) % interval
    count = int((end - first) // interval) + 1
    return [first + i * interval for i in range(max(0, count))]


def evaluate_alert(server: LocalPrometheus, candidate: Candidate, start: float, end: float) -> list[Firing]:
    """Range-query one alert's expression at its group's interval and apply its `for` / `keep_firing_for`."""
    times = _eval_times(start, end, candidate.interval)
    seen: dict[str, list[float]] = {}
    labels_of: dict[str, dict[str, str]] = {}
    chunk = MAX_POINTS * candidate.interval
    t = times[0] if times else start
    while times and t <= times[-1]:
        upto = min(times[-1], t + chunk - candidate.interval)
        answer = server.query_range(candidate.expr, t, upto, candidate.interval)
        for sample in answer.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
            labels.update(candidate.labels)
            labels["alertname"] = candidate.name
            key = json.dumps(dict(sorted(labels.items())))
            labels_of[key] = labels
            seen.setdefault(key, []).extend(round(ts, 3) for ts, _ in sample.points)
        t = upto + candidate.interval
    firings = []
    last = times[-1] if times else end
    for key, intervals in apply_for(seen, times, candidate.for_, candidate.keep_firing_for).items():
        labels = labels_of[key]
        for begin, finish in intervals:
            firings.append(Firing(candidate.name, labels.get("severity", ""), labels, begin,
                                  finish if finish is not None else last + candidate.interval, candidate.kind,
                                  ongoing=finish is None))  # fmt: skip
    return sorted(firings, key=lambda f: (f.start, f.alertname))


_ALERTS_SELECTOR: Final = re.compile(rf"\b{schema.ALERTS_SERIES}\{{[^}}]*\}}")


def alerts_query(expr: str) -> str:
    """An alert expression with every ALERTS selector read as `== 1` (see `write_alerts_series`)."""
    return _ALERTS_SELECTOR.sub(lambda m: f"({m.group(0)} == 1)", expr)


def write_alerts_series(
    server: LocalPrometheus, fired: Sequence[tuple[Candidate, Sequence[Firing]]], start: float, end: float,
    workdir: Path,
) -> None:  # fmt: skip
    """Backfill `ALERTS{alertname, alertstate="firing", ...} 1` at every evaluation of every firing interval, as
    Prometheus' rule manager writes it, then restart the server on it (restarted even when nothing fired).

    Prometheus ends a resolved alert's ALERTS series with a stale marker; a backfilled block cannot hold one, so
    the series would linger for the lookback delta. Instead a 0 is written at the first evaluation after each
    firing interval, and `alerts_query` reads ALERTS as `== 1`.
    """
    writer = OpenMetricsWriter()
    writer.family(schema.ALERTS_SERIES, "gauge")
    for candidate, firings in fired:
        for firing in firings:
            labels = {**firing.labels, "alertname": candidate.name, "alertstate": "firing"}
            for t in _eval_times(max(start, firing.start), min(end, firing.end - 1e-3), candidate.interval):
                writer.sample(schema.ALERTS_SERIES, schema.ALERTS_SERIES, labels, 1.0, t)
            if firing.end <= end:
                writer.sample(schema.ALERTS_SERIES, schema.ALERTS_SERIES, labels, 0.0, firing.end)
    server.stop()
    if any(firings for _, firings in fired):
        blocks = backfill_openmetrics(writer.text(), workdir / "alerts-blocks", workdir=workdir / "alerts-scratch")
        move_blocks(blocks, server.data_dir)
    server.start(timeout=300)


# ==============================================================================================================
# The whole run
# ==============================================================================================================
def span_text(seconds: float) -> str:
    """A length of history the way people read it: `6h`, `1d23h59m` (whole minutes)."""
    minutes = max(1, round(seconds / 60))
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((days, "d"), (hours, "h"), (mins, "m")) if n) or "0m"


def check_history(spec: Spec, names: set[str], lo: float, hi: float, where: str) -> list[str]:
    """Fail on history with none of the spec's metrics; warn on a range shorter than the longest window."""
    wanted = source_metric_names(spec)
    present = sorted(set(wanted) & set(names))
    if not present:
        other = sorted(names)[:8]
        raise NoDataError(
            f"{where}: none of the spec's metrics ({spec.source.name} source: {', '.join(wanted[:4])}, ...) "
            f"are in the history; it has {', '.join(other) or 'no series'}{', ...' if len(names) > 8 else ''}. "
            f"Is `source:` right (vllm for vLLM's own /metrics, slokit for slokit's exporter)?"
        )
    warnings = []
    span = hi - lo
    latency = {spec.histogram(rc, s).name + "_bucket" for rc in spec.classes for s in rc.slos}
    if not latency & set(names):
        warnings.append("the history has no latency histograms of the spec: only engine and absence alerts can fire")
    baseline = spec.alerting.baseline.offset * max(1, spec.alerting.baseline.median_days)
    windows = sorted({w.long for w in spec.alerting.burn_rates} | {spec.window, baseline})
    short = [w for w in windows if w > span]
    if short:
        warnings.append(
            f"the history covers {span_text(span)}, shorter than the "
            f"{', '.join(format_duration(w) for w in short)} window(s): those windows read only the "
            f"{span_text(span)} that exists (fewer events, so burn rates over them start low, and the "
            "baseline is absent until a full offset of history is behind it); going on"
        )
    return warnings


def check_reads(spec: Spec, server: LocalPrometheus, lo: float, hi: float, where: str) -> list[str]:
    """Fail (NoDataError) when no series matches any selector the spec's rules read, in its scope (the names can
    be there for another namespace or job); warn for each selector that matches nothing while others do."""
    reads = spec_reads(spec)
    span = prom_duration(max(60.0, hi - lo + 60))
    found = {r.selector for r in reads if server.query(f"count(last_over_time({r.selector}[{span}]))", hi).samples}
    if not found:
        raise no_data(spec, reads, where, f"between {rfc3339(lo)} and {rfc3339(hi)}")
    return missing_warnings(reads, found, where)


def series_names(server: LocalPrometheus, start: float, end: float) -> set[str]:
    """Metric names stored in the server between start and end."""
    return set(server.label_values("__name__", start, end))


def evaluate(
    spec: Spec, workdir: Path, *, data: Path | None = None, remote: str | None = None,
    remote_range: tuple[float, float] | None = None, variants: Sequence[str] | None = None,
    progress: Progress = stderr_progress, group_interval: float | None = None,
) -> Evaluation:  # fmt: skip
    """Load history, run the rules, evaluate every variant's alerts; the local Prometheus is stopped after.

    `group_interval` evaluates every group at that one interval instead of its own, as `promtool test rules`
    does (it runs all groups at the test's evaluation_interval): the setting that makes the two comparable.
    """
    chosen = variant_candidates(spec, variants)
    if group_interval is not None:
        chosen = {n: [replace(c, interval=group_interval) for c in cs] for n, cs in chosen.items()}
    workdir.mkdir(parents=True, exist_ok=True)
    server = LocalPrometheus(workdir=workdir / "prometheus", retention="100y",
                             extra_args=("--query.max-samples=200000000", "--query.lookback-delta=5m",
                                         "--query.timeout=30m"))  # fmt: skip
    began = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = now - since
        return now

    unique = {c.key: c for cands in chosen.values() for c in cands}
    # Alerts that read Prometheus' own ALERTS series (engine alerts, as a ticket or as a page's cause) come
    # second, after the ALERTS series of the first stage's firings are written where they can read them.
    # ALERTS holds what a deployment of the generated rules fires: every generated alert of the first stage
    # (evaluated even when its variant was not asked for), never the fixed-p99 straw man.
    second = [c for c in unique.values() if schema.ALERTS_SERIES in c.expr]
    deployed = [c for c in variant_candidates(spec, ["slokit"])["slokit"] if schema.ALERTS_SERIES not in c.expr]
    if group_interval is not None:
        deployed = [replace(c, interval=group_interval) for c in deployed]
    if second:
        unique.update({c.key: c for c in deployed if c.key not in unique})
    first = [c for c in unique.values() if schema.ALERTS_SERIES not in c.expr]
    readers = [c.expr for c in unique.values()] + [_p99_query(spec)]
    try:
        if remote is not None:
            assert remote_range is not None
            lo, hi = load_remote(remote, *remote_range, spec, server, workdir, progress)
            where = remote
        elif data is not None and data.is_dir():
            lo, hi = load_tsdb(data, server)
            where = str(data)
        elif data is not None:
            if not data.exists():
                raise InputError(f"{data}: no such file or directory")
            lo, hi = load_openmetrics(data, server, workdir, progress)
            where = str(data)
        else:
            raise InputError("give --data PATH (OpenMetrics file or TSDB directory) or --prometheus URL")
        server.start(timeout=300)
        if lo == float("inf"):
            raise NoDataError(f"no data: {where} holds no samples")
        names = series_names(server, lo, hi)
        warnings = check_history(spec, names, lo, hi, where)
        warnings[:0] = check_reads(spec, server, lo, hi, where)
        for warning in warnings:
            progress("warning: " + warning)
        start = lo + (-lo) % ALIGN
        end = hi - hi % 30
        mark = phase("load", began)
        progress(f"history {span_text(hi - lo)} from {lo:.0f} to {hi:.0f}, loaded in {phases['load']:.1f}s; "
                 f"evaluating rules from {start:.0f}")  # fmt: skip
        run_recording_rules(spec, server, start, end, workdir, progress, group_interval, readers)
        mark = phase("recording rules", mark)
        result = Evaluation(start=start, end=end, variants=chosen, warnings=warnings)
        for stage, candidates in enumerate((first, second)):
            if stage == 1 and candidates:
                fired = [(c, result.alerts[c.key]) for c in deployed]
                write_alerts_series(server, fired, start, end, workdir)
            for candidate in candidates:
                query = candidate if stage == 0 else replace(candidate, expr=alerts_query(candidate.expr))
                result.alerts[candidate.key] = evaluate_alert(server, query, start, end)
                done = len(result.alerts)
                if done % 20 == 0 or done == len(unique):
                    progress(f"alerts {done}/{len(unique)} evaluated ({time.monotonic() - mark:.1f}s)")
        mark = phase("alerts", mark)
        result.p99 = _p99_series(server, spec, start, end)
        phase("plot series", mark)
        result.phases = phases
        progress("timing: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()) +
                 f"; evaluation {time.monotonic() - began:.1f}s")  # fmt: skip
        return result
    finally:
        server.stop()


def _p99_series(server: LocalPrometheus, spec: Spec, start: float, end: float) -> dict[str, list[tuple[float, float]]]:
    """The recorded 5m p99 per model/class/slo at 1m, for the report's plots."""
    p99 = _p99_query(spec)
    series: dict[str, list[tuple[float, float]]] = {}
    t = start
    while t < end:
        upto = min(end, t + 9000 * 60)
        for sample in server.query_range(p99, t, upto, 60).samples:
            key = "/".join(sample.labels.get(k, "") for k in ("model", "class", "slo"))
            series.setdefault(key, []).extend(sample.points)
        t = upto + 60
    return series


def _p99_query(spec: Spec) -> str:
    return selector(
        schema.RECORD_LATENCY_QUANTILE, [eq(schema.RULE_LABEL_SERVICE, spec.service), eq("quantile", "0.99")]
    )
