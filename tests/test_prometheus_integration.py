"""The generated rules on a real Prometheus, checked against values computed in Python from the same raw data.

History: a day and a half of a TTFT histogram with uneven, hour-by-hour traffic and error shares (integer counts
per minute, so every counter is exact), backfilled with `promtool tsdb create-blocks-from openmetrics`, including
a slow half hour at yesterday's same hour. The recording rules are then evaluated over that history by real
Prometheus, level by level (`promtool tsdb create-blocks-from rules`: a level only reads levels below it, and a
restart loads each level's blocks), so the tiled long windows have the history they need. Finally a small exporter
in the test serves the same counters live, Prometheus scrapes it and evaluates the rules itself.

Checked through the HTTP API: events, good events, error ratios and burn rates for 5m to 1d, p99 and the same-hour
baseline at the end of the history; the live 5m error ratio, burn rate and baseline.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit import schema
from slokit.generate.model import RecordingRule
from slokit.generate.rules import rule_groups, window_plans
from slokit.local.procs import free_port
from slokit.local.prometheus import (
    LocalPrometheus,
    OpenMetricsWriter,
    PrometheusError,
    backfill_openmetrics,
    backfill_rules,
    move_blocks,
)
from slokit.promql import histogram_quantile
from slokit.sources import exporter as exporter_source
from slokit.spec import Spec, load_spec_text
from slokit.units import format_le, prom_duration

SPEC = """
version: slokit/v1
service: itest
source: slokit
window: 28d
models: [{name: m1, max_num_seqs: 8}]
classes:
  - name: chat
    slos:
      ttft:
        objective: {percentile: 95, threshold: 500ms}
alerting:
  baseline: {ratio: 1.5, offset: 1d, min_rps: 0.05}
"""
LABELS = {"model": "m1", "class": "chat", "engine": "0"}  # + instance: the replica
JOB = "itest"  # the scrape job of the live part; the backfilled series carry it too, as scraped ones would
SLO = {"service": "itest", "model": "m1", "class": "chat", "slo": "ttft"}
GOOD_LE, SLOW_LE, BASELINE_LE = 0.3, 1.0, 1.5  # buckets the requests land in
HISTORY = 86400 + 2 * 3600  # seconds of backfilled history before the end
CHECKED_WINDOWS = (300, 1800, 3600, 7200, 21600, 86400)
RESTART_AT = -3 * 3600 - 130  # replica a's last sample before it crashes (inside a tile), relative to the end
RESTART_GAP = 8 * 60  # then no sample for 7 minutes; it comes back with every counter from zero
SECOND_REPLICA_FROM = -5 * 3600 + 90  # replica b (same engine="0") starts serving, first scraped with counts
MISSED = (-1800, -1740, -6 * 3600, -21600 + 300, -86400 + 3600)  # missed scrapes, tile boundaries among them
CLEAN = ((-900, 60), (-86400 - 900, -86400 + 900))  # no faults where p99 and the baseline are checked


class Traffic:
    """Integer requests per minute, per bucket, per replica, keyed to the history's own end (never the clock).

    Yesterday from 45 minutes before the end's time of day to 90 minutes after it, every request is slow; the live
    part reads that stretch as its baseline. Elsewhere the traffic and the error share change every hour (counted
    from the end), highest error share at the lowest traffic. Faults: replica a restarts (counter reset, a 7-minute
    gap), replica b appears mid-history with the same `engine` label, about 1% of scrapes are missed at random and
    a few on tile boundaries.
    """

    def __init__(self, end: int) -> None:
        self.end = end
        self.start = end - HISTORY
        self.yesterday = end - 86400
        rng = random.Random(7919)  # the same faults, relative to the end, in every run
        self.missed = {end + m for m in MISSED}
        for t in range(self.start + 60, end + 1, 60):
            rel = t - end
            if rng.random() < 0.01 and not any(a <= rel < b for a, b in CLEAN):
                self.missed.add(t)

    def minute(self, t: int, replica: str) -> dict[float, int]:
        """Requests one replica serves in the minute starting at `t`, keyed by the bucket bound they fall in."""
        t = min(t, self.end - 60)
        rel = t - self.end
        if replica == "a" and RESTART_AT <= rel < RESTART_AT + RESTART_GAP - 60:
            return {}  # crashed: nothing served until it is back
        if replica == "b" and rel < SECOND_REPLICA_FROM - 60:
            return {}
        if self.yesterday - 2700 <= t < self.yesterday + 5400:
            return {BASELINE_LE: 120, GOOD_LE: 0}  # yesterday around this time: every request in (1s, 1.5s]
        hour = (t - self.start) // 3600
        total = (60, 90, 240, 150, 30)[hour % 5] // (2 if replica == "b" else 1)
        slow = (20, 9, 6, 3, 15)[hour % 5] // (2 if replica == "b" else 1)
        return {SLOW_LE: slow, GOOD_LE: total - slow}

    def samples(self, bounds: tuple[float, ...], replica: str) -> dict[int, list[int]]:
        """Scraped counter values (cumulative per bucket, +Inf last) at each scrape that happened."""
        out: dict[int, list[int]] = {}
        counts = [0] * (len(bounds) + 1)
        for t in range(self.start, self.end + 1, 60):
            rel = t - self.end
            if replica == "a" and rel == RESTART_AT + RESTART_GAP - 60:
                counts = [0] * len(counts)  # the new process starts from zero
            scraped = t not in self.missed
            if replica == "a" and RESTART_AT < rel < RESTART_AT + RESTART_GAP:
                scraped = False
            if replica == "b" and rel < SECOND_REPLICA_FROM:
                scraped = False
            if scraped:
                out[t] = list(counts)
            for bound, n in self.minute(t, replica).items():
                index = bounds.index(bound)
                for i in range(index, len(counts)):
                    counts[i] += n
        return out

    def per_second(self, bounds: tuple[float, ...]) -> list[float]:
        """Live slope (per second) of replica a's cumulative bucket counters after `end`."""
        minute = self.minute(self.end, "a")
        return [sum(n for b, n in minute.items() if b <= bound) / 60 for bound in bounds] + [sum(minute.values()) / 60]


def truth(series: list[dict[int, list[int]]], end: int, window: int, index: int) -> int:
    """Events counted by the raw counters in (end - window, end], in plain Python.

    Per series, the sum of its sample-to-sample increases whose later sample lies in the window, a drop (counter
    reset) counting the value after it; a series first scraped inside the window counts from zero.
    """
    total = 0
    for samples in series:
        before: int | None = None
        for t in sorted(samples):
            value = samples[t][index]
            if t > end:
                break
            if t > end - window:
                total += value if before is None or value < before else value - before
            before = value
    return total


def _levels(spec: Spec) -> list[list[tuple[str, RecordingRule]]]:
    """Recording rules by dependency depth (raw inputs: 0), with their group names."""
    rules = [(g.name, r) for g in rule_groups(spec) for r in g.rules if isinstance(r, RecordingRule)]
    names = {r.record for _, r in rules}
    depth: dict[str, int] = {}

    def level(record: str) -> int:
        if record not in depth:
            deps = [
                n for n in names if n != record and any(re.search(re.escape(n) + r"\b", r.expr) for _, r in rules
                                                        if r.record == record)
            ]  # fmt: skip
            depth[record] = 1 + max((level(d) for d in deps), default=0)
        return depth[record]

    by_level: dict[int, list[tuple[str, RecordingRule]]] = {}
    for group, rule in rules:
        by_level.setdefault(level(rule.record), []).append((group, rule))
    return [by_level[k] for k in sorted(by_level)]


def _rule_file(path: Path, rules: list[tuple[str, RecordingRule]], spec: Spec, interval: str | None = None) -> Path:
    groups: dict[str, list[dict[str, Any]]] = {}
    for group, rule in rules:
        groups.setdefault(group, []).append(rule.to_data())
    intervals = {g.name: g.interval for g in rule_groups(spec)}
    data = {"groups": [{"name": n, "interval": interval or intervals[n], "rules": r} for n, r in groups.items()]}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


class _Exporter(BaseHTTPRequestHandler):
    traffic: Traffic
    bounds: tuple[float, ...]
    at_end: list[int]
    slope: list[float]
    metric: str  # the histogram the SLO reads

    def do_GET(self) -> None:
        now = time.time()
        values = [c + s * (now - self.traffic.end) for c, s in zip(self.at_end, self.slope, strict=True)]
        name = self.metric
        lab = ",".join(f'{k}="{v}"' for k, v in LABELS.items())  # Prometheus adds instance (the target)
        lines = [f"# TYPE {name} histogram"]
        for bound, value in zip([*self.bounds, math.inf], values, strict=True):
            le = "+Inf" if math.isinf(bound) else format_le(bound)
            lines.append(f'{name}_bucket{{{lab},le="{le}"}} {value!r}')
        lines += [f"{name}_count{{{lab}}} {values[-1]!r}", f"{name}_sum{{{lab}}} 0"]
        finished = exporter_source.METRICS.requests_finished
        lines += [f"# TYPE {finished} counter", f'{finished}{{{lab},finish_reason="stop"}} {values[-1]!r}']
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def exporter_factory() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(handler_attrs: dict[str, Any]) -> tuple[int, Any]:
        handler = type("Handler", (_Exporter,), dict(handler_attrs))
        port = free_port()
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return port, handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class History:
    """One model's backfilled history: it ends at `end`, and `instances` maps its replicas a and b to their
    `instance` label."""

    model: str
    end: int
    instances: dict[str, str]


def _backfill_and_check(
    spec: Spec, histories: list[History], tmp_path: Path, prometheus_factory: Any
) -> tuple[LocalPrometheus, list[tuple[Traffic, dict[str, dict[int, list[int]]]]]]:
    """Backfill each model's faulty history ending at its own end, evaluate the rules over all of them at once,
    and check every model's windows at its end against Python.

    The histories share one server and one pass of the rules per level: each rule evaluation reads every model's
    series, as in production, and the checks name each model's SLO by every label, so a term that mixed models
    would show. Returns the (running) server and each history's traffic and samples, in order."""
    bounds = spec.buckets(schema.Sli.TTFT)
    traffics = [Traffic(h.end) for h in histories]
    all_series = [{r: traffic.samples(bounds, r) for r in ("a", "b")} for traffic in traffics]

    # -- raw history, backfilled.
    name = spec.latency_metric(schema.Sli.TTFT, spec.classes[0])
    finished = spec.metrics.requests_finished
    writer = OpenMetricsWriter()
    writer.family(name, "histogram")
    rows: list[tuple[dict[str, str], int, list[int]]] = []
    for history, series in zip(histories, all_series, strict=True):
        for replica, samples in series.items():
            labels = {**LABELS, "model": history.model, "job": JOB, "instance": history.instances[replica]}
            rows += [(labels, t, counts) for t, counts in samples.items()]
    for labels, t, counts in rows:
        for bound, value in zip([*bounds, math.inf], counts, strict=True):
            le = "+Inf" if math.isinf(bound) else format_le(bound)
            writer.sample(name, f"{name}_bucket", {**labels, "le": le}, value, t)
        writer.sample(name, f"{name}_count", labels, counts[-1], t)
    writer.family(finished.removesuffix("_total"), "counter")
    for labels, t, counts in rows:
        writer.sample(finished.removesuffix("_total"), finished, {**labels, "finish_reason": "stop"}, counts[-1], t)
    server: LocalPrometheus = prometheus_factory()
    backfill_openmetrics(writer.text(), server.data_dir, workdir=tmp_path)

    # -- the rules over that history, one dependency level at a time (each level reads the ones below it).
    first = min(traffic.start for traffic in traffics) + 3600
    last = max(h.end for h in histories)
    server.start()
    for depth, rules in enumerate(_levels(spec)):
        # One path for every level: a group's evaluation phase hashes its name and file, as in production.
        rule_file = _rule_file(tmp_path / "rules.yaml", rules, spec)
        blocks = backfill_rules([rule_file], server, first, last, tmp_path / f"blocks{depth}")
        server.stop()
        move_blocks(blocks, server.data_dir)
        server.start()

    for history, traffic, series in zip(histories, traffics, all_series, strict=True):
        _check_windows(spec, server, history, traffic, series)
    return server, list(zip(traffics, all_series, strict=True))


def _check_windows(
    spec: Spec, server: LocalPrometheus, history: History, traffic: Traffic, series: dict[str, dict[int, list[int]]]
) -> None:
    """Every window of one model at its history's end equals the raw counters' events in Python, across the
    restart, the new replica and the missed scrapes (sample-delta tiles add up exactly), for 5m to 1d; its p99 and
    same-hour baseline too."""
    end = history.end
    bounds = spec.buckets(schema.Sli.TTFT)
    labels = {**SLO, "model": history.model}
    slo = ",".join(f'{k}="{v}"' for k, v in labels.items())
    where = f"model {history.model}, end {time.strftime('%H:%M', time.gmtime(end))}"

    def at_end(record: str) -> float:
        return server.query(f"{record}{{{slo}}}", at=end).scalar()

    # Each record is compared at the time it was evaluated (the last evaluation at or before the end), read back
    # with timestamp().
    good_index = bounds.index(0.5)
    budget = 1 - 0.95
    both = list(series.values())
    plans = {p.window: p for p in window_plans(spec)}

    def evaluated(window: float, at: float) -> int:
        """When the newest raw data a window read at `at` stands for was read: its 5m tile's evaluation.

        Each group evaluates at its own phase, so a window read from another group's records ends at that
        group's latest evaluation; follow the head block down to the 5m tile."""
        when = server.query(f"timestamp({schema.record_sli_total(prom_duration(window))}{{{slo}}})", at=at).scalar()
        blocks = plans[window].blocks
        return int(when) if not blocks else evaluated(blocks[0].window, when)

    for window in CHECKED_WINDOWS:
        w = f"{prom_duration(window)}, {where}"
        when = evaluated(window, end)
        assert end - 300 < when <= end, w
        total, good = truth(both, when, window, -1), truth(both, when, window, good_index)
        assert at_end(schema.record_sli_total(prom_duration(window))) == pytest.approx(total, rel=1e-9), w
        assert at_end(schema.record_sli_good(prom_duration(window))) == pytest.approx(good, rel=1e-9), w
        ratio = (total - good) / total
        assert at_end(schema.record_error_ratio(prom_duration(window))) == pytest.approx(ratio, rel=1e-9), w
        assert at_end(schema.record_burn_rate(prom_duration(window))) == pytest.approx(ratio / budget, rel=1e-9), w

    # The 1d error ratio is event-weighted: the mean of the hourly ratios would be far off with this traffic.
    total, good = truth(both, end, 86400, -1), truth(both, end, 86400, good_index)
    hourly = [(truth(both, end - h * 3600, 3600, -1), truth(both, end - h * 3600, 3600, good_index)) for h in range(24)]
    mean_of_ratios = sum((t - g) / t for t, g in hourly) / 24
    assert abs(mean_of_ratios - (total - good) / total) > 0.05 * (total - good) / total, where

    def p99(at: int) -> float:
        rates = [
            sum(s[at][i] - s[at - 300][i] for s in both if at in s and at - 300 in s) / 300
            for i in range(len(bounds) + 1)
        ]
        return histogram_quantile(0.99, bounds, rates)

    quantile = server.query(
        f'{schema.RECORD_LATENCY_QUANTILE}{{service="itest",model="{history.model}",quantile="0.99"}}', at=end
    ).scalar()  # fmt: skip
    assert quantile == pytest.approx(p99(end), rel=1e-9), where
    baseline = at_end(schema.RECORD_P99_BASELINE)
    assert baseline == pytest.approx(p99(end - 86400), rel=1e-9), where
    assert 1.0 < baseline <= 1.5, where


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_recorded_values_match_python_on_real_prometheus(
    tmp_path: Path, prometheus_factory: Any, exporter_factory: Any
) -> None:
    spec = load_spec_text(SPEC, "itest.yaml")
    bounds = spec.buckets(schema.Sli.TTFT)
    # The exporter serving replica a live is started first: its target address is replica a's `instance`.
    port, handler = exporter_factory({"bounds": bounds})
    end = int(time.time()) // 60 * 60 - 600
    history = History("m1", end, {"a": f"127.0.0.1:{port}", "b": "127.0.0.1:1"})
    server, [(traffic, series)] = _backfill_and_check(spec, [history], tmp_path, prometheus_factory)
    baseline = server.query(schema.RECORD_P99_BASELINE + '{service="itest"}', at=end).scalar()

    # -- live: the exporter continues replica a's counters; Prometheus scrapes it and runs the rules itself.
    handler.traffic, handler.at_end, handler.slope = traffic, series["a"][end], traffic.per_second(bounds)
    handler.metric = spec.latency_metric(schema.Sli.TTFT, spec.classes[0])
    server.stop()
    server.static_targets = {JOB: [f"127.0.0.1:{port}"]}
    server.scrape_interval = "1s"
    live_rules = [r for level in _levels(spec) for r in level]
    server.rule_files = [_rule_file(tmp_path / "live.yaml", live_rules, spec, interval="5s")]
    server.evaluation_interval = "5s"
    started = time.time()
    server.start()
    ratio_query = schema.record_error_ratio("5m") + '{service="itest"}'
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answer = server.query(ratio_query)
        if answer.samples and answer.samples[0].points[-1][0] > started + 20:
            break
        time.sleep(1)
    live = server.query(f"{ratio_query}[10s]")
    assert live.samples, server.log_tail()
    stamp, value = live.samples[0].points[-1]
    slope = traffic.per_second(bounds)
    good_index = bounds.index(0.5)
    expected = (slope[-1] - slope[good_index]) / slope[-1]
    # The 5m tile ending now spans the backfill's last samples and the live ones; its ratio is the live share
    # to within the integer counts of the backfilled minutes (all at the same share).
    assert value == pytest.approx(expected, rel=2e-2)
    burn = server.query(schema.record_burn_rate("5m") + '{service="itest"}', at=stamp).scalar()
    assert burn == pytest.approx(value / 0.05, rel=1e-9)
    live_baseline = server.query(schema.RECORD_P99_BASELINE + '{service="itest"}', at=stamp).scalar()
    assert live_baseline == pytest.approx(baseline, rel=1e-9)  # yesterday's slow half hour, read at offset 1d


# Fixed ends at different hours of a day and minutes of an hour: the windows must match Python at every one. Each
# end is one model's history (a day and two hours before it); the five share one server and one pass of the rules.
DAY = 1764560400  # 2025-12-01 03:40 UTC
PINNED_ENDS = tuple(  # every minute of a 5m tile (0 to 4) once, at hours spread over a day
    DAY + h * 3600 + m * 60 for h, m in ((0, 0), (1, 31), (7, 17), (15, 14), (23, 8))
)
PINNED_SPEC = SPEC.replace(
    "models: [{name: m1, max_num_seqs: 8}]",
    "models: [" + ", ".join(f"{{name: m{i}, max_num_seqs: 8}}" for i in range(1, len(PINNED_ENDS) + 1)) + "]",
)


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_recorded_windows_match_python_at_pinned_hours(tmp_path: Path, prometheus_factory: Any) -> None:
    spec = load_spec_text(PINNED_SPEC, "itest.yaml")
    assert len(spec.models) == len(PINNED_ENDS)
    histories = [
        History(f"m{i}", end, {"a": f"10.0.{i}.1:8000", "b": f"10.0.{i}.2:8000"})
        for i, end in enumerate(PINNED_ENDS, 1)
    ]
    server, _ = _backfill_and_check(spec, histories, tmp_path, prometheus_factory)
    server.stop()


@pytest.mark.prometheus
def test_local_prometheus_reload_and_rule_errors(tmp_path: Path, prometheus_factory: Any) -> None:
    """The helper others use: rules load, reload picks up a rewritten file, and a failing rule is reported."""
    rules = tmp_path / "r.yaml"
    one = [{"record": "slokit:test_one", "expr": "vector(1)"}]
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "interval": "1s", "rules": one}]}))
    server: LocalPrometheus = prometheus_factory(rule_files=[rules], evaluation_interval="1s")
    server.start()
    server.wait_rules_evaluated(timeout=30)
    assert server.wait_for("slokit:test_one", timeout=30).scalar() == 1
    two_series = 'label_replace(vector(1), "a", "x", "", "") or label_replace(vector(1), "a", "y", "", "")'
    bad = [
        {"record": "slokit:test_two", "expr": "vector(2)"},
        {"record": "slokit:test_bad", "expr": f"vector(1) + on () group_left () ({two_series})"},
    ]
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "interval": "1s", "rules": bad}]}))
    server.reload()
    assert server.wait_for("slokit:test_two", timeout=30).scalar() == 2
    with pytest.raises(PrometheusError, match="slokit:test_bad"):
        server.wait_rules_evaluated(timeout=30)
    answer = server.query("vector(3)", stats=True)
    assert answer.scalar() == 3 and answer.stats
