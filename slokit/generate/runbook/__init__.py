"""The on-call runbook, generated from the spec and the alerts: one section per alert, in a fixed debugging order.

Every alert the rules generator writes gets a section whose heading is the alert's `title`, so the anchor its
`runbook_url` points at exists by construction. Each section says what fired and what it means for users, then links
the debugging guide of its scope, which walks the steps of `slokit.generate.debug_steps` in their order: every step
carries the exact PromQL for that scope's model and class, what healthy looks like in numbers taken from the spec
(and the roofline planner), and the fix. A tuning section follows.

Modules: `template` (the only jinja2 import; the prose around the sections is `templates/runbook.md.j2`),
`markdown` (escaping), `model` (what the template renders), `context` (selectors and per-model facts), `steps`,
`sections`, `tuning`, and `document` (the entry points). Text from the spec (descriptions, names, label values) is
escaped for Markdown and HTML by the template environment's `finalize` hook, so no spec can inject links, headings
or HTML. Only values built here as `Markup` (code blocks, links) pass through unescaped.
"""

from slokit.generate.runbook.document import files, render
from slokit.generate.runbook.markdown import code_block, code_span, link, md_escape
from slokit.generate.runbook.sections import for_humans

__all__ = ["code_block", "code_span", "files", "for_humans", "link", "md_escape", "render"]
