"""The Kubernetes HPA's replica decision, as the controller computes it (autoscaling/v2 with `behavior`).

KEDA hands its triggers to an HPA it creates, so one model covers both. Per sync: a raw recommendation from the
metric (Value: current x value / target; AverageValue: value / target), kept as it is within the 10% tolerance;
then stabilisation (scale up to the lowest recommendation of the scale-up window, down to the highest of the
scale-down window); then the rate policies (Pods or Percent per period, counted from the replicas at the start of
the period, `selectPolicy` Max or Min); then min and max replicas. Source: kubernetes/pkg/controller/podautoscaler
(`horizontal.go`: stabilizeRecommendationWithBehaviors, normalizeDesiredReplicasWithBehaviors).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

TOLERANCE: Final = 0.1
# What an HPA does when its `behavior` leaves a direction out (the Kubernetes defaults).
DEFAULT_BEHAVIOR: Final[Mapping[str, Any]] = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15},
            {"type": "Pods", "value": 4, "periodSeconds": 15},
        ],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    },
}


@dataclass
class Hpa:
    """One HPA's state: its target, behaviour, bounds, recommendations and scale events."""

    target: float
    average: bool  # AverageValue (value / target) rather than Value (current x value / target)
    behavior: Mapping[str, Any]
    min_replicas: int
    max_replicas: int
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    history: list[tuple[float, int]] = field(default_factory=list)  # (time, replicas after) per change
    initial: int = 1

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], *, max_replicas: int | None = None) -> Hpa:
        """From a generated HorizontalPodAutoscaler or KEDA ScaledObject (its first trigger or metric)."""
        spec = obj["spec"]
        if obj["kind"] == "ScaledObject":
            trigger = spec["triggers"][0]
            target = float(trigger["metadata"]["threshold"])
            average = trigger.get("metricType", "AverageValue") == "AverageValue"
            behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
            low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        else:
            metric = spec["metrics"][0]["external"]["target"]
            average = metric["type"] == "AverageValue"
            target = parse_quantity(metric["averageValue" if average else "value"])
            behavior = spec.get("behavior", {})
            low, high = spec.get("minReplicas", 1), spec["maxReplicas"]
        merged = {k: {**DEFAULT_BEHAVIOR[k], **behavior.get(k, {})} for k in DEFAULT_BEHAVIOR}
        return cls(target, average, merged, max(1, int(low)), int(max_replicas or high))

    def decide(self, now: float, current: int, value: float) -> int:
        """The replicas after one sync at `now` with the metric at `value`."""
        if self.average:
            ratio = value / (self.target * max(1, current))
            raw = math.ceil(value / self.target - 1e-9)
        else:
            ratio = value / self.target
            raw = math.ceil(current * ratio - 1e-9)
        if abs(ratio - 1) <= TOLERANCE:
            raw = current
        raw = max(self.min_replicas, min(self.max_replicas, raw))
        self.recommendations.append((now, raw))
        longest = max(self._window("scaleUp"), self._window("scaleDown"))
        while self.recommendations and self.recommendations[0][0] < now - longest:
            self.recommendations.popleft()
        up = min(r for t, r in self.recommendations if t >= now - self._window("scaleUp"))
        down = max(r for t, r in self.recommendations if t >= now - self._window("scaleDown"))
        desired = current
        if desired < up:
            desired = up
        if desired > down:
            desired = down
        desired = self._rate_limited(now, current, desired)
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        if desired != current:
            self.history.append((now, desired))
        return desired

    def _window(self, direction: str) -> float:
        return float(self.behavior[direction].get("stabilizationWindowSeconds", 0))

    def start(self, replicas: int) -> None:
        """Record the replicas the HPA starts from (the period start before any scale event)."""
        self.initial = replicas

    def _rate_limited(self, now: float, current: int, desired: int) -> int:
        if desired == current:
            return current
        direction = "scaleUp" if desired > current else "scaleDown"
        rules = self.behavior[direction]
        limits = []
        for policy in rules.get("policies", []):
            start = self._replicas_at(now - float(policy["periodSeconds"]), current)
            value = float(policy["value"])
            if direction == "scaleUp":
                limits.append(start + value if policy["type"] == "Pods" else math.ceil(start * (1 + value / 100)))
            else:
                limits.append(start - value if policy["type"] == "Pods" else math.floor(start * (1 - value / 100)))
        if not limits:
            return desired
        select = rules.get("selectPolicy", "Max")
        if select == "Disabled":
            return current
        if direction == "scaleUp":
            limit = max(limits) if select == "Max" else min(limits)
            return int(min(desired, limit))
        limit = min(limits) if select == "Max" else max(limits)
        return int(max(desired, limit))

    def _replicas_at(self, when: float, current: int) -> int:
        """Replicas at `when`: the last change at or before it, else what the HPA started from."""
        replicas = self.initial
        for t, after in self.history:
            if t > when:
                break
            replicas = after
        return replicas


def parse_quantity(text: str | float | int) -> float:
    """A Kubernetes quantity ("800m", "1", "2.5") as a number."""
    if isinstance(text, int | float):
        return float(text)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
