"""promtool on the generated output of every example spec: `check rules` and the generated `test rules`."""

from __future__ import annotations

from pathlib import Path

import pytest

from slokit.generate import generate_all
from slokit.generate.writer import write_files
from slokit.local.prometheus import check_rule_files, run_rule_tests
from slokit.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DEMO = ROOT / "slokit" / "data" / "demo.yaml"
SPECS = [*EXAMPLES, *([DEMO] if DEMO.exists() else [])]


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


@pytest.mark.prometheus
def test_generated_unit_tests_catch_a_broken_rule(tmp_path: Path, promtool_path: str) -> None:
    """The generated tests can fail: break one burn-rate threshold and promtool must report it."""
    service = _generate(DEMO if DEMO.exists() else EXAMPLES[0], tmp_path)
    rules = tmp_path / "rules" / f"{service}.rules.yaml"
    text = rules.read_text()
    assert "burn_rate:ratio5m" in text
    # Make the 5m burn rate a thousand times too small: the fast page tier can then never fire.
    broken = text.replace(
        "/ on (service, model, class, slo) (1 - slokit:objective:ratio",
        "/ 1000 / on (service, model, class, slo) (1 - slokit:objective:ratio",
        1,
    )
    assert broken != text
    rules.write_text(broken)
    tested = run_rule_tests([tmp_path / "rules" / f"{service}.rules.test.yaml"])
    assert not tested.ok
    assert "SlokitErrorBudgetBurn" in tested.output
