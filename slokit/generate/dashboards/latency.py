"""The latency board: percentiles and heatmaps of every histogram an SLO reads, with the tier thresholds as
lines, the engine's histogram beside the API server's, TTFT against prompt length and failed requests.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from slokit import promql, schema
from slokit.generate.dashboards.exprs import RawVars, histogram_quantile, legend_format, quote, rate, scope, var
from slokit.generate.dashboards.grafana import (
    Board,
    dashboard_json,
    heatmap,
    override_axis_right,
    override_dashed,
    timeseries,
)
from slokit.generate.dashboards.identity import PanelRef, dashboard_uid
from slokit.schema import Sli
from slokit.spec import TIER_NAMES, RequestClass, Spec
from slokit.units import format_duration

LATENCY_QUANTILES: Final = (0.5, 0.95, 0.99)


TIER_COLORS: Final = {"target": "green", "acceptable": "orange", "critical": "red"}


@dataclass(frozen=True)
class HistogramPanel:
    """One latency histogram the dashboards draw percentiles from, and the classes whose SLO reads it.

    `hist` is the histogram as one class reads it (`Spec.histogram`); classes share a panel when they read the same
    histogram and differ at most in the source's class label. A panel without classes is the source's engine
    histogram kept for comparison when no SLO of the indicator reads it.
    """

    sli: Sli
    hist: schema.CustomHistogram
    classes: tuple[RequestClass, ...]
    where: str  # engine, frontend or custom

    @property
    def ident(self) -> tuple[str, ...]:
        """What the panel draws, for its id: the indicator and the histogram (where it is measured, its name and
        its own selector), not its place among the indicator's histograms."""
        own = ",".join(f"{label}{op}{value}" for label, op, value in _own_matchers(self.hist))
        return (self.sli.value, self.where, self.hist.name, own)

    @property
    def unit(self) -> str:
        """The Grafana unit of the histogram's own `le` (heatmaps show buckets as exported)."""
        return "ms" if self.hist.scale == 0.001 else "s"


def _own_matchers(hist: schema.CustomHistogram) -> tuple[tuple[str, str, str], ...]:
    """The histogram's own matchers without the source's class label (a custom `selector:` stays)."""
    return tuple(m for m in hist.matchers if hist.class_label is None or m[0] != hist.class_label)


def histogram_panels(spec: Spec, sli: Sli) -> list[HistogramPanel]:
    """The histograms the SLOs of `sli` read, in class order, each with its classes (see `Spec.histogram`); then the
    source's engine histogram when the source has one and no SLO reads it (for comparison and debugging)."""
    m = spec.metrics
    groups: dict[tuple[Any, ...], tuple[schema.CustomHistogram, list[RequestClass]]] = {}
    for rc in spec.classes:
        slo = rc.slos.get(sli)
        if slo is None:
            continue
        hist = spec.histogram(rc, sli)
        key = (hist.name, hist.model_label, hist.engine_label, hist.class_label, hist.scale, _own_matchers(hist))
        groups.setdefault(key, (hist, []))[1].append(rc)
    panels = []
    for hist, classes in groups.values():
        if classes[0].slos[sli].metric is not None:
            where = "custom"
        elif sli in m.frontend_latency and hist.name == m.frontend_latency[sli]:
            where = "frontend"
        else:
            where = "engine"
        panels.append(HistogramPanel(sli, hist, tuple(classes), where))
    # The engine's own histogram beside the API server's (how much the API server adds), or alone when no SLO is
    # on the indicator; not beside a custom histogram, whose exporter need not be slokit's or the engine's.
    compare = not panels or all(p.where == "frontend" for p in panels)
    if sli in m.latency and compare:
        engine = schema.CustomHistogram(
            name=m.latency[sli], model_label=m.model_label, matchers=(), engine_label=m.engine_label,
            class_label=m.class_label,
        )  # fmt: skip
        panels.append(HistogramPanel(sli, engine, (), "engine"))
    return panels


def selected_in(variable: str, value: str) -> str:
    """A one-series vector while `value` is among the values selected in a Grafana variable, else empty: for
    histograms that carry no label to match the variable against (vLLM's metrics have no class, a custom histogram
    may have no model). Grafana writes the selection as an anchored regex into label_replace's pattern."""
    tag = '"slokit_selected"'
    tagged = f'label_replace(vector(1), {tag}, {quote(value)}, "", "")'
    marked = f'label_replace({tagged}, {tag}, "yes", {tag}, "${variable}")'
    return f'({marked} and on ({tag[1:-1]}) label_replace(vector(1), {tag}, "yes", "", ""))'


def _panel_matchers(spec: Spec, panel: HistogramPanel) -> list[str]:
    """Matchers of a percentile panel: scope, the dashboard variables the histogram's labels allow, the group's
    classes (or their models where the histogram has no class label) and the histogram's own selector."""
    hist, m = panel.hist, spec.metrics
    matchers = scope(spec)
    models = sorted({name for rc in panel.classes for name in rc.models})
    if hist.model_label is not None:
        matchers.append(var(hist.model_label, "model"))
        if panel.classes and hist.class_label is None:
            matchers.append(f"{hist.model_label}=~{quote(promql.any_of(models))}")
    if hist.class_label is not None:
        if panel.classes:
            matchers.append(f"{hist.class_label}=~{quote(promql.any_of(rc.name for rc in panel.classes))}")
        matchers.append(var(hist.class_label, "class"))
    matchers.extend(f"{label}{op}{quote(value)}" for label, op, value in _own_matchers(hist))
    if hist.engine_label is not None and hist.engine_label == m.engine_label and panel.where != "custom":
        matchers.append(var(hist.engine_label, "engine"))
    return matchers


def _panel_by(spec: Spec, panel: HistogramPanel) -> tuple[str, ...]:
    """Grouping labels of a percentile panel: the histogram's model, class, replica and engine labels."""
    hist = panel.hist
    labels = [hist.model_label, hist.class_label]
    if panel.where != "custom":
        labels.extend(spec.alerting.replica_labels)
    labels.append(hist.engine_label)
    return tuple(dict.fromkeys(label for label in labels if label is not None))


def _scaled(expr: str, hist: schema.CustomHistogram) -> str:
    """A value in the histogram's unit as seconds (a millisecond histogram's quantile x 0.001)."""
    return expr if hist.scale == 1.0 else f"({expr}) * {hist.scale:g}"


def _class_selected(spec: Spec, rc: RequestClass, sli: Sli) -> str:
    """`and on () ...`: keeps a constant line only while its class (and one of its models) is selected and has
    traffic in the rate interval on the histogram its SLO reads (when the percentiles it is drawn against exist).

    Two matchers on one label are allowed in PromQL: the class's own value, and the variable's regex. A histogram
    without a class (or model) label is checked against the variable by `selected_in`.
    """
    hist = spec.histogram(rc, sli)
    matchers = scope(spec)
    chosen = []
    if hist.model_label is not None:
        matchers.append(var(hist.model_label, "model"))
        if hist.class_label is None:  # vLLM's own metrics or a custom histogram: the class is its models
            matchers.append(f"{hist.model_label}=~{quote(promql.any_of(rc.models))}")
    else:
        chosen.append(selected_in("model", rc.models[0]))
    matchers.extend(f"{label}{op}{quote(value)}" for label, op, value in hist.matchers)
    if hist.class_label is not None:
        matchers.append(var(hist.class_label, "class"))
    else:
        chosen.append(selected_in("class", rc.name))
    expr = f" and on () count({rate(hist.name + '_count', matchers)})"
    return expr + "".join(f" and on () {c}" for c in chosen)


def _tier_lines(
    spec: Spec, sli: Sli, classes: Sequence[RequestClass]
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """Constant series for every tier threshold and objective of `sli` in `classes`, dashed and coloured by tier."""
    queries: list[tuple[str, str]] = []
    overrides: list[dict[str, Any]] = []
    for rc in classes:
        slo = rc.slos.get(sli)
        if slo is None:
            continue
        selected = _class_selected(spec, rc, sli)
        for tier in TIER_NAMES:
            for pct, seconds in slo.tiers.tier(tier).items():
                legend = f"{rc.name} {pct} {tier} {format_duration(seconds)}"
                queries.append((f"vector({seconds:g}){selected}", legend))
            if slo.tiers.tier(tier):
                overrides.append(override_dashed(f"^{re.escape(rc.name)} p[0-9.]+ {tier} ", TIER_COLORS[tier]))
        if slo.objective is not None:
            legend = f"{rc.name} objective {slo.objective.percentile:g}% {format_duration(slo.objective.threshold)}"
            queries.append((f"vector({slo.objective.threshold:g}){selected}", legend))
            overrides.append(override_dashed(f"^{re.escape(rc.name)} objective ", "purple"))
    return queries, overrides


def _where(panel: HistogramPanel) -> str:
    if panel.where == "custom":
        return f"from {panel.hist.name}"
    return "at the API server" if panel.where == "frontend" else "at the engine"


def _latency_panel_title(panel: HistogramPanel, alone: bool) -> str:
    head = f"{panel.sli.value.upper()} p50 / p95 / p99"
    if panel.where == "custom":
        return f"{head} {_where(panel)}"
    if not panel.classes and not alone:
        return f"{head} at the engine (no SLO reads it; for comparison)"
    if panel.where == "frontend":
        return f"{head} at the API server, by model and class"
    return f"{head} at the engine, by model, class and engine"


def _latency_panel_description(spec: Spec, panel: HistogramPanel, alone: bool) -> str:
    sli, hist = panel.sli, panel.hist
    what = schema.SLI_TITLES[sli].capitalize()
    if panel.where == "frontend":
        source = (
            f"measured at the API server's ASGI layer ({hist.name}: from the HTTP request's arrival, so time the "
            "API server holds a request counts; no per-engine label)"
        )
    elif panel.where == "custom":
        source = f"read from the spec's own histogram {hist.name}" + (
            " (exported in milliseconds; shown in seconds)" if hist.scale != 1.0 else ""
        )
    else:
        source = f"measured inside the engine ({hist.name})"
    if panel.classes:
        names = ", ".join(rc.name for rc in panel.classes)
        reads = (
            f" This is the histogram the {sli.value} SLO of {names} reads. Dashed lines: the spec's tier thresholds "
            "(green target, orange acceptable, red critical) and objectives (purple) of those classes."
        )
    elif alone:
        reads = f" No class of the spec has a {sli.value} SLO; shown for debugging."
    else:
        reads = (
            f" No {sli.value} SLO reads it (they read the histograms beside it); the difference from the API "
            "server's histogram is time spent before the engine (the debugging dashboard's step 0)."
        )
    return (
        f"{what} percentiles {source}, from the histogram buckets over the rate interval.{reads} A percentile inside "
        "a wide bucket is a linear interpolation between the bucket's bounds, not a measured value. Alerts and tier "
        f"states need at least {spec.alerting.min_requests} requests in 5m; a percentile from fewer is a trickle."
    )


def _percentile_panel(spec: Spec, board: Board, panel: HistogramPanel, index: int, alone: bool) -> str:
    """p50/p95/p99 of one histogram with its classes' tiers and objectives as dashed lines; returns the bucket rate
    the heatmap beside it draws. The first panel of an indicator keeps the short key the other boards link to,
    and every class it serves gets a key of its own."""
    hist = panel.hist
    bucket = rate(f"{hist.name}_bucket", _panel_matchers(spec, panel))
    by = _panel_by(spec, panel)
    queries = [
        (
            _scaled(histogram_quantile(quantile, bucket, ", ".join(by)), hist),
            f"p{quantile * 100:g} " + legend_format(*by),
        )
        for quantile in LATENCY_QUANTILES
    ]
    lines, overrides = _tier_lines(spec, panel.sli, panel.classes)
    key: tuple[str, ...] = ("latency", panel.sli.value) if index == 0 else ("latency", panel.sli.value, str(index))
    board.add(
        timeseries(
            _latency_panel_title(panel, alone),
            _latency_panel_description(spec, panel, alone),
            [*queries, *lines],
            "s",
            overrides=overrides,
            minimum=0,
        ),
        16,
        9,
        key=key,
        ident=("latency", *panel.ident),
    )
    for rc in panel.classes:
        board.refs[("latency", panel.sli.value, rc.name)] = board.refs[key]
    return bucket


def _heatmap_panel(board: Board, panel: HistogramPanel, bucket: str, index: int, alone: bool) -> None:
    """The buckets themselves beside the percentiles: a second band shows a slower sub-population that the
    percentiles average away."""
    sli, hist = panel.sli, panel.hist
    board.add(
        heatmap(
            f"{sli.value.upper()} heatmap" + ("" if alone else f" {_where(panel)}"),
            f"Requests per second in each {sli.value} bucket of {hist.name} (all selected models, classes "
            f"and engines; bucket bounds in {'milliseconds' if panel.unit == 'ms' else 'seconds'}, as "
            "exported). A second band appearing above the main one is a sub-population getting slower.",
            f"sum by (le) ({bucket})",
            panel.unit,
        ),
        8,
        9,
        key=("heatmap", sli.value) if index == 0 else ("heatmap", sli.value, str(index)),
        ident=("heatmap", *panel.ident),
    )


def _percentile_row(spec: Spec, board: Board, sli: Sli) -> None:
    """One row per indicator: for every histogram it is read from, the percentiles and the heatmap side by side;
    no row when neither an SLO nor the source has the histogram (SGLang: tpot)."""
    panels = histogram_panels(spec, sli)
    if not panels:
        return
    board.row(f"{schema.SLI_TITLES[sli].capitalize()} ({sli.value})", key=("latency", sli.value))
    alone = len(panels) == 1
    for index, panel in enumerate(panels):
        bucket = _percentile_panel(spec, board, panel, index, alone)
        _heatmap_panel(board, panel, bucket, index, alone)


def _prompt_row(spec: Spec, board: Board, q: RawVars) -> None:
    """TTFT against prompt length, when the source exports a prompt-length histogram: tells longer prompts
    (prefill cost) apart from a slower engine (queueing, preemption) as the cause of a TTFT rise."""
    m = spec.metrics
    if m.prompt_tokens_histogram is None or Sli.TTFT not in m.latency:  # TGI has no TTFT histogram
        return
    board.row("TTFT against prompt length", key=("ttft_prompt",))
    ttft = m.latency[Sli.TTFT]
    group = ", ".join(label for label in q.by_labels if label != m.engine_label)
    mean_ttft = (
        f"sum by ({group}) ({rate(f'{ttft}_sum', q.raw())}) / sum by ({group}) ({rate(f'{ttft}_count', q.raw())})"
    )
    prompt = m.prompt_tokens_histogram
    mean_prompt = (
        f"sum by ({group}) ({rate(f'{prompt}_sum', q.raw())}) / sum by ({group}) ({rate(f'{prompt}_count', q.raw())})"
    )
    legend = legend_format(*group.split(", "))
    board.add(
        timeseries(
            "Mean TTFT and mean prompt length",
            "TTFT inside the engine (left axis; the prefill cost, whatever histogram an SLO reads) moves with "
            "prompt length (right axis) when prefill dominates: prompts getting longer explains a TTFT rise; TTFT "
            "rising at a steady prompt length points at queueing instead.",
            [(mean_ttft, f"TTFT {legend}"), (mean_prompt, f"prompt tokens {legend}")],
            "s",
            overrides=[override_axis_right("^prompt tokens ", "short")],
            minimum=0,
        ),
        12,
        8,
        key=("ttft_prompt",),
    )
    board.add(
        timeseries(
            "TTFT per 1k prompt tokens",
            "Mean TTFT divided by mean prompt length, per 1000 tokens: the prefill cost per token. Flat while "
            "TTFT rises means longer prompts; rising means the engine got slower per token (queueing, "
            "preemption, a slower GPU).",
            [(f"1000 * ({mean_ttft}) / ({mean_prompt})", legend)],
            "s",
            minimum=0,
        ),
        12,
        8,
        key=("ttft_per_token",),
    )


def build(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    """The latency board and its panel references: a row per indicator, then prompt length, then failures."""
    name = "latency"
    board = Board(name, dashboard_uid(spec, name), f"{spec.service} · Latency")
    q = RawVars(spec)
    for sli in Sli:
        _percentile_row(spec, board, sli)
    _prompt_row(spec, board, q)
    _failed_requests_row(spec, board, q)
    data = dashboard_json(spec, board, f"Latency of {spec.service} by model, class and engine, with the SLO tiers.")
    return data, board.refs


def _failed_requests_row(spec: Spec, board: Board, q: RawVars) -> None:
    """Requests that ended before their first token, by reason: bad TTFT and E2E events in no latency histogram."""
    m = spec.metrics
    sides = [(side, metric) for side, metric in (("frontend", m.frontend_failed), ("engine", m.failed)) if metric]
    if not sides:
        return
    group = [*([q.model] if q.model else []), *([m.class_label] if m.class_label else []), schema.FAIL_REASON_LABEL]
    queries = [
        (f"sum by ({', '.join(group)}) ({rate(metric, q.raw(with_engine=False))})", f"{side} " + legend_format(*group))
        for side, metric in sides
    ]
    board.row("Requests failed before their first token", key=("failed",))
    board.add(
        timeseries(
            "Failed before the first token, by reason",
            "Requests per second that ended before their first token: the client gone (client_gone at the "
            "frontend, abort at the engine), an error, or refused by vLLM's admission control (rejected). They "
            "are in no latency histogram; the SLO rules count each as a bad TTFT and E2E event of its class, from "
            "the side (frontend or engine) the SLO is measured at. A request shows on both sides."
            if m.frontend_failed
            else "Requests per second vLLM's admission control refused (--max-num-queued-reqs/-tokens): in no "
            "latency histogram, counted by the SLO rules as bad TTFT and E2E events. vLLM counts client aborts "
            "nowhere (see docs/rules.md).",
            queries,
            "reqps",
            minimum=0,
        ),
        24,
        7,
        key=("failed",),
    )
