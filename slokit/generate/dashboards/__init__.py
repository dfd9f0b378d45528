"""Grafana dashboards generated from the spec: SLO overview, latency, and debugging in runbook order.

grafanalib is in maintenance mode, so only `grafana.py` (the adapter) imports it: the boards and the rest of slokit
see plain JSON data (`files`) and panel references (`panel_url`, `panel_for`), which keeps a later move to
Grafana's foundation SDK a one-module change. Panels are laid out by the adapter's `Board`, not by grafanalib, and
each panel's id is a hash of its dashboard's uid and its key (what it shows: `identity.panel_id`), never its place:
an alert's runbook section and users' bookmarks link to a panel by id (`viewPanel=`), and those links must survive
a regeneration and an upgrade that adds or removes other panels.

Three dashboards per service, all filtered by the same variables (`datasource`, `service`, `model`, `class`,
`engine`), one module each:

1. `overview`: error budget remaining, compliance over the SLO window, burn rate by alert window, tier status per
   percentile ("too little traffic" below `alerting.min_requests`), the p99/p50 interval of consistency
   objectives; one row per class and latency indicator, with that class's thresholds.
2. `latency`: TTFT, ITL, TPOT and E2E p50/p95/p99 from the histogram each SLO reads (`Spec.histogram`: the
   frontend's, the engine's or a custom one, scaled to seconds), each class's tier thresholds drawn as lines on the
   panel of its own histogram, the engine's histogram beside the frontend's for comparison, latency heatmaps, TTFT
   against prompt length.
3. `debugging`: one row per step of `slokit.generate.debug_steps`, in the runbook's order.

Beside them: `exprs` (PromQL over the dashboard variables), `identity` (uids, panel references), `provisioning`
(Grafana's provisioning files), `reading` (the queries inside generated JSON, for tests and checks) and `boards`
(the entry points). Every query is built from the metric names in `slokit.schema`; none is spelled here.
"""

from slokit.generate.dashboards.boards import DASHBOARD_NAMES, build, files, panel_for, panel_url, panel_variables
from slokit.generate.dashboards.exprs import LOW_TRAFFIC_TEXT, LOW_TRAFFIC_VALUE
from slokit.generate.dashboards.grafana import DATASOURCE_REF, DATASOURCE_VAR, SCHEMA_VERSION
from slokit.generate.dashboards.identity import Built, PanelRef, class_values, dashboard_uid, model_values, panel_id
from slokit.generate.dashboards.latency import histogram_panels
from slokit.generate.dashboards.provisioning import (
    GRAFANA_DASHBOARD_DIR,
    PROVISIONED_DATASOURCE_UID,
    PROVISIONING_DASHBOARDS_PATH,
    PROVISIONING_DATASOURCE_PATH,
)
from slokit.generate.dashboards.reading import annotation_queries, queries, variable_queries

__all__ = [
    "DASHBOARD_NAMES",
    "DATASOURCE_REF",
    "DATASOURCE_VAR",
    "GRAFANA_DASHBOARD_DIR",
    "LOW_TRAFFIC_TEXT",
    "LOW_TRAFFIC_VALUE",
    "PROVISIONED_DATASOURCE_UID",
    "PROVISIONING_DASHBOARDS_PATH",
    "PROVISIONING_DATASOURCE_PATH",
    "SCHEMA_VERSION",
    "Built",
    "PanelRef",
    "annotation_queries",
    "build",
    "class_values",
    "dashboard_uid",
    "files",
    "histogram_panels",
    "model_values",
    "panel_for",
    "panel_id",
    "panel_url",
    "panel_variables",
    "queries",
    "variable_queries",
]
