"""Find the largest concurrency (or rate) at which a class's SLOs hold: bracket, then bisect.

1. Bracket: start at `start` and double while the level passes (up to `maximum`); if the first level fails, halve
   until one passes (down to 1 user, or `start / 1024` req/s).
2. Bisect between the largest passing and the smallest failing level until they are one `step` apart
   (concurrency: 1 user by default; rate: `tolerance` x the passing rate, 10% by default).
3. Near the boundary, a verdict is noisy: any level whose worst constraint is within `near` (10%) of its limit is
   run again, up to `repeats` runs, and judged on all its requests pooled.

The result names `max_passing`, `min_failing` and the constraint that failed worst at `min_failing`
(`binding`), with every level measured. Every search is bounded by `max_runs` level runs.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slokit.probe.load import LevelRun, Load, LoadKind
from slokit.probe.results import Check, Criteria, LevelSummary, binding_check, summarize

Measure = Callable[[Load, int], Awaitable[LevelRun]]  # (load, run number of that level) -> one run
OnLevel = Callable[[LevelSummary], None]


@dataclass(frozen=True)
class SearchConfig:
    """Bounds and resolution of a search."""

    variable: LoadKind = "concurrency"
    start: float = 1.0
    maximum: float = 1024.0
    step: float | None = None  # concurrency: users (default 1); rate: req/s (default: tolerance x passing rate)
    tolerance: float = 0.1
    repeats: int = 2
    near: float = 0.1
    max_runs: int = 24
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.start <= 0 or self.maximum < self.start:
            raise ValueError(f"search needs 0 < start <= maximum (got start {self.start:g}, maximum {self.maximum:g})")
        if self.variable == "concurrency" and (self.start != int(self.start) or self.maximum != int(self.maximum)):
            raise ValueError("a concurrency search needs whole numbers of users for start and maximum")
        if self.repeats < 1 or self.max_runs < 1:
            raise ValueError("repeats and max_runs must be at least 1")


@dataclass
class SearchResult:
    """Outcome of a search: the boundary, what bound it, and every level in the order it ran."""

    variable: LoadKind
    max_passing: float | None
    min_failing: float | None
    levels: list[LevelSummary] = field(default_factory=list)
    stopped: str = ""  # converged, maximum, minimum, max_runs

    def level(self, value: float | None) -> LevelSummary | None:
        """The summary of one level value."""
        for summary in self.levels:
            if value is not None and summary.load.value == value:
                return summary
        return None

    @property
    def binding(self) -> Check | None:
        """The constraint that failed worst at `min_failing` (None when no level failed)."""
        failing = self.level(self.min_failing)
        if failing is None:
            return None
        return binding_check(failing.checks)

    @property
    def goodput(self) -> float:
        """Goodput (req/s meeting every objective) at the largest passing level."""
        passing = self.level(self.max_passing)
        return passing.goodput if passing is not None else math.nan

    def to_json(self) -> dict[str, Any]:
        binding = self.binding
        return {
            "variable": self.variable,
            "max_passing": _number(self.max_passing),
            "min_failing": _number(self.min_failing),
            "binding_constraint": binding.to_json() if binding is not None else None,
            "goodput_rps": self.goodput if math.isfinite(self.goodput) else None,
            "stopped": self.stopped,
        }


def _number(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if value == int(value) else value


async def search(
    measure: Measure, criteria: Criteria, config: SearchConfig, on_level: OnLevel | None = None
) -> SearchResult:
    """Run the search with `measure` doing the load; never more than `config.max_runs` runs."""
    result = SearchResult(config.variable, None, None)
    summaries: dict[float, LevelSummary] = {}
    runs = 0
    concurrency = config.variable == "concurrency"
    step = config.step if config.step is not None else (1.0 if concurrency else 0.0)

    async def once(value: float) -> LevelSummary:
        nonlocal runs
        previous = summaries.get(value)
        load = Load(config.variable, value, 1.0 if concurrency else config.burstiness)
        run = await measure(load, len(previous.runs) if previous else 0)
        runs += 1
        summary = summarize(load, [*(previous.runs if previous else []), run], criteria)
        summaries[value] = summary
        result.levels = [s for s in result.levels if s.load.value != value] + [summary]
        if on_level is not None:
            on_level(summary)
        return summary

    async def judged(value: float) -> bool:
        summary = await once(value)
        while len(summary.runs) < config.repeats and abs(summary.margin) < config.near and runs < config.max_runs:
            summary = await once(value)
        return summary.passed

    def budget() -> bool:
        return runs < config.max_runs

    lo: float | None = None
    hi: float | None = None
    value = config.start
    while budget():
        if await judged(value):
            lo = value
            if value >= config.maximum:
                result.stopped = "maximum"
                break
            value = min(value * 2, config.maximum)
        else:
            hi = value
            break
    if hi is not None and lo is None:
        floor = 1.0 if concurrency else config.start / 1024
        while budget():
            if value <= floor:
                result.stopped = "minimum"
                break
            value = max(floor, math.floor(value / 2) if concurrency else _round(value / 2))
            if await judged(value):
                lo = value
                break
            hi = value
    while lo is not None and hi is not None and budget():
        gap = hi - lo
        resolution = step if concurrency else max(step, config.tolerance * lo)
        if gap <= resolution or (concurrency and gap <= 1):
            result.stopped = "converged"
            break
        mid = float(math.floor((lo + hi) / 2)) if concurrency else _round((lo + hi) / 2)
        if mid <= lo or mid >= hi:
            result.stopped = "converged"
            break
        if await judged(mid):
            lo = mid
        else:
            hi = mid
    if not result.stopped:
        result.stopped = "max_runs"
    result.max_passing, result.min_failing = lo, hi
    return result


def _round(value: float) -> float:
    """Four significant digits, so rates read well in tables."""
    if value <= 0:
        return value
    digits = 3 - math.floor(math.log10(value))
    return round(value, max(digits, 0))
