"""Grafana dashboards generated from the spec: SLO overview, latency, and debugging in runbook order.

The only module that imports grafanalib. grafanalib is in maintenance mode, so everything it is used for stays
here: the rest of slokit sees plain JSON data (`files`) and panel references (`panel_url`, `panel_ref`), which
keeps a later move to Grafana's foundation SDK a one-module change. Panels are laid out and numbered here, not
by grafanalib, so ids and positions are stable: an alert's runbook section links to a panel by id, and that link
must survive a regeneration.

Three dashboards per service, all filtered by the same variables (`datasource`, `service`, `model`, `class`,
`engine`):

1. **SLO overview**: error budget remaining, compliance over the SLO window, burn rate by alert window, tier status
   per percentile ("too little traffic" below `alerting.min_requests`), the p99/p50 interval of consistency
   objectives; one row per class and latency indicator, with that class's thresholds.
2. **Latency**: TTFT, ITL, TPOT and E2E p50/p95/p99 from the histogram each SLO reads (`Spec.histogram`: the
   frontend's, the engine's or a custom one, scaled to seconds), each class's tier thresholds drawn as lines on
   the panel of its own histogram, the engine's histogram beside the frontend's for comparison, latency heatmaps,
   TTFT against prompt length.
3. **Debugging**, in the runbook's order: the API server, queue depth, decode throughput against the planner's
   expected tokens/s at the batch each engine runs, KV cache, interconnect and GPU.

Every query is built from the metric names in `slokit.schema`; none is spelled here.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from slokit import promql, schema
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.queries import Queries, expected_decode_at_batch, union
from slokit.generate.writer import notice
from slokit.plan import roofline
from slokit.schema import Sli, Source
from slokit.spec import PERCENTILES, TIER_NAMES, RequestClass, SloSpec, Spec
from slokit.units import format_duration, prom_duration

DATASOURCE_VAR: Final = "datasource"
DATASOURCE_REF: Final = {"type": "prometheus", "uid": "${datasource}"}
PROVISIONED_DATASOURCE_UID: Final = "slokit-prometheus"
PROVISIONING_DATASOURCE_PATH: Final = "dashboards/provisioning/datasources/slokit.yaml"
PROVISIONING_DASHBOARDS_PATH: Final = "dashboards/provisioning/dashboards/slokit.yaml"
GRAFANA_DASHBOARD_DIR: Final = "/var/lib/grafana/dashboards/slokit"
SCHEMA_VERSION: Final = 39  # Grafana 10.4 / 11: modern panels, no legacy migrations applied on load
DASHBOARD_NAMES: Final = ("overview", "latency", "debugging")
LATENCY_QUANTILES: Final = (0.5, 0.95, 0.99)
GRID_WIDTH: Final = 24
TIER_COLORS: Final = {"target": "green", "acceptable": "orange", "critical": "red"}
# Tier status value -> text. The value is the rank of the worst tier the percentile is over (0: within all).
TIER_STATE_TEXT: Final = {0: "within target", 1: "over target", 2: "over acceptable", 3: "over critical"}
TIER_STATE_COLORS: Final = {0: "green", 1: "yellow", 2: "orange", 3: "red"}
# Below alerting.min_requests requests in the 5m window a tier, consistency or scale-out reading is a trickle: the
# alerts stay quiet and the panels say so (the tier state shows this value, mapped to the text).
LOW_TRAFFIC_VALUE: Final = -1
LOW_TRAFFIC_TEXT: Final = "too little traffic"
LOW_TRAFFIC_COLOR: Final = "#8e8e8e"


# ==============================================================================================================
# Panel references: what the runbook and alerts link to
# ==============================================================================================================
@dataclass(frozen=True)
class PanelRef:
    """Where one panel lives: dashboard uid and title, panel id and title."""

    dashboard: str  # short name: overview, latency, debugging
    uid: str
    dashboard_title: str
    panel_id: int
    title: str

    def path(self, variables: Mapping[str, str] | None = None) -> str:
        """The Grafana path (no host) that opens this panel alone, with variables preset."""
        query: list[tuple[str, str]] = [("orgId", "1"), ("viewPanel", str(self.panel_id))]
        for name, value in (variables or {}).items():
            query.append((f"var-{name}", value))
        slug = _slug(self.dashboard_title)
        return f"/d/{self.uid}/{slug}?{urllib.parse.urlencode(query)}"


@dataclass
class _Board:
    """A dashboard being built: panels placed on the grid in order, ids assigned in order."""

    name: str
    uid: str
    title: str
    panels: list[g.Panel] = field(default_factory=list)
    refs: dict[tuple[str, ...], PanelRef] = field(default_factory=dict)
    next_id: int = 1
    y: int = 0
    x: int = 0
    row_height: int = 0

    def row(self, title: str) -> None:
        """Start a new row (a full-width row header)."""
        self._newline()
        self.panels.append(g.RowPanel(title=title, id=self._id(), gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=self.y)))
        self.y += 1

    def add(self, panel: g.Panel, width: int, height: int, key: tuple[str, ...] | None = None) -> None:
        """Place `panel` right of the previous one, wrapping to a new line when the row is full."""
        if self.x + width > GRID_WIDTH:
            self._newline()
        panel.id = self._id()
        panel.gridPos = g.GridPos(h=height, w=width, x=self.x, y=self.y)
        self.x += width
        self.row_height = max(self.row_height, height)
        self.panels.append(panel)
        if key is not None:
            self.refs[key] = PanelRef(self.name, self.uid, self.title, panel.id, panel.title)

    def _newline(self) -> None:
        self.y += self.row_height
        self.x = 0
        self.row_height = 0

    def _id(self) -> int:
        value = self.next_id
        self.next_id += 1
        return value


# ==============================================================================================================
# PromQL helpers (selectors with Grafana variables; values quoted, never spliced raw)
# ==============================================================================================================
def _quote(value: str) -> str:
    """A PromQL string literal (promql.py's quoting)."""
    return promql.quote(value)


def _scope(spec: Spec) -> list[str]:
    """The spec's deployment scope (`selector:` labels every model shares, from queries.py) as matchers."""
    return [f"{label}{op}{_quote(value)}" for label, op, value in Queries(spec).common_selector()]


def _selector(metric: str, matchers: Sequence[str]) -> str:
    inner = ", ".join(matchers)
    return f"{metric}{{{inner}}}" if inner else metric


def _eq(label: str, value: str) -> str:
    return f"{label}={_quote(value)}"


def _var(label: str, variable: str) -> str:
    """A regex matcher on a Grafana multi-value variable (Grafana regex-escapes the values it substitutes)."""
    return f'{label}=~"${variable}"'


def _label_value(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={_quote(v)}" for k, v in labels.items())


def _constant(value: float, labels: Mapping[str, str]) -> str:
    """A constant series carrying `labels` (for engine maxima and thresholds drawn as lines)."""
    expr = f"vector({value:g})"
    for name, label_value in labels.items():
        expr = f'label_replace({expr}, {_quote(name)}, {_quote(label_value)}, "", "")'
    return expr


def _legend(*labels: str) -> str:
    return " ".join("{{" + label + "}}" for label in labels)


@dataclass(frozen=True)
class _Q:
    """Label names and matchers for one spec's raw metrics."""

    spec: Spec

    @property
    def m(self) -> schema.SourceMetrics:
        return self.spec.metrics

    @property
    def model(self) -> str:
        return self.m.model_label

    @property
    def by(self) -> str:
        """Grouping labels for per-series panels: model, class (where the source has it), replica, engine."""
        labels = [self.model]
        if self.m.class_label is not None:
            labels.append(self.m.class_label)
        labels.extend(self.spec.alerting.replica_labels)
        labels.append(self.m.engine_label)
        return ", ".join(labels)

    @property
    def by_labels(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.by.split(","))

    def raw(self, *, with_class: bool = True, with_engine: bool = True) -> list[str]:
        """Matchers on raw (exporter) metrics for the dashboard variables."""
        matchers = [*_scope(self.spec), _var(self.model, "model")]
        if with_class and self.m.class_label is not None:
            matchers.append(_var(self.m.class_label, "class"))
        if with_engine:
            matchers.append(_var(self.m.engine_label, "engine"))
        return matchers

    def engine_only(self) -> list[str]:
        """Matchers for engine-level gauges (no class label even on the slokit source)."""
        return [*_scope(self.spec), _var(self.model, "model"), _var(self.m.engine_label, "engine")]


def _recorded(service_var: bool = True, *, model: bool = True, request_class: bool = True) -> list[str]:
    """Matchers on slokit's recorded series (labels service, model, class, slo)."""
    matchers = []
    if service_var:
        matchers.append(_var(schema.RULE_LABEL_SERVICE, "service"))
    if model:
        matchers.append(_var(schema.RULE_LABEL_MODEL, "model"))
    if request_class:
        matchers.append(_var(schema.RULE_LABEL_CLASS, "class"))
    return matchers


def _quantile(q: float, bucket_rate: str, by: str) -> str:
    return f"histogram_quantile({q:g}, sum by (le, {by}) ({bucket_rate}))"


def _rate(metric: str, matchers: Sequence[str]) -> str:
    return f"rate({_selector(metric, matchers)}[$__rate_interval])"


# ==============================================================================================================
# Panels
# ==============================================================================================================
def _target(expr: str, legend: str, ref: str, *, fmt: str = "time_series", instant: bool = False) -> g.Target:
    return g.Target(expr=expr, legendFormat=legend, refId=ref, format=fmt, instant=instant, datasource=DATASOURCE_REF)


def _targets(queries: Iterable[tuple[str, str]]) -> list[g.Target]:
    return [_target(expr, legend, _ref_id(i)) for i, (expr, legend) in enumerate(queries)]


def _ref_id(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return letters


def _steps(base: str, steps: Iterable[tuple[float, str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"color": base, "value": None}]
    out.extend({"color": color, "value": value} for value, color in sorted(steps))
    return out


def _timeseries(
    title: str,
    description: str,
    queries: Iterable[tuple[str, str]],
    unit: str,
    *,
    thresholds: Iterable[tuple[float, str]] = (),
    overrides: Sequence[dict[str, Any]] = (),
    minimum: float | None = None,
    maximum: float | None = None,
) -> g.TimeSeries:
    steps = list(thresholds)
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE_REF,
        targets=_targets(queries),
        unit=unit,
        thresholds=_steps("green", steps) if steps else _steps("green", []),
        thresholdsStyleMode="dashed" if steps else "off",
        overrides=list(overrides),
        valueMin=minimum,
        valueMax=maximum,
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        spanNulls=False,
    )


def _stat(
    title: str,
    description: str,
    queries: Iterable[tuple[str, str]],
    unit: str,
    thresholds: list[dict[str, Any]],
) -> g.Stat:
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE_REF,
        targets=_targets(queries),
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="area",
        colorMode="background",
        textMode="value_and_name",
        noValue="no data",
        thresholds=thresholds,
        extraJson={"fieldConfig": {"defaults": {"thresholds": {"mode": "absolute", "steps": thresholds}}}},
    )


def _heatmap(title: str, description: str, expr: str, unit: str) -> g.Heatmap:
    target = _target(expr, "{{le}}", "A", fmt="heatmap")
    return g.Heatmap(
        title=title,
        description=description,
        dataSource=DATASOURCE_REF,
        targets=[target],
        dataFormat="tsbuckets",
        hideZeroBuckets=True,
        extraJson={
            "fieldConfig": {"defaults": {"unit": unit, "custom": {"scaleDistribution": {"type": "linear"}}}},
            "options": {
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5},
                "yAxis": {"axisPlacement": "left", "unit": unit},
                "rowsFrame": {"layout": "auto"},
                "tooltip": {"mode": "single", "yHistogram": True},
                "legend": {"show": True},
                "filterValues": {"le": 1e-9},
            },
            "pluginVersion": "10.4.0",
        },
    )


def _state_timeline(title: str, description: str, queries: Iterable[tuple[str, str]]) -> g.StateTimeline:
    options: dict[str, Any] = {
        str(value): {"text": text, "color": TIER_STATE_COLORS[value], "index": value}
        for value, text in TIER_STATE_TEXT.items()
    }
    options[str(LOW_TRAFFIC_VALUE)] = {"text": LOW_TRAFFIC_TEXT, "color": LOW_TRAFFIC_COLOR, "index": len(options)}
    mappings = [{"type": "value", "options": options}]
    panel = g.StateTimeline(
        title=title,
        description=description,
        dataSource=DATASOURCE_REF,
        targets=_targets(queries),
        mappings=mappings,
        colorMode="thresholds",
        extraJson={
            "fieldConfig": {
                "defaults": {
                    "unit": "none",
                    "thresholds": {"mode": "absolute", "steps": _steps("green", [(1, "yellow"), (2, "orange"),
                                                                                  (3, "red")])},
                }
            }
        },
    )  # fmt: skip
    return panel


def _override_axis_right(name_regex: str, unit: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byRegexp", "options": name_regex},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def _override_dashed(name_regex: str, color: str | None = None) -> dict[str, Any]:
    properties: list[dict[str, Any]] = [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "custom.lineWidth", "value": 2},
    ]
    if color is not None:
        properties.append({"id": "color", "value": {"mode": "fixed", "fixedColor": color}})
    return {"matcher": {"id": "byRegexp", "options": name_regex}, "properties": properties}


def _override_low_traffic() -> dict[str, Any]:
    """The `too little traffic` series of a panel: a thick grey line along 0 whose value reads as that text."""
    return {
        "matcher": {"id": "byRegexp", "options": f"^{LOW_TRAFFIC_TEXT} "},
        "properties": [
            {"id": "color", "value": {"mode": "fixed", "fixedColor": LOW_TRAFFIC_COLOR}},
            {"id": "custom.lineWidth", "value": 6},
            {"id": "custom.fillOpacity", "value": 0},
            {"id": "mappings", "value": [
                {"type": "value", "options": {"0": {"text": LOW_TRAFFIC_TEXT, "color": LOW_TRAFFIC_COLOR}}}
            ]},
        ],
    }  # fmt: skip


# ==============================================================================================================
# Variables, identity
# ==============================================================================================================
def dashboard_uid(spec: Spec, name: str) -> str:
    """Stable uid (Grafana allows 40 characters): `<service>-<name>`, hashed when the service name is long."""
    uid = f"{spec.service}-{name}"
    if len(uid) <= 40:
        return uid
    digest = hashlib.sha256(spec.service.encode()).hexdigest()[:8]
    return f"{spec.service[: 40 - len(name) - 10]}-{digest}-{name}"


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _custom_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,")


def _custom_var(name: str, label: str, values: Sequence[str], *, include_all: bool = True) -> g.Template:
    options = [{"selected": False, "text": value, "value": value} for value in values]
    current: dict[str, Any]
    if include_all:
        options.insert(0, {"selected": True, "text": "All", "value": "$__all"})
        current = {"selected": True, "text": ["All"], "value": ["$__all"]}
    else:
        options[0]["selected"] = True
        current = {"selected": True, "text": values[0], "value": values[0]}
    template = g.Template(
        name=name,
        label=label,
        query=",".join(_custom_escape(v) for v in values),
        type="custom",
        includeAll=include_all,
        multi=include_all,
        options=options,
    )
    template._current = current
    return template


def model_values(spec: Spec) -> list[str]:
    """The values of the `model` variable: the spec's served model names."""
    return [model.name for model in spec.models]


def class_values(spec: Spec) -> list[str]:
    """The values of the `class` variable: the spec's classes, plus `other` where the exporter counts it."""
    values = [request_class.name for request_class in spec.classes]
    if spec.source is Source.SLOKIT:
        values.append(schema.OTHER_CLASS)
    return values


def _templating(spec: Spec) -> g.Templating:
    m = spec.metrics
    datasource = g.Template(
        name=DATASOURCE_VAR,
        label="Prometheus",
        query="prometheus",
        type="datasource",
        default="default",
        refresh=1,
    )
    datasource._current = {"selected": False, "text": "default", "value": "default"}
    service = _custom_var("service", "Service", [spec.service], include_all=False)
    model = _custom_var("model", "Model", model_values(spec))
    request_class = _custom_var("class", "Class", class_values(spec))
    engine = g.Template(
        name="engine",
        label="Engine",
        query={
            "query": f"label_values({_selector(m.requests_running, [*_scope(spec), _var(m.model_label, 'model')])}, "
            f"{m.engine_label})",
            "refId": "engine",
        },
        type="query",
        dataSource=DATASOURCE_REF,
        includeAll=True,
        multi=True,
        allValue=".*",
        refresh=2,
        sort=3,
    )
    engine._current = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return g.Templating(list=[datasource, service, model, request_class, engine])


def _dashboard(spec: Spec, board: _Board, description: str) -> dict[str, Any]:
    spec_name = Path(spec.path).name if spec.path else spec.service
    links = [
        g.DashboardLink(
            title="slokit",
            type="dashboards",
            tags=[f"slokit-{spec.service}"],
            asDropdown=True,
            includeVars=True,
            keepTime=True,
        )
    ]
    alerts = {
        "datasource": DATASOURCE_REF,
        "enable": True,
        "expr": _selector(
            schema.PROMETHEUS_ALERTS, ['alertstate="firing"', _var(schema.RULE_LABEL_SERVICE, "service")]
        ),
        "iconColor": "red",
        "name": "slokit alerts",
        "step": "1m",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{severity}} {{model}} {{class}} {{slo}}",
        "useValueForTime": False,
    }
    dash = g.Dashboard(
        title=board.title,
        annotations=g.Annotations(list=[alerts]),
        uid=board.uid,
        description=f"{description} {notice(spec_name)}",
        tags=["slokit", f"slokit-{spec.service}"],
        timezone="utc",
        refresh="30s",
        schemaVersion=SCHEMA_VERSION,
        time=g.Time("now-6h", "now"),
        templating=_templating(spec),
        panels=board.panels,
        links=links,
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
    )
    data: dict[str, Any] = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    for unused in ("rows", "style", "hideControls", "sharedCrosshair", "gnetId", "id", "__inputs"):
        data.pop(unused, None)
    data["panels"] = [_clean_panel(panel) for panel in data["panels"]]
    return data


_PANEL_NOISE: Final = ("height", "span", "minSpan", "error", "cacheTimeout", "repeat", "repeatDirection", "maxPerRow",
                       "timeFrom", "timeShift", "hideTimeOverride", "interval", "editable")  # fmt: skip


_OLD_HEATMAP_KEYS: Final = ("cards", "color", "dataFormat", "heatmap", "hideZeroBuckets", "highlightCards", "legend",
                             "reverseYBuckets", "tooltip", "xAxis", "xBucketNumber", "xBucketSize", "yAxis",
                             "yBucketBound", "yBucketNumber", "yBucketSize")  # fmt: skip


def _clean_panel(panel: dict[str, Any]) -> dict[str, Any]:
    """Drop grafanalib's legacy keys that modern Grafana ignores, so the golden JSON shows what matters."""
    panel.pop("maxDataPoints", None)  # grafanalib's 100 points is coarse; Grafana's default follows the panel width
    for key in _PANEL_NOISE:
        if panel.get(key) in (None, False, "", []) or key in ("height", "span", "minSpan", "editable"):
            panel.pop(key, None)
    if panel.get("type") == "row":
        panel.pop("datasource", None)
        panel.pop("targets", None)
        panel.pop("fieldConfig", None)
        panel.pop("transformations", None)
        panel.pop("maxDataPoints", None)
        panel.pop("links", None)
        panel.pop("description", None)
    if panel.get("type") == "heatmap":
        # grafanalib writes the old (Angular) heatmap keys; the options above are the current panel's, and with
        # them present Grafana runs no migration, so the old keys would only be noise.
        for key in _OLD_HEATMAP_KEYS:
            panel.pop(key, None)
    for target in panel.get("targets", []):
        for key in ("target", "metric", "step", "intervalFactor", "interval", "hide", "query"):
            target.pop(key, None)
    return panel


# ==============================================================================================================
# The SLO overview
# ==============================================================================================================
def _slo_pairs(spec: Spec) -> list[tuple[RequestClass, SloSpec]]:
    return [(rc, slo) for rc in spec.classes for sli in Sli if (slo := rc.slos.get(sli)) is not None]


def _slo_filter(rc: RequestClass, sli: Sli) -> list[str]:
    return [
        _var(schema.RULE_LABEL_SERVICE, "service"),
        _eq(schema.RULE_LABEL_CLASS, rc.name),
        _eq(schema.RULE_LABEL_SLO, sli.value),
        _var(schema.RULE_LABEL_MODEL, "model"),
    ]


def _burn_windows(spec: Spec) -> list[float]:
    windows = {w.short for w in spec.alerting.burn_rates} | {w.long for w in spec.alerting.burn_rates}
    return sorted(windows)


def _tier_state_expr(spec: Spec, rc: RequestClass, slo: SloSpec, pct: str) -> str | None:
    """0..3: the rank of the worst tier the percentile is over (tiers are ordered, so the ranks telescope)."""
    quantile = _selector(
        schema.RECORD_LATENCY_QUANTILE,
        [*_slo_filter(rc, slo.sli), _eq("quantile", f"{PERCENTILES[pct]:g}")],
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
    requests = _requests_5m(_slo_filter(rc, slo.sli))
    keys = f"on ({', '.join(_SLO_KEYS)})"
    return f"({' + '.join(terms)}) and {keys} {_enough(spec, requests)} or {keys} {_too_little(spec, requests)}"


_SLO_KEYS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)


def _requests_5m(matchers: Sequence[str]) -> str:
    """Requests in the last 5m per SLO (model, class, indicator), from the recorded bucket rates: what the traffic
    guard of the tier, baseline, consistency and scale-out alerts counts (alerts.traffic_guard)."""
    inf = f"{promql.INF_MATCHER[0]}={_quote(promql.INF_MATCHER[2])}"
    total = _selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, inf])
    return f"sum by ({', '.join(_SLO_KEYS)}) ({total}) * 300"


def _enough(spec: Spec, requests: str) -> str:
    return f"({requests} >= {spec.alerting.min_requests})"


def _too_little(spec: Spec, requests: str, value: int = LOW_TRAFFIC_VALUE) -> str:
    """`value` per SLO while it has fewer than alerting.min_requests requests in the 5m window."""
    shift = f" - {-value}" if value < 0 else f" + {value}" if value > 0 else ""
    return f"(({requests} < {spec.alerting.min_requests}) * 0{shift})"


def _consistency_panel(spec: Spec, board: _Board, rc: RequestClass, slo: SloSpec) -> None:
    """p99/p50 of a batch class: the interval the bucket edges prove (the alert reads its lower bound), the
    interpolated ratio, the limit dashed, and "too little traffic" below alerting.min_requests."""
    assert slo.consistency is not None
    limit = slo.consistency.max_p99_over_p50
    where = _slo_filter(rc, slo.sli)
    requests = _requests_5m(where)
    keys = f"on ({', '.join(_SLO_KEYS)})"
    legend = _legend(schema.RULE_LABEL_MODEL)
    board.add(
        _timeseries(
            "p99 / p50: the interval the buckets prove",
            f"The true p99/p50 of {rc.name} {slo.sli.value} lies between the lower and the upper bound, from the "
            "bucket edges of p99 and p50; the consistency alert fires only when the lower bound is above the limit "
            f"({limit:g}, dashed), so bucket interpolation cannot fire it. The interpolated ratio is drawn for "
            f"reference. With fewer than {spec.alerting.min_requests} requests in the 5m window (alerting."
            f"min_requests) there is no reading: the grey \"{LOW_TRAFFIC_TEXT}\" line shows instead.",
            [
                (_selector(schema.RECORD_CONSISTENCY_LOWER, where), f"lower bound {legend}"),
                (_selector(schema.RECORD_CONSISTENCY_UPPER, where), f"upper bound {legend}"),
                (f"{_selector(schema.RECORD_CONSISTENCY, where)} and {keys} {_enough(spec, requests)}",
                 f"interpolated {legend}"),
                (_too_little(spec, requests, 0), f"{LOW_TRAFFIC_TEXT} {legend}"),
            ],
            "suffix:x",
            thresholds=[(limit, "red")],
            overrides=[_override_dashed("^interpolated ", "blue"), _override_low_traffic()],
            minimum=0,
        ),
        24,
        8,
        key=("consistency", rc.name, slo.sli.value),
    )  # fmt: skip


def _overview(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    name = "overview"
    board = _Board(name, dashboard_uid(spec, name), f"{spec.service} · SLO overview")
    board.row(f"Error budget over {format_duration(spec.window)}")
    budget = _selector(schema.RECORD_ERROR_BUDGET_REMAINING, _recorded())
    board.add(
        _stat(
            "Error budget remaining",
            f"Share of the {format_duration(spec.window)} error budget still unspent, per class, latency indicator "
            "and model (1 = untouched, 0 = spent, below 0 = the objective is missed). Event-weighted: slow "
            "requests over all requests in the window, not an average of ratios.",
            [(budget, _legend(schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO, schema.RULE_LABEL_MODEL))],
            "percentunit",
            _steps("red", [(0.0, "orange"), (0.25, "yellow"), (0.5, "green")]),
        ),
        8,
        6,
        key=("budget",),
    )
    compliance_queries = []
    for rc, slo in _slo_pairs(spec):
        if slo.objective is None:
            continue
        error_ratio = _selector(schema.record_error_ratio(prom_duration(spec.window)), _slo_filter(rc, slo.sli))
        compliance_queries.append(
            (
                f"1 - {error_ratio}",
                f"{rc.name} {slo.sli.value} {{{{{schema.RULE_LABEL_MODEL}}}}} "
                f"(objective {slo.objective.percentile:g}%)",
            )
        )
    objectives = sorted({slo.objective.target_ratio for _, slo in _slo_pairs(spec) if slo.objective is not None})
    board.add(
        _stat(
            f"Compliance over {format_duration(spec.window)}",
            "Share of requests within the objective's threshold over the SLO window. Red below the lowest "
            "objective of the spec; compare each value with the objective in its name.",
            compliance_queries or [(f"vector(1) * 0 + {1}", "no objective")],
            "percentunit",
            _steps("red", [(objectives[0], "green")] if objectives else []),
        ),
        8,
        6,
        key=("compliance",),
    )
    board.add(
        _timeseries(
            "Requests per second",
            "Requests finishing per second per model and class over 5m: the traffic the budgets above are spent "
            "on. A burn at low traffic costs few requests; the baseline alert ignores classes under its minimum.",
            [
                (
                    _selector(schema.RECORD_REQUEST_RATE, _recorded()),
                    _legend(schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS),
                )
            ],
            "reqps",
            minimum=0,
        ),
        8,
        6,
        key=("traffic",),
    )
    for rc, slo in _slo_pairs(spec):
        sli = slo.sli
        board.row(f"{rc.name} · {schema.SLI_TITLES[sli]} ({sli.value})")
        if slo.objective is not None:
            queries = [
                (
                    _selector(schema.record_burn_rate(prom_duration(w)), _slo_filter(rc, sli)),
                    f"{prom_duration(w)} {{{{{schema.RULE_LABEL_MODEL}}}}}",
                )
                for w in _burn_windows(spec)
            ]
            factors = {
                (round(b.factor(spec.window), 3), spec.alerting.severity.label(b.severity))
                for b in spec.alerting.burn_rates
            }
            steps = [(factor, "red" if sev == spec.alerting.severity.page else "orange") for factor, sev in factors]
            board.add(
                _timeseries(
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
        tier_queries = []
        for pct in PERCENTILES:
            expr = _tier_state_expr(spec, rc, slo, pct)
            if expr is not None:
                tier_queries.append((expr, f"{pct} {{{{{schema.RULE_LABEL_MODEL}}}}}"))
        if tier_queries:
            lines = []
            for pct in PERCENTILES:
                named = [
                    f"{tier} {format_duration(slo.tiers.tier(tier)[pct])}"
                    for tier in TIER_NAMES
                    if pct in slo.tiers.tier(tier)
                ]
                if named:
                    lines.append(f"{pct}: " + ", ".join(named))
            board.add(
                _state_timeline(
                    "Tier status per percentile",
                    f"Which tier each percentile of {rc.name} {sli.value} is in, from the trailing 5m quantile "
                    f"({'; '.join(lines)}). A p95 over acceptable opens a ticket; a p50 over critical pages. With "
                    f"fewer than {spec.alerting.min_requests} requests in the 5m window (alerting.min_requests) it "
                    f'reads "{LOW_TRAFFIC_TEXT}": one slow request would be a p50, so the tier alerts stay quiet.',
                    tier_queries,
                ),
                12,
                8,
                key=("tier", rc.name, sli.value),
            )
        if slo.consistency is not None:
            _consistency_panel(spec, board, rc, slo)
    data = _dashboard(spec, board, f"SLO overview of {spec.service}: error budgets, burn rates and tiers.")
    return data, board.refs


# ==============================================================================================================
# Latency
# ==============================================================================================================
@dataclass(frozen=True)
class _HistogramPanel:
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
    def unit(self) -> str:
        """The Grafana unit of the histogram's own `le` (heatmaps show buckets as exported)."""
        return "ms" if self.hist.scale == 0.001 else "s"


def _own_matchers(hist: schema.CustomHistogram) -> tuple[tuple[str, str, str], ...]:
    """The histogram's own matchers without the source's class label (a custom `selector:` stays)."""
    return tuple(m for m in hist.matchers if hist.class_label is None or m[0] != hist.class_label)


def histogram_panels(spec: Spec, sli: Sli) -> list[_HistogramPanel]:
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
        panels.append(_HistogramPanel(sli, hist, tuple(classes), where))
    # The engine's own histogram beside the API server's (how much the API server adds), or alone when no SLO is
    # on the indicator; not beside a custom histogram, whose exporter need not be slokit's or the engine's.
    compare = not panels or all(p.where == "frontend" for p in panels)
    if sli in m.latency and compare:
        engine = schema.CustomHistogram(
            name=m.latency[sli], model_label=m.model_label, matchers=(), engine_label=m.engine_label,
            class_label=m.class_label,
        )  # fmt: skip
        panels.append(_HistogramPanel(sli, engine, (), "engine"))
    return panels


def _chosen(variable: str, value: str) -> str:
    """A one-series vector while `value` is among the values selected in a Grafana variable, else empty: for
    histograms that carry no label to match the variable against (vLLM's metrics have no class, a custom histogram
    may have no model). Grafana writes the selection as an anchored regex into label_replace's pattern."""
    tag = '"slokit_selected"'
    tagged = f'label_replace(vector(1), {tag}, {_quote(value)}, "", "")'
    marked = f'label_replace({tagged}, {tag}, "yes", {tag}, "${variable}")'
    return f'({marked} and on ({tag[1:-1]}) label_replace(vector(1), {tag}, "yes", "", ""))'


def _panel_matchers(spec: Spec, panel: _HistogramPanel) -> list[str]:
    """Matchers of a percentile panel: scope, the dashboard variables the histogram's labels allow, the group's
    classes (or their models where the histogram has no class label) and the histogram's own selector."""
    hist, m = panel.hist, spec.metrics
    matchers = _scope(spec)
    models = sorted({name for rc in panel.classes for name in rc.models})
    if hist.model_label is not None:
        matchers.append(_var(hist.model_label, "model"))
        if panel.classes and hist.class_label is None:
            matchers.append(f"{hist.model_label}=~{_quote(promql.any_of(models))}")
    if hist.class_label is not None:
        if panel.classes:
            matchers.append(f"{hist.class_label}=~{_quote(promql.any_of(rc.name for rc in panel.classes))}")
        matchers.append(_var(hist.class_label, "class"))
    matchers.extend(f"{label}{op}{_quote(value)}" for label, op, value in _own_matchers(hist))
    if hist.engine_label is not None and hist.engine_label == m.engine_label and panel.where != "custom":
        matchers.append(_var(hist.engine_label, "engine"))
    return matchers


def _panel_by(spec: Spec, panel: _HistogramPanel) -> tuple[str, ...]:
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
    without a class (or model) label is checked against the variable by `_chosen`.
    """
    hist = spec.histogram(rc, sli)
    matchers = _scope(spec)
    chosen = []
    if hist.model_label is not None:
        matchers.append(_var(hist.model_label, "model"))
        if hist.class_label is None:  # vLLM's own metrics or a custom histogram: the class is its models
            matchers.append(f"{hist.model_label}=~{_quote(promql.any_of(rc.models))}")
    else:
        chosen.append(_chosen("model", rc.models[0]))
    matchers.extend(f"{label}{op}{_quote(value)}" for label, op, value in hist.matchers)
    if hist.class_label is not None:
        matchers.append(_var(hist.class_label, "class"))
    else:
        chosen.append(_chosen("class", rc.name))
    expr = f" and on () count({_rate(hist.name + '_count', matchers)})"
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
                overrides.append(_override_dashed(f"^{re.escape(rc.name)} p[0-9.]+ {tier} ", TIER_COLORS[tier]))
        if slo.objective is not None:
            legend = f"{rc.name} objective {slo.objective.percentile:g}% {format_duration(slo.objective.threshold)}"
            queries.append((f"vector({slo.objective.threshold:g}){selected}", legend))
            overrides.append(_override_dashed(f"^{re.escape(rc.name)} objective ", "purple"))
    return queries, overrides


def _where(panel: _HistogramPanel) -> str:
    if panel.where == "custom":
        return f"from {panel.hist.name}"
    return "at the API server" if panel.where == "frontend" else "at the engine"


def _latency_panel_title(panel: _HistogramPanel, alone: bool) -> str:
    head = f"{panel.sli.value.upper()} p50 / p95 / p99"
    if panel.where == "custom":
        return f"{head} {_where(panel)}"
    if not panel.classes and not alone:
        return f"{head} at the engine (no SLO reads it; for comparison)"
    if panel.where == "frontend":
        return f"{head} at the API server, by model and class"
    return f"{head} at the engine, by model, class and engine"


def _latency_panel_description(spec: Spec, panel: _HistogramPanel, alone: bool) -> str:
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


def _latency(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    name = "latency"
    board = _Board(name, dashboard_uid(spec, name), f"{spec.service} · Latency")
    q = _Q(spec)
    m = spec.metrics
    for sli in Sli:
        panels = histogram_panels(spec, sli)
        if not panels:
            continue  # no SLO and no source histogram (SGLang: tpot)
        board.row(f"{schema.SLI_TITLES[sli].capitalize()} ({sli.value})")
        for index, panel in enumerate(panels):
            hist = panel.hist
            bucket = _rate(f"{hist.name}_bucket", _panel_matchers(spec, panel))
            by = _panel_by(spec, panel)
            queries = [
                (_scaled(_quantile(quantile, bucket, ", ".join(by)), hist), f"p{quantile * 100:g} " + _legend(*by))
                for quantile in LATENCY_QUANTILES
            ]
            lines, overrides = _tier_lines(spec, sli, panel.classes)
            key: tuple[str, ...] = ("latency", sli.value) if index == 0 else ("latency", sli.value, str(index))
            board.add(
                _timeseries(
                    _latency_panel_title(panel, len(panels) == 1),
                    _latency_panel_description(spec, panel, len(panels) == 1),
                    [*queries, *lines],
                    "s",
                    overrides=overrides,
                    minimum=0,
                ),
                16,
                9,
                key=key,
            )
            for rc in panel.classes:
                board.refs[("latency", sli.value, rc.name)] = board.refs[key]
            heat = f"sum by (le) ({bucket})"
            board.add(
                _heatmap(
                    f"{sli.value.upper()} heatmap" + ("" if len(panels) == 1 else f" {_where(panel)}"),
                    f"Requests per second in each {sli.value} bucket of {hist.name} (all selected models, classes "
                    f"and engines; bucket bounds in {'milliseconds' if panel.unit == 'ms' else 'seconds'}, as "
                    "exported). A second band appearing above the main one is a sub-population getting slower.",
                    heat,
                    panel.unit,
                ),
                8,
                9,
                key=("heatmap", sli.value) if index == 0 else ("heatmap", sli.value, str(index)),
            )
    if m.prompt_tokens_histogram is not None:
        board.row("TTFT against prompt length")
        ttft = m.latency[Sli.TTFT]
        group = ", ".join(label for label in q.by_labels if label != m.engine_label)
        mean_ttft = (
            f"sum by ({group}) ({_rate(f'{ttft}_sum', q.raw())}) / sum by ({group}) ({_rate(f'{ttft}_count', q.raw())})"
        )
        prompt = m.prompt_tokens_histogram
        mean_prompt = (
            f"sum by ({group}) ({_rate(f'{prompt}_sum', q.raw())}) / "
            f"sum by ({group}) ({_rate(f'{prompt}_count', q.raw())})"
        )
        legend = _legend(*group.split(", "))
        board.add(
            _timeseries(
                "Mean TTFT and mean prompt length",
                "TTFT inside the engine (left axis; the prefill cost, whatever histogram an SLO reads) moves with "
                "prompt length (right axis) when prefill dominates: prompts getting longer explains a TTFT rise; TTFT "
                "rising at a steady prompt length points at queueing instead.",
                [(mean_ttft, f"TTFT {legend}"), (mean_prompt, f"prompt tokens {legend}")],
                "s",
                overrides=[_override_axis_right("^prompt tokens ", "short")],
                minimum=0,
            ),
            12,
            8,
            key=("ttft_prompt",),
        )
        board.add(
            _timeseries(
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
    _failed_requests_row(spec, board, q)
    data = _dashboard(spec, board, f"Latency of {spec.service} by model, class and engine, with the SLO tiers.")
    return data, board.refs


def _failed_requests_row(spec: Spec, board: _Board, q: _Q) -> None:
    """Requests that ended before their first token, by reason: bad TTFT and E2E events in no latency histogram."""
    m = spec.metrics
    sides = [(side, metric) for side, metric in (("frontend", m.frontend_failed), ("engine", m.failed)) if metric]
    if not sides:
        return
    group = [q.model, *([m.class_label] if m.class_label else []), schema.FAIL_REASON_LABEL]
    queries = [
        (f"sum by ({', '.join(group)}) ({_rate(metric, q.raw(with_engine=False))})", f"{side} " + _legend(*group))
        for side, metric in sides
    ]
    board.row("Requests failed before their first token")
    board.add(
        _timeseries(
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


# ==============================================================================================================
# Debugging, in runbook order
# ==============================================================================================================
def has_frontend(spec: Spec) -> bool:
    """Whether the source has frontend histograms (slokit's exporter), so the API-server step applies."""
    return bool(spec.metrics.frontend_latency)


def _api_server_rows(spec: Spec, board: _Board, q: _Q) -> None:
    """Step 0, before the engine queue: does the API server hold requests before the engine sees them?

    The frontend's TTFT starts when the HTTP request enters vLLM's app, the engine's when the engine receives it;
    the gap between the two is time spent in the API server (HTTP, tokenisation, a CPU-starved event loop).
    """
    if not has_frontend(spec):
        return
    m = spec.metrics
    group = ", ".join(label for label in q.by_labels if label != m.engine_label)
    frontend = _rate(m.frontend_latency[Sli.TTFT] + "_bucket", q.raw(with_engine=False))
    engine = _rate(m.latency[Sli.TTFT] + "_bucket", q.raw())
    legend = _legend(*group.split(", "))
    board.row("0. API server saturation: does the API server hold requests before the engine sees them?")
    board.add(
        _timeseries(
            "TTFT p95: frontend vs engine",
            "p95 time to first token measured at the API server's ASGI layer (arrival of the HTTP request to the "
            "first streamed content byte) and inside the engine (engine arrival to first token). Both are "
            "interpolated from histogram buckets. Close together: the API server adds nothing; go to step 1.",
            [(_quantile(0.95, frontend, group), f"frontend {legend}"), (_quantile(0.95, engine, group),
              f"engine {legend}")],
            "s",
            minimum=0,
        ),
        12,
        8,
        key=("frontend",),
    )  # fmt: skip
    board.add(
        _timeseries(
            "API server gap (frontend - engine TTFT, mean)",
            "Mean seconds between a request reaching the API server and reaching the engine's first token clock, "
            "per model and class (frontend mean TTFT minus engine mean TTFT). Growing while the engine's own TTFT "
            "is flat: the API server is saturated (CPU-starved event loop, tokenisation, a slow middleware); give "
            "it CPU or more API-server processes (--api-server-count), not more engines.",
            [
                (
                    f"sum by ({group}) ({_rate(m.frontend_latency[Sli.TTFT] + '_sum', q.raw(with_engine=False))}) / "
                    f"sum by ({group}) ({_rate(m.frontend_latency[Sli.TTFT] + '_count', q.raw(with_engine=False))})"
                    f" - sum by ({group}) ({_rate(m.latency[Sli.TTFT] + '_sum', q.raw())}) / "
                    f"sum by ({group}) ({_rate(m.latency[Sli.TTFT] + '_count', q.raw())})",
                    f"gap {legend}",
                )
            ],
            "s",
        ),
        12,
        8,
        key=("frontend_gap",),
    )


def _debugging(spec: Spec) -> tuple[dict[str, Any], dict[tuple[str, ...], PanelRef]]:
    name = "debugging"
    board = _Board(name, dashboard_uid(spec, name), f"{spec.service} · Debugging")
    q = _Q(spec)
    m = spec.metrics
    model, engine = m.model_label, m.engine_label
    by_engine = ", ".join([model, *spec.alerting.replica_labels, engine])

    _api_server_rows(spec, board, q)

    # 1. Queue depth ------------------------------------------------------------------------------------------
    board.row("1. Queue depth: more concurrent requests than the engine can run?")
    waiting = f"sum by ({by_engine}) ({_selector(m.requests_waiting, q.engine_only())})"
    running = f"sum by ({by_engine}) ({_selector(m.requests_running, q.engine_only())})"
    serving = f"group by ({model}) ({_selector(m.requests_running, [*_scope(spec), _var(model, 'model')])})"
    maxima = [
        (
            f"{_constant(float(model_spec.max_num_seqs), {model: model_spec.name})} and on ({model}) {serving}",
            f"max running {model_spec.name}",
        )
        for model_spec in spec.models
    ]
    board.add(
        _timeseries(
            "Waiting vs running vs the engine's maximum",
            "Requests waiting for a slot against requests running, per engine, and each model's --max-num-seqs "
            "(dashed). Running at the maximum with requests waiting: the engine is full and TTFT grows with the "
            "queue; scale out. Waiting while running is below the maximum: the KV cache is full (step 3).",
            [(waiting, f"waiting {_legend(model, engine)}"), (running, f"running {_legend(model, engine)}"), *maxima],
            "short",
            overrides=[_override_dashed("^max running ", "red")],
            minimum=0,
        ),
        12,
        8,
        key=("queue",),
    )
    queue = _rate(f"{m.queue_time}_bucket", q.raw(with_class=True))
    group = ", ".join(label for label in q.by_labels if label != engine)
    board.add(
        _timeseries(
            "Queue time p99",
            "Time from arrival to first scheduling, p99 per model and class: the part of TTFT that scaling out "
            "removes.",
            [(_quantile(0.99, queue, group), "p99 " + _legend(*group.split(", ")))],
            "s",
            minimum=0,
        ),
        6,
        8,
        key=("queue_time",),
    )
    scale_out = spec.alerting.scale_out
    ttft_classes = [rc.name for rc in spec.classes if (slo := rc.slos.get(Sli.TTFT)) and slo.objective is not None]
    signal_filter = [_var(schema.RULE_LABEL_SERVICE, "service"), _var(schema.RULE_LABEL_MODEL, "model"),
                     _var(schema.RULE_LABEL_CLASS, "class")]  # fmt: skip
    scale = _selector(schema.RECORD_SCALE_OUT, signal_filter)
    legend = _legend(schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS)
    scale_queries = [(scale, legend)]
    if ttft_classes:
        requests = _requests_5m(
            [*signal_filter, f"{schema.RULE_LABEL_CLASS}=~{_quote(promql.any_of(ttft_classes))}",
             _eq(schema.RULE_LABEL_SLO, Sli.TTFT.value)]
        )  # fmt: skip
        keys = f"on ({', '.join(_SLO_KEYS)})"
        scale_queries = [
            (f"{scale} and {keys} {_enough(spec, requests)}", legend),
            (_too_little(spec, requests, 0), f"{LOW_TRAFFIC_TEXT} {legend}"),
        ]
    board.add(
        _timeseries(
            "Scale-out signal",
            f"Share of TTFTs above {scale_out.fraction_of_slo:g}x the TTFT objective's threshold (a bucket count, "
            f"no interpolation) against the share the objective allows above its threshold, scaled so that "
            f"{scale_out.fraction_of_slo:g} (dashed) means the two are equal; autoscalers add replicas above it held "
            f"for {format_duration(scale_out.for_)}. With fewer than {spec.alerting.min_requests} requests in the 5m "
            f'window (alerting.min_requests) the signal reads 0 for autoscalers and the grey "{LOW_TRAFFIC_TEXT}" '
            "line shows here instead.",
            scale_queries,
            "percentunit",
            thresholds=[(scale_out.fraction_of_slo, "red")],
            overrides=[_override_low_traffic()],
            minimum=0,
        ),
        6,
        8,
        key=("scale_out",),
    )

    # 2. Decode throughput ------------------------------------------------------------------------------------
    board.row("2. Decode throughput: below the expected tokens/s at the batch running?")
    decode = f"sum by ({by_engine}) ({_rate(m.generation_tokens, q.raw(with_class=False))})"
    decode_queries = [(decode, f"decode {_legend(model, engine)}")]
    expected_terms = []
    for model_spec in spec.models:
        curve = roofline.expected_decode_curve(spec, model_spec)
        if curve is None:
            continue
        matchers = [*q.engine_only(), _eq(model, model_spec.name)]
        batch = f"sum by ({by_engine}) (avg_over_time({_selector(m.requests_running, matchers)}[$__rate_interval]))"
        expected_terms.append(expected_decode_at_batch([(p.batch, p.step_seconds) for p in curve], batch))
    if expected_terms:
        decode_queries.append((union(expected_terms), f"expected {_legend(model, engine)}"))
        decode_queries.append(
            (_selector(schema.RECORD_EXPECTED_DECODE_TOKENS, [_var(schema.RULE_LABEL_SERVICE, "service"),
                                                               _var(schema.RULE_LABEL_MODEL, "model")]),
             f"planned batch {_legend(schema.RULE_LABEL_MODEL)}")
        )  # fmt: skip
    board.add(
        _timeseries(
            "Decode tokens/s per engine against expected at its batch",
            "Generated tokens per second per engine against the roofline planner's expectation for the model on its "
            "GPUs at the number of requests that engine is running (dashed; mean over the rate interval): a decode "
            "step reads the weights once and each running sequence's KV, so an engine running few requests is "
            "expected to emit few tokens/s. The dotted line is the planner's figure at its largest batch within "
            "the ITL objective, the most an engine should reach. Well below the dashed line while requests run: "
            "the GPU is slower than it should be (step 4) or runs another configuration than planned.",
            decode_queries,
            "short",
            overrides=[
                _override_dashed("^expected ", "blue"),
                {
                    "matcher": {"id": "byRegexp", "options": "^planned batch "},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dot", "dash": [0, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "#8e8e8e"}},
                    ],
                },
            ],
            minimum=0,
        ),
        12,
        8,
        key=("decode",),
    )
    per_engine = f"sum by ({by_engine}) ({_rate(m.generation_tokens, q.raw(with_class=False))})"
    per_seq = f"{per_engine} / clamp_min({running}, 1)"
    board.add(
        _timeseries(
            "Decode tokens/s per engine and per running request",
            "Per engine, and per running request (tokens/s each stream sees: 1 / ITL). A per-request rate that "
            "falls as running grows is the batch-size/ITL trade-off the tuning section sets.",
            [(per_engine, f"engine {_legend(model, engine)}"), (per_seq, f"per request {_legend(model, engine)}")],
            "short",
            overrides=[_override_axis_right("^per request ", "short")],
            minimum=0,
        ),
        12,
        8,
        key=("decode_engine",),
    )

    # 3. KV cache ---------------------------------------------------------------------------------------------
    board.row("3. KV cache: at its limit, preempting?")
    kv = f"max by ({by_engine}) ({_selector(m.kv_cache_usage, q.engine_only())})"
    board.add(
        _timeseries(
            "KV cache usage",
            f"Share of KV-cache blocks in use per engine; the alert level is {spec.alerting.kv_cache_usage_max:.0%} "
            "(dashed). Near 100% the scheduler stops admitting requests and preempts running ones.",
            [(kv, _legend(model, engine))],
            "percentunit",
            thresholds=[(spec.alerting.kv_cache_usage_max, "red")],
            minimum=0,
            maximum=1,
        ),
        8,
        8,
        key=("kv",),
    )
    preempt = f"sum by ({by_engine}) ({_rate(m.preemptions, q.raw(with_class=False))})"
    board.add(
        _timeseries(
            "Preemptions per second",
            "Requests evicted from the KV cache and recomputed later: each one adds its whole prefill again to "
            "someone's latency. Healthy is 0.",
            [(preempt, _legend(model, engine))],
            "short",
            thresholds=[(0.01, "red")],
            minimum=0,
        ),
        8,
        8,
        key=("preemptions",),
    )
    if m.prefix_cache_hits is not None and m.prefix_cache_queries is not None:
        hits = f"sum by ({by_engine}) ({_rate(m.prefix_cache_hits, q.raw(with_class=False))})"
        queries = f"sum by ({by_engine}) ({_rate(m.prefix_cache_queries, q.raw(with_class=False))})"
        board.add(
            _timeseries(
                "Prefix-cache hit rate",
                "Share of prompt tokens served from the prefix cache. Shared system prompts should keep this "
                "high; a drop raises prefill work and TTFT.",
                [(f"{hits} / {queries}", _legend(model, engine))],
                "percentunit",
                minimum=0,
                maximum=1,
            ),
            8,
            8,
            key=("prefix_cache",),
        )

    # 4. Interconnect and GPU ---------------------------------------------------------------------------------
    board.row("4. Interconnect and GPU: NVLink, PCIe, HBM, throttling, XIDs")
    uuid = schema.GPU_UUID_LABEL
    board.add(
        _timeseries(
            "NVLink throughput",
            "Bytes per second over NVLink per GPU, sent and received. Tensor-parallel decode moves activations "
            "every layer: equal traffic on every GPU is healthy; one GPU low, or all falling while requests run, "
            "points at a link or NCCL problem.",
            [
                (f"sum by ({uuid}) (rate({schema.GPU_NVLINK_TX}[$__rate_interval]))", f"tx {{{{{uuid}}}}}"),
                (f"sum by ({uuid}) (rate({schema.GPU_NVLINK_RX}[$__rate_interval]))", f"rx {{{{{uuid}}}}}"),
            ],
            "Bps",
            minimum=0,
        ),
        12,
        8,
        key=("nvlink",),
    )
    board.add(
        _timeseries(
            "PCIe throughput",
            "Bytes per second over PCIe per GPU. High PCIe traffic during decode means KV offload or weights "
            "streaming from host memory.",
            [
                (f"sum by ({uuid}) (rate({schema.GPU_PCIE_TX}[$__rate_interval]))", f"tx {{{{{uuid}}}}}"),
                (f"sum by ({uuid}) (rate({schema.GPU_PCIE_RX}[$__rate_interval]))", f"rx {{{{{uuid}}}}}"),
            ],
            "Bps",
            minimum=0,
        ),
        12,
        8,
        key=("pcie",),
    )
    board.add(
        _timeseries(
            "HBM used",
            "Memory used per GPU against its total (dashed). vLLM pre-allocates the KV cache, so used stays flat; "
            "KV pressure shows in step 3, not here.",
            [
                (f"max by ({uuid}) ({schema.GPU_MEMORY_USED})", f"used {{{{{uuid}}}}}"),
                (f"max by ({uuid}) ({schema.GPU_MEMORY_TOTAL})", f"total {{{{{uuid}}}}}"),
            ],
            "bytes",
            overrides=[_override_dashed("^total ", "red")],
            minimum=0,
        ),
        8,
        8,
        key=("hbm",),
    )
    board.add(
        _timeseries(
            "HBM bandwidth against the GPU's peak",
            "Bytes per second read and written to HBM (utilisation x peak) against the GPU's peak bandwidth "
            "(dashed). Decode is bandwidth-bound: high utilisation with low tokens/s means the batch is too "
            "small or the model is not the one expected.",
            [
                (
                    f"max by ({uuid}) ({schema.GPU_MEMORY_BANDWIDTH_UTILIZATION}) * on ({uuid}) "
                    f"max by ({uuid}) ({schema.GPU_PEAK_MEMORY_BANDWIDTH})",
                    f"used {{{{{uuid}}}}}",
                ),
                (f"max by ({uuid}) ({schema.GPU_PEAK_MEMORY_BANDWIDTH})", f"peak {{{{{uuid}}}}}"),
            ],
            "Bps",
            overrides=[_override_dashed("^peak ", "red")],
            minimum=0,
        ),
        8,
        8,
        key=("bandwidth",),
    )
    board.add(
        _timeseries(
            "Clock throttling and XID errors",
            "Clock-event reasons active per GPU (1 = active; idle is normal), and XID errors in the interval. "
            "Thermal or power slowdown during a breach explains slow decode; any XID (79: fell off the bus, 48: "
            "double-bit ECC, 94/95: contained/uncontained ECC) needs the GPU drained.",
            [
                (f"max by ({uuid}, reason) ({schema.GPU_CLOCK_EVENT_REASONS})", f"{{{{reason}}}} {{{{{uuid}}}}}"),
                (
                    f"sum by ({uuid}, xid) (increase({schema.GPU_XID_ERRORS}[$__rate_interval]))",
                    f"XID {{{{xid}}}} {{{{{uuid}}}}}",
                ),
            ],
            "short",
            minimum=0,
        ),
        8,
        8,
        key=("gpu_health",),
    )
    board.add(
        _stat(
            "GPU sidecar up",
            "1 when the NVML sidecar reads the GPU; 0 means no driver, a lost GPU or an unsupported device: the "
            "GPU panels above are empty for it.",
            [(f"max by ({uuid}) ({schema.GPU_UP})", f"{{{{{uuid}}}}}")],
            "none",
            _steps("red", [(1.0, "green")]),
        ),
        12,
        5,
        key=("gpu_up",),
    )
    engines = f"count by ({model}) ({_selector(m.requests_running, [*_scope(spec), _var(model, 'model')])})"
    board.add(
        _stat(
            "Engines reporting",
            "Engines whose metrics Prometheus scrapes, per model. Fewer than deployed: a scrape target is down "
            "and every panel above under-counts.",
            [(engines, _legend(model))],
            "none",
            _steps("red", [(1.0, "green")]),
        ),
        12,
        5,
        key=("engines",),
    )
    data = _dashboard(
        spec,
        board,
        f"Debugging {spec.service} in the runbook's order: queue depth, decode throughput, KV cache, interconnect.",
    )
    return data, board.refs


# ==============================================================================================================
# Provisioning and public entry points
# ==============================================================================================================
_DATASOURCE_PROVISIONING: Final = f"""\
# Grafana datasource for the slokit dashboards. Mount as /etc/grafana/provisioning/datasources/slokit.yaml and
# point `url` at your Prometheus (or Thanos/Mimir query frontend). Every slokit dashboard has a `datasource`
# variable, so any Prometheus datasource works; this one is only for a fresh Grafana.
apiVersion: 1
datasources:
  - name: slokit Prometheus
    uid: {PROVISIONED_DATASOURCE_UID}
    type: prometheus
    access: proxy
    url: http://localhost:9090
    isDefault: false
    editable: false
    jsonData:
      timeInterval: 15s
"""

_DASHBOARD_PROVISIONING: Final = f"""\
# Grafana dashboard provider for the generated dashboards. Mount as
# /etc/grafana/provisioning/dashboards/slokit.yaml and the generated dashboards/*.json at {GRAFANA_DASHBOARD_DIR}.
apiVersion: 1
providers:
  - name: slokit
    folder: slokit
    type: file
    disableDeletion: true
    allowUiUpdates: false
    updateIntervalSeconds: 60
    options:
      path: {GRAFANA_DASHBOARD_DIR}
      foldersFromFilesStructure: false
"""


@dataclass(frozen=True)
class Built:
    """Every dashboard of one spec and the panel references the runbook links to."""

    dashboards: Mapping[str, dict[str, Any]]  # short name -> dashboard JSON data
    refs: Mapping[tuple[str, ...], PanelRef]


def build(spec: Spec) -> Built:
    """Build the three dashboards of a spec."""
    dashboards: dict[str, dict[str, Any]] = {}
    refs: dict[tuple[str, ...], PanelRef] = {}
    for name, builder in (("overview", _overview), ("latency", _latency), ("debugging", _debugging)):
        data, board_refs = builder(spec)
        dashboards[name] = data
        refs.update(board_refs)
    return Built(dashboards, refs)


def files(spec: Spec) -> dict[str, Any]:
    """`dashboards/<service>-<name>.json` for each dashboard, plus the Grafana provisioning files."""
    built = build(spec)
    out: dict[str, Any] = {f"dashboards/{spec.service}-{name}.json": data for name, data in built.dashboards.items()}
    out[PROVISIONING_DATASOURCE_PATH] = _DATASOURCE_PROVISIONING
    out[PROVISIONING_DASHBOARDS_PATH] = _DASHBOARD_PROVISIONING
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


def queries(data: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """Every (panel id, panel title, PromQL) in one dashboard's JSON, for tests and `slokit` checks."""
    out: list[tuple[int, str, str]] = []
    for panel in data.get("panels", []):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                out.append((int(panel["id"]), str(panel.get("title", "")), str(expr)))
    return out


def annotation_queries(data: Mapping[str, Any]) -> list[str]:
    """PromQL of the dashboard's annotations (firing alerts: empty while nothing fires)."""
    return [str(a["expr"]) for a in data.get("annotations", {}).get("list", []) if a.get("expr")]


def variable_queries(data: Mapping[str, Any]) -> list[str]:
    """PromQL inside query variables (e.g. the engine list)."""
    out: list[str] = []
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            text = query.get("query") if isinstance(query, dict) else query
            if text:
                out.append(str(text))
    return out
