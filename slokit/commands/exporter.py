"""`slokit exporter`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the exporter command (not available yet)."""
