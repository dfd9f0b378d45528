"""Unit tests of the rule and alert generators: structure, names, guards and the window tiling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slokit import promql, schema
from slokit.generate import alerts, autoscale, generate_all, promtool_tests, rules
from slokit.generate.engines import Engine
from slokit.generate.model import AlertKind, AlertRule, RecordingRule
from slokit.spec import Spec, load_spec
from slokit.units import prom_duration

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(params=EXAMPLES, ids=[p.stem for p in EXAMPLES])
def spec(request: pytest.FixtureRequest) -> Spec:
    return load_spec(request.param)


def _records(spec: Spec) -> list[RecordingRule]:
    return [r for g in rules.rule_groups(spec) for r in g.rules if isinstance(r, RecordingRule)]


def test_files_are_the_rule_file_and_a_prometheus_rule(spec: Spec) -> None:
    out = rules.files(spec)
    assert set(out) == {f"rules/{spec.service}.rules.yaml", f"exporters/{spec.service}.prometheusrule.yaml"}
    obj = out[f"exporters/{spec.service}.prometheusrule.yaml"]
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["spec"]["groups"] == out[f"rules/{spec.service}.rules.yaml"]["groups"]
    assert rules.files(spec) == out  # deterministic


def test_every_window_is_recorded_and_long_windows_never_read_raw_ranges(spec: Spec) -> None:
    records = {r.record: r for r in _records(spec)}
    for window in ("5m", "30m", "1h", "2h", "6h", "1d", "3d", prom_duration(spec.window)):
        for name in (
            schema.record_sli_total(window),
            schema.record_error_ratio(window),
            schema.record_burn_rate(window),
        ):
            assert name in records, name
    for window in ("30m", "1h", "2h", "6h", "1d", "3d", prom_duration(spec.window)):
        expr = records[schema.record_sli_total(window)].expr
        assert "[" not in expr, f"{window} reads a range: {expr}"
        assert "avg_over_time" not in expr
    assert schema.RECORD_ERROR_BUDGET_REMAINING in records
    assert schema.RECORD_SCALE_OUT in records or spec.service == "summarize"
    assert schema.RECORD_P99_BASELINE in records


def test_tiles_cover_the_window_exactly_on_each_source_grid(spec: Spec) -> None:
    for plan in rules.window_plans(spec):
        if not plan.blocks:
            continue
        assert sum(b.window for b in plan.blocks) == pytest.approx(plan.window)
        end = 0.0
        for block in plan.blocks:
            assert block.offset == pytest.approx(end)
            end += block.window
            assert block.offset % rules.window_interval(block.window) == 0
    plans = {p.window: p for p in rules.window_plans(spec)}
    assert len(plans[28 * 86400.0].blocks) <= 10  # 9 x 3d + 1d


def test_error_ratio_is_guarded_against_zero_traffic(spec: Spec) -> None:
    for record in _records(spec):
        if record.record.startswith("slokit:sli_error:ratio"):
            assert "> 0)" in record.expr and "* 0" in record.expr


def test_le_matchers_accept_prometheus_2_and_3_spellings() -> None:
    assert promql.le_matcher(0.5) == ("le", "=", "0.5")
    assert promql.le_matcher(1.0) == ("le", "=~", "1\\.0|1")
    assert promql.le_matcher(20) == ("le", "=~", "20\\.0|20")


def test_vllm_source_writes_class_as_a_static_label() -> None:
    spec = load_spec(ROOT / "examples" / "assistant-vllm.yaml")
    bucket_rules = [r for r in _records(spec) if r.record == schema.RECORD_LATENCY_BUCKET_RATE]
    assert bucket_rules
    for rule in bucket_rules:
        assert "model_name" in rule.expr and '"class", "' in rule.expr
        assert "slokit_" not in rule.expr.split("rate(")[1].split("{")[0]


def test_alerts_carry_the_contract_labels_and_unique_runbook_sections(spec: Spec) -> None:
    found = alerts.alert_rules(spec)
    assert found
    anchors = [a.anchor for a in found]
    assert len(anchors) == len(set(anchors))
    for alert in found:
        assert isinstance(alert, AlertRule)
        assert alert.name.startswith("Slokit")
        assert alert.labels["severity"] in (spec.alerting.severity.page, spec.alerting.severity.ticket)
        assert alert.labels["service"] == spec.service
        assert set(alert.annotations) == {"summary", "description", "runbook_url"}
        assert alert.annotations["runbook_url"].endswith("#" + alert.anchor)
        summary = alert.annotations["summary"]
        if alert.name in (alerts.NAME_QUEUE, alerts.NAME_KV_FULL, alerts.NAME_PREEMPTING):
            # engine alerts name the replica: only label templates, every replica label and the engine
            assert "{{ $labels.instance }}" in summary and "{{ $labels.engine }}" in summary
            assert "$value" not in summary
        else:
            assert "{{" not in summary
        if alert.request_class is not None:
            assert alert.labels["class"] == alert.request_class and alert.labels["slo"]


def test_a_page_tier_that_cannot_fire_is_adapted_not_dropped() -> None:
    spec = load_spec(ROOT / "examples" / "summarize.yaml")  # ttft objective 90%: 13.44 x 0.1 >= 1
    assert alerts.skipped_burn_tiers(spec) == []
    adapted = alerts.adapted_burn_tiers(spec)
    assert [(t.request_class, t.sli.value, t.spec_window.long) for t in adapted] == [("batch", "ttft", 3600)]
    tier = adapted[0]
    assert tier.threshold < 1 and tier.window.long < 3600
    burn = [a for a in alerts.alert_instances(spec) if a.name == alerts.NAME_BURN and a.sli is not None]
    assert not [a for a in burn if a.sli.value == "ttft" and a.labels["long"] == "1h"]
    assert [a for a in burn if a.sli.value == "ttft" and a.labels["long"] == prom_duration(tier.window.long)]
    tests = promtool_tests.unit_tests(spec)
    assert any("adapted for batch ttft" in t["name"] for t in tests["tests"])


def test_template_expansion_matches_prometheus_formatting() -> None:
    assert promtool_tests.humanize_duration(2560) == "42m 40s"
    assert promtool_tests.humanize_duration(0.25) == "250ms"
    assert promtool_tests.humanize_duration(60) == "1m 0s"
    assert promtool_tests.humanize_percentage(0.99) == "99%"
    assert (
        promtool_tests.expand('{{ $value | printf "%.2f" }}x {{ $labels.engine }}', 19.99999, {"engine": "0"})
        == "20.00x 0"
    )


def test_histogram_quantile_matches_prometheus_interpolation() -> None:
    bounds = (0.1, 0.5, 1.0)
    assert promql.histogram_quantile(0.5, bounds, [0, 10, 10, 10]) == pytest.approx(0.3)
    assert promql.histogram_quantile(0.99, bounds, [0, 0, 0, 10]) == 1.0  # +Inf: top finite bound
    assert promql.histogram_quantile(0.5, bounds, [4, 4, 8, 8]) == pytest.approx(0.1)  # the rank at a bound
    assert promql.histogram_quantile(0.75, bounds, [4, 4, 8, 8]) == pytest.approx(0.75)  # past an empty bucket
    assert promql.histogram_quantile(0.5, bounds, [0, 0, 0, 0]) is None  # no events: Prometheus answers NaN


# -- engines ---------------------------------------------------------------------------------------------------
_RECORDED = re.compile(r"(slokit(?:_engine)?:[a-z0-9_:]+)(\{[^}]*\})?( offset \w+)?")
_SLI_RECORDS = ("slokit:sli_total:", "slokit:sli_good:", "slokit:sli_error:", "slokit:burn_rate:",
                schema.RECORD_ERROR_BUDGET_REMAINING)  # fmt: skip


def test_engines_keep_the_default_rules_and_add_only_their_fields(spec: Spec) -> None:
    default = rules.files(spec)
    assert rules.files(spec, Engine.PROMETHEUS) == default
    path = rules.rules_path(spec)
    thanos, mimir = rules.files(spec, Engine.THANOS)[path], rules.files(spec, Engine.MIMIR)[path]
    assert all(g.pop("partial_response_strategy") == "abort" for g in thanos["groups"])
    assert thanos == default[path]
    assert mimir.pop("namespace") == f"slokit-{spec.service}"
    assert mimir == default[path]
    # The predictive autoscaling signal: for Thanos and Mimir with their fields (Mimir's in a namespace of its own,
    # so syncing the main file alone never removes it), no promtool test; none for vmalert (slokit.generate.autoscale).
    predictive = autoscale.files(spec)
    signal = autoscale.rules_path(spec)
    assert signal in predictive
    for engine in (Engine.THANOS, Engine.MIMIR):
        written = generate_all([spec], engine)
        assert list(written) == [p for p in generate_all([spec]) if not p.endswith(".test.yaml")]
        assert written[signal] != generate_all([spec])[signal]
    thanos_signal = autoscale.files(spec, Engine.THANOS)[signal]
    assert [g.pop("partial_response_strategy") for g in thanos_signal["groups"]] == ["abort"]
    assert thanos_signal == predictive[signal]
    mimir_signal = autoscale.files(spec, Engine.MIMIR)[signal]
    assert mimir_signal.pop("namespace") == f"slokit-{spec.service}-autoscale" != f"slokit-{spec.service}"
    assert mimir_signal == predictive[signal]
    assert autoscale.files(spec, Engine.VICTORIAMETRICS) == {}
    assert list(generate_all([spec], Engine.VICTORIAMETRICS)) == [
        p.replace(".prometheusrule.yaml", ".vmrule.yaml")
        for p in generate_all([spec])
        if not p.endswith(".test.yaml") and p not in predictive
    ]


def test_victoriametrics_alert_critical_chains_are_one_record_deep(spec: Spec) -> None:
    groups = rules.rule_groups(spec, Engine.VICTORIAMETRICS)
    assert [g.name for g in groups] == [g.name for g in rules.rule_groups(spec)]
    assert all(g.to_data()["params"] == {"nocache": ["1"]} for g in groups)
    checked = 0
    for group in groups:
        for rule in group.rules:
            if isinstance(rule, AlertRule):
                assert rule.keep_firing_for == ""
                if rule.kind is not AlertKind.BURN_RATE:
                    continue
            elif not rule.record.startswith(_SLI_RECORDS):
                continue
            # Raw buckets, records at an offset (written long before) and the constant parameters only.
            for name, _, offset in _RECORDED.findall(rule.expr):
                assert offset or name in (schema.RECORD_OBJECTIVE, schema.RECORD_BURN_THRESHOLD), (rule, name)
            checked += 1
    assert checked > 10
    records = {r.record: r for g in groups for r in g.rules if isinstance(r, RecordingRule)}
    for window in ("5m", "30m", "1h"):
        assert "increase(" in records[schema.record_sli_total(window)].expr
        assert "offset" not in records[schema.record_sli_total(window)].expr
    six = records[schema.record_sli_total("6h")].expr
    assert "[1h]" in six and " offset 1h" in six and " offset 4h" in six


def test_alerts_and_groups_are_built_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules, promtool tests, runbook and dashboards read one build of a spec's alerts and groups."""
    from slokit.generate import alerts, generate_all, rules

    built: list[str] = []
    real_alerts, real_groups = alerts._build_alert_rules, rules._build_rule_groups
    monkeypatch.setattr(alerts, "_build_alert_rules", lambda s: built.append("alerts") or real_alerts(s))
    monkeypatch.setattr(rules, "_build_rule_groups", lambda s, e: built.append("groups") or real_groups(s, e))
    spec = load_spec(ROOT / "examples" / "summarize.yaml")
    out = generate_all([spec])
    assert built == ["groups", "alerts"]  # the groups ask for the alerts, everyone else reuses both
    first = rules.rule_groups(spec)
    first.pop()  # a caller's list is its own
    assert len(rules.rule_groups(spec)) == len(first) + 1
    assert generate_all([load_spec(ROOT / "examples" / "summarize.yaml")]) == out  # a new spec object: built anew
    assert built == ["groups", "alerts", "groups", "alerts"]
