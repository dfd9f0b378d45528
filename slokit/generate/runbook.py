"""Generator stub: replaced by the real runbook generator."""

from __future__ import annotations

from typing import Any

from slokit.spec import Spec


def files(spec: Spec) -> dict[str, Any]:
    """No files yet."""
    return {}
