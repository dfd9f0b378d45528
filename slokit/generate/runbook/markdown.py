"""Safe Markdown for the runbook: spec text made inert, and the code spans, blocks and links built here.

No jinja2 here: the template owner (`template.py`) applies `md_escape` to every value it renders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from markupsafe import Markup

_MD_INLINE: Final = re.compile(r"([\\`*_\[\]|~])")  # special anywhere in a line


_MD_LINE_START: Final = re.compile(r"^(\s*)([#>+=-]|\d+[.)])")  # special only where a line (block) starts


def _inline(text: str) -> str:
    """Spec text on one line, its inline punctuation backslashed and `<>&` as entities."""
    one_line = re.sub(r"\s+", " ", str(text))
    escaped = _MD_INLINE.sub(r"\\\1", one_line)
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def wrapped_item(lines: Sequence[str]) -> Markup:
    """Lines of one list item's text, each escaped, joined as the item's continuation lines (indented by two)."""
    return Markup("\n  ").join(md_escape(line) for line in lines)


def md_escape(text: str) -> Markup:
    """Spec text made inert in Markdown and HTML.

    Entities for `<>&`, backslashes before the punctuation that starts emphasis, code, links or table cells, and a
    backslash before a leading `#`, `-`, `>` or `1.` (a heading, list or quote); newlines become spaces so a value
    can never start a block of its own.
    """
    escaped = _MD_LINE_START.sub(_escape_line_start, _inline(text))
    return Markup(escaped)


def _escape_line_start(match: re.Match[str]) -> str:
    r"""`\#`, `\-`; an ordered-list marker at its punctuation (`1\.`: a backslash before a digit is no escape)."""
    indent, marker = match.group(1), match.group(2)
    if marker[0].isdigit():
        return f"{indent}{marker[:-1]}\\{marker[-1]}"
    return f"{indent}\\{marker}"


def md(template: str, *values: object) -> Markup:
    """Markdown written here (trusted, may use `code`), with spec values escaped into its `{}` slots."""
    return Markup(template.format(*(md_escape(str(v)) for v in values)))


def code_span(text: str) -> Markup:
    """Inline code whose fence is longer than any backtick run inside (so the content cannot close it)."""
    one_line = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return Markup(f"{fence}{pad}{one_line}{pad}{fence}")


def code_block(text: str, language: str = "promql") -> Markup:
    """A fenced block whose fence is longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return Markup(f"{fence}{language}\n{text.strip()}\n{fence}")


def link(text: str, url: str) -> Markup:
    """A Markdown link with escaped text and a URL that cannot break out of the parentheses."""
    safe_url = url.replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C").replace(">", "%3E")
    return Markup(f"[{md_escape(text)}]({safe_url})")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Markup:
    """A Markdown table; each cell escaped (a `|` in spec text cannot add a column) unless it is Markup already."""

    def line(cells: Sequence[str]) -> str:
        # A cell never starts a line, so only inline punctuation needs escaping there (13.44 stays 13.44).
        return "| " + " | ".join(c if isinstance(c, Markup) else _inline(c) for c in cells) + " |"

    return Markup("\n".join([line(headers), "|" + "---|" * len(headers), *(line(row) for row in rows)]))
