"""`slokit demo`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the demo command (not available yet)."""
