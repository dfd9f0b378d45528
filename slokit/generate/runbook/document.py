"""The runbook of one spec: every section, guide and tuning lever rendered through the template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slokit.generate import alerts, dashboards, debug_steps
from slokit.generate.model import AlertRule, heading_anchor
from slokit.generate.runbook.context import MODEL_PLACEHOLDER, Context
from slokit.generate.runbook.markdown import link, table, wrapped_item
from slokit.generate.runbook.model import Table
from slokit.generate.runbook.sections import alert_section, tier_text
from slokit.generate.runbook.steps import guide
from slokit.generate.runbook.template import render_template
from slokit.generate.runbook.tuning import tuning
from slokit.schema import Sli
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
    debugging = guide(ctx)
    seen: dict[str, str] = {debugging.anchor: debugging.title}
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
        source_note=wrapped_item(spec.source.runbook_note()),
        has_frontend=debug_steps.has_frontend(spec),
        has_kv_cache=spec.metrics.kv_cache_usage is not None,  # TGI exports no KV-cache usage: no step 3
        sections=sections,
        guide=debugging,
        placeholder=MODEL_PLACEHOLDER if ctx.placeholder else None,
        model_label=spec.metrics.model_label,
        tuning=tuning(ctx),
        dashboards=board_links,
        link=link,
        table=lambda t: table(t.headers, t.rows),
        models_table=models_table(ctx),
        decode_table=decode_table(ctx),
        slo_rows=_slo_rows(spec),
    )


def _or(value: object, text: str = "no estimate") -> str:
    return text if value is None else str(value)


def models_table(ctx: Context) -> Table:
    """The per-model facts, one row per model: classes, GPUs, max-num-seqs and the planner's figures; the FP8 and
    scope columns only where some model has a value there."""
    spec = ctx.spec
    facts = [ctx.model_facts(x) for x in spec.models]
    fp8 = any(f.fp8_kv_max_batch is not None for f in facts)
    first = dict(spec.models[0].selector) if spec.models else {}
    common = {k: v for k, v in first.items() if all(x.selector.get(k) == v for x in spec.models[1:])}
    scopes = {
        x.name: ", ".join(f"{k}={v}" for k, v in sorted(x.selector.items()) if common.get(k) != v) for x in spec.models
    }
    scoped = any(scopes.values())
    headers = [
        "Model", "Classes", "GPUs", "max-num-seqs", "Largest batch within the ITL objective",
        "Expected decode tokens/s per engine at that batch", "Tightest ITL/TPOT objective", "HBM peak per GPU",
    ]  # fmt: skip
    if fp8:
        headers.append("Largest batch with an FP8 KV cache")
    if scoped:
        headers.append("Scope")
    rows = []
    for f in facts:
        x = f.model
        row = [
            x.name,
            ", ".join(rc.name for rc in f.classes) or "none",
            f"{x.tensor_parallel} x {x.gpu or 'unknown'}",
            str(x.max_num_seqs),
            _or(f.max_batch),
            _or(f"{f.expected_decode:,.0f}" if f.expected_decode is not None else None),
            _or(format_duration(f.itl_target) if f.itl_target is not None else None, "none"),
            _or(f"{f.hbm_bandwidth / 1e12:.2f} TB/s" if f.hbm_bandwidth is not None else None, "unknown"),
        ]
        if fp8:
            row.append(_or(f.fp8_kv_max_batch))
        if scoped:
            row.append(scopes[x.name] or "shared")
        rows.append(tuple(row))
    return Table(tuple(headers), tuple(rows))


def decode_table(ctx: Context) -> Table | None:
    """The planner's expected decode of one engine by the number of requests it is running: a row per model with
    a figure, a column per batch (tokens/s and the expected ITL); None when no model has one."""
    curves = [(x.name, curve) for x in ctx.spec.models if (curve := ctx.model_facts(x).decode_curve) is not None]
    if not curves:
        return None
    batches = sorted({p.batch for _, curve in curves for p in curve})
    rows = []
    for name, curve in curves:
        at = {p.batch: p for p in curve}
        cells = [
            f"{at[b].tokens_per_second:,.0f} / {format_duration(round(at[b].step_seconds, 4))}" if b in at else ""
            for b in batches
        ]
        rows.append((name, *cells))
    return Table(("Model", *(str(b) for b in batches)), tuple(rows))


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
