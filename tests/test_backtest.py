"""`slokit simulate` -> `slokit backtest` on a short history, cross-checked against promtool's own rule evaluation.

The history is simulated raw vLLM-named series at a 1-minute scrape (diurnal traffic, noise, missed scrapes, pod
restarts) with one labelled outage. Backtest runs the generated recording rules level by level with promtool and
real Prometheus, and each alert's expression as a range query with Prometheus's for/keep_firing_for state machine.
The cross-check feeds the same raw series to `promtool test rules` with the same generated rule file and asks, at
times around every firing edge backtest found, which alerts promtool's own rule manager has firing: they must
agree to within one evaluation interval. Times are anchored to a fixed timestamp, so nothing depends on the clock.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from slokit.backtest.evaluate import Evaluation, Firing, apply_for, evaluate
from slokit.backtest.incidents import Incident, InputError, dump_incidents, load_incidents
from slokit.backtest.recording import Rule, group_offset_ns, write_level
from slokit.backtest.report import score, write_reports
from slokit.backtest.simulate import simulate
from slokit.cli import app
from slokit.generate.rules import rule_groups
from slokit.local.prometheus import (
    backfill_openmetrics,
    backfill_openmetrics_file,
    backfill_rules,
    promtool,
    run_rule_tests,
)
from slokit.spec import Spec, load_spec
from tests.fixtures_prometheus import PrometheusFactory

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
END = 1_764_806_400.0  # 2025-12-04T00:00:00Z: a fixed anchor
HOURS = 6
OUTAGE = Incident("outage-1", END - 3 * 3600, END - 3 * 3600 + 1800, "llama-3-70b", None, "outage")


# ----------------------------------------------------------------------------------------------------------------
# The state machine, against Prometheus's documented semantics (hand-computed)
# ----------------------------------------------------------------------------------------------------------------
def test_for_and_keep_firing_for_follow_prometheus() -> None:
    times = [float(t) for t in range(0, 600, 30)]
    # Active at 0..90: pending at 0, firing at 60 (60 - 0 >= for), resolved at 120 (first evaluation without it).
    assert apply_for({"a": [0, 30, 60, 90]}, times, 60, 0) == {"a": [(60, 120)]}
    # A pending alert that disappears before `for` never fires, and restarts its clock when it returns.
    assert apply_for({"a": [0, 30, 90, 120, 150]}, times, 60, 0) == {"a": [(150, 180)]}
    # for 0: firing at the first evaluation that returns it.
    assert apply_for({"a": [300]}, times, 0, 0) == {"a": [(300, 330)]}
    # keep_firing_for 60s: missing at 120 and 150 (150 - 120 < 60 keeps firing), resolved at 180.
    assert apply_for({"a": [0, 30, 60, 90]}, times, 30, 60) == {"a": [(30, 180)]}
    # Back before keep_firing_for runs out: one continuous interval, no flap; gone again from 210, held through
    # 210 and 240, resolved at 270.
    assert apply_for({"a": [0, 30, 60, 90, 150, 180]}, times, 30, 60) == {"a": [(30, 270)]}
    # Still firing at the end of the range: end None.
    assert apply_for({"a": [510, 540, 570]}, times, 0, 0) == {"a": [(510, None)]}


# ----------------------------------------------------------------------------------------------------------------
# simulate -> backtest
# ----------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(EXAMPLES / "assistant-vllm.yaml")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, spec: Spec) -> Path:
    path = tmp_path_factory.mktemp("history") / "h.om"
    with path.open("w", encoding="utf-8") as handle:
        simulate(spec, HOURS / 24, END, 7, [OUTAGE], handle, replicas=1)
    return path


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory: pytest.TempPathFactory, spec: Spec, history: Path) -> Iterator[Evaluation]:
    yield evaluate(spec, tmp_path_factory.mktemp("work"), data=history, progress=lambda _: None)


def test_simulate_is_deterministic_and_uses_the_sources_names(spec: Spec) -> None:
    texts = []
    for _ in range(2):
        out = io.StringIO()
        simulate(spec, 0.05, END, 3, [], out, replicas=1)
        texts.append(out.getvalue())
    assert texts[0] == texts[1]
    other = io.StringIO()
    simulate(spec, 0.05, END, 4, [], other, replicas=1)
    assert other.getvalue() != texts[0]
    names = {line.split("{")[0] for line in texts[0].splitlines() if line and not line.startswith("#")}
    assert spec.metrics.latency[next(iter(spec.classes[0].slos))] + "_bucket" in names
    assert all(n.startswith("vllm:") for n in names)
    assert texts[0].endswith("# EOF\n")


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_backtest_pages_the_outage_and_reports_every_variant(
    spec: Spec, evaluation: Evaluation, tmp_path: Path
) -> None:
    assert set(evaluation.variants) == {"slokit", "burn-rate", "tiers", "baseline", "fixed-p99"}
    # 6h of history: the 1d, 3d and 28d windows read what exists, and backtest says so.
    assert any("shorter than" in w and "3d" in w for w in evaluation.warnings)
    doc = write_reports(spec, evaluation, [OUTAGE], tmp_path)
    first = doc["incidents"][0]["first_page"]["slokit"]
    assert first is not None and OUTAGE.start <= first <= OUTAGE.start + 900, first
    assert doc["variants"]["slokit"]["pages_outside_incidents"] == 0
    scored = score(spec, evaluation, [OUTAGE])
    assert scored["slokit"].pages >= scored["tiers"].pages >= 1
    # Pages are notifications as the generated Alertmanager configuration sends them: the outage's many page series
    # (burn-rate windows, tiers, classes, engine causes) reach a person as one page, or two when alerts join after
    # group_interval; every variant is counted through the same routing, and the series are counted apart.
    slokit = doc["variants"]["slokit"]
    assert 1 <= slokit["pages"] <= 2 < slokit["page_series"], (slokit["pages"], slokit["page_series"])
    paged = [n for n in slokit["notifications"] if n["page"]]
    assert paged[0]["kind"] == "first" and OUTAGE.start <= paged[0]["time"] <= OUTAGE.start + 900, paged
    fixed = doc["variants"]["fixed-p99"]
    assert fixed["pages"] <= fixed["page_series"]
    assert scored["fixed-p99"].pages == sum(1 for n in scored["fixed-p99"].notifications if n.receiver == "page")
    # Six hours of history: the weekly rates are extrapolated, and the report says so.
    assert doc["extrapolated"] and abs(slokit["pages_per_week"] - slokit["pages"] * 28) < 0.5
    assert (
        "rates per week are extrapolated from 5h59m of history (less than a week: counts x28.1)"
        in (tmp_path / "backtest.md").read_text()
    )
    for name in ("backtest.json", "backtest.md", "backtest.html", "alerts.csv"):
        assert (tmp_path / name).stat().st_size > 0
    html = (tmp_path / "backtest.html").read_text()
    assert html.count("data:image/png;base64,") == 2  # pages per day, and the outage's timeline
    stored = json.loads((tmp_path / "backtest.json").read_text())
    alert = stored["variants"]["slokit"]["alerts"][0]
    assert {"alertname", "severity", "labels", "start", "end"} <= set(alert)


def _input_series(history: Path, start: float, end: float) -> list[dict[str, str]]:
    """The OpenMetrics samples as promtool test input: one value per minute from `start`, `_` where missing."""
    series: dict[str, dict[int, str]] = {}
    for line in history.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        head, value, stamp = line.rsplit(" ", 2)
        series.setdefault(head, {})[int((float(stamp) - start) // 60)] = value
    steps = int((end - start) // 60)
    return [{"series": head, "values": " ".join(points.get(i, "_") for i in range(steps))}
            for head, points in series.items()]  # fmt: skip


def _firing_at(firings: list[Firing], name: str, t: float) -> list[dict[str, str]]:
    return sorted(
        ({k: v for k, v in f.labels.items() if k != "alertname"} for f in firings
         if f.alertname == name and f.start <= t < f.end),
        key=lambda labels: json.dumps(labels, sort_keys=True),
    )  # fmt: skip


PROMTOOL_INTERVAL = 30.0  # `promtool test rules` runs every group at the test's one evaluation_interval


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_firing_times_match_promtool_rule_evaluation(spec: Spec, history: Path, tmp_path: Path) -> None:
    # Backtest runs each group at its own interval, as Prometheus does; promtool's unit tests run them all at one.
    # Evaluated at that one interval, the two must agree exactly (the per-group intervals are what Prometheus
    # does, and test_backtest_pages_the_outage_and_reports_every_variant runs them).
    evaluation = evaluate(spec, tmp_path / "work", data=history, progress=lambda _: None,
                          group_interval=PROMTOOL_INTERVAL)  # fmt: skip
    generated = list(evaluation.variants["slokit"])
    assert {c.interval for c in generated} == {PROMTOOL_INTERVAL}
    firings = [f for c in generated for f in evaluation.alerts[c.key]]
    assert any(f.kind == "tier" for f in firings) and any(f.alertname == "SlokitEngineQueueFull" for f in firings)
    interval = PROMTOOL_INTERVAL
    t0 = evaluation.start
    # The same generated rule file, alert annotations left out (they are templates, not firing logic).
    groups = [g.to_data() for g in rule_groups(spec)]
    for group in groups:
        group["interval"] = f"{int(PROMTOOL_INTERVAL)}s"
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    # Around every firing edge, where backtest's answer is the same one interval either side.
    checks: list[dict[str, Any]] = []
    names = sorted({f.alertname for f in firings})
    edges = sorted({e for f in firings for e in (f.start, f.end) if not f.ongoing or e == f.start})
    for edge in edges:
        for t in (edge - 2 * interval, edge + interval):
            if t <= t0 or t >= evaluation.end - interval:
                continue
            for name in names:
                around = [_firing_at(firings, name, t + d) for d in (-interval, 0, interval)]
                if around[0] == around[1] == around[2]:
                    checks.append({"eval_time": f"{int(t - t0)}s", "alertname": name,
                                   "exp_alerts": [{"exp_labels": labels} for labels in around[1]]})  # fmt: skip
    assert len(checks) >= 10
    assert any(c["exp_alerts"] for c in checks) and any(not c["exp_alerts"] for c in checks)
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{int(interval)}s",
        "tests": [{"interval": "1m", "input_series": _input_series(history, t0, evaluation.end),
                   "alert_rule_test": checks}],
    }  # fmt: skip
    test_file = tmp_path / "crosscheck.test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 20))
    result = run_rule_tests([test_file])
    assert result.ok, result.output[-6000:]


# ----------------------------------------------------------------------------------------------------------------
# Bad input: clear errors, exit 2
# ----------------------------------------------------------------------------------------------------------------
runner = CliRunner()


def test_incidents_naming_an_unknown_model_exit_2(tmp_path: Path) -> None:
    incidents = tmp_path / "incidents.yaml"
    incidents.write_text(dump_incidents([Incident("x", END - 600, END, "llama-3-70b"),
                                         Incident("y", END - 600, END, "gpt-17")]))  # fmt: skip
    history = tmp_path / "h.om"
    history.write_text("# EOF\n")
    result = runner.invoke(app, ["backtest", str(EXAMPLES / "assistant-vllm.yaml"), "--data", str(history),
                                 "--incidents", str(incidents), "-o", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert re.search(r"incidents\.yaml:\d+:\d+: incidents\[1\]\.model: 'gpt-17' is not a model", result.output)
    assert "llama-3-70b, llama-3-8b" in result.output


@pytest.mark.prometheus
def test_history_without_the_specs_metrics_exit_3(tmp_path: Path) -> None:
    history = tmp_path / "other.om"
    lines = ["# TYPE http_requests counter"]
    lines += [f'http_requests_total{{code="200"}} {i} {int(END - 3600 + 60 * i)}' for i in range(60)]
    history.write_text("\n".join(lines) + "\n# EOF\n")
    result = runner.invoke(app, ["backtest", str(EXAMPLES / "assistant-vllm.yaml"), "--data", str(history),
                                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 3, result.output  # no data: distinct from bad input (2)
    assert "none of the spec's metrics" in result.output and "http_requests_total" in result.output
    assert "Traceback" not in result.output


@pytest.mark.prometheus
@pytest.mark.timeout(300)
def test_history_outside_the_specs_selector_exit_3_naming_what_it_looked_for(history: Path, tmp_path: Path) -> None:
    # The right metric names in another namespace (a wrong `selector:`): before, 0 pages/week and exit 0.
    spec = tmp_path / "staging.yaml"
    spec.write_text((EXAMPLES / "assistant-vllm.yaml").read_text().replace("namespace: prod", "namespace: staging"))
    result = runner.invoke(app, ["backtest", str(spec), "--data", str(history), "--variant", "slokit",
                                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "no data" in result.stderr and str(history) in result.stderr
    assert 'namespace="staging"' in result.stderr and "vllm:time_to_first_token_seconds_bucket{" in result.stderr
    assert not (tmp_path / "out" / "backtest.json").exists()


def test_unknown_variant_and_missing_data_exit_2(tmp_path: Path) -> None:
    spec = str(EXAMPLES / "assistant.yaml")
    result = runner.invoke(app, ["backtest", spec, "--data", str(tmp_path / "none.om"), "--variant", "p42"])
    assert result.exit_code == 2 and "unknown variant(s) p42" in result.output
    result = runner.invoke(app, ["backtest", spec, "--data", str(tmp_path / "none.om")])
    assert result.exit_code == 2 and "no such file" in result.output


# ----------------------------------------------------------------------------------------------------------------
# Other ways in: a TSDB directory, a live Prometheus; warnings and progress on the command line
# ----------------------------------------------------------------------------------------------------------------
SHORT_HOURS = 3
SHORT_OUTAGE = Incident("outage-short", END - 5400, END - 3600, "llama-3-70b", None, "outage")


@pytest.fixture(scope="module")
def short_history(tmp_path_factory: pytest.TempPathFactory, spec: Spec) -> Path:
    path = tmp_path_factory.mktemp("short") / "h.om"
    with path.open("w", encoding="utf-8") as handle:
        simulate(spec, SHORT_HOURS / 24, END, 11, [SHORT_OUTAGE], handle, replicas=1)
    return path


def _alert_edges(evaluation: Evaluation) -> list[tuple[str, str, float, float]]:
    return sorted((key, f.alertname, f.start, f.end) for key, fs in evaluation.alerts.items() for f in fs)


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tsdb_directory_gives_what_the_openmetrics_file_gives(
    spec: Spec, short_history: Path, tmp_path: Path, promtool_path: str
) -> None:
    tsdb = tmp_path / "tsdb"
    backfill_openmetrics_file(short_history, tsdb, max_block_duration="24h")
    variants = ["slokit", "fixed-p99"]
    from_file = evaluate(spec, tmp_path / "work1", data=short_history, variants=variants, progress=lambda _: None)
    from_dir = evaluate(spec, tmp_path / "work2", data=tsdb, variants=variants, progress=lambda _: None)
    assert (from_dir.start, from_dir.end) == (from_file.start, from_file.end)
    assert _alert_edges(from_dir) == _alert_edges(from_file)
    assert any(f.alertname != "FixedP99AboveThreshold" for fs in from_dir.alerts.values() for f in fs)
    assert from_dir.p99 == from_file.p99


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cli_reads_a_live_prometheus_and_reports_progress_and_warnings(
    short_history: Path, tmp_path: Path, prometheus_factory: PrometheusFactory
) -> None:
    live = prometheus_factory("live", retention="100y")
    backfill_openmetrics_file(short_history, live.data_dir, max_block_duration="24h")
    live.start()
    incidents = tmp_path / "incidents.yaml"
    data = [SHORT_OUTAGE.to_data(), Incident("long-ago", END - 30 * 86400, END - 29 * 86400, "llama-3-8b").to_data()]
    data[0]["ticket"] = "INC-1234"  # a field backtest does not know: a warning, not an error
    incidents.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    result = runner.invoke(app, ["backtest", str(EXAMPLES / "assistant-vllm.yaml"), "--prometheus", live.url,
                                 "--from", str(int(END - SHORT_HOURS * 3600)), "--to", str(int(END)),
                                 "--incidents", str(incidents), "--variant", "slokit", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "backtest: read vllm:" in err and "recording rules level 1/" in err and "backtest: timing: " in err
    assert "ignoring unknown field(s) ticket" in err
    assert "incident long-ago" in err and "outside the evaluated history" in err
    assert "the history covers 3h, shorter than the" in err and "going on" in err
    assert "note: rates per week are extrapolated from 3h of history" in result.stdout
    assert "as alertmanager/assistant-vllm.yaml groups them" in result.stdout
    report = (out / "backtest.md").read_text()
    assert "the history covers 3h, shorter than the" in report and "incident long-ago" in report
    doc = json.loads((out / "backtest.json").read_text())
    assert list(doc["variants"]) == ["slokit"]
    first = next(i for i in doc["incidents"] if i["name"] == SHORT_OUTAGE.name)["first_page"]["slokit"]
    assert first is not None and SHORT_OUTAGE.start <= first <= SHORT_OUTAGE.start + 900, first


def test_incidents_with_unknown_fields_load_with_a_warning(spec: Spec, tmp_path: Path) -> None:
    path = tmp_path / "incidents.yaml"
    path.write_text(yaml.safe_dump([{**OUTAGE.to_data(), "owner": "oncall"}]))
    warnings: list[str] = []
    assert load_incidents(path, spec, warnings) == [OUTAGE]
    assert len(warnings) == 1 and "unknown field(s) owner" in warnings[0]
    path.write_text(yaml.safe_dump([{"name": "x", "start": "yesterday", "end": END, "model": "llama-3-70b"}]))
    with pytest.raises(InputError, match=r"incidents\[0\]\.start: 'yesterday' is not RFC 3339"):
        load_incidents(path, spec, warnings)


@pytest.mark.prometheus
@pytest.mark.timeout(300)
def test_recorded_samples_are_what_promtool_rule_backfill_writes(
    tmp_path: Path, prometheus_factory: PrometheusFactory, promtool_path: str
) -> None:
    # Two groups with their own intervals and phases, over a range crossing 2h slices, starting and ending off
    # the grid: backtest's range queries must give exactly the samples `create-blocks-from rules` writes.
    start, end = int(END - 5 * 3600 + 17), int(END - 43)
    lines = ["# TYPE g gauge"]
    lines += [f'g{{pod="{p}"}} {(i * 7 + p) % 13} {END - 6 * 3600 + 60 * i}' for i in range(360) for p in (1, 2)]
    server = prometheus_factory("server", retention="100y")
    backfill_openmetrics("\n".join(lines) + "\n# EOF\n", server.data_dir, workdir=tmp_path)
    server.start()
    groups = [("fast", 30, "r:double", "g * 2", {"k": "v"}), ("slow", 60, "r:rate", "rate(g[5m])", {})]
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [
        {"name": n, "interval": f"{i}s", "rules": [{"record": r, "expr": e, **({"labels": lb} if lb else {})}]}
        for n, i, r, e, lb in groups
    ]}))  # fmt: skip
    theirs = tmp_path / "promtool"
    backfill_rules([rule_file], server, start, end, theirs)
    rules = [Rule(r, e, lb, i, group_offset_ns(n, str(rule_file), i * 10**9)) for n, i, r, e, lb in groups]
    ours = tmp_path / "ours"
    write_level(server, rules, start, end, tmp_path / "level.om")
    backfill_openmetrics_file(tmp_path / "level.om", ours, max_block_duration="10000h")

    def dump(path: Path) -> list[str]:
        (path / "wal").mkdir(exist_ok=True)  # promtool tsdb dump opens the directory as a database
        out = promtool("tsdb", "dump", str(path))
        assert out.ok, out.output
        return sorted(line for line in out.output.splitlines() if line.startswith("{"))

    expected = dump(theirs)
    assert len(expected) > 900 and any("r:rate" in line for line in expected)
    assert dump(ours) == expected
