"""Small PromQL builders: selectors, `le` matchers that work on Prometheus 2 and 3, numbers, label moves; and
Prometheus's `histogram_quantile` in Python, for the places that must compute what a query would answer.

Generators build expressions from these instead of by string pasting, so quoting, regex escaping and the
Prometheus 3 bucket-label change (`le="1"` is written `le="1.0"`) are handled in one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slokit.units import format_le

Matcher = tuple[str, str, str]  # (label, op, value) with op one of = != =~ !~


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def regex_escape(value: str) -> str:
    """Escape a literal for a (fully anchored) RE2 label regex."""
    return re.sub(r"([.+*?()|\[\]{}^$\\])", r"\\\1", value)


def any_of(values: Iterable[str]) -> str:
    """A regex that matches exactly one of `values`."""
    return "|".join(regex_escape(v) for v in values)


def number(value: float) -> str:
    """A PromQL number literal: shortest exact text (`0.05`, `14.4`, `1e-05`), no trailing `.0` on integers."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def le_spellings(seconds: float) -> tuple[str, ...]:
    """Every spelling of a bucket bound as exporters write it: client_python `1.0`, Go and Prometheus 2 `1`.

    Prometheus 3 normalises classic-histogram `le` to the float form, Prometheus 2 keeps what the target wrote.
    """
    spellings = [format_le(seconds)]
    if float(seconds).is_integer():
        spellings.append(str(int(seconds)))
    return tuple(spellings)


def le_matcher(seconds: float) -> Matcher:
    """The `le` matcher for a bound: `le="0.5"`, or `le=~"1\\.0|1"` when the bound has two spellings."""
    spellings = le_spellings(seconds)
    if len(spellings) == 1:
        return ("le", "=", spellings[0])
    return ("le", "=~", any_of(spellings))


INF_MATCHER: Matcher = ("le", "=", "+Inf")


def eq(label: str, value: str) -> Matcher:
    """`label="value"`."""
    return (label, "=", value)


def one_of(label: str, values: Sequence[str]) -> Matcher:
    """`label="v"` for one value, `label=~"a|b"` for several."""
    if len(values) == 1:
        return (label, "=", values[0])
    return (label, "=~", any_of(values))


def selector(name: str, matchers: Iterable[Matcher] = ()) -> str:
    """`name{a="b",c=~"d|e"}`; metric names with colons are fine as the bare name."""
    inner = ",".join(f"{label}{op}{quote(value)}" for label, op, value in matchers)
    return f"{name}{{{inner}}}" if inner else name


def labels_matchers(labels: Mapping[str, str]) -> list[Matcher]:
    """Equality matchers for a label set, in its order."""
    return [eq(k, v) for k, v in labels.items()]


def by(labels: Iterable[str]) -> str:
    """`by (a, b)`."""
    return f"by ({', '.join(labels)})"


def rename_label(expr: str, source: str, target: str) -> str:
    """Copy label `source` to `target` and drop `source` (vLLM's `model_name` becomes slokit's `model`)."""
    if source == target:
        return expr
    copied = f'label_replace({expr}, {quote(target)}, "$1", {quote(source)}, "(.*)")'
    return f'label_replace({copied}, {quote(source)}, "", {quote(source)}, ".*")'


@dataclass(frozen=True)
class Block:
    """One term of a tiled window: the recorded `window` series read `offset` seconds back."""

    window: float
    offset: float


def tile(window: float, available: Sequence[float], step_of: Mapping[float, float]) -> list[Block]:
    """Cover `(t - window, t]` with recorded smaller windows placed end to end, fewest terms first.

    `available` are the windows already recorded; `step_of[w]` is the evaluation interval of the group recording
    `w`. A block of `w` read at offset `o` lines up with its neighbours only when `o` is a multiple of that
    interval (the group records at t, t - interval, ...), so offsets are kept on each source's grid.
    Raises ValueError when the window cannot be tiled.
    """
    best: list[Block] | None = None
    for size in sorted((w for w in available if w < window), reverse=True):
        blocks: list[Block] = []
        covered = 0.0
        ok = True
        for candidate in sorted((w for w in available if w <= size), reverse=True):
            while covered + candidate <= window + 1e-9:
                step = step_of.get(candidate, 1.0)
                if not math.isclose(covered / step, round(covered / step), abs_tol=1e-9):
                    break
                blocks.append(Block(candidate, covered))
                covered += candidate
            if math.isclose(covered, window):
                break
        ok = math.isclose(covered, window)
        if ok and (best is None or len(blocks) < len(best)):
            best = blocks
    if best is None:
        raise ValueError(f"cannot tile a {window:g}s window from {sorted(available)}")
    return best


def offset_suffix(seconds: float, duration: str) -> str:
    """` offset 1h` for a positive offset (its Prometheus spelling is `duration`), "" for none."""
    return f" offset {duration}" if seconds > 0 else ""


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float | None:
    """What Prometheus's classic-histogram `histogram_quantile(q, ...)` answers: `bounds` are the finite upper
    bounds, `cumulative` the counts per bucket, +Inf last. None without events (Prometheus answers NaN).

    Generated promtool tests state expected quantiles with it and the report computes its percentiles with it, so
    both agree with the query a dashboard runs, linear interpolation and the +Inf bucket's answer included."""
    total = float(cumulative[-1])
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(cumulative) if c >= rank)
    if index == len(bounds):
        return float(bounds[-1])  # in the +Inf bucket: Prometheus answers the highest finite bound
    start = 0.0 if index == 0 else float(bounds[index - 1])
    below = 0.0 if index == 0 else float(cumulative[index - 1])
    count = float(cumulative[index]) - below
    if count <= 0:
        return float(bounds[index])
    return start + (float(bounds[index]) - start) * ((rank - below) / count)
