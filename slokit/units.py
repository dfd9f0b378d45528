"""Durations as people write them in specs and on the command line (`500ms`, `1.5s`, `2m`, `28d`).

Prometheus only understands integer durations with units (`5m`, `1h30m`), so the spec keeps seconds as floats
internally and formats back to the shortest Prometheus spelling when a rule needs a window.
"""

from __future__ import annotations

import math
import re

_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_DURATION = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>ms|s|m|h|d|w)\s*$")
_PROM_UNITS: tuple[tuple[str, int], ...] = (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1))

DURATION_HELP = "a number followed by ms, s, m, h, d or w, such as 500ms, 1.5s, 2m, 28d"


class DurationError(ValueError):
    """A duration string that cannot be read; the message says what would be right."""


def parse_duration(text: str | int | float) -> float:
    """Return seconds for `500ms`, `1.5s`, `2m`, `1h`, `28d`, `1w`.

    A bare number is rejected on purpose: `threshold: 500` is ambiguous between milliseconds and seconds, and a
    silent guess is how a 500 s SLO gets deployed.
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise DurationError(f"{text!r} has no unit; write {DURATION_HELP}")
    match = _DURATION.match(text)
    if match is None:
        raise DurationError(f"{text!r} is not a duration; write {DURATION_HELP}")
    seconds = float(match.group("num")) * _UNITS[match.group("unit")]
    if not math.isfinite(seconds):
        raise DurationError(f"{text!r} is too large")
    return seconds


def format_duration(seconds: float) -> str:
    """Format seconds the short way people read them: 0.5 -> `500ms`, 90 -> `90s`, 3600 -> `1h`."""
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    for unit, size in _PROM_UNITS:
        if seconds >= size and math.isclose(seconds % size, 0, abs_tol=1e-9):
            return f"{round(seconds / size)}{unit}"
    return f"{seconds:g}s"


def prom_duration(seconds: float) -> str:
    """A Prometheus range/duration literal (`5m`, `1d`, `1h30m`); sub-second values become milliseconds."""
    total_ms = round(seconds * 1000)
    if total_ms <= 0:
        raise DurationError(f"{seconds} s is not a positive Prometheus duration")
    if total_ms % 1000:
        return f"{total_ms}ms"
    remaining = total_ms // 1000
    for unit, size in _PROM_UNITS:
        if remaining % size == 0:
            return f"{remaining // size}{unit}"
    parts: list[str] = []
    for unit, size in _PROM_UNITS:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def format_le(seconds: float) -> str:
    """The `le` label value client_python and vLLM write for a bucket bound (`0.5`, `1.0`, `2.5`)."""
    return repr(float(seconds))
