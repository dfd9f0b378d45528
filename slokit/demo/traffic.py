"""Load: slokit's probe drives the healthy traffic and the flood, each on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slokit.distributions import Distribution


@dataclass(frozen=True)
class LoadLevel:
    """One bounded load level: closed-loop `concurrency` or open-loop `rate`, stopping at a count or a time."""

    name: str
    base_url: str
    model: str
    request_class: str
    prompt_tokens: Distribution
    output_tokens: Distribution
    concurrency: int | None = None
    rate: float | None = None
    max_requests: int = 1000
    max_seconds: float = 60.0
    drain_seconds: float = 10.0  # how long requests still running at max_seconds may take to finish
    max_in_flight: int = 10_000  # open loop: arrivals beyond this many running requests wait in the client
    tokens_per_word: float = 1.0  # the probe writes prompts in words; this converts token counts to words
    seed: int = 0


@dataclass
class LoadTally:
    """Requests sent and how they ended, updated while the load runs."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


LoadFunction = Callable[[LoadLevel, LoadTally, threading.Event], None]


def run_load(level: LoadLevel, tally: LoadTally, stop: threading.Event) -> None:
    """Run one load level with slokit's probe to its bounds (or until `stop` is set), counting into `tally`."""
    asyncio.run(_probe_level(level, tally, stop))


async def _probe_level(level: LoadLevel, tally: LoadTally, stop: threading.Event) -> None:
    from slokit.probe.load import Endpoint, Limits, Load, Progress, Workload, run_level

    endpoint = Endpoint(url=f"{level.base_url}/v1/completions", model=level.model)
    workload = Workload(
        level.prompt_tokens,
        level.output_tokens,
        class_header=level.request_class,
        tokens_per_word=level.tokens_per_word,
    )
    load = Load.concurrency(level.concurrency) if level.concurrency else Load.rate(level.rate or 1.0)
    limits = Limits(
        requests=level.max_requests,
        duration=level.max_seconds,
        drain=level.drain_seconds,
        max_in_flight=level.max_in_flight,
    )
    progress = Progress()
    task = asyncio.ensure_future(
        run_level(endpoint, workload, load, limits, seed=level.seed, progress=progress, should_stop=stop.is_set)
    )
    stop_seen: float | None = None
    try:
        while not task.done():
            tally.sent, tally.failed = progress.done, progress.failed
            tally.ok = progress.done - progress.failed
            if stop.is_set():
                # The probe stops dispatching and lets running requests finish within the drain time; past that
                # (and a short margin), cancel: whatever still runs is aborted, as a client hanging up.
                stop_seen = stop_seen or time.monotonic()
                if time.monotonic() - stop_seen > level.drain_seconds + 2.0:
                    task.cancel()
                    break
            await asyncio.wait({task}, timeout=0.2)
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            run = await task
            records = run.measured
            tally.sent = len(records)
            tally.ok = sum(1 for r in records if r.ok)
            tally.failed = tally.sent - tally.ok
            for record in records:
                if not record.ok:
                    tally.reasons[record.reason or "unknown"] = tally.reasons.get(record.reason or "unknown", 0) + 1


def tokens_per_word(base_url: str, model: str) -> float:
    """Prompt tokens per probe word on this server (its /tokenize), else the tiny model's byte-level estimate."""
    from slokit.local.tiny_model import prompt_token_count
    from slokit.probe.load import calibrate_tokens_per_word, make_prompt

    measured = asyncio.run(calibrate_tokens_per_word(f"{base_url}/v1/completions", model))
    if measured:
        return measured
    return prompt_token_count(make_prompt(200, random.Random(7)), add_bos=False) / 200.0


class BackgroundLoad:
    """A load level running in its own thread (with its own event loop), stoppable from the demo's thread."""

    def __init__(self, level: LoadLevel, function: LoadFunction = run_load) -> None:
        self.level = level
        self.tally = LoadTally()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), name=f"slokit-load-{level.name}")
        self._thread.daemon = True

    def _run(self, function: LoadFunction) -> None:
        try:
            function(self.level, self.tally, self._stop)
        except BaseException as exc:  # reported by the demo thread
            self._error = exc

    def start(self) -> BackgroundLoad:
        """Start sending."""
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether the load is still sending."""
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """What ended the load early, if anything did."""
        return self._error

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the load to stop and wait for its thread (in-flight requests are cancelled)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait(self, timeout: float) -> None:
        """Wait for the load to reach its own bounds."""
        self._thread.join(timeout)
