"""The grafanalib adapter: the only module that imports grafanalib.

grafanalib is in maintenance mode; keeping every use of it here (panel constructors, the grid, variables, the
dashboard JSON and the cleanup of grafanalib's legacy keys) makes a move to Grafana's foundation SDK a one-module
change. `Board` places panels on the grid and gives each the id `identity.panel_id` derives from the dashboard uid and
the panel's key (what it shows), so an id never depends on the panels around it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from slokit import schema
from slokit.generate.dashboards.exprs import LOW_TRAFFIC_TEXT, LOW_TRAFFIC_VALUE, model_var, scope, selector, var
from slokit.generate.dashboards.identity import PanelRef, class_values, model_values, panel_id
from slokit.generate.writer import notice
from slokit.spec import Spec

DATASOURCE_VAR: Final = "datasource"


DATASOURCE_REF: Final = {"type": "prometheus", "uid": "${datasource}"}


SCHEMA_VERSION: Final = 39  # Grafana 10.4 / 11: modern panels, no legacy migrations applied on load


GRID_WIDTH: Final = 24


TIER_STATE_TEXT: Final = {0: "within target", 1: "over target", 2: "over acceptable", 3: "over critical"}


TIER_STATE_COLORS: Final = {0: "green", 1: "yellow", 2: "orange", 3: "red"}


LOW_TRAFFIC_COLOR: Final = "#8e8e8e"


@dataclass
class Board:
    """A dashboard being built: panels placed on the grid in order, each with the id of its key.

    A panel's key says what it shows (`("burn", class, slo)`, `("row", title)`); its id is `panel_id(uid, key)`,
    so adding or removing a panel changes no other panel's id. Two panels with one key are refused; two keys whose
    hashes collide get the next salted candidate, the later panel moving (checked, never silent).
    """

    name: str
    uid: str
    title: str
    panels: list[g.Panel] = field(default_factory=list)
    refs: dict[tuple[str, ...], PanelRef] = field(default_factory=dict)
    ids: dict[int, tuple[str, ...]] = field(default_factory=dict)  # id -> the key it was given to
    keys: set[tuple[str, ...]] = field(default_factory=set)
    y: int = 0
    x: int = 0
    row_height: int = 0

    def row(self, title: str, key: tuple[str, ...] | None = None) -> None:
        """Start a new row (a full-width row header), keyed by its title unless `key` is given."""
        self._newline()
        ident = ("row", *(key if key is not None else (title,)))
        self.panels.append(
            g.RowPanel(title=title, id=self._id(ident), gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=self.y))
        )
        self.y += 1

    def add(
        self,
        panel: g.Panel,
        width: int,
        height: int,
        key: tuple[str, ...] | None = None,
        *,
        ident: tuple[str, ...] | None = None,
    ) -> None:
        """Place `panel` right of the previous one, wrapping to a new line when the row is full.

        `key` names the panel for `refs` (the runbook's links); `ident` is what its id is derived from when that
        differs from `key` (default: `key`, else the panel's title).
        """
        if self.x + width > GRID_WIDTH:
            self._newline()
        panel.id = self._id(ident if ident is not None else key if key is not None else ("title", panel.title))
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

    def _id(self, ident: tuple[str, ...]) -> int:
        if ident in self.keys:
            raise ValueError(f"dashboard {self.uid}: two panels with the key {ident!r}")
        salt = 0
        value = panel_id(self.uid, ident)
        while value in self.ids:
            salt += 1
            value = panel_id(self.uid, ident, salt)
        self.ids[value] = ident
        self.keys.add(ident)
        return value


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


def threshold_steps(base: str, steps: Iterable[tuple[float, str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"color": base, "value": None}]
    out.extend({"color": color, "value": value} for value, color in sorted(steps))
    return out


def timeseries(
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
        thresholds=threshold_steps("green", steps) if steps else threshold_steps("green", []),
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


def stat(
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


def heatmap(title: str, description: str, expr: str, unit: str) -> g.Heatmap:
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


def state_timeline(title: str, description: str, queries: Iterable[tuple[str, str]]) -> g.StateTimeline:
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
                    "thresholds": {"mode": "absolute", "steps": threshold_steps("green", [(1, "yellow"), (2, "orange"),
                                                                                  (3, "red")])},
                }
            }
        },
    )  # fmt: skip
    return panel


def override_axis_right(name_regex: str, unit: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byRegexp", "options": name_regex},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def override_dashed(name_regex: str, color: str | None = None) -> dict[str, Any]:
    properties: list[dict[str, Any]] = [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "custom.lineWidth", "value": 2},
    ]
    if color is not None:
        properties.append({"id": "color", "value": {"mode": "fixed", "fixedColor": color}})
    return {"matcher": {"id": "byRegexp", "options": name_regex}, "properties": properties}


def override_low_traffic() -> dict[str, Any]:
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
            "query": f"label_values({selector(m.requests_running, [*scope(spec), *model_var(m.model_label)])}, "
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


def dashboard_json(spec: Spec, board: Board, description: str) -> dict[str, Any]:
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
        "expr": selector(schema.PROMETHEUS_ALERTS, ['alertstate="firing"', var(schema.RULE_LABEL_SERVICE, "service")]),
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
