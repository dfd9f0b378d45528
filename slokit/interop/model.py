"""What an importer finds in a foreign SLO file: objectives slokit can express, and notices about the rest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from slokit.interop.selectors import Matcher
from slokit.schema import Sli

BUCKETS_ANNOTATION: Final = "slokit.dev/buckets"  # written by slokit's OpenSLO export, read by its import


def format_number(value: float) -> str:
    """A bound as YAML reads back as the same number: `0.24`, `240`, never `1e-05` (a YAML 1.1 string)."""
    text = repr(float(value))
    if "e" in text or "E" in text:
        text = f"{value:.15f}".rstrip("0").rstrip(".")
    return text.removesuffix(".0")


def format_buckets(seconds: tuple[float, ...], scale: float) -> str:
    """The boundaries as comma-separated `le` values in the histogram's unit (seconds / `scale`)."""
    return ",".join(format_number(round(bound / scale, 12)) for bound in seconds)


class Unsupported(Exception):
    """A construct slokit cannot express; `construct` names it for the user (and for tests)."""

    def __init__(self, construct: str, detail: str) -> None:
        self.construct = construct
        self.detail = detail
        super().__init__(f"{construct}: {detail}")


@dataclass(frozen=True)
class Objective:
    """One latency objective read from a foreign file: `percentile` % of events at or under `threshold` s."""

    file: str
    slo: str  # the SLO's name in its own file (plus objective index where one SLO holds several)
    kind: str  # "Pyrra ServiceLevelObjective", "Sloth prometheus/v1", "OpenSLO v1 SLO", ...
    service: str | None
    description: str
    percentile: float
    window: float  # seconds, rolling
    histogram: str  # base name (no _bucket/_count)
    matchers: tuple[Matcher, ...]  # the total's matchers (the good ones add only `le`)
    threshold: float  # seconds
    scale: float  # seconds per unit of `le` (0.001 for a millisecond histogram)
    sli: Sli
    grouping: tuple[str, ...] = ()
    model_label: str | None = None
    class_name: str | None = None  # kept by slokit's own export, so a round trip keeps class names
    models: tuple[str, ...] = ()  # likewise, the models the objective ran on
    buckets: tuple[float, ...] | None = None  # le boundaries in the histogram's unit, where the file says them
    good_only: tuple[Matcher, ...] = ()  # good-selector matchers the total lacked, dropped (said in a warning)
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Notice:
    """Something the importer could not convert as written: skipped, or converted with a change."""

    file: str
    slo: str
    construct: str
    detail: str
    skipped: bool

    def __str__(self) -> str:
        what = "skipped" if self.skipped else "converted with a change"
        return f"{self.file}: {self.slo}: {what}: {self.construct}: {self.detail}"
