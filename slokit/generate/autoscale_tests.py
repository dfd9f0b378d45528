"""promtool tests of the predictive signal: the recorded desired replicas equal what the replay's `signal` function
computes from the same inputs, in four cases (steady load with a queue, the burn floor, the same hour yesterday
with the spare engine, a burst the forecast missed raising the headroom).

The test loads the autoscale rule file alone and feeds the series it reads from the main rules (queues, running
engines, the scale-out ratio) as inputs, so it checks the signal's own arithmetic and joins.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from slokit import schema
from slokit.autoscale.policies import miss, signal
from slokit.generate.autoscale import CAPACITY_DIGITS, SETTINGS
from slokit.spec import Spec

STEP: Final = 15  # seconds between input samples
SCALE: Final = 1000


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _counter(spec: Spec, model: str, segments: list[tuple[float, int]]) -> dict[str, Any]:
    """A finished-request counter at `rate` req/s for `count` samples per segment."""
    metrics = spec.metrics
    selector = dict(spec.model(model).selector)
    if metrics.model_label is not None:
        selector[metrics.model_label] = model
    if metrics.class_label is not None:
        selector[metrics.class_label] = spec.classes_on(model)[0].name
    if metrics.finish_reason_label:
        selector[metrics.finish_reason_label] = "stop"
    parts, value = [], 0.0
    for rate, count in segments:
        parts.append(f"{value!r}+{rate * STEP!r}x{count}")
        value += rate * STEP * (count + 1)
    return {"series": metrics.requests_finished + _labels(selector), "values": " ".join(parts)}


def _recorded(record: str, spec: Spec, model: str, value: float, count: int, **extra: str) -> dict[str, Any]:
    labels = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model, **extra}
    return {"series": record + _labels(labels), "values": f"{value:g}x{count}"}


def _expect(spec: Spec, model: str, value: float, at: str) -> dict[str, Any]:
    """The recorded replicas at `at`, in thousandths (promtool compares floats exactly; both sides round)."""
    return {
        "expr": f'round({schema.RECORD_AUTOSCALE_DESIRED}{{{schema.RULE_LABEL_MODEL}="{model}"}} * {SCALE})',
        "eval_time": at,
        "exp_samples": [
            {
                "labels": _labels({schema.RULE_LABEL_MODEL: model, schema.RULE_LABEL_SERVICE: spec.service}),
                "value": float(round(value * SCALE)),
            }
        ],
    }


def unit_tests(spec: Spec, sized: dict[str, float]) -> dict[str, Any]:
    """One test per case for the first sized model (the rules are one expression for the fleet)."""
    from slokit.generate.autoscale import rules_path

    model = next(iter(sized))
    cap = round(sized[model], CAPACITY_DIGITS)  # as recorded
    settings = replace(SETTINGS, capacity=cap, fraction=spec.alerting.scale_out.fraction_of_slo)
    tests: list[dict[str, Any]] = []
    # 1. Steady 8 * capacity req/s with 30 requests queued: the forecast at headroom (more than one spare engine
    # at this load) plus the queue's drain.
    minutes = 10
    n = minutes * 60 // STEP
    rate = 8 * cap
    tests.append(
        {
            "interval": f"{STEP}s",
            "input_series": [
                _counter(spec, model, [(rate, n)]),
                _recorded(schema.RECORD_QUEUE_WAITING, spec, model, 30, n, instance="a", engine="0"),
            ],
            "promql_expr_test": [_expect(spec, model, signal(settings, rate, 0.0, None, 30, 0.0, 1), f"{minutes}m")],
        }
    )
    # 2. Burning: a trickle, three engines running, the scale-out ratio over its fraction: one more than now.
    burn = settings.fraction + 0.1
    slo_labels = {schema.RULE_LABEL_CLASS: "x", schema.RULE_LABEL_SLO: "ttft"}  # any class of the model
    trickle = 0.1 * cap
    tests.append(
        {
            "interval": f"{STEP}s",
            "input_series": [
                _counter(spec, model, [(trickle, n)]),
                *[_recorded(schema.RECORD_QUEUE_RUNNING, spec, model, 4, n, instance=i, engine="0") for i in "abc"],
                _recorded(schema.RECORD_SCALE_OUT, spec, model, burn, n, **slo_labels),
            ],
            "promql_expr_test": [_expect(spec, model, signal(settings, trickle, 0.0, None, 0, burn, 3), f"{minutes}m")],
        }
    )
    # 3. The same hour yesterday: cap req/s now (1d + 10m) and a day ago, 3 x cap two minutes later yesterday. That
    # step, a day ago, was also a miss (3 x the forecast): still within the day, it sets the headroom (at its most).
    day = 86400 // STEP
    early, busy = 40, 12  # 10 minutes at cap, 3 minutes at 3 x cap, then cap for the rest of the day
    tests.append(
        {
            "interval": f"{STEP}s",
            "input_series": [_counter(spec, model, [(cap, early), (3 * cap, busy), (cap, day + 40 - early - busy)])],
            "promql_expr_test": [
                _expect(
                    spec,
                    model,
                    signal(settings, cap, 0.0, 3 * cap, 0, 0.0, 1, miss(settings, 3 * cap, cap) or 0),
                    "1450m",
                )
            ],
        }
    )
    # 4. A burst: 4 x cap for 10 minutes, then 8 x cap. Three minutes after the step the load is twice the forecast
    # made before it; 20 minutes later the trend is flat again, and that miss still sets the headroom.
    step, total = 40, 120
    worst = miss(settings, 8 * cap, 4 * cap)
    assert worst is not None and worst - 1 > settings.headroom
    tests.append(
        {
            "interval": f"{STEP}s",
            "input_series": [_counter(spec, model, [(4 * cap, step), (8 * cap, total - step)])],
            "promql_expr_test": [
                _expect(spec, model, signal(settings, 8 * cap, 0.0, None, 0, 0.0, 1, worst), f"{total * STEP // 60}m")
            ],
        }
    )
    # 5. Steady 2 x cap: a quarter more is less than one engine, so one spare engine it is.
    tests.append(
        {
            "interval": f"{STEP}s",
            "input_series": [_counter(spec, model, [(2 * cap, n)])],
            "promql_expr_test": [_expect(spec, model, signal(settings, 2 * cap, 0.0, None, 0, 0.0, 1), f"{minutes}m")],
        }
    )
    return {
        "rule_files": [rules_path(spec).removeprefix("rules/")],
        "evaluation_interval": "1m",  # a day of history: 1440 evaluations, not 5760
        "tests": tests,
    }
