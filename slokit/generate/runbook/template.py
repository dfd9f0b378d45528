"""The jinja2 owner: the only module that imports jinja2, and the one that renders the runbook template and the
prose templates its sentences come from."""

from __future__ import annotations

import functools
import re
from typing import Any, Final

import jinja2
from markupsafe import Markup

from slokit.generate.runbook.markdown import code_block, code_span, md_escape
from slokit.units import format_duration

TEMPLATE: Final = "runbook.md.j2"


_PARAGRAPH_BREAK: Final = re.compile(r"\n[ \t]*\n")


_WHITESPACE: Final = re.compile(r"\s+")


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if value is None:
        return ""
    return md_escape(str(value))


def _number(value: float, spec: str = "g") -> str:
    """`{{ x | num }}` is `f"{x:g}"`; `{{ x | num(".0%") }}` is `f"{x:.0%}"`."""
    return format(value, spec)


@functools.cache
def _environment(escape: bool = True) -> jinja2.Environment:
    """The runbook's environment; `escape=False` for the prose templates, whose sentences the runbook template
    escapes as a whole when it renders them (values render as in an f-string there, None as "None")."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("slokit.generate", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=_finalize if escape else None,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["code"] = code_span
    env.filters["block"] = code_block
    env.filters["duration"] = format_duration
    env.filters["num"] = _number
    return env


def render_template(**context: Any) -> str:
    """The runbook template rendered with `context` (every value escaped unless it is `Markup`)."""
    text: str = _environment().get_template(TEMPLATE).render(**context)
    return text


def prose(template: str, macro: str, **values: Any) -> tuple[str, ...]:
    """The paragraphs of one macro of a prose template (`templates/<template>.md.j2`), as plain text.

    Paragraphs are separated by a blank line (empty ones, left by a condition that held nothing, are dropped); the
    line breaks inside one are spaces, so a sentence can be wrapped in the template freely. Values are not escaped
    here: the runbook template escapes each paragraph when it renders it, as it escapes every other value.
    """
    module = _environment(escape=False).get_template(f"{template}.md.j2").module
    text = str(getattr(module, macro)(**values))
    paragraphs = (_WHITESPACE.sub(" ", paragraph.strip("\n")) for paragraph in _PARAGRAPH_BREAK.split(text))
    return tuple(paragraph for paragraph in paragraphs if paragraph.strip())
