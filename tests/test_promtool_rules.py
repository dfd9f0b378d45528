"""promtool on the generated output of every example spec: `check rules` and the generated `test rules`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slokit import schema
from slokit.generate import generate_all
from slokit.generate.mutants import by_cost
from slokit.generate.rules import recording_groups
from slokit.generate.writer import write_files
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DEMO = ROOT / "slokit" / "data" / "demo.yaml"
# Specs whose generated tests once failed for a valid spec (replica labels the selector pins, models in two
# namespaces): the generated tests must pass for every spec `validate` accepts.
CASES = sorted((ROOT / "tests" / "data" / "specs").glob("*.yaml"))
SPECS = [*EXAMPLES, *([DEMO] if DEMO.exists() else []), *CASES]


def _generate(spec_path: Path, out: Path) -> str:
    spec = load_spec(spec_path)
    files = {k: v for k, v in generate_all([spec]).items() if k.startswith("rules/")}
    write_files(files, out, check=False)
    return spec.service


@pytest.mark.prometheus
@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_promtool_check_and_unit_tests_pass(spec_path: Path, tmp_path: Path, promtool_path: str) -> None:
    service = _generate(spec_path, tmp_path)
    rules = tmp_path / "rules" / f"{service}.rules.yaml"
    checked = check_rule_files([rules])
    assert checked.ok, checked.output
    assert "SUCCESS" in checked.output
    tested = run_rule_tests([tmp_path / "rules" / f"{service}.rules.test.yaml"])
    assert tested.ok, tested.output[-6000:]
    counters = tmp_path / "rules" / f"{service}.rules.counters.test.yaml"
    assert counters.exists()
    tested = run_rule_tests([counters])
    assert tested.ok, tested.output[-6000:]


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "old,new",
    [
        (") >= 0\n", ") >= 1\n"),  # a series standing still is read as a restart: its whole counter is counted
        ("[1h:5m] offset 5m", "[30m:5m] offset 5m"),  # a series back after 40m counts its whole history again
        ("[15m:5m] offset 5m", "[450s:5m] offset 5m"),  # a 20m scrape gap is no longer bridged
        ("[5m]) - ignoring", "[10m]) - ignoring"),  # a crash loop's earlier restart counted twice
        ("offset 5m or ignoring", "offset 150s or ignoring"),  # a 2.5m increase read as the 5m one
    ],
    ids=["flat-is-restart", "seen-30m", "gap-450s", "reset-10m", "offset-150s"],
)
def test_counters_tests_fail_on_broken_counting(old: str, new: str, tmp_path: Path, promtool_path: str) -> None:
    """Each change breaks the 5m increases only where scrapes are missed, pods restart or join: the main test file's
    clean traffic may not notice, the counters file must."""
    service = _generate(EXAMPLES[0], tmp_path)
    rules = tmp_path / "rules" / f"{service}.rules.yaml"
    text = rules.read_text()
    assert old in text, old
    rules.write_text(text.replace(old, new))
    assert check_rule_files([rules]).ok
    tested = run_rule_tests([tmp_path / "rules" / f"{service}.rules.counters.test.yaml"])
    assert not tested.ok, tested.output[-2000:]
    assert "slokit:sli_" in tested.output or "slokit_series" in tested.output


@pytest.mark.prometheus
def test_generated_unit_tests_catch_a_broken_rule(tmp_path: Path, promtool_path: str) -> None:
    """The generated tests can fail: break one burn-rate threshold and promtool must report it."""
    service = _generate(DEMO if DEMO.exists() else EXAMPLES[0], tmp_path)
    rules = tmp_path / "rules" / f"{service}.rules.yaml"
    text = rules.read_text()
    assert "burn_rate:ratio5m" in text
    # Make the 5m burn rate a thousand times too small: the fast page tier can then never fire.
    broken = text.replace(
        "/ on (service, class, slo) group_left () (1 - slokit:objective:ratio",
        "/ 1000 / on (service, class, slo) group_left () (1 - slokit:objective:ratio",
        1,
    )
    assert broken != text
    # The cheapest fifth of the generated scenarios (mutants.by_cost, as the mutation check runs them first): the
    # fast page's scenarios are short, so they are among them.
    unit = yaml.safe_load((tmp_path / "rules" / f"{service}.rules.test.yaml").read_text())
    cheapest = tmp_path / "rules" / "cheapest.test.yaml"
    cheapest.write_text(yaml.safe_dump(by_cost(unit)["tests-1.yaml"], sort_keys=False))
    assert run_rule_tests([cheapest]).ok  # the subset passes on the unbroken rules
    rules.write_text(broken)
    tested = run_rule_tests([cheapest])
    assert not tested.ok
    assert "SlokitErrorBudgetBurn" in tested.output


@pytest.mark.prometheus
def test_median_baseline_ignores_quiet_days(tmp_path: Path, promtool_path: str) -> None:
    """The 7-day baseline is the median of the same 5m on each day that had enough traffic."""
    spec = load_spec(ROOT / "examples" / "summarize.yaml")  # median_days: 7, min_rps: 0.01
    assert spec.alerting.baseline.median_days == 7
    rule = next(
        r for g in recording_groups(spec) for r in g.rules if getattr(r, "record", "") == schema.RECORD_P99_BASELINE
    )
    (tmp_path / "baseline.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "b", "rules": [rule.to_data()]}]}), encoding="utf-8"
    )
    slo = 'service="summarize",model="qwen2-72b",class="batch",slo="e2e"'
    rate = 'service="summarize",model="qwen2-72b",class="batch"'
    tests = {
        "rule_files": ["baseline.yaml"],
        "evaluation_interval": "1d",
        "tests": [
            {
                "interval": "1d",
                "input_series": [
                    # p99 on days 0..6 and now; day 2 was quiet (under min_rps), so its 30s p99 is ignored.
                    {
                        "series": f'{schema.RECORD_LATENCY_QUANTILE}{{{slo},quantile="0.99"}}',
                        "values": "1 2 30 4 5 6 7 100",
                    },
                    {"series": f"{schema.RECORD_REQUEST_RATE}{{{rate}}}", "values": "1 1 0.001 1 1 1 1 1"},
                ],
                "promql_expr_test": [
                    {
                        "expr": f"{schema.RECORD_P99_BASELINE}{{{slo}}}",
                        "eval_time": "7d",
                        # days 0,1,3,4,5,6 -> 1 2 4 5 6 7: median 4.5
                        "exp_samples": [{"labels": f"{schema.RECORD_P99_BASELINE}{{{slo}}}", "value": 4.5}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "baseline.test.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    result = run_rule_tests([tmp_path / "baseline.test.yaml"])
    assert result.ok, result.output
