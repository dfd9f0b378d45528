"""Replay one model's traffic through a pool of engines that a policy scales, in fixed ticks.

Each tick (`Config.tick` seconds): arrivals drawn (Poisson, one seeded draw shared by every policy) from the
history's rate; the load balancer's spread splits them over two halves of the pool, one getting (1 + spread) / 2
of the traffic and the other the rest (a least-loaded balancer has spread near 0, round robin over uneven requests
more); in each half, per engine, a waiting queue and continuous batching up to max_num_seqs: completions at the
rate the engine model's decode step allows, admissions into the freed slots, a queue wait read off the backlog by
Little's law. Each arriving cohort is judged against every objective of its class by the engine model
(`engine.shares`). Pods the policy adds start serving `Config.pod_start` seconds later, and cost GPU time from the
moment they are asked for; pods it removes stop at once (their in-flight requests finish, a drained shutdown).

The model is a fluid one: it tracks means per engine, not each request, so a day of 50 req/s replays in about a
second per policy. What it leaves out is said in docs/autoscale.md.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np

from slokit.autoscale.engine import EngineModel, Objectives, Workload, shares
from slokit.autoscale.history import ClassTraffic
from slokit.schema import Sli

MAX_WAIT: Final = 3600.0
FIRST_DECISION: Final = 60.0


@dataclass(frozen=True)
class Config:
    """Replay settings shared by every policy."""

    tick: float = 5.0
    pod_start: float = 100.0  # seconds from asking for a pod to its engine serving
    spread: float = 0.1  # load balancer imbalance: one half of the pool gets (1 + spread) / 2 of the traffic
    seed: int = 1


@dataclass
class ClassLoad:
    """One class as the replay sees it: arrivals per tick, its workload per tick, its objectives and the
    scale-out boundary of its TTFT objective (None without one)."""

    name: str
    arrivals: list[float]
    work: list[Workload]
    goals: Objectives
    boundary: float | None

    @property
    def edge(self) -> Objectives | None:
        """The scale-out boundary as an objective (TTFT within it), for the share above it."""
        if self.boundary is None:
            return None
        if not hasattr(self, "_edge"):
            self._edge = Objectives({Sli.TTFT: self.boundary}, {Sli.TTFT: 1.0})
        return self._edge


@dataclass
class Timeline:
    """What one policy's replay recorded, per tick (and per class where named)."""

    tick: float
    arrivals: list[float] = field(default_factory=list)  # requests arriving in the tick
    ready: list[int] = field(default_factory=list)
    provisioned: list[int] = field(default_factory=list)  # ready + starting
    waiting: list[float] = field(default_factory=list)  # queued requests, whole pool
    running: list[float] = field(default_factory=list)  # per engine, mean
    ttft_typical: list[float] = field(default_factory=list)  # the busiest half's typical TTFT (plot)
    itl_typical: list[float] = field(default_factory=list)
    within: dict[str, dict[Sli, list[float]]] = field(default_factory=dict)  # class -> SLI -> requests within
    within_all: dict[str, list[float]] = field(default_factory=dict)  # class -> requests within every objective
    total: dict[str, list[float]] = field(default_factory=dict)  # class -> requests
    above_boundary: list[float] = field(default_factory=list)  # TTFTs above the scale-out boundary, all classes
    guarded: list[float] = field(default_factory=list)  # requests of classes with a scale-out boundary
    ttft_ratio_p90: list[float] = field(default_factory=list)  # p90 TTFT / threshold (llm-d's signal)
    tpot_ratio_p90: list[float] = field(default_factory=list)  # p90 TPOT (or ITL) / threshold


class View:
    """What a controller can read at one tick: the replay's series up to now, as monitoring would show them."""

    def __init__(self, timeline: Timeline, index: int, now: float, start: float) -> None:
        self.timeline = timeline
        self.index = index
        self.now = now  # seconds from the replay's start
        self.start = start  # the history's start (unix seconds, for same-hour lookups)

    def _span(self, seconds: float, ago: float = 0.0) -> slice:
        ticks = max(1, round(seconds / self.timeline.tick))
        back = round(ago / self.timeline.tick)
        end = self.index + 1 - back
        return slice(max(0, end - ticks), max(0, end))

    def rate(self, seconds: float, ago: float = 0.0) -> float | None:
        """Requests/s over the `seconds` ending `ago` seconds back (None before the replay began)."""
        part = self.timeline.arrivals[self._span(seconds, ago)]
        return sum(part) / (len(part) * self.timeline.tick) if part else None

    def mean(self, series: Sequence[float], seconds: float) -> float:
        """Mean of a per-tick series over the last `seconds`."""
        part = series[self._span(seconds)]
        return sum(part) / len(part) if part else 0.0

    def total(self, series: Sequence[float], seconds: float) -> float:
        """Sum of a per-tick series over the last `seconds`."""
        return float(sum(series[self._span(seconds)]))

    @property
    def waiting(self) -> float:
        """Requests waiting in the engines' queues now."""
        return self.timeline.waiting[self.index]

    @property
    def ready(self) -> int:
        """Engines serving now."""
        return self.timeline.ready[self.index]

    @property
    def provisioned(self) -> int:
        """Engines serving or starting."""
        return self.timeline.provisioned[self.index]


class Controller(Protocol):
    """A scaling policy: every `period` seconds, the replicas it wants."""

    name: str
    period: float

    def decide(self, view: View) -> int:
        """Replicas wanted now (the pool is then scaled to it)."""
        ...


@dataclass
class _Half:
    engines: float
    queue: float = 0.0  # per engine
    running: float = 0.0  # per engine
    admit_rate: float = 0.0  # per engine, last tick


def arrivals(traffic: ClassTraffic, step: float, tick: float, seed: int) -> list[float]:
    """Poisson arrivals per tick at the history's rate (each history step divided into ticks); the same seed and
    class give the same draws, so every policy replays the same requests."""
    rng = np.random.default_rng((seed, zlib.crc32(f"{traffic.model}/{traffic.request_class}".encode())))
    per_step = max(1, round(step / tick))
    rates = np.repeat(np.asarray(traffic.rate, dtype=np.float64), per_step)
    return [float(x) for x in rng.poisson(np.clip(rates, 0, None) * tick)]


def replay(
    engine: EngineModel, loads: Sequence[ClassLoad], controller: Controller, initial: int, config: Config,
    *, start: float = 0.0,
) -> Timeline:  # fmt: skip
    """Run one policy over the whole traffic and return its timeline."""
    ticks = len(loads[0].arrivals)
    line = Timeline(config.tick)
    for load in loads:
        line.within[load.name] = {sli: [] for sli in load.goals.thresholds}
        line.within_all[load.name] = []
        line.total[load.name] = []
    ready = initial
    starting: list[float] = []  # ready times of pods asked for
    hot = _Half(initial / 2)
    cold = _Half(initial / 2)
    next_decision = FIRST_DECISION  # controllers act once a minute of series exists to read
    shares_hot = (1 + config.spread) / 2
    for i in range(ticks):
        now = i * config.tick
        # Pods that finished starting join (empty: the balancer sends them new arrivals only).
        joined = sum(1 for t in starting if t <= now)
        if joined:
            starting = [t for t in starting if t > now]
            _resize(hot, cold, ready, ready + joined)
            ready += joined
        came = [load.arrivals[i] for load in loads]
        total_in = sum(came)
        prompt_mean, output_mean = _mix(loads, came, i)
        halves = ((hot, shares_hot), (cold, 1 - shares_hot))
        waits = []
        for half, part in halves:
            waits.append(_advance(engine, half, total_in * part, prompt_mean, output_mean, config.tick))
        line.arrivals.append(total_in)
        line.ready.append(ready)
        line.provisioned.append(ready + len(starting))
        line.waiting.append((hot.queue + cold.queue) * ready / 2)
        line.running.append((hot.running + cold.running) / 2)
        above = guarded = 0.0
        ttft_p90 = tpot_p90 = 0.0
        for load, count in zip(loads, came, strict=True):
            work = load.work[i]
            within_all = 0.0
            per_sli = dict.fromkeys(load.goals.thresholds, 0.0)
            for (half, part), wait in zip(halves, waits, strict=True):
                n = count * part
                got = shares(engine, work, load.goals, half.running, wait, half.admit_rate)
                within_all += n * got.request
                for sli, share in got.by_sli.items():
                    per_sli[sli] += n * share
                edge = load.edge
                if edge is not None:
                    above += n * (1 - shares(engine, work, edge, half.running, wait, half.admit_rate).request)
                    guarded += n
            for sli, value in per_sli.items():
                line.within[load.name][sli].append(value)
            line.within_all[load.name].append(within_all)
            line.total[load.name].append(count)
            # llm-d's signal: the busiest half's p90 TTFT and TPOT over their thresholds.
            step = engine.step(hot.running)
            ttft = waits[0] + 0.5 * step + engine.prefill(work.prompts[int(0.9 * (len(work.prompts) - 1))])
            itl = step / (1 - min(0.95, hot.admit_rate * engine.prefill(work.prompt_mean)))
            if Sli.TTFT in load.goals.thresholds:
                ttft_p90 = max(ttft_p90, ttft / load.goals.thresholds[Sli.TTFT])
            decode_limit = load.goals.thresholds.get(Sli.TPOT, load.goals.thresholds.get(Sli.ITL))
            if decode_limit is not None:
                tpot_p90 = max(tpot_p90, itl / decode_limit)
        line.above_boundary.append(above)
        line.guarded.append(guarded)
        line.ttft_ratio_p90.append(ttft_p90)
        line.tpot_ratio_p90.append(tpot_p90)
        step = engine.step(hot.running)
        line.ttft_typical.append(waits[0] + 0.5 * step + engine.prefill(prompt_mean))
        line.itl_typical.append(step / (1 - min(0.95, hot.admit_rate * engine.prefill(prompt_mean))))
        if now + 1e-9 >= next_decision:
            next_decision = now + controller.period
            wanted = max(1, controller.decide(View(line, i, now, start)))
            have = ready + len(starting)
            if wanted > have:
                starting.extend([now + config.pod_start] * (wanted - have))
            elif wanted < have:
                drop = have - wanted
                cancel = min(drop, len(starting))  # pods still starting go first
                starting = sorted(starting)[: len(starting) - cancel]
                removed = min(drop - cancel, ready - 1)
                if removed:
                    _resize(hot, cold, ready, ready - removed)
                    ready -= removed
    return line


def _resize(hot: _Half, cold: _Half, before: int, after: int) -> None:
    """Spread each half's per-engine queue and batch over a new engine count (new engines start empty, and the
    balancer evens the load out over the next requests; removed ones drain)."""
    for half in (hot, cold):
        if after > before:
            half.queue = half.queue * before / after
            half.running = half.running * before / after
        half.engines = after / 2


def _mix(loads: Sequence[ClassLoad], came: Sequence[float], i: int) -> tuple[float, float]:
    """Mean prompt and output tokens of the tick's arrivals over all classes."""
    total = sum(came)
    if total <= 0:
        work = loads[0].work[i]
        return work.prompt_mean, work.output_mean
    prompt = sum(c * load.work[i].prompt_mean for load, c in zip(loads, came, strict=True)) / total
    output = sum(c * load.work[i].output_mean for load, c in zip(loads, came, strict=True)) / total
    return prompt, output


def _advance(
    engine: EngineModel, half: _Half, arrived: float, prompt_mean: float, output_mean: float, tick: float
) -> float:
    """One tick of one half of the pool; returns the queue wait of the tick's arrivals (seconds)."""
    per_engine = arrived / max(half.engines, 1e-9)
    busy = min(0.95, half.admit_rate * engine.prefill(prompt_mean))
    itl = engine.step(half.running) / (1 - busy)
    completions = min(half.running, half.running * tick / max(1e-9, output_mean * itl))
    queued_before = half.queue
    half.queue += per_engine
    free = engine.max_num_seqs - half.running + completions
    admitted = min(half.queue, max(0.0, free))
    half.queue -= admitted
    half.running = max(0.0, min(float(engine.max_num_seqs), half.running + admitted - completions))
    half.admit_rate = admitted / tick
    if half.queue <= 1e-9:
        return 0.0
    drain = max(completions / tick, 1e-6)  # slots free up at the completion rate
    return min(MAX_WAIT, 0.5 * (queued_before + half.queue) / drain)


def ceil_div(value: float, per: float) -> int:
    """ceil(value / per), at least 1."""
    return max(1, math.ceil(value / per - 1e-9))
