"""Backtest counts notifications as the generated Alertmanager configuration sends them (slokit.backtest.notify).

Hand-computed against Alertmanager's dispatcher, inhibitor and notification log (dispatch/dispatch.go,
inhibit/inhibit.go, notify/notify.go's DedupStage): one group per route and `group_by` value, a flush
`group_wait` after the first alert (at once for an alert pending longer than that), then every `group_interval`; a
notification when alerts join, every `repeat_interval` while they fire, a resolution that wakes no one; a group that
empties is deleted. The configuration is the one `slokit generate` writes for examples/assistant-vllm.yaml, and a
copy with other timers shows the times come from it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from slokit.backtest.evaluate import Candidate, Evaluation, Firing
from slokit.backtest.notify import AlertmanagerModel, Matcher
from slokit.backtest.report import score, to_json, to_markdown
from slokit.generate.alertmanager import config
from slokit.spec import load_spec

SPEC = load_spec(Path(__file__).resolve().parent.parent / "examples" / "assistant-vllm.yaml")
SERVICE = "assistant-vllm"
BIG, SMALL = "llama-3-70b", "llama-3-8b"
T0 = 1_764_806_400.0


def page(name: str, model: str = BIG, cls: str = "chat", slo: str = "ttft", **extra: str) -> dict[str, str]:
    return {"alertname": name, "severity": "critical", "service": SERVICE, "model": model, "class": cls,
            "slo": slo, **extra}  # fmt: skip


def ticket(name: str, model: str = BIG, cls: str = "chat", slo: str = "ttft", **extra: str) -> dict[str, str]:
    return {**page(name, model, cls, slo, **extra), "severity": "warning"}


def sent(model: AlertmanagerModel, alerts: list[Any]) -> list[tuple[str, float, str, list[str]]]:
    return [(n.receiver, n.time - T0, n.kind, sorted(a["alertname"] + a.get("long", "") for a in n.new))
            for n in model.notifications(alerts)]  # fmt: skip


GENERATED = AlertmanagerModel.from_config(config(SPEC))


def test_one_outage_of_many_page_series_is_one_page() -> None:
    # Twelve page series of one model within group_wait: one notification, when group_wait ends.
    series = [page("SlokitErrorBudgetBurn", cls=c, slo=s, long=w) for c, s in (("chat", "ttft"), ("chat", "itl"))
              for w in ("1h", "6h")]  # fmt: skip
    series += [page("SlokitLatencyAboveCritical", cls="chat", slo=s, percentile=p) for s in ("ttft", "itl")
               for p in ("p50", "p95")]  # fmt: skip
    series += [page(n, cls="", slo="", cause="engine") for n in ("SlokitEngineQueueFull", "SlokitKVCacheNearFull")]
    series += [page("SlokitLatencyAboveCritical", cls="code", slo="ttft", percentile="p50"),
               page("SlokitErrorBudgetBurn", cls="code", slo="ttft", long="1h")]  # fmt: skip
    assert len(series) == 12
    alerts = [(labels, T0 + 2 * i, T0 + 1800, T0 + 2 * i) for i, labels in enumerate(series)]
    got = sent(GENERATED, alerts)
    assert [(r, t, k) for r, t, k, _ in got] == [("page", 30.0, "first"), ("page", 1830.0, "resolved")]
    assert len(got[0][3]) == 12
    # Another model pages in its own group (group_by service, model).
    other = [(page("SlokitErrorBudgetBurn", model=SMALL, cls="code", long="1h"), T0 + 10, T0 + 600, T0 + 10)]
    assert [(r, t, k) for r, t, k, _ in sent(GENERATED, alerts + other)][:2] == [
        ("page", 30.0, "first"), ("page", 40.0, "first")
    ]  # fmt: skip


def test_joining_repeating_and_new_groups_follow_the_configured_timers() -> None:
    a, b = page("SlokitErrorBudgetBurn", long="1h"), page("SlokitLatencyAboveCritical", percentile="p50")
    alerts = [
        (a, T0, T0 + 7200, T0),  # fires two hours
        (b, T0 + 100, T0 + 400, T0 + 100),  # joins after the first flush: the next group_interval tick
    ]
    assert sent(GENERATED, alerts) == [
        ("page", 30.0, "first", ["SlokitErrorBudgetBurn1h"]),
        ("page", 330.0, "new alerts", ["SlokitLatencyAboveCritical"]),
        ("page", 630.0, "resolved", []),  # b resolved: an update (send_resolved), not a page
        ("page", 4230.0, "repeat", []),  # repeat_interval 1h after the last notification, on a group_interval tick
        ("page", 7230.0, "resolved", []),
    ]
    # The group emptied and was deleted: the same alert firing again starts a new group and a new first page.
    again = [*alerts, (a, T0 + 9000, T0 + 9600, T0 + 9000)]
    assert sent(GENERATED, again)[-2:] == [("page", 9030.0, "first", ["SlokitErrorBudgetBurn1h"]),
                                           ("page", 9630.0, "resolved", [])]  # fmt: skip
    # The timers are read from the configuration: halve group_interval and group_wait, drop repeats to 20m.
    changed = copy.deepcopy(config(SPEC))
    service = changed["route"]["routes"][0]
    service.update(group_wait="15s", group_interval="150s")
    service["routes"][0]["repeat_interval"] = "20m"
    got = sent(AlertmanagerModel.from_config(changed), alerts)
    assert [(t, k) for _, t, k, _ in got[:4]] == [(15.0, "first"), (165.0, "new alerts"), (465.0, "resolved"),
                                                  (1665.0, "repeat")]  # fmt: skip


def test_alerts_pending_longer_than_group_wait_flush_at_once() -> None:
    # Prometheus sends startsAt = when the alert became pending; one older than group_wait flushes a new group now.
    a = page("FixedP99AboveThreshold")
    assert sent(GENERATED, [(a, T0 + 300, T0 + 900, T0)])[0][:3] == ("page", 300.0, "first")


def test_inhibited_tickets_wake_no_one() -> None:
    # A page mutes the tickets of its SLO; an engine ticket of its model; exporter gone mutes every SLO alert.
    alerts = [
        (page("SlokitErrorBudgetBurn", long="1h"), T0, T0 + 3600, T0),
        (ticket("SlokitErrorBudgetBurn", long="1d"), T0 + 60, T0 + 3000, T0 + 60),
        (ticket("SlokitEngineQueueFull", cls="", slo=""), T0 + 60, T0 + 3000, T0 + 60),
    ]
    assert [(r, k) for r, _, k, _ in sent(GENERATED, alerts)] == [("page", "first"), ("page", "resolved")]
    # The same ticket on another SLO is not muted: it reaches the ticket receiver, grouped by model and class.
    other = (ticket("SlokitLatencyAboveAcceptable", slo="itl", percentile="p95"), T0 + 60, T0 + 3000, T0 + 60)
    assert ("ticket", 90.0, "first", ["SlokitLatencyAboveAcceptable"]) in sent(GENERATED, [*alerts, other])
    gone = [(page("SlokitExporterGone", cls="", slo=""), T0, T0 + 3600, T0),
            (page("SlokitErrorBudgetBurn", long="1h"), T0 + 60, T0 + 600, T0 + 60)]  # fmt: skip
    assert [a for _, _, _, a in sent(GENERATED, gone)] == [["SlokitExporterGone"], []]


def test_matchers_parse_as_alertmanager_writes_them() -> None:
    assert Matcher.parse('service="a\\"b"').matches({"service": 'a"b'})
    assert Matcher.parse('alertname=~"A|B"').matches({"alertname": "B"})
    assert not Matcher.parse('alertname=~"A|B"').matches({"alertname": "AB"})  # anchored
    assert Matcher.parse("severity!=warning").matches({})


def _firing(labels: dict[str, str], start: float, end: float) -> Firing:
    return Firing(labels["alertname"], labels["severity"], labels, start, end, "burn_rate")


def test_score_counts_notifications_and_series_apart_and_says_when_it_extrapolates() -> None:
    # One 30-minute outage of 12 page series in a day of history: 12 series, one page; x7 to a week, and said so.
    series = [page("SlokitErrorBudgetBurn", cls=c, slo=s, long=w) for c in ("chat", "code") for s in ("ttft", "itl")
              for w in ("1h", "6h", "1d")]  # fmt: skip
    candidates = {
        v: [Candidate("SlokitErrorBudgetBurn", "vector(1)", 0.0, 0.0, {}, 30.0, "burn_rate")] for v in ("slokit",)
    }
    key = candidates["slokit"][0].key
    start = T0 + 3600
    fired = [_firing(s, start + 30 * (i % 2), start + 1800) for i, s in enumerate(series)]
    result = Evaluation(start=T0, end=T0 + 86400, variants=candidates, alerts={key: fired})
    scored = score(SPEC, result, [])
    assert scored["slokit"].page_series == 12
    assert scored["slokit"].pages == 1
    assert round(scored["slokit"].pages_per_week, 3) == 7.0
    doc = to_json(SPEC, result, [], scored)
    assert doc["extrapolated"] is True and doc["variants"]["slokit"]["page_series_per_week"] == 84.0
    markdown = to_markdown(doc)
    assert "extrapolated from 1d of history" in markdown and "alertmanager/assistant-vllm.yaml" in markdown
    assert "| slokit | 7.0 | 0.0 | 84.0 | 0.0 |" in markdown
