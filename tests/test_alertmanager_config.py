"""The generated Alertmanager configuration, checked and routed by the real amtool.

Pages must reach the page receiver and tickets the ticket receiver, under the names the spec gives; the file must
load in Alertmanager's own config parser.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from slokit.generate import alertmanager
from slokit.spec import load_spec, load_spec_text

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
