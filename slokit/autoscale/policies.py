"""The scaling policies compared on one replay, each as the controller that would run it in a cluster.

* `static`: the replicas the peak needs, all day (what provisioning for the peak costs).
* `reactive`: the HPA slokit generates today (slokit/generate/k8s.py) on `slokit:scale_out:ratio`, the share of
  TTFTs over the scale-out boundary against what the objective allows, targeting `fraction_of_slo`, with the
  generated `behavior`.
* `queue`: production-stack's tutorial: KEDA on the sum of `vllm:num_requests_waiting`, threshold 5 per replica,
  Kubernetes' default HPA behaviour.
* `llm-d`: llm-d's SLO-aware control law: max(P90 TTFT / TTFT SLO, P90 TPOT / TPOT SLO), clamped at 2.0 and averaged
  over 45 s; one more replica's worth (proportionally) above 0.55, fewer below 0.40, hold between.
* `slokit`: predictive: `signal` turns a short-horizon forecast of the load (the trend of the last minutes, and the
  same hour yesterday scaled to today) into replicas with the engine model's capacity at the SLO plus headroom
  (raised for a day to the largest forecast miss beyond noise, and never less than one spare engine), adds the
  engines needed to drain the queue, and floors it at one more replica while the reactive burn signal is over its
  fraction. The generated recording rules compute the same signal and the generated ScaledObject acts on
  it (slokit/generate/autoscale.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from slokit.autoscale.hpa import DEFAULT_BEHAVIOR, Hpa
from slokit.autoscale.replay import Timeline, View

POLICIES: Final = ("static", "reactive", "queue", "llm-d", "slokit")

QUEUE_THRESHOLD: Final = 5.0
LLMD_UP: Final = 0.55
LLMD_DOWN: Final = 0.40
LLMD_CLAMP: Final = 2.0
LLMD_AVERAGE_SECONDS: Final = 45.0
DAY: Final = 86400.0
RATE_WINDOW: Final = 60.0
"""Seconds of the request rate the signal reads (a 1m rate, as the recorded `slokit:autoscale_requests:rate1m`)."""
DEFAULT_HEADROOM: Final = 0.25
"""Spare capacity over the forecast (and the static peak's over the peak): a quarter, for forecast error."""


class PolicyError(ValueError):
    """A policy name that does not exist."""


def check_names(names: list[str]) -> list[str]:
    """The policies to run (all when none is named); unknown names raise with the valid list."""
    if not names:
        return list(POLICIES)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise PolicyError(f"--policy {', '.join(unknown)}: no such policy; valid policies: {', '.join(POLICIES)}")
    return list(dict.fromkeys(names))


@dataclass
class Static:
    """The same replicas all the time."""

    replicas: int
    name: str = "static"
    period: float = 3600.0

    def decide(self, view: View) -> int:
        """Always the peak's replicas."""
        return self.replicas


@dataclass
class Reactive:
    """slokit's generated HPA on the scale-out ratio (Value target = fraction_of_slo)."""

    hpa: Hpa
    fraction: float
    error_budget: float
    min_requests: float
    name: str = "reactive"
    period: float = 15.0

    def signal(self, view: View) -> float:
        """`slokit:scale_out:ratio`: fraction x share above the boundary over 5m / error budget (0 under the
        traffic guard)."""
        line = view.timeline
        seen = view.total(line.guarded, 300)
        if seen < self.min_requests:
            return 0.0
        return self.fraction * view.total(line.above_boundary, 300) / seen / self.error_budget

    def decide(self, view: View) -> int:
        """The HPA's decision on the signal."""
        return self.hpa.decide(view.now, view.provisioned, self.signal(view))


@dataclass
class Queue:
    """production-stack: KEDA AverageValue on the waiting requests, threshold 5."""

    hpa: Hpa
    name: str = "queue"
    period: float = 15.0

    def decide(self, view: View) -> int:
        """The HPA's decision on the summed queue."""
        return self.hpa.decide(view.now, view.provisioned, view.waiting)


@dataclass
class LlmD:
    """llm-d's SLO-aware law on P90 TTFT and TPOT against their SLOs."""

    hpa: Hpa
    name: str = "llm-d"
    period: float = 15.0

    def decide(self, view: View) -> int:
        """Scale up above 0.55, down below 0.40, proportionally to the averaged, clamped ratio."""
        line = view.timeline
        ratio = [min(LLMD_CLAMP, max(a, b)) for a, b in zip(line.ttft_ratio_p90, line.tpot_ratio_p90, strict=True)]
        value = view.mean(ratio, LLMD_AVERAGE_SECONDS)
        current = view.provisioned
        # A Value target of 1 on value / threshold: the HPA wants current x value / 0.55 above the band, current x
        # value / 0.40 below it, and holds inside it (the metric then reads exactly its target).
        if LLMD_DOWN <= value <= LLMD_UP:
            metric = 1.0
        elif value > LLMD_UP:
            metric = value / LLMD_UP
        else:
            metric = value / LLMD_DOWN
        return self.hpa.decide(view.now, current, metric)


@dataclass(frozen=True)
class SignalSettings:
    """The predictive signal's parameters (the generated rules carry the same numbers)."""

    capacity: float  # requests/s one engine carries within the objectives (engine model)
    headroom: float = DEFAULT_HEADROOM
    horizon: float = 180.0  # seconds ahead: a pod's start, a decision period and the 1m rate's lag
    trend_window: float = 300.0
    drain: float = 60.0  # seconds to drain the queue in
    fraction: float = 0.8  # the reactive burn signal's trigger (scale_out.fraction_of_slo)
    miss_window: float = DAY  # how long the largest forecast miss raises the headroom
    miss_sigmas: float = 4.0  # a miss counts beyond this many standard deviations of Poisson noise
    miss_floor: float = 0.5  # engines' worth of forecast below which misses are not counted
    max_headroom: float = 1.0  # the most the misses raise the headroom to
    spare: float = 1.0  # engines beyond the forecast's, at least (N + 1: one engine may fail)


def least_squares_slope(points: list[tuple[float, float]]) -> float:
    """Slope of the least-squares line through (t, value) points, as PromQL's deriv() computes it (0 for fewer
    than two)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mt) * (v - mv) for t, v in points) / var


def forecast_of(s: SignalSettings, rate_now: float, slope: float, same_hour: float | None) -> float:
    """The load `horizon` ahead: the trend of the last minutes, or the same hour yesterday scaled to today."""
    forecast = max(rate_now, rate_now + slope * s.horizon)
    if same_hour is not None:
        forecast = max(forecast, same_hour)
    return forecast


def miss(s: SignalSettings, rate_now: float, forecast_then: float) -> float | None:
    """How far the load now exceeds the forecast made `horizon` ago, as a ratio (1: as forecast), less the
    `miss_sigmas` standard deviations that Poisson noise in the two 1m rates explains; None where that forecast
    was under `miss_floor` engines' load, where one engine absorbs the noise anyway."""
    if forecast_then < s.miss_floor * s.capacity or forecast_then <= 0:
        return None
    noise = s.miss_sigmas * math.sqrt(2 * forecast_then / RATE_WINDOW)
    return (rate_now - noise) / forecast_then


def headroom_of(s: SignalSettings, worst_miss: float) -> float:
    """The headroom: the configured one, or the largest forecast miss of the last `miss_window` (less one) when
    that was larger, up to `max_headroom`: a burst the forecast could not see is met by that much more spare
    capacity until a day without one has passed."""
    return min(max(s.max_headroom, s.headroom), max(s.headroom, worst_miss - 1.0))


def signal(
    s: SignalSettings, rate_now: float, slope: float, same_hour: float | None, waiting: float, burn: float,
    current: int, worst_miss: float = 0.0,
) -> float:  # fmt: skip
    """Replicas wanted (a real number; the HPA rounds up): the forecast load at the SLO's capacity with headroom
    (and at least `spare` engines more than the forecast needs), plus the queue's drain, floored at one more than
    now while the burn signal is at or over its fraction."""
    forecast = forecast_of(s, rate_now, slope, same_hour)
    spared = max(forecast * (1 + headroom_of(s, worst_miss)), forecast + s.spare * s.capacity)
    wanted = spared / s.capacity + waiting / (s.capacity * s.drain)
    if burn >= s.fraction:
        wanted = max(wanted, current + 1.0)
    return max(wanted, 1.0)


@dataclass
class Predictive:
    """slokit's predictive policy, acting through the generated ScaledObject's HPA."""

    hpa: Hpa
    settings: SignalSettings
    burn: Reactive  # reads the reactive signal (the floor)
    name: str = "slokit"
    period: float = 15.0
    rates: deque[tuple[float, float]] = field(default_factory=deque)  # (t, 1m rate) at each decision
    forecasts: deque[tuple[float, float]] = field(default_factory=deque)  # (t, forecast) over the last horizon
    misses: deque[tuple[float, float]] = field(default_factory=deque)  # (t, miss), decreasing: a running max

    def decide(self, view: View) -> int:
        """The HPA's decision on the predictive signal."""
        rate_now = view.rate(60) or 0.0
        self.rates.append((view.now, rate_now))
        while self.rates and self.rates[0][0] < view.now - self.settings.trend_window:
            self.rates.popleft()
        slope = least_squares_slope(list(self.rates))
        same_hour = None
        if view.now >= DAY:
            then_now = view.rate(60, ago=DAY)
            then_ahead = view.rate(60, ago=DAY - self.settings.horizon)
            if then_now and then_ahead is not None:
                same_hour = then_ahead * min(2.0, max(0.5, rate_now / then_now))
        worst = self._worst_miss(view.now, rate_now, forecast_of(self.settings, rate_now, slope, same_hour))
        # `ready`: the engines the rules count (a starting pod exports nothing yet).
        value = signal(self.settings, rate_now, slope, same_hour, view.waiting, self.burn.signal(view), view.ready,
                       worst)  # fmt: skip
        return self.hpa.decide(view.now, view.provisioned, value)

    def _worst_miss(self, now: float, rate_now: float, forecast: float) -> float:
        """The largest `miss` of the last `miss_window` (0 when none counted), after recording this decision's."""
        s = self.settings
        then = None
        while self.forecasts and self.forecasts[0][0] <= now - s.horizon + 1e-9:
            then = self.forecasts.popleft()[1]
        self.forecasts.append((now, forecast))
        missed = miss(s, rate_now, then) if then is not None else None
        if missed is not None:
            while self.misses and self.misses[-1][1] <= missed:
                self.misses.pop()
            self.misses.append((now, missed))
        while self.misses and self.misses[0][0] < now - s.miss_window:
            self.misses.popleft()
        return self.misses[0][1] if self.misses else 0.0


def default_hpa(max_replicas: int, target: float, average: bool) -> Hpa:
    """An HPA with Kubernetes' default behaviour (KEDA's when a ScaledObject names none)."""
    return Hpa(target, average, DEFAULT_BEHAVIOR, 1, max_replicas)


def with_bounds(obj: Mapping[str, Any], max_replicas: int) -> Hpa:
    """The HPA a generated object describes, with the replay's replica ceiling."""
    return Hpa.from_object(obj, max_replicas=max_replicas)


def bound(value: float) -> int:
    """Replicas from a real number (at least one)."""
    return max(1, math.ceil(value - 1e-9))


__all__ = ["POLICIES", "LlmD", "PolicyError", "Predictive", "Queue", "Reactive", "Static", "Timeline"]
