"""One runbook section per alert: what fired, what it means for users, and the guide of its scope."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from slokit import schema
from slokit.generate import dashboards
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.runbook.context import Context
from slokit.generate.runbook.markdown import link
from slokit.generate.runbook.model import Section
from slokit.generate.runbook.steps import guide
from slokit.schema import Sli
from slokit.spec import PERCENTILES, TIER_NAMES
from slokit.units import format_duration

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
    if rule.request_class is not None and rule.model is not None:
        return f"Requests of class {rule.request_class} on {rule.model}"
    if rule.request_class is not None:
        return f"Requests of class {rule.request_class}"
    if rule.model is not None:
        return f"Requests on {rule.model}"
    return "Requests"


def tier_text(slo: Any) -> str:
    parts = []
    for pct in PERCENTILES:
        named = [
            f"{tier} {format_duration(slo.tiers.tier(tier)[pct])}" for tier in TIER_NAMES if pct in slo.tiers.tier(tier)
        ]
        if named:
            parts.append(f"{pct}: " + ", ".join(named))
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
        guide=guide(ctx, rule),
    )


def meaning(ctx: Context, rule: AlertRule) -> tuple[str, ...]:
    spec = ctx.spec
    who = _who(rule)
    slo = None
    if rule.request_class is not None and rule.sli is not None:
        try:
            slo = spec.request_class(rule.request_class).slos.get(rule.sli)
        except KeyError:
            slo = None
    sli_text = schema.SLI_TITLES[rule.sli] if rule.sli is not None else "latency"
    effect = _USER_EFFECT.get(rule.sli, "requests are slow") if rule.sli is not None else "requests are slow"
    out: list[str] = []
    if rule.kind is AlertKind.BURN_RATE:
        if slo is not None and slo.objective is not None:
            out.append(
                f"{who} miss the {sli_text} objective ({slo.objective.percentile:g}% within "
                f"{format_duration(slo.objective.threshold)}) fast enough to spend a large share of the "
                f"{format_duration(spec.window)} error budget: both the long and the short window burn faster "
                "than the factor, so it is happening now and not a blip."
            )
        else:
            out.append(f"{who} spend the {sli_text} error budget faster than planned.")
        out.append(f"Users: {effect}.")
    elif rule.kind is AlertKind.TIER:
        tiers = tier_text(slo) if slo is not None else ""
        out.append(
            f"A {sli_text} percentile of {who.lower()} is worse than its tier for "
            f"{format_duration(spec.alerting.tier_for)}. {tiers}"
        )
        out.append(f"Users: {effect}; a p50 over critical means most users are affected.")
    elif rule.kind is AlertKind.BASELINE:
        base = spec.alerting.baseline
        reference = (
            f"median of the same hour over {base.median_days} days"
            if base.median_days
            else f"the same hour {format_duration(base.offset)} ago"
        )
        out.append(
            f"The trailing 5m p99 {sli_text} of {who.lower()} is above {base.ratio:g}x its baseline "
            f"({reference}), "
            f"with at least {base.min_rps:g} requests/s now and then: latency regressed relative to normal, "
            "even if the absolute SLO still holds."
        )
        out.append(f"Users: the slowest 1% notice first; {effect}.")
    elif rule.kind is AlertKind.SCALE_OUT:
        out.append(
            f"More of {who.lower()} than the TTFT objective allows above its threshold have waited longer than "
            f"{spec.alerting.scale_out.fraction_of_slo:g}x that threshold for their first token, for "
            f"{format_duration(spec.alerting.scale_out.for_)} (a bucket count, with at least "
            f"{spec.alerting.min_requests} requests in 5m): the service runs out of headroom before the SLO "
            "breaks. The autoscaler should be adding replicas; this alert means it is not, or cannot."
        )
        out.append("Users: nothing yet; soon a longer wait for the first token.")
    elif rule.kind is AlertKind.QUEUE_OVERLOAD:
        out.append(
            f"Requests wait while every slot of the engine is taken ({who.lower()}): the engine receives "
            "more concurrent requests than it can run, and each waiting request adds its wait to TTFT."
        )
        out.append("Users: a growing wait before the first token.")
    elif rule.kind is AlertKind.KV_CACHE:
        out.append(
            f"The KV cache of {who.lower()} is above {spec.alerting.kv_cache_usage_max:.0%} or preempting: "
            "the scheduler stops admitting requests and evicts running ones, whose prefill is recomputed."
        )
        out.append("Users: stalls mid-answer (preempted requests) and longer waits for the first token.")
    elif rule.kind is AlertKind.CONSISTENCY:
        limit = slo.consistency.max_p99_over_p50 if slo is not None and slo.consistency is not None else None
        out.append(
            f"p99 over p50 {sli_text} of {who.lower()} exceeds "
            f"{f'{limit:g}' if limit is not None else 'its limit'}: the tail is far from the median, so batch "
            "jobs cannot be scheduled predictably."
        )
        out.append("Users: batch jobs finish at unpredictable times; deadlines slip.")
    elif rule.kind is AlertKind.EXPORTER_GONE:
        out.append(
            f"Every metric series of {who.lower()} is gone although it served requests within the last hour: "
            "its pods are down, the scrape is broken, or the slokit plugin is not loaded. Every SLO alert of "
            "this model is blind until the series are back."
        )
        out.append("Users: possibly a full outage of this model; check its pods and the scrape targets first.")
    elif rule.kind is AlertKind.ABSENT:
        out.append(
            f"The metrics of {who.lower()} are missing: the exporter, the scrape or the engine is down. Every "
            "SLO alert of this model is blind until it is back."
        )
        out.append("Users: possibly nothing, possibly a full outage; check the engine first.")
    return tuple(out)
