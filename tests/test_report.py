"""`slokit report` on a real Prometheus: every number of report.json against Python's own count of the raw data.

History: 12 hours of per-minute raw series, anchored to a fixed end E (2025-12-04T00:00:00Z, as in
test_backtest.py), so nothing depends on the hour the test runs; the Prometheus keeps 100 years of data, so that old
history is never deleted, and every query asks at E. Two chat engines (one restarts at E-3h: its counters reset; the
other misses ten minutes of scrapes at E-5h), a TTFT incident at E-4h, an ITL incident at E-90m, a batch class with
an E2E incident at E-150m, engine gauges and counters that move with the chat incident (the running batch
alternates, so its mean and its largest value differ), a class with no traffic at all, and two firing episodes of an
alert in `ALERTS`. The first hour is quiet, so every recorded window covers all events. The generated recording
rules are evaluated over that history by real Prometheus (level by level, as in test_prometheus_integration.py),
then `slokit report` runs as a subprocess over --from E-6h --to E.

The expected figures are computed here from the per-minute truth (events a missed scrape hid are carried by the
next sample; a reset sample carries the events since the restart), with this file's own percentile, window,
`rate()` and interpolation code. The SLO-window figures are the one exception: they are compared exactly with the
records Prometheus stores, and within 2% with the truth (see the comment at that check).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slokit import schema
from slokit.local.prometheus import (
    LocalPrometheus,
    OpenMetricsWriter,
    backfill_openmetrics,
    backfill_rules,
    move_blocks,
)
from slokit.plan.roofline import (
    decode_tokens_per_second,
    expected_decode_curve,
    expected_decode_tokens_per_second,
    plan_for_model,
)
from slokit.promql import histogram_quantile
from slokit.schema import Sli
from slokit.spec import PERCENTILES, Spec, load_spec_text
from slokit.units import format_le, prom_duration
from tests.test_prometheus_integration import _levels, _rule_file

SPEC = """
version: slokit/v1
service: rtest
source: slokit
window: 28d
models:
  - {name: llama-3-8b, gpu: h100-sxm, tensor_parallel: 1, max_num_seqs: 64}
  - {name: batchm, max_num_seqs: 16}
classes:
  - name: chat
    models: [llama-3-8b]
    slos:
      ttft:
        objective: {percentile: 95, threshold: 500ms}
        tiers:
          target:     {p50: 200ms, p95: 500ms}
          acceptable: {p50: 300ms, p95: 1s}
          critical:   {p50: 1s,    p95: 2s}
      itl:
        objective: {percentile: 95, threshold: 50ms}
  - name: batch
    models: [batchm]
    match: {header: batch}
    slos:
      e2e:
        objective: {percentile: 99, threshold: 30s}
        consistency: {max_p99_over_p50: 1.6}
  - name: idle
    models: [llama-3-8b]
    match: {header: idle}
    slos:
      ttft:
        objective: {percentile: 99, threshold: 300ms}
"""
HOUR = 3600
HISTORY = 12 * HOUR
PERIOD = 6 * HOUR
STEP = 60  # the report's step for a 6h period (checked below)
WIDTH = 30  # bins in a worst window: 30 minutes, a twelfth of the period
ALERT = {"alertname": "SlokitChatTtftBurnRate", "alertstate": "firing", "service": "rtest",
         "severity": "critical", "model": "llama-3-8b", "class": "chat", "slo": "ttft"}  # fmt: skip
MODEL, BATCH = "llama-3-8b", "batchm"
END = 1_764_806_400  # 2025-12-04T00:00:00Z: a fixed anchor for the history's end
RUNNING = 16  # requests running per engine during the chat incident (a batch the planner tabulates)

Events = Callable[[int], dict[float, int]]


class History:
    """Per-minute truth: `events(series)(t)` are the observations in (t - 60, t], keyed by bucket bound."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.start = end - HISTORY
        self.times = list(range(self.start, end + 1, 60))
        self.reset_at = end - 3 * HOUR  # pod b restarts: its counters start again from 0 here
        self.gap = (end - 5 * HOUR, end - 5 * HOUR + 600)  # pod a is not scraped in [gap)

    def quiet(self, t: int) -> bool:
        return t <= self.start + HOUR

    def chat_incident(self, t: int) -> bool:
        return self.end - 4 * HOUR <= t < self.end - 4 * HOUR + 1800

    def ttft(self, pod: str) -> Events:
        def events(t: int) -> dict[float, int]:
            if self.quiet(t):
                return {}
            if self.chat_incident(t):
                return {0.3: 10, 2.0: 20}
            if pod == "a" and self.end - 2 * HOUR <= t < self.end - HOUR:
                return {0.1: 48, 0.3: 10, 1.0: 2}  # uneven traffic: pod a doubles for an hour
            return {0.1: 24, 0.3: 5, 1.0: 1} if pod == "a" else {0.1: 16, 0.3: 3, 1.0: 1}

        return events

    def itl(self, t: int) -> dict[float, int]:
        if self.quiet(t):
            return {}
        if self.end - 5400 <= t < self.end - 4500:
            return {0.03: 50, 0.1: 50}
        return {0.03: 97, 0.1: 3}

    def e2e(self, t: int) -> dict[float, int]:
        if self.quiet(t):
            return {}
        if self.end - 9000 <= t < self.end - 7200:
            return {10.0: 5, 60.0: 5}
        return {10.0: 5, 15.0: 4, 20.0: 1}

    def observed(self, pod: str, t: int) -> bool:
        return not (pod == "a" and self.gap[0] <= t < self.gap[1])

    def waiting(self, t: int) -> float:
        return 40.0 if self.chat_incident(t) else 0.0

    def kv(self, t: int) -> float:
        return 0.95 if self.chat_incident(t) else 0.3

    def tokens(self, t: int) -> int:
        return 0 if self.quiet(t) else (600 if self.chat_incident(t) else 3000)

    def running(self, t: int) -> float:
        if self.chat_incident(t):
            return RUNNING  # the incident's decode is slow at the batch it runs
        return 12.0 if (t // 60) % 3 == 0 else 20.0  # elsewhere it alternates: mean and max differ


def cumulative_series(
    history: History, events: Events, bounds: tuple[float, ...], reset_at: int | None
) -> dict[int, list[int]]:
    """Cumulative bucket counts (+Inf last) at every minute; a reset restarts them from 0 at `reset_at`."""
    counts = [0] * (len(bounds) + 1)
    out: dict[int, list[int]] = {}
    for t in history.times:
        if reset_at is not None and t == reset_at:
            counts = [0] * (len(bounds) + 1)
        for bound, n in events(t).items():
            for i in range(bounds.index(bound), len(counts)):
                counts[i] += n
        out[t] = list(counts)
    return out


def attributed(history: History, events: Events, pod: str) -> dict[int, dict[float, int]]:
    """Events per observed sample time: a sample carries the events of the minutes since the previous sample."""
    out: dict[int, dict[float, int]] = {}
    pending: dict[float, int] = {}
    first = True
    for t in history.times:
        for bound, n in events(t).items():
            pending[bound] = pending.get(bound, 0) + n
        if history.observed(pod, t):
            if not first:
                out[t] = pending
            first = False
            pending = {}
    return out


def backfill(history: History, spec: Spec, writer: OpenMetricsWriter) -> None:
    labels_of = {"a": {"model": MODEL, "class": "chat", "engine": "0", "pod": "a"},
                 "b": {"model": MODEL, "class": "chat", "engine": "0", "pod": "b"},
                 "c": {"model": BATCH, "class": "batch", "engine": "0", "pod": "c"}}  # fmt: skip
    plan: list[tuple[Sli, str, Events]] = [
        (Sli.TTFT, "a", history.ttft("a")),
        (Sli.TTFT, "b", history.ttft("b")),
        (Sli.ITL, "a", history.itl),
        (Sli.E2E, "c", history.e2e),
    ]
    for sli, pod, events in plan:
        name = spec.latency_metric(sli, spec.request_class(labels_of[pod]["class"]))  # as the SLO reads it
        bounds = spec.buckets(sli)
        writer.family(name, "histogram")
        series = cumulative_series(history, events, bounds, history.reset_at if pod == "b" else None)
        for t, counts in series.items():
            if not history.observed(pod, t):
                continue
            for bound, value in zip([*bounds, math.inf], counts, strict=True):
                le = "+Inf" if math.isinf(bound) else format_le(bound)
                writer.sample(name, f"{name}_bucket", {**labels_of[pod], "le": le}, value, t)
            writer.sample(name, f"{name}_count", labels_of[pod], counts[-1], t)
    metrics = spec.metrics
    tokens_family = metrics.generation_tokens.removesuffix("_total")
    for family, kind in ((metrics.requests_waiting, "gauge"), (metrics.kv_cache_usage, "gauge"),
                         (metrics.requests_running, "gauge"), (tokens_family, "counter"),
                         (schema.PROMETHEUS_ALERTS, "gauge")):  # fmt: skip
        writer.family(family, kind)
    for pod in ("a", "b"):
        engine = {"model": MODEL, "engine": "0", "pod": pod}
        total = 0
        for t in history.times:
            if t == history.reset_at and pod == "b":
                total = 0
            total += history.tokens(t)
            if not history.observed(pod, t):
                continue
            writer.sample(metrics.requests_waiting, metrics.requests_waiting, engine, history.waiting(t), t)
            writer.sample(metrics.kv_cache_usage, metrics.kv_cache_usage, engine, history.kv(t), t)
            writer.sample(metrics.requests_running, metrics.requests_running, engine, history.running(t), t)
            writer.sample(tokens_family, metrics.generation_tokens, engine, total, t)
    for first, last in alert_episodes(history):
        for t in range(first, last + 1, 30):
            writer.sample(schema.PROMETHEUS_ALERTS, schema.PROMETHEUS_ALERTS, ALERT, 1, t)


def alert_episodes(history: History) -> list[tuple[int, int]]:
    e = history.end
    return [(e - 4 * HOUR + 300, e - 4 * HOUR + 1800), (e - HOUR, e - HOUR + 600)]


# ==============================================================================================================
# Expected figures, from the truth
# ==============================================================================================================
def binned(
    history: History, events_by_pod: list[tuple[Events, str]], bounds: tuple[float, ...], start: int
) -> list[list[float]]:
    """Cumulative bucket counts per report bin, summed over pods."""
    bins = PERIOD // STEP
    rows = [[0.0] * (len(bounds) + 1) for _ in range(bins)]
    for events, pod in events_by_pod:
        for t, counts in attributed(history, events, pod).items():
            if not start < t <= history.end:
                continue
            index = math.ceil((t - start) / STEP) - 1
            for bound, n in counts.items():
                for i in range(bounds.index(bound), len(bounds) + 1):
                    rows[index][i] += n
    return rows


def worst(totals: list[float], goods: list[float], width: int) -> list[int]:
    scored = []
    for i in range(len(totals) - width + 1):
        t, g = sum(totals[i : i + width]), sum(goods[i : i + width])
        if t > 0 and t > g:
            scored.append(((t - g) / t, t - g, -i))
    scored.sort(reverse=True)
    chosen: list[int] = []
    for _, _, neg in scored:
        if all(abs(-neg - j) >= width for j in chosen):
            chosen.append(-neg)
        if len(chosen) == 5:
            break
    return chosen


def near(value: Any, expected: float | None) -> bool:
    if expected is None:
        return value is None
    return value is not None and math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_report_numbers_match_python_on_real_prometheus(tmp_path: Path, prometheus_factory: Any) -> None:
    spec = load_spec_text(SPEC, str(tmp_path / "rtest.yaml"))
    (tmp_path / "rtest.yaml").write_text(SPEC, encoding="utf-8")
    end = END
    history = History(end)
    writer = OpenMetricsWriter()
    backfill(history, spec, writer)
    server: LocalPrometheus = prometheus_factory(retention="100y")  # the history is old: keep it
    backfill_openmetrics(writer.text(), server.data_dir, workdir=tmp_path)
    server.start()
    for depth, rules in enumerate(_levels(spec)):
        rule_file = _rule_file(tmp_path / "rules.yaml", rules, spec)
        blocks = backfill_rules([rule_file], server, history.start + 600, end, tmp_path / f"blocks{depth}")
        server.stop()
        move_blocks(blocks, server.data_dir)
        server.start()

    out = tmp_path / "out"
    start = end - PERIOD
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "slokit.cli", "report", str(tmp_path / "rtest.yaml"), "--prometheus", server.url,
         "--from", str(start), "--to", str(end), "-o", str(out)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # chat TTFT misses its objective: exit 1
    assert "reading" in done.stderr and f"report: {out / 'report.html'}" in done.stdout
    doc = json.loads((out / "report.json").read_text())
    assert doc["period"] == {
        "from": utc(start), "to": utc(end), "from_unix": start, "to_unix": end, "seconds": PERIOD,
        "step_seconds": STEP, "slo_window_seconds": 28 * 86400,
    }  # fmt: skip
    assert utc(end) == "2025-12-04T00:00:00Z"

    ttft_bounds, itl_bounds, e2e_bounds = (spec.buckets(s) for s in (Sli.TTFT, Sli.ITL, Sli.E2E))
    truth = {
        (MODEL, "chat", "ttft"): (binned(history, [(history.ttft("a"), "a"), (history.ttft("b"), "b")], ttft_bounds,
                                         start), ttft_bounds, 0.5, 0.95),
        (MODEL, "chat", "itl"): (binned(history, [(history.itl, "a")], itl_bounds, start), itl_bounds, 0.05, 0.95),
        (BATCH, "batch", "e2e"): (binned(history, [(history.e2e, "c")], e2e_bounds, start), e2e_bounds, 30.0, 0.99),
    }  # fmt: skip
    rows = {(o["model"], o["class"], o["slo"]): o for o in doc["objectives"]}
    assert set(rows) == {*truth, (MODEL, "idle", "ttft")}
    full_batch = expected_decode_tokens_per_second(spec, spec.model(MODEL))
    plan = plan_for_model(spec, spec.model(MODEL))
    assert full_batch is not None and plan is not None and plan.batch_cap > RUNNING
    # The planner's figure at the batch the engines ran (a tabulated power of two, so no interpolation), far
    # below the full engine's: a report comparing with the full batch would call every window slow.
    expected_decode = decode_tokens_per_second(plan.inputs, RUNNING)
    assert expected_decode < 0.5 * full_batch
    curve = expected_decode_curve(spec, spec.model(MODEL))
    assert curve is not None
    assert at_batch([(p.batch, p.step_seconds) for p in curve], RUNNING) == pytest.approx(expected_decode, rel=1e-9)
    tokens = {pod: token_samples(history, pod) for pod in ("a", "b")}
    running_means: list[float] = []
    for key, (rows_binned, bounds, threshold, objective) in truth.items():
        o = rows[key]
        good_index = bounds.index(threshold)
        totals = [r[-1] for r in rows_binned]
        goods = [r[good_index] for r in rows_binned]
        total, good = sum(totals), sum(goods)
        budget = 1 - objective
        assert total > 0
        assert o["events_total"] == total and o["events_good"] == good, key
        assert near(o["attainment"], good / total), key
        assert o["met"] is (good / total >= objective), key
        assert near(o["budget_consumed"], (total - good) / total / budget), key
        assert near(o["budget_remaining"], 1 - (total - good) / total / budget), key
        burn = [((t - g) / t / budget) if t else None for t, g in zip(totals, goods, strict=True)]
        assert all(near(a, b) for a, b in zip(o["burn_rate_timeline"]["burn_rate"], burn, strict=True)), key
        assert o["burn_rate_timeline"]["events"] == totals, key
        # Worst windows: 30 minutes (a twelfth) for a 6h period, non-overlapping, highest slow share first.
        chosen = worst(totals, goods, WIDTH)
        assert [w["start_unix"] for w in o["worst_windows"]] == [start + i * STEP for i in chosen], key
        assert len(o["worst_windows"]) == len(chosen) > 0, key
        for w, i in zip(o["worst_windows"], chosen, strict=True):
            t, g = sum(totals[i : i + WIDTH]), sum(goods[i : i + WIDTH])
            assert w["events_total"] == t and w["events_good"] == g and near(w["error_ratio"], (t - g) / t)
            assert near(w["burn_rate"], (t - g) / t / budget), key
            assert w["start"] == utc(start + i * STEP) and w["end_unix"] == start + (i + WIDTH) * STEP, key
            signals = w["signals"]
            minutes = [start + (i + k + 1) * STEP for k in range(WIDTH)]  # each bin's end: where its point is
            if key[0] == MODEL:
                assert signals["queue_waiting_max"] == max(history.waiting(m) for m in minutes)
                assert signals["kv_cache_usage_max"] == pytest.approx(max(history.kv(m) for m in minutes))
                # Both engines run the same batch; each bin holds one sample of each (pod a's missed scrapes
                # leave pod b's alone, the same value).
                running = sum(history.running(m) for m in minutes) / WIDTH
                running_means.append(running)
                assert near(signals["requests_running_mean"], running), key
                expected = at_batch([(p.batch, p.step_seconds) for p in curve], running)
                assert near(signals["expected_decode_tokens_per_second"], expected), key
                assert signals["expected_decode_tokens_per_second_full_batch"] == pytest.approx(full_batch)
                # Per bin, the mean over engines of Prometheus's rate() over 2m, then the mean over the window.
                decode = sum(mean_rate(tokens, m, 120) for m in minutes) / WIDTH
                assert signals["decode_tokens_per_second"] == pytest.approx(decode, rel=1e-9), key
                assert signals["decode_vs_expected"] == pytest.approx(decode / expected, rel=1e-9), key
            else:
                assert signals["queue_waiting_max"] is None and signals["decode_vs_expected"] is None
                assert signals["requests_running_mean"] is None and signals["decode_tokens_per_second"] is None
        # SLO window from the records: the whole (quiet-started) history, 12h of the 28d window. The report copies
        # the records exactly; they are built from 5m rates, which extrapolate where traffic changes and cannot
        # see the events a 10-minute scrape gap hides (pod a), so they come within 2% of the truth, not exactly:
        # the reason period figures come from the raw series.
        all_events = binned_all(history, key, bounds)
        window = o["slo_window"]
        t_all, g_all = all_events[-1], all_events[good_index]
        record = record_values(server, key, end)
        assert window["events_total"] == record["total"] and window["events_good"] == record["good"], key
        assert near(window["attainment"], 1 - record["error"]) and near(window["budget_remaining"], record["budget"])
        tolerance = 0.02
        assert window["events_total"] == pytest.approx(t_all, rel=tolerance), key
        assert window["events_good"] == pytest.approx(g_all, rel=tolerance), key
        assert window["attainment"] == pytest.approx(g_all / t_all, rel=tolerance), key
        assert window["budget_remaining"] == pytest.approx(1 - (t_all - g_all) / t_all / budget, abs=tolerance * 10)
        assert window["history_seconds"] == HISTORY, key

    # The chat TTFT incident is the worst window, and the engines were queueing and full then.
    chat = rows[(MODEL, "chat", "ttft")]
    assert chat["met"] is False
    top = chat["worst_windows"][0]
    assert end - 4 * HOUR - 60 <= top["start_unix"] <= end - 4 * HOUR + 60  # the incident's half hour
    assert top["signals"]["queue_waiting_max"] == 40 and top["signals"]["kv_cache_usage_max"] == pytest.approx(0.95)
    # Decode throughput per engine during the worst window: the mean of each bin's 2m rate (samples at t-2m, t-1m
    # and t on Prometheus 2), the incident's 600 tokens/min per engine with the edge bin mixing in 3000.
    first_bin = (top["start_unix"] - start) // STEP
    ends = [start + (first_bin + k + 1) * STEP for k in range(WIDTH)]
    decode = sum((history.tokens(t) + history.tokens(t - 60)) / 120 for t in ends) / WIDTH
    assert top["signals"]["decode_tokens_per_second"] == pytest.approx(decode, rel=1e-9)
    assert top["signals"]["decode_vs_expected"] == pytest.approx(decode / expected_decode, rel=1e-9)

    assert max(running_means) > min(running_means)  # the batch moved: a constant would hide a wrong mean
    assert any(not m.is_integer() for m in running_means)  # and a window's mean is no sample's value (12, 16, 20)

    idle = rows[(MODEL, "idle", "ttft")]
    assert idle["events_total"] == 0 and idle["events_good"] == 0 and idle["attainment"] is None
    assert idle["met"] is None and idle["status"] == "no traffic"
    assert idle["budget_consumed"] is None and idle["budget_remaining"] is None and idle["worst_windows"] == []
    assert idle["burn_rate_timeline"] == {"bin_starts": [], "burn_rate": [], "events": []}
    # No raw series, so no records: every SLO-window figure is n/a and a note says why.
    assert idle["slo_window"] == {
        "window_seconds": 28 * 86400, "events_total": None, "events_good": None, "attainment": None,
        "budget_remaining": None, "history_seconds": None,
    }  # fmt: skip
    assert any(n.startswith("idle/ttft on llama-3-8b: no 28d SLO-window records for it") for n in doc["notes"])
    assert any("no traffic for class idle" in n for n in doc["notes"])
    assert any("history covers 0.5 of 28 days" in n for n in doc["notes"])
    assert not any(n.startswith("history covers") for n in doc["notes"])  # the period itself is fully covered
    # The batch model's worst windows have no engine series and no planner figures: said, once each.
    assert f"worst windows on {BATCH}: queue, KV cache, running batch, decode tokens/s n/a" in " ".join(doc["notes"])
    assert any(n.startswith(f"worst windows on {BATCH}: the planner's decode figures are n/a") for n in doc["notes"])
    assert not any(n.startswith(f"worst windows on {MODEL}") for n in doc["notes"])

    # Tiers: share of the bins with traffic whose interpolated percentile sits in each tier.
    ind = {(i["model"], i["class"], i["slo"]): i for i in doc["indicators"]}
    chat_rows, bounds = truth[(MODEL, "chat", "ttft")][0], ttft_bounds
    tiers = spec.request_class("chat").slos[Sli.TTFT].tiers
    with_traffic = [r for r in chat_rows if r[-1] > 0]
    for p in ("p50", "p95"):
        counts = dict.fromkeys(("target", "acceptable", "critical", "beyond_critical"), 0)
        for r in with_traffic:
            q = histogram_quantile(PERCENTILES[p], bounds, r)
            name = next((n for n in ("target", "acceptable", "critical") if q <= tiers.tier(n)[p]), "beyond_critical")
            counts[name] += 1
        shares = ind[(MODEL, "chat", "ttft")]["tiers"][p]
        assert all(near(shares[n], c / len(with_traffic)) for n, c in counts.items()), (p, shares, counts)
    assert ind[(MODEL, "chat", "ttft")]["tiers"]["p95"]["critical"] > 0  # the incident: p95 between 1s and 2s
    # Per-bin percentiles (those the tiers and the consistency name), bins with traffic, bin starts.
    named = {
        (MODEL, "chat", "ttft"): ("p50", "p95"),
        (MODEL, "chat", "itl"): (),
        (BATCH, "batch", "e2e"): ("p50", "p99"),
    }
    for key, ps in named.items():
        rows_binned, bounds = truth[key][0], truth[key][1]
        i = ind[key]
        assert i["bins_with_traffic"] == sum(1 for r in rows_binned if r[-1] > 0), key
        assert i["bin_starts"] == [start + k * STEP for k in range(PERIOD // STEP)], key
        assert set(i["percentiles"]) == set(ps), key
        for p in ps:
            values = [histogram_quantile(PERCENTILES[p], bounds, r) if r[-1] else None for r in rows_binned]
            assert all(near(a, b) for a, b in zip(i["percentiles"][p], values, strict=True)), (key, p)
    assert ind[(MODEL, "idle", "ttft")]["bins_with_traffic"] == 0 and ind[(MODEL, "idle", "ttft")]["percentiles"] == {}

    # Consistency of the batch class, over the period and per bin.
    batch_rows = truth[(BATCH, "batch", "e2e")][0]
    summed = [sum(r[i] for r in batch_rows) for i in range(len(e2e_bounds) + 1)]
    ratio = histogram_quantile(0.99, e2e_bounds, summed) / histogram_quantile(0.5, e2e_bounds, summed)
    consistency = ind[(BATCH, "batch", "e2e")]["consistency"]
    assert near(consistency["period_p99_over_p50"], ratio) and consistency["met"] is (ratio <= 1.6)
    timeline = [
        histogram_quantile(0.99, e2e_bounds, r) / histogram_quantile(0.5, e2e_bounds, r) if r[-1] else None
        for r in batch_rows
    ]
    assert all(near(a, b) for a, b in zip(consistency["timeline"], timeline, strict=True))
    per_bin = [v for v in timeline if v is not None]
    assert near(consistency["share_of_time_over_limit"], sum(v > 1.6 for v in per_bin) / len(per_bin))
    assert consistency["max_p99_over_p50"] == 1.6
    assert ind[(MODEL, "chat", "ttft")]["consistency"] is None

    # Alerts: both firing episodes, first and last sample, and the labels they carry.
    assert [(a["start_unix"], a["end_unix"]) for a in doc["alerts"]] == alert_episodes(history)
    for a, (first, last) in zip(doc["alerts"], alert_episodes(history), strict=True):
        assert a["duration_seconds"] == last - first and a["start"] == utc(first) and a["end"] == utc(last)
        assert (a["alertname"], a["severity"]) == (ALERT["alertname"], "critical")
        assert (a["model"], a["class"], a["slo"]) == (MODEL, "chat", "ttft")
    # Traffic per model and class: requests, counted from TTFT (chat) and E2E (batch); none for idle.
    traffic = {(t["model"], t["class"]): t for t in doc["traffic"]}
    assert set(traffic) == {(MODEL, "chat"), (BATCH, "batch")}
    for (model, cls), sli in (((MODEL, "chat"), "ttft"), ((BATCH, "batch"), "e2e")):
        per_bin_events = [r[-1] for r in truth[(model, cls, sli)][0]]
        entry = traffic[(model, cls)]
        assert entry["counted_from"] == sli and entry["unit"] == "requests"
        assert entry["requests"] == entry["events"] == sum(per_bin_events)
        assert near(entry["requests_per_second"], sum(per_bin_events) / PERIOD)
        assert entry["timeline"]["events"] == per_bin_events

    # The other files: markdown headline first, HTML self-contained, a CSV behind every plot.
    markdown = (out / "report.md").read_text()
    assert markdown.index("## Objectives") < markdown.index("## Worst windows")
    assert "| llama-3-8b | chat | ttft <= 500.0ms | MISSED |" in markdown
    html = (out / "report.html").read_text()
    assert "http://" not in html.replace(server.url, "") and "https://" not in html
    assert html.count("data:image/png;base64,") == len(list(out.glob("*.png"))) > 0
    assert all((out / f"{p.stem}.csv").exists() for p in out.glob("*.png"))
    # The CSV behind a plot holds the numbers of report.json.
    burn_csv = list(csv.DictReader((out / "burn-llama_3_8b-chat-ttft.csv").open()))
    assert [float(r["bin_start"]) for r in burn_csv] == chat["burn_rate_timeline"]["bin_starts"]
    assert all(
        near(float(r["burn_rate"]) if r["burn_rate"] else None, v)
        for r, v in zip(burn_csv, chat["burn_rate_timeline"]["burn_rate"], strict=True)
    )
    traffic_csv = list(csv.DictReader((out / "traffic.csv").open()))
    assert [float(r["chat on llama-3-8b requests"]) for r in traffic_csv] == traffic[(MODEL, "chat")]["timeline"][
        "events"
    ]
    assert [float(r["batch on batchm requests"]) for r in traffic_csv] == traffic[(BATCH, "batch")]["timeline"][
        "events"
    ]
    assert "NaN" not in (out / "report.json").read_text() and "nan" not in markdown.lower().replace("nano", "")


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def at_batch(curve: list[tuple[int, float]], batch: float) -> float:
    """The planner's tokens/s per engine at a mean batch: the step time read linearly between tabulated batches."""
    for (b0, s0), (b1, s1) in itertools.pairwise(curve):
        if b0 <= batch <= b1:
            return batch / (s0 + (s1 - s0) * (batch - b0) / (b1 - b0))
    raise AssertionError(f"batch {batch} outside the curve")


def token_samples(history: History, pod: str) -> dict[int, float]:
    """The generation-token counter's samples of one engine, as backfilled."""
    out: dict[int, float] = {}
    total = 0
    for t in history.times:
        if t == history.reset_at and pod == "b":
            total = 0
        total += history.tokens(t)
        if history.observed(pod, t):
            out[t] = total
    return out


def prom_rate(samples: dict[int, float], at: int, window: int) -> float | None:
    """Prometheus 2's `rate(x[window])` at `at` for one series: samples in [at - window, at], reset-aware increase,
    extrapolated to the window's edges (by at most 1.1 average gaps, not below zero); None under two samples."""
    points = [(t, samples[t]) for t in sorted(samples) if at - window <= t <= at]
    if len(points) < 2:
        return None
    increase = points[-1][1] - points[0][1]
    for (_, previous), (_, value) in itertools.pairwise(points):
        if value < previous:
            increase += previous
    sampled = points[-1][0] - points[0][0]
    gap = sampled / (len(points) - 1)
    to_start, to_end = points[0][0] - (at - window), at - points[-1][0]
    if increase > 0 and points[0][1] >= 0:
        to_start = min(to_start, sampled * points[0][1] / increase)
    interval = sampled + (to_start if to_start < 1.1 * gap else gap / 2) + (to_end if to_end < 1.1 * gap else gap / 2)
    return increase * interval / sampled / window


def mean_rate(tokens: dict[str, dict[int, float]], at: int, window: int) -> float:
    """`avg by (model) (rate(...))`: the mean over the engines that have a rate at `at`."""
    rates = [r for r in (prom_rate(samples, at, window) for samples in tokens.values()) if r is not None]
    return sum(rates) / len(rates)


def record_values(server: LocalPrometheus, key: tuple[str, str, str], at: int) -> dict[str, float]:
    """The SLO-window records of one objective, read straight from Prometheus."""
    labels = f'{{service="rtest",model="{key[0]}",class="{key[1]}",slo="{key[2]}"}}'
    window = prom_duration(28 * 86400)
    names = {
        "total": schema.record_sli_total(window),
        "good": schema.record_sli_good(window),
        "error": schema.record_error_ratio(window),
        "budget": schema.RECORD_ERROR_BUDGET_REMAINING,
    }
    return {k: server.query(name + labels, at=at).scalar() for k, name in names.items()}


def binned_all(history: History, key: tuple[str, str, str], bounds: tuple[float, ...]) -> list[float]:
    """Cumulative counts over the whole history (after the first sample)."""
    sources = {
        "ttft": [(history.ttft("a"), "a"), (history.ttft("b"), "b")],
        "itl": [(history.itl, "a")],
        "e2e": [(history.e2e, "c")],
    }[key[2]]
    out = [0.0] * (len(bounds) + 1)
    for events, pod in sources:
        for counts in attributed(history, events, pod).values():
            for bound, n in counts.items():
                for i in range(bounds.index(bound), len(bounds) + 1):
                    out[i] += n
    return out
