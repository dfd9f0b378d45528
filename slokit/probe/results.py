"""Judge load levels against a class's SLOs, summarise them, and write requests CSV, JSON and a plot.

Formulas (published, because tools disagree; see docs/probe.md):

* TTFT = first content event - send (role-only chunks are not content); E2E = last content event - send (never
  the trailing usage chunk). Both are also reported from the scheduled time (`*_from_scheduled`), which is what
  SLO checks use by default, so a client that could not keep up cannot hide queueing.
* ITL = every gap between consecutive content events, pooled over requests (one observation per server output
  event, like vLLM's `inter_token_latency_seconds`). TPOT = (last - first content) / (output tokens - 1) per
  request, with output tokens from the server's usage (else one per content event).
* Percentiles are linear-interpolated (numpy's default) over successful measured requests.

A level passes when every constraint holds:

* objective: at least `percentile`% of measured requests (failed ones count as misses) are at or under the
  objective threshold;
* acceptable tier: each percentile named in the tier is at or under its value;
* consistency: p99 / p50 at most the spec's bound;
* errors: the failed share at most `max_error_rate`.

Goodput is the rate of measured requests that succeeded and met every objective threshold.

Rates (requests, goodput, output tokens per second) count the measured successes that ended inside a run's window
(see `_window`): from the end of the warm-up to the last measured send, so that they read the steady state.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from slokit.probe.client import CONNECT
from slokit.probe.load import LevelRun, Load, RequestRecord
from slokit.schema import Sli
from slokit.spec import PERCENTILES, RequestClass
from slokit.units import format_duration

Basis = Literal["scheduled", "sent"]
ConstraintKind = Literal["objective", "tier", "consistency", "errors"]
METRICS = ("ttft", "ttft_from_scheduled", "itl", "tpot", "e2e", "e2e_from_scheduled", "dispatch_lag")
REPORTED_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True)
class Constraint:
    """One pass/fail condition of a level."""

    key: str  # stable id, e.g. ttft.objective, itl.acceptable.p95, e2e.consistency, errors
    kind: ConstraintKind
    sli: Sli | None
    limit: float  # seconds (objective threshold, tier value), a ratio (consistency) or a share (errors)
    percentile: float | None = None  # 95.0 for objective p95 or tier p95

    def describe(self) -> str:
        """`ttft p95 <= 500ms (objective)`."""
        if self.kind == "errors":
            return f"failed requests <= {self.limit:.1%}"
        assert self.sli is not None
        if self.kind == "consistency":
            return f"{self.sli.value} p99/p50 <= {self.limit:g}"
        pct = f"p{self.percentile:g}"
        if self.kind == "objective":
            return f"{self.percentile:g}% of {self.sli.value} within {format_duration(self.limit)} (objective)"
        return f"{self.sli.value} {pct} <= {format_duration(self.limit)} (acceptable tier)"


@dataclass(frozen=True)
class Criteria:
    """What a level must meet, from one request class of a spec."""

    class_name: str
    constraints: tuple[Constraint, ...]
    basis: Basis = "scheduled"

    @staticmethod
    def from_class(
        request_class: RequestClass, *, max_error_rate: float = 0.01, basis: Basis = "scheduled"
    ) -> Criteria:
        """Objective, acceptable-tier and consistency constraints of every SLO of the class, plus errors."""
        constraints: list[Constraint] = []
        for sli, slo in request_class.slos.items():
            if slo.objective is not None:
                constraints.append(
                    Constraint(
                        f"{sli.value}.objective", "objective", sli, slo.objective.threshold, slo.objective.percentile
                    )
                )
            for pct_name, seconds in slo.tiers.acceptable.items():
                constraints.append(
                    Constraint(f"{sli.value}.acceptable.{pct_name}", "tier", sli, seconds, PERCENTILES[pct_name] * 100)
                )
            if slo.consistency is not None:
                constraints.append(
                    Constraint(f"{sli.value}.consistency", "consistency", sli, slo.consistency.max_p99_over_p50)
                )
        constraints.append(Constraint("errors", "errors", None, max_error_rate))
        return Criteria(request_class.name, tuple(constraints), basis)

    def objective_thresholds(self) -> dict[Sli, float]:
        """SLI -> objective threshold (what a request must meet to count towards goodput)."""
        return {c.sli: c.limit for c in self.constraints if c.kind == "objective" and c.sli is not None}


@dataclass(frozen=True)
class Check:
    """A constraint's outcome at one level. `margin` > 0 means violated (normalised: 0.2 = 20% over)."""

    constraint: Constraint
    value: float
    passed: bool
    margin: float

    def to_json(self) -> dict[str, Any]:
        c = self.constraint
        return {
            "key": c.key,
            "kind": c.kind,
            "slo": c.sli.value if c.sli else None,
            "percentile": c.percentile,
            "limit": c.limit,
            "value": _finite(self.value),
            "passed": self.passed,
            "margin": _finite(round(self.margin, 6)),
            "description": c.describe(),
        }


def binding_check(checks: Iterable[Check]) -> Check | None:
    """The failed check that binds: the worst over its limit among those measured, else any failed one.

    Measured means a finite value: with no successful request every latency percentile is NaN (margin inf) and
    would otherwise outrank the error-rate check that actually explains the failure.
    """
    failed = [check for check in checks if not check.passed]
    measured = [check for check in failed if math.isfinite(check.value)]
    return max(measured or failed, key=lambda c: c.margin, default=None)


def unreachable(levels: Iterable[LevelSummary]) -> str | None:
    """Why no connection opened (`connection refused at HOST:PORT`) when every measured request failed to connect.

    None when any request connected: then the server is there and the per-reason counts tell the story.
    """
    details: list[str] = []
    for level in levels:
        for record in level.records():
            if record.ok or record.reason != CONNECT:
                return None
            details.append(record.detail)
    return Counter(details).most_common(1)[0][0] if details else None


@dataclass(frozen=True)
class Distribution:
    """Percentiles of one metric at one level (seconds)."""

    count: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    @property
    def p99_over_p50(self) -> float:
        """Tail spread; NaN when p50 is 0 or missing."""
        return self.p99 / self.p50 if self.p50 > 0 else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": _finite(self.mean),
            "p50": _finite(self.p50),
            "p90": _finite(self.p90),
            "p95": _finite(self.p95),
            "p99": _finite(self.p99),
            "max": _finite(self.max),
            "p99_over_p50": _finite(self.p99_over_p50),
        }


def distribution(values: Iterable[float]) -> Distribution:
    """Percentiles of the finite values (all NaN when there are none)."""
    array = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if array.size == 0:
        return Distribution(0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(array, REPORTED_PERCENTILES))
    return Distribution(int(array.size), float(array.mean()), p50, p90, p95, p99, float(array.max()))


def _percentile(values: Sequence[float], pct: float) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan
    return float(np.percentile(np.asarray(finite, dtype=float), pct))


@dataclass
class LevelSummary:
    """Everything measured at one load level (all its runs pooled) and the verdict."""

    load: Load
    runs: list[LevelRun]
    sent: int
    succeeded: int
    failures: dict[str, int]
    duration: float
    request_rate: float
    output_tokens_per_s: float
    goodput: float
    metrics: dict[str, Distribution]
    checks: list[Check] = field(default_factory=list)
    coalesced_share: float = 0.0  # content events read together with the previous one (either cause)
    server_burst_share: float = 0.0  # ... of them, those the server sent together (the client was keeping up)
    rate_requests: int = 0  # measured successes that ended inside the rate window (what the rates count)

    @property
    def client_behind_share(self) -> float:
        """Content events read together with the previous one because this client was busy."""
        return max(0.0, self.coalesced_share - self.server_burst_share)

    @property
    def failed(self) -> int:
        """Measured requests that failed."""
        return sum(self.failures.values())

    @property
    def passed(self) -> bool:
        """Whether every constraint held (a level with no successful request never passes)."""
        return self.succeeded > 0 and all(check.passed for check in self.checks)

    @property
    def margin(self) -> float:
        """Largest normalised violation (negative: every constraint holds with room)."""
        if self.succeeded == 0:
            return math.inf
        return max((check.margin for check in self.checks), default=-math.inf)

    def worst_check(self) -> Check | None:
        """The check that binds the level: the measured failure worst over its limit, else the closest to failing.

        A latency check at a level where no request succeeded has nothing to measure (its value is NaN), so it
        binds only when no measured check failed; otherwise the error rate, which did fail, would be hidden
        behind "ttft p50 n/a".
        """
        return binding_check(self.checks) or max(self.checks, key=lambda c: c.margin, default=None)

    def records(self) -> list[RequestRecord]:
        """Measured records of every run."""
        return [record for run in self.runs for record in run.measured]

    def to_json(self) -> dict[str, Any]:
        return {
            "load": {"kind": self.load.kind, "value": self.load.value, "burstiness": self.load.burstiness},
            "runs": len(self.runs),
            "requests": self.sent,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "failures": dict(sorted(self.failures.items())),
            "duration_s": round(self.duration, 6),
            "rate_requests": self.rate_requests,
            "request_rate": _finite(self.request_rate),
            "output_tokens_per_s": _finite(self.output_tokens_per_s),
            "goodput_rps": _finite(self.goodput),
            "stopped_by": sorted({run.stopped_by for run in self.runs}),
            "coalesced_share": round(self.coalesced_share, 6),
            "server_burst_share": round(self.server_burst_share, 6),
            "client_coalesced_share": round(self.client_behind_share, 6),
            "latency": {name: dist.to_json() for name, dist in self.metrics.items()},
            "checks": [check.to_json() for check in self.checks],
            "passed": self.passed,
        }


def _sli_values(records: Sequence[RequestRecord], sli: Sli, basis: Basis) -> list[float]:
    if sli is Sli.TTFT:
        return [r.ttft_from_scheduled if basis == "scheduled" else r.ttft for r in records]
    if sli is Sli.E2E:
        return [r.e2e_from_scheduled if basis == "scheduled" else r.e2e for r in records]
    if sli is Sli.TPOT:
        return [r.tpot for r in records]
    return [gap for r in records for gap in r.itls]


def _request_meets(record: RequestRecord, thresholds: Mapping[Sli, float], basis: Basis) -> bool:
    for sli, limit in thresholds.items():
        if sli is Sli.ITL:
            gaps = record.itls
            value = sum(gaps) / len(gaps) if gaps else 0.0
        else:
            values = _sli_values([record], sli, basis)
            value = values[0] if values else math.nan
        if math.isnan(value) and sli is Sli.TPOT:
            continue  # one-token answers have no TPOT
        if not value <= limit:
            return False
    return True


def summarize(load: Load, runs: Sequence[LevelRun], criteria: Criteria | None) -> LevelSummary:
    """Pool the runs of one level, compute its distributions and judge it against `criteria`."""
    records = [record for run in runs for record in run.measured]
    ok = [r for r in records if r.ok]
    failures = Counter(r.reason for r in records if not r.ok)
    windows = [_window(run) for run in runs]
    duration = sum(end - start for start, end in windows)
    counted = [r for run, (start, end) in zip(runs, windows, strict=True) for r in run.measured
               if r.ok and start < r.t_done <= end]  # fmt: skip
    rate = len(counted) / duration if duration > 0 else math.nan
    tokens = sum(r.output_tokens or 0 for r in counted)
    metrics = {
        "ttft": distribution(r.ttft for r in ok),
        "ttft_from_scheduled": distribution(r.ttft_from_scheduled for r in ok),
        "itl": distribution(gap for r in ok for gap in r.itls),
        "tpot": distribution(r.tpot for r in ok),
        "e2e": distribution(r.e2e for r in ok),
        "e2e_from_scheduled": distribution(r.e2e_from_scheduled for r in ok),
        "dispatch_lag": distribution(r.dispatch_lag for r in records),
    }
    events = sum(len(r.content_times) for r in ok)
    coalesced = sum(r.coalesced for r in ok) / events if events else 0.0
    bursts = sum(min(r.server_bursts, r.coalesced) for r in ok) / events if events else 0.0
    goodput = math.nan
    checks: list[Check] = []
    if criteria is not None:
        thresholds = criteria.objective_thresholds()
        good = sum(1 for r in counted if _request_meets(r, thresholds, criteria.basis))
        goodput = good / duration if duration > 0 else math.nan
        checks = [_check(c, records, ok, criteria.basis) for c in criteria.constraints]
    return LevelSummary(
        load=load,
        runs=list(runs),
        sent=len(records),
        succeeded=len(ok),
        failures=dict(failures),
        duration=duration,
        request_rate=rate,
        output_tokens_per_s=tokens / duration if duration > 0 else math.nan,
        goodput=goodput,
        metrics=metrics,
        checks=checks,
        coalesced_share=coalesced,
        server_burst_share=bursts,
        rate_requests=len(counted),
    )


def _window(run: LevelRun) -> tuple[float, float]:
    """The (start, end] interval over which a run's rates are counted (perf_counter s; empty when start >= end).

    It opens when the warm-up has really ended: at the last warm-up request's end (until then warm-up requests
    still hold server slots, and their completions are not counted), or at the first measured send when that is
    later. It closes at the last measured send, or rather at the completion just before it (a kernel stamp,
    where the send is stamped by the client and late when the client is busy): until then every user of a
    closed loop is busy and an open loop's arrivals still come, so the server runs at the level's load;
    afterwards the load drains away. Both ends are completions in a saturated closed loop (a user sends the
    moment its previous request ends), so the completions counted inside over the window's length is the
    server's steady-state rate, without a ramp at either end. When that window holds no measured success (a
    level shorter than one round of its users), it closes at the last measured success instead.
    """
    records = run.measured
    sends = [r.t_send for r in records if math.isfinite(r.t_send)]
    ends = [r.t_done for r in records if r.ok and math.isfinite(r.t_done)]
    if not sends or not ends:
        return (0.0, 0.0)
    warmup_ends = [r.t_done for r in run.records if r.warmup and math.isfinite(r.t_done)]
    start = max(min(sends), max(warmup_ends, default=-math.inf))
    last_send = max(sends)
    # The completion that freed the last user (kernel-stamped, unlike the send that followed it).
    end = max((r.t_done for r in run.records if r.t_done <= last_send), default=last_send)
    if not any(start < t <= end for t in ends):
        end = max(ends)
    if not any(start < t <= end for t in ends):  # every success ended before the warm-up did
        start = min(sends)
    return (start, end) if end > start else (0.0, 0.0)


def _check(
    constraint: Constraint, records: Sequence[RequestRecord], ok: Sequence[RequestRecord], basis: Basis
) -> Check:
    if constraint.kind == "errors":
        share = (len(records) - len(ok)) / len(records) if records else 1.0
        margin = (share - constraint.limit) / constraint.limit if constraint.limit > 0 else (1.0 if share > 0 else -1.0)
        return Check(constraint, share, share <= constraint.limit, margin)
    assert constraint.sli is not None
    sli = constraint.sli
    if constraint.kind == "objective":
        assert constraint.percentile is not None
        target = constraint.percentile / 100.0
        if sli is Sli.ITL:
            gaps = _sli_values(ok, sli, basis)
            failed_events = len(records) - len(ok)  # a failed request counts as one bad event
            total = len(gaps) + failed_events
            good = sum(1 for g in gaps if g <= constraint.limit)
        else:
            values = _sli_values(ok, sli, basis)
            total = len(records)
            good = sum(1 for v in values if v <= constraint.limit or (math.isnan(v) and sli is Sli.TPOT))
        attained = good / total if total else 0.0
        budget = max(1.0 - target, 1e-9)
        return Check(constraint, attained, attained >= target, (target - attained) / budget)
    values = _sli_values(ok, sli, basis)
    if constraint.kind == "consistency":
        p50, p99 = _percentile(values, 50), _percentile(values, 99)
        ratio = p99 / p50 if p50 > 0 else math.inf
        return Check(constraint, ratio, ratio <= constraint.limit, ratio / constraint.limit - 1.0)
    assert constraint.percentile is not None
    value = _percentile(values, constraint.percentile)
    if math.isnan(value):
        return Check(constraint, value, False, math.inf)
    return Check(constraint, value, value <= constraint.limit, value / constraint.limit - 1.0)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ==============================================================================================================
# Files
# ==============================================================================================================
def requests_frame(levels: Sequence[LevelSummary]) -> Any:
    """One row per request of every level (warm-up included, flagged), times relative to the run start."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for level_index, level in enumerate(levels):
        for run_index, run in enumerate(level.runs):
            for r in run.records:
                if math.isnan(r.t_sched):
                    continue  # never dispatched (the level stopped first)
                gaps = r.itls
                rows.append(
                    {
                        "level": level_index,
                        "load_kind": level.load.kind,
                        "load": level.load.value,
                        "run": run_index,
                        "request": r.index,
                        "warmup": r.warmup,
                        "ok": r.ok,
                        "reason": r.reason,
                        "http_status": r.http_status,
                        "response_id": r.response_id,
                        "t_sched": r.t_sched - run.t_start,
                        "t_send": r.t_send - run.t_start,
                        "t_first_byte": r.t_first_byte - run.t_start,
                        "t_first_content": r.t_first_content - run.t_start,
                        "t_last_content": r.t_last_content - run.t_start,
                        "t_done": r.t_done - run.t_start,
                        "ttft": r.ttft,
                        "ttft_from_scheduled": r.ttft_from_scheduled,
                        "tpot": r.tpot,
                        "itl_mean": sum(gaps) / len(gaps) if gaps else math.nan,
                        "itl_max": max(gaps) if gaps else math.nan,
                        "e2e": r.e2e,
                        "e2e_from_scheduled": r.e2e_from_scheduled,
                        "dispatch_lag": r.dispatch_lag,
                        "connect_time": r.connect_time,
                        "target_prompt_tokens": r.target_prompt_tokens,
                        "target_output_tokens": r.target_output_tokens,
                        "prompt_tokens": r.prompt_tokens,
                        "output_tokens": r.output_tokens,
                        "tokens_source": r.tokens_source,
                        "content_events": len(r.content_times),
                        "coalesced_events": r.coalesced,
                        "server_burst_events": r.server_bursts,
                        "finish_reason": r.finish_reason,
                        "detail": r.detail,
                    }
                )
    return pd.DataFrame(rows)


def write_outputs(
    directory: Path, document: Mapping[str, Any], levels: Sequence[LevelSummary], criteria: Criteria | None
) -> list[Path]:
    """Write requests.csv, probe.json and probe.png into `directory`; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / "requests.csv"
    requests_frame(levels).to_csv(csv_path, index=False)
    json_path = directory / "probe.json"
    json_path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    png_path = directory / "probe.png"
    plot(png_path, levels, criteria)
    return [csv_path, json_path, png_path]


def plot(path: Path, levels: Sequence[LevelSummary], criteria: Criteria | None) -> None:
    """Percentiles of TTFT, ITL, TPOT and E2E against load, with the SLO limits as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    basis = criteria.basis if criteria else "scheduled"
    names = {
        "ttft": "ttft_from_scheduled" if basis == "scheduled" else "ttft",
        "itl": "itl",
        "tpot": "tpot",
        "e2e": "e2e_from_scheduled" if basis == "scheduled" else "e2e",
    }
    ordered = sorted(levels, key=lambda level: level.load.value)
    xs = [level.load.value for level in ordered]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    for ax, (sli_name, metric) in zip(axes.flat, names.items(), strict=True):
        for pct, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ys = [getattr(level.metrics[metric], pct) * 1000 for level in ordered]
            ax.plot(xs, ys, style, marker="o", label=pct)
        if criteria is not None:
            lines: dict[float, list[str]] = {}
            for c in criteria.constraints:
                if c.sli is not None and c.sli.value == sli_name and c.kind in ("objective", "tier"):
                    ax.axhline(c.limit * 1000, color="red" if c.kind == "objective" else "orange", linewidth=1)
                    lines.setdefault(c.limit, []).append(c.key.split(".", 1)[1])
            for limit, names_at in lines.items():
                ax.annotate(", ".join(names_at), (xs[0] if xs else 0, limit * 1000), fontsize=7, color="red")
        for level in ordered:
            if level.checks:
                ax.axvline(level.load.value, color="green" if level.passed else "red", alpha=0.08, linewidth=6)
        ax.set_title(f"{sli_name.upper()} ({metric})")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    kind = ordered[0].load.kind if ordered else "concurrency"
    for ax in axes[-1]:
        ax.set_xlabel("concurrent users" if kind == "concurrency" else "requests/s")
    figure.suptitle("slokit probe: latency percentiles against load (red: objective, orange: acceptable tier)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
