"""Rule cost: samples touched and evaluation time of slokit's SLI rules against naive and Sloth-shaped rules.

One run, side by side, on one real Prometheus (Debian's 2.42) with a backfilled TSDB: 3 days of a TTFT histogram
on vLLM's default buckets for 10 models x 3 classes x 2 engines (diurnal, uneven traffic). For each rule of each
approach the expression is run as an instant query at the end of the history with `stats=all`; samples touched
(`totalQueryableSamples`) and engine time are summed per group and scaled to one hour of evaluations by the
group's interval.

* (a) naive: every window (5m ... 3d and the 28d SLO window) as `increase()` over the raw buckets, every 30s.
* (b) Sloth-shaped: 5m ... 3d ratios from raw rates every 30s, the SLO window as the mean of the 5m ratios.
* (c) slokit: the generated groups (bucket rates once from raw; 5m from them; longer windows tiled from recorded
  windows with `offset`), with their own intervals.

Recorded inputs of (b) and (c) are backfilled too (the 5m ratios as dense history; the records slokit reads at
offsets at their evaluation times), so each query touches what it would in production. The TSDB holds 3 days, so
the 28d reads of (a) and (b) touch 3 days of data: the real 28d ratios are larger still.

The accuracy gap of (b) is computed from the same traffic: the mean of 5m ratios against the event-weighted ratio.

Run: .venv/bin/python bench/rule_cost.py [--scrape 60] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from slokit import schema
from slokit.generate.model import RecordingRule
from slokit.generate.rules import rule_groups
from slokit.local.prometheus import LocalPrometheus, OpenMetricsWriter, backfill_openmetrics
from slokit.spec import load_spec_text
from slokit.units import format_le, parse_duration, prom_duration

THRESHOLDS = {"chat": 0.5, "code": 0.25, "batch": 1.0}


def spec_text(models: int) -> str:
    names = [f"model-{i}" for i in range(models)]
    lines = ["version: slokit/v1", "service: bench", "source: slokit", "window: 28d", "models:"]
    lines += [f"  - {{name: {n}}}" for n in names]
    lines.append("classes:")
    for cls, threshold in THRESHOLDS.items():
        lines += [f"  - name: {cls}", "    slos:", "      ttft:",
                  f"        objective: {{percentile: 95, threshold: {int(threshold * 1000)}ms}}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def traffic(t: int, model: int, cls: int, engine: int) -> tuple[float, float]:
    """(requests per second, share slow) at unix time t: diurnal, with errors highest when traffic is lowest."""
    phase = 2 * math.pi * ((t % 86400) / 86400 + model / 10)
    rps = max(0.05, (1.0 + 0.9 * math.sin(phase)) * (1 + cls) * (1 + engine * 0.3))
    slow = 0.01 + 0.2 * (1 - (1 + math.sin(phase)) / 2) ** 4
    return rps, slow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scrape", type=int, default=60, help="seconds between raw samples (default 60)")
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="tiny run: 2 models, 6 hours")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.days = 2, 0.25
    spec = load_spec_text(spec_text(args.models), "bench.yaml")
    bounds = schema.VLLM_TTFT_BUCKETS
    name = spec.latency_metric(schema.Sli.TTFT, spec.classes[0])  # the histogram the generated rules read
    end = int(time.time()) // 3600 * 3600 - 3600
    start = end - int(args.days * 86400)
    work = Path(tempfile.mkdtemp(prefix="slokit-bench-"))
    started = time.monotonic()

    # -- raw history
    writer = OpenMetricsWriter()
    writer.family(name, "histogram")
    exact: dict[tuple[str, str], list[tuple[int, float, float]]] = defaultdict(list)  # per 5m: (t, total, bad)
    for m in range(args.models):
        for c, cls in enumerate(THRESHOLDS):
            threshold_index = bounds.index(THRESHOLDS[cls])
            for e in range(2):
                labels = {"model": f"model-{m}", "class": cls, "engine": str(e)}
                counts = [0.0] * (len(bounds) + 1)
                for t in range(start, end + 1, args.scrape):
                    for i, bound in enumerate([*bounds, math.inf]):
                        le = "+Inf" if math.isinf(bound) else format_le(bound)
                        writer.sample(name, f"{name}_bucket", {**labels, "le": le}, round(counts[i]), t)
                    rps, slow = traffic(t, m, c, e)
                    n = rps * args.scrape
                    for i in range(threshold_index, len(counts)):
                        counts[i] += n * (1 - slow)  # good: in the bucket that ends at the threshold
                    for i in range(threshold_index + 2, len(counts)):
                        counts[i] += n * slow  # slow: two buckets above
                    if e == 0:
                        exact[(f"model-{m}", cls)].append((t, n, n * slow))
    text = writer.text()
    raw_done = time.monotonic()

    # -- recorded inputs: 5m ratios (Sloth's period SLI reads 28d of them), slokit's records at their offsets
    rec = OpenMetricsWriter()
    groups = rule_groups(spec)
    interval_of = {g.name: parse_duration(g.interval) for g in groups}
    records: dict[str, float] = {}
    for g in groups:
        for r in g.rules:
            if isinstance(r, RecordingRule):
                records.setdefault(r.record, interval_of[g.name])
    slo_series = [{"service": "bench", "model": f"model-{m}", "class": c, "slo": "ttft"}
                  for m in range(args.models) for c in THRESHOLDS]  # fmt: skip
    sloth_ratio = "slo:sli_error:ratio_rate5m"
    rec.family(sloth_ratio, "gauge")
    for t in range(start, end + 1, 30):
        for s in slo_series:
            rec.sample(sloth_ratio, sloth_ratio, s, 0.01, t)
    offsets = sorted({0.0, *(k * w for w in (300, 1800, 3600, 7200, 21600, 86400, 3 * 86400) for k in range(0, 10))})
    for record, interval in records.items():
        if record.startswith("slokit_engine:") or "quantile" in record or record.startswith("slokit:requests"):
            continue
        rec.family(record, "gauge")
        for offset in offsets:
            t0 = end - offset
            if t0 < start:
                continue
            for t in (t0 - interval, t0):
                for s in slo_series:
                    rec.sample(record, record, s, 1.0, t)
    bucket_rate = schema.RECORD_LATENCY_BUCKET_RATE
    rec.family(bucket_rate, "gauge")
    for t in range(end - 600, end + 1, 30):
        for s in slo_series:
            for e in range(2):
                for bound in [*bounds, math.inf]:
                    le = "+Inf" if math.isinf(bound) else format_le(bound)
                    rec.sample(bucket_rate, bucket_rate, {**s, "engine": str(e), "le": le}, 1.0, t)
    server = LocalPrometheus(workdir=work / "prometheus")
    backfill_openmetrics(text, server.data_dir, workdir=work, max_block_duration="24h")
    backfill_openmetrics(rec.text(), server.data_dir, workdir=work, max_block_duration="24h")
    backfill_done = time.monotonic()

    # -- the three rule sets
    windows = [300, 1800, 3600, 7200, 21600, 86400, 3 * 86400]

    def good(w: str, fn: str = "increase") -> str:
        return " or ".join(
            f'sum by (model, class) ({fn}({name}_bucket{{class="{c}",le="{format_le(t)}"}}[{w}]))'
            for c, t in THRESHOLDS.items()
        )

    naive = []
    for w in [*windows, spec.window]:
        d = prom_duration(w)
        naive.append((f"naive total {d}", f'sum by (model, class) (increase({name}_bucket{{le="+Inf"}}[{d}]))', 30))
        naive.append((f"naive good {d}", good(d), 30))
    sloth = []
    for w in windows:
        d = prom_duration(w)
        total = f'sum by (model, class) (rate({name}_bucket{{le="+Inf"}}[{d}]))'
        expr = f"1 - ({good(d, 'rate')}) / {total}"
        sloth.append((f"sloth ratio {d}", expr, 30))
    period = prom_duration(spec.window)
    mean = f"sum_over_time({sloth_ratio}[{period}]) / count_over_time({sloth_ratio}[{period}])"
    sloth.append((f"sloth period {period}", mean, 30))
    slokit = []
    for g in groups:
        if g.name.endswith(("engine", "alerts", "baseline")):
            continue
        for r in g.rules:
            if isinstance(r, RecordingRule) and "quantile" not in r.record and "requests" not in r.record:
                slokit.append((f"{g.name} {r.record}", r.expr, interval_of[g.name]))

    server.start(timeout=180)
    try:
        results = {}
        for label, rules in (("naive (a)", naive), ("sloth (b)", sloth), ("slokit (c)", slokit)):
            samples_per_hour = 0.0
            seconds_per_hour = 0.0
            per_eval = 0
            for _, expr, interval in rules:
                answer = server.query(expr, at=end, stats=True)
                per_eval += answer.samples_touched
                samples_per_hour += answer.samples_touched * 3600 / interval
                seconds_per_hour += answer.eval_seconds * 3600 / interval
            results[label] = (per_eval, samples_per_hour, seconds_per_hour, len(rules))
    finally:
        server.stop()

    # -- accuracy of (b) under uneven traffic, from the same traffic
    gaps = []
    for points in exact.values():
        per5 = defaultdict(lambda: [0.0, 0.0])
        for t, n, bad in points:
            per5[t // 300][0] += n
            per5[t // 300][1] += bad
        ratios = [b / n for n, b in per5.values() if n > 0]
        weighted = sum(b for _, b in per5.values()) / sum(n for n, _ in per5.values())
        mean = sum(ratios) / len(ratios)
        gaps.append(abs(mean - weighted) / weighted)

    print(f"TSDB: {args.days:g} days, {args.models} models x 3 classes x 2 engines, vLLM TTFT buckets "
          f"({len(bounds) + 1} series per histogram), raw sample every {args.scrape}s")  # fmt: skip
    print(f"{'rules':<12}{'rules':>6}{'samples/eval':>15}{'samples/hour':>16}{'eval s/hour':>13}")
    for label, (per_eval, per_hour, secs, count) in results.items():
        print(f"{label:<12}{count:>6}{per_eval:>15,}{per_hour:>16,.0f}{secs:>13.3f}")
    a, b, c = (results[k][1] for k in ("naive (a)", "sloth (b)", "slokit (c)"))
    print(f"samples per hour: naive/slokit = {a / c:,.1f}x, sloth/slokit = {b / c:,.1f}x")
    print(f"Sloth-shaped period ratio (mean of 5m ratios) vs event-weighted over {args.days:g}d: mean error "
          f"{100 * sum(gaps) / len(gaps):.1f}%, worst {100 * max(gaps):.1f}%; slokit's tiled windows are "
          "event-weighted and exact (tests/test_prometheus_integration.py)")  # fmt: skip
    print(f"(generate {raw_done - started:.0f}s, backfill {backfill_done - raw_done:.0f}s, "
          f"total {time.monotonic() - started:.0f}s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
