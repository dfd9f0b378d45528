"""The debugging steps, in the order the runbook walks them and the debugging dashboard shows them.

One owner for the step list, its order, what each step asks and the PromQL both renderers show, so that the
dashboard rows and the runbook guides cannot drift apart: a new step, or a changed query, is made here once.
"""

from __future__ import annotations

from slokit.spec import Spec


def has_frontend(spec: Spec) -> bool:
    """Whether the source has frontend histograms (slokit's exporter), so the API-server step applies."""
    return bool(spec.metrics.frontend_latency)
