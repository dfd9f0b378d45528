"""The engine model: how long one vLLM engine takes to prefill and decode, and what latency a load gives.

Two linear laws, the shape a roofline gives and a probe measures:

* decode step (= the ITL every running sequence sees) at batch b: `step(b) = step0 + step1 x b` (the weights read
  once per step, plus each running sequence's KV);
* prefill of a prompt of P tokens: `prefill(P) = prefill0 + prefill1 x P` (a fixed cost, plus compute per token).

Around them, continuous batching up to `max_num_seqs`: a request is admitted when a slot is free, its prefill rides
in the next step (chunked at `CHUNK_TOKENS`, so a long prompt stretches the steps of everyone decoding beside it),
and it then decodes one token per step. The latency of a request is therefore

* TTFT = queue wait + the rest of the step in flight (uniform over one step) + prefill(P);
* ITL = step(b) on a step without a prefill, step(b) + prefill(chunk) on a step carrying one; the share of steps
  carrying one is the admission rate x the step time.

The model is calibrated from the roofline planner (`from_plan`, before anything runs) or from `slokit probe`
levels measured on the real engine (`from_probe`, better); `capacity` then finds the load one engine carries
within the spec's objectives, and `EngineModelError` says when no batch meets them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from slokit.plan.roofline import PlanError, decode_step, plan_for_model, prefill
from slokit.schema import Sli
from slokit.spec import Model, RequestClass, Spec

CHUNK_TOKENS: Final = 2048  # vLLM's chunked-prefill token budget per step (online serving default)
UNIFORM_POINTS: Final = 16  # grid over the step in flight, for TTFT quantiles
MAX_WAIT_SECONDS: Final = 3600.0
FIT_POINTS: Final = 400  # at most this many points enter a Theil-Sen fit (80,000 pairs)
MARGIN: Final = 0.8
"""Share of each error budget an engine sized at `capacity` keeps spare: at 0.8 a 95% objective is sized for 99%
of requests within its threshold, so forecast error and the balancer's spread spend the rest."""


class EngineModelError(ValueError):
    """An engine model that cannot be built or cannot meet the SLO; the message says why and what would help."""


@dataclass(frozen=True)
class EngineModel:
    """One engine's step and prefill laws (seconds), its batch cap and the GPUs it occupies."""

    step0: float
    step1: float
    prefill0: float
    prefill1: float
    max_num_seqs: int
    gpus: int
    source: str  # "roofline" or "probe DIR"

    def step(self, batch: float) -> float:
        """Decode step seconds with `batch` sequences running (at least one)."""
        return self.step0 + self.step1 * max(1.0, batch)

    def prefill(self, prompt_tokens: float) -> float:
        """Prefill seconds for one prompt (the whole prompt, over however many chunks)."""
        return self.prefill0 + self.prefill1 * prompt_tokens

    def chunk(self, prompt_tokens: float) -> float:
        """What a prompt's prefill adds to the decode step it rides in: its tokens' compute, at most CHUNK_TOKENS
        of them (the fixed cost, reading the weights once, is the step's own)."""
        return self.prefill1 * min(prompt_tokens, CHUNK_TOKENS)

    def as_dict(self) -> dict[str, Any]:
        """The `autoscale.json` form."""
        return {
            "source": self.source,
            "decode_step_seconds": {"at_batch_1": self.step(1), "per_sequence": self.step1},
            "prefill_seconds": {"fixed": self.prefill0, "per_prompt_token": self.prefill1},
            "max_num_seqs": self.max_num_seqs,
            "gpus_per_engine": self.gpus,
        }


def from_plan(spec: Spec, model: Model) -> EngineModel:
    """The model the roofline planner gives (its expected step and prefill at the spec's workload context)."""
    try:
        result = plan_for_model(spec, model)
    except PlanError as exc:
        raise EngineModelError(f"model {model.name}: the planner cannot model it: {exc}") from None
    if result is None:
        raise EngineModelError(
            f"model {model.name}: no planner preset or GPU in the spec (set `preset:` and `gpu:`), and no --engine "
            "probe results to calibrate from"
        )
    inputs = result.inputs
    cap = max(1, result.batch_cap)
    one, top = decode_step(inputs, 1).expected, decode_step(inputs, max(2, cap)).expected
    slope = (top - one) / (max(2, cap) - 1)
    small, large = prefill(inputs, 128).expected, prefill(inputs, 4096).expected
    per_token = (large - small) / (4096 - 128)
    return EngineModel(
        step0=one - slope,
        step1=slope,
        prefill0=max(0.0, small - per_token * 128),
        prefill1=per_token,
        max_num_seqs=cap,
        gpus=inputs.gpus_per_engine,
        source="roofline",
    )


@dataclass(frozen=True)
class ProbeLevel:
    """What one closed-loop probe level measured (seconds; tokens as sent)."""

    concurrency: int
    itl_p50: float
    ttft: Sequence[float]  # each request's TTFT
    prompt_tokens: Sequence[int]  # each request's prompt tokens, in the same order


def fit_probe(levels: Sequence[ProbeLevel], max_num_seqs: int, gpus: int, source: str) -> EngineModel:
    """A robust line through the probe's levels at or below `max_num_seqs`: the median ITL against the batch gives
    the step law; at the lowest level (the least contention), each request's TTFT less half a step against its
    prompt tokens gives the prefill law."""
    usable = [lv for lv in levels if 1 <= lv.concurrency <= max_num_seqs and lv.itl_p50 > 0 and lv.ttft]
    if len(usable) < 2 or len({lv.concurrency for lv in usable}) < 2:
        raise EngineModelError(
            f"{source}: calibration needs closed-loop levels at two or more concurrencies up to max_num_seqs "
            f"({max_num_seqs}) with ITL and TTFT measured; run `slokit probe URL --spec SPEC --concurrency 1,2,4`"
        )
    step1, step0 = _line([float(lv.concurrency) for lv in usable], [lv.itl_p50 for lv in usable], floor=1e-6)
    xs: list[float] = []
    ys: list[float] = []
    lowest = min(lv.concurrency for lv in usable)
    for lv in (lv for lv in usable if lv.concurrency == lowest):
        half = 0.5 * (step0 + step1 * lv.concurrency)
        for ttft, tokens in zip(lv.ttft, lv.prompt_tokens, strict=True):
            if math.isfinite(ttft):
                xs.append(float(tokens))
                ys.append(ttft - half)
    prefill1, prefill0 = _line(xs, ys, floor=1e-6)
    return EngineModel(step0, step1, prefill0, prefill1, max_num_seqs, gpus, source)


def _line(xs: Sequence[float], ys: Sequence[float], *, floor: float) -> tuple[float, float]:
    """(slope, intercept) by Theil-Sen: the median of the pairwise slopes, then the median intercept. A probe's
    TTFTs carry outliers (a request that waited on a scheduler hiccup, a slow first request after a pause); least
    squares lets one of them tilt the prefill law by a factor, the medians ignore up to a quarter of them. The
    slope is at least 0 (a step or a prefill never gets faster with more work; a falling fit is noise): then the
    median of `ys` (at least `floor`) and no slope."""
    if len(xs) > FIT_POINTS:  # pairs grow with the square: an evenly spaced subsample keeps the fit bounded
        pairs = sorted(zip(xs, ys, strict=True))
        picked = [pairs[i * len(pairs) // FIT_POINTS] for i in range(FIT_POINTS)]
        xs, ys = [x for x, _ in picked], [y for _, y in picked]
    n = len(xs)
    slopes = sorted((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(n) for j in range(i + 1, n) if xs[j] != xs[i])
    slope = _median(slopes) if slopes else 0.0
    if slope <= 0:
        return 0.0, max(floor, _median(sorted(ys)))
    return slope, max(floor, _median(sorted(y - slope * x for x, y in zip(xs, ys, strict=True))))


def _median(ordered: Sequence[float]) -> float:
    """Median of a sorted, non-empty sample (the mean of the middle two for an even count)."""
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


# ==============================================================================================================
# Latency of a load
# ==============================================================================================================
@dataclass(frozen=True)
class Workload:
    """One class's token counts as a fixed, sorted sample (deterministic quantiles, fast shares)."""

    prompts: tuple[float, ...]  # sorted
    outputs: tuple[float, ...]  # sorted
    prompt_mean: float = field(init=False)
    output_mean: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_mean", sum(self.prompts) / len(self.prompts))
        object.__setattr__(self, "output_mean", sum(self.outputs) / len(self.outputs))

    def scaled(self, prompt_mean: float, output_mean: float) -> Workload:
        """The same shapes with other means (a history's measured means at one time)."""
        p, o = prompt_mean / self.prompt_mean, output_mean / self.output_mean
        if abs(p - 1) < 1e-9 and abs(o - 1) < 1e-9:
            return self
        return Workload(tuple(x * p for x in self.prompts), tuple(x * o for x in self.outputs))


@dataclass(frozen=True)
class Objectives:
    """A class's objective thresholds and targets (seconds; share within, 0-1), None where it has none."""

    thresholds: Mapping[Sli, float]
    targets: Mapping[Sli, float]

    @classmethod
    def of(cls, request_class: RequestClass) -> Objectives:
        """The objectives of one spec class."""
        thresholds: dict[Sli, float] = {}
        targets: dict[Sli, float] = {}
        for sli, slo in request_class.slos.items():
            if slo.objective is not None:
                thresholds[sli] = slo.objective.threshold
                targets[sli] = slo.objective.target_ratio
        return cls(thresholds, targets)


def share_at_most(sorted_values: Sequence[float], limit: float) -> float:
    """Share of a sorted sample at or under `limit`."""
    return bisect.bisect_right(sorted_values, limit) / len(sorted_values)


@dataclass(frozen=True)
class Shares:
    """Share of a cohort's events within each objective threshold (requests; ITL: tokens), and the share of its
    requests within every objective of the class (`request`).

    A request is within an ITL objective when its own tokens meet it (at most 1 - target of them over the
    threshold), as for its TTFT, TPOT and E2E; queueing hurts all of them together, so the worst one counts.
    """

    by_sli: Mapping[Sli, float]
    request: float


def shares(
    engine: EngineModel, work: Workload, goals: Objectives, batch: float, wait: float, admit_rate: float
) -> Shares:
    """Shares within each objective for requests arriving to an engine at `batch` running, after `wait` seconds in
    the queue, while it admits `admit_rate` requests/s (the prefills that stretch the steps)."""
    step = engine.step(batch)
    busy = min(0.95, admit_rate * engine.prefill(work.prompt_mean))  # share of engine time in prefill
    itl_mean = step / (1 - busy)
    out: dict[Sli, float] = {}
    requests: dict[Sli, float] = {}
    for sli, limit in goals.thresholds.items():
        if sli is Sli.TTFT:
            # prefill(P) <= limit - wait - half a step  <=>  P <= (that - prefill0) / prefill1
            room = limit - wait - 0.5 * step
            out[sli] = _prompts_within(engine, work, room)
        elif sli is Sli.ITL:
            with_prefill = min(1.0, admit_rate * step)
            plain = 1.0 if step <= limit else 0.0
            carried = _prompts_within(engine, work, limit - step, chunked=True)
            out[sli] = (1 - with_prefill) * plain + with_prefill * carried
            requests[sli] = _tokens_meet(1 - out[sli], 1 - goals.targets.get(sli, 1.0), work.output_mean)
        elif sli is Sli.TPOT:
            out[sli] = 1.0 if itl_mean <= limit else 0.0
        else:  # E2E: wait + prefill + output x ITL
            room = limit - wait - 0.5 * step - engine.prefill(work.prompt_mean)
            out[sli] = share_at_most(work.outputs, room / itl_mean) if room > 0 else 0.0
    return Shares(out, min({**out, **requests}.values(), default=1.0))


def _tokens_meet(slow: float, allowed: float, tokens: float) -> float:
    """Share of requests of `tokens` output tokens with at most `allowed` of them slow, when each is slow with
    probability `slow` (normal approximation of the binomial)."""
    if slow <= 0:
        return 1.0
    if slow >= 1:
        return 0.0
    spread = math.sqrt(slow * (1 - slow) / max(1.0, tokens))
    return 0.5 * (1 + math.erf((allowed - slow) / (spread * math.sqrt(2))))


def _prompts_within(engine: EngineModel, work: Workload, room: float, *, chunked: bool = False) -> float:
    """Share of the class's prompts whose prefill (or one chunk of it) fits in `room` seconds."""
    fixed = 0.0 if chunked else engine.prefill0
    if room < fixed:
        return 0.0
    if engine.prefill1 <= 0:
        return 1.0
    tokens = (room - fixed) / engine.prefill1
    if chunked and tokens >= CHUNK_TOKENS:
        return 1.0
    return share_at_most(work.prompts, tokens)


def steady_batch(engine: EngineModel, work: Workload, rate: float) -> float | None:
    """Running sequences at a steady arrival `rate` (Little's law over prefill and decode); None if the engine
    cannot keep up (the batch would pass max_num_seqs or prefill alone would fill the engine)."""
    busy = rate * engine.prefill(work.prompt_mean)
    if busy >= 0.95:
        return None
    batch = 1.0
    for _ in range(60):  # fixed point: b = rate x (prefill + output x step(b) / (1 - busy))
        nxt = rate * (engine.prefill(work.prompt_mean) + work.output_mean * engine.step(batch) / (1 - busy))
        if abs(nxt - batch) < 1e-6:
            break
        batch = nxt
        if batch > engine.max_num_seqs:
            return None
    return batch


def meets(engine: EngineModel, work: Workload, goals: Objectives, rate: float, margin: float = 0.0) -> bool:
    """Whether one engine at a steady `rate` keeps every objective (with `margin` of the error budget spare)."""
    batch = steady_batch(engine, work, rate)
    if batch is None:
        return False
    got = shares(engine, work, goals, batch, 0.0, rate)
    return all(got.by_sli[s] >= 1 - (1 - t) * (1 - margin) for s, t in goals.targets.items())


def capacity(engine: EngineModel, work: Workload, goals: Objectives, *, label: str, margin: float = MARGIN) -> float:
    """The largest steady request rate (req/s) one engine carries within every objective, keeping `margin` of each
    error budget spare; `EngineModelError` when not even a trickle meets them (the SLO is out of reach at any
    batch)."""
    tiny = 1e-4
    if not meets(engine, work, goals, tiny, margin):
        alone = shares(engine, work, goals, 1.0, 0.0, tiny)
        wanted = {s: 1 - (1 - t) * (1 - margin) for s, t in goals.targets.items()}
        missed = [
            f"{s.value} ({alone.by_sli[s]:.1%} within, sized for {wanted[s]:.1%})"
            for s in goals.targets
            if alone.by_sli[s] < wanted[s]
        ]
        raise EngineModelError(
            f"{label}: the engine model cannot meet the SLO at any batch: with one request running, decode step "
            f"{engine.step(1) * 1e3:.1f} ms and prefill {engine.prefill(work.prompt_mean) * 1e3:.0f} ms for a "
            f"{work.prompt_mean:.0f}-token prompt; missed: {', '.join(missed) or 'throughput'}. A faster GPU, more "
            "tensor parallelism, shorter prompts or a looser threshold would be needed"
        )
    low, high = tiny, 1.0
    while meets(engine, work, goals, high, margin) and high < 1e6:
        low, high = high, high * 2
    for _ in range(40):
        mid = (low + high) / 2
        if meets(engine, work, goals, mid, margin):
            low = mid
        else:
            high = mid
    return low


# ==============================================================================================================
# A closed loop below saturation (what a probe level measures): predicted percentiles
# ==============================================================================================================
def predict_closed_loop(engine: EngineModel, work: Workload, concurrency: int) -> dict[str, float]:
    """Predicted p50 and p95 TTFT and ITL of a closed loop of `concurrency` users below max_num_seqs (no queue)."""
    batch = float(min(concurrency, engine.max_num_seqs))
    step = engine.step(batch)
    # Each user's request prefills once per (output tokens) steps, so this share of steps carries a prefill.
    with_prefill = min(1.0, batch / max(1.0, work.output_mean))
    itls: list[tuple[float, float]] = [(step, 1 - with_prefill)]
    weight = with_prefill / len(work.prompts)
    itls.extend((step + engine.chunk(p), weight) for p in work.prompts)
    ttfts = [
        (engine.prefill(p) + (u + 0.5) / UNIFORM_POINTS * step, 1.0)
        for p in work.prompts
        for u in range(UNIFORM_POINTS)
    ]
    return {
        "ttft_p50": _weighted_quantile(ttfts, 0.5),
        "ttft_p95": _weighted_quantile(ttfts, 0.95),
        "itl_p50": _weighted_quantile(itls, 0.5),
        "itl_p95": _weighted_quantile(itls, 0.95),
    }


def _weighted_quantile(points: Sequence[tuple[float, float]], q: float) -> float:
    ordered = sorted(points)
    total = sum(w for _, w in ordered)
    seen = 0.0
    for value, w in ordered:
        seen += w
        if seen >= q * total - 1e-12:
            return value
    return ordered[-1][0]
