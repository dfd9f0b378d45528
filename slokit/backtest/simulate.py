"""Realistic raw history for a spec: what Prometheus would have scraped from its vLLM engines, minute by minute.

Traffic follows a weekday diurnal curve (quiet at 04:00 UTC, peak around 15:00) and a quieter weekend, with noise.
Load drives latency the way queueing does: the median of every SLI rises with utilisation, so at peak hours p99
climbs (for a p95 objective, above its threshold) while the objective still holds, which is where a fixed p99
threshold pages and the error budget does not. Engine gauges follow Little's law (running = rate x service time),
KV-cache usage follows running, and pods restart now and then (counters reset, a scrape or two missing).
Decode throughput follows the spec's roofline planner: an engine running b sequences emits b / step(b) tokens/s,
the planner's expected decode step at that batch (`slokit.plan.roofline`, capped at the batch its KV cache holds),
slowed by an incident's latency factor, and a wedged engine (an outage) emits a tenth of it; so the report's and
the runbook's "decode vs planner" reads about 1 in healthy hours and far lower in an outage. A model the planner
cannot model (no GPU or preset) emits OUTPUT_TOKENS per request.

Incidents of named kinds are injected on top:

* `outage`: the engine wedges; every request of the model ends far over every threshold (client deadline).
* `degradation`: latency creeps up linearly to 4x over the incident (a slow leak, a noisy neighbour).
* `overload`: peak traffic doubles; running hits max_num_seqs, requests wait, TTFT explodes, preemptions.
* `throttled`: one replica's GPU throttles; its latencies triple, the others are fine.
* `exporter_gone`: the model's metrics vanish (scrape target gone); counters restart from zero after.

Latency parameters are derived from the spec alone (objective thresholds and tiers), so any spec gets a history
that meets its SLO outside incidents. Everything is drawn from one seeded generator: same spec, seed and end time,
same bytes. Metric and label names come from the spec's source table in slokit/schema.py.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, TextIO

import numpy as np
import numpy.typing as npt

from slokit.backtest.incidents import Incident
from slokit.plan.roofline import PlanError, decode_step, plan_for_model
from slokit.schema import Sli
from slokit.spec import PERCENTILES, Model, Spec
from slokit.units import format_le

STEP: Final = 60  # scrape interval, seconds
KINDS: Final = ("outage", "degradation", "overload", "throttled", "exporter_gone")
DURATIONS: Final = {"outage": 1800, "degradation": 3 * 3600, "overload": 2700, "throttled": 2 * 3600,
                    "exporter_gone": 2400}  # fmt: skip
SIGMA: Final = 0.45  # log-normal spread of request latency
PEAK_UTILISATION: Final = 0.85
# Observations per request in each histogram (ITL: one per output event; the others once per request).
OBSERVATIONS: Final = {Sli.TTFT: 1, Sli.ITL: 60, Sli.TPOT: 1, Sli.E2E: 1}
SERVICE_SECONDS: Final = 8.0  # mean request duration, for Little's law (running = rate x duration)
OUTPUT_TOKENS: Final = 200  # mean output tokens per request
PROMPT_TOKENS: Final = 900
OUTAGE_DECODE: Final = 0.1  # a wedged engine's decode throughput, relative to the planner's
DECODE_NOISE: Final = 0.03  # log-normal minute-to-minute spread of decode throughput

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def _z(p: float) -> float:
    """The standard normal quantile (Acklam-free: bisection on erf is plenty for a handful of calls)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class LatencyModel:
    """Median latency of one (class, SLI) at the quietest and at the busiest normal load (log-normal, SIGMA)."""

    quiet: float
    peak: float


def latency_model(spec: Spec, class_name: str, sli: Sli) -> LatencyModel:
    """The busiest median that still meets every objective and acceptable tier with room to spare.

    Objective: at most 40% of the error budget slow at peak. Tiers: each acceptable (else target, else critical)
    percentile at most 90% of its value. The quiet median is half the peak one.
    """
    slo = spec.request_class(class_name).slos[sli]
    limits: list[float] = []
    if slo.objective is not None:
        slow = slo.objective.error_budget * 0.4
        limits.append(slo.objective.threshold * math.exp(-SIGMA * _z(1 - slow)))
    tiers = slo.tiers.acceptable or slo.tiers.target or slo.tiers.critical
    for pct, seconds in tiers.items():
        limits.append(0.9 * seconds * math.exp(-SIGMA * _z(PERCENTILES[pct])))
    peak = min(limits) if limits else 0.2
    return LatencyModel(quiet=0.5 * peak, peak=peak)


def diurnal(t: FloatArray) -> FloatArray:
    """Relative traffic (peak weekday ~1) at unix times `t`: a quiet night, a peak at 15:00 UTC, quieter weekends."""
    hour = (t % 86400) / 3600
    day = ((t // 86400) + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)
    curve = 0.15 + 0.85 * np.exp(-(((hour - 15) / 4.5) ** 2)) + 0.2 * np.exp(-(((hour - 9) / 2) ** 2))
    weekend = np.where(day >= 5, 0.6, 1.0)
    return np.asarray(curve * weekend / 1.05, dtype=np.float64)


def default_incidents(spec: Spec, start: float, days: int, rng: np.random.Generator) -> list[Incident]:
    """One incident a day after the first (which is quiet, so baselines have a day), cycling through KINDS."""
    models = [m.name for m in spec.models if spec.classes_on(m.name)]
    out: list[Incident] = []
    slots = range(1, days) if days > 1 else range(0, 1)
    for n, day in enumerate(slots):
        kind = KINDS[n % len(KINDS)]
        model = models[int(rng.integers(len(models)))]
        if kind == "overload":
            hour = 14.5  # at the daily peak: overload is what peak traffic does
        elif days == 1:
            hour = 16.0
        else:
            hour = float(rng.integers(2, 20)) + float(rng.integers(0, 4)) * 0.25
        begin = start + day * 86400 + hour * 3600
        out.append(Incident(f"{kind}-{model}-day{day + 1}", begin, begin + DURATIONS[kind], model, None, kind))
    return out


@dataclass
class _Series:
    """One series' samples: cumulative (counters, buckets) or instantaneous (gauges), NaN where not scraped."""

    labels: dict[str, str]
    values: FloatArray


@dataclass
class _Family:
    name: str  # family name (counters without _total)
    kind: str
    samples: list[tuple[str, _Series]] = field(default_factory=list)  # (sample name, series)


FamilyOf = Callable[[str, str], _Family]


@dataclass(frozen=True)
class History:
    """What `simulate` produced: the time range and the incidents injected."""

    start: float
    end: float
    incidents: tuple[Incident, ...]


@dataclass
class _Effects:
    """Per-minute incident effects on one model."""

    traffic: FloatArray  # traffic factor
    latency: FloatArray  # latency factor per replica (replicas x minutes)
    outage: BoolArray
    gone: BoolArray  # no series at all


def _effects(incidents: Sequence[Incident], model: str, times: FloatArray, replicas: int) -> _Effects:
    """What the incidents on `model` do, minute by minute."""
    n = len(times)
    out = _Effects(np.ones(n), np.ones((replicas, n)), np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_))
    for inc in incidents:
        if inc.model != model:
            continue
        inside = (times >= inc.start) & (times < inc.end)
        if inc.kind == "outage":
            out.outage |= inside
        elif inc.kind == "degradation":
            ramp = np.clip((times - inc.start) / (inc.end - inc.start), 0, 1)
            out.latency[:, inside] *= 1 + 3 * ramp[inside]
        elif inc.kind == "overload":
            out.traffic[inside] *= 2.0
        elif inc.kind == "throttled":
            out.latency[0, inside] *= 3.0
        elif inc.kind == "exporter_gone":
            out.gone |= inside
    return out


def decode_rate(spec: Spec, model: Model) -> Callable[[IntArray], FloatArray] | None:
    """Tokens/s of one engine of `model` at each running batch, as the planner expects it (None: the planner
    cannot model it). Above the batch the KV cache holds, the step is the one at that batch."""
    result = None
    with contextlib.suppress(PlanError):  # a model that does not fit: no expectation, as in the report
        result = plan_for_model(spec, model)
    if not result or result.batch_cap < 1:
        return None
    inputs, cap = result.inputs, result.batch_cap
    steps: dict[int, float] = {}

    def rate(running: IntArray) -> FloatArray:
        out = np.zeros(len(running))
        for i, b in enumerate(running.tolist()):
            if b > 0:
                if b not in steps:
                    steps[b] = decode_step(inputs, min(b, cap)).expected
                out[i] = b / steps[b]
        return out

    return rate


def simulate(
    spec: Spec, days: float, end: float, seed: int, incidents: Sequence[Incident] | None, out: TextIO,
    *, replicas: int = 2,
) -> History:  # fmt: skip
    """Write `days` of 1-minute raw history ending at `end` (unix seconds) as OpenMetrics text to `out`."""
    rng = np.random.default_rng(seed)
    start = end - days * 86400
    times = np.arange(start, end, STEP, dtype=np.float64)
    n = len(times)
    chosen = list(incidents) if incidents is not None else default_incidents(spec, start, max(1, int(days)), rng)
    metrics = spec.metrics
    families: dict[str, _Family] = {}

    def family(name: str, kind: str) -> _Family:
        return families.setdefault(name, _Family(name, kind))

    # Decode noise from its own generator, so the other series are the same draws whatever decode does.
    decode_rng = np.random.default_rng((seed, 15))
    for model in spec.models:
        classes = list(spec.classes_on(model.name))
        if not classes:
            continue
        planned = decode_rate(spec, model)
        effects = _effects(chosen, model.name, times, replicas)
        shape = diurnal(times) * effects.traffic
        # Peak weekday utilisation PEAK_UTILISATION; per replica, Little's law sets the request rate.
        peak_rps = PEAK_UTILISATION * model.max_num_seqs / SERVICE_SECONDS * replicas
        # Pod restarts: about one per replica every two days (counter reset, two missed scrapes).
        for replica in range(replicas):
            noise = np.exp(rng.normal(0, 0.08, n))
            utilisation = np.clip(shape * noise * PEAK_UTILISATION, 0, None)
            stress = np.clip((utilisation - 0.3) / (PEAK_UTILISATION - 0.3), 0, 1.02) ** 2
            over = np.clip(utilisation - 1.0, 0, None)  # beyond capacity: queueing
            present = ~effects.gone & (rng.random(n) > 0.002)  # missed scrapes
            restarts = rng.random(n) < 1 / (2 * 1440)
            for gap in np.flatnonzero(restarts):
                present[gap : gap + 2] = False
            back = np.concatenate((np.zeros(1, dtype=np.bool_), effects.gone[:-1] & ~effects.gone[1:]))
            epoch: IntArray = np.cumsum(restarts | back, dtype=np.int64)
            requests_per_min = np.zeros(n)
            for rc in classes:
                share = 1.0 / len(classes)
                rate = peak_rps / replicas * share * shape * noise  # req/s of this class on this replica
                count = rng.poisson(np.clip(rate, 0, None) * STEP).astype(np.float64)
                requests_per_min += count
                for sli in rc.slos:
                    lm = latency_model(spec, rc.name, sli)
                    median = lm.quiet + (lm.peak - lm.quiet) * stress
                    median = median * np.exp(rng.normal(0, 0.02, n)) * effects.latency[replica]
                    if sli in (Sli.TTFT, Sli.E2E):
                        median = median * (1 + 8 * over)
                    top = max(spec.buckets(sli))
                    median = np.where(effects.outage, 4 * top, median)
                    obs = count * OBSERVATIONS[sli]
                    _histogram(family, spec, sli, rc.name, model.name, replica, obs, median, present, epoch, rng)
            running = np.minimum(model.max_num_seqs, np.round(utilisation * model.max_num_seqs))
            running = np.where(effects.outage, model.max_num_seqs, running)
            waiting = np.where(over > 0, np.round(over * model.max_num_seqs), 0.0)
            waiting = np.where(effects.outage, 4 * model.max_num_seqs, waiting)
            kv = np.clip(0.9 * running / model.max_num_seqs + rng.normal(0, 0.01, n), 0, 1)
            base = _base_labels(spec, model.name, replica)
            for gauge, values in ((metrics.requests_running, running), (metrics.requests_waiting, waiting),
                                  (metrics.kv_cache_usage, kv)):  # fmt: skip
                if gauge is None:  # a signal the source does not export (TGI's KV cache)
                    continue
                name = gauge
                family(name, "gauge").samples.append((name, _Series(base, np.where(present, values, np.nan))))
            preempt = rng.poisson(np.where(over > 0, 30.0, 0.0)).astype(np.float64)
            if planned is not None:
                decoded = planned(running.astype(np.int64)) / effects.latency[replica]
                decoded = np.where(effects.outage, OUTAGE_DECODE * decoded, decoded)
                tokens = np.round(decoded * STEP * np.exp(decode_rng.normal(0, DECODE_NOISE, n)))
            else:
                tokens = requests_per_min * OUTPUT_TOKENS
            for counter, per_min in (
                (metrics.requests_finished, requests_per_min),
                (metrics.preemptions, preempt),
                (metrics.prompt_tokens, requests_per_min * PROMPT_TOKENS),
                (metrics.generation_tokens, tokens),
            ):
                if counter is None:
                    continue
                name = counter
                labels = dict(base)
                if name == metrics.requests_finished:
                    if metrics.class_label is not None:
                        # Per class: split evenly (the classes share the replica's traffic).
                        for rc in classes:
                            cl = {**labels, metrics.class_label: rc.name, metrics.finish_reason_label: "stop"}
                            part = np.round(per_min / len(classes))
                            _counter(family, name, cl, part, present, epoch)
                        continue
                    labels[metrics.finish_reason_label] = "stop"
                _counter(family, name, labels, per_min, present, epoch)
    _write(families, times, out)
    return History(float(start), float(end), tuple(chosen))


def _base_labels(spec: Spec, model: str, replica: int) -> dict[str, str]:
    metrics = spec.metrics
    # vLLM's engine label is "0" in every pod; replicas differ by pod and instance, as scraped in Kubernetes. The
    # model's deployment scope (`selector:`) is on every series, as the scrape config would put it there.
    scope = next((dict(m.selector) for m in spec.models if m.name == model), {})
    labels = {
        "job": "vllm",
        **scope,
        **({metrics.model_label: model} if metrics.model_label is not None else {}),
        metrics.engine_label: "0",
        "pod": f"{model}-{replica}",
        "instance": f"10.0.0.{replica + 10}:8000",
    }
    return labels


def _cumulative(per_min: FloatArray, epoch: npt.NDArray[np.int64]) -> FloatArray:
    """Counter values: running sums that restart from zero at each epoch (pod restart)."""
    total = np.cumsum(per_min)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(epoch)) + 1))
    offsets = np.zeros_like(total)
    for s in starts[1:]:
        offsets[s:] = total[s - 1]
    return np.asarray(total - offsets, dtype=np.float64)


def _counter(family: FamilyOf, name: str, labels: dict[str, str], per_min: FloatArray,
             present: npt.NDArray[np.bool_], epoch: npt.NDArray[np.int64]) -> None:  # fmt: skip
    values = np.where(present, _cumulative(per_min, epoch), np.nan)
    family(name.removesuffix("_total"), "counter").samples.append((name, _Series(labels, values)))


def _histogram(
    family: FamilyOf, spec: Spec, sli: Sli, class_name: str, model: str, replica: int, obs: FloatArray,
    median: FloatArray, present: npt.NDArray[np.bool_], epoch: npt.NDArray[np.int64], rng: np.random.Generator,
) -> None:  # fmt: skip
    """Bucket, count and sum series of one latency histogram; classes share a series when the source has no class."""
    metrics = spec.metrics
    rc = spec.request_class(class_name)
    source = spec.histogram(rc, sli)  # the histogram the SLO reads: the frontend's, the engine's or its own
    name = source.name
    bounds = spec.histogram_buckets(rc, sli)
    labels = _base_labels(spec, model, replica)
    if source.model_label != metrics.model_label:  # a custom histogram names the model its own way, or not at all
        if metrics.model_label is not None:
            del labels[metrics.model_label]
        if source.model_label is not None:
            labels[source.model_label] = model
    if source.class_label is not None:
        labels[source.class_label] = class_name
    # A custom histogram's own equality matchers (`metric: {selector: ...}`) are labels its series carry.
    labels.update({label: value for label, op, value in source.matchers if op == "="})
    fam = family(name, "histogram")
    # Probability of each bucket interval, then a multinomial draw per minute.
    log_m = np.log(np.maximum(median, 1e-6))
    cdf = np.stack([0.5 * (1 + _erf((math.log(b) - log_m) / (SIGMA * math.sqrt(2)))) for b in bounds])
    probs = np.diff(np.vstack([np.zeros(len(obs)), cdf, np.ones(len(obs))]), axis=0).clip(0, 1)
    probs = probs / probs.sum(axis=0)
    counts = np.stack([rng.multinomial(int(k), probs[:, i]) for i, k in enumerate(obs)], axis=1).astype(np.float64)
    cumulative = np.cumsum(counts, axis=0)  # per bound (le), +Inf last
    sums = obs * median * math.exp(SIGMA**2 / 2)
    for i, bound in enumerate([*bounds, math.inf]):
        le = "+Inf" if math.isinf(bound) else format_le(round(bound / source.scale, 9))
        values = np.where(present, _cumulative(cumulative[i], epoch), np.nan)
        _merge(fam, name + "_bucket", {**labels, "le": le}, values)
    _merge(fam, name + "_count", labels, np.where(present, _cumulative(cumulative[-1], epoch), np.nan))
    _merge(fam, name + "_sum", labels, np.where(present, _cumulative(sums, epoch), np.nan))


def _merge(fam: _Family, sample: str, labels: dict[str, str], values: FloatArray) -> None:
    """Add a series, or add to it when classes share one (vLLM's metrics have no class label)."""
    for name, series in fam.samples:
        if name == sample and series.labels == labels:
            series.values = series.values + values
            return
    fam.samples.append((sample, _Series(labels, values)))


def _erf(x: FloatArray) -> FloatArray:
    """Vectorised erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7: far below a bucket count's resolution)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1 / (1 + 0.3275911 * a)
    y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(
        -a * a
    )
    return np.asarray(sign * y, dtype=np.float64)


def _label_text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _lines(families: dict[str, _Family], times: FloatArray) -> Iterator[str]:
    stamps = [f"{int(t)}" for t in times]
    for fam in families.values():
        yield f"# TYPE {fam.name} {fam.kind}\n"
        for sample, series in fam.samples:
            head = sample + _label_text(series.labels) + " "
            for value, stamp in zip(series.values.tolist(), stamps, strict=True):
                if value == value:  # not NaN: scraped
                    yield f"{head}{value:.17g} {stamp}\n"


def _write(families: dict[str, _Family], times: FloatArray, out: TextIO) -> None:
    buffer: list[str] = []
    for line in _lines(families, times):
        buffer.append(line)
        if len(buffer) >= 50000:
            out.write("".join(buffer))
            buffer.clear()
    out.write("".join(buffer))
    out.write("# EOF\n")
