"""One runbook section per alert: what fired, what it means for users, its values per class and SLO, and the guide."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from slokit import schema
from slokit.generate import dashboards
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.runbook import tables
from slokit.generate.runbook.context import Context
from slokit.generate.runbook.markdown import link
from slokit.generate.runbook.model import Section
from slokit.generate.runbook.steps import guide
from slokit.generate.runbook.template import prose
from slokit.schema import Sli

_USER_EFFECT: Final[Mapping[Sli | None, str]] = {
    Sli.TTFT: "a longer wait before the first token appears",
    Sli.ITL: "text streams in stutters, slower than people read",
    Sli.TPOT: "answers take longer to stream out",
    Sli.E2E: "whole requests take longer to finish",
}


_TEMPLATE_VALUE: Final = re.compile(r"\{\{\s*\$value\b[^}]*\}\}")


_TEMPLATE_LABEL: Final = re.compile(r"\{\{\s*\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def for_humans(annotation: str) -> str:
    """An alert annotation as a person reads it in the runbook: Prometheus' template expressions become the
    placeholders the notification fills in (`{{ $value | humanizePercentage }}` -> "(value)", `{{ $labels.x }}`
    -> "(x)")."""
    return _TEMPLATE_LABEL.sub(r"(\1)", _TEMPLATE_VALUE.sub("(value)", annotation))


def _who(rule: AlertRule) -> str:
    if rule.model is None and rule.request_class is None and rule.members:
        # A rule written for the fleet: the series it fires on names the class and model.
        if any(member.request_class is not None for member in rule.members):
            return "Requests of the alert's class on its model"
        return "Requests on the alert's model"
    if rule.request_class is not None and rule.model is not None:
        return f"Requests of class {rule.request_class} on {rule.model}"
    if rule.request_class is not None:
        return f"Requests of class {rule.request_class}"
    if rule.model is not None:
        return f"Requests on {rule.model}"
    return "Requests"


def tier_text(slo: Any) -> str:
    parts = slo.tiers.in_words()
    return ("Tiers: " + "; ".join(parts) + ".") if parts else ""


def alert_section(ctx: Context, rule: AlertRule) -> Section:
    severity = rule.labels.get("severity", "")
    kind = "page" if severity == ctx.spec.alerting.severity.page else "ticket"
    ref = dashboards.panel_for(ctx.built, rule)
    base = ctx.spec.alerting.grafana_url.rstrip("/")
    panel = link(f"{ref.dashboard_title} › {ref.title}", base + ref.path(dashboards.panel_variables(ctx.spec, rule)))
    labels = tuple((k, v) for k, v in rule.labels.items())
    fires = f"for {rule.for_}" if rule.for_ not in ("", "0s") else "as soon as it is true"
    return Section(
        rule=rule,
        title=rule.title,
        anchor=rule.anchor,
        severity=f"{severity} ({kind})" if severity else kind,
        summary=for_humans(rule.annotations.get("summary", "")),
        description=for_humans(rule.annotations.get("description", "")),
        meaning=meaning(ctx, rule),
        fires_when=fires,
        labels=labels,
        panel=panel,
        guide=guide(ctx),
        values=tables.table(ctx.spec, rule),
        condition=tables.condition(rule),
    )


def _slo_of(ctx: Context, rule: AlertRule) -> Any:
    """The SLO an alert is about, or None for alerts of a model or of no indicator (and for a class the spec lacks)."""
    if rule.request_class is None or rule.sli is None:
        return None
    try:
        return ctx.spec.request_class(rule.request_class).slos.get(rule.sli)
    except KeyError:
        return None


def _sli_text(rule: AlertRule) -> str:
    return schema.SLI_TITLES[rule.sli] if rule.sli is not None else "latency"


def _effect(rule: AlertRule) -> str:
    """What users notice when the alert's indicator is slow."""
    return _USER_EFFECT.get(rule.sli, "requests are slow") if rule.sli is not None else "requests are slow"


def _burn_rate(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Burn-rate alerts: both windows over the factor, so the budget is being spent now, not in a blip."""
    slo = _slo_of(ctx, rule)
    objective = slo.objective if slo is not None else None
    return _meaning(
        "burn_rate", who=_who(rule), sli=_sli_text(rule), objective=objective, window=ctx.spec.window,
        effect=_effect(rule),
    )  # fmt: skip


def _tier(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Tier alerts: a percentile over its tier for alerting.tier_for, with the tiers spelt out."""
    slo = _slo_of(ctx, rule)
    tiers = tier_text(slo) if slo is not None else "Each class's threshold is in the table below."
    return _meaning(
        "tier", who=_who(rule), sli=_sli_text(rule), tier_for=ctx.spec.alerting.tier_for, tiers=tiers,
        effect=_effect(rule),
    )  # fmt: skip


def _baseline(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Baseline alerts: a regression against the same hour before, which can fire while the SLO still holds."""
    return _meaning(
        "baseline", who=_who(rule), sli=_sli_text(rule), base=ctx.spec.alerting.baseline, effect=_effect(rule)
    )


def _scale_out(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Scale-out alerts: headroom is gone before the SLO breaks, so the autoscaler is not keeping up."""
    alerting = ctx.spec.alerting
    return _meaning("scale_out", who=_who(rule), scale_out=alerting.scale_out, min_requests=alerting.min_requests)


def _queue_overload(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Queue alerts: more concurrent requests than the engine's slots, each wait added to TTFT."""
    return _meaning("queue_overload", who=_who(rule))


def _kv_cache(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """KV-cache alerts: admission stops and running requests are evicted and recomputed."""
    return _meaning("kv_cache", who=_who(rule), limit=ctx.spec.alerting.kv_cache_usage_max)


def _consistency(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Consistency alerts: a tail far from the median makes batch jobs unpredictable."""
    slo = _slo_of(ctx, rule)
    limit = slo.consistency.max_p99_over_p50 if slo is not None and slo.consistency is not None else None
    return _meaning("consistency", who=_who(rule), sli=_sli_text(rule), limit=limit)


def _exporter_gone(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Exporter-gone alerts: a model that served traffic lost every series, so its SLO alerts are blind."""
    return _meaning("exporter_gone", who=_who(rule))


def _absent(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """Absent alerts: the metrics are missing, so the SLO alerts are blind."""
    return _meaning("absent", who=_who(rule))


def _meaning(kind: str, **values: Any) -> tuple[str, ...]:
    """The paragraphs of one alert kind's macro in templates/meaning.md.j2."""
    return prose("meaning", kind, **values)


_MEANING: Final[Mapping[AlertKind, Callable[[Context, AlertRule], tuple[str, ...]]]] = {
    AlertKind.BURN_RATE: _burn_rate,
    AlertKind.TIER: _tier,
    AlertKind.BASELINE: _baseline,
    AlertKind.SCALE_OUT: _scale_out,
    AlertKind.QUEUE_OVERLOAD: _queue_overload,
    AlertKind.KV_CACHE: _kv_cache,
    AlertKind.CONSISTENCY: _consistency,
    AlertKind.EXPORTER_GONE: _exporter_gone,
    AlertKind.ABSENT: _absent,
}


def meaning(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    """What fired and what users notice, in the words of the alert's kind."""
    explain = _MEANING.get(rule.kind)
    return explain(ctx, rule) if explain is not None else ()
