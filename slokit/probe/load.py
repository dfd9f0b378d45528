"""Run one load level against an OpenAI-compatible streaming endpoint and record every request.

Two load shapes:

* closed loop (`Load.concurrency(n)`): n users, each sending its next request when the previous one ends. Results
  describe "n concurrent users", not a request rate. A request's scheduled time is the moment its user was free.
* open loop (`Load.rate(r, burstiness)`): arrivals at r requests/s, Poisson (burstiness 1), gamma with shape b
  (b < 1 burstier, b > 1 smoother) or evenly spaced (b = inf), independent of how fast the server answers. A
  request's scheduled time is its arrival time; when the client cannot send on time, the lag shows in latency
  from the scheduled time (so coordinated omission cannot hide queueing).

Every level is bounded: at most `Limits.requests` measured requests (plus `warmup`), no new request after
`Limits.duration`, and whatever is still running `Limits.drain` seconds later is ended and counted as a timeout.
Payloads are built before the level starts; the hot path only writes bytes and stamps arrivals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import math
import random
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from slokit import schema
from slokit.distributions import Distribution
from slokit.probe import client
from slokit.probe.client import Api, ConnectError, HttpClient, RawResponse, Url

LoadKind = Literal["concurrency", "rate"]
_WORDS = tuple(
    " ".join(
        (
            "time person year way day thing man world life hand part child eye woman place work week case point",
            "number group problem fact water river stone light night house voice story music garden window market",
            "paper table",
        )
    ).split()
)
_RAW_BUFFER_LIMIT = 256 * 1024 * 1024  # raw body bytes kept for parsing after the level; beyond it, parse at once


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send requests.

    `url` is the full endpoint URL (`.../v1/completions` or `.../v1/chat/completions`); `api` says which body
    shape to send. `headers` are added to every request (authorisation, routing).
    """

    url: str
    model: str
    api: Api = "completions"
    headers: Mapping[str, str] = field(default_factory=dict)
    request_timeout: float = 300.0
    ignore_eos: bool = True  # vLLM's `ignore_eos`: exact output lengths, so ITL compares at equal lengths
    verify_tls: bool = True


@dataclass(frozen=True)
class Workload:
    """What each request looks like: prompt and output length distributions, and the class header to send."""

    prompt_tokens: Distribution
    output_tokens: Distribution
    class_header: str | None = None  # value of `x-slokit-class`
    tokens_per_word: float = 1.0  # prompt tokens one word becomes on the server (see `calibrate_tokens_per_word`)


@dataclass(frozen=True)
class Load:
    """One load level: `kind` concurrency (users) or rate (requests/s), and the arrival burstiness for rates."""

    kind: LoadKind
    value: float
    burstiness: float = 1.0

    @staticmethod
    def concurrency(users: int) -> Load:
        """A closed loop with `users` concurrent users."""
        return Load("concurrency", float(users))

    @staticmethod
    def rate(per_second: float, burstiness: float = 1.0) -> Load:
        """An open loop at `per_second` arrivals per second (gamma shape `burstiness`; 1 is Poisson)."""
        return Load("rate", float(per_second), burstiness)

    @property
    def label(self) -> str:
        """`16 users` or `4.5 req/s`."""
        if self.kind == "concurrency":
            return f"{int(self.value)} users"
        return f"{self.value:g} req/s"


@dataclass(frozen=True)
class Limits:
    """Bounds of one level: measured requests, dispatch time, warm-up requests and drain time (seconds)."""

    requests: int = 300
    duration: float = 60.0
    warmup: int = 0
    drain: float = 30.0
    max_in_flight: int = 10_000  # open loop: arrivals beyond this many running requests wait in the client


@dataclass(slots=True)
class RequestRecord:
    """One request's stamps (perf_counter seconds; NaN when it never happened) and outcome."""

    index: int
    warmup: bool
    target_prompt_tokens: int
    target_output_tokens: int
    t_sched: float = math.nan  # intended start (arrival time, or the moment the user was free)
    t_send: float = math.nan  # the request's bytes were written to a connection (after opening one, if needed)
    connect_time: float = 0.0  # seconds spent opening a connection first (0 on a reused keep-alive connection)
    t_first_byte: float = math.nan  # first response byte
    t_first_content: float = math.nan  # first event carrying content (role-only chunks do not count)
    t_last_content: float = math.nan  # last content event (never the trailing usage chunk)
    t_done: float = math.nan  # the response ended
    content_times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: str = ""  # usage (from the server) or chunks (one token per content event)
    ok: bool = False
    reason: str = ""  # failure reason when not ok
    http_status: int = 0
    detail: str = ""
    response_id: str = ""
    finish_reason: str | None = None
    server_bursts: int = 0  # coalesced content events whose read's bytes all arrived together: the server's burst
    raw: RawResponse | None = None  # kept until parsed

    @property
    def ttft(self) -> float:
        """Time to first token: first content event - send."""
        return self.t_first_content - self.t_send

    @property
    def ttft_from_scheduled(self) -> float:
        """First content event - scheduled time (includes the client's own queueing)."""
        return self.t_first_content - self.t_sched

    @property
    def e2e(self) -> float:
        """End-to-end: last content event - send."""
        return self.t_last_content - self.t_send

    @property
    def e2e_from_scheduled(self) -> float:
        """Last content event - scheduled time."""
        return self.t_last_content - self.t_sched

    @property
    def tpot(self) -> float:
        """(E2E - TTFT) / (output tokens - 1); NaN for a single token."""
        tokens = self.output_tokens or 0
        if tokens < 2:
            return math.nan
        return (self.t_last_content - self.t_first_content) / (tokens - 1)

    @property
    def itls(self) -> list[float]:
        """Gaps between consecutive content events (one per server output event)."""
        times = self.content_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def coalesced(self) -> int:
        """Content events that arrived in the same read as the one before (ITL between them reads as 0)."""
        times = self.content_times
        return sum(1 for a, b in itertools.pairwise(times) if a == b)

    @property
    def client_behind(self) -> int:
        """Coalesced events that are not the server's bursts: they waited in the socket for a busy client."""
        return max(0, self.coalesced - self.server_bursts)

    @property
    def dispatch_lag(self) -> float:
        """How late the client sent the request after it was scheduled."""
        return self.t_send - self.t_sched


@dataclass
class LevelRun:
    """One run of one level: its load, limits and every request record (warm-up ones flagged)."""

    load: Load
    limits: Limits
    records: list[RequestRecord]
    t_start: float
    t_end: float
    stopped_by: str  # requests (all sent), duration (time ran out), stopped (should_stop)

    @property
    def measured(self) -> list[RequestRecord]:
        """Records outside the warm-up that were sent."""
        return [r for r in self.records if not r.warmup and not math.isnan(r.t_sched)]


@dataclass
class Progress:
    """Counters a progress display reads; the runner only increments integers (no callback on the hot path)."""

    total: int = 0
    done: int = 0
    failed: int = 0
    label: str = ""


# ==============================================================================================================
# Preparing requests
# ==============================================================================================================
def make_prompt(words: int, rng: random.Random) -> str:
    """A prompt of `words` common English words (random, so prefix caching does not flatter TTFT)."""
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, words)))


def request_body(endpoint: Endpoint, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one streaming request, usage requested."""
    body: dict[str, Any] = {"model": endpoint.model, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
    if endpoint.ignore_eos:
        body["ignore_eos"] = True
    return body


def _prepare(
    http: HttpClient, endpoint: Endpoint, workload: Workload, count: int, warmup: int, seed: int
) -> tuple[list[RequestRecord], list[bytes]]:
    rng = random.Random(seed)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **endpoint.headers}
    if workload.class_header:
        headers[schema.CLASS_HEADER] = workload.class_header
    records: list[RequestRecord] = []
    payloads: list[bytes] = []
    for index in range(warmup + count):
        prompt_tokens = workload.prompt_tokens.sample(rng)
        output_tokens = workload.output_tokens.sample(rng)
        prompt = make_prompt(round(prompt_tokens / max(workload.tokens_per_word, 1e-6)), rng)
        body = json.dumps(request_body(endpoint, prompt, output_tokens), separators=(",", ":")).encode()
        payloads.append(http.build("POST", http.url.path, body, headers))
        records.append(RequestRecord(index, index < warmup, prompt_tokens, output_tokens))
    return records, payloads


def arrival_offsets(rate: float, burstiness: float, count: int, rng: random.Random) -> list[float]:
    """Seconds from the level start of `count` arrivals: gamma gaps with shape b and mean 1/rate."""
    offsets: list[float] = []
    t = 0.0
    for _ in range(count):
        gap = 1.0 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        t += gap
        offsets.append(t)
    return offsets


def raise_open_files_limit(wanted: int = 65536) -> None:
    """Raise the soft open-files limit towards the hard one: 1,000 streams need 1,000 sockets."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# ==============================================================================================================
# Finishing a record
# ==============================================================================================================
def finalize(record: RequestRecord, api: Api) -> None:
    """Turn a raw response into stamps, token counts and an outcome (idempotent)."""
    raw = record.raw
    if raw is None:
        return
    record.raw = None
    record.http_status = raw.status
    record.t_first_byte = raw.t_first_byte
    record.t_done = raw.t_end
    if raw.status and raw.status != 200:
        record.reason = client.http_reason(raw.status)
        record.detail = raw.body[:300].decode("utf-8", "replace")
        return
    if raw.status == 200 and "text/event-stream" not in raw.headers.get("content-type", "text/event-stream"):
        record.reason = client.NOT_STREAMING
        record.detail = f"content-type {raw.headers.get('content-type')!r}"
        return
    parsed = client.parse_stream(raw.pieces, api)
    record.content_times = parsed.content_times
    reads = parsed.content_reads
    together = raw.together
    record.server_bursts = sum(
        1
        for before, after in itertools.pairwise(reads)
        if before == after and 0 <= after < len(together) and together[after]
    )
    record.response_id = parsed.response_id
    record.finish_reason = parsed.finish_reason
    if parsed.content_times:
        record.t_first_content = parsed.content_times[0]
        record.t_last_content = parsed.content_times[-1]
    usage = parsed.usage or {}
    completion = usage.get("completion_tokens")
    if isinstance(completion, int) and not isinstance(completion, bool):
        record.output_tokens = completion
        record.tokens_source = "usage"
    else:
        record.output_tokens = len(parsed.content_times)
        record.tokens_source = "chunks"
    prompt = usage.get("prompt_tokens")
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        record.prompt_tokens = prompt
    if parsed.failure is not None:
        record.reason, record.detail = parsed.failure, parsed.detail
    elif raw.error is not None:
        record.reason, record.detail = raw.error, raw.detail
    elif not parsed.content_times:
        record.reason = client.NO_CONTENT
        record.detail = "the stream ended without a content token"
        if record.tokens_source == "usage" and record.output_tokens:
            record.detail += (
                f" although the server counted {record.output_tokens} completion tokens"
                " (their text was empty, or partial UTF-8 the detokenizer held back)"
            )
    else:
        record.ok = True


# ==============================================================================================================
# Running a level
# ==============================================================================================================
class _Runner:
    def __init__(
        self,
        endpoint: Endpoint,
        workload: Workload,
        load: Load,
        limits: Limits,
        seed: int,
        progress: Progress | None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        if load.value <= 0 or (load.kind == "concurrency" and load.value != int(load.value)):
            raise ValueError(
                f"load {load.value!r} must be a positive {'integer' if load.kind == 'concurrency' else 'number'}"
            )
        self.endpoint = endpoint
        self.api = endpoint.api
        self.load = load
        self.limits = limits
        self.seed = seed
        self.http = HttpClient(Url(endpoint.url), verify_tls=endpoint.verify_tls)
        self.records, self.payloads = _prepare(self.http, endpoint, workload, limits.requests, limits.warmup, seed)
        self.progress = progress if progress is not None else Progress()
        self.progress.total = len(self.records)
        self.progress.done = self.progress.failed = 0
        self.progress.label = load.label
        self.should_stop = should_stop or (lambda: False)
        self.raw_bytes = 0
        self.t_start = 0.0
        self.dispatch_deadline = 0.0
        self.hard_deadline = 0.0

    async def execute(self, index: int) -> None:
        record = self.records[index]
        record.t_send = time.perf_counter()
        deadline = min(record.t_send + self.endpoint.request_timeout, self.hard_deadline)
        try:
            raw = await self.http.send(self.payloads[index], deadline)
        except ConnectError as exc:
            record.t_done = time.perf_counter()
            record.reason, record.detail = client.CONNECT, str(exc)
        else:
            if math.isfinite(raw.t_sent):
                record.connect_time = raw.t_sent - record.t_send
                record.t_send = raw.t_sent
            record.raw = raw
            self.raw_bytes += sum(len(piece) for _, piece in raw.pieces)
            if self.raw_bytes > _RAW_BUFFER_LIMIT:
                finalize(record, self.api)
            failed = raw.error is not None or raw.status != 200
            if failed:
                self.progress.failed += 1
        self.progress.done += 1
        self.payloads[index] = b""

    async def closed_loop(self) -> str:
        users = int(self.load.value)
        total = len(self.records)
        next_index = 0

        async def user() -> None:
            nonlocal next_index
            free_at = self.t_start
            while next_index < total:
                now = time.perf_counter()
                if now >= self.dispatch_deadline or self.should_stop():
                    return
                index = next_index
                next_index += 1
                self.records[index].t_sched = free_at
                await self.execute(index)
                free_at = time.perf_counter()

        await asyncio.gather(*(user() for _ in range(min(users, total))))
        if self.should_stop() and next_index < total:
            return "stopped"
        return "requests" if next_index >= total else "duration"

    async def open_loop(self) -> str:
        loop = asyncio.get_running_loop()
        rng = random.Random(self.seed + 1)
        offsets = arrival_offsets(self.load.value, self.load.burstiness, len(self.records), rng)
        finished = loop.create_future()
        in_flight = 0
        waiting: list[int] = []
        launched = 0
        scheduled = [i for i, offset in enumerate(offsets) if self.t_start + offset < self.dispatch_deadline]
        remaining = len(scheduled)
        tasks: set[asyncio.Task[None]] = set()
        clock_offset = loop.time() - time.perf_counter()

        def done(task: asyncio.Task[None]) -> None:
            nonlocal in_flight, remaining
            tasks.discard(task)
            in_flight -= 1
            remaining -= 1
            if waiting:
                start(waiting.pop(0))
            if remaining == 0 and not finished.done():
                finished.set_result(None)

        def start(index: int) -> None:
            nonlocal in_flight, launched
            in_flight += 1
            launched += 1
            task = loop.create_task(self.execute(index))
            tasks.add(task)
            task.add_done_callback(done)

        def arrive(position: int) -> None:
            nonlocal remaining
            index = scheduled[position]
            if self.should_stop():
                # Nothing more is sent: the rest stay unscheduled (NaN t_sched) and out of the results.
                for handle in handles[position:]:
                    handle.cancel()
                remaining -= len(handles) - position
                if remaining == 0 and not finished.done():
                    finished.set_result(None)
                return
            self.records[index].t_sched = self.t_start + offsets[index]
            if in_flight >= self.limits.max_in_flight:
                waiting.append(index)
            else:
                start(index)

        if remaining == 0:
            return "duration"
        handles: list[asyncio.TimerHandle] = []
        for position, i in enumerate(scheduled):
            handles.append(loop.call_at(self.t_start + offsets[i] + clock_offset, arrive, position))
        try:
            await finished
        finally:
            for handle in handles:
                handle.cancel()
            for task in list(tasks):
                task.cancel()
        if any(math.isnan(self.records[i].t_sched) for i in scheduled):
            return "stopped"
        return "requests" if len(scheduled) == len(self.records) else "duration"

    async def run(self) -> LevelRun:
        raise_open_files_limit()
        if self.load.kind == "concurrency":
            # Connection setup is not the server's latency, and 1,000 handshakes at once would starve the first
            # streams' reads: open one connection per user before the clock starts.
            await self.http.preconnect(min(int(self.load.value), len(self.records)))
        # The cyclic garbage collector would walk every stored stamp and body piece in one pause (hundreds of ms
        # at 1,000 streams), stamping every chunk of that moment late; a level creates few cycles, so it is off
        # while the level runs and on again afterwards.
        gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        self.t_start = time.perf_counter()
        self.dispatch_deadline = self.t_start + self.limits.duration
        self.hard_deadline = self.dispatch_deadline + self.limits.drain
        try:
            # Timing the loop's selects tells a server's bursts from a client that fell behind (see TimedSelector).
            with client.timed_selector(asyncio.get_running_loop()):
                if self.load.kind == "concurrency":
                    stopped_by = await self.closed_loop()
                else:
                    stopped_by = await self.open_loop()
        finally:
            t_end = time.perf_counter()
            if gc_was_enabled:
                gc.enable()
            await client.close_quietly(self.http)
        for record in self.records:
            finalize(record, self.api)
        return LevelRun(self.load, self.limits, self.records, self.t_start, t_end, stopped_by)


async def run_level(
    endpoint: Endpoint,
    workload: Workload,
    load: Load,
    limits: Limits,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> LevelRun:
    """Run one load level to its bounds and return every request record.

    `should_stop` (polled before each new request, e.g. `threading.Event().is_set`) ends dispatching early:
    requests already running finish (within `limits.drain`) and the run is returned with `stopped_by` "stopped".
    `progress` counters are updated as requests finish. Never raises for what the server does (refused
    connections, HTTP errors, broken streams are failure reasons on the records); raises `ValueError` only for
    an invalid load or URL.
    """
    runner = _Runner(endpoint, workload, load, limits, seed, progress, should_stop)
    return await runner.run()


def run_level_sync(endpoint: Endpoint, workload: Workload, load: Load, limits: Limits, *, seed: int = 0) -> LevelRun:
    """`run_level` for callers without an event loop (it runs one with `asyncio.run`)."""
    return asyncio.run(run_level(endpoint, workload, load, limits, seed=seed))


# ==============================================================================================================
# Discovery helpers
# ==============================================================================================================
def endpoint_url(url: str, api: Api | None) -> tuple[str, Api]:
    """Resolve a user's URL (base or full endpoint) and API into the endpoint URL and its API.

    `http://host:8000` and `http://host:8000/v1` get `/v1/completions` (or `/v1/chat/completions` for chat);
    a URL already ending in one of those keeps it, and its API wins over a missing `api`.
    """
    parsed = Url(url)
    path = parsed.path.rstrip("/")
    if path.endswith("/chat/completions"):
        if api == "completions":
            raise ValueError(f"{url} is a chat endpoint but --api completions was given")
        return str(parsed), "chat"
    if path.endswith("/completions"):
        if api == "chat":
            raise ValueError(f"{url} is a completions endpoint but --api chat was given")
        return str(parsed), "completions"
    chosen: Api = api or "completions"
    if not path.endswith("/v1"):
        path += "/v1"
    suffix = "/chat/completions" if chosen == "chat" else "/completions"
    return str(parsed.with_path(path + suffix)), chosen


def _origin_path(url: str, leaf: str) -> Url:
    parsed = Url(url)
    base = parsed.path.split("/v1/", 1)[0] if "/v1/" in parsed.path else ""
    return parsed.with_path(f"{base}{leaf}")


async def discover_model(url: str, timeout: float = 10.0) -> str | None:
    """The first model the server lists at `/v1/models` (None when the server answers but cannot say).

    Raises `ConnectError` when no connection opens: "pass --model" would be the wrong advice for a server that
    is not there, and the caller says so instead.
    """
    models = _origin_path(url, "/v1/models")
    http = HttpClient(models)
    try:
        status, body = await http.get_json(models.path, timeout)
    finally:
        await client.close_quietly(http)
    if status != 200 or not isinstance(body, dict):
        return None
    data = body.get("data")
    if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
        return str(data[0]["id"])
    return None


async def calibrate_tokens_per_word(url: str, model: str, timeout: float = 10.0) -> float | None:
    """Prompt tokens per generated word, from the server's `/tokenize` (vLLM has it); None when unavailable."""
    target = _origin_path(url, "/tokenize")
    http = HttpClient(target)
    sample = make_prompt(200, random.Random(7))
    try:
        status, body = await http.request_json(
            "POST", target.path, {"model": model, "prompt": sample, "add_special_tokens": False}, timeout
        )
    except ConnectError:
        return None
    finally:
        await client.close_quietly(http)
    if status != 200 or not isinstance(body, dict):
        return None
    count = body.get("count")
    if not isinstance(count, int):
        tokens = body.get("tokens")
        count = len(tokens) if isinstance(tokens, list) else None
    if not count:
        return None
    return float(count) / 200.0


ProgressCallback = Callable[[Progress], None]
