"""The on-call runbook, generated from the spec and the alerts: one section per alert, in a fixed debugging order.

Every alert the rules generator writes gets a section whose heading is the alert's `title`, so the anchor its
`runbook_url` points at exists by construction. An alert is written once for the fleet, so its section says what
fired and what it means for users, then tabulates the values the rule holds per class and SLO (per model where a
value is a model's), read from the rule's members and condition (`tables`), and links the one debugging guide,
which walks the steps of `slokit.generate.debug_steps` in their order with PromQL for the model the alert names
(`<model>` where the spec has several), what healthy looks like in numbers taken from the spec (and the roofline
planner, per model in the models table), and the fix. A tuning section follows.

Modules: `template` (the only jinja2 import; the prose around the sections is `templates/runbook.md.j2`),
`markdown` (escaping), `model` (what the template renders), `context` (selectors and per-model facts), `steps`,
`sections`, `tables`, `tuning`, and `document` (the entry points). Text from the spec (descriptions, names, label
values) is escaped for Markdown and HTML by the template environment's `finalize` hook, so no spec can inject links,
headings or HTML. Only values built here as `Markup` (code blocks, links) pass through unescaped.
"""

from slokit.generate.runbook.context import MODEL_PLACEHOLDER
from slokit.generate.runbook.document import files, render
from slokit.generate.runbook.markdown import code_block, code_span, link, md_escape
from slokit.generate.runbook.sections import for_humans

__all__ = ["MODEL_PLACEHOLDER", "code_block", "code_span", "files", "for_humans", "link", "md_escape", "render"]
