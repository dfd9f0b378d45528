"""The GPU sidecar's HTTP side: `/metrics` from the latest NVML snapshot, `/healthz` for the liveness probe.

Kept apart from the poller so the HTTP behaviour (content negotiation, health, clean shutdown on SIGTERM) is tested
the same way with the fake NVML library and with the real one. A scrape converts the poller's snapshot and never
waits on NVML, so `/metrics` answers even while the driver is wedged, lost or absent.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slokit import __version__
from slokit import schema as S
from slokit.exporters.gpu.collector import GpuCollector
from slokit.exporters.gpu.poller import GpuPoller
from slokit.exporters.webconfig import BasicAuth, WebConfig, client_sans

log = logging.getLogger("slokit.gpu")

LANDING: Final = """<!doctype html>
<html><head><title>slokit GPU exporter</title></head>
<body><h1>slokit GPU exporter {version}</h1>
<p>NVML metrics of the GPUs this sidecar watches, for slokit's latency-SLO runbooks.</p>
<ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li></ul>
</body></html>
"""


# Safer defaults for an endpoint that sits on a pod IP in a shared cluster. A scrape is one small GET, so anything
# much larger or slower is a broken or hostile client and gets a status (or a closed socket) instead of a thread.
MAX_REQUEST_LINE: Final = 8192  # bytes; longer: 414
MAX_HEADER_BYTES: Final = 16384  # all header lines together; larger: 431 (the standard library also caps 100 lines)
# Seconds a connection may take for the TLS handshake, and then for each request: from waiting for its first byte
# to the last byte of the answer. A deadline per request, not per socket read, so a client that trickles a byte at
# a time is cut off too (a timer closes the socket); idle keep-alive connections close after the same time.
CLIENT_TIMEOUT: Final = 10.0
MAX_CONNECTIONS: Final = 32  # concurrent connections; more are closed at once (Prometheus uses one per target)


@contextlib.contextmanager
def _deadline(sock: Any, seconds: float) -> Iterator[threading.Event]:
    """Shut `sock` down for reading and writing if the block has not finished `seconds` from now.

    The socket's own timeout bounds each read; this bounds them all together. A blocked read then returns
    end-of-file (or fails), so the handler thread ends and gives its connection slot back. Yields an event that is
    set once the socket has been cut off, so a request that was cut short is not taken for a complete one.
    """
    expired = threading.Event()

    def cut_off() -> None:
        expired.set()
        with contextlib.suppress(OSError):
            # The plain socket's shutdown, also for an SSLSocket: it only closes the file descriptor's streams and
            # leaves the TLS object alone while another thread may be reading through it.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    timer = threading.Timer(seconds, cut_off)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


class _SnapshotAge(Collector):
    """`slokit_gpu_snapshot_age_seconds`: how old the served poll is, so a wedged poll shows on a graph."""

    def __init__(self, poller: GpuPoller) -> None:
        self._poller = poller

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            S.GPU_SNAPSHOT_AGE,
            "Seconds since the NVML poll this scrape serves finished; /metrics never waits for NVML.",
            value=self._poller.age(),
        )


class _Httpd(ThreadingHTTPServer):
    """ThreadingHTTPServer with a bounded number of connections and TLS negotiated on the connection's thread.

    The TLS handshake runs in the handler thread under the client deadline, so a client that connects and says
    nothing (or a byte at a time) holds one of MAX_CONNECTIONS slots for at most CLIENT_TIMEOUT seconds per request
    and never the accept loop.
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], ctx: ssl.SSLContext | None):
        self.ssl_context = ctx
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("refusing %s: %d connections already open", client_address[0], MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            request.settimeout(CLIENT_TIMEOUT)
            try:
                with _deadline(request, CLIENT_TIMEOUT):
                    request = self.ssl_context.wrap_socket(request, server_side=True)
            except (OSError, ValueError) as error:  # plain HTTP on the TLS port, a bad client cert, a timeout
                log.debug("TLS handshake with %s failed: %s", client_address[0], error)
                request.close()
                return
        super().finish_request(request, client_address)


class GpuServer:
    """An HTTP(S) server bound to `address:port` (loopback unless told otherwise) that serves one poller's snapshot.

    Binding happens in the constructor, so a port in use fails before any thread starts. With a web-config, TLS
    and basic auth apply to every path except `/healthz`, which the kubelet probes without credentials and which
    tells nothing beyond "the poll loop is alive".
    """

    def __init__(
        self,
        poller: GpuPoller,
        address: str = "127.0.0.1",
        port: int = 9835,
        web_config: WebConfig | None = None,
    ) -> None:
        self.poller = poller
        self.web_config = web_config if web_config is not None else WebConfig()
        self.auth = BasicAuth(self.web_config.users)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(GpuCollector(poller))
        self.registry.register(_SnapshotAge(poller))
        self._httpd = _Httpd((address, port), self._handler(), self.web_config.ssl_context())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port 0)."""
        port: int = self._httpd.server_address[1]
        return port

    @property
    def scheme(self) -> str:
        """`https` with a TLS web-config, else `http`."""
        return "https" if self.web_config.tls is not None else "http"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = f"slokit-gpu/{__version__}"
            timeout = CLIENT_TIMEOUT  # applied to the socket in setup(): a bound on each read
            protocol_version = "HTTP/1.1"  # keep-alive for Prometheus; every response has a Content-Length
            _expired: threading.Event  # set by the request's deadline (handle_one_request)

            def handle_one_request(self) -> None:
                # The bound on the whole request: request line, headers and answer within CLIENT_TIMEOUT.
                with _deadline(self.connection, CLIENT_TIMEOUT) as expired:
                    self._expired = expired
                    try:
                        super().handle_one_request()
                    except OSError:
                        if not expired.is_set():
                            raise
                        self.close_connection = True  # cut off mid-answer: nothing more to say on this socket
                if expired.is_set():
                    log.debug("closed %s: request not done within %ss", self.address_string(), CLIENT_TIMEOUT)
                    self.close_connection = True

            def parse_request(self) -> bool:
                if self._expired.is_set():  # the end of the headers was the deadline's cut, not the client's
                    self.close_connection = True
                    return False
                return self._parse_request()

            def _parse_request(self) -> bool:
                if len(getattr(self, "raw_requestline", b"")) > MAX_REQUEST_LINE:
                    self.close_connection = True
                    self.requestline, self.request_version, self.command = "", "HTTP/1.1", "GET"
                    self._send(414, "text/plain; charset=utf-8", b"request line too long\n")
                    return False
                if not super().parse_request():
                    return False
                size = sum(len(k) + len(v) + 4 for k, v in self.headers.items())
                if size > MAX_HEADER_BYTES:
                    self.close_connection = True
                    self._send(431, "text/plain; charset=utf-8", b"request headers too large\n")
                    return False
                length = self.headers.get("Content-Length", "0").strip()
                if length not in ("", "0") or self.headers.get("Transfer-Encoding"):
                    self.close_connection = True
                    self._send(413, "text/plain; charset=utf-8", b"this server takes no request body\n")
                    return False
                return True

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path != "/healthz" and not self._authorised():
                    return
                if path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self._send(200, content_type, encoder(server.registry))
                elif path == "/healthz":
                    poller = server.poller
                    if poller.healthy():
                        self._send(200, "text/plain; charset=utf-8", b"ok\n")
                    else:
                        body = f"NVML poll stuck: last poll finished {poller.age():.0f}s ago\n"
                        self._send(503, "text/plain; charset=utf-8", body.encode())
                elif path == "/":
                    self._send(200, "text/html; charset=utf-8", LANDING.format(version=__version__).encode())
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

            def _not_allowed(self) -> None:
                self.close_connection = True
                self._send(405, "text/plain; charset=utf-8", b"only GET\n", extra={"Allow": "GET"})

            do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed

            def _authorised(self) -> bool:
                tls = server.web_config.tls
                if tls is not None and tls.client_allowed_sans:
                    peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                    if not client_sans(peer) & set(tls.client_allowed_sans):
                        self._send(403, "text/plain; charset=utf-8", b"client certificate name not allowed\n")
                        return False
                if server.auth.check(self.headers.get("Authorization")):
                    return True
                self._send(
                    401,
                    "text/plain; charset=utf-8",
                    b"Unauthorized\n",
                    extra={"WWW-Authenticate": 'Basic realm="slokit-gpu", charset="UTF-8"'},
                )
                return False

            def _send(self, status: int, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in {**server.web_config.headers, **(extra or {})}.items():
                    self.send_header(name, value)
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                # The standard library's error page echoes parts of the request; send a fixed line instead.
                self.close_connection = True
                # A garbled request line leaves the version at HTTP/0.9, which would drop the status line.
                self.request_version = "HTTP/1.1"
                phrase = self.responses.get(code, ("error",))[0]
                with contextlib.suppress(OSError):
                    self._send(code, "text/plain; charset=utf-8", f"{code} {phrase}\n".encode())

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), format % args)

        return Handler

    def start(self) -> None:
        """Serve on a background thread (the poller is started separately)."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="slokit-gpu-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5.0)
            self._thread = None
        self._httpd.server_close()


def serve_until_signalled(
    poller: GpuPoller,
    server: GpuServer,
    on_ready: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run poller and server until SIGTERM or SIGINT (or `stop` is set), then shut both down cleanly.

    The signal handler only sets an event: `ThreadingHTTPServer.shutdown()` must not be called from the thread that
    runs `serve_forever`, and NVML must be shut down after the poller's threads have left their calls.
    """
    done = stop if stop is not None else threading.Event()
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        done.set()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, handle)
    try:
        poller.start()
        server.start()
        if on_ready is not None:
            on_ready()
        while not done.wait(0.5):
            pass
    finally:
        server.close()
        poller.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        log.info("stopped")
