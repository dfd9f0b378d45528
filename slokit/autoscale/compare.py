"""Run every chosen policy on the same replay of each model, and build them the way a cluster would run them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slokit.autoscale.engine import EngineModel, Objectives, from_plan
from slokit.autoscale.history import Traffic
from slokit.autoscale.hpa import Hpa
from slokit.autoscale.policies import (
    DEFAULT_HEADROOM,
    QUEUE_THRESHOLD,
    LlmD,
    Predictive,
    Queue,
    Reactive,
    SignalSettings,
    Static,
    default_hpa,
)
from slokit.autoscale.replay import ClassLoad, Config, Controller, Timeline, arrivals, replay
from slokit.autoscale.sizing import model_capacity
from slokit.generate import alerts, k8s
from slokit.generate import autoscale as deployable
from slokit.schema import Sli
from slokit.spec import Model, Spec


@dataclass
class ModelRun:
    """One model's replays: its engine model, capacity, static peak and a timeline per policy."""

    model: Model
    engine: EngineModel
    capacity: float  # requests/s per engine within the objectives
    peak_rate: float
    static_replicas: int
    loads: list[ClassLoad]
    timelines: dict[str, Timeline]
    start: float


def class_loads(spec: Spec, traffic: Traffic, model: str, config: Config) -> list[ClassLoad]:
    """The model's classes with their arrivals per tick and workload per tick."""
    per_step = max(1, round(traffic.step / config.tick))
    loads = []
    for c in traffic.of_model(model):
        rc = spec.request_class(c.request_class)
        works = [c.workload(i) for i in range(len(c.rate))]
        boundary = alerts.scale_out_boundary(spec, rc) if rc in spec.scale_out_classes() else None
        loads.append(
            ClassLoad(
                c.request_class,
                arrivals(c, traffic.step, config.tick, config.seed),
                [w for w in works for _ in range(per_step)],
                Objectives.of(rc),
                boundary,
            )
        )
    return loads


def build(name: str, spec: Spec, model: Model, settings: SignalSettings, static: int, max_replicas: int) -> Controller:
    """The controller for one policy name, as the cluster would run it."""
    slo = next((rc.slos[Sli.TTFT].objective for rc in spec.scale_out_classes() if model.name in rc.models), None)
    budget = slo.error_budget if slo is not None else 0.05
    reactive = Reactive(
        Hpa.from_object(k8s.hpa(spec, model), max_replicas=max_replicas),
        spec.alerting.scale_out.fraction_of_slo,
        budget,
        float(spec.alerting.min_requests),
    )
    if name == "static":
        return Static(static)
    if name == "reactive":
        return reactive
    if name == "queue":
        return Queue(default_hpa(max_replicas, QUEUE_THRESHOLD, average=True))
    if name == "llm-d":
        return LlmD(default_hpa(max_replicas, 1.0, average=False))
    predictive = Hpa.from_object(deployable.scaled_object(spec, model), max_replicas=max_replicas)
    burn = Reactive(predictive, reactive.fraction, budget, reactive.min_requests)  # reads the signal only
    return Predictive(predictive, settings, burn)


def run_model(
    spec: Spec, traffic: Traffic, model: Model, names: Sequence[str], config: Config,
    engine: EngineModel | None = None, progress: Callable[[str], None] | None = None,
    headroom: float | None = None,
) -> ModelRun:  # fmt: skip
    """Replay one model's traffic under each named policy. The static peak is sized with the default headroom,
    whatever `headroom` the predictive policy is given, so that its GPU-hours stay one fixed yardstick."""
    engine = engine or from_plan(spec, model)
    loads = class_loads(spec, traffic, model.name, config)
    counts = {load.name: sum(load.arrivals) for load in loads}
    total = sum(counts.values()) or 1.0
    capacity = model_capacity(spec, model, engine, {k: v / total for k, v in counts.items()})
    rate = [sum(c.rate[i] for c in traffic.of_model(model.name)) for i in range(traffic.steps)]
    peak = max(rate)
    settings = SignalSettings(capacity, fraction=spec.alerting.scale_out.fraction_of_slo,
                              headroom=DEFAULT_HEADROOM if headroom is None else headroom)  # fmt: skip
    static = max(1, math.ceil(peak * (1 + DEFAULT_HEADROOM) / capacity - 1e-9))
    max_replicas = max(2 * static, static + 4)
    initial = max(1, math.ceil(rate[0] * (1 + DEFAULT_HEADROOM) / capacity - 1e-9))  # the same start for all
    timelines: dict[str, Timeline] = {}
    for name in names:
        controller = build(name, spec, model, settings, static, max_replicas)
        first = static if name == "static" else initial
        hpa = getattr(controller, "hpa", None)
        if isinstance(hpa, Hpa):
            hpa.start(first)
        if progress is not None:
            progress(f"replaying {model.name} under {name}")
        timelines[name] = replay(engine, loads, controller, first, config, start=traffic.start)
    return ModelRun(model, engine, capacity, peak, static, loads, timelines, traffic.start)
