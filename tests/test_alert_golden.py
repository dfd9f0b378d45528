"""Golden alerts, pinned by hand: what an on-call engineer receives for the bundled example spec.

Every value below was worked out from examples/assistant.yaml and docs/rules.md by hand, not copied from the
generator: chat TTFT is 95% within 500ms over 28d, so the budget is 5%; the default fast page (1h/5m, 2% of the
budget) has factor 0.02 x 28d / 1h = 13.44, which a total outage reaches on the 1h window only after
13.44 x 5% = 67.2% of an hour (about 40 minutes), so the tier is adapted to 10m/5m at the same factor: a total
outage passes 67.2% of 10m after 6m43s and pages 2m later (8m43s). The p50 critical tier of chat TTFT is 1s, so
the page reads the share within 1s against 50%. The checked-in rules file is what `slokit generate` writes (CI
checks it is fresh), and what a team deploys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules" / "assistant.rules.yaml"


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def _one(name: str, **labels: str) -> dict[str, Any]:
    found = [a for a in _alerts() if a["alert"] == name and all(a["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{name} {labels}: {len(found)} alerts"
    return found[0]


def _records(name: str, **labels: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [
        rule
        for group in doc["groups"]
        for rule in group["rules"]
        if rule.get("record") == name and all(rule.get("labels", {}).get(k) == v for k, v in labels.items())
    ]


def test_fast_page_of_chat_ttft_is_adapted_to_page_within_15_minutes() -> None:
    page = _one("SlokitErrorBudgetBurn", long="10m")
    # One rule for every model and class whose fast page is adapted to these windows: model, class and slo come
    # from the series it fires on, not from the rule.
    assert page["labels"] == {"severity": "critical", "service": "assistant", "long": "10m", "short": "5m"}
    assert page["for"] == "2m" and page["keep_firing_for"] == "10m"
    assert "ratio10m" in page["expr"] and "ratio5m" in page["expr"]
    assert 'slokit:burn_rate:threshold{service="assistant",long="10m",short="5m",severity="critical"}' in page["expr"]
    assert "on (service, class, slo) group_left ()" in page["expr"]
    assert ">= 30" in page["expr"]  # alerting.min_requests' default: no page from a handful of requests
    # chat TTFT's factor for this tier, as a parameter series the rule joins with: 13.44
    factor = _records("slokit:burn_rate:threshold", **{"class": "chat"}, slo="ttft", long="10m")
    assert [f["expr"] for f in factor] == ["vector(13.44)"]
    assert factor[0]["labels"]["severity"] == "critical" and factor[0]["labels"]["short"] == "5m"
    # code TTFT (99% within 300ms: a 1% budget, 13.44% reached in 8 minutes) keeps the spec's 1h/5m tier
    assert not _records("slokit:burn_rate:threshold", **{"class": "code"}, slo="ttft", long="10m")
    assert [f["expr"] for f in _records("slokit:burn_rate:threshold", **{"class": "code"}, slo="ttft", long="1h")] == [
        "vector(13.44)"
    ]
    objective = _records("slokit:objective:ratio", **{"class": "chat"}, slo="ttft")
    assert [o["expr"] for o in objective] == ["vector(0.95)"] and "model" not in objective[0]["labels"]
    notes = page["annotations"]
    assert set(notes) == {"summary", "description", "runbook_url"}
    assert notes["summary"] == "Latency error budget is burning too fast."
    assert "{{ $labels.class }} on {{ $labels.model }}" in notes["description"]
    assert "pages within 11m" in notes["description"]
    assert (
        notes["runbook_url"]
        == "https://runbooks.example.com/assistant#slokiterrorbudgetburn-10m-5m-burn-fast-page-critical"
    )


def test_p50_over_critical_pages_and_p95_over_acceptable_tickets() -> None:
    page = _one("SlokitLatencyAboveCritical")
    assert page["labels"] == {"severity": "critical", "service": "assistant", "percentile": "p50"}
    assert page["for"] == "5m"  # alerting.tier_for
    # chat TTFT's critical p50 is 1s: the share within le 1 (Prometheus 2 and 3 spellings) against 50%
    assert 'class="chat",slo="ttft",le=~"1\\\\.0|1"' in page["expr"] and ") < 0.5" in page["expr"]
    ticket = _one("SlokitLatencyAboveAcceptable")
    assert ticket["labels"]["severity"] == "warning" and ticket["labels"]["percentile"] == "p95"
    assert ") < 0.95" in ticket["expr"] and 'class="chat",slo="ttft",le="0.5"' in ticket["expr"]
    # Only p50 pages and only p95 tickets by default: no other percentile alerts.
    cells = {
        (a["alert"], a["labels"].get("percentile"))
        for a in _alerts()
        if a["alert"].startswith("SlokitLatencyAbove") and a["alert"] != "SlokitLatencyAboveBaseline"
    }
    assert cells == {("SlokitLatencyAboveCritical", "p50"), ("SlokitLatencyAboveAcceptable", "p95")}


def test_exporter_gone_pages_per_model_from_the_frontend_histogram() -> None:
    gone = _one("SlokitExporterGone")
    assert gone["labels"] == {"severity": "critical", "service": "assistant"}
    presence = 'present_over_time(slokit_frontend_time_to_first_token_seconds_count{job="vllm",namespace="prod"}[10m])'
    assert presence in gone["expr"]
    assert 'max_over_time(slokit:sli_total:increase5m{service="assistant"}[1h]) > 0' in gone["expr"]
    assert set(gone["annotations"]) == {"summary", "description", "runbook_url"}
