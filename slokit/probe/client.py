"""Streaming HTTP client for OpenAI-compatible endpoints, built for timing accuracy under load.

Why not aiohttp here: with aiohttp the bytes of a chunk reach the caller only when its task is resumed, one loop
iteration after the socket was read, behind every other ready callback; at 1,000 concurrent streams that delay is
the timing error. This client is a small HTTP/1.1 `asyncio.Protocol`: `data_received` runs as soon as the event
loop reads the socket, and the first thing it does is take a `time.perf_counter()` stamp. It then only frames
the body (chunked or Content-Length) and stores `(stamp, bytes)`; SSE and JSON parsing happen later, off the
measured path (`parse_stream`). No task wakes up per chunk.

Better still, on Linux plain-http connections read with `recvmsg` and `SO_TIMESTAMPNS`: the stamp is the time
the kernel received the bytes, so a busy event loop (1,000 streams emitting in the same engine step on two cores)
delays when a chunk is *processed*, not when it is *stamped*. Kernel stamps are CLOCK_REALTIME; they are moved
onto the perf_counter clock with an offset read at the same moment, and never allowed past the read time.

Scope: HTTP/1.1 over TCP or TLS, keep-alive, chunked and Content-Length bodies; no proxies, redirects or HTTP/2
(an inference endpoint does not need them).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import math
import selectors
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

Api = Literal["completions", "chat"]

# Failure reasons (the keys of a level's `failures` counts). Each is documented in docs/probe.md.
CONNECT = "connect"  # could not open a connection (refused, unreachable, DNS, TLS handshake)
TIMEOUT = "timeout"  # the request did not finish within its time limit
STREAM_CUT = "stream_cut"  # the connection closed before the response ended
MALFORMED_SSE = "malformed_sse"  # an SSE event whose data is not a JSON object
STREAM_ERROR = "stream_error"  # the server sent an error object inside the stream
NO_CONTENT = "no_content"  # the stream ended without a single content token
NOT_STREAMING = "not_streaming"  # 200 but not an event stream (the server ignored `stream: true`)
PROTOCOL = "protocol_error"  # the HTTP response itself could not be read


def http_reason(status: int) -> str:
    """Failure reason for an HTTP error status, e.g. `http_503`."""
    return f"http_{status}"


class Url:
    """A parsed http(s) URL: scheme, host, port and path."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path or "/"
        if parts.query:
            self.path += "?" + parts.query
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self.host_header = self.host if default_port else f"{self.host}:{self.port}"

    def with_path(self, path: str) -> Url:
        """The same origin with another path."""
        return Url(f"{self.scheme}://{self.host_header}{path}")

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.path}"


@dataclass(slots=True)
class RawResponse:
    """One HTTP response as received: status, headers and body pieces stamped on arrival (perf_counter s)."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    t_sent: float = math.nan  # the request bytes were written (after any connection setup)
    t_first_byte: float = math.nan
    t_end: float = math.nan
    pieces: list[tuple[float, bytes]] = field(default_factory=list)
    together: list[bool] = field(default_factory=list)  # per piece: its read's bytes all arrived within BURST_SPREAD
    complete: bool = False  # the body ended as HTTP framed it
    error: str | None = None  # a failure reason when the response could not be read to its end
    detail: str = ""

    @property
    def body(self) -> bytes:
        """The whole body (for small, non-streamed responses)."""
        return b"".join(piece for _, piece in self.pieces)

    @property
    def received_any(self) -> bool:
        """Whether any byte of the response arrived."""
        return not math.isnan(self.t_first_byte)


class _Writer(Protocol):
    """What a connection needs from its transport (asyncio's, or `_StampingTransport`)."""

    def write(self, data: bytes) -> None: ...

    def abort(self) -> None: ...


_SO_TIMESTAMPNS = 35  # Linux asm-generic SO_TIMESTAMPNS(_OLD); its cmsg carries a struct timespec
_KERNEL_STAMPS = sys.platform == "linux"
_ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 1 << 18


BURST_SPREAD = 0.001  # bytes of one read that arrived within this of each other were sent together
_BLOCKED = 50e-6  # a select that lasted this long waited: nothing was ready when it began


class TimedSelector(selectors.BaseSelector):
    """The event loop's selector, timing each `select` so a read can tell whether the loop kept up.

    `floor` is the earliest arrival time of any byte that a callback of the current loop iteration reads
    that had not been read already: if the select waited (no socket was ready when it began), the loop woke for
    the first byte to arrive, so bytes came at or after its return; otherwise they came after the previous
    select returned (that one would have reported the socket). With the kernel's stamp of a read's newest
    byte, `stamp - floor` bounds how far apart the read's bytes arrived. The wake-up latency of the process is
    taken as zero: a client starved of CPU is taken to have been waiting.
    """

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self.inner = inner
        self.returned = -math.inf
        self.floor = -math.inf

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        began = time.perf_counter()
        events = self.inner.select(timeout)
        now = time.perf_counter()
        waited = timeout != 0 and now - began >= _BLOCKED
        self.floor = now if waited else self.returned
        self.returned = now
        return events

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.modify(fileobj, events, data)

    def close(self) -> None:
        self.inner.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self.inner.get_map()


@contextlib.contextmanager
def timed_selector(loop: asyncio.AbstractEventLoop) -> Iterator[TimedSelector | None]:
    """Time the running selector loop's selects while the body runs (None for loops without one, e.g. uvloop)."""
    inner = getattr(loop, "_selector", None)
    if isinstance(inner, TimedSelector):
        yield inner
        return
    if not isinstance(inner, selectors.BaseSelector):
        yield None
        return
    timed = TimedSelector(inner)
    loop._selector = timed  # type: ignore[attr-defined]
    try:
        yield timed
    finally:
        loop._selector = inner  # type: ignore[attr-defined]


def _selector_of(loop: asyncio.AbstractEventLoop) -> TimedSelector | None:
    selector = getattr(loop, "_selector", None)
    return selector if isinstance(selector, TimedSelector) else None


class _ReadClock:
    """Per connection: whether each read's bytes arrived together (see `TimedSelector`)."""

    __slots__ = ("last_read",)

    def __init__(self) -> None:
        self.last_read = -math.inf

    def together(self, selector: TimedSelector | None, stamp: float, now: float) -> bool:
        floor = self.last_read if selector is None else max(selector.floor, self.last_read)
        self.last_read = now
        return stamp - floor <= BURST_SPREAD


class _StampingTransport:
    """A minimal non-blocking TCP transport that stamps each read with the kernel's receive time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: _Connection) -> None:
        self.loop = loop
        self.sock = sock
        self.conn = conn
        self.fd = sock.fileno()
        self.pending = b""
        self.closed = False
        self.clock = _ReadClock()
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = time.perf_counter()
        if not data:
            self._lost(None)
            return
        stamp = now
        for level, kind, cdata in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(cdata) >= 16:
                seconds, nanos = struct.unpack("qq", cdata[:16])
                kernel = seconds + nanos * 1e-9 - (time.time() - time.perf_counter())
                if now - 5.0 < kernel <= now:  # a sane stamp on the same clock; else keep the read time
                    stamp = kernel
        self.conn.stamped_data(stamp, data, self.clock.together(_selector_of(self.loop), stamp, now))

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.pending:
            self.pending += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        if sent < len(data):
            self.pending = data[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        self.pending = self.pending[sent:]
        if not self.pending:
            self.loop.remove_writer(self.fd)

    def abort(self) -> None:
        self._lost(None, notify=False)

    def _lost(self, exc: Exception | None, notify: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        if self.pending:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        if notify:
            self.conn.connection_lost(exc)
        else:
            self.loop.call_soon(self.conn.connection_lost, exc)


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: _Writer | None = None
        self.closed = False
        self.used = 0  # requests sent on this connection
        self._future: asyncio.Future[RawResponse] | None = None
        self._response = RawResponse()
        self._head = bytearray()
        self._buf = bytearray()
        self._mode = "head"  # head, chunked, length, eof, done
        self._remaining = 0  # chunked: bytes left in the current chunk (+2 for CRLF); length: body bytes left
        self._chunk_state = "size"  # size, data, trailer
        self._keep_alive = True
        self._timer: asyncio.TimerHandle | None = None
        self._clock = _ReadClock()

    # -- asyncio.Protocol -----------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.stamped_data(now, data, self._clock.together(_selector_of(self.loop), now, now))

    def stamped_data(self, now: float, data: bytes, together: bool = False) -> None:
        """Bytes that arrived at `now` (perf_counter seconds); `together`: all within `BURST_SPREAD`."""
        response = self._response
        if self._future is None or self._future.done():
            return  # bytes nobody asked for (after a timeout): the connection is closed below
        if math.isnan(response.t_first_byte):
            response.t_first_byte = now
        pieces = len(response.pieces)
        try:
            self._feed(now, data)
        except (ValueError, UnicodeDecodeError) as exc:
            self._fail(PROTOCOL, f"unreadable HTTP response: {exc}", now)
        added = len(response.pieces) - pieces
        if added > 0:
            response.together.extend([together] * added)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        now = time.perf_counter()
        if self._future is not None and not self._future.done():
            if self._mode == "eof":
                self._finish(now)
            else:
                detail = f"connection closed by the server ({exc})" if exc else "connection closed by the server"
                self._fail(STREAM_CUT, detail, now)

    # -- requests -------------------------------------------------------------------------------------------
    def send(self, raw: bytes, deadline: float) -> asyncio.Future[RawResponse]:
        """Write one request; the future resolves with the response (never raises for HTTP-level failures)."""
        assert self.transport is not None and self._future is None
        self.used += 1
        self._future = self.loop.create_future()
        self._response = RawResponse()
        self._head.clear()
        self._buf.clear()
        self._mode = "head"
        self._chunk_state = "size"
        delay = max(0.0, deadline - time.perf_counter())
        self._timer = self.loop.call_later(delay, self._on_timeout)
        self._response.t_sent = time.perf_counter()
        self.transport.write(raw)
        return self._future

    def reusable(self) -> bool:
        """Whether another request can be sent on this connection."""
        return not self.closed and self._keep_alive and self._future is None and self.transport is not None

    def close(self) -> None:
        """Close the connection now (pending responses end as failures)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _on_timeout(self) -> None:
        self._timer = None
        self._fail(TIMEOUT, "no complete response within the time limit", time.perf_counter())
        self.close()

    def _release(self) -> asyncio.Future[RawResponse] | None:
        future, self._future = self._future, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return future

    def _finish(self, now: float) -> None:
        self._mode = "done"
        self._response.complete = True
        self._response.t_end = now
        future = self._release()
        if future is not None and not future.done():
            future.set_result(self._response)
        if not self._keep_alive:
            self.close()

    def _fail(self, reason: str, detail: str, now: float) -> None:
        self._response.error = reason
        self._response.detail = detail
        self._response.t_end = now
        self._keep_alive = False
        future = self._release()
        if future is not None and not future.done():
            future.set_result(self._response)
        self.close()

    # -- framing ----------------------------------------------------------------------------------------------
    def _feed(self, now: float, data: bytes) -> None:
        if self._mode == "head":
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > 65536:
                    raise ValueError("response headers longer than 64 KiB")
                return
            rest = bytes(self._head[end + 4 :])
            self._parse_head(bytes(self._head[:end]))
            data = rest
            if self._mode == "done":
                return
        if self._mode == "chunked":
            self._feed_chunked(now, data)
        elif self._mode == "length":
            take = data[: self._remaining]
            if take:
                self._response.pieces.append((now, take))
            self._remaining -= len(take)
            if self._remaining <= 0:
                self._finish(now)
        elif self._mode == "eof" and data:
            self._response.pieces.append((now, data))

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        self._response.status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self._response.headers = headers
        connection = headers.get("connection", "").lower()
        self._keep_alive = parts[0] != "HTTP/1.0" and "close" not in connection
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
            self._chunk_state = "size"
        elif "content-length" in headers:
            self._mode = "length"
            self._remaining = int(headers["content-length"])
            if self._remaining == 0:
                self._finish(time.perf_counter())
        elif self._response.status in (204, 304) or 100 <= self._response.status < 200:
            self._finish(time.perf_counter())
        else:
            self._mode = "eof"
            self._keep_alive = False

    def _feed_chunked(self, now: float, data: bytes) -> None:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        while True:
            if self._chunk_state == "size":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                size = int(bytes(buf[pos:end]).split(b";", 1)[0].strip(), 16)
                pos = end + 2
                if size == 0:
                    self._chunk_state = "trailer"
                    continue
                self._remaining = size
                self._chunk_state = "data"
            elif self._chunk_state == "data":
                available = len(buf) - pos
                if available <= 0:
                    break
                take = min(available, self._remaining)
                out.append(bytes(buf[pos : pos + take]))
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._chunk_state = "crlf"
            elif self._chunk_state == "crlf":
                if len(buf) - pos < 2:
                    break
                pos += 2
                self._chunk_state = "size"
            else:  # trailer: lines until an empty one
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                line_empty = end == pos
                pos = end + 2
                if line_empty:
                    del buf[:pos]
                    if out:
                        self._response.pieces.append((now, b"".join(out)))
                    self._finish(now)
                    return
        del buf[:pos]
        if out:
            self._response.pieces.append((now, out[0] if len(out) == 1 else b"".join(out)))


class ConnectError(OSError):
    """A connection could not be opened; the message says where and why, e.g. `connection refused at HOST:PORT`."""


def _connect_failure(host: str, port: int, reason: OSError | str) -> ConnectError:
    """One wording for a failed connect, so a refused port reads the same in every place that reports it.

    A refused connection is the commonest mistake (wrong port, server not started yet) and is named as such;
    every other cause keeps the operating system's words.
    """
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(reason, OSError) and reason.errno == errno.ECONNREFUSED:
        return ConnectError(f"connection refused at {where}")
    text = reason if isinstance(reason, str) else (reason.strerror or str(reason))
    return ConnectError(f"cannot connect to {where}: {text}")


class HttpClient:
    """Keep-alive connections to one origin, at most one request per connection at a time."""

    def __init__(self, url: Url, *, connect_timeout: float = 10.0, verify_tls: bool = True) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._ssl = ssl.create_default_context()
            if not verify_tls:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._ssl is None and _KERNEL_STAMPS and _ANCILLARY:
            return await self._open_stamping(loop)
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop), self.url.host, self.url.port, ssl=self._ssl),
                self.connect_timeout,
            )
        except TimeoutError:
            raise ConnectError(
                f"connecting to {self.url.host_header} timed out after {self.connect_timeout:g}s"
            ) from None
        except OSError as exc:
            raise _connect_failure(self.url.host, self.url.port, exc) from None
        self._all.add(protocol)
        return protocol

    async def _open_stamping(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(self.url.host, self.url.port, type=socket.SOCK_STREAM), self.connect_timeout
            )
        except (TimeoutError, OSError) as exc:
            raise ConnectError(f"cannot resolve {self.url.host}: {exc}") from None
        last: OSError | str = "no address"
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, address), self.connect_timeout)
            except TimeoutError:
                sock.close()
                last = f"timed out after {self.connect_timeout:g}s"
                continue
            except OSError as exc:
                sock.close()
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):  # without kernel stamps the read time is used
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            conn = _Connection(loop)
            conn.connection_made(_StampingTransport(loop, sock, conn))
            self._all.add(conn)
            return conn
        raise _connect_failure(self.url.host, self.url.port, last)

    def build(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        """The request bytes (built once, before a load level starts)."""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.url.host_header}", f"Content-Length: {len(body)}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def send(self, raw: bytes, deadline: float) -> RawResponse:
        """Send prepared request bytes and wait for the whole response (until `deadline`, perf_counter s).

        Raises `ConnectError` if no connection could be opened. A reused keep-alive connection that the server
        closed before answering is retried once on a fresh one, as browsers and aiohttp do.
        """
        for attempt in range(2):
            conn: _Connection | None = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.reusable():
                    conn = candidate
                    break
                self._all.discard(candidate)
            if conn is None:
                conn = await self._open()
            reused = conn.used > 0
            response = await conn.send(raw, deadline)
            if conn.reusable():
                self._idle.append(conn)
            else:
                self._all.discard(conn)
            if response.error == STREAM_CUT and reused and not response.received_any and attempt == 0:
                continue
            return response
        raise AssertionError("unreachable")

    async def preconnect(self, count: int, parallel: int = 64) -> int:
        """Open up to `count` idle connections ahead of a level (stops at the first failure); returns how many."""
        opened = 0
        failed = False
        gate = asyncio.Semaphore(parallel)

        async def one() -> None:
            nonlocal opened, failed
            async with gate:
                if failed:
                    return
                try:
                    conn = await self._open()
                except ConnectError:
                    failed = True
                    return
                self._idle.append(conn)
                opened += 1

        await asyncio.gather(*(one() for _ in range(count)))
        return opened

    async def get_json(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        """GET a JSON document (status, decoded body or None)."""
        return await self.request_json("GET", path, None, timeout)

    async def request_json(self, method: str, path: str, payload: Any, timeout: float = 10.0) -> tuple[int, Any]:
        """Send one small JSON request; returns (status, decoded body or None)."""
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        response = await self.send(self.build(method, path, body, headers), time.perf_counter() + timeout)
        if response.error is not None:
            return 0, None
        try:
            return response.status, json.loads(response.body)
        except ValueError:
            return response.status, None

    async def aclose(self) -> None:
        """Close every connection."""
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)


# ==============================================================================================================
# Parsing a finished stream (off the measured path)
# ==============================================================================================================
@dataclass(slots=True)
class StreamResult:
    """What one SSE response said, with arrival stamps of the events that carried content."""

    content_times: list[float] = field(default_factory=list)  # one stamp per content-bearing event
    content_reads: list[int] = field(default_factory=list)  # per content event: the index of the piece it ended in
    usage: dict[str, Any] | None = None  # the last usage object seen (some servers repeat it on every chunk)
    response_id: str = ""
    finish_reason: str | None = None
    done_seen: bool = False
    failure: str | None = None  # MALFORMED_SSE or STREAM_ERROR
    detail: str = ""


def _has_content(choice: Any, api: Api) -> bool:
    if not isinstance(choice, dict):
        return False
    if api == "completions" and choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        # Role-only chunks (delta.role with empty content) are not tokens: counting them is the classic early-TTFT bug.
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )
    return bool(choice.get("text"))


def parse_stream(pieces: list[tuple[float, bytes]], api: Api) -> StreamResult:
    """Read SSE events from stamped body pieces; an event takes the stamp of the piece that completed it."""
    result = StreamResult()
    pending = b""
    for index, (stamp, piece) in enumerate(pieces):
        pending += piece
        if b"\r" in pending:
            pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        while True:
            end = pending.find(b"\n\n")
            if end < 0:
                break
            event, pending = pending[:end], pending[end + 2 :]
            _event(result, event, stamp, api, index)
            if result.failure is not None:
                return result
    if pending.strip():
        _event(result, pending, pieces[-1][0] if pieces else math.nan, api, len(pieces) - 1)
    return result


def _event(result: StreamResult, event: bytes, stamp: float, api: Api, index: int = -1) -> None:
    data_lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[5:].removeprefix(b" "))
    if not data_lines:
        return  # comments (": ping"), event:/id:/retry: lines
    data = b"\n".join(data_lines).strip()
    if data == b"[DONE]":
        result.done_seen = True
        return
    try:
        obj = json.loads(data)
    except ValueError:
        result.failure = MALFORMED_SSE
        result.detail = f"event data is not JSON: {data[:120]!r}"
        return
    if not isinstance(obj, dict):
        result.failure = MALFORMED_SSE
        result.detail = f"event data is not a JSON object: {data[:120]!r}"
        return
    if "error" in obj and not obj.get("choices"):
        result.failure = STREAM_ERROR
        error = obj["error"]
        result.detail = str(error.get("message", error) if isinstance(error, dict) else error)[:300]
        return
    if not result.response_id and isinstance(obj.get("id"), str):
        result.response_id = obj["id"]
    usage = obj.get("usage")
    if isinstance(usage, dict):
        result.usage = usage
    choices = obj.get("choices")
    if isinstance(choices, list):
        content = False
        for choice in choices:
            content = content or _has_content(choice, api)
            if isinstance(choice, dict) and choice.get("finish_reason"):
                result.finish_reason = str(choice["finish_reason"])
        if content:
            result.content_times.append(stamp)
            result.content_reads.append(index)


async def close_quietly(client: HttpClient) -> None:
    """Close a client, ignoring errors (used in `finally` blocks)."""
    with contextlib.suppress(Exception):
        await client.aclose()
