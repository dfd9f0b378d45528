"""The generated Alertmanager configuration, checked and routed by the real amtool.

Pages must reach the page receiver and tickets the ticket receiver, under the names the spec gives; the file must
load in Alertmanager's own config parser.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit.generate import alertmanager
from slokit.spec import Spec, load_spec, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

NAMED_RECEIVERS = """\
version: slokit/v1
service: routed
models:
  - {name: m1}
classes:
  - name: chat
    models: [m1]
    slos:
      ttft:
        objective: {percentile: 95, threshold: 500ms}
        tiers:
          acceptable: {p95: 1s}
          critical: {p50: 2s}
alerting:
  receivers: {page: oncall-pager, ticket: team-queue}
"""


def _write(tmp_path: Path, spec_text: str | None = None, example: Path | None = None) -> tuple[Path, str, str]:
    spec = load_spec(example) if example is not None else load_spec_text(spec_text or "", "routed.yaml")
    data = alertmanager.config(spec)
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, spec.service, spec.alerting.severity.label("page")


def _route(amtool: str, config: Path, **labels: str) -> str:
    done = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.prometheus
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_generated_config_loads_and_routes_pages_and_tickets(amtool_path: str, tmp_path: Path, example: Path) -> None:
    amtool = amtool_path
    config, service, page = _write(tmp_path, example=example)
    checked = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    spec = load_spec(example)
    model = spec.models[0].name
    ticket = spec.alerting.severity.label("ticket")
    assert _route(amtool, config, service=service, severity=page, model=model, **{"class": "chat"}) == "page"
    assert _route(amtool, config, service=service, severity=ticket, model=model, **{"class": "chat"}) == "ticket"


@pytest.mark.prometheus
def test_receiver_names_come_from_the_spec(amtool_path: str, tmp_path: Path) -> None:
    amtool = amtool_path
    config, service, page = _write(tmp_path, NAMED_RECEIVERS)
    assert _route(amtool, config, service=service, severity=page, model="m1") == "oncall-pager"
    assert _route(amtool, config, service=service, severity="warning", model="m1") == "team-queue"


TEAM_CONFIG = Path(__file__).resolve().parent / "data" / "alertmanager-team.yaml"


def _team() -> dict[str, Any]:
    data = yaml.safe_load(TEAM_CONFIG.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _check(amtool: str, path: Path) -> None:
    checked = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _with_receivers(example: Path, page: str, ticket: str) -> Spec:
    """The example spec as a team that already has a pager and a ticket queue would write it."""
    data = yaml.safe_load(example.read_text(encoding="utf-8"))
    data.setdefault("alerting", {})["receivers"] = {"page": page, "ticket": ticket}
    return load_spec_text(yaml.safe_dump(data, sort_keys=False), example.name)


@pytest.mark.prometheus
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_checked_in_config_merges_into_a_team_config(amtool_path: str, tmp_path: Path, example: Path) -> None:
    """The file `slokit generate` wrote, as it is and merged into the sample team configuration: both load, slokit's
    pages and tickets reach slokit's receivers (not the team's catch-all critical route), and the team's own routes
    still route as before."""
    amtool = amtool_path
    spec = load_spec(example)
    generated_path = ROOT / alertmanager.path(spec)
    _check(amtool, generated_path)
    generated = yaml.safe_load(generated_path.read_text(encoding="utf-8"))
    merged = alertmanager.merge(_team(), generated)
    config = tmp_path / "merged.yaml"
    config.write_text(yaml.safe_dump(merged, sort_keys=False), encoding="utf-8")
    _check(amtool, config)

    severity, model = spec.alerting.severity, spec.models[0].name
    slo = {"service": spec.service, "model": model, "class": spec.classes[0].name, "slo": "ttft"}
    assert _route(amtool, config, alertname="SlokitErrorBudgetBurn", severity=severity.page, **slo) == "page"
    assert _route(amtool, config, alertname="SlokitLatencyAboveAcceptable", severity=severity.ticket, **slo) == "ticket"
    assert _route(amtool, config, alertname="SlokitExporterGone", severity=severity.page, service=spec.service,
                  model=model) == "page"  # fmt: skip
    # The team's routes are untouched.
    assert _route(amtool, config, alertname="PaymentsDown", severity="critical", service="payments") == "platform-pager"
    assert _route(amtool, config, alertname="ReplicationLag", severity="warning", team="database") == "dba-email"
    assert _route(amtool, config, alertname="Watchdog") == "null"
    assert _route(amtool, config, alertname="DiskFilling", severity="warning") == "platform-slack"
    names = [r["name"] for r in merged["receivers"]]
    assert len(names) == len(set(names))
    assert {"page", "ticket"} <= set(names)
    assert merged["inhibit_rules"][: len(_team()["inhibit_rules"])] == _team()["inhibit_rules"]
    assert merged["inhibit_rules"][len(_team()["inhibit_rules"]) :] == generated["inhibit_rules"]


@pytest.mark.prometheus
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_spec_naming_the_teams_receivers_keeps_their_integrations(
    amtool_path: str, tmp_path: Path, example: Path
) -> None:
    amtool = amtool_path
    spec = _with_receivers(example, "llm-oncall", "llm-tickets")
    generated = alertmanager.config(spec)
    as_is = tmp_path / "generated.yaml"
    as_is.write_text(yaml.safe_dump(generated, sort_keys=False), encoding="utf-8")
    _check(amtool, as_is)
    merged = alertmanager.merge(_team(), generated)
    config = tmp_path / "merged.yaml"
    config.write_text(yaml.safe_dump(merged, sort_keys=False), encoding="utf-8")
    _check(amtool, config)
    assert merged["receivers"] == _team()["receivers"]  # nothing added: the team's receivers carry the integrations
    severity, model = spec.alerting.severity, spec.models[0].name
    slo = {"service": spec.service, "model": model, "class": spec.classes[0].name, "slo": "ttft"}
    assert _route(amtool, config, alertname="SlokitErrorBudgetBurn", severity=severity.page, **slo) == "llm-oncall"
    assert _route(amtool, config, alertname="SlokitLatencyAboveAcceptable", severity=severity.ticket,
                  **slo) == "llm-tickets"  # fmt: skip
