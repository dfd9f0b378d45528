"""Mutation check of the generated promtool tests: break the generated rules on purpose, see the tests fail.

Each mutant is the spec's rule file with one change a plausible bug would make: a numeric literal scaled (a burn
factor, a tier share, a min_requests guard, a quantile), a range or offset halved, doubled or dropped (tiling,
windows, the baseline's offset), a comparison turned round (or a strict comparison against an integer made
non-strict: counts can sit exactly on it), `+`/`-` or `*`/`/` swapped, a label matcher negated or dropped wherever
the rule has it, a label taken out of a grouping list, an aggregation or a function replaced by its neighbour, an
`and`/`unless`/`or` operand dropped, a recording rule deleted, an alert's `for` or `keep_firing_for` changed, an
`le` bound moved to the neighbouring bucket. Changes that are provably the same rule for the spec are not made
(constant_labels, _matchers).

A mutant is *killed* when `promtool test rules` fails on the spec's own generated tests run against it; one that
`promtool check rules` refuses is *invalid* (counted apart: it would never load, so no test is needed to catch it).
Strict/non-strict swaps against non-integer thresholds are not generated: on continuous inputs they are
equivalent mutants that no finite test can tell apart.

Each mutant belongs to alert families (`FAMILY_OF_KIND`): an alert's own, or for a recording rule every family
whose alerts read the record (through other records, label by label), and the budget family where the error budget
record reads it. Mutants nothing of those reads (dashboard-only records) are left out. The sample is uniform and
deterministic for a seed, so families are in it by their share; the report gives each score a 95% interval.

Pure functions build and sample mutants; `run_mutants` runs them (promtool, two workers, a time limit each). A
mutant runs only the test groups that can see it: those with a check (an alert, or a PromQL expression) that reads
a series the mutated rule writes, directly or through the rules that read it (`affected_names`). A group that
reads none of them evaluates the same values with or without the mutant, so it cannot fail on it.
"""

from __future__ import annotations

import math
import random
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from slokit import schema
from slokit.generate.model import AlertKind, AlertRule, RecordingRule, RuleGroup
from slokit.promql import le_matcher, number, quote
from slokit.spec import Spec
from slokit.units import parse_duration, prom_duration

FAMILY_OF_KIND: Final[Mapping[AlertKind, str]] = {
    AlertKind.BURN_RATE: "burn rate",
    AlertKind.TIER: "tiers",
    AlertKind.BASELINE: "baseline",
    AlertKind.SCALE_OUT: "scale-out",
    AlertKind.CONSISTENCY: "consistency",
    AlertKind.QUEUE_OVERLOAD: "engine",
    AlertKind.KV_CACHE: "engine",
    AlertKind.ABSENT: "absent",
    AlertKind.EXPORTER_GONE: "absent",
}
# The error budget (the SLO window's records, which the report and the dashboards read) is checked by the generated
# tests like an alert, and its records are mutated like an alert's.
BUDGET_FAMILY: Final = "budget"
FAMILIES: Final = (*dict.fromkeys(FAMILY_OF_KIND.values()), BUDGET_FAMILY)
OVERALL: Final = "overall"
SCALE: Final = 0.25  # numeric literals are scaled by 1 +- SCALE (0 becomes 1)
DEFAULT_SEED: Final = 16
DEFAULT_WORKERS: Final = 2
DEFAULT_TIMEOUT_S: Final = 180.0


@dataclass(frozen=True)
class Mutant:
    """One change to one rule of the spec's rule groups."""

    index: int  # position in the full, unsampled list
    operator: str  # number, range, offset, comparison, clause, delete, for, keep_firing_for, le
    group: int
    rule: int
    rule_name: str
    description: str
    families: frozenset[str]
    replacement: dict[str, Any] | None  # the rule's new rule-file form; None deletes it


@dataclass
class Outcome:
    """What promtool said of one mutant."""

    mutant: Mutant
    status: str  # killed, survived, invalid, timeout
    seconds: float
    output: str = ""


Z_95: Final = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson_interval(killed: int, valid: int, population: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a kill share from `killed` of `valid` mutants drawn without replacement from a
    set of `population`: the finite-population correction narrows it, to the point itself when every mutant ran.

    Wilson's interval, not the normal one: scores sit near 1, where the normal interval runs past 1 and shrinks to
    nothing when every sampled mutant is killed."""
    if valid <= 0:
        return (0.0, 1.0)
    share = killed / valid
    if population <= valid:
        return (share, share)
    n = valid * (population - 1) / (population - valid)  # the sample size the correction is worth
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Report:
    """Kill counts per family and overall, with the sizes of the sets the sample was drawn from.

    The sample is uniform over the mutants (of one family, with `family`), so each family's mutants are in it in
    proportion to their share and the overall score estimates the whole set's, weighted by share."""

    outcomes: list[Outcome] = field(default_factory=list)
    baseline_ok: bool = True
    baseline_output: str = ""
    population: dict[str, int] = field(default_factory=dict)  # family (OVERALL: all) -> mutants the spec has
    family: str | None = None  # the family the sample was drawn from; None: every mutant

    def counts(self, family: str | None = None) -> dict[str, int]:
        """killed/survived/invalid/timeout counts of the mutants of `family` (None: all)."""
        out = {"killed": 0, "survived": 0, "invalid": 0, "timeout": 0}
        for o in self.outcomes:
            if family is None or family in o.mutant.families:
                out[o.status] += 1
        return out

    def score(self, family: str | None = None) -> float | None:
        """Killed over valid mutants (killed + survived + timed out); None when there are none."""
        c = self.counts(family)
        valid = c["killed"] + c["survived"] + c["timeout"]
        return c["killed"] / valid if valid else None

    def interval(self, family: str | None = None) -> tuple[float, float] | None:
        """The 95% interval of `family`'s score over all its mutants (None: overall), from this sample; None when
        the sample has no valid mutant of it. Invalid mutants are assumed as common in the set as in the sample."""
        c = self.counts(family)
        valid = c["killed"] + c["survived"] + c["timeout"]
        if not valid:
            return None
        sampled = valid + c["invalid"]
        size = self.population.get(family or OVERALL, sampled)
        return wilson_interval(c["killed"], valid, max(valid, round(size * valid / sampled)))

    def rows(self) -> list[str | None]:
        """The families the table reports (None: overall). A sample drawn from one family reports that family
        alone: the other families its mutants belong to are not uniform samples of theirs."""
        if self.family is not None:
            return [self.family]
        return [f for f in FAMILIES if any(self.counts(f).values())] + [None]

    def table(self) -> str:
        """A plain-text table: one row per family that has mutants, then overall."""
        rows: list[tuple[str, ...]] = [
            ("family", "mutants", "run", "killed", "survived", "timeout", "invalid", "score", "95% interval")
        ]
        for family in self.rows():
            c = self.counts(family)
            s, ci = self.score(family), self.interval(family)
            counted = [str(c[k]) for k in ("killed", "survived", "timeout", "invalid")]
            shown = ["-" if s is None else f"{s:.1%}", "-" if ci is None else f"{ci[0]:.1%} to {ci[1]:.1%}"]
            name = family or OVERALL
            rows.append((name, str(self.population.get(name, "-")), str(sum(c.values())), *counted, *shown))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)

    def survivors(self) -> list[Mutant]:
        """The mutants the tests did not kill."""
        return [o.mutant for o in self.outcomes if o.status == "survived"]


# ==============================================================================================================
# Expression scanning
# ==============================================================================================================
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER = re.compile(r"(?<![\w.:\"])(\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w.:])")
_RANGE = re.compile(r"\[(\d+[smhdwy][\dsmhdwy]*)(?::[^\]]*)?\]")
_OFFSET = re.compile(r"\s+offset\s+(\d+[smhdwy][\dsmhdwy]*)")
_COMPARISON = re.compile(r"(>=|<=|==|!=|>|<)")
_SET_OP = re.compile(r"\b(and|or|unless)\b")
_LE = re.compile(r'(?<![\w])le(=~|=)"((?:[^"\\]|\\.)*)"')  # the `le` label, not the end of `quantile`
_SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?")
_EQ = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_NAME_OF_EVERYTHING: Final = "__name__"
_SERVICE_LABELS: Final = frozenset({schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_COUNTER_SERVICE})
_KEYWORDS: Final = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                              "group_left", "group_right", "inf", "nan", "Inf", "NaN"})  # fmt: skip


def _masked(expr: str) -> str:
    """`expr` with quoted strings and `{...}` matcher sets blanked (same length), for operator scanning."""
    out = _QUOTED.sub(lambda m: " " * len(m.group(0)), expr)
    return re.sub(r"\{[^}]*\}", lambda m: " " * len(m.group(0)), out)


def _depths(masked: str) -> list[int]:
    """Paren/bracket depth at each character."""
    depth, out = 0, []
    for ch in masked:
        if ch in "([":
            out.append(depth)
            depth += 1
        elif ch in ")]":
            depth -= 1
            out.append(depth)
        else:
            out.append(depth)
    return out


def _precedence(op: str) -> int:
    return 1 if op == "or" else 2


def _set_ops(expr: str) -> list[tuple[int, int, str, int]]:
    """(start, end, op, depth) of every set operator outside strings and matchers."""
    masked = _masked(expr)
    depths = _depths(masked)
    return [(m.start(), m.end(), m.group(1), depths[m.start()]) for m in _SET_OP.finditer(masked)]


def _operand_end(expr: str, op_end: int, depth: int, precedence: int) -> int:
    """Where the right operand of a set operator ends: the next operator of no higher precedence at its depth,
    the paren that closes its depth, or the end."""
    masked = _masked(expr)
    depths = _depths(masked)
    for start, _, op, d in _set_ops(expr):
        if start > op_end and d == depth and _precedence(op) <= precedence:
            return start
    for i in range(op_end, len(masked)):
        if masked[i] in ")]" and depths[i] < depth:
            return i
    return len(expr)


def _operand_start(expr: str, op_start: int, depth: int, precedence: int) -> int:
    """Where the left operand of a set operator starts (mirror of `_operand_end`)."""
    masked = _masked(expr)
    depths = _depths(masked)
    best = 0
    for _, end, op, d in _set_ops(expr):
        if end <= op_start and d == depth and _precedence(op) <= precedence:
            best = max(best, end)
    for i in range(op_start - 1, best - 1, -1):
        if masked[i] in "([" and depths[i] < depth:
            return i + 1
    return best


def _tidy(expr: str) -> str:
    return re.sub(r"\n\s*\n", "\n", expr).strip()


def _scaled(value: float) -> list[float]:
    if value == 0:
        return [1.0]
    return [float(f"{value * (1 + SCALE):.6g}"), float(f"{value * (1 - SCALE):.6g}")]


def _durations(text: str) -> list[str]:
    seconds = parse_duration(text)
    return [prom_duration(seconds * 2), prom_duration(max(seconds / 2, 1))]


def _buckets_for(spec: Spec, expr: str, position: int) -> list[float]:
    """The bucket bounds of the histogram an `le` matcher at `position` selects (by the selector's metric name
    and its class/slo matchers), or the union of every histogram's bounds."""
    start = expr.rfind("{", 0, position)
    head = re.search(r"([a-zA-Z_:][\w:]*)\s*$", expr[:start]) if start >= 0 else None
    name = head.group(1) if head else ""
    end = expr.find("}", position)
    labels = dict(_EQ.findall(expr[start:end])) if start >= 0 else {}
    found: set[float] = set()
    for rc in spec.classes:
        if "class" in labels and labels["class"] != rc.name:
            continue
        for sli in rc.slos:
            if "slo" in labels and labels["slo"] != sli.value:
                continue
            hist = spec.histogram(rc, sli)
            if name.endswith("_bucket") and name != f"{hist.name}_bucket":
                continue
            found.update(spec.histogram_buckets(rc, sli))
    if not found:
        found = {b for rc in spec.classes for sli in rc.slos for b in spec.histogram_buckets(rc, sli)}
    return sorted(found)


def _le_value(op: str, text: str) -> float | None:
    raw = text.split("|")[0].replace("\\\\", "\\").replace("\\.", ".") if op == "=~" else text
    try:
        return float(raw)
    except ValueError:
        return None


def _le_text(seconds: float) -> str:
    label, op, value = le_matcher(seconds)
    return f"{label}{op}{quote(value)}"


def expr_mutations(
    expr: str, spec: Spec, parameters: Mapping[str, Sequence[Mapping[str, str]]] = {}
) -> Iterator[tuple[str, str, str]]:  # fmt: skip
    """(operator, description, new expr) for every mutation site of one expression (`parameters`: _matchers)."""
    masked = _masked(expr)
    for m in _NUMBER.finditer(masked):
        value = float(m.group(1))
        for scaled in _scaled(value):
            text = number(scaled)
            yield "number", f"{m.group(1)} -> {text}", expr[: m.start()] + text + expr[m.end() :]
    for m in _RANGE.finditer(masked):
        s, e = m.span(1)
        for duration in _durations(m.group(1)):
            yield "range", f"[{m.group(1)}] -> [{duration}]", expr[:s] + duration + expr[e:]
    for m in _OFFSET.finditer(masked):
        s, e = m.span(1)
        for duration in _durations(m.group(1)):
            yield "offset", f"offset {m.group(1)} -> offset {duration}", expr[:s] + duration + expr[e:]
        yield "offset", f"offset {m.group(1)} dropped", expr[: m.start()] + expr[m.end() :]
    for m in _COMPARISON.finditer(masked):
        op = m.group(1)
        rest = masked[m.end() :].lstrip()
        integer = re.match(r"\d+(?![\w.])", rest) is not None
        swaps = {">": ["<"], "<": [">"], ">=": ["<"], "<=": [">"], "==": ["!="], "!=": ["=="]}[op]
        if integer:
            swaps += {">": [">="], ">=": [">"], "<": ["<="], "<=": ["<"]}.get(op, [])
        for swap in swaps:
            yield "comparison", f"{op} -> {swap}", expr[: m.start()] + swap + expr[m.end() :]
    for start, end, op, depth in _set_ops(expr):
        p = _precedence(op)
        stop = _operand_end(expr, end, depth, p)
        right = " ".join(expr[start:stop].split())
        yield "clause", f"dropped `{right[:80]}`", _tidy(expr[:start] + expr[stop:])
        if op == "or":
            begin = _operand_start(expr, start, depth, p)
            left = " ".join(expr[begin:start].split())
            yield "clause", f"dropped `{left[:80]} or`", _tidy(expr[:begin] + expr[end:])
    constant = constant_labels(spec)
    yield from _arithmetic(expr)
    yield from _matchers(expr, constant, parameters)
    yield from _groupings(masked, expr, constant)
    yield from _calls(masked, expr)
    for m in _LE.finditer(expr):
        bound = _le_value(m.group(1), m.group(2))
        if bound is None:
            continue
        bounds = _buckets_for(spec, expr, m.start())
        neighbours = [b for b in bounds if b < bound - 1e-12][-1:] + [b for b in bounds if b > bound + 1e-12][:1]
        for new in neighbours:
            text = _le_text(new)
            yield "le", f"{m.group(0)} -> {text}", expr[: m.start()] + text + expr[m.end() :]


_ARITHMETIC_SWAP: Final = {"+": "-", "-": "+", "*": "/", "/": "*"}
_EXPONENT: Final = re.compile(r"\d(?:\.\d+)?e$")
_MATCHER: Final = re.compile(r'\s*,?\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')
_MATCHER_SWAP: Final = {"=": "!=", "!=": "=", "=~": "!~", "!~": "=~"}
_GROUPING: Final = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_AGGREGATION: Final = re.compile(r"\b(sum|min|max|avg|count)\b(?=\s*(?:\(|by\b|without\b))")
_AGGREGATION_SWAP: Final = {"sum": "max", "max": "min", "min": "max", "avg": "max", "count": "sum"}
_CALL: Final = re.compile(r"\b([a-z_]+)(?=\s*\()")
# A function replaced by its nearest neighbour: a bug of the kind a hand-written rule has (rate for increase, the
# wrong end of a range, the other clamp).
_FUNCTION_SWAP: Final = {
    "rate": "increase", "increase": "rate", "irate": "rate", "deriv": "rate",
    "max_over_time": "min_over_time", "min_over_time": "max_over_time", "avg_over_time": "max_over_time",
    "last_over_time": "max_over_time", "sum_over_time": "max_over_time", "count_over_time": "present_over_time",
    "present_over_time": "count_over_time", "clamp_min": "clamp_max", "clamp_max": "clamp_min",
    "ceil": "floor", "floor": "ceil",
}  # fmt: skip


def constant_labels(spec: Spec) -> frozenset[str]:
    """The recorded labels that take one value in everything the spec's rules write: `model` where the spec has
    one model, `class` where it has one class, `slo` where every class has the same one SLI, and a deployment
    scope label every model pins to the same value (`namespace` where every model runs in one).

    Matching `on` such a label, or selecting a recorded series by it, is the same as not: those mutants are
    equivalent for the spec (no test can tell them apart) and are not made. `service` is never among them: other
    services' records share the Prometheus (the generated tests write a neighbour's). Raw series are not
    recorded series: another model in the same namespace is as real as a neighbour service."""
    slis = {sli for rc in spec.classes for sli in rc.slos}
    counts = {schema.RULE_LABEL_MODEL: len(spec.models), schema.RULE_LABEL_CLASS: len(spec.classes),
              schema.RULE_LABEL_SLO: len(slis)}  # fmt: skip
    scopes = [dict(m.selector) for m in spec.models] or [dict(spec.selector)]
    shared = {k for k, v in scopes[0].items() if all(scope.get(k) == v for scope in scopes)}
    return frozenset({label for label, n in counts.items() if n == 1} | shared)


def _arithmetic(expr: str) -> Iterator[tuple[str, str, str]]:
    """`+`/`-` and `*`/`/` swapped: binary operators only (not a sign, not a number's exponent), outside strings,
    matchers and ranges."""
    masked = re.sub(r"\[[^\]]*\]", lambda m: " " * len(m.group(0)), _masked(expr))
    for i, ch in enumerate(masked):
        if ch not in _ARITHMETIC_SWAP:
            continue
        before = expr[:i].rstrip()
        if not before or not (before[-1] in ')]}"_' or before[-1].isalnum()):
            continue  # a sign, or after another operator
        if ch in "+-" and _EXPONENT.search(before):
            continue
        yield "arithmetic", f"{ch} -> {_ARITHMETIC_SWAP[ch]}", expr[:i] + _ARITHMETIC_SWAP[ch] + expr[i + 1 :]


def _picks(written: Sequence[Mapping[str, str]], matchers: Mapping[str, str]) -> list[int]:
    """Which of a parameter record's series (their labels, in rule order) equality `matchers` select."""
    return [i for i, labels in enumerate(written) if all(labels.get(k, "") == v for k, v in matchers.items())]


def _matchers(
    expr: str, constant: frozenset[str] = frozenset(), parameters: Mapping[str, Sequence[Mapping[str, str]]] = {}
) -> Iterator[tuple[str, str, str]]:  # fmt: skip
    """Each distinct label matcher negated, and dropped, wherever the expression has it: the bug of a rule that
    selects the wrong scope, or forgot one (`le`, which the `le` operator moves, and `__name__` left alone).

    Wherever it is, not at one place: a rule repeats its selectors (a tile reads each counter four times, joined
    by binary operators that match each term to the others), so one copy without its matcher is filtered again
    by the others and changes nothing, while a rule written without the matcher reads the other scope throughout.
    Not dropped where that is provably the same: a matcher of a `constant` label on a recorded series
    (constant_labels), and one of a parameter series (`parameters`: record name -> each of its series' labels,
    all written as constants) whose other matchers select the same series without it (a burn factor's `long`
    beside its `short`)."""
    blanked = _QUOTED.sub(lambda m: " " * len(m.group(0)), expr)
    places: dict[tuple[str, str, str], list[tuple[int, int, int, int, bool]]] = {}
    for braces in re.finditer(r"\{[^}]*\}", blanked):
        head = re.search(r"([a-zA-Z_:][\w:]*)\s*$", blanked[: braces.start()])
        name = head.group(1) if head is not None else ""
        inside_start = braces.start() + 1
        inside = expr[inside_start : braces.end() - 1]
        pinned = dict(_EQ.findall(inside))
        written = parameters.get(name, ())
        for m in _MATCHER.finditer(inside):
            label, op, value = m.groups()
            if label in ("le", _NAME_OF_EVERYTHING):
                continue
            # the whole matcher with its comma: the one before it, or for the first the one after it
            s, e = inside_start + m.start(), inside_start + m.end()
            if not expr[s:e].lstrip().startswith(","):
                comma = re.match(r"\s*,", expr[e:])
                e += comma.end() if comma else 0
            # (never `service`: what it keeps out is another service's parameters, which this file does not write)
            others = {k: v for k, v in pinned.items() if k != label}
            same = (":" in name and label in constant) or (
                bool(written) and label not in _SERVICE_LABELS and _picks(written, pinned) == _picks(written, others)
            )
            op_at = inside_start + m.start(2)
            places.setdefault((label, op, value), []).append((s, e, op_at, op_at + len(op), same))
    for (label, op, value), spans in places.items():
        negated = expr
        for _, _, s, e, _ in sorted(spans, reverse=True):
            negated = negated[:s] + _MATCHER_SWAP[op] + negated[e:]
        yield "matcher", f"{label}{op}{value} -> {label}{_MATCHER_SWAP[op]}{value}", negated
        kept = [span for span in spans if not span[4]]
        if not kept:
            continue
        dropped = expr
        for s, e, _, _, _ in sorted(kept, reverse=True):
            dropped = dropped[:s] + dropped[e:]
        yield "matcher", f"{label}{op}{value} dropped", dropped


def _pinned_throughout(expr: str, label: str) -> bool:
    """Whether every selector of `expr` pins `label` to one and the same value: then both sides of any binary
    operator in it have that value, and matching `on` the label or not is the same."""
    stripped = _QUOTED.sub(lambda m: '"' + "x" * (len(m.group(0)) - 2) + '"', expr)
    stripped = _GROUPING.sub(lambda m: " " * len(m.group(0)), stripped)
    stripped = re.sub(r"\b\d[\w.]*", lambda m: " " * len(m.group(0)), stripped)  # numbers and durations
    values = set()
    for m in _SELECTOR.finditer(stripped):
        if m.group(2) is None:
            if m.group(1) in _KEYWORDS or expr[m.end() :].lstrip().startswith("("):
                continue  # a keyword, a function or an aggregation, not a selector
            return False
        pinned = dict(_EQ.findall(expr[m.start(2) : m.end(2)]))
        if label not in pinned:
            return False
        values.add(pinned[label])
    return len(values) == 1


def _groupings(masked: str, expr: str, constant: frozenset[str] = frozenset()) -> Iterator[tuple[str, str, str]]:
    """One label taken out of a `by`, `without`, `on`, `ignoring` or `group_left`/`group_right` list; a `constant`
    label is left in an `on` list (constant_labels)."""
    for m in _GROUPING.finditer(masked):
        labels = [label.strip() for label in m.group(2).split(",") if label.strip()]
        for label in labels:
            if m.group(1) == "on" and (label in constant or _pinned_throughout(expr, label)):
                continue
            kept = ", ".join(x for x in labels if x != label)
            s, e = m.span(2)
            yield "grouping", f"{m.group(1)} ({', '.join(labels)}) -> {m.group(1)} ({kept})", expr[:s] + kept + expr[e:]


def _calls(masked: str, expr: str) -> Iterator[tuple[str, str, str]]:
    """Aggregations and functions replaced by their neighbours (_AGGREGATION_SWAP, _FUNCTION_SWAP)."""
    for m in _AGGREGATION.finditer(masked):
        new = _AGGREGATION_SWAP[m.group(1)]
        yield "aggregation", f"{m.group(1)} -> {new}", expr[: m.start()] + new + expr[m.end() :]
    for m in _CALL.finditer(masked):
        new = _FUNCTION_SWAP.get(m.group(1), "")
        if new:
            yield "function", f"{m.group(1)}() -> {new}()", expr[: m.start()] + new + expr[m.end() :]


def _duration_changes(text: str) -> list[tuple[str, str]]:
    if text in ("", "0s"):
        return []
    seconds = parse_duration(text)
    out = [("", "dropped"), (prom_duration(seconds * 2), "doubled")]
    if seconds >= 2:
        out.append((prom_duration(seconds / 2), "halved"))
    return out


def rule_mutations(
    rule: RecordingRule | AlertRule, spec: Spec, parameters: Mapping[str, Sequence[Mapping[str, str]]] = {}
) -> Iterator[tuple[str, str, dict[str, Any] | None]]:  # fmt: skip
    """(operator, description, replacement rule data or None to delete) for one rule."""
    data = rule.to_data()
    for operator, description, expr in expr_mutations(rule.expr, spec, parameters):
        if expr != rule.expr:
            yield operator, description, {**data, "expr": expr}
    if isinstance(rule, RecordingRule):
        yield "delete", "recording rule deleted", None
        return
    for key, value in (("for", rule.for_), ("keep_firing_for", rule.keep_firing_for)):
        for new, how in _duration_changes(value):
            changed = {k: v for k, v in data.items() if k != key}
            if new:
                changed = {**data, key: new}
            yield key, f"{key} {value} {how}", changed


# ==============================================================================================================
# Families: which alerts read which recording rule
# ==============================================================================================================
def _references(expr: str, names: set[str]) -> list[tuple[str, dict[str, str]]]:
    """(record name, equality matchers) of every selector of a recorded series in `expr`."""
    out = []
    stripped = _QUOTED.sub(lambda m: '"' + "x" * (len(m.group(0)) - 2) + '"', expr)
    for m in _SELECTOR.finditer(stripped):
        if m.group(1) in names:
            braces = expr[m.start(2) : m.end(2)] if m.group(2) else ""
            out.append((m.group(1), dict(_EQ.findall(braces))))
    return out


def _feeds(record: RecordingRule, matchers: Mapping[str, str]) -> bool:
    """Whether a record rule's output can match a selector's equality matchers (by its static labels)."""
    return all(record.labels.get(k, v) == v for k, v in matchers.items())


def rule_families(groups: Sequence[RuleGroup]) -> dict[tuple[int, int], frozenset[str]]:
    """(group, rule) index -> the alert families that read the rule (directly or through other records)."""
    records = {(g, r): rule for g, group in enumerate(groups) for r, rule in enumerate(group.rules)
               if isinstance(rule, RecordingRule)}  # fmt: skip
    names = {rule.record for rule in records.values()}
    by_name: dict[str, list[tuple[int, int]]] = {}
    for key, rule in records.items():
        by_name.setdefault(rule.record, []).append(key)
    families: dict[tuple[int, int], set[str]] = {key: set() for key in records}

    def mark(expr: str, family: str, seen: set[tuple[int, int]]) -> None:
        for name, matchers in _references(expr, names):
            for key in by_name[name]:
                if key in seen or not _feeds(records[key], matchers):
                    continue
                seen.add(key)
                families[key].add(family)
                mark(records[key].expr, family, seen)

    out: dict[tuple[int, int], frozenset[str]] = {}
    for g, group in enumerate(groups):
        for r, alert in enumerate(group.rules):
            if isinstance(alert, AlertRule):
                family = FAMILY_OF_KIND[alert.kind]
                out[(g, r)] = frozenset({family})
                mark(alert.expr, family, set())
    for key, record in records.items():
        if record.record == schema.RECORD_ERROR_BUDGET_REMAINING:
            families[key].add(BUDGET_FAMILY)
            mark(record.expr, BUDGET_FAMILY, {key})
    out.update({key: frozenset(value) for key, value in families.items()})
    return out


# ==============================================================================================================
# Building and sampling
# ==============================================================================================================
def all_mutants(spec: Spec, groups: Sequence[RuleGroup]) -> list[Mutant]:
    """Every mutant of the spec's rule groups that some alert family reads, in a fixed order."""
    from slokit.generate.rules import parameter_rules

    families = rule_families(groups)
    parameters: dict[str, list[Mapping[str, str]]] = {}
    for constant in parameter_rules(spec):
        parameters.setdefault(constant.record, []).append(constant.labels)
    out: list[Mutant] = []
    for g, group in enumerate(groups):
        for r, rule in enumerate(group.rules):
            fam = families[(g, r)]
            if not fam:
                continue
            name = rule.record if isinstance(rule, RecordingRule) else rule.name
            for operator, description, replacement in rule_mutations(rule, spec, parameters):
                out.append(Mutant(len(out), operator, g, r, name, description, fam, replacement))
    return out


def population(mutants: Sequence[Mutant]) -> dict[str, int]:
    """How many mutants each family has, and all of them (OVERALL)."""
    out = {family: sum(family in m.families for m in mutants) for family in FAMILIES}
    return {**{f: n for f, n in out.items() if n}, OVERALL: len(mutants)}


def sample(mutants: Sequence[Mutant], n: int, seed: int = DEFAULT_SEED, family: str | None = None) -> list[Mutant]:
    """`n` mutants (all if fewer) drawn uniformly without replacement, from those of `family` when given; returned
    in index order. Uniform, so every family is in the sample in proportion to its share of the mutants: the
    overall score is then the whole set's weighted by share, not an average of families of very different size."""
    pool = [m for m in mutants if family is None or family in m.families]
    chosen = random.Random(seed).sample(pool, min(n, len(pool)))
    return sorted(chosen, key=lambda m: m.index)


def mutated_rule_file(groups: Sequence[RuleGroup], mutant: Mutant) -> dict[str, Any]:
    """The rule-file data of the groups with the mutant applied."""
    out = []
    for g, group in enumerate(groups):
        data = group.to_data()
        if g == mutant.group:
            rules = list(data["rules"])
            if mutant.replacement is None:
                del rules[mutant.rule]
            else:
                rules[mutant.rule] = mutant.replacement
            data = {**data, "rules": rules}
        out.append(data)
    return {"groups": out}


# ==============================================================================================================
# Running
# ==============================================================================================================
ALERT_SERIES: Final = ("ALERTS", "ALERTS_FOR_STATE")


def _names_in(expr: str) -> set[str] | None:
    """Every series name `expr` could read (with function names, keywords and grouping labels beside them, which
    match no series name); None when it selects by `__name__`, that is, could read any series."""
    stripped = _QUOTED.sub('""', expr)
    if _NAME_OF_EVERYTHING in stripped:
        return None
    return {m.group(1) for m in _SELECTOR.finditer(stripped)}


def affected_names(groups: Sequence[RuleGroup], mutant: Mutant) -> set[str] | None:
    """The series names whose values the mutant can change: the mutated rule's output and, to a fixed point, the
    output of every rule that reads one of them (an alert's output is ALERTS and ALERTS_FOR_STATE, which alerts
    that stand aside for a page read). None when some rule reads any series by `__name__`."""

    def writes(rule: RecordingRule | AlertRule) -> set[str]:
        return {rule.record} if isinstance(rule, RecordingRule) else {rule.name, *ALERT_SERIES}

    affected = writes(groups[mutant.group].rules[mutant.rule])
    # An alert's annotations are templates, which may query series too.
    readers = [
        (rule, _names_in(" ".join([rule.expr, *(rule.annotations.values() if isinstance(rule, AlertRule) else ())])))
        for group in groups
        for rule in group.rules
    ]
    if any(names is None for _, names in readers):
        return None
    grew = True
    while grew:
        grew = False
        for rule, names in readers:
            if names and names & affected and not writes(rule) <= affected:
                affected |= writes(rule)
                grew = True
    return affected


def observes(test_group: Mapping[str, Any], affected: set[str] | None) -> bool:
    """Whether a promtool test group checks a series in `affected` (None: every series)."""
    if affected is None:
        return True
    if any(check["alertname"] in affected for check in test_group.get("alert_rule_test", ())):
        return True
    for check in test_group.get("promql_expr_test", ()):
        names = _names_in(check["expr"])
        if names is None or names & affected:
            return True
    return False


def _test_files(units: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, list[tuple[Mapping[str, Any], str]]]]:
    """Each test file as (name, its text without the groups, [(group, the group's text)]), rendered once, so that a
    mutant's files are put together from the groups it can be seen by without rendering them again."""
    from slokit.generate.writer import to_yaml

    out = []
    for name, unit in units.items():
        head = to_yaml({key: value for key, value in unit.items() if key != "tests"}) + "tests:\n"
        out.append((name, head, [(group, to_yaml([group])) for group in unit["tests"]]))
    return out


def tests_for(
    files: Sequence[tuple[str, str, Sequence[tuple[Mapping[str, Any], str]]]], affected: set[str] | None
) -> dict[str, str]:
    """name -> text of each test file cut down to the groups that observe `affected`; files left empty are left out."""
    out = {}
    for name, head, groups in files:
        kept = [text for group, text in groups if observes(group, affected)]
        if kept:
            out[name] = head + "".join(kept)
    return out


def _run_one(
    rules_text: str, tests: Mapping[str, str], rules_name: str, timeout: float
) -> tuple[str, float, str]:  # fmt: skip
    """(status, seconds, output) of promtool on one rule file and the spec's test files (name -> text)."""
    import subprocess

    from slokit.local.prometheus import PROMTOOL_BINARY, _require_binary

    promtool = _require_binary(PROMTOOL_BINARY)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slokit-mutant-") as folder:
        root = Path(folder)
        (root / rules_name).write_text(rules_text, encoding="utf-8")
        for name, text in tests.items():
            (root / name).write_text(text, encoding="utf-8")
        check = subprocess.run([promtool, "check", "rules", rules_name], cwd=root, capture_output=True, text=True,
                               timeout=timeout, check=False)  # fmt: skip
        if check.returncode != 0:
            return "invalid", time.monotonic() - started, check.stdout + check.stderr
        output = ""
        for name in tests:  # one file at a time, in order: the first that fails kills the mutant
            left = timeout - (time.monotonic() - started)
            try:
                done = subprocess.run([promtool, "test", "rules", name], cwd=root, capture_output=True,
                                      text=True, timeout=max(left, 1.0), check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                return "timeout", time.monotonic() - started, output
            output = (done.stdout + done.stderr)[-2000:]
            if done.returncode != 0:
                return "killed", time.monotonic() - started, output
    return "survived", time.monotonic() - started, output


# The main test file is split into files of rising cost (the share of the whole file's simulated minutes each
# closes at): a mutant is killed by the first file that fails, and most die in the cheap scenarios, so the long
# ones (a day of baseline history, the filled long windows) run only for mutants that survive the rest.
COST_SHARES: Final = (0.2, 0.5)


def _simulated_seconds(group: Mapping[str, Any]) -> float:
    """How far a test group's evaluation runs: its latest check (promtool evaluates every rule up to it)."""
    checks = [*group.get("alert_rule_test", ()), *group.get("promql_expr_test", ())]
    return max((parse_duration(check["eval_time"]) for check in checks), default=0.0)


def by_cost(unit: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One promtool test file split into files of rising cost, cheapest first (`tests-1.yaml`, ...); the same
    groups, each once, with the same settings."""
    groups = sorted(unit["tests"], key=_simulated_seconds)
    total = sum(_simulated_seconds(g) for g in groups) or 1.0
    parts: list[list[dict[str, Any]]] = [[]]
    spent = 0.0
    closes = iter(COST_SHARES)
    close = next(closes, None)
    for group in groups:
        if close is not None and parts[-1] and (spent + _simulated_seconds(group)) / total > close:
            parts.append([])
            close = next(closes, None)
        parts[-1].append(group)
        spent += _simulated_seconds(group)
    return {f"tests-{i}.yaml": {**unit, "tests": part} for i, part in enumerate(parts, 1) if part}


def run_mutants(
    spec: Spec, n: int, *, seed: int = DEFAULT_SEED, workers: int = DEFAULT_WORKERS,
    timeout: float = DEFAULT_TIMEOUT_S, mutants: Iterable[Mutant] | None = None, check_baseline: bool = True,
    family: str | None = None,
) -> Report:  # fmt: skip
    """Sample `n` mutants of the spec's generated rules (of one `family`, when given) and run the spec's generated
    tests on each; `mutants` runs those instead of a sample.

    The unmutated rules run first; when they fail their own tests nothing else runs (`baseline_ok` False). A
    caller that has just run the same generated tests on the unmutated rules (a test suite) may skip that run
    (`check_baseline=False`): it costs as much as the mutants that die in the cheap scenarios together."""
    from slokit.generate import counter_tests, promtool_tests
    from slokit.generate.rules import rule_groups, rules_path
    from slokit.generate.writer import to_yaml

    groups = rule_groups(spec)
    rules_name = rules_path(spec).removeprefix("rules/")
    units = by_cost(promtool_tests.unit_tests(spec))
    counters = counter_tests.unit_tests(spec)
    if counters is not None:  # first: it runs in seconds and fails most mutants of the counting
        units = {"counters.yaml": counters, **units}
    files = _test_files(units)
    tests = tests_for(files, None)
    everything = all_mutants(spec, groups)
    chosen = list(mutants) if mutants is not None else sample(everything, n, seed, family)
    report = Report(population=population(everything), family=family)
    if check_baseline:
        status, _, output = _run_one(to_yaml({"groups": [g.to_data() for g in groups]}), tests, rules_name, timeout)
        if status != "survived":
            report.baseline_ok, report.baseline_output = False, output
            return report

    def one(mutant: Mutant) -> Outcome:
        text = to_yaml(mutated_rule_file(groups, mutant))
        status, seconds, output = _run_one(text, tests_for(files, affected_names(groups, mutant)), rules_name, timeout)
        return Outcome(mutant, status, seconds, output)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        report.outcomes = list(pool.map(one, chosen))
    return report


__all__ = [
    "BUDGET_FAMILY", "FAMILIES", "FAMILY_OF_KIND", "OVERALL", "Mutant", "Outcome", "Report", "affected_names",
    "all_mutants", "by_cost", "expr_mutations", "mutated_rule_file", "observes", "population", "rule_families",
    "rule_mutations", "run_mutants", "sample", "tests_for", "wilson_interval",
]  # fmt: skip
