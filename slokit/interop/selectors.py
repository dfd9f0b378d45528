"""Reading the series selectors out of a PromQL query, enough to recognise a latency SLI.

The importers do not evaluate PromQL; they need to know which series a query reads (name and matchers), how it
groups (`by (...)`), and whether it is the shape slokit can express: the `le` bucket of a classic histogram over
its `_count` (or `+Inf` bucket). Anything else is reported to the user, never guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

Matcher = tuple[str, str, str]  # (label, op, value)

_RANGE: Final = re.compile(r"\[[^\]]*\]")
_GROUPING: Final = re.compile(r"\b(by|without)\s*\(([^)]*)\)")
_SELECTOR: Final = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{(?:[^{}\"'`]|\"(?:[^\"\\]|\\.)*\"|'[^']*'|`[^`]*`)*\})?"
)
_MATCHER: Final = re.compile(
    r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*(,|$)"
)
_KEYWORDS: Final = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
        "inf",
        "nan",
        "atan2",
    }
)


class QueryError(ValueError):
    """A query that cannot be read as series selectors."""


@dataclass(frozen=True)
class Selector:
    """One vector selector of a query."""

    name: str
    matchers: tuple[Matcher, ...]

    def without(self, label: str) -> tuple[Matcher, ...]:
        """The matchers other than those on `label`."""
        return tuple(m for m in self.matchers if m[0] != label)

    def on(self, label: str) -> list[Matcher]:
        """The matchers on `label`."""
        return [m for m in self.matchers if m[0] == label]


@dataclass(frozen=True)
class Query:
    """What a query reads: its selectors (in order) and the labels it groups by."""

    text: str
    selectors: tuple[Selector, ...]
    grouping: tuple[str, ...]
    functions: frozenset[str]


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def parse_matchers(body: str) -> tuple[Matcher, ...]:
    """`a="x", b=~"y"` -> matchers; raises QueryError on anything else."""
    out: list[Matcher] = []
    pos = 0
    body = body.strip()
    while pos < len(body):
        match = _MATCHER.match(body, pos)
        if match is None:
            raise QueryError(f"cannot read the label matchers {{{body}}}")
        out.append((match.group(1), match.group(2), _unquote(match.group(3))))
        pos = match.end()
    return tuple(out)


def parse_query(text: str) -> Query:
    """The selectors and grouping of a PromQL query (Sloth's `{{.window}}` template placeholders allowed)."""
    cleaned = re.sub(r"\{\{[^}]*\}\}", "5m", text)
    grouping: list[str] = []
    for _, labels in _GROUPING.findall(cleaned):
        grouping.extend(label.strip() for label in labels.split(",") if label.strip())
    cleaned = _GROUPING.sub(" ", cleaned)
    cleaned = _RANGE.sub(" ", cleaned)
    selectors: list[Selector] = []
    functions: set[str] = set()
    pos = 0
    while pos < len(cleaned):
        char = cleaned[pos]
        if not (char.isalpha() or char in "_:{"):
            pos += 1
            continue
        if pos > 0 and (cleaned[pos - 1].isalnum() or cleaned[pos - 1] in "_."):
            pos += 1  # inside a number such as 1e3 or 0.5
            continue
        match = _SELECTOR.match(cleaned, pos)
        if match is None or match.end() == pos:
            pos += 1
            continue
        name, braces = match.group(1) or "", match.group(2)
        rest = cleaned[match.end() :].lstrip()
        if name and not braces and (rest.startswith("(") or name.lower() in _KEYWORDS):
            functions.add(name)
            pos = match.end()
            continue
        if braces is None and not name:
            pos += 1
            continue
        matchers = parse_matchers(braces[1:-1]) if braces else ()
        if not name:
            names = [m[2] for m in matchers if m[0] == "__name__" and m[1] == "="]
            if not names:
                raise QueryError(f"selector {braces} has no metric name")
            name = names[0]
        selectors.append(Selector(name, tuple(m for m in matchers if m[0] != "__name__")))
        pos = match.end()
    if not selectors:
        raise QueryError(f"no series selector in {text!r}")
    return Query(text, tuple(selectors), tuple(dict.fromkeys(grouping)), frozenset(functions))


def le_value(selector: Selector) -> float | None:
    """The single bound an `le` matcher selects (`le="0.5"`, or `le=~"1\\.0|1"` spelling one number)."""
    les = selector.on("le")
    if len(les) != 1:
        return None
    _, op, value = les[0]
    if op == "=":
        texts = [value]
    elif op == "=~":
        texts = [t.replace("\\.", ".") for t in value.split("|")]
    else:
        return None
    try:
        numbers = {float(t) for t in texts}
    except ValueError:
        return None
    return numbers.pop() if len(numbers) == 1 else None
