"""The demo's Alertmanager and webhook receiver, against the real Alertmanager binary."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from slokit.local.alertmanager import check_config, config, severity_routes, start_alertmanager, with_webhooks
from slokit.local.webhook import Notification, WebhookReceiver, describe_alert


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_config_routes_each_severity_to_its_own_path() -> None:
    routes = severity_routes("http://127.0.0.1:1/", "critical", "warning")
    data = config(routes)
    children = data["route"]["routes"]
    assert [c["matchers"] for c in children] == [['severity="critical"'], ['severity="warning"']]
    assert [c["receiver"] for c in children] == ["page", "ticket"]
    assert data["route"]["receiver"] == "other"
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in data["receivers"]}
    assert urls == {
        "page": "http://127.0.0.1:1/page",
        "ticket": "http://127.0.0.1:1/ticket",
        "other": "http://127.0.0.1:1/other",
    }
    assert "severity" not in data["route"]["group_by"]


def test_with_webhooks_gives_every_receiver_a_webhook_and_shortens_only_the_timers() -> None:
    generated = {
        "route": {
            "receiver": "ticket",
            "routes": [
                {"receiver": "ticket", "matchers": ['service="s"'], "group_by": ["service", "model", "class"],
                 "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
                 "routes": [{"receiver": "page", "matchers": ['severity="critical"'], "repeat_interval": "1h"}]},
            ],
        },
        "receivers": [{"name": "page"}, {"name": "ticket", "slack_configs": [{"channel": "#x"}]}],
        "inhibit_rules": [{"source_matchers": ['severity="critical"'], "target_matchers": ['severity="warning"']}],
    }  # fmt: skip
    data = with_webhooks(generated, "http://127.0.0.1:1/", group_wait="1s", group_interval="2s")
    hook = {"send_resolved": True, "max_alerts": 0}
    assert data["receivers"] == [
        {"name": "page", "webhook_configs": [{"url": "http://127.0.0.1:1/page", **hook}]},
        {"name": "ticket", "webhook_configs": [{"url": "http://127.0.0.1:1/ticket", **hook}]},
    ]
    root = data["route"]
    assert (root["group_wait"], root["group_interval"]) == ("1s", "2s")
    service = root["routes"][0]
    assert (service["group_wait"], service["group_interval"], service["repeat_interval"]) == ("1s", "2s", "12h")
    assert service["group_by"] == ["service", "model", "class"]
    assert service["routes"][0] == generated["route"]["routes"][0]["routes"][0]  # sets no timer of its own
    assert data["inhibit_rules"] == generated["inhibit_rules"]
    assert generated["receivers"][0] == {"name": "page"}  # the input is not changed


def test_webhook_keeps_notifications_and_rejects_garbage() -> None:
    seen: list[Notification] = []
    with WebhookReceiver(on_notification=seen.append) as receiver:
        body = json.dumps({"receiver": "page", "status": "firing", "alerts": []}).encode()
        request = urllib.request.Request(f"{receiver.url}/page", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        bad = urllib.request.Request(f"{receiver.url}/page", data=b"{not json", method="POST")
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(bad, timeout=5)
        assert error.value.code == 400
        found = receiver.wait_for(lambda n: n.receiver == "page", timeout=1)
    assert found is not None and found.path == "/page" and found.status == "firing"
    assert seen == [found]


def test_describe_alert_names_route_severity_and_runbook() -> None:
    alert = {
        "status": "firing",
        "labels": {"alertname": "SlokitX", "severity": "critical", "service": "demo", "class": "chat"},
        "annotations": {"runbook_url": "runbooks/demo.md#x"},
    }
    line = describe_alert(alert, "/page")
    assert line == "[page] FIRING SlokitX severity=critical service=demo class=chat runbook_url=runbooks/demo.md#x"


@pytest.mark.prometheus
def test_alertmanager_routes_by_severity_to_the_webhook(tmp_path: Path) -> None:
    with WebhookReceiver() as receiver:
        routes = severity_routes(receiver.url, "critical", "warning")
        manager = start_alertmanager(tmp_path / "am", routes)
        try:
            assert check_config(manager.config_path) is None
            manager.post_alerts(
                [
                    {
                        "labels": {"alertname": "SlokitPage", "severity": "critical", "service": "demo"},
                        "annotations": {"runbook_url": "runbooks/demo.md#page"},
                    },
                    {"labels": {"alertname": "SlokitTicket", "severity": "warning", "service": "demo"}},
                ]
            )
            page = receiver.wait_for(lambda n: bool(n.firing("SlokitPage")), timeout=30)
            ticket = receiver.wait_for(lambda n: bool(n.firing("SlokitTicket")), timeout=30)
            held = {a["labels"]["alertname"] for a in manager.alerts()}
        finally:
            manager.stop()
    assert page is not None and page.path == "/page" and page.receiver == "page"
    assert page.firing("SlokitPage")[0]["annotations"]["runbook_url"] == "runbooks/demo.md#page"
    assert ticket is not None and ticket.path == "/ticket"
    assert held == {"SlokitPage", "SlokitTicket"}
    assert manager.pid is not None and not _pid_alive(manager.pid)
