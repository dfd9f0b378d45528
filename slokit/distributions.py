"""Token-length distributions for workloads: `512`, `uniform(128, 1024)`, `normal(512, 64)`,
`lognormal(512, 0.6)` (median and sigma), `choice(128, 512, 2048)`.

The spec's class workloads and `slokit probe --prompt-tokens/--output-tokens` share this one grammar.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

_CALL = re.compile(r"^\s*(?P<kind>[a-z]+)\s*\((?P<args>[^()]*)\)\s*$")
_KINDS = {"uniform": 2, "normal": 2, "lognormal": 2, "choice": None, "constant": 1}
_HELP = "a token count such as 512, or uniform(128, 1024), normal(512, 64), lognormal(512, 0.6), choice(128, 512)"
MAX_TOKENS = 1_000_000


class DistributionError(ValueError):
    """A distribution that cannot be read; the message shows the accepted forms."""


@dataclass(frozen=True)
class Distribution:
    """A distribution of positive integer token counts."""

    kind: str
    params: tuple[float, ...]

    def sample(self, rng: random.Random) -> int:
        """One draw, clamped to at least 1 token."""
        if self.kind == "constant":
            value = self.params[0]
        elif self.kind == "uniform":
            value = rng.uniform(self.params[0], self.params[1])
        elif self.kind == "normal":
            value = rng.gauss(self.params[0], self.params[1])
        elif self.kind == "lognormal":
            value = rng.lognormvariate(math.log(self.params[0]), self.params[1])
        else:
            value = rng.choice(self.params)
        return max(1, min(MAX_TOKENS, round(value)))

    @property
    def mean(self) -> float:
        """The distribution's mean (before clamping), for planning and reports."""
        if self.kind == "constant":
            return self.params[0]
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        if self.kind == "normal":
            return self.params[0]
        if self.kind == "lognormal":
            return self.params[0] * math.exp(self.params[1] ** 2 / 2)
        return sum(self.params) / len(self.params)

    def __str__(self) -> str:
        if self.kind == "constant":
            return f"{self.params[0]:g}"
        return f"{self.kind}({', '.join(f'{p:g}' for p in self.params)})"


def parse_distribution(value: Any) -> Distribution:
    """Read a token-length distribution from a spec value or a command-line string."""
    if isinstance(value, bool):
        raise DistributionError(f"{value!r} is not a token count; use {_HELP}")
    if isinstance(value, int):
        return _checked("constant", (float(value),), value)
    if not isinstance(value, str):
        raise DistributionError(f"{value!r} is not a distribution; use {_HELP}")
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return _checked("constant", (float(text),), value)
    match = _CALL.match(text)
    if match is None or match.group("kind") not in _KINDS:
        raise DistributionError(f"{value!r} is not a distribution; use {_HELP}")
    kind = match.group("kind")
    try:
        params = tuple(float(part) for part in match.group("args").split(","))
    except ValueError:
        raise DistributionError(f"{value!r}: arguments must be numbers; use {_HELP}") from None
    return _checked(kind, params, value)


def _checked(kind: str, params: tuple[float, ...], original: Any) -> Distribution:
    arity = _KINDS[kind]
    if arity is not None and len(params) != arity:
        raise DistributionError(f"{original!r}: {kind} takes {arity} argument{'s' if arity > 1 else ''}")
    if not params or any(not math.isfinite(p) for p in params):
        raise DistributionError(f"{original!r}: arguments must be finite numbers")
    if kind in ("constant", "choice") and any(p < 1 or p > MAX_TOKENS for p in params):
        raise DistributionError(f"{original!r}: token counts must be between 1 and {MAX_TOKENS}")
    if kind == "uniform" and not 1 <= params[0] <= params[1] <= MAX_TOKENS:
        raise DistributionError(f"{original!r}: uniform(low, high) needs 1 <= low <= high <= {MAX_TOKENS}")
    if kind in ("normal", "lognormal") and (params[0] < 1 or params[0] > MAX_TOKENS or params[1] < 0):
        raise DistributionError(f"{original!r}: {kind}(center, spread) needs center >= 1 and spread >= 0")
    return Distribution(kind, params)
