"""Notifications: what an Alertmanager running a given configuration sends for a list of firing intervals.

Backtest counts pages as a person receives them, not as alert series fire: one outage fires a dozen page series
(burn-rate windows, tiers, classes, the engine causes) that the generated configuration
(`slokit.generate.alertmanager`) delivers as one notification. This module replays the firings through that
configuration the way Alertmanager's dispatcher does (dispatch/dispatch.go, dispatch/route.go, inhibit/inhibit.go,
notify/notify.go's DedupStage), reading routes, matchers, `group_by`, `group_wait`, `group_interval`,
`repeat_interval` and `inhibit_rules` from the configuration, never from constants:

* **Routing**: an alert goes down the tree to the first matching child at each level (every matching child with
  `continue: true`), or stays at the deepest route that matched; children inherit the receiver, `group_by` and the
  three timers. `group_by: ['...']` groups by every label.
* **Groups**: one aggregation group per route and value of its `group_by` labels. A group is created by the first
  alert that reaches it and flushed `group_wait` later, then every `group_interval`. After a flush, resolved
  alerts leave it; an empty group is deleted, and the next alert with that key starts a new one (a new
  `group_wait`).
* **Inhibition**: at each flush, an alert is muted while a firing alert matching a rule's source matchers has the
  same values of the rule's `equal` labels (an alert never mutes itself; where an alert matches both sides, sources
  that also match the target side are skipped, as Alertmanager does). Muted alerts are left out of the flush.
* **Deduplication** per group and receiver: a flush sends a notification when a firing alert is not in the last
  one sent (the group's first notification, or new alerts joining), when the last firing alert resolved, when
  resolved alerts are new (`send_resolved`, on by default for the paging integrations: PagerDuty, Opsgenie,
  webhooks), or when `repeat_interval` has passed since the last notification while alerts fire.

A **page** is a notification to the page receiver that opens a group or adds alerts to it, or a repeat; a
notification that only reports resolved alerts wakes no one and is not counted (it is kept, `kind: "resolved"`).
Alerts arrive at the evaluation they start firing and resolve at the one they stop (Prometheus sends at once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from slokit.units import parse_duration

# Alertmanager's defaults for the route tree's timers (config/config.go, DefaultRouteOpts).
DEFAULT_GROUP_WAIT: Final = 30.0
DEFAULT_GROUP_INTERVAL: Final = 300.0
DEFAULT_REPEAT_INTERVAL: Final = 4 * 3600.0
_MATCHER: Final = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


class Interval:
    """One firing interval of one alert series, as Alertmanager receives it: labels, [start, end)."""

    __slots__ = ("active_at", "end", "fingerprint", "labels", "start")

    def __init__(self, labels: Mapping[str, str], start: float, end: float, active_at: float) -> None:
        self.labels = dict(labels)
        self.fingerprint = json.dumps(self.labels, sort_keys=True)
        self.start = start
        self.end = end
        self.active_at = active_at

    def firing(self, t: float) -> bool:
        """Firing at `t`."""
        return self.start <= t < self.end


@dataclass(frozen=True)
class Matcher:
    """`label op "value"` as Alertmanager parses it."""

    label: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """`service="x"`, `alertname=~"A|B"`, `severity!=warning`; raise ValueError otherwise."""
        found = _MATCHER.match(text)
        if found is None:
            raise ValueError(f"not an Alertmanager matcher: {text!r}")
        label, op, value = found.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value[1:-1])
        return cls(label, op, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether the label set matches (a missing label is the empty string)."""
        have = labels.get(self.label, "")
        if self.op in ("=", "!="):
            return (have == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, have) is not None) == (self.op == "=~")


def _matchers(node: Mapping[str, Any], key: str = "matchers") -> tuple[Matcher, ...]:
    out = [Matcher.parse(str(m)) for m in node.get(key) or ()]
    prefix = key.removesuffix("matchers")  # `match` / `match_re` (the older form), `source_match`, ...
    out += [Matcher(str(k), "=", str(v)) for k, v in (node.get(prefix + "match") or {}).items()]
    out += [Matcher(str(k), "=~", str(v)) for k, v in (node.get(prefix + "match_re") or {}).items()]
    return tuple(out)


@dataclass(frozen=True)
class Route:
    """One node of the route tree with its inherited options."""

    path: str  # where it is in the tree, e.g. `0.1`: the group key's prefix
    receiver: str
    matchers: tuple[Matcher, ...]
    group_by: tuple[str, ...] | None  # None: `...`, every label
    group_wait: float
    group_interval: float
    repeat_interval: float
    continue_: bool
    routes: tuple[Route, ...] = ()

    @classmethod
    def parse(cls, node: Mapping[str, Any], parent: Route | None = None, path: str = "") -> Route:
        """A route and its children from the configuration's `route:` mapping."""

        def timer(key: str, default: float, inherited: float | None) -> float:
            value = node.get(key)
            return (
                parse_duration(str(value)) if value is not None else (inherited if inherited is not None else default)
            )

        group_by: tuple[str, ...] | None
        if "group_by" in node:
            labels = tuple(str(x) for x in node["group_by"] or ())
            group_by = None if "..." in labels else labels
        else:
            group_by = parent.group_by if parent is not None else ()
        route = cls(
            path=path or "root",
            receiver=str(node.get("receiver") or (parent.receiver if parent else "")),
            matchers=_matchers(node),
            group_by=group_by,
            group_wait=timer("group_wait", DEFAULT_GROUP_WAIT, parent.group_wait if parent else None),
            group_interval=timer("group_interval", DEFAULT_GROUP_INTERVAL, parent.group_interval if parent else None),
            repeat_interval=timer(
                "repeat_interval", DEFAULT_REPEAT_INTERVAL, parent.repeat_interval if parent else None
            ),
            continue_=bool(node.get("continue", False)),
        )
        children = tuple(
            cls.parse(child, route, f"{route.path}.{i}") for i, child in enumerate(node.get("routes") or ())
        )
        return Route(**{**route.__dict__, "routes": children})

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        """The routes an alert is delivered to (dispatch/route.go, Route.Match)."""
        if not all(m.matches(labels) for m in self.matchers):
            return []
        found: list[Route] = []
        for child in self.routes:
            got = child.match(labels)
            if got:
                found.extend(got)
                if not child.continue_:
                    break
        return found or [self]

    def group_key(self, labels: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The aggregation group an alert joins on this route."""
        names = sorted(labels) if self.group_by is None else self.group_by
        return self.path, tuple((n, labels.get(n, "")) for n in names)


@dataclass(frozen=True)
class InhibitRule:
    """One `inhibit_rules` entry."""

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    @classmethod
    def parse(cls, node: Mapping[str, Any]) -> InhibitRule:
        """From the configuration's mapping (`source_matchers` or the older `source_match`/`source_match_re`)."""
        return cls(_matchers(node, "source_matchers"), _matchers(node, "target_matchers"),
                   tuple(str(x) for x in node.get("equal") or ()))  # fmt: skip


@dataclass(frozen=True)
class Notification:
    """One notification a group's flush sent."""

    receiver: str
    group: Mapping[str, str]  # the group's labels (its `group_by` values)
    time: float
    kind: str  # "first" (opens the group), "new alerts", "repeat", "resolved" (only resolutions)
    firing: tuple[Mapping[str, str], ...]  # the firing alerts it carries
    new: tuple[Mapping[str, str], ...]  # the firing alerts the previous notification did not carry

    @property
    def wakes(self) -> bool:
        """Whether it reaches a person as a new page or ticket (not a resolution)."""
        return self.kind != "resolved"

    def to_data(self) -> dict[str, Any]:
        """backtest.json form."""
        return {"receiver": self.receiver, "group": dict(self.group), "time": self.time, "kind": self.kind,
                "firing": len(self.firing), "new": [dict(a) for a in self.new]}  # fmt: skip


@dataclass
class _Inhibitor:
    """Firing intervals of each rule's sources, by the values of its `equal` labels."""

    rules: Sequence[InhibitRule]
    sources: list[dict[tuple[str, ...], list[Interval]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sources = [{} for _ in self.rules]

    def add(self, interval: Interval) -> None:
        for rule, index in zip(self.rules, self.sources, strict=True):
            if all(m.matches(interval.labels) for m in rule.source):
                index.setdefault(tuple(interval.labels.get(n, "") for n in rule.equal), []).append(interval)

    def muted(self, alert: Interval, t: float) -> bool:
        """inhibit/inhibit.go, Inhibitor.Mutes, at time t."""
        for rule, index in zip(self.rules, self.sources, strict=True):
            if not all(m.matches(alert.labels) for m in rule.target):
                continue
            two_sided = all(m.matches(alert.labels) for m in rule.source)
            for source in index.get(tuple(alert.labels.get(n, "") for n in rule.equal), ()):
                if source.fingerprint == alert.fingerprint or not source.firing(t):
                    continue
                if two_sided and all(m.matches(source.labels) for m in rule.target):
                    continue
                return True
        return False


@dataclass(frozen=True)
class AlertmanagerModel:
    """A parsed configuration: the route tree and the inhibit rules."""

    route: Route
    inhibit: tuple[InhibitRule, ...]
    send_resolved: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any], send_resolved: bool = True) -> AlertmanagerModel:
        """From an Alertmanager configuration as data (the generated one, or a team's merged one)."""
        return cls(Route.parse(config.get("route") or {}),
                   tuple(InhibitRule.parse(r) for r in config.get("inhibit_rules") or ()), send_resolved)  # fmt: skip

    def notifications(self, alerts: Iterable[Sequence[Any]]) -> list[Notification]:
        """Every notification sent for firing intervals `(labels, start, end)` or `(labels, start, end, active_at)`
        (`active_at`: when the alert became pending, Prometheus's `startsAt`; default `start`), by time."""
        intervals = [Interval(a[0], a[1], a[2], a[3] if len(a) > 3 else a[1]) for a in alerts if a[2] > a[1]]
        inhibitor = _Inhibitor(self.inhibit)
        groups: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Route, list[Interval]]] = {}
        for interval in intervals:
            inhibitor.add(interval)
            for route in self.route.match(interval.labels):
                groups.setdefault(route.group_key(interval.labels), (route, []))[1].append(interval)
        out: list[Notification] = []
        for (_, key), (route, members) in groups.items():
            out.extend(self._group(route, dict(key), members, inhibitor))
        return sorted(out, key=lambda n: (n.time, n.receiver, json.dumps(dict(n.group), sort_keys=True)))

    def _group(self, route: Route, key: Mapping[str, str], members: list[Interval],
               inhibitor: _Inhibitor) -> list[Notification]:  # fmt: skip
        """One aggregation key's life: groups created, flushed, deleted, created again (dispatch.go's aggrGroup)."""
        members.sort(key=lambda i: i.start)
        out: list[Notification] = []
        log: _Log | None = None  # the notification log's entry for this group and receiver (outlives the group)
        nxt = 0  # next member not yet arrived
        while nxt < len(members):
            created = members[nxt].start
            flush = created + route.group_wait
            inside: list[Interval] = []  # alerts in the group (firing, or resolved and not yet flushed)
            flushed = False
            while True:
                while nxt < len(members) and members[nxt].start <= flush:
                    arriving = members[nxt]
                    inside.append(arriving)
                    nxt += 1
                    # An alert older than group_wait (pending for longer: `for`) flushes a new group at once.
                    if not flushed and arriving.active_at + route.group_wait < arriving.start:
                        flush = max(created, arriving.start)
                live = [a for a in inside if not inhibitor.muted(a, flush)]
                if live:  # a flush whose every alert is muted stops before the notification log
                    firing = {a.fingerprint: a for a in live if a.firing(flush)}
                    resolved = {a.fingerprint for a in live if a.end <= flush} - set(firing)
                    kind = self._needs_update(log, set(firing), resolved, flush, route.repeat_interval)
                    if kind is not None:
                        before = log.firing if log is not None else set()
                        new = tuple(firing[f].labels for f in sorted(set(firing) - before))
                        out.append(Notification(route.receiver, key, flush, kind,
                                                tuple(a.labels for a in firing.values()), new))  # fmt: skip
                        log = _Log(set(firing), resolved, flush)
                flushed = True
                inside = [a for a in inside if a.end > flush]  # resolved alerts leave after the flush
                if not inside:
                    break  # empty: the group is deleted; the next alert starts a new one
                flush += route.group_interval
        return out

    def _needs_update(self, log: _Log | None, firing: set[str], resolved: set[str], now: float,
                      repeat: float) -> str | None:  # fmt: skip
        """notify/notify.go, DedupStage.needsUpdate, and why: None when nothing is sent."""
        if log is None:
            return "first" if firing else None
        if not firing <= log.firing:
            return "new alerts" if log.firing else "first"
        if not firing:
            return "resolved" if log.firing else None
        if self.send_resolved and not resolved <= log.resolved:
            return "resolved"
        if log.time <= now - repeat:
            return "repeat"
        return None


@dataclass(frozen=True)
class _Log:
    """A notification log entry: the firing and resolved alerts of the last notification sent, and when."""

    firing: set[str]
    resolved: set[str]
    time: float
