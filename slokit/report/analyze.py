"""From binned event counts to the report's figures, as plain data (the report.json document).

Sources fill a `ReportInput`: for every (model, class, SLI) the events per time bin, per histogram bucket
(cumulative, `+Inf` last) and, for objectives, the good events (at or under the threshold). Every period figure is
a sum of those counts, so it is exact and event-weighted: attainment = good / total over the period, never an
average of ratios. Per-bin percentiles (tiers, consistency) use Prometheus's classic-histogram interpolation,
since that is all a bucketed histogram can say; decisions against thresholds count events, never interpolate.

Nothing here returns NaN: a figure that cannot be computed (no traffic, no record) is None, and the reason is a
note the renderers print ("no traffic for class batch on qwen").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from slokit.promql import histogram_quantile
from slokit.schema import Sli
from slokit.spec import PERCENTILES, TIER_NAMES, SloSpec, Spec
from slokit.units import format_duration

WORST_WINDOWS: Final = 5
REPORT_VERSION: Final = 1
# Traffic is counted from one SLI per class: TTFT and E2E observe once per request, TPOT once per request of two or
# more tokens; ITL observes once per output event, so a class with only an ITL SLO is counted in tokens.
TRAFFIC_SLIS: Final = (Sli.TTFT, Sli.E2E, Sli.TPOT, Sli.ITL)
COVERAGE_SLACK: Final = 300.0  # a first sample this close to the period's start covers it (Prometheus's lookback)
Floats = npt.NDArray[np.float64]


# ==============================================================================================================
# Input: what a source measured
# ==============================================================================================================
@dataclass(frozen=True)
class Key:
    """One indicator: a model, a class and an SLI."""

    model: str
    request_class: str
    sli: Sli

    def label(self) -> str:
        """`chat/ttft on llama-3-70b`."""
        return f"{self.request_class}/{self.sli.value} on {self.model}"


@dataclass
class Histogram:
    """Events per bin of one indicator. `counts[i, j]`: events in bin i at or under `bounds[j]` (+Inf last)."""

    bounds: tuple[float, ...]  # finite upper bounds, ascending
    counts: Floats  # shape (bins, len(bounds) + 1), cumulative per row
    # shape (bins,): events at or under the objective threshold; None without an objective, or when the source
    # cannot count them (the threshold is not a bucket boundary): then attainment and status are n/a
    good: Floats | None

    @property
    def total(self) -> Floats:
        """Events per bin."""
        result: Floats = self.counts[:, -1]
        return result


@dataclass(frozen=True)
class AlertEpisode:
    """One stretch of time an alert was firing (from Prometheus's `ALERTS` series)."""

    labels: Mapping[str, str]
    start: float
    end: float  # last firing sample seen


@dataclass(frozen=True)
class WindowRecords:
    """SLO-window figures read from the recording rules at the period's end (None: that record is absent)."""

    events_total: float | None
    events_good: float | None
    error_ratio: float | None
    budget_remaining: float | None
    history_start: float | None  # earliest raw sample inside the SLO window (hour precision), None: unknown


@dataclass
class ReportInput:
    """Everything a source measured over the period (start, end], binned by `step` seconds from `start`."""

    source: str  # "prometheus" or "probe"
    origin: str  # the URL or the CSV path
    start: float
    end: float
    step: float
    histograms: dict[Key, Histogram] = field(default_factory=dict)
    # Engine signals per model, one value per bin (NaN: no sample): queue, kv_cache, decode_tokens_per_second.
    signals: dict[str, dict[str, Floats]] = field(default_factory=dict)
    alerts: list[AlertEpisode] = field(default_factory=list)
    records: dict[Key, WindowRecords] = field(default_factory=dict)
    expected_decode: dict[str, float] = field(default_factory=dict)  # planner's tokens/s per engine at a full batch
    # The planner's decode step time (seconds) per engine at tabulated batches, per model: (batch, step) ascending.
    decode_curves: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # (model, class) pairs the source covers (a probe run: the one class it sent); None: every pair of the spec.
    scope: frozenset[tuple[str, str]] | None = None
    # Indicators the source cannot measure, with the reason (a probe's requests.csv has no ITL): n/a, not "no traffic".
    unmeasured: dict[Key, str] = field(default_factory=dict)
    history_start: float | None = None  # earliest raw sample of any latency series read (None: none, or unknown)

    @property
    def bins(self) -> int:
        """Number of time bins."""
        return max(1, math.ceil((self.end - self.start) / self.step - 1e-9))

    def when(self, t: float) -> str:
        """A time as the report prints it: UTC ISO-8601, or seconds from the start for a probe run."""
        return f"+{t - self.start:.0f}s" if self.source == "probe" else iso(t)

    def bin_starts(self) -> Floats:
        """Start time of every bin (unix seconds)."""
        return self.start + self.step * np.arange(self.bins, dtype=np.float64)


def choose_step(span: float, max_bins: int = 400) -> float:
    """A readable bin width for a span: the smallest of 1s ... 1d that keeps at most `max_bins` bins."""
    for step in (1, 5, 10, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400):
        if span / step <= max_bins:
            return float(step)
    return float(math.ceil(span / max_bins / 86400) * 86400)


def indicator_keys(spec: Spec) -> list[Key]:
    """Every (model, class, SLI) the spec declares, in spec order."""
    return [Key(model, rc.name, sli) for rc in spec.classes for sli in rc.slos for model in rc.models]


# ==============================================================================================================
# Small helpers: tiers, values, times, window lengths
# ==============================================================================================================
def _tier_of(value: float, slo: SloSpec, percentile: str) -> str:
    for tier in TIER_NAMES:
        limit = slo.tiers.tier(tier).get(percentile)
        if limit is not None and value <= limit:
            return tier
    return "beyond_critical"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def iso(t: float) -> str:
    """UTC ISO-8601 with seconds, e.g. 2026-12-04T13:00:00Z."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worst_window_seconds(span: float, step: float) -> float:
    """Length of the 'worst windows': 1h for 12h or more, a twelfth of shorter periods; a whole number of bins."""
    wanted = min(3600.0, max(step, span / 12))
    return max(step, math.floor(wanted / step) * step)


# ==============================================================================================================
# The analysis
# ==============================================================================================================
def analyze(spec: Spec, data: ReportInput) -> dict[str, Any]:
    """The whole report as plain data (report.json); every number is a finite float, an int or None."""
    notes = list(data.notes)
    starts = data.bin_starts()
    span = data.end - data.start
    if data.history_start is not None and data.history_start > data.start + COVERAGE_SLACK:
        covered = max(0.0, data.end - data.history_start)
        notes.append(
            f"history covers {_share_of(covered, span)} of the period: the earliest raw sample is at "
            f"{data.when(data.history_start)}, so period figures count events from then on"
        )
    keys = [k for k in indicator_keys(spec) if data.scope is None or (k.model, k.request_class) in data.scope]
    rules_loaded = any(r.error_ratio is not None for r in data.records.values())
    objectives: list[dict[str, Any]] = []
    indicators: list[dict[str, Any]] = []
    for key in keys:
        rc = spec.request_class(key.request_class)
        slo = rc.slos[key.sli]
        hist = data.histograms.get(key)
        total_events = float(hist.total.sum()) if hist is not None else 0.0
        if key not in data.unmeasured and (hist is None or total_events <= 0):
            notes.append(f"no traffic for class {key.request_class} ({key.sli.value}) on {key.model} in the period")
        indicators.append(_indicator(key, slo, hist, starts))
        if slo.objective is not None:
            objectives.append(_objective(spec, key, slo, hist, data, starts, notes, rules_loaded))
    traffic = _traffic(spec, data, keys, starts, notes)
    _explain_signals(data, objectives, notes)
    return {
        "slokit_report": REPORT_VERSION,
        "service": spec.service,
        "spec": spec.path,
        "source": data.source,
        "origin": data.origin,
        "period": {
            "from": data.when(data.start),
            "to": data.when(data.end),
            "from_unix": data.start,
            "to_unix": data.end,
            "seconds": span,
            "step_seconds": data.step,
            "slo_window_seconds": spec.window,
        },
        "objectives": objectives,
        "indicators": indicators,
        "traffic": traffic,
        "alerts": [_alert(data, a) for a in sorted(data.alerts, key=lambda a: (a.start, sorted(a.labels.items())))],
        "notes": notes,
    }


SIGNAL_NAMES: Final = {
    "queue_waiting_max": "queue",
    "kv_cache_usage_max": "KV cache",
    "requests_running_mean": "running batch",
    "decode_tokens_per_second": "decode tokens/s",
}


def _explain_signals(data: ReportInput, objectives: Sequence[Mapping[str, Any]], notes: list[str]) -> None:
    """One note per model whose worst windows show engine signals or planner figures as n/a, saying why."""
    windows: dict[str, list[Mapping[str, Any]]] = {}
    for o in objectives:
        windows.setdefault(o["model"], []).extend(w["signals"] for w in o["worst_windows"])
    for model, signals in windows.items():
        if not signals:
            continue
        if data.source == "probe":
            _note_once(notes, "worst windows: engine signals and planner figures are n/a for a probe run (it reads "
                       "no engine metrics)")  # fmt: skip
            continue
        missing = [name for field_name, name in SIGNAL_NAMES.items() if all(s[field_name] is None for s in signals)]
        if missing:
            notes.append(f"worst windows on {model}: {', '.join(missing)} n/a (no such engine series in the period)")
        if model not in data.decode_curves:
            notes.append(
                f"worst windows on {model}: the planner's decode figures are n/a (the spec names no GPU or preset "
                "the planner can model for it)"
            )


def _share_of(part: float, whole: float) -> str:
    """`2.0 of 28 days`, or `4.0 of 6 hours` for periods under a day."""
    if whole >= 86400:
        return f"{part / 86400:.1f} of {whole / 86400:g} days"
    return f"{part / 3600:.1f} of {whole / 3600:g} hours"


def _traffic(
    spec: Spec, data: ReportInput, keys: Sequence[Key], starts: Floats, notes: list[str]
) -> list[dict[str, Any]]:
    """Events per model and class, counted from one SLI: TTFT, else E2E, else TPOT (requests), else ITL (tokens)."""
    span = data.end - data.start
    out: list[dict[str, Any]] = []
    for model, class_name in dict.fromkeys((k.model, k.request_class) for k in keys):
        rc = spec.request_class(class_name)
        sli = next((s for s in TRAFFIC_SLIS if s in rc.slos and Key(model, class_name, s) in data.histograms), None)
        if sli is None:
            continue
        hist = data.histograms[Key(model, class_name, sli)]
        total = float(hist.total.sum())
        unit = "tokens" if sli is Sli.ITL else "requests"
        rate = total / span if span > 0 else None
        if unit == "tokens":
            notes.append(
                f"traffic of class {class_name} on {model} is counted in output tokens (ITL observations): the class "
                "has no TTFT, E2E or TPOT SLO to count requests by, so its requests are n/a"
            )
        out.append(
            {
                "model": model,
                "class": class_name,
                "counted_from": sli.value,
                "unit": unit,
                "events": total,
                "events_per_second": rate,
                "requests": total if unit == "requests" else None,
                "requests_per_second": rate if unit == "requests" else None,
                "timeline": {"bin_starts": [float(t) for t in starts], "events": [float(v) for v in hist.total]},
            }
        )
    return out


def _alert(data: ReportInput, episode: AlertEpisode) -> dict[str, Any]:
    labels = dict(episode.labels)
    return {
        "alertname": labels.get("alertname", ""),
        "severity": labels.get("severity", ""),
        "model": labels.get("model", ""),
        "class": labels.get("class", ""),
        "slo": labels.get("slo", ""),
        "start": data.when(episode.start),
        "end": data.when(episode.end),
        "start_unix": episode.start,
        "end_unix": episode.end,
        "duration_seconds": episode.end - episode.start,
    }


def _indicator(key: Key, slo: SloSpec, hist: Histogram | None, starts: Floats) -> dict[str, Any]:
    """Tier shares per percentile and p99/p50 consistency, from per-bin interpolated percentiles."""
    out: dict[str, Any] = {"model": key.model, "class": key.request_class, "slo": key.sli.value}
    percentiles = sorted(
        {p for tier in TIER_NAMES for p in slo.tiers.tier(tier)} | ({"p50", "p99"} if slo.consistency else set()),
        key=lambda p: PERCENTILES[p],
    )
    tiers: dict[str, Any] = {}
    timeline: dict[str, list[float | None]] = {}
    bins_with_traffic = 0
    if hist is not None:
        bins_with_traffic = int((hist.total > 0).sum())
        for p in percentiles:
            values = [histogram_quantile(PERCENTILES[p], hist.bounds, row) for row in hist.counts]
            timeline[p] = values
            named = any(p in slo.tiers.tier(t) for t in TIER_NAMES)
            if not named:
                continue
            counts = dict.fromkeys((*TIER_NAMES, "beyond_critical"), 0)
            for v in values:
                if v is not None:
                    counts[_tier_of(v, slo, p)] += 1
            tiers[p] = {name: (n / bins_with_traffic if bins_with_traffic else None) for name, n in counts.items()}
    out["bins_with_traffic"] = bins_with_traffic
    out["tiers"] = tiers
    out["percentiles"] = dict(timeline.items())
    if slo.consistency is not None:
        limit = slo.consistency.max_p99_over_p50
        ratios: list[float | None] = []
        for p50, p99 in zip(timeline.get("p50", []), timeline.get("p99", []), strict=True):
            ratios.append(p99 / p50 if p50 and p99 is not None else None)
        measured = [r for r in ratios if r is not None]
        period_ratio = None
        if hist is not None:
            summed = hist.counts.sum(axis=0)
            p50 = histogram_quantile(0.5, hist.bounds, summed)
            p99 = histogram_quantile(0.99, hist.bounds, summed)
            period_ratio = p99 / p50 if p50 and p99 is not None else None
        out["consistency"] = {
            "max_p99_over_p50": limit,
            "period_p99_over_p50": period_ratio,
            "met": None if period_ratio is None else period_ratio <= limit,
            "share_of_time_over_limit": (sum(r > limit for r in measured) / len(measured)) if measured else None,
            "timeline": ratios,
        }
    else:
        out["consistency"] = None
    out["bin_starts"] = [float(t) for t in starts] if hist is not None else []
    return out


def _objective(
    spec: Spec,
    key: Key,
    slo: SloSpec,
    hist: Histogram | None,
    data: ReportInput,
    starts: Floats,
    notes: list[str],
    rules_loaded: bool,
) -> dict[str, Any]:
    objective = slo.objective
    assert objective is not None
    budget = objective.error_budget
    measured = key not in data.unmeasured
    total: float | None = None  # None: the source cannot measure this indicator
    good: float | None = None  # None: the good events cannot be counted (or not measured)
    if measured:
        total = float(hist.total.sum()) if hist is not None else 0.0
        if hist is not None and hist.good is not None:
            good = float(hist.good.sum())
        elif total == 0:
            good = 0.0
    attainment = good / total if total and good is not None else None
    consumed = (total - good) / (total * budget) if total and good is not None and budget > 0 else None
    met = None if attainment is None else attainment >= objective.target_ratio
    unjudged = "no traffic" if total == 0 else "n/a"
    status = unjudged if met is None else ("met" if met else "missed")
    row: dict[str, Any] = {
        "model": key.model,
        "class": key.request_class,
        "slo": key.sli.value,
        "objective": objective.target_ratio,
        "threshold_seconds": objective.threshold,
        "events_total": total,
        "events_good": good,
        "attainment": attainment,
        "met": met,
        "status": status,
        "budget_consumed": consumed,
        "budget_remaining": None if consumed is None else 1.0 - consumed,
    }
    burn: list[float | None] = []
    if hist is not None and hist.good is not None and measured:
        for t, g in zip(hist.total, hist.good, strict=True):
            burn.append(float((t - g) / t / budget) if t > 0 and budget > 0 else None)
    row["burn_rate_timeline"] = {
        "bin_starts": [float(t) for t in starts] if burn else [],
        "burn_rate": burn,
        "events": [float(t) for t in hist.total] if burn and hist is not None else [],
    }
    row["worst_windows"] = _worst_windows(key, hist, data, budget) if hist is not None and measured else []
    row["slo_window"] = _slo_window(spec, key, data, notes, rules_loaded)
    return row


def _worst_windows(key: Key, hist: Histogram, data: ReportInput, budget: float) -> list[dict[str, Any]]:
    """The five windows with the highest error ratio (non-overlapping, ties: more bad events, then earlier)."""
    if hist.good is None:
        return []
    length = worst_window_seconds(data.end - data.start, data.step)
    width = max(1, round(length / data.step))
    total, good = hist.total, hist.good
    n = len(total)
    candidates: list[tuple[float, float, int]] = []
    for i in range(max(1, n - width + 1)):
        t = float(total[i : i + width].sum())
        if t <= 0:
            continue
        bad = t - float(good[i : i + width].sum())
        if bad <= 0:
            continue
        candidates.append((-(bad / t), -bad, i))
    candidates.sort()
    chosen: list[int] = []
    for _, _, i in candidates:
        if all(abs(i - j) >= width for j in chosen):
            chosen.append(i)
        if len(chosen) == WORST_WINDOWS:
            break
    out = []
    for i in chosen:
        sl = slice(i, min(n, i + width))
        t = float(total[sl].sum())
        g = float(good[sl].sum())
        start = data.start + i * data.step
        end = min(data.end, start + width * data.step)
        out.append(
            {
                "start": data.when(start),
                "start_unix": start,
                "end_unix": end,
                "events_total": t,
                "events_good": g,
                "error_ratio": (t - g) / t,
                "burn_rate": (t - g) / t / budget if budget > 0 else None,
                "signals": _signals_during(key.model, sl, data),
            }
        )
    return out


def _signals_during(model: str, sl: slice, data: ReportInput) -> dict[str, float | None]:
    def pick(name: str, how: str) -> float | None:
        values = data.signals.get(name, {}).get(model)
        if values is None:
            return None
        part = values[sl]
        part = part[np.isfinite(part)]
        if part.size == 0:
            return None
        return float(part.max() if how == "max" else part.mean())

    decode = pick("decode_tokens_per_second", "mean")
    running = pick("requests_running", "mean")
    curve = data.decode_curves.get(model)
    expected = expected_at_batch(curve, running) if curve and running is not None else None
    return {
        "queue_waiting_max": pick("queue_waiting", "max"),
        "kv_cache_usage_max": pick("kv_cache_usage", "max"),
        "requests_running_mean": running,
        "decode_tokens_per_second": decode,
        "expected_decode_tokens_per_second": expected,
        "expected_decode_tokens_per_second_full_batch": data.expected_decode.get(model),
        "decode_vs_expected": decode / expected if decode is not None and expected else None,
    }


def expected_at_batch(curve: Sequence[tuple[int, float]], batch: float) -> float | None:
    """The planner's decode tokens/s per engine at a (mean) running batch: batch / step time, the step time
    interpolated linearly between the tabulated batches (as the dashboards' and runbook's expected-decode queries
    do), at the nearest tabulated batch outside their range. None when nothing runs: a lightly loaded engine is compared
    with what it should do at its own batch, never with a full engine's throughput."""
    if batch <= 0 or not curve:
        return None
    b = min(max(batch, curve[0][0]), curve[-1][0])
    step = curve[0][1]
    for (b0, s0), (b1, s1) in itertools.pairwise(curve):
        if b0 <= b <= b1:
            step = s0 + (s1 - s0) * (b - b0) / (b1 - b0) if b1 > b0 else s0
            break
    # An engine idle part of the time runs fewer than one sequence on average: one sequence's step, that often.
    return batch / step


def _note_once(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _slo_window(spec: Spec, key: Key, data: ReportInput, notes: list[str], rules_loaded: bool) -> dict[str, Any] | None:
    window = f"{spec.window / 86400:g}d" if spec.window >= 86400 else format_duration(spec.window)
    records = data.records.get(key)
    if records is None:
        reason = (
            "a probe run has no recording rules over it (`slokit report --prometheus` reads them)"
            if data.source == "probe"
            else "the source has no recording rules"
        )
        _note_once(notes, f"SLO-window ({window}) figures are n/a: {reason}")
        return None
    history = None
    if records.history_start is not None:
        history = max(0.0, min(spec.window, data.end - records.history_start))
        if history < spec.window - 3600:
            notes.append(
                f"{key.label()}: history covers {history / 86400:.1f} of {spec.window / 86400:g} days "
                f"of the {window} SLO window"
            )
    attainment = None if records.error_ratio is None else 1.0 - records.error_ratio
    figures = {
        "events_total": _finite(records.events_total),
        "events_good": _finite(records.events_good),
        "attainment": _finite(attainment),
        "budget_remaining": _finite(records.budget_remaining),
    }
    if records.error_ratio is None:
        if rules_loaded:
            notes.append(
                f"{key.label()}: no {window} SLO-window records for it (no traffic in the window, or its series are "
                "not scraped): SLO-window figures n/a"
            )
        else:
            notes.append(f"{key.label()}: no {window} SLO-window records (are slokit's recording rules loaded?)")
    elif not math.isfinite(records.error_ratio) or figures["events_total"] == 0:
        notes.append(
            f"{key.label()}: no events in the {window} SLO window (its records divide 0 by 0): SLO-window "
            "attainment and budget n/a"
        )
    else:
        missing = [name for name, value in figures.items() if value is None]
        if missing:
            notes.append(f"{key.label()}: SLO-window {', '.join(missing)} n/a (record absent or not a number)")
    return {"window_seconds": spec.window, **figures, "history_seconds": history}
