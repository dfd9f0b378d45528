"""What the template renders: queries, steps, guides, sections, tuning levers and the numbers quoted per model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from markupsafe import Markup

from slokit.generate.model import AlertRule
from slokit.plan import roofline
from slokit.spec import Model, RequestClass

RATE_WINDOW: Final = "5m"


@dataclass(frozen=True)
class Query:
    """One PromQL query with what it shows."""

    label: str
    promql: str


@dataclass(frozen=True)
class Step:
    """One step of the ordered workflow."""

    number: int
    title: str
    question: str
    queries: tuple[Query, ...]
    healthy: tuple[str, ...]
    fix: tuple[str, ...]
    panel: Markup | None = None


@dataclass(frozen=True)
class Section:
    """The runbook section of one alert."""

    rule: AlertRule
    title: str
    anchor: str
    severity: str
    summary: str
    description: str
    meaning: tuple[str, ...]
    fires_when: str
    labels: tuple[tuple[str, str], ...]
    panel: Markup
    guide: Guide
    values: Table  # the values the rule holds per class and SLO (per model where a value is a model's)
    condition: tuple[tuple[str, str], ...]  # its rule-wide values (windows, guards, limits), named


@dataclass(frozen=True)
class Guide:
    """The ordered debugging steps, written once for the fleet and linked from every alert: an on-call reads the
    alert's short section, then the guide."""

    title: str
    anchor: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Tuning:
    """One tuning lever: what to change, the planner's figure where it has one, and the metric that shows it."""

    title: str
    advice: tuple[str, ...]
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class ModelFacts:
    """Numbers the runbook quotes for one model."""

    model: Model
    classes: tuple[RequestClass, ...]
    expected_decode: float | None
    max_batch: int | None
    batch_cap: int | None
    fp8_kv_max_batch: int | None
    hbm_bandwidth: float | None
    itl_target: float | None  # the tightest ITL/TPOT threshold of the model's classes (seconds)
    ttft_threshold: float | None
    decode_curve: tuple[roofline.DecodePoint, ...] | None = None  # expected tokens/s per engine by running batch


@dataclass(frozen=True)
class Table:
    """A Markdown table: header cells and rows of cells (escaped by the template like any spec text)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
