"""What one poll saw: an immutable snapshot the poller publishes and the collector converts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    """One sample: family name, labels in family order (UUID first), value."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """Everything one poll produced. `nvml_ok` False: NVML could not be initialised (no driver, no library)."""

    timestamp: float  # unix time at the end of the poll (0: never polled)
    monotonic: float  # time.monotonic() at the end of the poll
    duration: float
    nvml_ok: bool
    series: tuple[Series, ...]
    up: Mapping[str, bool]  # UUID -> answering
    support: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)  # UUID -> metric -> answered
    identities: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)  # UUID -> (modelName, bus, preset)
    driver_version: str = ""


EMPTY_SNAPSHOT: Final = Snapshot(0.0, 0.0, 0.0, False, (), MappingProxyType({}))
