"""One outage through a real Alertmanager: one page, its cause inside it, the tickets it explains held back.

The configuration is what a team runs: the checked-in `alertmanager/assistant-vllm.yaml` merged into the sample
team configuration (tests/data/alertmanager-team.yaml) with slokit's merge, then, for this run only, every
receiver given a webhook to a receiver in this test and the grouping timers shortened (`with_webhooks`). Debian's
Alertmanager runs on a loopback port; the test posts alerts to it the way Prometheus does (API v2).

The alerts are the ones the checked-in rules file `rules/assistant-vllm.rules.yaml` generates: each is picked from
the file by name and labels, and its labels are pinned by hand below, so a change to the rules' labels that would
break the routing fails here by name. Engine alerts also carry the replica labels their expression keeps
(`instance`, `engine`). Every wait has a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from slokit.generate import alertmanager as generated_config
from slokit.generate import queries
from slokit.generate.alerts import alert_instances
from slokit.generate.model import heading_anchor
from slokit.local.alertmanager import Alertmanager, start_alertmanager, with_webhooks
from slokit.local.webhook import Notification, WebhookReceiver
from slokit.spec import load_spec

ROOT: Final = Path(__file__).resolve().parent.parent
SPEC: Final = ROOT / "examples" / "assistant-vllm.yaml"
RULES: Final = ROOT / "rules" / "assistant-vllm.rules.yaml"
TEAM: Final = Path(__file__).resolve().parent / "data" / "alertmanager-team.yaml"
GROUP_WAIT: Final = "1s"
GROUP_INTERVAL_S: Final = 2.0
GROUP_INTERVAL: Final = f"{GROUP_INTERVAL_S:g}s"
DEADLINE: Final = 60.0  # seconds any one thing may take to arrive
REPLICA: Final = {"instance": "10.0.3.17:8000", "engine": "0"}  # the engine alerts' replica, as scraped

SERVICE: Final = "assistant-vllm"
BIG, SMALL = "llama-3-70b", "llama-3-8b"
SLO_70B_CHAT_TTFT: Final = {"service": SERVICE, "model": BIG, "class": "chat", "slo": "ttft"}

# Golden: the alerts a TTFT outage of chat on llama-3-70b (its engine full and queueing) fires, with the labels the
# rules give them. Page and ticket severities are the spec's (critical, warning).
OUTAGE_PAGES: Final = {
    "fast burn page": {"alertname": "SlokitErrorBudgetBurn", "severity": "critical", **SLO_70B_CHAT_TTFT,
                       "long": "10m", "short": "5m"},
    "slow burn page": {"alertname": "SlokitErrorBudgetBurn", "severity": "critical", **SLO_70B_CHAT_TTFT,
                       "long": "6h", "short": "30m"},
    "critical tier page": {"alertname": "SlokitLatencyAboveCritical", "severity": "critical", **SLO_70B_CHAT_TTFT,
                           "percentile": "p50"},
}  # fmt: skip
OUTAGE_CAUSES: Final = {
    "queue full, cause": {"alertname": "SlokitEngineQueueFull", "severity": "critical", "service": SERVICE,
                          "model": BIG, "cause": "engine"},
    "KV cache full, cause": {"alertname": "SlokitKVCacheNearFull", "severity": "critical", "service": SERVICE,
                             "model": BIG, "cause": "engine"},
}  # fmt: skip
OUTAGE_TICKETS: Final = {
    "1d burn ticket": {"alertname": "SlokitErrorBudgetBurn", "severity": "warning", **SLO_70B_CHAT_TTFT,
                       "long": "1d", "short": "2h"},
    "3d burn ticket": {"alertname": "SlokitErrorBudgetBurn", "severity": "warning", **SLO_70B_CHAT_TTFT,
                       "long": "3d", "short": "6h"},
    "acceptable tier ticket": {"alertname": "SlokitLatencyAboveAcceptable", "severity": "warning",
                               **SLO_70B_CHAT_TTFT, "percentile": "p95"},
    "baseline ticket": {"alertname": "SlokitLatencyAboveBaseline", "severity": "warning", **SLO_70B_CHAT_TTFT},
    "scale-out ticket": {"alertname": "SlokitScaleOutNeeded", "severity": "warning", **SLO_70B_CHAT_TTFT},
    # Fired before the page; it keeps firing (keep_firing_for) a while after the page starts.
    "queue full ticket": {"alertname": "SlokitEngineQueueFull", "severity": "warning", "service": SERVICE,
                          "model": BIG},
}  # fmt: skip
# Not explained by the page: another SLO of the same class, and another model.
UNRELATED_TICKETS: Final = {
    "ITL acceptable ticket": {"alertname": "SlokitLatencyAboveAcceptable", "severity": "warning", "service": SERVICE,
                              "model": BIG, "class": "chat", "slo": "itl", "percentile": "p95"},
    "other model's ticket": {"alertname": "SlokitLatencyAboveAcceptable", "severity": "warning", "service": SERVICE,
                             "model": SMALL, "class": "code", "slo": "ttft", "percentile": "p95"},
}  # fmt: skip
EXPORTER_GONE: Final = {"alertname": "SlokitExporterGone", "severity": "critical", "service": SERVICE, "model": BIG}
METRICS_ABSENT: Final = {"alertname": "SlokitMetricsAbsent", "severity": "warning", "service": SERVICE, "model": BIG}


def _rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in data["groups"] for r in g["rules"] if "alert" in r]


def _from_rules(golden: Mapping[str, str]) -> dict[str, Any]:
    """The one alert rule of the checked-in file whose name and labels are `golden`, as Prometheus would send it:
    its labels (plus the replica labels an engine alert's expression keeps) and its annotations (templates left
    as they are)."""
    # A rule is written once for the fleet: its own labels, and model, class and slo from the series it fires on.
    series = {"model", "class", "slo"}
    found = [
        r
        for r in _rules()
        if {"alertname": r["alert"], **r["labels"]}.items() <= dict(golden).items()
        and set(golden) - {"alertname", *r["labels"]} <= series
    ]
    assert len(found) == 1, f"{len(found)} rules in {RULES.name} with labels {dict(golden)}"
    rule = found[0]
    members = {tuple(sorted(i.series_labels().items())) for i in alert_instances(load_spec(SPEC))
               if i.anchor == heading_anchor(rule["annotations"]["runbook_url"].rsplit("#", 1)[1])}  # fmt: skip
    assert tuple(sorted((k, v) for k, v in golden.items() if k in series)) in members, f"{dict(golden)} not covered"
    labels = dict(golden)
    if rule["alert"] in ("SlokitEngineQueueFull", "SlokitKVCacheNearFull", "SlokitEnginePreempting"):
        keys = queries.Queries(load_spec(SPEC)).engine_keys
        labels.update({k: v for k, v in REPLICA.items() if k in keys})
    return {"labels": labels, "annotations": dict(rule.get("annotations", {}))}


def _key(alert: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(alert["labels"].items()))


@pytest.fixture
def incident_alertmanager(tmp_path: Path) -> Iterator[tuple[Alertmanager, WebhookReceiver]]:
    """Alertmanager on loopback with the merged configuration, every receiver a webhook to this test."""
    spec = load_spec(SPEC)
    generated = yaml.safe_load((ROOT / generated_config.path(spec)).read_text(encoding="utf-8"))
    team = yaml.safe_load(TEAM.read_text(encoding="utf-8"))
    with WebhookReceiver() as receiver:
        data = with_webhooks(
            generated_config.merge(team, generated), receiver.url, group_wait=GROUP_WAIT, group_interval=GROUP_INTERVAL
        )
        manager = start_alertmanager(tmp_path / "alertmanager", [], config_data=data)
        try:
            yield manager, receiver
        finally:
            manager.stop()


def _wait(what: str, predicate: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.2)


def _settle(receiver: WebhookReceiver, manager: Alertmanager) -> None:
    """Let every group flush at least twice more before counting notifications: Alertmanager would send a second
    notification of a group only at one of those flushes. Each sentinel goes to a route of the team's own and
    arrives a group_wait after it is posted (so Alertmanager's flushes are running); between them, one
    group_interval."""
    for n in range(2):
        sentinel = {"labels": {"alertname": f"SettleSentinel{n}", "team": "database", "severity": "critical"}}
        manager.post_alerts([sentinel])
        found = receiver.wait_for(lambda x, n=n: bool(x.firing(f"SettleSentinel{n}")), timeout=DEADLINE)
        assert found is not None, "sentinel did not arrive"
        time.sleep(GROUP_INTERVAL_S)  # one group_interval before the next sentinel


def _status(manager: Alertmanager) -> dict[tuple[tuple[str, str], ...], Mapping[str, Any]]:
    return {_key(a): a for a in manager.alerts()}


def _page_notifications(receiver: WebhookReceiver) -> list[Notification]:
    return [n for n in receiver.notifications if n.receiver == "page"]


@pytest.mark.prometheus
def test_one_outage_is_one_page_with_its_cause_and_the_tickets_held_back(
    incident_alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, receiver = incident_alertmanager
    pages = {k: _from_rules(v) for k, v in OUTAGE_PAGES.items()}
    causes = {k: _from_rules(v) for k, v in OUTAGE_CAUSES.items()}
    tickets = {k: _from_rules(v) for k, v in OUTAGE_TICKETS.items()}
    unrelated = {k: _from_rules(v) for k, v in UNRELATED_TICKETS.items()}
    assert causes["queue full, cause"]["labels"] == {**OUTAGE_CAUSES["queue full, cause"], **REPLICA}

    # Prometheus sends what is firing after each evaluation; the whole outage is one batch here.
    manager.post_alerts([*pages.values(), *causes.values(), *tickets.values(), *unrelated.values()])
    page = receiver.wait_for(lambda n: n.receiver == "page", timeout=DEADLINE)
    assert page is not None, "no page notification"
    for name in UNRELATED_TICKETS:
        labels = unrelated[name]["labels"]
        found = receiver.wait_for(lambda n, labels=labels: any(a["labels"] == labels for a in n.alerts), DEADLINE)
        assert found is not None and found.receiver == "ticket", f"{name} did not reach the ticket receiver"
    _settle(receiver, manager)

    # Exactly one page notification, on the page receiver's path, holding the pages and their engine cause.
    assert len(_page_notifications(receiver)) == 1, [describe(n) for n in _page_notifications(receiver)]
    assert page.path == "/page" and page.status == "firing"
    assert page.payload["groupLabels"] == {"service": SERVICE, "model": BIG}
    in_page = sorted(_key(a) for a in page.alerts)
    assert in_page == sorted(_key(a) for a in [*pages.values(), *causes.values()])
    assert {a["labels"]["alertname"] for a in page.alerts if a["labels"].get("cause") == "engine"} == {
        "SlokitEngineQueueFull",
        "SlokitKVCacheNearFull",
    }

    # No notification anywhere carries a ticket the page explains; Alertmanager reports each inhibited by a page.
    delivered = {_key(a) for n in receiver.notifications for a in n.alerts}
    for name, ticket in tickets.items():
        assert _key(ticket) not in delivered, f"{name} was delivered"
    page_fingerprints = {a["fingerprint"] for a in manager.alerts() if _key(a) in {_key(p) for p in pages.values()}}
    _wait("tickets marked inhibited", lambda: all(
        _status(manager)[_key(t)]["status"]["state"] == "suppressed" for t in tickets.values()))  # fmt: skip
    status = _status(manager)
    for name, ticket in tickets.items():
        inhibited_by = set(status[_key(ticket)]["status"]["inhibitedBy"])
        assert inhibited_by and inhibited_by <= page_fingerprints | {
            status[_key(c)]["fingerprint"] for c in causes.values()
        }, f"{name}: inhibited by {inhibited_by}"
        if ticket["labels"].get("slo") == "ttft":  # an SLO ticket: muted by the pages of its own SLO
            assert inhibited_by <= page_fingerprints, name
    # The unrelated tickets went out, each in its own group, and are active.
    for name, ticket in unrelated.items():
        assert status[_key(ticket)]["status"]["state"] == "active", name
    itl = next(n for n in receiver.notifications if any(_key(a) == _key(unrelated["ITL acceptable ticket"])
                                                         for a in n.alerts))  # fmt: skip
    assert itl.path == "/ticket" and itl.payload["groupLabels"] == {"service": SERVICE, "model": BIG, "class": "chat"}
    assert [_key(a) for a in itl.alerts] == [_key(unrelated["ITL acceptable ticket"])]
    # Nothing of slokit's reached the team's receivers.
    assert {n.receiver for n in receiver.notifications} == {"page", "ticket", "dba-pager"}


@pytest.mark.prometheus
def test_exporter_gone_page_mutes_that_models_slo_alerts(
    incident_alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, receiver = incident_alertmanager
    gone = _from_rules(EXPORTER_GONE)
    assert gone["labels"] == EXPORTER_GONE
    blind = {  # the SLO alerts of the model, still firing (keep_firing_for) or firing because the data went away
        "fast burn page": _from_rules(OUTAGE_PAGES["fast burn page"]),
        "acceptable tier ticket": _from_rules(OUTAGE_TICKETS["acceptable tier ticket"]),
        "metrics absent ticket": _from_rules(METRICS_ABSENT),
        "ITL acceptable ticket": _from_rules(UNRELATED_TICKETS["ITL acceptable ticket"]),  # no ITL page fires
    }
    other = _from_rules(UNRELATED_TICKETS["other model's ticket"])
    manager.post_alerts([gone, *blind.values(), other])
    page = receiver.wait_for(lambda n: n.receiver == "page", timeout=DEADLINE)
    assert page is not None, "no page notification"
    found = receiver.wait_for(lambda n: any(_key(a) == _key(other) for a in n.alerts), timeout=DEADLINE)
    assert found is not None and found.receiver == "ticket", "the other model's ticket did not arrive"
    _settle(receiver, manager)

    assert len(_page_notifications(receiver)) == 1, [describe(n) for n in _page_notifications(receiver)]
    assert page.payload["groupLabels"] == {"service": SERVICE, "model": BIG}
    assert [_key(a) for a in page.alerts] == [_key(gone)]  # the blind SLO page is held back inside its own group
    delivered = {_key(a) for n in receiver.notifications for a in n.alerts}
    gone_fingerprint = _status(manager)[_key(gone)]["fingerprint"]
    _wait("SLO alerts marked inhibited", lambda: all(
        _status(manager)[_key(a)]["status"]["state"] == "suppressed" for a in blind.values()))  # fmt: skip
    status = _status(manager)
    burn_fingerprint = status[_key(blind["fast burn page"])]["fingerprint"]
    for name, alert in blind.items():
        assert _key(alert) not in delivered, f"{name} was delivered"
        inhibited_by = set(status[_key(alert)]["status"]["inhibitedBy"])
        # Alertmanager names the first inhibition that applies: a ticket of the burning SLO may name the (itself
        # muted) page of that SLO; the others can only be muted by the exporter-gone page.
        assert inhibited_by and inhibited_by <= {gone_fingerprint, burn_fingerprint}, name
        if name != "acceptable tier ticket":
            assert inhibited_by == {gone_fingerprint}, name
    assert status[_key(gone)]["status"]["state"] == "active"
    assert status[_key(other)]["status"]["state"] == "active"


def describe(notification: Notification) -> str:
    """For assertion messages: the receiver and the alert names of a notification."""
    names = ", ".join(str(a["labels"].get("alertname")) for a in notification.alerts)
    return f"{notification.receiver}: {names}"
