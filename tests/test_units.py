"""Durations and token-length distributions as users write them."""

from __future__ import annotations

import random

import pytest

from slokit.distributions import DistributionError, parse_distribution
from slokit.units import DurationError, format_duration, format_le, parse_duration, prom_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("1.5s", 1.5), ("2m", 120), ("1h", 3600), ("28d", 28 * 86400), ("1w", 604800), (".5s", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["500", 500, "5 minutes", "1h30m", "-1s", "", True, None, "1e3s"])
def test_parse_duration_rejects(text: object) -> None:
    with pytest.raises(DurationError, match="500ms"):
        parse_duration(text)  # type: ignore[arg-type]


def test_prometheus_durations() -> None:
    assert [prom_duration(s) for s in (300, 3600, 5400, 86400, 0.25, 604800)] == [
        "5m",
        "1h",
        "90m",
        "1d",
        "250ms",
        "1w",
    ]
    assert prom_duration(3661) == "3661s"
    with pytest.raises(DurationError):
        prom_duration(0)


def test_format_duration_and_le() -> None:
    assert [format_duration(s) for s in (0.05, 0.5, 1, 90, 3600, 2.5)] == ["50ms", "500ms", "1s", "90s", "1h", "2.5s"]
    assert [format_le(v) for v in (1, 0.25, 2.5, 10)] == ["1.0", "0.25", "2.5", "10.0"]


def test_distributions_sample_in_range() -> None:
    rng = random.Random(7)
    assert parse_distribution(512).sample(rng) == 512
    assert parse_distribution("512").sample(rng) == 512
    uniform = parse_distribution("uniform(10, 20)")
    assert all(10 <= uniform.sample(rng) <= 20 for _ in range(200))
    choice = parse_distribution("choice(1, 5, 9)")
    assert {choice.sample(rng) for _ in range(200)} == {1, 5, 9}
    normal = parse_distribution("normal(100, 10)")
    draws = [normal.sample(rng) for _ in range(2000)]
    assert 97 < sum(draws) / len(draws) < 103
    lognormal = parse_distribution("lognormal(800, 0.6)")
    median = sorted(lognormal.sample(rng) for _ in range(2001))[1000]
    assert 700 < median < 900
    assert str(uniform) == "uniform(10, 20)"


@pytest.mark.parametrize(
    "value", ["gauss(1, 2)", "uniform(5)", "uniform(20, 10)", "choice()", "normal(-5, 1)", 0, True, "12x", [1]]
)
def test_distribution_errors(value: object) -> None:
    with pytest.raises(DistributionError) as caught:
        parse_distribution(value)
    assert repr(value) in str(caught.value) or str(value) in str(caught.value)
