"""The entry points: build a spec's three boards once, their files, and the panel each alert links to."""

from __future__ import annotations

import copy
from typing import Any, Final

from slokit.generate.dashboards import debugging, latency, overview
from slokit.generate.dashboards.identity import Built, PanelRef
from slokit.generate.dashboards.provisioning import (
    DASHBOARD_PROVISIONING,
    DATASOURCE_PROVISIONING,
    PROVISIONING_DASHBOARDS_PATH,
    PROVISIONING_DATASOURCE_PATH,
)
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.once import once
from slokit.spec import Spec

DASHBOARD_NAMES: Final = ("overview", "latency", "debugging")


def build(spec: Spec) -> Built:
    """The three dashboards of a spec (built once per spec: the runbook links to their panels too)."""
    return once(spec, "dashboards", None, lambda: _build(spec))


def _build(spec: Spec) -> Built:
    dashboards: dict[str, dict[str, Any]] = {}
    refs: dict[tuple[str, ...], PanelRef] = {}
    for name, builder in (("overview", overview.build), ("latency", latency.build), ("debugging", debugging.build)):
        data, board_refs = builder(spec)
        dashboards[name] = data
        refs.update(board_refs)
    return Built(dashboards, refs)


def files(spec: Spec) -> dict[str, Any]:
    """`dashboards/<service>-<name>.json` for each dashboard, plus the Grafana provisioning files."""
    built = build(spec)
    out: dict[str, Any] = {
        f"dashboards/{spec.service}-{name}.json": copy.deepcopy(data) for name, data in built.dashboards.items()
    }  # copies: the built boards are shared with the runbook
    out[PROVISIONING_DATASOURCE_PATH] = DATASOURCE_PROVISIONING
    out[PROVISIONING_DASHBOARDS_PATH] = DASHBOARD_PROVISIONING
    return out


def panel_for(built: Built, rule: AlertRule) -> PanelRef:
    """The panel that shows what `rule` watches: where the runbook (and on-call) should look first."""
    refs = built.refs
    sli = rule.sli.value if rule.sli is not None else None
    candidates: list[tuple[str, ...]] = []
    if rule.kind is AlertKind.BURN_RATE and rule.request_class and sli:
        candidates.append(("burn", rule.request_class, sli))
    if rule.kind is AlertKind.TIER and rule.request_class and sli:
        candidates.append(("tier", rule.request_class, sli))
    if rule.kind is AlertKind.CONSISTENCY and rule.request_class and sli:
        candidates.append(("consistency", rule.request_class, sli))
    if rule.kind in (AlertKind.BASELINE, AlertKind.CONSISTENCY, AlertKind.TIER) and sli:
        if rule.request_class:  # the panel of the histogram this class's SLO reads
            candidates.append(("latency", sli, rule.request_class))
        candidates.append(("latency", sli))
    if rule.kind in (AlertKind.SCALE_OUT, AlertKind.QUEUE_OVERLOAD):
        candidates.append(("queue",))
    if rule.kind is AlertKind.KV_CACHE:
        candidates.append(("kv",))
    if rule.kind in (AlertKind.ABSENT, AlertKind.EXPORTER_GONE):
        candidates.append(("engines",))
    if sli:
        candidates.append(("latency", sli))
    candidates.append(("budget",))
    for key in candidates:
        if key in refs:
            return refs[key]
    raise KeyError(rule.name)  # unreachable: ("budget",) always exists


def panel_variables(spec: Spec, rule: AlertRule) -> dict[str, str]:
    """Dashboard variables preset for an alert: its service, model and class."""
    variables = {"service": spec.service}
    if rule.model is not None:
        variables["model"] = rule.model
    if rule.request_class is not None:
        variables["class"] = rule.request_class
    return variables


def panel_url(spec: Spec, rule: AlertRule, built: Built | None = None) -> str:
    """Link to the panel for `rule`, with its model and class preset: `alerting.grafana_url` + the panel path."""
    built = build(spec) if built is None else built
    ref = panel_for(built, rule)
    base = spec.alerting.grafana_url.rstrip("/")
    return base + ref.path(panel_variables(spec, rule))
