"""A local OpenAI-compatible streaming server with a known latency model, to test and benchmark the probe.

The model is continuous batching with `max_seqs` slots, like vLLM's `--max-num-seqs`:

* a request waits (FIFO) until a slot is free; up to `max_seqs` concurrent streams nobody waits;
* once admitted, its first token comes `ttft + ttft_per_token x prompt_tokens` later (prefill);
* then one token every `itl + itl_per_seq x (running - 1)` seconds until `max_tokens` tokens (EOS is never
  sampled: every request behaves as if it sent `ignore_eos`);
* with `burst` B > 1, a stream's tokens are written B at a time in one write (the truth log stamps them alike),
  as a server that batches its output does;
* chat streams start with a role-only chunk at admission (as vLLM's do), and the usage chunk comes
  `usage_delay` after the last token, so a client that counts the role chunk as the first token, or ends E2E at
  the usage chunk, is visibly wrong.

So a closed loop at up to `max_seqs` users sees TTFT = prefill and ITL = the step time, and above `max_seqs`
TTFT grows by the queueing wait: the probe's search must find `max_seqs`.

Truth: for every request the server keeps the `time.perf_counter()` stamp of each content write (same
CLOCK_MONOTONIC as the client on Linux, so stamps compare across processes); `GET /emulator/requests` returns
them keyed by response id. The first token's text is the request number, so tools that keep only the
generated text (vLLM's benchmark) can be matched to the truth too.

Faults for tests and demos, per request with the header `x-emulator-fault: KIND`, or at random with
`faults={KIND: fraction}`: `http_500`, `http_429`, `malformed` (a non-JSON event mid-stream), `cut` (the
connection drops mid-stream), `error_event` (an in-stream error object), `empty` (no tokens), `stall` (never
answers). `POST /emulator/config` changes the model at run time (JSON with any EmulatorConfig field).

Written on raw asyncio (not aiohttp) so that 1,000 streams cost the shared 2-core machine little CPU.

Run it: `python -m slokit.local.emulator --port 8100 --max-seqs 8 --ttft 20ms --itl 5ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import gc
import json
import math
import random
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slokit.units import DurationError, parse_duration

FAULT_HEADER = "x-emulator-fault"
FAULT_KINDS = ("http_500", "http_429", "malformed", "cut", "error_event", "empty", "stall")
_MAX_KEPT = 200_000  # requests whose truth is kept (oldest dropped first)


@dataclass
class EmulatorConfig:
    """The latency model and fault mix. Durations in seconds."""

    model: str = "emulator"
    max_seqs: int = 8
    ttft: float = 0.020
    ttft_per_token: float = 0.0
    itl: float = 0.005
    itl_per_seq: float = 0.0
    usage_delay: float = 0.002
    default_max_tokens: int = 16
    send_usage: bool = True  # honour stream_options.include_usage; False tests the client's fallback
    burst: int = 1  # write the tokens of a stream `burst` at a time, in one write (as a server that batches output)
    faults: dict[str, float] = field(default_factory=dict)
    seed: int = 0

    def update(self, changes: Mapping[str, Any]) -> None:
        """Apply a partial update (from `POST /emulator/config`); raises ValueError for unknown fields."""
        names = {f.name for f in dataclasses.fields(self)}
        for key, value in changes.items():
            if key not in names:
                raise ValueError(f"unknown field {key!r}; expected one of {', '.join(sorted(names))}")
            if key == "faults":
                value = _faults(value)
            setattr(self, key, type(getattr(self, key))(value) if key != "faults" else value)


def _faults(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError("faults must be a mapping of fault kind to fraction")
    out: dict[str, float] = {}
    for kind, fraction in value.items():
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        out[kind] = float(fraction)
    return out


@dataclass
class _Truth:
    number: int
    id: str
    received: float
    prompt_tokens: int
    max_tokens: int
    fault: str
    admitted: float = math.nan
    writes: list[float] = field(default_factory=list)
    usage_written: float = math.nan
    finished: float = math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "id": self.id,
            "received": self.received,
            "admitted": self.admitted,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "fault": self.fault,
            "writes": self.writes,
            "usage_written": self.usage_written,
            "finished": self.finished,
        }


class _Stream:
    """One streaming response in progress."""

    __slots__ = ("chat", "conn", "created", "emitted", "held", "include_usage", "prefix", "truth")

    def __init__(self, conn: _HttpConnection, truth: _Truth, chat: bool, include_usage: bool, model: str) -> None:
        self.conn = conn
        self.truth = truth
        self.chat = chat
        self.include_usage = include_usage
        self.emitted = 0
        self.held: list[bytes] = []  # framed token events waiting for the rest of their burst
        self.created = int(time.time())
        if chat:
            head = json.dumps({"id": truth.id, "object": "chat.completion.chunk", "created": self.created,
                               "model": model})[:-1]  # fmt: skip
            self.prefix = (head + ',"choices":[{"index":0,"delta":{"content":').encode()
        else:
            head = json.dumps({"id": truth.id, "object": "text_completion", "created": self.created,
                               "model": model})[:-1]  # fmt: skip
            self.prefix = (head + ',"choices":[{"index":0,"text":').encode()

    def event(self, text: str, finish: str | None) -> bytes:
        finish_json = "null" if finish is None else json.dumps(finish)
        if self.chat:
            tail = f'}},"logprobs":null,"finish_reason":{finish_json}}}]}}'
        else:
            tail = f',"logprobs":null,"finish_reason":{finish_json},"stop_reason":null}}]}}'
        return b"data: " + self.prefix + json.dumps(text).encode() + tail.encode() + b"\n\n"


class Emulator:
    """The engine: slots, a FIFO queue, token timers and the truth log."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.running = 0
        self.queue: collections.deque[tuple[_Stream, float]] = collections.deque()
        self.truth: collections.OrderedDict[str, _Truth] = collections.OrderedDict()
        self.counter = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- requests -------------------------------------------------------------------------------------------
    def pick_fault(self, header: str | None) -> str:
        if header:
            return header if header in FAULT_KINDS else ""
        roll = self.rng.random()
        acc = 0.0
        for kind, fraction in self.config.faults.items():
            acc += fraction
            if roll < acc:
                return kind
        return ""

    def new_truth(self, chat: bool, prompt_tokens: int, max_tokens: int, fault: str, received: float) -> _Truth:
        self.counter += 1
        prefix = "chatcmpl" if chat else "cmpl"
        truth = _Truth(self.counter, f"{prefix}-{self.counter}", received, prompt_tokens, max_tokens, fault)
        self.truth[truth.id] = truth
        while len(self.truth) > _MAX_KEPT:
            self.truth.popitem(last=False)
        return truth

    def submit(self, stream: _Stream) -> None:
        prefill = self.config.ttft + self.config.ttft_per_token * stream.truth.prompt_tokens
        if self.running < self.config.max_seqs:
            self._admit(stream, prefill)
        else:
            self.queue.append((stream, prefill))

    def _admit(self, stream: _Stream, prefill: float) -> None:
        assert self.loop is not None
        self.running += 1
        now = time.perf_counter()
        stream.truth.admitted = now
        if stream.chat:
            role = stream.prefix.replace(b'"delta":{"content":', b'"delta":{"role":"assistant","content":')
            stream.conn.write_chunk(b"data: " + role + b'""},"logprobs":null,"finish_reason":null}]}\n\n')
        self.loop.call_at(self.loop.time() + prefill, self._token, stream, self.loop.time() + prefill)

    def _release(self) -> None:
        self.running -= 1
        while self.queue and self.running < self.config.max_seqs:
            stream, prefill = self.queue.popleft()
            if stream.conn.closed:
                continue
            self._admit(stream, prefill)

    def _token(self, stream: _Stream, due: float) -> None:
        assert self.loop is not None
        truth = stream.truth
        if stream.conn.closed:
            truth.finished = time.perf_counter()
            self._release()
            return
        fault = truth.fault
        index = stream.emitted
        if fault == "cut" and index == min(2, truth.max_tokens - 1):
            stream.conn.abort()
            truth.finished = time.perf_counter()
            self._release()
            return
        if fault == "malformed" and index == min(2, truth.max_tokens - 1):
            stream.conn.write_chunk(b'data: {"id": "' + truth.id.encode() + b'", "choices": [\n\n')
        if fault == "error_event" and index == min(2, truth.max_tokens - 1):
            error = {"error": {"message": "emulated engine failure", "type": "InternalServerError", "code": 500}}
            stream.conn.write_chunk(b"data: " + json.dumps(error).encode() + b"\n\n")
            self._end(stream, usage=False)
            return
        last = index + 1 >= truth.max_tokens
        text = str(truth.number) if index == 0 else " w"
        payload = stream.event(text, "length" if last else None)
        stream.emitted += 1
        stream.held.append(payload)
        if last or len(stream.held) >= max(1, self.config.burst):
            # One write for the whole burst: its events reach the client in one segment, stamped alike.
            now = time.perf_counter()
            truth.writes.extend([now] * len(stream.held))
            stream.conn.write(b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in stream.held))
            stream.held.clear()
        if not last:
            step = self.config.itl + self.config.itl_per_seq * max(0, self.running - 1)
            self.loop.call_at(due + step, self._token, stream, due + step)
            return
        if stream.include_usage and self.config.send_usage:
            self.loop.call_later(self.config.usage_delay, self._end, stream, True)
        else:
            self._end(stream, usage=False)

    def _end(self, stream: _Stream, usage: bool) -> None:
        truth = stream.truth
        if usage and not stream.conn.closed:
            body: dict[str, Any] = {
                "id": truth.id,
                "object": "chat.completion.chunk" if stream.chat else "text_completion",
                "created": stream.created,
                "model": self.config.model,
                "choices": [],
                "usage": {
                    "prompt_tokens": truth.prompt_tokens,
                    "total_tokens": truth.prompt_tokens + stream.emitted,
                    "completion_tokens": stream.emitted,
                },
            }
            truth.usage_written = time.perf_counter()
            stream.conn.write_chunk(b"data: " + json.dumps(body).encode() + b"\n\n")
        stream.conn.write_chunk(b"data: [DONE]\n\n")
        stream.conn.end_chunked()
        truth.finished = time.perf_counter()
        self._release()

    def empty_stream(self, stream: _Stream) -> None:
        stream.conn.write_chunk(b"data: [DONE]\n\n")
        stream.conn.end_chunked()
        stream.truth.finished = time.perf_counter()


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    prompt = body.get("prompt")
    if prompt is None and isinstance(body.get("messages"), list):
        prompt = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], int):
            return len(prompt)
        prompt = " ".join(str(p) for p in prompt)
    return len(str(prompt or "").split())


class _HttpConnection(asyncio.Protocol):
    """Server side of one keep-alive connection (one request at a time, as HTTP/1.1 without pipelining)."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        received = time.perf_counter()
        self.buffer += data
        while not self.busy:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            parts = lines[0].split(" ")
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            self.busy = True
            self.handle(method, path.split("?", 1)[0], headers, body, received)

    # -- responses --------------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def respond_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }
        self.write(
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.busy = False

    def start_stream(self) -> None:
        self.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )

    def write_chunk(self, data: bytes) -> None:
        self.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.write(b"0\r\n\r\n")
        self.busy = False
        if self.buffer:
            self.data_received(b"")

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes, received: float) -> None:
        emulator = self.emulator
        config = emulator.config
        if method == "GET" and path in ("/health", "/ping"):
            self.respond_json(200, {"status": "ok"})
        elif method == "GET" and path == "/v1/models":
            self.respond_json(200, {"object": "list", "data": [{"id": config.model, "object": "model"}]})
        elif method == "GET" and path == "/emulator/requests":
            self.respond_json(200, {t.id: t.to_json() for t in emulator.truth.values()})
        elif method == "POST" and path == "/emulator/reset":
            emulator.truth.clear()
            self.respond_json(200, {"status": "ok"})
        elif method == "POST" and path == "/emulator/config":
            try:
                changes = json.loads(body or b"{}")
                if not isinstance(changes, dict):
                    raise ValueError("send a JSON object")
                config.update(changes)
            except (ValueError, TypeError) as exc:
                self.respond_json(400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}})
            else:
                self.respond_json(200, dataclasses.asdict(config))
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            self.generate(path.endswith("/chat/completions"), headers, body, received)
        else:
            self.respond_json(404, {"error": {"message": f"no route {method} {path}", "type": "NotFoundError"}})

    def generate(self, chat: bool, headers: Mapping[str, str], body: bytes, received: float) -> None:
        emulator = self.emulator
        config = emulator.config
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self.respond_json(400, {"error": {"message": f"bad JSON: {exc}", "type": "BadRequestError", "code": 400}})
            return
        if request.get("model") not in (None, config.model):
            message = f"The model `{request.get('model')}` does not exist."
            self.respond_json(404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
            return
        max_tokens = request.get("max_completion_tokens") or request.get("max_tokens") or config.default_max_tokens
        fault = emulator.pick_fault(headers.get(FAULT_HEADER))
        truth = emulator.new_truth(chat, _prompt_tokens(request), int(max_tokens), fault, received)
        if fault in ("http_500", "http_429"):
            status = 500 if fault == "http_500" else 429
            self.respond_json(
                status, {"error": {"message": f"emulated {fault}", "type": "EmulatedError", "code": status}}
            )
            truth.finished = time.perf_counter()
            return
        if fault == "stall":
            return  # never answers; the client's timeout ends it
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        stream = _Stream(self, truth, chat, include_usage, config.model)
        self.start_stream()
        if fault == "empty":
            emulator.empty_stream(stream)
            return
        emulator.submit(stream)


async def serve(config: EmulatorConfig, host: str = "127.0.0.1", port: int = 0) -> tuple[asyncio.Server, Emulator]:
    """Start the emulator on the running loop; returns the server (its port is in `sockets`) and the engine."""
    emulator = Emulator(config)
    emulator.loop = asyncio.get_running_loop()
    server = await emulator.loop.create_server(lambda: _HttpConnection(emulator), host, port, backlog=4096)
    return server, emulator


# ==============================================================================================================
# Running it as a separate process (tests, benchmarks, demos)
# ==============================================================================================================
def config_args(config: EmulatorConfig) -> list[str]:
    """Command-line arguments that reproduce `config`."""
    args = [
        "--model", config.model, "--max-seqs", str(config.max_seqs), "--ttft", f"{config.ttft}s",
        "--ttft-per-token", f"{config.ttft_per_token}s", "--itl", f"{config.itl}s",
        "--itl-per-seq", f"{config.itl_per_seq}s", "--usage-delay", f"{config.usage_delay}s",
        "--seed", str(config.seed), "--burst", str(config.burst),
    ]  # fmt: skip
    if not config.send_usage:
        args.append("--no-usage")
    for kind, fraction in config.faults.items():
        args += ["--fault", f"{kind}={fraction}"]
    return args


@contextlib.contextmanager
def emulator_process(config: EmulatorConfig, log_path: Path, timeout: float = 30.0) -> Iterator[str]:
    """Run the emulator in its own process (so it does not share the client's event loop); yields its base URL."""
    from slokit.local.procs import LOOPBACK, ManagedProcess, free_port

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "slokit.local.emulator",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        *config_args(config),
    ]
    process = ManagedProcess("emulator", argv, log_path).start()
    base = f"http://{LOOPBACK}:{port}"
    try:
        process.wait_http(f"{base}/health", timeout)
        yield base
    finally:
        process.stop(grace=5.0)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fault(text: str) -> tuple[str, float]:
    kind, sep, fraction = text.partition("=")
    if not sep or kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"{text!r}: write KIND=FRACTION with KIND one of {', '.join(FAULT_KINDS)}")
    return kind, float(fraction)


def main(argv: list[str] | None = None) -> None:
    """`python -m slokit.local.emulator`: serve until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m slokit.local.emulator",
        description="OpenAI-compatible streaming server with a known continuous-batching latency model.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--model", default="emulator", help="served model name")
    parser.add_argument("--max-seqs", type=int, default=8, help="slots: above this many streams, requests queue")
    parser.add_argument("--ttft", type=_duration, default=0.02, help="prefill time at zero prompt tokens")
    parser.add_argument("--ttft-per-token", type=_duration, default=0.0, help="prefill time per prompt token")
    parser.add_argument("--itl", type=_duration, default=0.005, help="time between tokens with one stream")
    parser.add_argument("--itl-per-seq", type=_duration, default=0.0, help="added per extra running stream")
    parser.add_argument("--usage-delay", type=_duration, default=0.002, help="usage chunk after the last token")
    parser.add_argument("--no-usage", action="store_true", help="never send usage (tests the token fallback)")
    parser.add_argument("--fault", type=_fault, action="append", default=[], help="KIND=FRACTION, repeatable")
    parser.add_argument("--burst", type=int, default=1, help="write tokens this many at a time, in one write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = EmulatorConfig(
        model=args.model,
        max_seqs=args.max_seqs,
        ttft=args.ttft,
        ttft_per_token=args.ttft_per_token,
        itl=args.itl,
        itl_per_seq=args.itl_per_seq,
        usage_delay=args.usage_delay,
        send_usage=not args.no_usage,
        faults=dict(args.fault),
        seed=args.seed,
        burst=max(1, args.burst),
    )

    async def run() -> None:
        from slokit.probe.load import raise_open_files_limit

        raise_open_files_limit()
        # The truth log grows by a list per request; a full collection over it would pause every stream at once.
        gc.freeze()
        gc.set_threshold(100_000, 50, 1000)
        server, _ = await serve(config, args.host, args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
