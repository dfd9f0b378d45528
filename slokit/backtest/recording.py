"""Recording rules over history: each rule's expression as range queries on the running Prometheus, at exactly the
evaluation times `promtool tsdb create-blocks-from rules` uses, written as OpenMetrics and loaded with one
`promtool tsdb create-blocks-from openmetrics` per dependency level.

Why not `create-blocks-from rules` itself: it sends one range query and writes one TSDB block per rule per 2-hour
slice, so a week of history becomes thousands of tiny blocks per level that Prometheus then has to open and
compact. The values are the same either way (the same engine answers the same queries); only the block layout
differs.

The evaluation grid, as promtool builds it (cmd/promtool/rules.go, `importRule`): for every 2h slice
[B, B + 2h) of the range, the group's evaluation timestamp at or after max(B, start) (the group's phase is
`hash(name, file) % interval`, rules/manager.go `EvalTimestamp`, the same as a live Prometheus), then every
interval up to min(B + 2h - 1s, end), whole seconds. Points are written with their exact millisecond timestamps;
series written this way have no stale markers, as promtool's blocks have none.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from slokit.local.prometheus import LocalPrometheus, PrometheusError

SLICE_MS: Final = 2 * 3600 * 1000  # promtool's default block duration: one query per rule per slice
MAX_POINTS: Final = 10_000  # Prometheus answers at most 11,000 points per series per range query
NS: Final = 1_000_000_000

# ==============================================================================================================
# xxHash64 (cespare/xxhash, which Prometheus' labels.Hash uses): the group phase depends on it
# ==============================================================================================================
_P1: Final = 11400714785074694791
_P2: Final = 14029467366897019727
_P3: Final = 1609587929392839161
_P4: Final = 9650029242287828579
_P5: Final = 2870177450012600261
_M: Final = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of `data`."""
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(a, b) for a, b in zip(v, lanes, strict=True)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = (((h ^ _round(0, lane)) * _P1) + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h = ((_rotl(h ^ _round(0, k), 27) * _P1) + _P4) & _M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = ((_rotl(h ^ ((k * _P1) & _M), 23) * _P2) + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def group_offset_ns(name: str, file: str, interval_ns: int) -> int:
    """A rule group's evaluation phase in nanoseconds: `labels{file, name}.Hash() % interval` (rules/manager.go)."""
    key = b"file\xff" + file.encode() + b"\xffname\xff" + name.encode() + b"\xff"
    return xxh64(key) % interval_ns


# ==============================================================================================================
# promtool's evaluation grid
# ==============================================================================================================
def _go_time_text(ns: int) -> str:
    """How client_golang writes a time in a query (`float64(Unix()) + float64(Nanosecond())/1e9`, 'f', -1)."""
    value = float(ns // NS) + float(ns % NS) / 1e9
    return repr(value)


def _server_ms(text: str) -> int:
    """How Prometheus' API reads that text back (web/api/v1 parseTime, then milliseconds)."""
    value = float(text)
    frac, whole = math.modf(value)
    frac = math.floor(frac * 1000 + 0.5) / 1000  # Go math.Round on a non-negative value
    ns = int(frac * NS)
    return int(whole) * 1000 + ns // 1_000_000


@dataclass(frozen=True)
class Query:
    """One range query: start as sent (text), its millisecond grid start and end, and the step in seconds."""

    start_text: str
    start_ms: int
    end_ms: int
    step: int

    @property
    def times(self) -> range:
        """The evaluation timestamps it returns (ms)."""
        return range(self.start_ms, self.end_ms + 1, self.step * 1000)


def promtool_queries(start: int, end: int, interval: int, offset_ns: int) -> list[Query]:
    """The range queries `promtool tsdb create-blocks-from rules` sends for one rule, merged where their grids
    continue each other, up to MAX_POINTS points a query. `start`, `end`: whole unix seconds."""
    interval_ns = interval * NS
    slices: list[Query] = []
    block = SLICE_MS * ((start * 1000) // SLICE_MS)
    while block <= end * 1000:
        current = max(block // 1000, start)
        shifted = current * NS - offset_ns
        aligned = shifted - shifted % interval_ns + offset_ns
        while aligned // NS < current:
            aligned += interval_ns
        upto = min((block + SLICE_MS - 1) // 1000, end)
        if upto * NS < aligned:
            break
        text = _go_time_text(aligned)
        slices.append(Query(text, _server_ms(text), upto * 1000, interval))
        block += SLICE_MS
    merged: list[Query] = []
    step_ms = interval * 1000
    for q in slices:
        times = q.times
        if not len(times):
            continue
        last = times[-1]
        if merged:
            prev = merged[-1]
            prev_last = prev.times[-1]
            points = (last - prev.start_ms) // step_ms + 1
            if q.start_ms == prev_last + step_ms and points <= MAX_POINTS:
                merged[-1] = Query(prev.start_text, prev.start_ms, last, interval)
                continue
        merged.append(Query(q.start_text, q.start_ms, last, interval))
    return merged


# ==============================================================================================================
# Evaluating one level
# ==============================================================================================================
@dataclass(frozen=True)
class Rule:
    """A recording rule as evaluated: record name, expression, static labels, its group's interval and phase."""

    record: str
    expr: str
    labels: Mapping[str, str]
    interval: int
    offset_ns: int


def _om_timestamp(ms: int) -> str:
    """Seconds text that promtool's OpenMetrics parser (`int64(ts * 1000)`) reads back as exactly `ms`."""
    value = ms / 1000
    while int(value * 1000) < ms:
        value = math.nextafter(value, math.inf)
    while int(value * 1000) > ms:
        value = math.nextafter(value, -math.inf)
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class LevelStats:
    """What one level wrote."""

    queries: int = 0
    series: int = 0
    samples: int = 0


def evaluate_level(
    server: LocalPrometheus, rules: Sequence[Rule], start: int, end: int, out: IO[str], *, parallel: int = 3,
    timeout: float = 1800.0,
) -> LevelStats:  # fmt: skip
    """Range-query every rule over [start, end] on promtool's grid and write the results as OpenMetrics to `out`
    (no `# EOF`: the caller ends the file). Each series' samples go out in time order."""
    tasks = [(rule, q) for rule in rules for q in promtool_queries(start, end, rule.interval, rule.offset_ns)]
    stats = LevelStats(queries=len(tasks))
    seen: set[str] = set()

    def run(task: tuple[Rule, Query]) -> list[tuple[str, list[tuple[str, str]]]]:
        rule, q = task
        end_text = f"{q.end_ms // 1000}.{q.end_ms % 1000:03d}"
        data = server.raw_query_range(rule.expr, q.start_text, end_text, q.step, timeout=timeout)
        if data.get("resultType") != "matrix":
            raise PrometheusError(
                f"recording rule {rule.record}: expected a range vector, got {data.get('resultType')}"
            )
        stamps = {ms: _om_timestamp(ms) for ms in q.times}
        out_series = []
        for item in data["result"]:
            labels = {k: v for k, v in item["metric"].items() if k != "__name__"}
            labels.update(rule.labels)
            head = rule.record + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"
            points = []
            for t, v in item["values"]:
                stamp = stamps.get(round(float(t) * 1000))
                if stamp is not None:
                    points.append((stamp, v))
            out_series.append((head, points))
        return out_series

    def results() -> Iterator[list[tuple[str, list[tuple[str, str]]]]]:
        if parallel <= 1:
            yield from map(run, tasks)
            return
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            yield from pool.map(run, tasks)  # in submission order: each series' chunks in time order

    for answer in results():
        for head, points in answer:
            if head not in seen:
                seen.add(head)
                stats.series += 1
            out.writelines(f"{head} {v} {stamp}\n" for stamp, v in points)
            stats.samples += len(points)
    return stats


def write_level(
    server: LocalPrometheus, rules: Sequence[Rule], start: int, end: int, path: Path, *, parallel: int = 3
) -> LevelStats:
    """`evaluate_level` into an OpenMetrics file at `path` (with `# EOF`)."""
    with path.open("w", encoding="utf-8") as handle:
        stats = evaluate_level(server, rules, start, end, handle, parallel=parallel)
        handle.write("# EOF\n")
    return stats
