"""How many requests/s one engine of a model carries within the spec's objectives, over the model's class mix.

Shared by the replay (the predictive policy's and the static peak's sizing) and the generator (the capacity the
recorded signal divides by), so the deployed signal sizes exactly as the replay did.
"""

from __future__ import annotations

from collections.abc import Mapping

from slokit.autoscale.engine import EngineModel, Objectives, capacity
from slokit.autoscale.history import class_shape
from slokit.spec import Model, Spec


def model_capacity(spec: Spec, model: Model, engine: EngineModel, mix: Mapping[str, float] | None = None) -> float:
    """Requests/s per engine over the classes on `model`, weighted by `mix` (class -> share of requests; equal
    shares when None): the harmonic mean of each class's own capacity. Raises `EngineModelError` when some class's
    objectives cannot be met at any batch."""
    classes = [rc for rc in spec.classes_on(model.name) if Objectives.of(rc).thresholds]
    if not classes:
        return float("inf")
    weights = {rc.name: (mix or {}).get(rc.name, 1.0 if mix is None else 0.0) for rc in classes}
    total = sum(weights.values()) or float(len(classes))
    if not sum(weights.values()):
        weights = dict.fromkeys(weights, 1.0)
    inverse = 0.0
    for rc in classes:
        label = f"model {model.name}, class {rc.name}"
        each = capacity(engine, class_shape(spec, rc.name), Objectives.of(rc), label=label)
        inverse += weights[rc.name] / total / each
    return 1.0 / inverse
