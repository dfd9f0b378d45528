"""promtool tests of the SLI counting on counters as dirty as production's, at the short group's interval.

The burn-rate alerts are only as right as the event counts under them, and those counts are where scrapes and pods
break things: a replica that restarts (its counters drop to zero), one that joins mid-window with requests already
counted at its first scrape, one unscraped for minutes and one gone longer than the lookback. These tests feed such
series, evaluate the rules every 30s (the short group's interval, so that a 5m lookback off by a minute shows) and
check the 5m event counts and every window's counts against what the samples say happened:

* a series' 5m increase runs from its sample 5m ago to its last sample now, each step between consecutive samples
  counted as Prometheus counts a counter (a drop is a restart: the new value is the increase);
* a series not scraped for more than 15m counts nothing until it is back; while it is back but its sample 5m ago is
  more than 15m old, the last sample the 5m-step lookup of the rules still reaches stands in (rules.py);
* a series with no sample in the hour before counts from zero at its first sample; one seen in that hour but not in
  the last 15m loses the requests of its gap;
* a window's count is the sum of its 5m tiles, each 5m apart.

Checks sit at half minutes, between the minute samples, so that no sample lies on a window's edge (Prometheus 2
and 3 disagree on whether the edge is in the window).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slokit import schema
from slokit.generate.promtool_tests import (
    _failure_series,
    _gapped,
    _histogram_labels,
    _le_text,
    _replica,
    record_windows,
    rest_of_fleet,
    tested_of,
    timing_groups,
)
from slokit.generate.rules import BASE_WINDOW, TILE_LOOKBACK, TILE_SEEN, rule_groups, rules_path
from slokit.promql import selector
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec
from slokit.units import parse_duration

STEP_S: Final = 30  # the short group's interval
MINUTES: Final = 45
# The rules' counting contract in minutes (rules.py): how long a sample stands for (schema.RECORD_COUNTER_LAST), how
# far back a series counts as seen (not new), the base tile and the step of the rules' lookups.
LOOKBACK: Final = int(TILE_LOOKBACK // 60)
SEEN: Final = int(TILE_SEEN // 60)
TILE: Final = int(BASE_WINDOW // 60)


@dataclass(frozen=True)
class _Replica:
    """One replica's life: the minutes it is scraped at, when it counts requests and when it restarts.

    `per_minute` is its requests per minute: in the objective's bucket, in the next one, slower than every bucket,
    and failed before the first token (0: it has no failure series)."""

    name: str
    samples: tuple[int, ...]
    counts: range  # the minutes whose requests it counts
    restarts: tuple[int, ...]  # minutes from which it counts from zero again
    per_minute: tuple[int, int, int, int]

    def raw(self, minute: int, per_minute: int) -> int:
        """The counter's value at `minute` (requests since its start or last restart) at `per_minute` requests a
        minute."""
        start = max([self.counts.start, *(r for r in self.restarts if r <= minute)])
        return len(range(start, min(minute, self.counts.stop - 1) + 1)) * per_minute


REPLICAS: Final = (
    # scraped for 7 minutes, then not for 20 (restarting unseen at 25); back at 27, then crash-looping: restarts at
    # 34 and 40
    _Replica("a", (*range(0, 7), *range(27, MINUTES + 1)), range(1, MINUTES + 1), (25, 34, 40), (6, 2, 2, 1)),
    # unscraped for 20 minutes without restarting; drained (no more requests) after minute 40
    _Replica("d", (*range(0, 9), *range(29, MINUTES + 1)), range(1, 41), (), (2, 1, 1, 1)),
    # joins at 33 with the requests of its first three minutes already counted
    _Replica("b", tuple(range(33, MINUTES + 1)), range(31, MINUTES + 1), (), (3, 1, 1, 1)),
    # scraped at 0 and 1, then gone for 40 minutes: back at 41, the requests of its gap are lost
    _Replica("c", (0, 1, *range(41, MINUTES + 1)), range(1, MINUTES + 1), (), (4, 1, 1, 2)),
    # unscraped for 23 minutes: back at 31, just past what the gap lookup reaches, so the gap's requests are lost
    _Replica("e", (*range(0, 8), *range(31, MINUTES + 1)), range(1, MINUTES + 1), (), (1, 2, 1, 1)),
)
CHECK_TIMES: Final = (3.5, 6.5, 10.5, 15.5, 20.5, 21.5, 22.5, *(m + 0.5 for m in range(26, MINUTES + 1)))
# where the per-series record is checked: a and d unscraped for 14.5 and 12.5 minutes, then a for 16.5
RECORD_TIMES: Final = (20.5, 22.5)


def _increase(samples: Mapping[int, int], t: float) -> int | None:
    """The 5m increase of one series at evaluation time `t` (minutes), None where it contributes nothing."""
    now = [m for m in samples if t - LOOKBACK < m <= t]
    if not now:
        return None
    cur = max(now)
    before = t - TILE
    prev = [m for m in samples if before - LOOKBACK < m <= before]
    if not prev:
        # the rules' lookup at 5m steps over the lookback, each step seeing 5m back
        prev = _stepped(samples, before, LOOKBACK)
    if not prev:
        if _stepped(samples, before, SEEN):
            return None  # back after a gap longer than the lookback: the gap's requests are lost
        return samples[cur]  # new: counts from zero
    total, last = 0, samples[max(prev)]
    for m in sorted(x for x in samples if max(prev) < x <= cur):
        total += samples[m] - last if samples[m] >= last else samples[m]
        last = samples[m]
    return total


def _stepped(samples: Mapping[int, int], at: float, span: int) -> list[int]:
    """Sample minutes a lookup at 5m steps over `span` minutes before `at` sees: steps at multiples of 5m in
    (at - span, at], each seeing its last 5 minutes."""
    first = math.floor((at - span) / TILE) * TILE + TILE
    last = math.floor(at / TILE) * TILE
    return [m for m in samples if first - TILE < m <= last]


def _sum(series: Sequence[Mapping[int, int]], t: float) -> int | None:
    parts = [x for x in (_increase(s, t) for s in series) if x is not None]
    return sum(parts) if parts else None


@dataclass
class _Slo:
    labels: dict[str, str]
    good: list[dict[int, int]]
    total: list[dict[int, int]]
    read: list[tuple[dict[str, str], tuple[int, ...]]]  # (counter and le, sample minutes) of every series it reads


def _samples(replica: _Replica, per_minute: int) -> dict[int, int]:
    return {m: replica.raw(m, per_minute) for m in replica.samples}


def _values(samples: Mapping[int, int]) -> str:
    """promtool values: `_` where the replica is not scraped."""
    return _gapped([samples.get(m) for m in range(MINUTES + 1)])


# The counting is one term per class and SLI, the same code for each: four classes (two models in the first) catch
# a term that mixes classes or models, and keep every replica's series of a wide spec under promtool's test limit
# of 10,000 samples per query.
COUNTED_CLASSES: Final = 4


def _counted(spec: Spec) -> list[tuple[RequestClass, list[str]]]:
    """The classes (with objectives on the source's histograms) and models whose counting the file checks."""
    classes = [rc for rc in spec.classes
               if any(s.objective is not None and s.metric is None for s in rc.slos.values())]  # fmt: skip
    return [(rc, tested_of(spec, rc)[: 2 if i == 0 else 1]) for i, rc in enumerate(classes[:COUNTED_CLASSES])]


def _inputs(spec: Spec) -> tuple[list[dict[str, str]], list[_Slo]]:
    """Every replica's series of every objective SLO on the source's histograms (of the counted classes and
    models, see _counted), and what each SLO counts."""
    inputs: dict[str, dict[str, str]] = {}
    slos: list[_Slo] = []
    for rc, models in _counted(spec):
        for sli, slo in rc.slos.items():
            if slo.objective is None or slo.metric is not None:
                continue
            for model in models:
                mine: dict[str, dict[str, str]] = {}
                counted = _slo(spec, rc, sli, model, mine)
                # two SLOs on one series with different counts per bucket would overwrite each other: keep the first
                if all(inputs.get(k, v) == v for k, v in mine.items()):
                    inputs.update(mine)
                    slos.append(counted)
    return list(inputs.values()), slos


def _slo(spec: Spec, rc: RequestClass, sli: Sli, model: str, inputs: dict[str, dict[str, str]]) -> _Slo:
    objective = rc.slos[sli].objective
    assert objective is not None
    hist = spec.histogram(rc, sli)
    bounds = list(spec.histogram_buckets(rc, sli))
    good_bound = hist.le_for(objective.threshold)
    good_at = min(range(len(bounds)), key=lambda i: abs(bounds[i] - good_bound))
    out = _Slo({"service": spec.service, "model": model, "class": rc.name, "slo": sli.value}, [], [], [])
    for replica in REPLICAS:
        in_good, next_bucket, slow, failed = replica.per_minute
        if good_at + 1 >= len(bounds):  # the objective's bucket is the last finite one: the next is +Inf
            next_bucket, slow = 0, next_bucket + slow
        base = _histogram_labels(spec, model, rc, sli, replica.name)
        for i, bound in enumerate([*bounds, math.inf]):
            cumulative = (in_good if i >= good_at else 0) + (next_bucket if i > good_at else 0)
            cumulative += slow if math.isinf(bound) else 0
            le = "+Inf" if math.isinf(bound) else _le_text(spec, rc, sli, bound)
            samples = _samples(replica, cumulative)
            series = selector(f"{hist.name}_bucket", [(k, "=", v) for k, v in {**base, "le": le}.items()])
            inputs[series] = {"series": series, "values": _values(samples)}
            if i == good_at:
                out.good.append(samples)
            if math.isinf(bound):
                out.total.append(samples)
            if i == good_at or math.isinf(bound):
                out.read.append(({schema.RULE_LABEL_COUNTER: f"{hist.name}_bucket", "le": le}, replica.samples))
        found = _failure_series(spec, model, rc, sli)
        if found is None or not failed:
            continue
        metric, labels = found
        variants = [labels]
        if metric == spec.metrics.frontend_failed and sli is not Sli.TTFT:
            # non-streamed requests' failures: in E2E's events, not TTFT's (a TTFT event is a stream's)
            variants.append({**labels, schema.FRONTEND_STREAM_LABEL: "false"})
        for variant in variants:
            samples = _samples(replica, failed)
            series = selector(
                metric, [(k, "=", v) for k, v in {**variant, **_replica(spec, replica.name, model)}.items()]
            )
            inputs[series] = {"series": series, "values": _values(samples)}
            out.total.append(samples)
            out.read.append(({schema.RULE_LABEL_COUNTER: metric}, replica.samples))
    return out


def _window_sum(series: Sequence[Mapping[int, int]], t: float, window: str) -> int | None:
    """A window's count: its 5m tiles at t, t - 5m, ... while they exist (evaluations start at 0)."""
    tiles = int(parse_duration(window) // (TILE * 60))
    parts = [x for k in range(tiles) if t - TILE * k >= 0 for x in [_sum(series, t - TILE * k)] if x is not None]
    return sum(parts) if parts else None


def _check(
    record: str, service: str, t: float, values: Sequence[tuple[Mapping[str, str], int | None]]
) -> dict[str, Any]:  # fmt: skip
    expr = selector(record, [("service", "=", service)])
    samples = [{"labels": selector(record, sorted((k, "=", v) for k, v in labels.items())), "value": value}
               for labels, value in values if value is not None]  # fmt: skip
    return {"expr": expr, "eval_time": f"{int(t * 60)}s", "exp_samples": samples}


def _recorded(spec: Spec, slos: Sequence[_Slo], t: float) -> dict[str, Any]:
    """Which counters (by name and `le`) the per-series record holds at `t`: those with a sample in the lookback."""
    record = schema.RECORD_COUNTER_LAST
    by = f"{schema.RULE_LABEL_COUNTER}, le"
    held = {tuple(sorted(counter.items())) for s in slos for counter, minutes in s.read
            if any(t - LOOKBACK < m <= t for m in minutes)}  # fmt: skip
    return {"expr": f"group by ({by}) ({selector(record, [(schema.RULE_LABEL_COUNTER_SERVICE, '=', spec.service)])})",
            "eval_time": f"{int(t * 60)}s",
            "exp_samples": [{"labels": selector("", [(k, "=", v) for k, v in labels]), "value": 1}
                            for labels in sorted(held)]}  # fmt: skip


def unit_tests(spec: Spec) -> dict[str, Any] | None:
    """The counters test file of one spec (None when no SLO counts events from the source's histograms)."""
    inputs, slos = _inputs(spec)
    if not slos:
        return None
    tests = []
    for t in CHECK_TIMES:
        for record, pick in ((schema.record_sli_total("5m"), "total"), (schema.record_sli_good("5m"), "good")):
            tests.append(_check(record, spec.service, t, [(s.labels, _sum(getattr(s, pick), t)) for s in slos]))
    tests += [_recorded(spec, slos, t) for t in RECORD_TIMES]
    end = CHECK_TIMES[-1]
    for window in record_windows(spec, schema.record_sli_total)[1:]:
        for record, pick in ((schema.record_sli_total(window), "total"), (schema.record_sli_good(window), "good")):
            tests.append(_check(record, spec.service, end,
                                [(s.labels, _window_sum(getattr(s, pick), end, window)) for s in slos]))  # fmt: skip
    name = ("counters as production leaves them: replica a unscraped for 20m (restarting unseen), then "
            "crash-looping; replica d unscraped for 20m, then drained; replica e unscraped for 23m; replica b "
            "joining with requests already counted; replica c gone for 40m; 5m counts checked every half minute "
            "from minute 26, every window's at the end")  # fmt: skip
    return {
        "rule_files": [rules_path(spec).removeprefix("rules/")],
        "evaluation_interval": f"{STEP_S}s",
        "group_eval_order": [g.name for g in rule_groups(spec)],
        "tests": rest_of_fleet(spec)(
            [
                {"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": tests},
                *timing_groups(spec, STEP_S),
            ]
        ),
    }


def path(spec: Spec) -> str:
    """`rules/<service>.rules.counters.test.yaml`, beside the rule file it tests."""
    return f"rules/{spec.service}.rules.counters.test.yaml"


def files(spec: Spec) -> dict[str, Any]:
    """The counters test file, where the spec has an SLO it applies to."""
    tests = unit_tests(spec)
    return {path(spec): tests} if tests is not None else {}


__all__ = ["MINUTES", "REPLICAS", "STEP_S", "files", "path", "unit_tests"]
