"""The jinja2 owner: the only module that imports jinja2, and the one that renders the runbook template."""

from __future__ import annotations

from typing import Any, Final

import jinja2
from markupsafe import Markup

from slokit.generate.runbook.markdown import code_block, code_span, md_escape
from slokit.units import format_duration

TEMPLATE: Final = "runbook.md.j2"


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if value is None:
        return ""
    return md_escape(str(value))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("slokit.generate", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["code"] = code_span
    env.filters["block"] = code_block
    env.filters["duration"] = format_duration
    return env


def render_template(**context: Any) -> str:
    """The runbook template rendered with `context` (every value escaped unless it is `Markup`)."""
    text: str = _environment().get_template(TEMPLATE).render(**context)
    return text
