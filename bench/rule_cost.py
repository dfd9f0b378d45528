"""Rule cost and accuracy: slokit's SLI rules against naive raw-range and Sloth-shaped rules, on faulty data.

One run, side by side, on one real Prometheus (Debian's 2.42) with a backfilled TSDB: 3 days of a TTFT histogram
on vLLM's 23-series default buckets for 10 models x 3 classes x 2 engines (`--models`, `--classes`; every model
serves every class; `--fleet`: 50 models x 4 classes x 2 engines), a raw sample every 60s. Traffic is
diurnal (errors highest when traffic is lowest) with bursts (a few 5-20 minute stretches a day per model at 3x the
rate and 30% slow), integer requests per scrape interval.

Faults (off with `--clean`): every engine (a scrape target: all its series at once) misses about 1% of its scrapes
at random, and restarts once a day: after its last scrape it serves nothing for 5 to 10 minutes, then comes back
with every counter from zero (its first sample holds the minute since it came back). On top, before each end time
below: one engine misses the scrapes on the 5m boundaries of the windows read there (the minute before the end,
5m, 1h, 6h and 1d earlier), one is down from 9 to 2 minutes before the end's minute (a counter reset inside the 5m
window) and one from 40 to 30 minutes before (a reset inside the 1h window).

The three rule sets run as recording rules in that Prometheus over the whole history, each window at the same
evaluation interval in every set (slokit's: 5m to 1h every 30s, 2h and 6h every 1m, 1d and longer every 2m), for
the windows slokit records (5m, 10m, 30m, 1h, 2h, 6h, 1d, 3d and the 28d SLO window, spelled 4w):

* naive: every window as `increase()` over the raw +Inf and threshold buckets, and (total - good) / total.
* Sloth-shaped: every window but the SLO window as 1 - good rate / total rate over the raw buckets, the SLO window
  as the mean of the recorded 5m ratios (`sum_over_time / count_over_time`), as Sloth writes it.
* slokit: the generated `latency`, `sli-short`, `sli-medium` and `sli-long` groups (bucket rates and scale-out every
  1m, the 5m base window of sample deltas, every longer window tiled from recorded shorter ones with `offset`,
  ratios, burn rates, budget) without the dashboard quantiles and request rates, and the records of the
  `parameters` group they read (the objective per class, which the burn rates join `on (service, class, slo)`).
  These rules are written once for all models: their number grows with the classes, not the models.

Evaluation is by that Prometheus, one dependency level at a time (a level reads only the levels below it): each
rule is a range query at its group's interval, aligned to the group's phase (fixed per group name, as Prometheus
fixes it by a hash), so each step is the instant query the rule would run at that evaluation; that is how
`promtool tsdb create-blocks-from rules` evaluates too, but promtool writes one block per rule per 2 hours (thousands
here), so the results are written as OpenMetrics and backfilled with 24h blocks, and the server restarts to load
each level. Rules that no measured window reads (bucket rates, scale-out, burn rates, budget, the unreported
windows of the naive and Sloth-shaped sets) are evaluated over the last hour only: the cost figure reads no more.
Nothing is computed in Python but the truth.

Accuracy: at each end time, every set's recorded error ratio per model and class is read back (the value a reader
would get then) and compared with the truth: the bad and total requests the generator emitted in that window, in
Python, summed over engines. The window a recorded value stands for ends at the evaluation that read the raw data
(`timestamp()`; for tiled windows, followed down to the newest 5m tile). A request is emitted at a scrape instant
and counted by that scrape; requests during a missed scrape are counted by the next one; a restarting engine emits
nothing while it is down, so every request emitted reaches the counters, but one emitted at a missed scrape on a
window's edge is seen by no rule until the next scrape. The 28d window covers the 3 days that exist. Printed per
window and set: max and median relative error of the error ratio (|ratio - truth| / truth over every end time,
model and class), the same for the window's requests (naive and slokit record them), the max error of the ratio
against what the scraped samples in the window add up to (reset-aware: what a rule could know), and series
missing.

Cost: each rule's expression as an instant query at the end of the history with `stats=all`; samples touched
(`totalQueryableSamples`) and engine time (fastest of 3 runs), scaled to an hour of evaluations by the rule's
interval; for slokit all its rules, and apart the ones that record what the naive set records (events and ratios).
slokit's 10 costliest rules by engine time are printed after the totals, and every rule's cost on stderr.
The 28d reads of naive and Sloth-shaped rules touch the 3 days that exist: with 28 days of history they grow about
9x for that window; slokit's do not.

`--smoke` (or `--quick`): 2 models, 26 hours, 3 end times (tests/test_rules_bench.py, with 3 and with 4 classes).
Every rule's cost and the accuracy table go to bench/results/rule_cost.json (`make bench-rule_cost`).

`--realistic` (bench/results/rule_cost_realistic.json): the requests of each interval spread evenly over it (the
truth counts them at their own times, so a window's edge cuts an interval), every scrape up to 10 s before its
nominal instant, and two scrape gaps while the engines keep serving: an hour on one engine and a day (or what the
history holds) on another. "vs scraped" then shows what a rule loses against what the samples could tell it.

Run: PYTHONPATH=. .venv/bin/python bench/rule_cost.py [--clean] [--smoke | --fleet] [--classes 3] [--models 10]
[--days 3] [--scrape 60]
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slokit import schema
from slokit.backtest.evaluate import dependency_levels
from slokit.generate.model import RecordingRule
from slokit.generate.rules import rule_groups, sli_windows, window_interval, window_plans
from slokit.local.prometheus import LocalPrometheus, PrometheusError, promtool
from slokit.sources import vllm_releases
from slokit.spec import Spec, load_spec_text
from slokit.units import format_le, parse_duration, prom_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder

# Request classes and their TTFT thresholds, in order: `--classes N` takes the first N (3 by default, 4 in the fleet)
THRESHOLDS = {"chat": 0.5, "code": 0.25, "batch": 1.0, "agent": 2.5, "embed": 0.1, "summary": 5.0}
DEFAULT_CLASSES = 3
FLEET = {"models": 50, "classes": 4}  # `--fleet`; ENGINES engines each, as every case
ENGINES = 2
BOUNDS = vllm_releases.TTFT_BUCKETS
HISTORY_END = 1764633600  # 2025-12-02 00:00 UTC: pinned, so every run sees the same data
# End times: minutes before the history's end, each 45s past that minute.
FULL_ENDS: tuple[int, ...] = (1, 343, 680, 1057, 1391)
SMOKE_ENDS: tuple[int, ...] = (1, 77, 160)
REPORTED = (300.0, 3600.0, 21600.0, 86400.0, 259200.0)  # plus the SLO window
SETS = ("naive", "sloth", "slokit")
SLO = {"service": "bench", "slo": "ttft"}


def class_thresholds(classes: int = DEFAULT_CLASSES) -> dict[str, float]:
    """The first `classes` request classes and their thresholds (seconds)."""
    if not 1 <= classes <= len(THRESHOLDS):
        raise ValueError(f"classes must be 1 to {len(THRESHOLDS)}, not {classes}")
    return dict(list(THRESHOLDS.items())[:classes])


def spec_text(models: int, classes: int = DEFAULT_CLASSES) -> str:
    names = [f"model-{i}" for i in range(models)]
    lines = ["version: slokit/v1", "service: bench", "source: slokit", "window: 28d", "models:"]
    lines += [f"  - {{name: {n}}}" for n in names]
    lines.append("classes:")
    for cls, threshold in class_thresholds(classes).items():
        lines += [f"  - name: {cls}", "    slos:", "      ttft:",
                  f"        objective: {{percentile: 95, threshold: {int(threshold * 1000)}ms}}"]  # fmt: skip
    return "\n".join(lines) + "\n"


# ==============================================================================================================
# The history: traffic, faults, scraped counters and the truth
# ==============================================================================================================
@dataclass(frozen=True)
class Restart:
    """An engine's last scrape before it stops, and its first scrape after it is back (counters from zero)."""

    last: int
    back: int


JITTER_S = 10.0  # --realistic: how early a scrape may land before its nominal instant


def spread(n: int, bad: int, fraction: float) -> tuple[int, int]:
    """(requests, slow ones) of an interval's `n` (of which `bad` slow) that fall in its first `fraction`, when the
    requests are spread evenly over the interval (the i-th at (i + 1) / n of it) and the slow ones evenly among
    them."""
    if n <= 0 or fraction <= 0:
        return 0, 0
    count = min(n, math.floor(n * min(fraction, 1.0) + 1e-9))
    return count, (count * bad) // n


@dataclass
class History:
    """Requests emitted per scrape instant per series, the scrapes that happened, and prefix sums for the truth."""

    start: int
    end: int
    step: int
    models: int
    ends: tuple[int, ...]
    faults: bool
    thresholds: dict[str, float] = field(default_factory=class_thresholds)  # class -> threshold, in class order
    realistic: bool = False  # requests spread within intervals, scrape jitter, scrape gaps of an hour and a day
    jitter: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # (model, engine) -> scrape offsets
    gaps: list[tuple[tuple[int, int], int, int]] = field(default_factory=list)  # (model, engine), first, last missed
    restarts: dict[tuple[int, int], list[Restart]] = field(default_factory=dict)  # (model, engine) ->
    missed: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    bursts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # model -> [start, end)
    # (model, class, engine) -> requests emitted at each step (total, slow); index 0 is the history's start
    emitted: dict[tuple[int, int, int], list[tuple[int, int]]] = field(default_factory=dict)
    cumulative: dict[tuple[int, int], tuple[list[int], list[int]]] = field(default_factory=dict)  # (model, class)
    # the same, as the scrapes recorded it: reset-aware increases between scraped samples, at the later sample
    scraped_cumulative: dict[tuple[int, int], tuple[list[int], list[int]]] = field(default_factory=dict)

    @property
    def times(self) -> range:
        return range(self.start, self.end + 1, self.step)

    def plan(self, seed: int = 14) -> None:
        """Bursts, restarts and missed scrapes, from a fixed seed."""
        rng = random.Random(seed)
        span = self.end - self.start
        for m in range(self.models):
            self.bursts[m] = []
            for _ in range(max(1, round(3 * span / 86400))):
                b0 = self.start + self.step * rng.randrange(span // self.step)
                self.bursts[m].append((b0, b0 + 60 * rng.randrange(5, 21)))
        for m in range(self.models):
            for e in range(ENGINES):
                self.restarts[(m, e)], self.missed[(m, e)] = [], set()
                # Each scrape lands up to JITTER_S before its nominal instant (never past it: a window's edge, 45 s
                # past a minute, then still sees the same scrapes).
                self.jitter[(m, e)] = [-rng.uniform(0, JITTER_S) if self.realistic else 0.0 for _ in self.times]
        if self.realistic:
            self._plan_gaps()
        if not self.faults:
            return
        marks = [self.minute_before(end) for end in self.ends]
        for i, mark in enumerate(marks):
            a, b, c = (i % self.models, 0), ((i + 1) % self.models, 1), ((i + 2) % self.models, 0)
            self.missed[a].update(mark - k for k in (0, 300, 3600, 21600, 86400) if mark - k > self.start)
            self._add_restart(b, Restart(mark - 120 - 420, mark - 120))
            self._add_restart(c, Restart(mark - 2400, mark - 2400 + 600))
        per_engine = max(1, round(span / 86400))
        for key in self.restarts:
            for day in range(per_engine):
                lo = self.start + day * span // per_engine + 1800
                hi = self.start + (day + 1) * span // per_engine - 1800
                last = lo + self.step * rng.randrange(max(1, (hi - lo) // self.step))
                gap = self.step * rng.randrange(-(-300 // self.step), 600 // self.step + 1)
                self._add_restart(key, Restart(last, last + gap), keep_clear=3600)
            for t in self.times[1:]:
                if rng.random() < 0.01:
                    self.missed[key].add(t)

    def _plan_gaps(self) -> None:
        """Scrape gaps longer than any lookback while the engine keeps serving (a partitioned target, Prometheus
        down): an hour ending 2 hours before the history's end, and a day (or what the history holds) ending 3
        hours before it, on two different engines."""
        for key, length, before_end in (((0, 1), 3600, 7200), ((1 % self.models, 0), 86400, 10800)):
            last = self.minute_before(self.end - before_end)
            first = max(self.start + self.step, last - length + self.step)
            self.missed[key].update(range(first, last + 1, self.step))
            self.gaps.append((key, first, last))

    def minute_before(self, end: int) -> int:
        """The scrape instant at or before an end time."""
        return end - (end - self.start) % self.step

    def _add_restart(self, key: tuple[int, int], restart: Restart, keep_clear: int = 0) -> None:
        if restart.last <= self.start or restart.back > self.end:
            return
        for other in self.restarts[key]:
            if restart.last < other.back + keep_clear and other.last < restart.back + keep_clear:
                return  # overlaps (or, for the random daily ones, comes within an hour of) one already planned
        self.restarts[key].append(restart)

    def down(self, key: tuple[int, int], t: int) -> bool:
        return any(r.last < t < r.back for r in self.restarts[key])

    def scraped(self, key: tuple[int, int], t: int) -> bool:
        return t not in self.missed[key] and not self.down(key, t)

    def rates(self, t: int, m: int, c: int, e: int) -> tuple[float, float]:
        """(requests per second, share slow) at t: diurnal, errors highest when traffic is lowest, with bursts."""
        phase = 2 * math.pi * ((t % 86400) / 86400 + m / 10)
        rps = max(0.05, (1.0 + 0.9 * math.sin(phase)) * (1 + c) * (1 + e * 0.3))
        slow = 0.01 + 0.2 * (1 - (1 + math.sin(phase)) / 2) ** 4
        if any(b0 <= t < b1 for b0, b1 in self.bursts[m]):
            rps, slow = rps * 3, max(slow, 0.3)
        return rps, slow

    def emit(self, seed: int = 16) -> None:
        """Integer requests per step per series (none while its engine is down), and the truth's prefix sums."""
        rng = random.Random(seed)
        for m in range(self.models):
            for c in range(len(self.thresholds)):
                cum_total, cum_bad = [0] * len(self.times), [0] * len(self.times)
                for e in range(ENGINES):
                    out: list[tuple[int, int]] = [(0, 0)]
                    for t in self.times[1:]:
                        if self.down((m, e), t):
                            out.append((0, 0))
                            continue
                        rps, slow = self.rates(t, m, c, e)
                        n = int(rps * self.step + rng.random())
                        out.append((n, int(n * slow + rng.random())))
                    self.emitted[(m, c, e)] = out
                    running_total = running_bad = 0
                    for k, (n, bad) in enumerate(out):
                        running_total += n
                        running_bad += bad
                        cum_total[k] += running_total
                        cum_bad[k] += running_bad
                self.cumulative[(m, c)] = (cum_total, cum_bad)

    def truth(self, m: int, c: int, lo: float, hi: float, *, scraped: bool = False) -> tuple[int, int]:
        """(total, slow) requests emitted in (lo, hi] by the model's engines for the class; `scraped`: the requests
        the scraped samples in (lo, hi] add up to (what any rule could see; differs where a scrape was missed at
        an edge of the window)."""
        cum_total, cum_bad = (self.scraped_cumulative if scraped else self.cumulative)[(m, c)]

        def index(t: float) -> int:
            return min(len(cum_total) - 1, math.floor((t - self.start) / self.step))

        def at(t: float) -> tuple[int, int]:
            k = index(t)
            if k < 0:
                return 0, 0
            total, bad = cum_total[k], cum_bad[k]
            if self.realistic and not scraped and k + 1 < len(cum_total):  # requests of the next interval before t
                fraction = (t - (self.start + k * self.step)) / self.step
                for e in range(ENGINES):
                    part = spread(*self.emitted[(m, c, e)][k + 1], fraction)
                    total, bad = total + part[0], bad + part[1]
            return total, bad

        (t_hi, b_hi), (t_lo, b_lo) = at(hi), at(lo)
        return t_hi - t_lo, b_hi - b_lo

    def write_openmetrics(self, path: Path, name: str) -> int:
        """The scraped bucket counters, time-ordered, as promtool's OpenMetrics input; returns samples written."""
        prefixes: dict[tuple[int, int, int], list[str]] = {}
        for m in range(self.models):
            for c, cls in enumerate(self.thresholds):
                for e in range(ENGINES):
                    prefixes[(m, c, e)] = [
                        f'{name}_bucket{{model="model-{m}",class="{cls}",engine="{e}",le="{le}"}} '
                        for le in [*(format_le(b) for b in BOUNDS), "+Inf"]
                    ]
        good_at = [BOUNDS.index(t) for t in self.thresholds.values()]
        counts = {key: [0, 0] for key in self.emitted}  # good, slow since the engine's last (re)start
        backs = {key: {r.back for r in rs} for key, rs in self.restarts.items()}
        previous: dict[tuple[int, int, int], tuple[int, int]] = {}  # last scraped (+Inf, threshold) per series
        seen_total = {key: [0] * len(self.times) for key in self.cumulative}
        seen_bad = {key: [0] * len(self.times) for key in self.cumulative}
        written = 0
        with path.open("w", encoding="utf-8") as out:
            out.write(f"# TYPE {name} histogram\n")
            for k, t in enumerate(self.times):
                lines: list[str] = []
                for (m, c, e), series in self.emitted.items():
                    if t in backs[(m, e)]:
                        counts[(m, c, e)] = [0, 0]
                    n, bad = series[k]
                    held = counts[(m, c, e)]
                    held[0] += n - bad
                    held[1] += bad
                    if not self.scraped((m, e), t):
                        continue
                    good, slow = held
                    stamp: float = t
                    if self.realistic:  # scraped before the interval's end: its later requests are not counted yet
                        stamp = t + self.jitter[(m, e)][k]
                        got, got_bad = spread(n, bad, (stamp - t + self.step) / self.step)
                        good, slow = good - (n - bad - (got - got_bad)), slow - (bad - got_bad)
                    before = previous.get((m, c, e))
                    if before is None or good + slow < before[0] or good < before[1]:
                        before = (0, 0)  # a new series or a counter reset: counted from zero
                    seen_total[(m, c)][k] += good + slow - before[0]
                    seen_bad[(m, c)][k] += good + slow - before[0] - (good - before[1])
                    previous[(m, c, e)] = (good + slow, good)
                    threshold = good_at[c]
                    for i, prefix in enumerate(prefixes[(m, c, e)]):
                        value = (good if i >= threshold else 0) + (slow if i >= threshold + 2 else 0)
                        lines.append(f"{prefix}{value} {stamp:.3f}\n" if self.realistic else f"{prefix}{value} {t}\n")
                out.write("".join(lines))
                written += len(lines)
            out.write("# EOF\n")
        for key in self.cumulative:
            totals, bads = seen_total[key], seen_bad[key]
            for k in range(1, len(totals)):
                totals[k] += totals[k - 1]
                bads[k] += bads[k - 1]
            self.scraped_cumulative[key] = (totals, bads)
        return written

    def fault_summary(self) -> str:
        restarts = sum(len(r) for r in self.restarts.values())
        missed = sum(len(m - {t for t in m if self.down(key, t)}) for key, m in self.missed.items())
        scrapes = len(self.times) * len(self.missed)
        text = (f"{restarts} restarts (counter resets after 5-10 minute gaps), {missed} of {scrapes} scrapes missed "
                f"({100 * missed / scrapes:.2f}%)")  # fmt: skip
        if self.realistic:
            gaps = ", ".join(f"model-{m} engine {e} {(last - first + self.step) / 3600:g}h" for (m, e), first, last
                             in self.gaps)  # fmt: skip
            text += (f"; requests spread evenly within each interval, scrapes up to {JITTER_S:g}s early, scrape gaps "
                     f"(engine serving): {gaps}")  # fmt: skip
        return text


# ==============================================================================================================
# The rule sets
# ==============================================================================================================
@dataclass(frozen=True)
class Entry:
    """One recording rule of one set, with its group and interval (seconds)."""

    rule_set: str
    group: str
    interval: float
    rule: RecordingRule


def slokit_entries(spec: Spec) -> list[Entry]:
    """The generated `latency`, `sli-short`, `sli-medium` and `sli-long` rules but dashboard quantiles and request
    rates, and the records of the `parameters` group they read (the objective per class, which the burn rates join
    `on (service, class, slo)`); the parameters the alerts alone read (burn factors, per-model facts) are left out
    with them."""
    out, parameters = [], []
    for g in rule_groups(spec):
        interval = parse_duration(g.interval)
        rules = [r for r in g.rules if isinstance(r, RecordingRule)]
        if g.name.endswith("-parameters"):
            parameters += [Entry("slokit", g.name, interval, r) for r in rules]
        elif g.name.endswith(("latency", "sli-short", "sli-medium", "sli-long")):
            out += [Entry("slokit", g.name, interval, r) for r in rules
                    if "quantile" not in r.record and "requests" not in r.record]  # fmt: skip
    read = {p.rule.record for p in parameters if any(reads(e.rule.expr, p.rule.record) for e in out)}
    return [p for p in parameters if p.rule.record in read] + out


def reads(expr: str, record: str) -> bool:
    """Whether a PromQL expression reads a series by that name (not a longer name that contains it)."""
    return re.search(r"(?<![\w:])" + re.escape(record) + r"(?![\w:])", expr) is not None


def _union(name: str, fn: str, window: str, thresholds: Mapping[str, float]) -> str:
    return " or ".join(
        f'sum by (model, class) ({fn}({name}_bucket{{class="{c}",le="{format_le(t)}"}}[{window}]))'
        for c, t in thresholds.items()
    )


def naive_entries(spec: Spec, name: str, thresholds: Mapping[str, float]) -> list[Entry]:
    out = []
    for window in sli_windows(spec):
        d, interval = prom_duration(window), window_interval(window)
        group = f"naive-{prom_duration(interval)}"
        total, good = f"naive:sli_total:increase{d}", f"naive:sli_good:increase{d}"
        out += [
            Entry("naive", group, interval, RecordingRule(total, f'sum by (model, class) (increase({name}_bucket{{le="+Inf"}}[{d}]))')),  # noqa: E501
            Entry("naive", group, interval, RecordingRule(good, _union(name, "increase", d, thresholds))),
            Entry("naive", group, interval, RecordingRule(f"naive:sli_error:ratio{d}", f"({total} - {good}) / {total}")),  # noqa: E501
        ]  # fmt: skip
    return out


def sloth_entries(spec: Spec, name: str, thresholds: Mapping[str, float]) -> list[Entry]:
    out = []
    for window in sli_windows(spec):
        d, interval = prom_duration(window), window_interval(window)
        group = f"sloth-{prom_duration(interval)}"
        if window == spec.window:
            base = "sloth:sli_error:ratio_rate5m"
            expr = f"sum_over_time({base}[{d}]) / count_over_time({base}[{d}])"
        else:
            total = f'sum by (model, class) (rate({name}_bucket{{le="+Inf"}}[{d}]))'
            expr = f"1 - ({_union(name, 'rate', d, thresholds)}) / {total}"
        out.append(Entry("sloth", group, interval, RecordingRule(f"sloth:sli_error:ratio_rate{d}", expr)))
    return out


def ratio_record(rule_set: str, window: float) -> str:
    d = prom_duration(window)
    if rule_set == "naive":
        return f"naive:sli_error:ratio{d}"
    if rule_set == "sloth":
        return f"sloth:sli_error:ratio_rate{d}"
    return schema.record_error_ratio(d) + "{" + ",".join(f'{k}="{v}"' for k, v in SLO.items()) + "}"


def total_record(rule_set: str, window: float) -> str | None:
    d = prom_duration(window)
    if rule_set == "naive":
        return f"naive:sli_total:increase{d}"
    if rule_set == "slokit":
        return schema.record_sli_total(d) + "{" + ",".join(f'{k}="{v}"' for k, v in SLO.items()) + "}"
    return None


# ==============================================================================================================
# Evaluation over the history
# ==============================================================================================================
CHUNK = 86400.0  # seconds of evaluations per range query: at most 2,880 points per series at 30s


def phase(group: str, interval: float) -> float:
    """A group's evaluation offset within its interval, fixed by its name as Prometheus fixes it by a hash: the
    group evaluates at k x interval + phase, so groups of different intervals are out of step as in production."""
    return zlib.crc32(group.encode()) % int(interval * 1000) / 1000


def needed_records(entries: Sequence[Entry], measured: Iterable[str]) -> set[str]:
    """The measured records and every record they read, transitively."""
    exprs: dict[str, list[str]] = {}
    for e in entries:
        exprs.setdefault(e.rule.record, []).append(e.rule.expr)
    patterns = {n: re.compile(r"(?<![\w:])" + re.escape(n) + r"(?![\w:])") for n in exprs}
    out: set[str] = set()
    todo = [m for m in measured if m in exprs]
    while todo:
        record = todo.pop()
        if record in out:
            continue
        out.add(record)
        todo += [n for n, pattern in patterns.items() if n not in out and any(pattern.search(x) for x in exprs[record])]
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def evaluate_rule(server: LocalPrometheus, entry: Entry, start: float, end: float) -> list[tuple[float, str]]:
    """One recording rule evaluated by Prometheus at every evaluation time of its group in [start, end] (a range
    query at the group's interval and phase: each step is the instant query the rule runs then), as OpenMetrics
    lines of the recorded series (the rule's name and labels on the expression's result), with their times."""
    interval = entry.interval
    first = start + (phase(entry.group, interval) - start) % interval
    last = first + (end - first) // interval * interval
    lines: list[tuple[float, str]] = []
    t = first
    while t <= last:
        upto = min(last, t + CHUNK - interval)
        for sample in server.query_range(entry.rule.expr, t, upto, interval).samples:
            labels = {k: v for k, v in sample.labels.items() if k != "__name__"}
            labels.update(entry.rule.labels)
            text = entry.rule.record + "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"
            lines += [(ts, f"{text} {value!r} {ts:.3f}") for ts, value in sample.points]
        t = upto + interval
    return lines


def evaluate_levels(
    entries: Sequence[Entry], server: LocalPrometheus, start: int, end: int, work: Path, measured: Iterable[str]
) -> tuple[int, int]:
    """Every rule over the history, level by level: a level's results are backfilled as blocks and the server
    restarts with them before the next level reads them. Rules the measured windows read run over the whole
    history; the others (bucket rates, scale-out, burn rates, budget, unreported windows of naive and Sloth-shaped
    rules) over the last hour, which is all the cost measurement at the end reads. Returns (levels, points)."""
    needed = needed_records(entries, measured)
    by_rule = {id(e.rule): e for e in entries}
    levels = dependency_levels([(e.group, e.rule) for e in entries])
    points = 0
    for depth, pairs in enumerate(levels):
        began = time.monotonic()
        level = [by_rule[id(rule)] for _, rule in pairs]
        path = work / f"level{depth}.om"
        count = 0
        with path.open("w", encoding="utf-8") as out, ThreadPoolExecutor(max_workers=2) as pool:
            for pair in (level[i : i + 2] for i in range(0, len(level), 2)):  # two queries at a time, in order
                jobs = [pool.submit(evaluate_rule, server, e, start if e.rule.record in needed else end - 3600, end)
                        for e in pair]  # fmt: skip
                for e, job in zip(pair, jobs, strict=True):
                    lines = job.result()
                    lines.sort(key=lambda item: item[0])
                    out.write(f"# TYPE {e.rule.record} gauge\n")
                    out.write("".join(line + "\n" for _, line in lines))
                    count += len(lines)
            out.write("# EOF\n")
        server.stop()
        if count:
            done = promtool("tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", str(path),
                            str(server.data_dir), timeout=1800)  # fmt: skip
            if not done.ok:
                raise PrometheusError(f"promtool backfill of level {depth + 1} failed:\n{done.output[-3000:]}")
        path.unlink()
        server.start(timeout=300)
        points += count
        print(f"  rules level {depth + 1}/{len(levels)}: {len(level)} rules, {count:,} points, "
              f"{time.monotonic() - began:.0f}s", file=sys.stderr, flush=True)  # fmt: skip
    return len(levels), points


# ==============================================================================================================
# Accuracy and cost
# ==============================================================================================================
@dataclass
class Errors:
    """Relative errors of one set's window over every end time and series."""

    ratio: list[float] = field(default_factory=list)  # error ratio vs the requests emitted
    events: list[float] = field(default_factory=list)  # the window's requests vs the requests emitted
    scraped: list[float] = field(default_factory=list)  # error ratio vs what the scraped samples add up to
    missing: int = 0


def data_end(server: LocalPrometheus, rule_set: str, window: float, at: float, plans: Mapping[float, Any]) -> float:
    """When the raw data behind a recorded window was read: its rule's evaluation, or (tiled) its newest 5m tile's."""
    record = total_record(rule_set, window) or ratio_record(rule_set, window)
    when = server.query(f"max(timestamp({record}))", at=at).scalar()
    blocks = plans[window].blocks if rule_set == "slokit" else ()
    return when if not blocks else data_end(server, rule_set, blocks[0].window, when, plans)


def accuracy(server: LocalPrometheus, history: History, spec: Spec) -> dict[tuple[float, str], Errors]:
    plans = {p.window: p for p in window_plans(spec)}
    out: dict[tuple[float, str], Errors] = {}
    for window in (*REPORTED, spec.window):
        for rule_set in SETS:
            errors = out.setdefault((window, rule_set), Errors())
            for end in history.ends:
                ratios = server.query(ratio_record(rule_set, window), at=end).by_labels("model", "class")
                totals_record = total_record(rule_set, window)
                totals = server.query(totals_record, at=end).by_labels("model", "class") if totals_record else {}
                try:
                    hi = data_end(server, rule_set, window, end, plans)
                except PrometheusError:
                    errors.missing += history.models * len(history.thresholds)
                    continue
                for m in range(history.models):
                    for c, cls in enumerate(history.thresholds):
                        total, bad = history.truth(m, c, hi - window, hi)
                        value = ratios.get((f"model-{m}", cls))
                        if value is None or math.isnan(value) or total == 0:
                            errors.missing += 1
                            continue
                        truth = bad / total
                        errors.ratio.append(abs(value - truth) / truth if truth else abs(value))
                        seen_total, seen_bad = history.truth(m, c, hi - window, hi, scraped=True)
                        seen = seen_bad / seen_total
                        errors.scraped.append(abs(value - seen) / seen if seen else abs(value))
                        counted = totals.get((f"model-{m}", cls))
                        if counted is not None:
                            errors.events.append(abs(counted - total) / total)
    return out


SLOKIT_WINDOWS = "slokit windows"  # slokit's rules that record what the naive set records: events and ratios


@dataclass(frozen=True)
class RuleCost:
    """One rule's cost at the end of the history: samples touched per evaluation, engine seconds per evaluation
    (the fastest of three runs), and its interval."""

    entry: Entry
    samples: int
    seconds: float

    @property
    def samples_per_hour(self) -> float:
        return self.samples * 3600 / self.entry.interval

    @property
    def seconds_per_hour(self) -> float:
        return self.seconds * 3600 / self.entry.interval


def rule_costs(server: LocalPrometheus, entries: Sequence[Entry], at: int) -> list[RuleCost]:
    """Every rule's expression as an instant query at `at` with `stats=all`. Samples touched are counted, so one
    query gives them; engine time is the fastest of three runs (the machine is shared, and a slow run measures the
    neighbours)."""
    out = []
    for e in entries:
        answers = [server.query(e.rule.expr, at=at, stats=True) for _ in range(3)]
        out.append(RuleCost(e, answers[0].samples_touched, min(a.eval_seconds for a in answers)))
    return out


def cost(costs: Sequence[RuleCost]) -> dict[str, tuple[int, int, float, float]]:
    """Per set: rules, samples per evaluation, samples per hour, engine seconds per hour. `slokit windows` is
    slokit's subset that records the windows' events and error ratios, with the per-series counter record the 5m
    tiles read (no bucket rates, burn rates, budget, objective, scale-out)."""
    out = {}
    windows = ("slokit:sli_total:", "slokit:sli_good:", "slokit:sli_error:", schema.RECORD_COUNTER_LAST)
    for rule_set in (*SETS, SLOKIT_WINDOWS):
        if rule_set == SLOKIT_WINDOWS:
            rules = [c for c in costs if c.entry.rule_set == "slokit" and c.entry.rule.record.startswith(windows)]
        else:
            rules = [c for c in costs if c.entry.rule_set == rule_set]
        out[rule_set] = (len(rules), sum(c.samples for c in rules), sum(c.samples_per_hour for c in rules),
                         sum(c.seconds_per_hour for c in rules))  # fmt: skip
    return out


def rule_line(r: RuleCost) -> str:
    """One rule's engine seconds and samples per hour, interval, record and static labels, as a printed line."""
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(r.entry.rule.labels.items()) if k not in ("service", "slo"))
    return (f"{r.seconds_per_hour:>12.3f}{r.samples_per_hour:>16,.0f}{prom_duration(r.entry.interval):>7}  "
            f"{r.entry.rule.record}{'{' + labels + '}' if labels else ''}\n")  # fmt: skip


def pct(values: Sequence[float], how: str) -> str:
    if not values:
        return "-"
    value = max(values) if how == "max" else statistics.median(values)
    return f"{100 * value:.4f}%" if value >= 5e-7 else "0"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--scrape", type=int, default=60, help="seconds between raw samples (default 60)")
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--models", type=int, default=None, help="models (default 10; 50 with --fleet)")
    parser.add_argument("--classes", type=int, default=None, choices=range(1, len(THRESHOLDS) + 1),
                        help=f"request classes, each every model serves (default {DEFAULT_CLASSES}; "
                        f"{FLEET['classes']} with --fleet): {', '.join(THRESHOLDS)} in that order")  # fmt: skip
    parser.add_argument("--clean", action="store_true", help="no missed scrapes, no restarts")
    parser.add_argument("--realistic", action="store_true", help="requests spread within each interval, scrape "
                        "jitter, and scrape gaps of an hour and a day while the engines serve")  # fmt: skip
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--smoke", "--quick", action="store_true", help="small run: 2 models, 26 hours, 3 end times")
    how.add_argument(
        "--fleet",
        action="store_true",
        help=f"the fleet case: {FLEET['models']} models x {FLEET['classes']} classes x {ENGINES} engines",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where rule_cost.json goes")
    args = parser.parse_args()
    if not 1 <= args.scrape <= 3600 or not 0 < args.days <= 60 or (args.models is not None and args.models < 1):
        parser.error("--scrape must be 1 to 3600 seconds, --days above 0 and at most 60, --models at least 1")
    name = "rule_cost_realistic" if args.realistic else "rule_cost"
    recorder = Recorder(name, {k: v for k, v in vars(args).items() if k != "results_dir"})
    ends_before = FULL_ENDS
    if args.models is None:
        args.models = FLEET["models"] if args.fleet else 10
    if args.classes is None:
        args.classes = FLEET["classes"] if args.fleet else DEFAULT_CLASSES
    if args.smoke:
        args.models, args.days, ends_before = 2, 26 / 24, SMOKE_ENDS
    thresholds = class_thresholds(args.classes)
    spec = load_spec_text(spec_text(args.models, args.classes), "bench.yaml")
    assert all(t in BOUNDS and BOUNDS.index(t) + 2 < len(BOUNDS) for t in thresholds.values())
    name = spec.latency_metric(schema.Sli.TTFT, spec.classes[0])  # the histogram the generated rules read
    end = HISTORY_END
    start = end - int(args.days * 86400)
    ends = tuple(end - 60 * m + 45 for m in ends_before)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slokit-bench-") as tmp:
        work = Path(tmp)
        history = History(start, end, args.scrape, args.models, ends, faults=not args.clean, thresholds=thresholds,
                          realistic=args.realistic)  # fmt: skip
        history.plan()
        history.emit()
        source = work / "raw.om"
        samples = history.write_openmetrics(source, name)
        generated = time.monotonic()
        print(f"  generated {samples:,} raw samples in {generated - started:.0f}s; backfilling", file=sys.stderr,
              flush=True)  # fmt: skip

        server = LocalPrometheus(workdir=work / "prometheus", retention="100y",
                                 extra_args=("--query.max-samples=200000000",))  # fmt: skip
        done = promtool("tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", str(source),
                        str(server.data_dir), timeout=1800)  # fmt: skip
        if not done.ok:
            raise PrometheusError(f"promtool backfill failed:\n{done.output[-3000:]}")
        source.unlink()
        backfilled = time.monotonic()
        print(f"  backfilled in {backfilled - generated:.0f}s", file=sys.stderr, flush=True)

        entries = [*naive_entries(spec, name, thresholds), *sloth_entries(spec, name, thresholds),
                   *slokit_entries(spec)]  # fmt: skip
        server.start(timeout=300)
        try:
            measured = [ratio_record(r, w).split("{")[0] for r in SETS for w in (*REPORTED, spec.window)]
            levels, points = evaluate_levels(entries, server, start, end, work, measured)
            evaluated = time.monotonic()
            errors = accuracy(server, history, spec)
            print("  measuring cost", file=sys.stderr, flush=True)
            per_rule = rule_costs(server, entries, end)
            costs = cost(per_rule)
        finally:
            server.stop()

    faults = "clean (no faults)" if args.clean else history.fault_summary()
    print(f"TSDB: {args.days:g} days to {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(end))}, {args.models} models x "
          f"{args.classes} classes x {ENGINES} engines, vLLM TTFT buckets ({len(BOUNDS) + 1} series per histogram), "
          f"raw sample every {args.scrape}s ({samples:,} samples); {faults}")  # fmt: skip
    print("evaluation intervals, every set: 5m-1h 30s, 2h-6h 1m, 1d-4w 2m; rules evaluated over the whole history "
          f"by Prometheus in {levels} dependency levels ({points:,} recorded points)")  # fmt: skip
    print(f"accuracy at {len(ends)} end times x {args.models * args.classes} model/class series: relative error "
          "of the error ratio (and of the window's requests) against the requests the generator emitted")  # fmt: skip
    print(f"{'window':<8}{'rules':<8}{'ratio max':>12}{'ratio median':>14}{'events max':>12}{'events median':>15}"
          f"{'vs scraped max':>16}{'missing':>9}")  # fmt: skip
    for window in (*REPORTED, spec.window):
        for rule_set in SETS:
            e = errors[(window, rule_set)]
            print(f"{prom_duration(window):<8}{rule_set:<8}{pct(e.ratio, 'max'):>12}{pct(e.ratio, 'median'):>14}"
                  f"{pct(e.events, 'max'):>12}{pct(e.events, 'median'):>15}{pct(e.scraped, 'max'):>16}"
                  f"{e.missing:>9}")  # fmt: skip
    print("cost at the end of the history (stats=all), per hour of evaluations at each rule's interval:")
    print(f"{'rules':<16}{'rules':>6}{'samples/eval':>15}{'samples/hour':>16}{'eval s/hour':>13}")
    for rule_set, (count, per_eval, per_hour, secs) in costs.items():
        print(f"{rule_set:<16}{count:>6}{per_eval:>15,}{per_hour:>16,.0f}{secs:>13.3f}")
    for base in ("slokit", SLOKIT_WINDOWS):
        a, b, c = (costs[k][2] for k in ("naive", "sloth", base))
        sa, sb, sc = (costs[k][3] for k in ("naive", "sloth", base))
        print(f"{'samples per hour' if base == 'slokit' else 'windows only'}: naive/slokit = {a / c:,.1f}x, "
              f"sloth/slokit = {b / c:,.1f}x; eval seconds per hour: naive/slokit = {sa / sc:,.2f}x, "
              f"sloth/slokit = {sb / sc:,.2f}x")  # fmt: skip
    print("slokit's 10 costliest rules by engine time:")
    print(f"{'eval s/hour':>12}{'samples/hour':>16}{'every':>7}  record")
    ranked = sorted(per_rule, key=lambda r: -r.seconds_per_hour)
    print("".join([rule_line(r) for r in ranked if r.entry.rule_set == "slokit"][:10]), end="")
    print("every rule by engine time:", file=sys.stderr)  # all three sets, for the record
    print("".join(f"  {r.entry.rule_set:<7}{rule_line(r)}" for r in ranked), end="", file=sys.stderr)
    print(f"(generate {generated - started:.0f}s, backfill {backfilled - generated:.0f}s, rules "
          f"{evaluated - backfilled:.0f}s, total {time.monotonic() - started:.0f}s)")  # fmt: skip
    figures: dict[str, Any] = {"faults": faults, "samples": samples, "accuracy": {}, "cost": {}}
    for (window, rule_set), e in errors.items():
        figures["accuracy"].setdefault(prom_duration(window), {})[rule_set] = {
            "ratio_max_pct": 100 * max(e.ratio, default=math.nan),
            "events_max_pct": 100 * max(e.events, default=math.nan),
            "scraped_max_pct": 100 * max(e.scraped, default=math.nan),
            "missing": e.missing,
        }
    for rule_set, (count, per_eval, per_hour, secs) in costs.items():
        figures["cost"][rule_set.replace(" ", "_")] = {
            "rules": count, "samples_per_eval": per_eval, "samples_per_hour": per_hour, "eval_s_per_hour": secs,
        }  # fmt: skip
    for other in ("naive", "sloth"):
        figures["cost"][f"{other}_over_slokit_samples"] = costs[other][2] / costs["slokit"][2]
        figures["cost"][f"slokit_over_{other}_seconds"] = costs["slokit"][3] / costs[other][3]
    runs = [{"rule_set": r.entry.rule_set, "record": r.entry.rule.record, "interval_s": r.entry.interval,
             "samples": r.samples, "seconds": r.seconds} for r in per_rule]  # fmt: skip
    recorder.save(figures, runs, args.results_dir, notes="Engine time from a shared 2-core machine: compare the "
                  "sets, measured side by side on one Prometheus, not absolute seconds.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
