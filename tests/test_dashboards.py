"""Dashboard generator: lint (ids, grid, datasource, units), stable identity, alert links, PromQL that parses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.generate import dashboards
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.writer import notice
from slokit.local.prometheus import check_rule_files
from slokit.schema import Sli
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
SPECS = [*sorted((ROOT / "examples").glob("*.yaml")), ROOT / "tests" / "data" / "engine-spec.yaml"]
VARIABLES = ("datasource", "service", "model", "class", "engine")


def _spec_ids(path: Path) -> str:
    return path.stem


@pytest.fixture(params=SPECS, ids=_spec_ids, scope="module")
def spec(request: pytest.FixtureRequest) -> Spec:
    return load_spec(request.param)


def _boards(spec: Spec) -> dict[str, dict[str, Any]]:
    return {path: data for path, data in dashboards.files(spec).items() if path.endswith(".json")}


def substitute(expr: str, spec: Spec, rate_interval: str = "1m") -> str:
    """Dashboard variables as Grafana fills them with every value selected."""
    models = "(" + "|".join(re.escape(v) for v in dashboards.model_values(spec)) + ")"
    classes = "(" + "|".join(re.escape(v) for v in dashboards.class_values(spec)) + ")"
    return (
        expr.replace("$__rate_interval", rate_interval)
        .replace("$service", spec.service)  # single value: Grafana substitutes it as is
        .replace("$model", models.replace("\\", "\\\\"))
        .replace("$class", classes.replace("\\", "\\\\"))
        .replace("$engine", ".*")
    )


def test_files_are_the_three_dashboards_and_provisioning(spec: Spec) -> None:
    paths = set(dashboards.files(spec))
    assert paths == {
        f"dashboards/{spec.service}-overview.json",
        f"dashboards/{spec.service}-latency.json",
        f"dashboards/{spec.service}-debugging.json",
        dashboards.PROVISIONING_DATASOURCE_PATH,
        dashboards.PROVISIONING_DASHBOARDS_PATH,
    }


def test_lint_ids_grid_datasource_unit(spec: Spec) -> None:
    for path, board in _boards(spec).items():
        panels = board["panels"]
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), f"{path}: duplicate panel ids"
        cells: dict[tuple[int, int], int] = {}
        for panel in panels:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, f"{path} panel {panel['id']} leaves the grid"
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{path}: panels {cells[(x, y)]} and {panel['id']} overlap"
                    cells[(x, y)] = panel["id"]
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (path, panel["title"])
            assert panel["targets"], (path, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"]
                assert target["expr"].strip()
            unit = panel["fieldConfig"]["defaults"].get("unit")
            assert isinstance(unit, str) and unit, f"{path}: panel {panel['title']!r} has no unit"
            assert panel["description"], f"{path}: panel {panel['title']!r} has no description"


def test_variables_uid_notice_and_determinism(spec: Spec) -> None:
    first = json.dumps(dashboards.files(spec), sort_keys=True)
    assert first == json.dumps(dashboards.files(spec), sort_keys=True)
    for path, board in _boards(spec).items():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names == list(VARIABLES)
        assert len(board["uid"]) <= 40
        assert board["uid"] == dashboards.dashboard_uid(spec, path.rsplit("-", 1)[1].removesuffix(".json"))
        assert notice(Path(spec.path).name) in board["description"]
        assert board["schemaVersion"] == dashboards.SCHEMA_VERSION
        (alerts,) = board["annotations"]["list"]
        assert alerts["datasource"] == dashboards.DATASOURCE_REF and "ALERTS{" in alerts["expr"]


def test_debugging_rows_follow_the_runbook_order(spec: Spec) -> None:
    board = _boards(spec)[f"dashboards/{spec.service}-debugging.json"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    if spec.metrics.frontend_latency:  # step 0, the API server, before the engine queue
        assert rows[0].startswith("0. API server saturation")
        panels = [p for p in board["panels"] if p["type"] != "row"]
        exprs = " ".join(t["expr"] for p in panels[:2] for t in p["targets"])
        assert spec.metrics.frontend_latency[Sli.TTFT] in exprs and spec.metrics.latency[Sli.TTFT] in exprs
        rows = rows[1:]
    assert [r.split(".")[0] for r in rows] == ["1", "2", "3", "4"]
    assert "Queue" in rows[0] and "Decode" in rows[1] and "KV" in rows[2] and "Interconnect" in rows[3]


def test_tier_thresholds_drawn_on_latency_panels() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    board = _boards(spec)["dashboards/assistant-latency.json"]
    ttft = next(p for p in board["panels"] if p["title"].startswith("TTFT p50"))
    legends = {t["legendFormat"]: t["expr"] for t in ttft["targets"]}
    chat = (
        ' and on () count(rate(slokit_time_to_first_token_seconds_count{namespace="prod", job="vllm", '
        'model=~"$model", class="chat", class=~"$class"}[$__rate_interval]))'
    )
    assert legends["chat p95 acceptable 500ms"] == "vector(0.5)" + chat
    assert legends["code p50 critical 500ms"] == "vector(0.5)" + chat.replace('"chat"', '"code"')
    assert legends["chat objective 95% 500ms"] == "vector(0.5)" + chat


def test_tier_state_expression_ranks_the_worst_tier_exceeded() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    chat = spec.request_class("chat")
    expr = dashboards._tier_state_expr(spec, chat, chat.slos[next(iter(chat.slos))], "p50")
    assert expr is not None
    # target (rank 1), acceptable (2) and critical (3) each add the step to their rank
    assert expr.count("> bool") == 3 and expr.endswith("* 1")
    itl = chat.slos[next(s for s in chat.slos if s.value == "itl")]
    only_critical = dashboards._tier_state_expr(spec, chat, itl, "p50")
    assert only_critical is not None and only_critical.endswith("> bool 0.15) * 3")


def _rule(kind: AlertKind, **kwargs: Any) -> AlertRule:
    return AlertRule(
        name="SlokitTest", expr="vector(1)", for_="0s", labels={}, annotations={}, kind=kind, anchor="a", title="a",
        **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "extra", "board", "title"),
    [
        (AlertKind.BURN_RATE, {"request_class": "chat", "sli": "ttft"}, "overview", "Burn rate by window"),
        (AlertKind.TIER, {"request_class": "chat", "sli": "ttft"}, "overview", "Tier status per percentile"),
        (AlertKind.BASELINE, {"request_class": "chat", "sli": "itl"}, "latency", "ITL p50 / p95 / p99"),
        (AlertKind.QUEUE_OVERLOAD, {}, "debugging", "Waiting vs running"),
        (AlertKind.KV_CACHE, {}, "debugging", "KV cache usage"),
        (AlertKind.ABSENT, {}, "debugging", "Engines reporting"),
    ],
)
def test_each_alert_kind_links_to_the_panel_that_shows_it(kind: AlertKind, extra: dict[str, Any], board: str,
                                                          title: str) -> None:  # fmt: skip
    from slokit.schema import Sli

    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    if "sli" in extra:
        extra = {**extra, "sli": Sli(extra["sli"])}
    rule = _rule(kind, model="llama-3-70b", **extra)
    built = dashboards.build(spec)
    ref = dashboards.panel_for(built, rule)
    assert ref.dashboard == board and ref.title.startswith(title)
    panel = next(p for p in built.dashboards[board]["panels"] if p["id"] == ref.panel_id)
    assert panel["title"] == ref.title
    url = dashboards.panel_url(spec, rule, built)
    assert url.startswith(f"/d/{ref.uid}/") and f"viewPanel={ref.panel_id}" in url and "var-model=llama-3-70b" in url


def test_grafana_url_prefixes_panel_links() -> None:
    text = (ROOT / "examples" / "summarize.yaml").read_text()
    spec = load_spec_text(text.replace("alerting:\n", "alerting:\n  grafana_url: https://grafana.example.com/\n"))
    url = dashboards.panel_url(spec, _rule(AlertKind.KV_CACHE))
    assert url.startswith("https://grafana.example.com/d/summarize-debugging/")


def test_odd_model_names_stay_inside_their_strings() -> None:
    text = (ROOT / "examples" / "summarize.yaml").read_text()
    spec = load_spec_text(text.replace("{name: qwen2-72b,", """{name: 'org/Qwen2,"72B"\\x', preset: qwen2-72b,"""))
    board = _boards(spec)["dashboards/summarize-debugging.json"]
    model_var = next(v for v in board["templating"]["list"] if v["name"] == "model")
    assert model_var["query"] == 'org/Qwen2\\,"72B"\\\\x'
    assert [o["value"] for o in model_var["options"]] == ["$__all", 'org/Qwen2,"72B"\\x']
    maxima = [t["expr"] for p in board["panels"] for t in p.get("targets", []) if "vector(128)" in t["expr"]]
    assert len(maxima) == 1
    assert maxima[0].startswith(
        'label_replace(vector(128), "model", "org/Qwen2,\\"72B\\"\\\\x", "", "") and on (model) '
    )


@pytest.mark.prometheus
def test_every_query_parses(spec: Spec, tmp_path: Path, promtool_path: str) -> None:
    """promtool parses every panel query with the variables substituted (label_values is Grafana's own)."""
    rules = []
    for board in _boards(spec).values():
        for panel_id, _title, expr in dashboards.queries(board):
            rules.append(
                {"record": f"check:{board['uid'].replace('-', '_')}:{panel_id}", "expr": substitute(expr, spec)}
            )
        for expr in dashboards.variable_queries(board):
            inner = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
            assert inner is not None, expr
            rules.append({"record": "check:variable", "expr": substitute(inner.group(1), spec)})
        for expr in dashboards.annotation_queries(board):
            rules.append({"record": "check:annotation", "expr": substitute(expr, spec)})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = check_rule_files([path])
    assert result.ok, result


def test_counters_are_rated_over_the_rate_interval(spec: Spec) -> None:
    """As Grafana's dashboard-linter asks: counters and buckets only inside rate()/increase() over
    $__rate_interval, so panels stay right at every zoom and scrape interval."""
    for board in _boards(spec).values():
        for _panel_id, title, expr in dashboards.queries(board):
            for match in re.finditer(r"[\w:]+(_total|_bucket|_sum|_count)\b", expr):
                before = expr[: match.start()]
                assert re.search(r"(rate|increase)\($", before), f"{title}: {match.group(0)} is not rated in {expr}"
                rest = expr[match.end() :]
                assert re.match(r"(\{[^}]*\})?\[\$__rate_interval\]", rest), f"{title}: {expr}"
