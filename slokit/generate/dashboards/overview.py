"""The SLO overview board: error budget, compliance, traffic, then per class and indicator its burn rates,
tier status and consistency interval.
"""

from __future__ import annotations

from typing import Any

from slokit import schema
from slokit.generate.dashboards.exprs import (
    LOW_TRAFFIC_TEXT,
    SLO_KEYS,
    enough,
    eq,
    legend_format,
    recorded,
    requests_5m,
    selector,
    slo_filter,
    too_little,
)
from slokit.generate.dashboards.grafana import (
    Board,
    dashboard_json,
    override_dashed,
    override_low_traffic,
    stat,
    state_timeline,
    threshold_steps,
    timeseries,
)
from slokit.generate.dashboards.identity import PanelRef, dashboard_uid
from slokit.schema import Sli
from slokit.spec import PERCENTILES, TIER_NAMES, RequestClass, SloSpec, Spec
from slokit.units import format_duration, prom_duration


def _slo_pairs(spec: Spec) -> list[tuple[RequestClass, SloSpec]]:
    return [(rc, slo) for rc in spec.classes for sli in Sli if (slo := rc.slos.get(sli)) is not None]


def _burn_windows(spec: Spec) -> list[float]:
    windows = {w.short for w in spec.alerting.burn_rates} | {w.long for w in spec.alerting.burn_rates}
    return sorted(windows)


def tier_state_expr(spec: Spec, rc: RequestClass, slo: SloSpec, pct: str) -> str | None:
    """0..3: the rank of the worst tier the percentile is over (tiers are ordered, so the ranks telescope)."""
    quantile = selector(
        schema.RECORD_LATENCY_QUANTILE,
        [*slo_filter(rc, slo.sli), eq("quantile", f"{PERCENTILES[pct]:g}")],
    )
    terms: list[str] = []
    previous = 0
    for rank, tier in enumerate(TIER_NAMES, start=1):
        threshold = slo.tiers.tier(tier).get(pct)
        if threshold is None:
            continue
        terms.append(f"({quantile} > bool {threshold:g}) * {rank - previous}")
        previous = rank
    if not terms:
        return None
    requests = requests_5m(slo_filter(rc, slo.sli))
    keys = f"on ({', '.join(SLO_KEYS)})"
    return f"({' + '.join(terms)}) and {keys} {enough(spec, requests)} or {keys} {too_little(spec, requests)}"


def _consistency_panel(spec: Spec, board: Board, rc: RequestClass, slo: SloSpec) -> None:
    """p99/p50 of a batch class: the interval the bucket edges prove (the alert reads its lower bound), the
    interpolated ratio, the limit dashed, and "too little traffic" below alerting.min_requests."""
    assert slo.consistency is not None
    limit = slo.consistency.max_p99_over_p50
    where = slo_filter(rc, slo.sli)
    requests = requests_5m(where)
    keys = f"on ({', '.join(SLO_KEYS)})"
    legend = legend_format(schema.RULE_LABEL_MODEL)
    board.add(
        timeseries(
            "p99 / p50: the interval the buckets prove",
            f"The true p99/p50 of {rc.name} {slo.sli.value} lies between the lower and the upper bound, from the "
            "bucket edges of p99 and p50; the consistency alert fires only when the lower bound is above the limit "
            f"({limit:g}, dashed), so bucket interpolation cannot fire it. The interpolated ratio is drawn for "
            f"reference. With fewer than {spec.alerting.min_requests} requests in the 5m window (alerting."
            f"min_requests) there is no reading: the grey \"{LOW_TRAFFIC_TEXT}\" line shows instead.",
            [
                (selector(schema.RECORD_CONSISTENCY_LOWER, where), f"lower bound {legend}"),
                (selector(schema.RECORD_CONSISTENCY_UPPER, where), f"upper bound {legend}"),
                (f"{selector(schema.RECORD_CONSISTENCY, where)} and {keys} {enough(spec, requests)}",
                 f"interpolated {legend}"),
                (too_little(spec, requests, 0), f"{LOW_TRAFFIC_TEXT} {legend}"),
            ],
            "suffix:x",
            thresholds=[(limit, "red")],
            overrides=[override_dashed("^interpolated ", "blue"), override_low_traffic()],
            minimum=0,
        ),
        24,
        8,
        key=("consistency", rc.name, slo.sli.value),
    )  # fmt: skip


def _budget_panel(spec: Spec, board: Board) -> None:
    """The remaining error budget first: it answers "how much room is left" before any rate or tier does."""
    budget = selector(schema.RECORD_ERROR_BUDGET_REMAINING, recorded())
    board.add(
        stat(
            "Error budget remaining",
            f"Share of the {format_duration(spec.window)} error budget still unspent, per class, latency indicator "
            "and model (1 = untouched, 0 = spent, below 0 = the objective is missed). Event-weighted: slow "
            "requests over all requests in the window, not an average of ratios.",
            [(budget, legend_format(schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO, schema.RULE_LABEL_MODEL))],
            "percentunit",
            threshold_steps("red", [(0.0, "orange"), (0.25, "yellow"), (0.5, "green")]),
        ),
        8,
        6,
        key=("budget",),
    )


def _compliance_panel(spec: Spec, board: Board) -> None:
    """Compliance over the SLO window per objective, red below the spec's lowest objective; a spec without
    objectives still gets the panel (reading "no objective") so the budget row keeps its shape."""
    compliance_queries = []
    for rc, slo in _slo_pairs(spec):
        if slo.objective is None:
            continue
        error_ratio = selector(schema.record_error_ratio(prom_duration(spec.window)), slo_filter(rc, slo.sli))
        compliance_queries.append(
            (
                f"1 - {error_ratio}",
                f"{rc.name} {slo.sli.value} {{{{{schema.RULE_LABEL_MODEL}}}}} "
                f"(objective {slo.objective.percentile:g}%)",
            )
        )
    objectives = sorted({slo.objective.target_ratio for _, slo in _slo_pairs(spec) if slo.objective is not None})
    board.add(
        stat(
            f"Compliance over {format_duration(spec.window)}",
            "Share of requests within the objective's threshold over the SLO window. Red below the lowest "
            "objective of the spec; compare each value with the objective in its name.",
            compliance_queries or [(f"vector(1) * 0 + {1}", "no objective")],
            "percentunit",
            threshold_steps("red", [(objectives[0], "green")] if objectives else []),
        ),
        8,
        6,
        key=("compliance",),
    )


def _traffic_panel(board: Board) -> None:
    """Requests per second beside the budget: a burn is only as costly as the traffic it is spent on."""
    board.add(
        timeseries(
            "Requests per second",
            "Requests finishing per second per model and class over 5m: the traffic the budgets above are spent "
            "on. A burn at low traffic costs few requests; the baseline alert ignores classes under its minimum.",
            [
                (
                    selector(schema.RECORD_REQUEST_RATE, recorded()),
                    legend_format(schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS),
                )
            ],
            "reqps",
            minimum=0,
        ),
        8,
        6,
        key=("traffic",),
    )


def _budget_row(spec: Spec, board: Board) -> None:
    """The top row, one glance for the whole service: budget left, compliance, traffic."""
    board.row(f"Error budget over {format_duration(spec.window)}", key=("budget",))
    _budget_panel(spec, board)
    _compliance_panel(spec, board)
    _traffic_panel(board)


def _burn_panel(spec: Spec, board: Board, rc: RequestClass, slo: SloSpec) -> None:
    """Burn rate over every alert window with the alert factors dashed, so a reader sees which pair of windows
    is about to fire; only objectives have a budget to burn."""
    sli = slo.sli
    assert slo.objective is not None
    queries = [
        (
            selector(schema.record_burn_rate(prom_duration(w)), slo_filter(rc, sli)),
            f"{prom_duration(w)} {{{{{schema.RULE_LABEL_MODEL}}}}}",
        )
        for w in _burn_windows(spec)
    ]
    factors = {
        (round(b.factor(spec.window), 3), spec.alerting.severity.label(b.severity)) for b in spec.alerting.burn_rates
    }
    steps = [(factor, "red" if sev == spec.alerting.severity.page else "orange") for factor, sev in factors]
    board.add(
        timeseries(
            "Burn rate by window",
            f"How fast the {sli.value} error budget of {rc.name} burns over each alert window (1 = the "
            f"budget lasts exactly {format_duration(spec.window)}). Dashed lines are the alert factors: "
            + ", ".join(
                f"{b.factor(spec.window):.3g}x over {format_duration(b.long)} and "
                f"{format_duration(b.short)} ({spec.alerting.severity.label(b.severity)})"
                for b in spec.alerting.burn_rates
            )
            + f"; the objective is {slo.objective.percentile:g}% within "
            f"{format_duration(slo.objective.threshold)}.",
            queries,
            "suffix:x",
            thresholds=sorted(steps),
            minimum=0,
        ),
        12,
        8,
        key=("burn", rc.name, sli.value),
    )


def _tier_lines(slo: SloSpec) -> list[str]:
    """Each percentile's tier thresholds in words ("p95: target 2s, acceptable 4s") for the panel description."""
    return slo.tiers.in_words()


def _tier_panel(spec: Spec, board: Board, rc: RequestClass, slo: SloSpec) -> None:
    """Which tier each percentile is in over time, the picture behind the tier alerts; absent when the SLO
    names no tiers."""
    sli = slo.sli
    tier_queries = []
    for pct in PERCENTILES:
        expr = tier_state_expr(spec, rc, slo, pct)
        if expr is not None:
            tier_queries.append((expr, f"{pct} {{{{{schema.RULE_LABEL_MODEL}}}}}"))
    if not tier_queries:
        return
    board.add(
        state_timeline(
            "Tier status per percentile",
            f"Which tier each percentile of {rc.name} {sli.value} is in, from the trailing 5m quantile "
            f"({'; '.join(_tier_lines(slo))}). A p95 over acceptable opens a ticket; a p50 over critical pages. With "
            f"fewer than {spec.alerting.min_requests} requests in the 5m window (alerting.min_requests) it "
            f'reads "{LOW_TRAFFIC_TEXT}": one slow request would be a p50, so the tier alerts stay quiet.',
            tier_queries,
        ),
        12,
        8,
        key=("tier", rc.name, sli.value),
    )


def _slo_row(spec: Spec, board: Board, rc: RequestClass, slo: SloSpec) -> None:
    """One row per class and indicator: burn rate, tier status and consistency, each only where the SLO asks."""
    board.row(f"{rc.name} · {schema.SLI_TITLES[slo.sli]} ({slo.sli.value})", key=("slo", rc.name, slo.sli.value))
    if slo.objective is not None:
        _burn_panel(spec, board, rc, slo)
    _tier_panel(spec, board, rc, slo)
    if slo.consistency is not None:
        _consistency_panel(spec, board, rc, slo)


def build(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    """The overview board and its panel references; panels are added in reading order, which fixes their ids."""
    name = "overview"
    board = Board(name, dashboard_uid(spec, name), f"{spec.service} · SLO overview")
    _budget_row(spec, board)
    for rc, slo in _slo_pairs(spec):
        _slo_row(spec, board, rc, slo)
    data = dashboard_json(spec, board, f"SLO overview of {spec.service}: error budgets, burn rates and tiers.")
    return data, board.refs
