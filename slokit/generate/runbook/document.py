"""The runbook of one spec: every section, guide and tuning lever rendered through the template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slokit.generate import alerts, dashboards, debug_steps
from slokit.generate.model import AlertRule, heading_anchor
from slokit.generate.runbook.context import Context
from slokit.generate.runbook.markdown import link
from slokit.generate.runbook.model import DecodeTable, ModelFacts
from slokit.generate.runbook.sections import alert_section, tier_text
from slokit.generate.runbook.template import render_template
from slokit.generate.runbook.tuning import tuning
from slokit.schema import Sli, Source
from slokit.spec import Spec
from slokit.units import format_duration


def _alert_rules(spec: Spec) -> list[AlertRule]:
    """The generated alerts the runbook has a section for."""
    return list(alerts.alert_rules(spec))


def render(spec: Spec, rules: Sequence[AlertRule]) -> str:
    """The runbook Markdown for a spec and its alerts (the body; the writer adds the do-not-edit notice)."""
    built = dashboards.build(spec)
    ctx = Context(spec, built)
    sections = [alert_section(ctx, rule) for rule in rules]
    guides = list(ctx.guides.values())
    seen: dict[str, str] = {g.anchor: g.title for g in guides}
    for section in sections:
        if section.anchor in seen:
            raise ValueError(
                f"alerts {seen[section.anchor]} and {section.rule.name} share runbook anchor {section.anchor!r}"
            )
        seen[section.anchor] = section.rule.name
        if heading_anchor(section.title) != section.anchor:
            raise ValueError(
                f"alert {section.rule.name}: heading {section.title!r} gives anchor {heading_anchor(section.title)!r}, "
                f"not its runbook anchor {section.anchor!r}"
            )
    board_links = [
        link(data["title"], spec.alerting.grafana_url.rstrip("/") + f"/d/{data['uid']}")
        for data in built.dashboards.values()
    ]
    return render_template(
        spec=spec,
        source_is_vllm=spec.source is Source.VLLM,
        has_frontend=debug_steps.has_frontend(spec),
        has_kv_cache=spec.metrics.kv_cache_usage is not None,  # TGI exports no KV-cache usage: no step 3
        sections=sections,
        guides=guides,
        tuning=tuning(ctx),
        dashboards=board_links,
        link=link,
        models=[ctx.model_facts(x) for x in spec.models],
        decode_tables=[table for x in spec.models if (table := _decode_table(ctx.model_facts(x))) is not None],
        slo_rows=_slo_rows(spec),
    )


def _decode_table(facts: ModelFacts) -> DecodeTable | None:
    curve = facts.decode_curve
    if curve is None:
        return None
    return DecodeTable(
        facts.model.name,
        tuple(str(p.batch) for p in curve),
        tuple(f"{p.tokens_per_second:,.0f}" for p in curve),
        tuple(format_duration(round(p.step_seconds, 4)) for p in curve),
    )


def _slo_rows(spec: Spec) -> list[tuple[str, str, str, str]]:
    rows = []
    for rc in spec.classes:
        for sli in Sli:
            slo = rc.slos.get(sli)
            if slo is None:
                continue
            objective = (
                f"{slo.objective.percentile:g}% within {format_duration(slo.objective.threshold)}"
                if slo.objective is not None
                else "none"
            )
            rows.append((rc.name, sli.value, objective, tier_text(slo).removeprefix("Tiers: ").rstrip(".") or "none"))
    return rows


def files(spec: Spec) -> dict[str, Any]:
    """`runbooks/<service>.md`."""
    return {f"runbooks/{spec.service}.md": render(spec, _alert_rules(spec))}
