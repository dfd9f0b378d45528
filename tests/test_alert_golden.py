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


def test_fast_page_of_chat_ttft_is_adapted_to_page_within_15_minutes() -> None:
    page = _one("SlokitErrorBudgetBurn", model="llama-3-70b", **{"class": "chat"}, slo="ttft", long="10m")
    assert page["labels"] == {
        "severity": "critical",
        "service": "assistant",
        "slo": "ttft",
        "model": "llama-3-70b",
        "class": "chat",
        "long": "10m",
        "short": "5m",
    }
    assert page["for"] == "2m" and page["keep_firing_for"] == "10m"
    assert "ratio10m" in page["expr"] and "ratio5m" in page["expr"] and "> 13.44" in page["expr"]
    assert ">= 30" in page["expr"]  # alerting.min_requests' default: no page from a handful of requests
    notes = page["annotations"]
    assert set(notes) == {"summary", "description", "runbook_url"}
    assert notes["summary"] == "Latency error budget is burning too fast."
    assert "67.2% of requests slow" in notes["description"]
    assert "pages within 11m" in notes["description"] and "95% within 500ms" in notes["description"]
    assert notes["runbook_url"].startswith("https://runbooks.example.com/assistant#slokiterrorbudgetburn-ttft-chat")


def test_p50_over_critical_pages_and_p95_over_acceptable_tickets() -> None:
    page = _one("SlokitLatencyAboveCritical", model="llama-3-70b", **{"class": "chat"}, slo="ttft")
    assert page["labels"] == {
        "severity": "critical",
        "service": "assistant",
        "slo": "ttft",
        "model": "llama-3-70b",
        "class": "chat",
        "percentile": "p50",
    }
    assert page["for"] == "5m"  # alerting.tier_for
    assert 'le=~"1\\\\.0|1"' in page["expr"] and ") < 0.5" in page["expr"]
    ticket = _one("SlokitLatencyAboveAcceptable", model="llama-3-70b", **{"class": "chat"}, slo="ttft")
    assert ticket["labels"]["severity"] == "warning" and ticket["labels"]["percentile"] == "p95"
    assert ") < 0.95" in ticket["expr"] and 'le="0.5"' in ticket["expr"]
    # Only p50 pages and only p95 tickets by default: no other percentile of chat TTFT alerts.
    cells = {
        (a["alert"], a["labels"].get("percentile"))
        for a in _alerts()
        if a["alert"].startswith("SlokitLatencyAbove") and a["labels"].get("class") == "chat"
        and a["labels"].get("slo") == "ttft" and a["alert"] != "SlokitLatencyAboveBaseline"
    }  # fmt: skip
    assert cells == {("SlokitLatencyAboveCritical", "p50"), ("SlokitLatencyAboveAcceptable", "p95")}


def test_exporter_gone_pages_per_model_from_the_frontend_histogram() -> None:
    gone = _one("SlokitExporterGone", model="llama-3-70b")
    assert gone["labels"] == {"severity": "critical", "service": "assistant", "model": "llama-3-70b"}
    assert gone["expr"].startswith(
        'absent_over_time(slokit_frontend_time_to_first_token_seconds_count{job="vllm",namespace="prod",'
        'model="llama-3-70b"}[10m])'
    )
    assert set(gone["annotations"]) == {"summary", "description", "runbook_url"}
