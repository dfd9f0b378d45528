"""Plain data the generators exchange: rule groups and alerts, before the writer turns them into YAML.

The runbook, the dashboards and the promtool tests read the same `AlertRule` objects the rule generator writes,
so an alert, its runbook section and its dashboard link cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from slokit.schema import RULE_LABEL_CLASS, RULE_LABEL_MODEL, RULE_LABEL_SLO, Sli


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
class Member:
    """One (model, class, SLO) an alert rule covers, and the values its condition holds for it.

    A rule is written once for the fleet; its members say whom it covers and with which numbers (a burn factor,
    a tier threshold, a limit, a model's `max_num_seqs`), so the generated tests, the runbook and the demo read
    the numbers from here and never from the PromQL text.
    """

    model: str
    request_class: str | None = None
    sli: Sli | None = None
    params: Mapping[str, float] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        """The series labels this member's alerts carry (model, and class and slo where they apply)."""
        labels = {RULE_LABEL_MODEL: self.model}
        if self.request_class is not None:
            labels[RULE_LABEL_CLASS] = self.request_class
        if self.sli is not None:
            labels[RULE_LABEL_SLO] = self.sli.value
        return labels


@dataclass(frozen=True)
class AlertRule:
    """One `alert:` rule plus what the runbook and dashboards need to know about it.

    A rule written for the fleet has `members` (whom it covers) and `condition` (its rule-wide values: windows,
    factors, guards), and no `model`, `request_class` or `sli` of its own. `instances()` gives one copy per member
    with those set and the member's labels merged in: what one (model, class, SLO) sees of the rule, for tests and
    tools that reason about one series at a time.
    """

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
    members: tuple[Member, ...] = ()
    condition: Mapping[str, float | str] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)  # on an instance: its member's values

    def instances(self, models: Collection[str] | None = None) -> list[AlertRule]:
        """One copy of the rule per member (of `models` only, when given), as that member sees it."""
        out = []
        for member in self.members:
            if models is not None and member.model not in models:
                continue
            labels = {**self.labels}
            for key, value in member.labels().items():
                labels.setdefault(key, value)
            out.append(
                dataclasses.replace(
                    self, labels=labels, model=member.model, request_class=member.request_class, sli=member.sli,
                    members=(member,), params=member.params,
                )
            )  # fmt: skip
        return out

    def series_labels(self) -> dict[str, str]:
        """On an instance: the labels that come from the series (model, class, slo), not from the rule."""
        return self.members[0].labels() if len(self.members) == 1 else {}

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
