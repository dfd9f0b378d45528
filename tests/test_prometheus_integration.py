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
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from slokit import schema
from slokit.generate.model import RecordingRule
from slokit.generate.promtool_tests import histogram_quantile
from slokit.generate.rules import rule_groups
from slokit.local.procs import free_port
from slokit.local.prometheus import (
    LocalPrometheus,
    OpenMetricsWriter,
    PrometheusError,
    backfill_openmetrics,
    backfill_rules,
    move_blocks,
)
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
LABELS = {"model": "m1", "class": "chat", "engine": "0"}
SLO = {"service": "itest", "model": "m1", "class": "chat", "slo": "ttft"}
GOOD_LE, SLOW_LE, BASELINE_LE = 0.3, 1.0, 1.5  # buckets the requests land in
HISTORY = 86400 + 2 * 3600  # seconds of backfilled history before the end
CHECKED_WINDOWS = (300, 1800, 3600, 7200, 21600, 86400)


class Traffic:
    """Integer requests per minute, per bucket, for each minute; constant after `end` (the live part).

    Yesterday from 45 minutes before the same time to 90 minutes after it, every request is slow; the live part
    reads that stretch as its baseline.
    """

    def __init__(self, end: int) -> None:
        self.end = end
        self.start = end - HISTORY
        self.yesterday = end - 86400

    def minute(self, t: int) -> dict[float, int]:
        """Requests observed in the minute starting at `t`, keyed by the bucket bound they fall in."""
        t = min(t, self.end - 60)
        if self.yesterday - 2700 <= t < self.yesterday + 5400:
            return {BASELINE_LE: 120, GOOD_LE: 0}  # yesterday around this time: every request in (1s, 1.5s]
        if 30 <= (t // 60) % 60 < 50:
            return {SLOW_LE: 6, GOOD_LE: 114}  # the same traffic around every hh:40, where windows end
        hour = t // 3600
        total = (60, 90, 240, 150, 30)[hour % 5]  # elsewhere uneven traffic
        slow = (20, 9, 6, 3, 15)[hour % 5]  # and error shares highest when traffic is low
        return {SLOW_LE: slow, GOOD_LE: total - slow}

    def cumulative(self, bounds: tuple[float, ...]) -> dict[int, list[int]]:
        """Counter values (cumulative per bucket, +Inf last) at every minute from start to end."""
        out: dict[int, list[int]] = {}
        counts = [0] * (len(bounds) + 1)
        for t in range(self.start, self.end + 1, 60):
            out[t] = list(counts)
            for bound, n in self.minute(t).items():
                index = bounds.index(bound)
                for i in range(index, len(counts)):
                    counts[i] += n
        return out

    def per_second(self, bounds: tuple[float, ...]) -> list[float]:
        """Live slope (per second) of each cumulative bucket counter after `end`."""
        minute = self.minute(self.end)
        return [sum(n for b, n in minute.items() if b <= bound) / 60 for bound in bounds] + [sum(minute.values()) / 60]


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

    def do_GET(self) -> None:
        now = time.time()
        values = [c + s * (now - self.traffic.end) for c, s in zip(self.at_end, self.slope, strict=True)]
        name = schema.SLOKIT_METRICS.latency[schema.Sli.TTFT]
        lab = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
        lines = [f"# TYPE {name} histogram"]
        for bound, value in zip([*self.bounds, math.inf], values, strict=True):
            le = "+Inf" if math.isinf(bound) else format_le(bound)
            lines.append(f'{name}_bucket{{{lab},le="{le}"}} {value!r}')
        lines += [f"{name}_count{{{lab}}} {values[-1]!r}", f"{name}_sum{{{lab}}} 0"]
        finished = schema.SLOKIT_METRICS.requests_finished
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

    def start(traffic: Traffic, bounds: tuple[float, ...], at_end: list[int]) -> int:
        handler = type("Handler", (_Exporter,), {"traffic": traffic, "bounds": bounds, "at_end": at_end,
                                                 "slope": traffic.per_second(bounds)})  # fmt: skip
        port = free_port()
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _expected_window(cumulative: dict[int, list[int]], end: int, window: int, good_index: int) -> tuple[int, int]:
    total = cumulative[end][-1] - cumulative[end - window][-1]
    good = cumulative[end][good_index] - cumulative[end - window][good_index]
    return total, good


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_recorded_values_match_python_on_real_prometheus(
    tmp_path: Path, prometheus_factory: Any, exporter_factory: Any
) -> None:
    spec = load_spec_text(SPEC, "itest.yaml")
    bounds = spec.buckets(schema.Sli.TTFT)
    # The history ends at hh:40, at least 10 minutes ago. Each rule group evaluates at its own phase, so a window
    # read from another group's records ends up to one interval before the reader's time. Traffic is the same
    # around every hh:40, so for 5m to 6h that shift changes nothing and the records equal the exact events of
    # (end - W, end]; the 1d window starts in yesterday's slow stretch, so it is checked to within that shift.
    now = int(time.time()) - 600
    end = now - (now - 2400) % 3600
    traffic = Traffic(end)
    cumulative = traffic.cumulative(bounds)

    # -- raw history, backfilled.
    name = spec.metrics.latency[schema.Sli.TTFT]
    writer = OpenMetricsWriter()
    writer.family(name, "histogram")
    writer.family(spec.metrics.requests_finished.removesuffix("_total"), "counter")
    for t, counts in cumulative.items():
        for bound, value in zip([*bounds, math.inf], counts, strict=True):
            le = "+Inf" if math.isinf(bound) else format_le(bound)
            writer.sample(name, f"{name}_bucket", {**LABELS, "le": le}, value, t)
        writer.sample(name, f"{name}_count", LABELS, counts[-1], t)
        writer.sample(spec.metrics.requests_finished.removesuffix("_total"), spec.metrics.requests_finished,
                      {**LABELS, "finish_reason": "stop"}, counts[-1], t)  # fmt: skip
    server: LocalPrometheus = prometheus_factory()
    backfill_openmetrics(writer.text(), server.data_dir, workdir=tmp_path)

    # -- the rules over that history, one dependency level at a time (each level reads the ones below it).
    server.start()
    for depth, rules in enumerate(_levels(spec)):
        # One path for every level: a group's evaluation phase hashes its name and file, as in production.
        rule_file = _rule_file(tmp_path / "rules.yaml", rules, spec)
        blocks = backfill_rules([rule_file], server, traffic.start + 600, end, tmp_path / f"blocks{depth}")
        server.stop()
        move_blocks(blocks, server.data_dir)
        server.start()

    def at_end(record: str) -> float:
        return server.query(record + "{" + ",".join(f'{k}="{v}"' for k, v in SLO.items()) + "}", at=end).scalar()

    good_index = bounds.index(0.5)
    budget = 1 - 0.95
    for window in CHECKED_WINDOWS:
        w = prom_duration(window)
        total, good = _expected_window(cumulative, end, window, good_index)
        tolerance = 1e-9 if window < 86400 else 5e-3  # 1d: up to 2m of yesterday's slow stretch at the edge
        assert at_end(schema.record_sli_total(w)) == pytest.approx(total, rel=tolerance), w
        assert at_end(schema.record_sli_good(w)) == pytest.approx(good, rel=tolerance), w
        ratio = (total - good) / total
        assert at_end(schema.record_error_ratio(w)) == pytest.approx(ratio, rel=tolerance * 10), w
        assert at_end(schema.record_burn_rate(w)) == pytest.approx(ratio / budget, rel=tolerance * 10), w

    # The 1d error ratio is event-weighted: the mean of the hourly ratios would be far off with this traffic.
    w1d = prom_duration(86400)
    total, good = _expected_window(cumulative, end, 86400, good_index)
    hourly = [_expected_window(cumulative, end - h * 3600, 3600, good_index) for h in range(24)]
    mean_of_ratios = sum((t - g) / t for t, g in hourly) / 24
    assert abs(mean_of_ratios - (total - good) / total) > 0.1 * (total - good) / total
    assert at_end(schema.record_error_ratio(w1d)) == pytest.approx((total - good) / total, rel=0.05)

    def p99(at: int) -> float:
        rates = [(cumulative[at][i] - cumulative[at - 300][i]) / 300 for i in range(len(bounds) + 1)]
        return histogram_quantile(0.99, bounds, rates)

    quantile = server.query(
        f'{schema.RECORD_LATENCY_QUANTILE}{{service="itest",quantile="0.99"}}', at=end
    ).scalar()  # fmt: skip
    assert quantile == pytest.approx(p99(end), rel=1e-9)
    baseline = at_end(schema.RECORD_P99_BASELINE)
    assert baseline == pytest.approx(p99(end - 86400), rel=1e-9)
    assert 1.0 < baseline <= 1.5

    # -- live: the exporter continues the same counters; Prometheus scrapes it and runs the rules itself.
    port = exporter_factory(traffic, bounds, cumulative[end])
    server.stop()
    server.static_targets = {"itest": [f"127.0.0.1:{port}"]}
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
    expected = (slope[-1] - slope[good_index]) / slope[-1]
    assert value == pytest.approx(expected, rel=1e-3)
    burn = server.query(schema.record_burn_rate("5m") + '{service="itest"}', at=stamp).scalar()
    assert burn == pytest.approx(expected / budget, rel=1e-3)
    live_baseline = server.query(schema.RECORD_P99_BASELINE + '{service="itest"}', at=stamp).scalar()
    assert live_baseline == pytest.approx(baseline, rel=1e-9)  # yesterday's slow half hour, read at offset 1d


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
