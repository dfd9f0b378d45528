"""Recording rules: from raw latency histograms to SLI increases, error ratios, burn rates, quantiles and signals.

The shape, and why:

* **One raw read per histogram.** Every latency histogram is read once per evaluation, as per-engine bucket rates
  over 5m (`slokit_engine:latency_bucket:rate5m`). Quantiles, the 5m SLI counts (`+Inf` and threshold bucket x
  300 s) and everything above them read recorded series only.
* **Long windows are tiled, not averaged.** A window W is a sum of recorded smaller windows laid end to end with
  `offset` (1h = 30m + 30m offset 30m; 1d = 4 x 6h; 28d = 9 x 3d + 1d). Each term is one sample per series, so a
  28d window costs about ten samples instead of the 161,280 raw samples per bucket series that `increase(x[28d])`
  reads at a 15s scrape. Because every group records at fixed times (t, t - interval, ...), a block read at an
  offset that is a multiple of its group's interval ends exactly where the next one starts: the tiles cover
  (t - W, t] with no gap and no overlap, unlike `sum_over_time(x[W:5m])`, whose steps are aligned to absolute time
  and so drop up to 5m at the window's recent edge. It is event-weighted (sum of good over sum of all).
  A term with no history yet (the first days after rollout, a new model) counts as zero events, so long windows
  exist from the first evaluation and converge as history accumulates.
* **No NaN.** The error ratio is 0 when a window saw no events (there was nothing to be slow), quantiles are absent
  at zero traffic (a quantile of nothing is undefined, and an absent series never pages), and the scale-out ratio
  is 0 at zero traffic, so autoscalers always read a number.
* **Groups by window length.** 5m to 1h every 30s (the page tiers read them), 2h to 6h and the baselines every 1m,
  1d and longer every 2m (under the 5m lookback, so readers never see a stale gap on Prometheus 2 or 3).

Labels on every SLO series: service, model, class, slo; engine on `slokit_engine:*`; quantile on quantile records.
Rules run unchanged on Prometheus, Thanos Ruler and Mimir ruler (plain PromQL, no subqueries, no `@`), and are
also written as a prometheus-operator PrometheusRule.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from slokit import promql, schema
from slokit.generate import alerts
from slokit.generate.model import AlertRule, RecordingRule, RuleGroup
from slokit.promql import INF_MATCHER, Matcher, eq, le_matcher, number, one_of, selector
from slokit.schema import Sli
from slokit.spec import PERCENTILES, RequestClass, Spec
from slokit.units import prom_duration

# The SLI windows every objective gets (plus the burn-rate windows and the SLO window of the spec).
STANDARD_WINDOWS: Final = (300.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0, 3 * 86400.0)
BASE_WINDOW: Final = 300.0  # read from the recorded bucket rates
DASHBOARD_QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
BASELINE_QUANTILE: Final = 0.99

# Group evaluation intervals by window length (seconds).
SHORT_INTERVAL: Final = 30.0
MEDIUM_INTERVAL: Final = 60.0
LONG_INTERVAL: Final = 120.0

SLO_LABELS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)


@dataclass(frozen=True)
class WindowPlan:
    """Where a window is recorded and how it is built."""

    window: float
    interval: float
    blocks: tuple[promql.Block, ...]  # empty: the base window (from bucket rates) or read from raw


def sli_windows(spec: Spec) -> list[float]:
    """Every window an objective gets an SLI record for, ascending."""
    windows = set(STANDARD_WINDOWS)
    for burn in spec.alerting.burn_rates:
        windows.update((burn.long, burn.short))
    windows.add(spec.window)
    return sorted(windows)


def window_interval(window: float) -> float:
    """The evaluation interval of the group that records `window`."""
    if window <= 3600:
        return SHORT_INTERVAL
    if window < 86400:
        return MEDIUM_INTERVAL
    return LONG_INTERVAL


def window_plans(spec: Spec) -> list[WindowPlan]:
    """How each SLI window is computed: the base window from bucket rates, every other one tiled from smaller ones."""
    plans: list[WindowPlan] = []
    recorded: list[float] = []
    step_of: dict[float, float] = {}
    for window in sli_windows(spec):
        interval = window_interval(window)
        if window == BASE_WINDOW:
            plans.append(WindowPlan(window, interval, ()))
        else:
            try:
                blocks = tuple(promql.tile(window, recorded, step_of))
            except ValueError:
                blocks = ()  # read from raw counters: only for windows that are not a sum of recorded ones
            plans.append(WindowPlan(window, interval, blocks))
        recorded.append(window)
        step_of[window] = interval
    return plans


def w(seconds: float) -> str:
    """The window's Prometheus spelling as used in record names (`5m`, `1d`, `28d`)."""
    return prom_duration(seconds)


# ==============================================================================================================
# Selectors of raw series per source
# ==============================================================================================================
def _service(spec: Spec) -> Matcher:
    return eq(schema.RULE_LABEL_SERVICE, spec.service)


def _objective_slos(spec: Spec) -> list[tuple[RequestClass, Sli]]:
    return [(rc, sli) for rc in spec.classes for sli, slo in rc.slos.items() if slo.objective is not None]


def _raw_matchers(spec: Spec, models: Iterable[str], request_class: RequestClass | None) -> list[Matcher]:
    metrics = spec.metrics
    matchers = [one_of(metrics.model_label, sorted(set(models)))]
    if request_class is not None and metrics.class_label is not None:
        matchers.append(eq(metrics.class_label, request_class.name))
    return matchers


def _aggregate(spec: Spec, op: str, inner: str, labels: Iterable[str]) -> str:
    """`op by (labels) (inner)` in the source's label names, then renamed to slokit's (`model_name` -> `model`)."""
    metrics = spec.metrics
    own = {schema.RULE_LABEL_MODEL: metrics.model_label, schema.RULE_LABEL_ENGINE: metrics.engine_label}
    labels = list(labels)
    names = [own.get(label, label) for label in labels]
    expr = promql.rename_label(f"{op} {promql.by(names)} ({inner})", metrics.model_label, schema.RULE_LABEL_MODEL)
    if schema.RULE_LABEL_ENGINE in labels:
        expr = promql.rename_label(expr, metrics.engine_label, schema.RULE_LABEL_ENGINE)
    return expr


def _with_class(spec: Spec, request_class: RequestClass, expr: str) -> str:
    """Write the class onto a per-class expression when the source has no class label (vLLM's own metrics)."""
    if spec.metrics.class_label is not None:
        return expr
    return f'label_replace({expr}, "{schema.RULE_LABEL_CLASS}", {promql.quote(request_class.name)}, "", "")'


def _histogram_matchers(spec: Spec, rc: RequestClass, sli: Sli, *extra: Matcher) -> list[Matcher]:
    """Matchers of one class's SLI histogram: its model label over the class's models, then its own selector."""
    hist = spec.histogram(rc, sli)
    matchers: list[Matcher] = []
    if hist.model_label is not None:
        matchers.append(one_of(hist.model_label, sorted(set(rc.models))))
    return [*matchers, *hist.matchers, *extra]


def _histogram_sum(spec: Spec, rc: RequestClass, sli: Sli, inner: str, group: Iterable[str]) -> str:
    """`sum by (group) (inner)` over one class's SLI histogram, its labels renamed to slokit's (model, engine,
    class): the source's label names, a custom histogram's own, or written on when the series lack them."""
    hist = spec.histogram(rc, sli)
    class_label = spec.metrics.class_label if rc.slos[sli].metric is None else None
    names: list[str] = []
    for label in group:
        if label == schema.RULE_LABEL_MODEL:
            if hist.model_label is not None:
                names.append(hist.model_label)
        elif label == schema.RULE_LABEL_ENGINE:
            names.append(hist.engine_label)
        elif label == schema.RULE_LABEL_CLASS:
            if class_label is not None:
                names.append(class_label)
        else:
            names.append(label)
    expr = f"sum {promql.by(names)} ({inner})"
    if hist.model_label is not None:
        expr = promql.rename_label(expr, hist.model_label, schema.RULE_LABEL_MODEL)
    else:
        expr = f'label_replace({expr}, "{schema.RULE_LABEL_MODEL}", {promql.quote(rc.models[0])}, "", "")'
    if schema.RULE_LABEL_ENGINE in group:
        expr = promql.rename_label(expr, hist.engine_label, schema.RULE_LABEL_ENGINE)
    if class_label is None:
        expr = f'label_replace({expr}, "{schema.RULE_LABEL_CLASS}", {promql.quote(rc.name)}, "", "")'
    return expr


def threshold_le(spec: Spec, rc: RequestClass, sli: Sli, seconds: float) -> Matcher:
    """The `le` matcher of a threshold in the histogram's own unit (500 for 0.5 s on a millisecond histogram)."""
    return le_matcher(spec.histogram(rc, sli).le_for(seconds))


def _union(terms: Iterable[str]) -> str:
    """Per-class expressions joined with `or`: their label sets differ by class, so nothing is dropped."""
    return "\nor\n".join(terms)


def _all_models(spec: Spec) -> list[str]:
    return [m.name for m in spec.models]


# ==============================================================================================================
# Rule builders
# ==============================================================================================================
def _bucket_rate_rules(spec: Spec) -> list[RecordingRule]:
    rules: list[RecordingRule] = []
    for sli in Sli:
        terms = []
        for rc in spec.classes:
            if sli not in rc.slos:
                continue
            raw = selector(spec.histogram(rc, sli).name + "_bucket", _histogram_matchers(spec, rc, sli))
            group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_ENGINE, "le"]
            terms.append(_histogram_sum(spec, rc, sli, f"rate({raw}[5m])", group))
        if terms:
            labels = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_SLO: sli.value}
            rules.append(RecordingRule(schema.RECORD_LATENCY_BUCKET_RATE, _union(terms), labels))
    return rules


def _own_histogram_rate(spec: Spec, rc: RequestClass) -> str | None:
    """Requests/s of a class whose SLOs all read their own histograms (the source's request counter may not
    exist): the `+Inf` bucket rate of a per-request SLI (not ITL, which counts tokens)."""
    if not rc.slos or any(slo.metric is None for slo in rc.slos.values()):
        return None
    sli = next((s for s in rc.slos if s is not Sli.ITL), next(iter(rc.slos)))
    rates = selector(
        schema.RECORD_LATENCY_BUCKET_RATE,
        [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value), INF_MATCHER],
    )
    return f"sum by ({schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS}) ({rates})"


def _request_rate_rules(spec: Spec) -> list[RecordingRule]:
    metrics = spec.metrics
    own = {rc.name: _own_histogram_rate(spec, rc) for rc in spec.classes}
    if any(own.values()):
        terms = []
        for rc in spec.classes:
            term = own[rc.name]
            if term is None:
                raw = selector(metrics.requests_finished, _raw_matchers(spec, rc.models, rc))
                group = [schema.RULE_LABEL_MODEL] + ([schema.RULE_LABEL_CLASS] if metrics.class_label else [])
                term = _with_class(spec, rc, _aggregate(spec, "sum", f"rate({raw}[5m])", group))
            terms.append(term)
        return [RecordingRule(schema.RECORD_REQUEST_RATE, _union(terms), {schema.RULE_LABEL_SERVICE: spec.service})]
    if metrics.class_label is not None:
        raw = selector(
            metrics.requests_finished,
            [
                one_of(metrics.model_label, _all_models(spec)),
                one_of(metrics.class_label, [c.name for c in spec.classes]),
            ],
        )
        expr = _aggregate(spec, "sum", f"rate({raw}[5m])", [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS])
        return [RecordingRule(schema.RECORD_REQUEST_RATE, expr, {schema.RULE_LABEL_SERVICE: spec.service})]
    terms = []
    for rc in spec.classes:
        raw = selector(metrics.requests_finished, _raw_matchers(spec, rc.models, None))
        terms.append(_with_class(spec, rc, _aggregate(spec, "sum", f"rate({raw}[5m])", [schema.RULE_LABEL_MODEL])))
    return [RecordingRule(schema.RECORD_REQUEST_RATE, _union(terms), {schema.RULE_LABEL_SERVICE: spec.service})]


def _quantile_rules(spec: Spec) -> list[RecordingRule]:
    quantiles = set(DASHBOARD_QUANTILES)
    for rc in spec.classes:
        for slo in rc.slos.values():
            for tier in ("target", "acceptable", "critical"):
                quantiles.update(PERCENTILES[p] for p in slo.tiers.tier(tier))
    # Histograms in another unit than seconds (unit: ms) get their own rules, scaled back to seconds.
    scaled = [
        (rc, sli, spec.histogram(rc, sli).scale)
        for rc in spec.classes
        for sli in rc.slos
        if spec.histogram(rc, sli).scale != 1.0
    ]
    parts: list[tuple[list[Matcher], float]] = [([_service(spec)], 1.0)]
    for rc, sli, scale in scaled:
        parts.append(
            ([_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value)], scale)
        )
    others = " or ".join(
        f"group by ({schema.RULE_LABEL_CLASS}, {schema.RULE_LABEL_SLO}) "
        f"({selector(schema.RECORD_LATENCY_BUCKET_RATE, matchers)})"
        for matchers, _ in parts[1:]
    )
    rules: list[RecordingRule] = []
    for record, extra in ((schema.RECORD_LATENCY_QUANTILE, ()), (schema.RECORD_ENGINE_LATENCY_QUANTILE, ("engine",))):
        keys = [*SLO_LABELS, *extra]
        on = f"on ({', '.join(keys)})"
        for q in sorted(quantiles):
            exprs = []
            for matchers, scale in parts:
                rates = selector(schema.RECORD_LATENCY_BUCKET_RATE, matchers)
                totals = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, INF_MATCHER])
                # Only where the window saw requests: histogram_quantile of all-zero buckets is NaN.
                expr = (
                    f"histogram_quantile({number(q)}, sum {promql.by([*keys, 'le'])} ({rates}) "
                    f"and {on} (sum {promql.by(keys)} ({totals}) > 0))"
                )
                if scale != 1.0:
                    expr = f"{expr} * {number(scale)}"
                elif others:
                    expr = f"({expr}\nunless on ({schema.RULE_LABEL_CLASS}, {schema.RULE_LABEL_SLO}) ({others}))"
                exprs.append(expr)
            rules.append(RecordingRule(record, _union(exprs), {"quantile": number(q)}))
    return rules


def _objective_rules(spec: Spec) -> list[RecordingRule]:
    rules = []
    for rc, sli in _objective_slos(spec):
        objective = rc.slos[sli].objective
        assert objective is not None
        for model in rc.models:
            labels = {
                schema.RULE_LABEL_SERVICE: spec.service,
                schema.RULE_LABEL_MODEL: model,
                schema.RULE_LABEL_CLASS: rc.name,
                schema.RULE_LABEL_SLO: sli.value,
            }
            rules.append(RecordingRule(schema.RECORD_OBJECTIVE, f"vector({number(objective.target_ratio)})", labels))
    return rules


def _base_window_rules(spec: Spec) -> list[RecordingRule]:
    """5m total and good events per SLO, from the recorded bucket rates (rate x 300 s = increase over 5m)."""
    totals, goods = [], []
    seconds = number(BASE_WINDOW)
    for rc, sli in _objective_slos(spec):
        objective = rc.slos[sli].objective
        assert objective is not None
        base = [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value)]
        total = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*base, INF_MATCHER])
        good = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*base, threshold_le(spec, rc, sli, objective.threshold)])
        by = promql.by(SLO_LABELS)
        totals.append(f"sum {by} ({total}) * {seconds}")
        goods.append(f"sum {by} ({good}) * {seconds}")
    return [
        RecordingRule(schema.record_sli_total(w(BASE_WINDOW)), _union(totals)),
        RecordingRule(schema.record_sli_good(w(BASE_WINDOW)), _union(goods)),
    ]


def _tiled(name: Callable[[str], str], spec: Spec, plan: WindowPlan) -> str:
    """Sum of the plan's blocks; history a block does not have yet counts as zero events."""
    first = plan.blocks[0]
    head = selector(name(w(first.window)), [_service(spec)])
    terms = [head]
    for block in plan.blocks[1:]:
        past = selector(name(w(block.window)), [_service(spec)]) + f" offset {prom_duration(block.offset)}"
        terms.append(f"({past} or {head} * 0)")
    return "\n  + ".join(terms)


def _raw_window(name: Callable[[str], str], spec: Spec, plan: WindowPlan) -> RecordingRule:
    """A window that cannot be tiled from recorded ones: read the raw counters (costly; only for odd windows)."""
    terms = []
    for rc, sli in _objective_slos(spec):
        objective = rc.slos[sli].objective
        assert objective is not None
        le = INF_MATCHER if name is schema.record_sli_total else threshold_le(spec, rc, sli, objective.threshold)
        raw = selector(spec.histogram(rc, sli).name + "_bucket", _histogram_matchers(spec, rc, sli, le))
        group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS]
        expr = _histogram_sum(spec, rc, sli, f"increase({raw}[{prom_duration(plan.window)}])", group)
        terms.append(f'label_replace({expr}, "slo", "{sli.value}", "", "")')
    return RecordingRule(name(w(plan.window)), _union(terms), {schema.RULE_LABEL_SERVICE: spec.service})


def _window_rules(spec: Spec, plan: WindowPlan) -> list[RecordingRule]:
    rules: list[RecordingRule] = []
    window = w(plan.window)
    if plan.window == BASE_WINDOW:
        rules.extend(_base_window_rules(spec))
    elif plan.blocks:
        for name in (schema.record_sli_total, schema.record_sli_good):
            rules.append(RecordingRule(name(window), _tiled(name, spec, plan)))
    else:
        rules.append(_raw_window(schema.record_sli_total, spec, plan))
        rules.append(_raw_window(schema.record_sli_good, spec, plan))
    total = selector(schema.record_sli_total(window), [_service(spec)])
    good = selector(schema.record_sli_good(window), [_service(spec)])
    # 0 when the window saw no events; never NaN or +Inf, so nothing downstream is poisoned.
    ratio = f"clamp_min({total} - {good}, 0) / ({total} > 0)\nor\n{total} * 0"
    rules.append(RecordingRule(schema.record_error_ratio(window), ratio))
    objective = selector(schema.RECORD_OBJECTIVE, [_service(spec)])
    burn = (
        f"{selector(schema.record_error_ratio(window), [_service(spec)])}\n"
        f"/ on ({', '.join(SLO_LABELS)}) (1 - {objective})"
    )
    rules.append(RecordingRule(schema.record_burn_rate(window), burn))
    return rules


def _budget_rule(spec: Spec) -> RecordingRule:
    burn = selector(schema.record_burn_rate(w(spec.window)), [_service(spec)])
    return RecordingRule(schema.RECORD_ERROR_BUDGET_REMAINING, f"1 - {burn}")


def _baseline_rule(spec: Spec) -> RecordingRule:
    baseline = spec.alerting.baseline
    quantile = selector(schema.RECORD_LATENCY_QUANTILE, [_service(spec), eq("quantile", number(BASELINE_QUANTILE))])
    rate = selector(schema.RECORD_REQUEST_RATE, [_service(spec)])
    on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS})"

    def at(offset: float) -> str:
        # The p99 of that 5m, only if it had enough traffic to mean something.
        dur = prom_duration(offset)
        guard = f"({rate} offset {dur} >= {number(baseline.min_rps)})"
        return f"max without (quantile) ({quantile} offset {dur}) and {on} {guard}"

    if baseline.median_days < 2:
        return RecordingRule(schema.RECORD_P99_BASELINE, at(baseline.offset))
    days = [
        f'label_replace({at(baseline.offset * day)}, "baseline_day", "{day}", "", "")'
        for day in range(1, baseline.median_days + 1)
    ]
    expr = "quantile without (baseline_day) (0.5,\n  " + "\n  or ".join(days) + "\n)"
    return RecordingRule(schema.RECORD_P99_BASELINE, expr)


def _consistency_rules(spec: Spec) -> list[RecordingRule]:
    terms = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.consistency is None:
                continue
            base = [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value)]
            p99 = selector(schema.RECORD_LATENCY_QUANTILE, [*base, eq("quantile", "0.99")])
            p50 = selector(schema.RECORD_LATENCY_QUANTILE, [*base, eq("quantile", "0.5")])
            terms.append(f"max without (quantile) ({p99}) / max without (quantile) ({p50} > 0)")
    return [RecordingRule(schema.RECORD_CONSISTENCY, _union(terms))] if terms else []


def _scale_out_rules(spec: Spec) -> list[RecordingRule]:
    """p99 TTFT over the TTFT objective threshold, per model and class; 0 at zero traffic."""
    terms = []
    for rc in spec.classes:
        slo = rc.slos.get(Sli.TTFT)
        if slo is None or slo.objective is None:
            continue
        base = [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, Sli.TTFT.value)]
        p99 = selector(schema.RECORD_LATENCY_QUANTILE, [*base, eq("quantile", "0.99")])
        idle = selector(schema.record_sli_total(w(BASE_WINDOW)), base)
        terms.append(f"(max without (quantile) ({p99}) / {number(slo.objective.threshold)} or {idle} * 0)")
    return [RecordingRule(schema.RECORD_SCALE_OUT, _union(terms))] if terms else []


def _engine_rules(spec: Spec) -> list[RecordingRule]:
    metrics = spec.metrics
    models = [one_of(metrics.model_label, _all_models(spec))]
    keys = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_ENGINE]
    labels = {schema.RULE_LABEL_SERVICE: spec.service}

    def rule(record: str, op: str, inner: str) -> RecordingRule:
        return RecordingRule(record, _aggregate(spec, op, inner, keys), labels)

    return [
        rule(schema.RECORD_QUEUE_WAITING, "max", f"max_over_time({selector(metrics.requests_waiting, models)}[1m])"),
        rule(schema.RECORD_QUEUE_RUNNING, "max", f"max_over_time({selector(metrics.requests_running, models)}[1m])"),
        rule(schema.RECORD_KV_CACHE_USAGE, "max", selector(metrics.kv_cache_usage, models)),
        rule(schema.RECORD_PREEMPTIONS, "sum", f"rate({selector(metrics.preemptions, models)}[5m])"),
        rule(schema.RECORD_DECODE_TOKENS, "sum", f"rate({selector(metrics.generation_tokens, models)}[5m])"),
    ]


def _expected_decode_rules(spec: Spec) -> list[RecordingRule]:
    """The planner's expected decode tokens/s per engine, per model, when the planner can tell."""
    try:
        roofline = importlib.import_module("slokit.plan.roofline")
    except ImportError:
        return []
    expected: Any = getattr(roofline, "expected_decode_tokens_per_second", None)
    if expected is None:
        return []
    rules = []
    for model in spec.models:
        value = expected(spec, model)
        if value is None:
            continue
        labels = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model.name}
        rules.append(RecordingRule(schema.RECORD_EXPECTED_DECODE_TOKENS, f"vector({number(round(value, 1))})", labels))
    return rules


# ==============================================================================================================
# Groups and files
# ==============================================================================================================
def group_name(spec: Spec, part: str) -> str:
    """`slokit-<service>-<part>`."""
    return f"slokit-{spec.service}-{part}"


def recording_groups(spec: Spec) -> list[RuleGroup]:
    """The recording-rule groups, in dependency order inside each group."""
    short: list[RecordingRule] = [
        *_bucket_rate_rules(spec),
        *_request_rate_rules(spec),
        *_quantile_rules(spec),
        *_objective_rules(spec),
    ]
    medium: list[RecordingRule] = []
    long: list[RecordingRule] = []
    target = {SHORT_INTERVAL: short, MEDIUM_INTERVAL: medium, LONG_INTERVAL: long}
    if _objective_slos(spec):
        for plan in window_plans(spec):
            target[plan.interval].extend(_window_rules(spec, plan))
        target[window_interval(spec.window)].append(_budget_rule(spec))
    short.extend(_consistency_rules(spec))
    short.extend(_scale_out_rules(spec))
    engine = [*_engine_rules(spec), *_expected_decode_rules(spec)]
    baseline = [_baseline_rule(spec)]
    groups = [
        RuleGroup(group_name(spec, "sli-short"), prom_duration(SHORT_INTERVAL), tuple(short)),
        RuleGroup(group_name(spec, "sli-medium"), prom_duration(MEDIUM_INTERVAL), tuple(medium)),
        RuleGroup(group_name(spec, "sli-long"), prom_duration(LONG_INTERVAL), tuple(long)),
        RuleGroup(group_name(spec, "baseline"), prom_duration(MEDIUM_INTERVAL), tuple(baseline)),
        RuleGroup(group_name(spec, "engine"), prom_duration(SHORT_INTERVAL), tuple(engine)),
    ]
    return [g for g in groups if g.rules]


def rule_groups(spec: Spec) -> list[RuleGroup]:
    """Every group of the service's rule file: the recording groups, then the alerts."""
    alert_rules: tuple[AlertRule, ...] = tuple(alerts.alert_rules(spec))
    groups = recording_groups(spec)
    if alert_rules:
        groups.append(RuleGroup(group_name(spec, "alerts"), prom_duration(SHORT_INTERVAL), alert_rules))
    return groups


def rules_path(spec: Spec) -> str:
    """Where the service's rule file is written, relative to the output directory."""
    return f"rules/{spec.service}.rules.yaml"


def prometheus_rule(spec: Spec, groups: list[RuleGroup]) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule (monitoring.coreos.com/v1)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": f"slokit-{spec.service}",
            "labels": {
                "app.kubernetes.io/name": "slokit",
                "app.kubernetes.io/component": "slo-rules",
                "app.kubernetes.io/part-of": spec.service,
            },
        },
        "spec": {"groups": [g.to_data() for g in groups]},
    }


def files(spec: Spec) -> dict[str, Any]:
    """The rule file and the PrometheusRule object for one spec."""
    groups = rule_groups(spec)
    return {
        rules_path(spec): {"groups": [g.to_data() for g in groups]},
        f"exporters/{spec.service}.prometheusrule.yaml": prometheus_rule(spec, groups),
    }
