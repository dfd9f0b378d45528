"""Reading the generated contract back: the demo spec's checks, the page the fault should raise, the alert and
notification fields the contract promises, and the runbook section an alert links to."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from slokit import schema
from slokit.demo.config import CONTRACT_ANNOTATIONS, CONTRACT_LABELS, EXPECTED_KINDS, DemoInputError
from slokit.generate.model import AlertRule, heading_anchor
from slokit.local.webhook import Notification
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec, load_spec
from slokit.units import parse_duration


def load_demo_spec(path: Path) -> Spec:
    """Load a spec and make sure it is a demo spec the story can run on; DemoInputError (or SpecError) if not."""
    spec = load_spec(path)
    if not spec.demo:
        raise DemoInputError(
            f"{path}: not a demo spec (no `demo: true`). The demo shortens windows and `for:` durations so alerts "
            "fire within minutes; a production spec would need hours. Run `slokit demo` without --spec for the "
            "bundled demo spec, or copy it and keep `demo: true`."
        )
    if len(spec.models) != 1:
        raise DemoInputError(f"{path}: models: the demo serves exactly one model, the spec names {len(spec.models)}")
    if demo_class(spec) is None:
        raise DemoInputError(
            f"{path}: classes: the demo needs a class with a ttft SLO (objective or tiers) and a workload, "
            "so the fault has something to degrade"
        )
    return spec


def demo_class(spec: Spec) -> RequestClass | None:
    """The class whose TTFT the fault degrades: the first with a TTFT SLO and a workload."""
    for request_class in spec.classes:
        if Sli.TTFT in request_class.slos and request_class.workload is not None:
            return request_class
    return None


def expected_alerts(rules: Sequence[AlertRule], spec: Spec, class_name: str) -> list[AlertRule]:
    """The alerts the fault must raise: the pages on the demo class's TTFT SLO (tier and burn-rate), fastest
    reacting kinds first. Whichever fires first tells the story; how fast each reacts depends on the machine.

    Raises DemoInputError when the generated alerts contain no such page.
    """
    page = spec.alerting.severity.page
    candidates = [
        rule
        for rule in rules
        if rule.labels.get("severity") == page
        and rule.request_class == class_name
        and rule.sli is Sli.TTFT
        and rule.kind in EXPECTED_KINDS
    ]
    if not candidates:
        raise DemoInputError(
            f"the generated alerts have no page (severity {page!r}) on class {class_name!r}'s ttft; "
            "give the class a ttft objective or a critical tier"
        )
    return sorted(candidates, key=lambda rule: EXPECTED_KINDS.index(rule.kind))


def alert_matches(alert: Mapping[str, Any], rule: AlertRule) -> bool:
    """Whether a Prometheus or Alertmanager alert instance comes from `rule` (same name, its static labels)."""
    labels = alert.get("labels", {})
    if not isinstance(labels, Mapping) or labels.get("alertname") != rule.name:
        return False
    return all(labels.get(key) == value for key, value in rule.labels.items())


def causes(notification: Notification) -> list[Mapping[str, Any]]:
    """The engine alerts a page notification carries as its causes (`cause: engine`)."""
    return [a for a in notification.firing() if a.get("labels", {}).get(schema.RULE_LABEL_CAUSE) == schema.CAUSE_ENGINE]


def group_text(notification: Notification) -> str:
    """`model=tiny-llama, service=demo`: the labels Alertmanager grouped a notification by."""
    group = notification.payload.get("groupLabels", {})
    return ", ".join(f"{k}={v}" for k, v in sorted(group.items())) if isinstance(group, Mapping) else ""


def describe_notification(notification: Notification) -> str:
    """One line for one notification: its path, the group it is for and the names of its firing alerts."""
    where = group_text(notification)
    firing = notification.firing()
    names = ", ".join(
        str(a.get("labels", {}).get("alertname", "?"))
        + (" (cause)" if a.get("labels", {}).get(schema.RULE_LABEL_CAUSE) else "")
        for a in firing
    )
    count = f"{len(firing)} firing alert{'s' if len(firing) != 1 else ''}"
    return f"[{notification.path.strip('/') or '-'}] {notification.status} {where}: {count}" + (
        f": {names}" if names else ""
    )


def contract_gaps(alert: Mapping[str, Any]) -> list[str]:
    """Labels and annotations of the alerting contract that an alert instance lacks (empty when complete)."""
    labels = alert.get("labels", {}) or {}
    annotations = alert.get("annotations", {}) or {}
    missing = [f"label {k}" for k in CONTRACT_LABELS if not labels.get(k)]
    missing += [f"annotation {k}" for k in CONTRACT_ANNOTATIONS if not annotations.get(k)]
    return missing


def alert_name(alert: Mapping[str, Any]) -> str:
    """`Name{severity=..., class=...}` for messages."""
    labels = alert.get("labels", {}) or {}
    keys = [k for k in ("severity", "model", "class", "slo") if k in labels]
    inner = ", ".join(f"{k}={labels[k]}" for k in keys)
    return f"{labels.get('alertname', '?')}{{{inner}}}"


_HEADING: Final = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE: Final = re.compile(r"^```\s*([A-Za-z0-9_-]*)\s*$")


def runbook_section(markdown: str, anchor: str) -> str | None:
    """The Markdown section whose heading's anchor is `anchor`, up to the next heading of the same or higher level."""
    lines = markdown.splitlines()
    in_fence = False
    start: int | None = None
    level = 0
    for index, row in enumerate(lines):
        if _FENCE.match(row.strip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        match = _HEADING.match(row)
        if not match:
            continue
        depth = len(match.group(1))
        if start is not None and depth <= level:
            return "\n".join(lines[start:index]).rstrip() + "\n"
        explicit = re.search(r'<a (?:name|id)="([^"]+)"', row)
        text = re.sub(r"<a [^>]*></a>", "", match.group(2)).strip()
        if start is None and (heading_anchor(text) == anchor or (explicit and explicit.group(1) == anchor)):
            start, level = index, depth
    if start is None:
        return None
    return "\n".join(lines[start:]).rstrip() + "\n"


_GUIDE_LINK: Final = re.compile(r"^\*\*Debug:\*\*\s*\[[^\]]*\]\(#([^)]+)\)", re.MULTILINE)


def linked_guide(markdown: str, section: str) -> str | None:
    """The debugging guide an alert's section links to (`**Debug:** [title](#anchor)`), or None without one."""
    match = _GUIDE_LINK.search(section)
    return runbook_section(markdown, match.group(1)) if match else None


_STEP_ONE: Final = re.compile(r"\bStep 1\b", re.IGNORECASE)
_STEP_TWO: Final = re.compile(r"\bStep 2\b", re.IGNORECASE)


def first_query(section: str) -> str | None:
    """The first query of the section's first step (the first ```promql block after "Step 1"); without a
    "Step 1" marker, the section's first ```promql block. The alert's own expression, shown above the steps, is
    not a step."""
    lines = section.splitlines()
    start = next((i for i, row in enumerate(lines) if _STEP_ONE.search(row) and not row.lstrip().startswith("`")), 0)
    for index in range(start, len(lines)):
        match = _FENCE.match(lines[index].strip())
        if match and match.group(1).lower() in ("promql", "prometheus"):
            body: list[str] = []
            for inner in lines[index + 1 :]:
                if inner.strip().startswith("```"):
                    query = "\n".join(body).strip()
                    return query or None
                body.append(inner)
    return None


def section_excerpt(section: str, max_lines: int = 48) -> str:
    """What fired, what it means, and the first step: the section up to "Step 2" (at most `max_lines` lines)."""
    lines = section.rstrip().splitlines()
    end = next((i for i, row in enumerate(lines) if _STEP_TWO.search(row)), len(lines))
    shown = lines[: min(end, max_lines)]
    while shown and not shown[-1].strip():
        shown.pop()
    rest = len(lines) - len(shown)
    return "\n".join(shown) + (f"\n... ({rest} more lines: the next steps)" if rest else "") + "\n"


def fire_time(alert: Mapping[str, Any], rule: AlertRule) -> float | None:
    """When an alert instance started firing (unix seconds): Prometheus's `activeAt` (start of pending) plus the
    rule's `for:`; None when Prometheus did not say."""

    active = str(alert.get("activeAt", ""))
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", active)
    if not match:
        return None
    fraction = (match.group(2) or ".0")[:7]
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    started = datetime.datetime.fromisoformat(f"{match.group(1)}{fraction}{zone}").timestamp()
    return started + (parse_duration(rule.for_) if rule.for_ else 0.0)
