"""`slokit plan`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the plan command (not available yet)."""
