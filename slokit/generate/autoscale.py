"""The predictive autoscaling signal, deployable: its recording rules, the KEDA ScaledObject or HPA acting on it,
and a promtool test of the signal.

`slokit:autoscale_replicas:desired{service, model}` is the replicas a model's Deployment should run, computed from
live series exactly as the replay's `slokit` policy computes it (slokit/autoscale/policies.py `signal`):

    forecast = max(R + max(0, deriv(R[5m])) x horizon, R offset (1d - horizon) x clamp(R / R offset 1d, 0.5, 2))
    miss     = (R - sigmas x sqrt(2 F / 60)) / F, F = forecast offset horizon, where F >= miss_floor x capacity
    headroom = clamp(max_over_time(miss[1d]) - 1, default headroom, max_headroom)
    desired  = max((max(forecast x (1 + headroom), forecast + spare x capacity) + waiting / drain) / capacity,
                   current + 1 while burning, 1)

with R the model's finished-request rate over 1m, `waiting` its engines' queues, `capacity` the requests/s one
engine carries within the objectives (the engine model at the roofline, recorded per model as a fact), `current`
its engines and "burning" the reactive scale-out ratio at or over `fraction_of_slo`. The ScaledObject reads it as
an AverageValue of 1 per replica, so the HPA KEDA creates runs ceil(desired) replicas, with a `behavior` that
scales up at once and down one pod per 30 s after three quiet minutes; the HPA variant reads the same series
through prometheus-adapter (`slokit_autoscale_replicas_desired`) with the same target and `behavior`.

Models the engine model cannot size (no planner preset or GPU, or objectives no batch meets) get no signal; the
reactive HPA and ScaledObject from k8s.py remain theirs.

Rule engines (`slokit generate --engine`): Thanos Ruler and Mimir's ruler evaluate a group's rules in order, as
Prometheus does, so the signal is written for them with their own group fields (Mimir's file in its own namespace,
so a `mimirtool rules sync` of the main file alone never removes it); promtool tests only for Prometheus, as for
the main rules. vmalert gets none: it writes each record through remote write, so a rule never reads another's
result of the same evaluation, and this chain of records, five deep, would act four evaluations (60 s) late; the
reactive HPA and ScaledObject remain for it.
"""

from __future__ import annotations

from typing import Any, Final

from slokit import promql, schema
from slokit.autoscale.engine import EngineModelError, from_plan
from slokit.autoscale.hpa import DEFAULT_BEHAVIOR
from slokit.autoscale.policies import RATE_WINDOW, SignalSettings
from slokit.autoscale.sizing import model_capacity
from slokit.generate import k8s
from slokit.generate.engines import DEFAULT, Engine, group_fields, mimir_namespace
from slokit.generate.model import RecordingRule, RuleGroup
from slokit.generate.queries import Queries
from slokit.spec import Model, Spec
from slokit.units import prom_duration

INTERVAL: Final = "15s"
CAPACITY_DIGITS: Final = 6
SETTINGS: Final = SignalSettings(capacity=1.0)  # the defaults; capacity is per model
# Scale up as fast as Kubernetes does by default; scale down one pod at a time.
BEHAVIOR: Final[dict[str, Any]] = {
    "scaleUp": DEFAULT_BEHAVIOR["scaleUp"],
    "scaleDown": {
        "stabilizationWindowSeconds": 180,
        "selectPolicy": "Min",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}],
    },
}


def capacities(spec: Spec) -> dict[str, float]:
    """Requests/s per engine at the objectives, for each model the engine model can size."""
    out: dict[str, float] = {}
    for model in spec.models:
        if not spec.classes_on(model.name):
            continue
        try:
            value = model_capacity(spec, model, from_plan(spec, model))
        except EngineModelError:
            continue
        if value != float("inf"):
            out[model.name] = value
    return out


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m" if seconds % 60 == 0 else f"{int(seconds)}s"


def recording_rules(spec: Spec, sized: dict[str, float]) -> list[RecordingRule]:
    """The capacity facts, the 1m request rate and the desired replicas, once for the fleet."""
    metrics = spec.metrics
    q = Queries(spec)
    service = {schema.RULE_LABEL_SERVICE: spec.service}
    rules = [
        RecordingRule(
            schema.RECORD_AUTOSCALE_CAPACITY,
            f"vector({promql.number(round(value, CAPACITY_DIGITS))})",
            {**service, schema.RULE_LABEL_MODEL: name},
        )
        for name, value in sized.items()
    ]
    terms = []
    for term in q.raw_terms(metrics.requests_finished, list(sized)):
        by = [metrics.model_label] if metrics.model_label is not None else []
        expr = f"sum {promql.by(by)} (rate({term.selector}[1m]))"
        if metrics.model_label is not None:
            expr = promql.rename_label(expr, metrics.model_label, schema.RULE_LABEL_MODEL)
        else:
            expr = f'label_replace({expr}, "{schema.RULE_LABEL_MODEL}", {promql.quote(term.models[0])}, "", "")'
        terms.append(expr)
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_RATE, "\nor\n".join(terms), service))
    s = SETTINGS
    keys = f"({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL})"
    rate = q.recorded(schema.RECORD_AUTOSCALE_RATE)
    trend = f"({rate} + clamp_min(deriv({rate}[{_minutes(s.trend_window)}]), 0) * {s.horizon:g})"
    # The same hour yesterday, `horizon` ahead, scaled by today over yesterday (none where yesterday had none).
    same = f"({rate} offset {_minutes(86400 - s.horizon)} * clamp({rate} / ({rate} offset 1d > 0), 0.5, 2))"
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_FORECAST, f"({trend} >= {same})\nor {same}\nor {trend}"))
    forecast = q.recorded(schema.RECORD_AUTOSCALE_FORECAST)
    capacity = q.recorded(schema.RECORD_AUTOSCALE_CAPACITY)
    # The load now over the forecast made `horizon` ago, less Poisson noise, where that forecast was at least
    # `miss_floor` engines' load (policies.miss).
    then = f"({forecast} offset {_minutes(s.horizon)} >= on {keys} ({capacity} * {s.miss_floor:g}))"
    noise = f"{s.miss_sigmas:g} * sqrt({then} / {RATE_WINDOW / 2:g})"
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_MISS, f"({rate} - {noise})\n/ on {keys} {then}"))
    # The headroom: the largest miss of the last day less one, between the default and the most (policies.headroom_of).
    worst = f"max_over_time({q.recorded(schema.RECORD_AUTOSCALE_MISS)}[{prom_duration(s.miss_window)}])"
    headroom = f"clamp({worst} - 1, {s.headroom:g}, {s.max_headroom:g})\nor {rate} * 0 + {s.headroom:g}"
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_HEADROOM, headroom))
    with_headroom = f"{forecast} * on {keys} (1 + {q.recorded(schema.RECORD_AUTOSCALE_HEADROOM)})"
    spare = capacity if s.spare == 1 else f"{capacity} * {s.spare:g}"
    spared = f"{forecast} + on {keys} {spare}"
    waiting = f"(sum by {keys} ({q.recorded(schema.RECORD_QUEUE_WAITING)}) or {rate} * 0)"
    needed = (
        f"(\n  (({with_headroom} >= on {keys} ({spared})) or ({spared}))\n"
        f"  + on {keys} {waiting} / {s.drain:g}\n)\n/ on {keys} {capacity}"
    )
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_NEEDED, needed))
    current = f"count by {keys} ({q.recorded(schema.RECORD_QUEUE_RUNNING)})"
    burning = f"max by {keys} ({q.recorded(schema.RECORD_SCALE_OUT)}) >= {spec.alerting.scale_out.fraction_of_slo:g}"
    floor = f"(({current} + 1) and on {keys} ({burning}))"
    needed = q.recorded(schema.RECORD_AUTOSCALE_NEEDED)
    desired = f"clamp_min(\n  ({needed} >= on {keys} {floor})\n  or {floor}\n  or {needed},\n  1\n)"
    rules.append(RecordingRule(schema.RECORD_AUTOSCALE_DESIRED, desired))
    return rules


def rule_group(spec: Spec, sized: dict[str, float], engine: Engine = DEFAULT) -> RuleGroup:
    """The group, evaluated every 15s (the ScaledObject polls as often), with the engine's own group fields."""
    return RuleGroup(f"slokit-{spec.service}-autoscale", INTERVAL, tuple(recording_rules(spec, sized)),
                     group_fields(engine))  # fmt: skip


def scaled_object(spec: Spec, model: Model) -> dict[str, Any]:
    """A KEDA ScaledObject running ceil(desired) replicas of the model's Deployment."""
    labels = f'{schema.RULE_LABEL_SERVICE}="{spec.service}",{schema.RULE_LABEL_MODEL}="{model.name}"'
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _metadata(spec, model, "this ScaledObject or the predictive HPA"),
        "spec": {
            "scaleTargetRef": k8s.scale_target(spec, model),
            "minReplicaCount": k8s.MIN_REPLICAS,
            "maxReplicaCount": k8s.MAX_REPLICAS,
            "pollingInterval": 15,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": BEHAVIOR}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": k8s.PROMETHEUS_URL,
                        "query": f"max({schema.RECORD_AUTOSCALE_DESIRED}{{{labels}}})",
                        "threshold": "1",
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }


def hpa(spec: Spec, model: Model) -> dict[str, Any]:
    """The same policy as an autoscaling/v2 HPA: ceil(desired) replicas through prometheus-adapter's external
    metric (`k8s.adapter_rules`), an AverageValue of 1 per replica, with the same `behavior`."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec, model, "this HPA or the predictive ScaledObject"),
        "spec": {
            "scaleTargetRef": k8s.scale_target(spec, model),
            "minReplicas": k8s.MIN_REPLICAS,
            "maxReplicas": k8s.MAX_REPLICAS,
            "metrics": [
                k8s.external_metric(
                    spec, model, schema.EXTERNAL_AUTOSCALE_DESIRED_METRIC, {"type": "AverageValue", "averageValue": "1"}
                )
            ],
            "behavior": BEHAVIOR,
        },
    }


def _metadata(spec: Spec, model: Model, this: str) -> dict[str, Any]:
    """`<deployment>-predictive`, the reactive autoscalers' labels, and a note that only one autoscaler may run."""
    note = (
        f"slokit's predictive policy (docs/autoscale.md). Apply {this}, or the reactive HPA/ScaledObject, for the "
        "same Deployment, never two: each creates an HPA and they would fight." + k8s.target_note(spec)
    )
    return {
        "name": f"{k8s.deployment_name(spec, model)}-predictive",
        "labels": k8s.autoscaler_labels(spec, model),
        "annotations": {f"{k8s.DOMAIN}/note": note},
    }


def rules_path(spec: Spec) -> str:
    """`rules/<service>.autoscale.rules.yaml`."""
    return f"rules/{spec.service}.autoscale.rules.yaml"


def mimir_autoscale_namespace(service: str) -> str:
    """The Mimir ruler namespace of the signal's rule file: its own, beside the main file's."""
    return f"{mimir_namespace(service)}-autoscale"


ENGINES: Final = (Engine.PROMETHEUS, Engine.THANOS, Engine.MIMIR)
"""The rule engines the signal is written for (module docstring: vmalert would act four evaluations late)."""


def files(spec: Spec, engine: Engine = DEFAULT) -> dict[str, Any]:
    """The rule file, its promtool test (Prometheus only) and per sized model a ScaledObject and an HPA, either of
    which runs the policy (nothing when none is sized, or for vmalert)."""
    sized = capacities(spec)
    if not sized or engine not in ENGINES:
        return {}
    from slokit.generate.autoscale_tests import unit_tests

    data: dict[str, Any] = {"groups": [rule_group(spec, sized, engine).to_data()]}
    if engine is Engine.MIMIR:
        data = {"namespace": mimir_autoscale_namespace(spec.service), **data}
    out: dict[str, Any] = {rules_path(spec): data}
    if engine is Engine.PROMETHEUS:
        out[f"rules/{spec.service}.autoscale.rules.test.yaml"] = unit_tests(spec, sized)
    for model in spec.models:
        if model.name in sized:
            prefix = f"exporters/{k8s.deployment_name(spec, model)}-predictive"
            out[f"{prefix}-keda.yaml"] = scaled_object(spec, model)
            out[f"{prefix}-hpa.yaml"] = hpa(spec, model)
    if not any(k8s.has_scale_out_signal(spec, model) for model in spec.models):
        # k8s.files writes the adapter rules only for the reactive signal; the predictive HPA needs them too.
        out[k8s.adapter_path(spec)] = k8s.adapter_configmap(spec)
    return out
