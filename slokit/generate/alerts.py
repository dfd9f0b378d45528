"""Alerts: burn rates, tiers, baseline deviation, scale-out, engine overload, consistency and missing metrics.

Every alert follows the monitoring-mixin conventions: a `Slokit...` CamelCase name, a `severity` label with the
spec's page or ticket value, `service`, `slo`, `model`, `class` where they apply, the spec's extra labels, a static
`summary`, a `description` templated with the measured `{{ $value }}` and the threshold, and a `runbook_url` that
points at this rule's own runbook section. Alerts read recorded series only (see rules.py), so an alert evaluation
costs a handful of samples.

Burn-rate tiers whose threshold cannot be reached are left out: with factor x error budget >= 1 (for example the
13.44x page tier of a 90% objective over 28d) the error ratio would have to exceed 100%. `skipped_burn_tiers` lists
them so the docs and the generated promtool tests can say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from slokit import schema
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.promql import Matcher, eq, number, selector
from slokit.schema import SLI_TITLES, Sli
from slokit.spec import PERCENTILES, BurnRateWindow, RequestClass, Spec
from slokit.units import format_duration, prom_duration

ABSENT_FOR: Final = 600.0  # missing metrics for 10 minutes: a scrape hiccup is not an alert

NAME_BURN: Final = "SlokitErrorBudgetBurn"
NAME_ACCEPTABLE: Final = "SlokitLatencyAboveAcceptable"
NAME_CRITICAL: Final = "SlokitLatencyAboveCritical"
NAME_BASELINE: Final = "SlokitLatencyAboveBaseline"
NAME_SCALE_OUT: Final = "SlokitScaleOutNeeded"
NAME_QUEUE: Final = "SlokitEngineQueueFull"
NAME_KV_FULL: Final = "SlokitKVCacheNearFull"
NAME_PREEMPTING: Final = "SlokitEnginePreempting"
NAME_CONSISTENCY: Final = "SlokitLatencyInconsistent"
NAME_ABSENT: Final = "SlokitMetricsAbsent"

SUMMARIES: Final = {
    NAME_BURN: "Latency error budget is burning too fast.",
    NAME_ACCEPTABLE: "A latency percentile is worse than its acceptable tier.",
    NAME_CRITICAL: "A latency percentile is worse than its critical tier.",
    NAME_BASELINE: "p99 latency is far above the same hour's baseline.",
    NAME_SCALE_OUT: "p99 time to first token is close to its SLO; add capacity.",
    NAME_QUEUE: "Requests are queueing on an engine that is already full.",
    NAME_KV_FULL: "An engine's KV cache is nearly full.",
    NAME_PREEMPTING: "An engine is preempting requests.",
    NAME_CONSISTENCY: "Batch latency is inconsistent: p99 is too far above p50.",
    NAME_ABSENT: "slokit cannot see a model's latency metrics.",
}


@dataclass(frozen=True)
class SkippedTier:
    """A burn-rate tier left out for one objective because it can never fire."""

    request_class: str
    sli: Sli
    window: BurnRateWindow
    factor: float
    error_budget: float

    def reason(self) -> str:
        """One sentence for docs and test names."""
        return (
            f"{self.window.severity} tier {format_duration(self.window.long)}/{format_duration(self.window.short)} "
            f"left out for {self.request_class} {self.sli.value}: factor {self.factor:.4g} x error budget "
            f"{self.error_budget:.4g} >= 1, so it could never fire"
        )


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _days(seconds: float) -> str:
    """SLO windows read in days (`28d`, not `4w`)."""
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    return format_duration(seconds)


def burn_factor(spec: Spec, window: BurnRateWindow) -> float:
    """The burn-rate threshold of a tier for this spec's SLO window (13.44 for 2% of 28d in 1h)."""
    return round(window.factor(spec.window), 6)


def skipped_burn_tiers(spec: Spec) -> list[SkippedTier]:
    """Every (objective, tier) pair that is left out because factor x error budget >= 1."""
    out = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            for window in spec.alerting.burn_rates:
                factor = burn_factor(spec, window)
                if factor * slo.objective.error_budget >= 1:
                    out.append(SkippedTier(rc.name, sli, window, factor, slo.objective.error_budget))
    return out


class _Builder:
    """Collects alert rules, giving each its own runbook title, anchor and URL."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.rules: list[AlertRule] = []
        self.anchors: set[str] = set()

    def add(
        self,
        name: str,
        kind: AlertKind,
        expr: str,
        for_: float,
        severity: str,
        description: str,
        detail: str,
        *,
        model: str,
        request_class: RequestClass | None = None,
        sli: Sli | None = None,
        extra_labels: Mapping[str, str] | None = None,
    ) -> None:
        spec = self.spec
        labels: dict[str, str] = {"severity": spec.alerting.severity.label(severity), "service": spec.service}
        if sli is not None:
            labels["slo"] = sli.value
        labels["model"] = model
        if request_class is not None:
            labels["class"] = request_class.name
        labels.update(extra_labels or {})
        labels.update(spec.alerting.labels)
        where = f"{request_class.name} on {model}" if request_class is not None else model
        what = f"{sli.value} " if sli is not None else ""
        title = f"{name}: {what}{where}{', ' + detail if detail else ''} ({labels['severity']})"
        anchor = heading_anchor(title)
        if anchor in self.anchors:
            raise ValueError(f"two alerts would share the runbook section {anchor!r}")
        self.anchors.add(anchor)
        annotations = {
            "summary": SUMMARIES[name],
            "description": description,
            "runbook_url": spec.alerting.runbook_link(spec.service, anchor),
        }
        self.rules.append(
            AlertRule(
                name=name,
                expr=expr,
                for_=prom_duration(for_) if for_ > 0 else "0s",
                labels=labels,
                annotations=annotations,
                kind=kind,
                anchor=anchor,
                title=title,
                model=model,
                request_class=request_class.name if request_class is not None else None,
                sli=sli,
            )
        )


def _slo_matchers(spec: Spec, model: str, rc: RequestClass, sli: Sli) -> list[tuple[str, str, str]]:
    return [
        eq(schema.RULE_LABEL_SERVICE, spec.service),
        eq(schema.RULE_LABEL_MODEL, model),
        eq(schema.RULE_LABEL_CLASS, rc.name),
        eq(schema.RULE_LABEL_SLO, sli.value),
    ]


def _burn_alerts(b: _Builder) -> None:
    spec = b.spec
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            objective = slo.objective
            if objective is None:
                continue
            for window in spec.alerting.burn_rates:
                factor = burn_factor(spec, window)
                if factor * objective.error_budget >= 1:
                    continue
                long, short = prom_duration(window.long), prom_duration(window.short)
                for model in rc.models:
                    m = _slo_matchers(spec, model, rc, sli)
                    expr = (
                        f"{selector(schema.record_burn_rate(long), m)} > {number(factor)}\n"
                        f"and\n{selector(schema.record_burn_rate(short), m)} > {number(factor)}"
                    )
                    description = (
                        f"{SLI_TITLES[sli].capitalize()} of {rc.name} on {model} is spending its error budget "
                        f'{{{{ $value | printf "%.2f" }}}}x as fast as the objective allows over {long} (and '
                        f"{short}); this tier fires above {_fmt(factor)}x, which spends {_fmt(window.budget_percent)}% "
                        f"of the {_days(spec.window)} budget in {long}. Objective: "
                        f"{_fmt(objective.percentile)}% within {format_duration(objective.threshold)}."
                    )
                    b.add(
                        NAME_BURN, AlertKind.BURN_RATE, expr, window.for_, window.severity, description,
                        f"{long}-{short} burn", model=model, request_class=rc, sli=sli,
                        extra_labels={"long": long, "short": short},
                    )  # fmt: skip


def _tier_alerts(b: _Builder) -> None:
    spec = b.spec
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            for tier, name, severity in (
                ("acceptable", NAME_ACCEPTABLE, "ticket"),
                ("critical", NAME_CRITICAL, "page"),
            ):
                for pct, seconds in slo.tiers.tier(tier).items():
                    for model in rc.models:
                        m = [*_slo_matchers(spec, model, rc, sli), eq("quantile", number(PERCENTILES[pct]))]
                        expr = f"{selector(schema.RECORD_LATENCY_QUANTILE, m)} > {number(seconds)}"
                        description = (
                            f"{pct} {SLI_TITLES[sli]} of {rc.name} on {model} is "
                            f"{{{{ $value | humanizeDuration }}}} over the last 5m, worse than the {tier} tier of "
                            f"{format_duration(seconds)} for {format_duration(spec.alerting.tier_for)}."
                        )
                        b.add(
                            name, AlertKind.TIER, expr, spec.alerting.tier_for, severity, description,
                            f"{pct} above {format_duration(seconds)}", model=model, request_class=rc, sli=sli,
                            extra_labels={"percentile": pct},
                        )  # fmt: skip


def _baseline_alerts(b: _Builder) -> None:
    spec = b.spec
    baseline = spec.alerting.baseline
    on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS})"
    when = (
        f"the median of the same hour over the last {baseline.median_days} days"
        if baseline.median_days >= 2
        else f"the same 5m {format_duration(baseline.offset)} ago"
    )
    for rc in spec.classes:
        for sli in rc.slos:
            for model in rc.models:
                m = _slo_matchers(spec, model, rc, sli)
                p99 = selector(schema.RECORD_LATENCY_QUANTILE, [*m, eq("quantile", "0.99")])
                base = selector(schema.RECORD_P99_BASELINE, m)
                rate = selector(schema.RECORD_REQUEST_RATE, m[:3])
                expr = (
                    f"max without (quantile) ({p99}) > {number(baseline.ratio)} * {base}\n"
                    f"and {on}\n{rate} >= {number(baseline.min_rps)}"
                )
                description = (
                    f"p99 {SLI_TITLES[sli]} of {rc.name} on {model} is {{{{ $value | humanizeDuration }}}}, more "
                    f"than {_fmt(baseline.ratio)}x its baseline ({when}), with at least "
                    f"{_fmt(baseline.min_rps)} requests/s now and then."
                )
                b.add(
                    NAME_BASELINE, AlertKind.BASELINE, expr, baseline.for_, "ticket", description, "p99 vs baseline",
                    model=model, request_class=rc, sli=sli,
                )  # fmt: skip


def _scale_out_alerts(b: _Builder) -> None:
    spec = b.spec
    scale = spec.alerting.scale_out
    for rc in spec.classes:
        slo = rc.slos.get(Sli.TTFT)
        if slo is None or slo.objective is None:
            continue
        for model in rc.models:
            ratio = selector(schema.RECORD_SCALE_OUT, _slo_matchers(spec, model, rc, Sli.TTFT))
            expr = f"{ratio} > {number(scale.fraction_of_slo)}"
            description = (
                f"p99 time to first token of {rc.name} on {model} is {{{{ $value | humanizePercentage }}}} of its "
                f"{format_duration(slo.objective.threshold)} objective threshold, above the scale-out level of "
                f"{scale.fraction_of_slo:.0%} for {format_duration(scale.for_)}."
            )
            b.add(
                NAME_SCALE_OUT, AlertKind.SCALE_OUT, expr, scale.for_, "ticket", description, "", model=model,
                request_class=rc, sli=Sli.TTFT,
            )  # fmt: skip


def _engine_alerts(b: _Builder) -> None:
    spec = b.spec
    for model in spec.models:
        m = [eq(schema.RULE_LABEL_SERVICE, spec.service), eq(schema.RULE_LABEL_MODEL, model.name)]
        on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_ENGINE})"
        expr = (
            f"{selector(schema.RECORD_QUEUE_WAITING, m)} > 0\n"
            f"and {on}\n{selector(schema.RECORD_QUEUE_RUNNING, m)} >= {model.max_num_seqs}"
        )
        description = (
            f"Engine {{{{ $labels.engine }}}} of {model.name} has {{{{ $value }}}} requests waiting while it runs "
            f"its maximum of {model.max_num_seqs} (max_num_seqs); new requests wait for a slot and time to first "
            "token grows."
        )
        b.add(NAME_QUEUE, AlertKind.QUEUE_OVERLOAD, expr, spec.alerting.tier_for, "ticket", description, "",
              model=model.name)  # fmt: skip
        kv = spec.alerting.kv_cache_usage_max
        expr = f"{selector(schema.RECORD_KV_CACHE_USAGE, m)} > {number(kv)}"
        description = (
            f"Engine {{{{ $labels.engine }}}} of {model.name} has {{{{ $value | humanizePercentage }}}} of its KV "
            f"cache in use, above {kv:.0%}; new sequences must wait or preempt running ones."
        )
        b.add(NAME_KV_FULL, AlertKind.KV_CACHE, expr, spec.alerting.tier_for, "ticket", description, "",
              model=model.name)  # fmt: skip
        expr = f"{selector(schema.RECORD_PREEMPTIONS, m)} > 0"
        description = (
            f'Engine {{{{ $labels.engine }}}} of {model.name} preempts {{{{ $value | printf "%.2f" }}}} requests/s '
            "(5m rate): the KV cache is too small for the running batch, and preempted requests are recomputed."
        )
        b.add(NAME_PREEMPTING, AlertKind.KV_CACHE, expr, spec.alerting.tier_for, "ticket", description, "",
              model=model.name)  # fmt: skip


def _consistency_alerts(b: _Builder) -> None:
    spec = b.spec
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.consistency is None:
                continue
            limit = slo.consistency.max_p99_over_p50
            for model in rc.models:
                expr = f"{selector(schema.RECORD_CONSISTENCY, _slo_matchers(spec, model, rc, sli))} > {number(limit)}"
                description = (
                    f'p99 {SLI_TITLES[sli]} of {rc.name} on {model} is {{{{ $value | printf "%.2f" }}}}x its p50 '
                    f"over the last 5m, above the consistency limit of {_fmt(limit)}x."
                )
                b.add(
                    NAME_CONSISTENCY, AlertKind.CONSISTENCY, expr, spec.alerting.tier_for, "ticket", description,
                    "p99 over p50", model=model, request_class=rc, sli=sli,
                )  # fmt: skip


def absent_metric(spec: Spec, model: str) -> tuple[str, Sli]:
    """The raw histogram whose absence means a model's latency cannot be measured (its first SLI's `_count`)."""
    for rc in spec.classes:
        if model in rc.models and rc.slos:
            sli = next(iter(rc.slos))
            return spec.histogram(rc, sli).name + "_count", sli
    return spec.metrics.latency[Sli.TTFT] + "_count", Sli.TTFT


def absent_series(spec: Spec, model: str) -> tuple[str, list[Matcher]]:
    """The raw `_count` series (name, matchers) of a model's first SLI histogram, with that histogram's own
    selector (a custom histogram's), not the source's class label."""
    for rc in spec.classes:
        if model in rc.models and rc.slos:
            sli = next(iter(rc.slos))
            hist = spec.histogram(rc, sli)
            own = list(hist.matchers) if rc.slos[sli].metric is not None else []
            matchers = [eq(hist.model_label, model)] if hist.model_label is not None else []
            return hist.name + "_count", [*matchers, *own]
    return spec.metrics.latency[Sli.TTFT] + "_count", [eq(spec.metrics.model_label, model)]


def _absent_alerts(b: _Builder) -> None:
    spec = b.spec
    served = {m for rc in spec.classes for m in rc.models}
    for model in spec.models:
        if model.name not in served:
            continue
        metric, _ = absent_metric(spec, model.name)
        expr = f"absent({selector(*absent_series(spec, model.name))})"
        description = (
            f"No {metric} series for {model.name} for {format_duration(ABSENT_FOR)}: every engine is down, not "
            "scraped, or not exporting. The SLO cannot be measured and no other slokit alert can fire for it."
        )
        b.add(NAME_ABSENT, AlertKind.ABSENT, expr, ABSENT_FOR, "ticket", description, "", model=model.name)


def alert_rules(spec: Spec) -> list[AlertRule]:
    """Every alert rule of a spec, in a stable order."""
    builder = _Builder(spec)
    _burn_alerts(builder)
    _tier_alerts(builder)
    _baseline_alerts(builder)
    _scale_out_alerts(builder)
    _consistency_alerts(builder)
    _engine_alerts(builder)
    _absent_alerts(builder)
    return builder.rules
