"""Dashboard generator: lint (ids, grid, datasource, units), stable identity, alert links, PromQL that parses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.generate import dashboards
from slokit.generate.dashboards.latency import selected_in
from slokit.generate.dashboards.overview import tier_state_expr
from slokit.generate.model import AlertKind, AlertRule
from slokit.generate.writer import notice
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.schema import Sli
from slokit.spec import Spec, load_spec, load_spec_text
from slokit.units import format_duration

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


def test_tier_state_expression_ranks_the_worst_tier_exceeded() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    chat = spec.request_class("chat")
    expr = tier_state_expr(spec, chat, chat.slos[next(iter(chat.slos))], "p50")
    assert expr is not None
    # target (rank 1), acceptable (2) and critical (3) each add the step to their rank
    ranks = expr.split(" and on (")[0]
    assert expr.count("> bool") == 3 and ranks.endswith("* 1)")
    itl = chat.slos[next(s for s in chat.slos if s.value == "itl")]
    only_critical = tier_state_expr(spec, chat, itl, "p50")
    assert only_critical is not None and only_critical.split(" and on (")[0].endswith("> bool 0.15) * 3)")


def _panel_with(board: dict[str, Any], legend: str) -> dict[str, Any]:
    """The one panel that draws a series with this legend."""
    (panel,) = [p for p in board["panels"] if any(t.get("legendFormat") == legend for t in p.get("targets", []))]
    return panel


def _percentile_exprs(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel["targets"] if re.match(r"p\d", t["legendFormat"])]


def test_tier_lines_are_drawn_on_the_histogram_each_slo_reads() -> None:
    """assistant.yaml (source slokit): TTFT and E2E are measured at the frontend by default, ITL at the engine."""
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    m = spec.metrics
    board = _boards(spec)["dashboards/assistant-latency.json"]
    ttft = _panel_with(board, "chat p95 acceptable 500ms")
    assert ttft is _panel_with(board, "code p50 critical 500ms")  # both classes read the frontend TTFT
    frontend = m.frontend_latency[Sli.TTFT]
    percentiles = _percentile_exprs(ttft)
    assert len(percentiles) == 3
    assert all(f"{frontend}_bucket{{" in e and m.latency[Sli.TTFT] + "_" not in e for e in percentiles)
    assert all("sum by (le, model, class, instance) (" in e for e in percentiles)  # no engine label there
    legends = {t["legendFormat"]: t["expr"] for t in ttft["targets"]}
    chat = (
        f' and on () count(rate({frontend}_count{{namespace="prod", job="vllm", model=~"$model", class="chat", '
        'class=~"$class"}[$__rate_interval]))'
    )
    assert legends["chat p95 acceptable 500ms"] == "vector(0.5)" + chat
    assert legends["code p50 critical 500ms"] == "vector(0.5)" + chat.replace('"chat"', '"code"')
    assert legends["chat objective 95% 500ms"] == "vector(0.5)" + chat
    # The engine's TTFT is still drawn, beside it and without any SLO's lines.
    engine = next(p for p in board["panels"] if p["title"].startswith("TTFT p50 / p95 / p99 at the engine"))
    assert all(m.latency[Sli.TTFT] + "_bucket{" in e for e in _percentile_exprs(engine))
    assert len(engine["targets"]) == 3
    # ITL is measured at the engine: its lines are on the engine's ITL histogram.
    itl = _panel_with(board, "chat p95 acceptable 50ms")
    assert all(m.latency[Sli.ITL] + "_bucket{" in e for e in _percentile_exprs(itl))
    # Every tier line of every class is drawn once, on the panel of its own histogram.
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            hist = spec.histogram(rc, sli)
            for tier in ("target", "acceptable", "critical"):
                for pct, seconds in slo.tiers.tier(tier).items():
                    panel = _panel_with(board, f"{rc.name} {pct} {tier} {format_duration(seconds)}")
                    assert all(f"{hist.name}_bucket{{" in e for e in _percentile_exprs(panel)), (rc.name, sli)


def test_classes_measured_in_different_places_get_their_own_panels() -> None:
    text = (ROOT / "examples" / "assistant.yaml").read_text()
    code_ttft = "      ttft:\n        objective: {percentile: 99, threshold: 300ms}"
    assert code_ttft in text
    spec = load_spec_text(text.replace(code_ttft, code_ttft.replace("ttft:\n", "ttft:\n        measured_at: engine\n")))
    assert spec.histogram(spec.request_class("code"), Sli.TTFT).name == spec.metrics.latency[Sli.TTFT]
    board = _boards(spec)["dashboards/assistant-latency.json"]
    chat, code = _panel_with(board, "chat p95 acceptable 500ms"), _panel_with(board, "code p50 critical 500ms")
    assert chat is not code
    assert all(spec.metrics.frontend_latency[Sli.TTFT] + "_bucket{" in e for e in _percentile_exprs(chat))
    assert all('class=~"chat"' in e for e in _percentile_exprs(chat))
    assert all(spec.metrics.latency[Sli.TTFT] + "_bucket{" in e for e in _percentile_exprs(code))
    assert all('class=~"code"' in e and 'engine=~"$engine"' in e for e in _percentile_exprs(code))
    assert not any(t["legendFormat"].startswith("code ") for t in chat["targets"])
    assert not any(t["legendFormat"].startswith("chat ") for t in code["targets"])
    # Each class's latency alerts link to the panel of the histogram its SLO reads.
    built = dashboards.build(spec)
    for name, panel in (("chat", chat), ("code", code)):
        rule = _rule(AlertKind.BASELINE, request_class=name, sli=Sli.TTFT, model="llama-3-70b")
        assert dashboards.panel_for(built, rule).panel_id == panel["id"]


def test_a_millisecond_histogram_is_drawn_in_seconds() -> None:
    spec = load_spec(ROOT / "tests" / "data" / "engines" / "custom-histogram.yaml")
    board = _boards(spec)["dashboards/gateway-latency.json"]
    panel = _panel_with(board, "chat p50 critical 1s")
    percentiles = _percentile_exprs(panel)
    assert len(percentiles) == 3
    for expr in percentiles:
        assert expr.startswith("(histogram_quantile(") and expr.endswith(") * 0.001")
        assert "gateway_first_token_latency_ms_bucket{" in expr
        assert 'upstream_model=~"$model"' in expr and 'route=~"/v1/chat.*"' in expr and 'code!~"5.."' in expr
        assert "sum by (le, upstream_model, instance)" in expr
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"
    legends = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    assert legends["chat p50 critical 1s"].startswith("vector(1) and on () count(rate(gateway_first_token_latency_ms")
    assert legends["chat objective 95% 500ms"].startswith("vector(0.5) and on ()")  # thresholds stay in seconds
    heatmap = next(p for p in board["panels"] if p["type"] == "heatmap" and "gateway_first" in p["targets"][0]["expr"])
    assert heatmap["fieldConfig"]["defaults"]["unit"] == "ms"  # the buckets as exported
    # A histogram without a model label: its lines follow the model and class variables through selected_in.
    e2e = _panel_with(board, "chat objective 99% 10s")
    line = {t["legendFormat"]: t["expr"] for t in e2e["targets"]}["chat objective 99% 10s"]
    assert '"$model"' in line and '"$class"' in line
    assert all("http_request_duration_seconds_bucket{" in e for e in _percentile_exprs(e2e))


@pytest.mark.prometheus
def test_variable_checks_and_traffic_guard_evaluate(tmp_path: Path, promtool_path: str) -> None:
    """On Prometheus itself: a class line of a label-less histogram follows the variable, and the tier state reads
    its rank with enough traffic and "too little traffic" below alerting.min_requests."""
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    chat = spec.request_class("chat")
    chosen = selected_in("class", "chat")
    tier = substitute(tier_state_expr(spec, chat, chat.slos[Sli.TTFT], "p50") or "", spec)
    labels = 'service="assistant", model="llama-3-70b", class="chat", slo="ttft"'
    quantile = f'slokit:latency_seconds:quantile5m{{{labels}, quantile="0.5"}}'
    rate = f'slokit_engine:latency_bucket:rate5m{{{labels}, le="+Inf", instance="a", engine="0"}}'

    def case(requests_per_second: float, checks: list[tuple[str, float]]) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": [
                {"series": quantile, "values": "0.4x10"},  # over target 200ms and acceptable 300ms, under critical
                {"series": rate, "values": f"{requests_per_second}x10"},
            ],
            "promql_expr_test": [
                {"expr": expr, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": value}]}
                for expr, value in checks
            ],
        }

    enough = [
        (f"sum({tier})", 2),
        (f"count({chosen.replace('$class', '(chat|code)')})", 1),
        (f"count({chosen.replace('$class', '(code|other)')}) or vector(0)", 0),
    ]
    tests = [case(0.2, enough), case(0.05, [(f"sum({tier})", dashboards.LOW_TRAFFIC_VALUE)])]  # 60, then 15 in 5m
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    path = tmp_path / "guard.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["empty.yaml"], "evaluation_interval": "1m", "tests": tests}))
    result = run_rule_tests([path])
    assert result.ok, result


def test_too_little_traffic_is_said_where_signals_need_min_requests() -> None:
    text = (ROOT / "examples" / "summarize.yaml").read_text()
    spec = load_spec_text(text.replace("alerting:\n", "alerting:\n  min_requests: 17\n"))
    assert spec.alerting.min_requests == 17
    boards = {path.rsplit("-", 1)[1]: data for path, data in _boards(spec).items()}
    # Tier state: every query reads the 5m request count against min_requests; -1 is mapped to the text.
    tiers = [p for p in boards["overview.json"]["panels"] if p["title"] == "Tier status per percentile"]
    assert tiers
    for panel in tiers:
        options = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
        assert options[str(dashboards.LOW_TRAFFIC_VALUE)]["text"] == "too little traffic"
        for target in panel["targets"]:
            expr = target["expr"]
            assert "slokit_engine:latency_bucket:rate5m{" in expr and 'le="+Inf"' in expr
            assert "* 300 >= 17)" in expr and "* 300 < 17) * 0 - 1)" in expr
    # Consistency: the interval the buckets prove, the interpolated ratio only with enough traffic, and the grey
    # "too little traffic" series with its value mapped to the text.
    (consistency,) = [p for p in boards["overview.json"]["panels"] if p["title"].startswith("p99 / p50")]
    legends = {t["legendFormat"].split(" {{")[0]: t["expr"] for t in consistency["targets"]}
    assert set(legends) == {"lower bound", "upper bound", "interpolated", "too little traffic"}
    assert legends["lower bound"].startswith("slokit:latency_p99_over_p50:lower_bound5m{")
    assert legends["interpolated"].endswith("* 300 >= 17)") and legends["too little traffic"].endswith("< 17) * 0)")
    assert [s["value"] for s in consistency["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 1.6]
    # Scale-out: the signal only with enough traffic, the grey series below it.
    (scale,) = [p for p in boards["debugging.json"]["panels"] if p["title"] == "Scale-out signal"]
    exprs = [t["expr"] for t in scale["targets"]]
    assert exprs[0].startswith("slokit:scale_out:ratio{") and exprs[0].endswith("* 300 >= 17)")
    assert 'slo="ttft"' in exprs[1] and exprs[1].endswith("* 300 < 17) * 0)")
    for panel in (consistency, scale):
        (override,) = [
            o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "^too little traffic "
        ]
        mapping = next(p["value"] for p in override["properties"] if p["id"] == "mappings")
        assert mapping[0]["options"]["0"]["text"] == "too little traffic"


def test_decode_panel_expects_the_planner_figure_at_each_engines_batch() -> None:
    spec = load_spec(ROOT / "examples" / "assistant.yaml")
    board = _boards(spec)["dashboards/assistant-debugging.json"]
    panel = _panel_with(board, "expected {{model}} {{engine}}")
    legends = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    measured = legends["decode {{model}} {{engine}}"]
    assert measured.startswith("sum by (model, instance, engine) (rate(slokit_generation_tokens_total{")
    expected = legends["expected {{model}} {{engine}}"]
    running = (
        'sum by (model, instance, engine) (avg_over_time(slokit_requests_running{namespace="prod", job="vllm", '
        'model=~"$model", engine=~"$engine", model="llama-3-70b"}[$__rate_interval]))'
    )
    assert expected.startswith(f"({running})\n/ (") and "clamp(" in expected


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
            # raw counters only: a recorded series (`slokit_engine:latency_bucket:rate5m`) is already a rate
            for match in re.finditer(r"[\w:]+(_total|_bucket|_sum|_count)\b(?![\w:])", expr):
                before = expr[: match.start()]
                assert re.search(r"(rate|increase)\($", before), f"{title}: {match.group(0)} is not rated in {expr}"
                rest = expr[match.end() :]
                assert re.match(r"(\{[^}]*\})?\[\$__rate_interval\]", rest), f"{title}: {expr}"


def _ids_by_key(built: dashboards.Built) -> dict[tuple[str, ...], int]:
    """Every panel of every board by (board, the title of its row, its title), from the generated JSON."""
    out: dict[tuple[str, ...], int] = {}
    for name, board in built.dashboards.items():
        row = ""
        for panel in board["panels"]:
            if panel["type"] == "row":
                row = panel["title"]
            key = (name, row, panel["title"])
            assert key not in out, key
            out[key] = panel["id"]
    return out


def test_panel_ids_are_a_hash_of_the_board_and_the_panels_key(spec: Spec) -> None:
    built = dashboards.build(spec)
    for ref in built.refs.values():
        assert 1 <= ref.panel_id <= 2**31 - 1  # Grafana keeps panel ids as 32-bit integers in places
    budget = built.refs[("budget",)]
    assert budget.panel_id == dashboards.panel_id(budget.uid, ("budget",))


def test_adding_a_class_changes_no_other_panels_id() -> None:
    """A spec with one more class adds rows and panels to the boards; every panel both specs have keeps its id,
    so a `viewPanel=<id>` link saved before the upgrade opens the same panel after it."""
    full = yaml.safe_load((ROOT / "examples" / "assistant.yaml").read_text())
    fewer = {**full, "classes": [rc for rc in full["classes"] if rc["name"] != "chat"]}
    before = dashboards.build(load_spec_text(yaml.safe_dump(fewer)))
    after = dashboards.build(load_spec_text(yaml.safe_dump(full)))
    old, new = _ids_by_key(before), _ids_by_key(after)
    assert len(new) > len(old)  # chat's rows and panels were added, several before code's
    shared = set(old) & set(new)
    assert len(shared) > 20
    assert {key: old[key] for key in shared} == {key: new[key] for key in shared}
    for key, ref in before.refs.items():
        if key in after.refs and ref.title == after.refs[key].title:
            assert after.refs[key].panel_id == ref.panel_id, key


def test_inserting_a_panel_on_a_board_leaves_the_others_ids() -> None:
    from slokit.generate.dashboards.grafana import Board, timeseries

    def board(keys: list[str]) -> dict[str, int]:
        b = Board("overview", "svc-overview", "svc · Overview")
        b.row("Row", key=("row-a",))
        for key in keys:
            b.add(timeseries(key, "d", [("up", "up")], "none"), 8, 4, key=(key,))
        return {ref[0]: b.refs[ref].panel_id for ref in b.refs}

    first = board(["a", "b", "c"])
    second = board(["new", "a", "b", "c"])
    assert {k: second[k] for k in first} == first
    assert len(set(second.values())) == 4


def test_colliding_panel_ids_are_moved_and_a_repeated_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from slokit.generate.dashboards import grafana
    from slokit.generate.dashboards.grafana import Board, timeseries

    real = grafana.panel_id
    monkeypatch.setattr(grafana, "panel_id", lambda uid, key, salt=0: 7 if salt == 0 else real(uid, key, salt))
    b = Board("overview", "svc-overview", "svc · Overview")
    for key in ("a", "b", "c"):
        b.add(timeseries(key, "d", [("up", "up")], "none"), 8, 4, key=(key,))
    ids = [b.refs[(k,)].panel_id for k in ("a", "b", "c")]
    assert ids[0] == 7 and len(set(ids)) == 3
    with pytest.raises(ValueError, match="two panels with the key"):
        b.add(timeseries("a", "d", [("up", "up")], "none"), 8, 4, key=("a",))
