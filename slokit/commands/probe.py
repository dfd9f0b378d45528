"""`slokit probe`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the probe command (not available yet)."""
