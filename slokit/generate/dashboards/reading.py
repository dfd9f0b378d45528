"""Readers of generated dashboard JSON: every PromQL query a board carries, for tests and checks that run
them against Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def queries(data: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """Every (panel id, panel title, PromQL) in one dashboard's JSON, for tests and `slokit` checks."""
    out: list[tuple[int, str, str]] = []
    for panel in data.get("panels", []):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                out.append((int(panel["id"]), str(panel.get("title", "")), str(expr)))
    return out


def annotation_queries(data: Mapping[str, Any]) -> list[str]:
    """PromQL of the dashboard's annotations (firing alerts: empty while nothing fires)."""
    return [str(a["expr"]) for a in data.get("annotations", {}).get("list", []) if a.get("expr")]


def variable_queries(data: Mapping[str, Any]) -> list[str]:
    """PromQL inside query variables (e.g. the engine list)."""
    out: list[str] = []
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            text = query.get("query") if isinstance(query, dict) else query
            if text:
                out.append(str(text))
    return out
