"""The values an alert holds, as the table of its runbook section: one row per class and SLO (per model only where
a value is a model's), read from the rule's `members` and `condition`, never from its PromQL.

A rule is written once for the fleet; its members say whom it covers and with which numbers. Members whose cells
are equal share a row, whose last column names their models ("all N models" when that is every model of the spec),
so the table grows with the spec's classes and SLOs and with distinct per-model values, not with the fleet's size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from slokit.generate import alerts
from slokit.generate.model import AlertKind, AlertRule, Member
from slokit.generate.runbook.markdown import code_span
from slokit.generate.runbook.model import Table
from slokit.spec import Spec
from slokit.units import format_duration


def percent(ratio: float) -> str:
    """A ratio as a percentage with up to four significant digits: 0.05 -> 5%, 0.72 -> 72%, 0.0013 -> 0.13%."""
    return f"{ratio * 100:.4g}%"


def number(value: float) -> str:
    """A plain number as the runbook quotes a parameter (`:g`, six significant digits: the value the rule holds)."""
    return f"{value:g}"


def models_text(spec: Spec, models: Sequence[str]) -> str:
    """The models of a row: "all N models" when they are every model of the spec, else their names."""
    names = list(dict.fromkeys(models))
    if len(names) > 1 and set(names) == {m.name for m in spec.models}:
        return f"all {len(names)} models"
    return ", ".join(names)


def _objective(member: Member) -> str:
    params = member.params
    return f"{params['objective'] * 100:g}% within {format_duration(params['threshold'])}"


def _class(member: Member) -> str:
    return member.request_class or ""


def _slo(member: Member) -> str:
    return member.sli.value if member.sli is not None else ""


# Per kind: the columns before "Models" and how each member fills them.
Column = tuple[str, Callable[[Member], str]]


_CLASS_SLO: Final[tuple[Column, ...]] = (("Class", _class), ("SLO", _slo))


def _absent_columns(spec: Spec) -> tuple[Column, ...]:
    """The series whose absence the absent and exporter-gone alerts watch, per model (its first SLO histogram)."""
    return (("Series watched", lambda member: code_span(alerts.absent_metric(spec, member.model)[0])),)


def columns(spec: Spec, rule: AlertRule) -> tuple[Column, ...]:
    """The value columns of a rule's table (without "Models"), by the rule's kind."""
    kind = rule.kind
    if kind is AlertKind.BURN_RATE:
        return (
            *_CLASS_SLO,
            ("Objective", _objective),
            ("Burn factor", lambda member: number(member.params["factor"])),
            ("Error share that fires", lambda member: percent(member.params["error_ratio"])),
        )
    if kind is AlertKind.TIER:
        return (
            *_CLASS_SLO,
            ("Threshold", lambda member: format_duration(member.params["seconds"])),
            ("Share that must be within it", lambda member: percent(member.params["quantile"])),
        )
    if kind is AlertKind.SCALE_OUT:
        return (
            *_CLASS_SLO,
            ("Scale-out boundary", lambda member: format_duration(member.params["boundary"])),
            ("Share allowed over the objective's threshold", lambda member: percent(member.params["allowed"])),
        )
    if kind is AlertKind.CONSISTENCY:
        return (*_CLASS_SLO, ("Limit (p99 / p50)", lambda member: number(member.params["limit"])))
    if kind is AlertKind.QUEUE_OVERLOAD:
        return (("max-num-seqs", lambda member: number(member.params["max_num_seqs"])),)
    if kind in (AlertKind.ABSENT, AlertKind.EXPORTER_GONE):
        return _absent_columns(spec)
    if kind is AlertKind.BASELINE:
        return _CLASS_SLO
    return ()


def table(spec: Spec, rule: AlertRule) -> Table:
    """The table of a rule's members: its value columns, then the models of the members that share them."""
    cols = columns(spec, rule)
    rows: dict[tuple[str, ...], list[str]] = {}
    for member in rule.members:
        cells = tuple(fill(member) for _, fill in cols)
        rows.setdefault(cells, []).append(member.model)
    return Table(
        (*(name for name, _ in cols), "Models"),
        tuple((*cells, models_text(spec, models)) for cells, models in rows.items()),
    )


# The rule-wide values of `condition`, as the runbook names them; durations in seconds are spelt as durations.
_CONDITION: Final[Mapping[str, tuple[str, Callable[[float | str], str]]]] = {
    "long": ("long window", lambda v: format_duration(float(v))),
    "short": ("short window", lambda v: format_duration(float(v))),
    "for": ("for", lambda v: format_duration(float(v))),
    "window": ("window", lambda v: format_duration(float(v))),
    "offset": ("baseline offset", lambda v: format_duration(float(v))),
    "tier": ("tier", str),
    "percentile": ("percentile", str),
    "quantile": ("share within the threshold", lambda v: percent(float(v))),
    "min_requests": ("minimum requests in 5m", lambda v: number(float(v))),
    "ratio": ("ratio to the baseline", lambda v: number(float(v))),
    "min_rps": ("minimum requests/s", lambda v: number(float(v))),
    "median_days": ("median over days (under 2: the offset alone)", lambda v: number(float(v))),
    "fraction_of_slo": ("fraction of the TTFT threshold", lambda v: number(float(v))),
    "kv_cache_usage_max": ("KV-cache usage above", lambda v: percent(float(v))),
}


def condition(rule: AlertRule) -> tuple[tuple[str, str], ...]:
    """The rule-wide values (windows, guards, limits) as (name, value) pairs, in the rule's order."""
    out = []
    for key, value in rule.condition.items():
        name, spell = _CONDITION.get(key, (key.replace("_", " "), lambda v: v if isinstance(v, str) else number(v)))
        out.append((name, spell(value)))
    return tuple(out)
