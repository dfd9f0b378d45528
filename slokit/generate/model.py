"""Plain data the generators exchange: rule groups and alerts, before the writer turns them into YAML.

The runbook, the dashboards and the promtool tests read the same `AlertRule` objects the rule generator writes,
so an alert, its runbook section and its dashboard link cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from slokit.schema import Sli


class AlertKind(StrEnum):
    """What an alert watches; the runbook picks its explanation by kind."""

    BURN_RATE = "burn_rate"  # multi-window multi-burn-rate on an error-budget objective
    TIER = "tier"  # a percentile worse than a tier (acceptable: ticket, critical: page)
    BASELINE = "baseline"  # p99 far above the same hour yesterday (or the 7-day median)
    SCALE_OUT = "scale_out"  # p99 TTFT above the scale-out fraction of the SLO
    QUEUE_OVERLOAD = "queue_overload"  # requests waiting while running is at the engine's maximum
    KV_CACHE = "kv_cache"  # KV cache near full or preempting
    CONSISTENCY = "consistency"  # batch classes: p99/p50 above the limit
    ABSENT = "absent"  # metrics missing or scrape target down
    EXPORTER_GONE = "exporter_gone"  # a model that served traffic in the last hour has no series: page


@dataclass(frozen=True)
class RecordingRule:
    """One `record:` rule."""

    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        """Prometheus rule-file form."""
        data: dict[str, Any] = {"record": self.record, "expr": self.expr}
        if self.labels:
            data["labels"] = dict(self.labels)
        return data


@dataclass(frozen=True)
class AlertRule:
    """One `alert:` rule plus what the runbook and dashboards need to know about it."""

    name: str  # alertname: CamelCase with the Slokit prefix
    expr: str
    for_: str  # Prometheus duration, "0s" for none
    labels: Mapping[str, str]  # severity, service, slo, model, class (where they apply), ...
    annotations: Mapping[str, str]  # summary, description, runbook_url
    kind: AlertKind
    anchor: str  # runbook section anchor; runbook_url ends with "#" + anchor
    title: str  # the runbook section heading text (its GitHub-style slug equals `anchor`)
    model: str | None = None
    request_class: str | None = None
    sli: Sli | None = None
    keep_firing_for: str = ""  # Prometheus >= 2.42: stay firing this long after the condition clears ("" none)

    def to_data(self) -> dict[str, Any]:
        """Prometheus rule-file form."""
        data: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ not in ("", "0s"):
            data["for"] = self.for_
        if self.keep_firing_for not in ("", "0s"):
            data["keep_firing_for"] = self.keep_firing_for
        data["labels"] = dict(self.labels)
        data["annotations"] = dict(self.annotations)
        return data


@dataclass(frozen=True)
class RuleGroup:
    """A rule group with its own evaluation interval."""

    name: str
    interval: str
    rules: tuple[RecordingRule | AlertRule, ...]
    fields: Mapping[str, Any] = field(default_factory=dict)  # an engine's own group fields (engines.group_fields)

    def to_data(self) -> dict[str, Any]:
        """Rule-file form (Prometheus's, plus the engine's group fields)."""
        return {"name": self.name, "interval": self.interval, **self.fields,
                "rules": [rule.to_data() for rule in self.rules]}  # fmt: skip


def heading_anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown renderers) derive from a heading's text.

    Lower-case, punctuation other than `-` and `_` dropped, spaces to `-`. Runbook headings are built so this is
    stable and unique, and every alert's `runbook_url` ends with it.
    """
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
