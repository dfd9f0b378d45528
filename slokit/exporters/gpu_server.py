"""The GPU sidecar's HTTP side: `/metrics` from the latest NVML snapshot, `/healthz` for the liveness probe.

Kept apart from `nvml.py` so the HTTP behaviour (content negotiation, health, clean shutdown on SIGTERM) is tested
the same way with the fake NVML library and with the real one. A scrape converts the poller's snapshot and never
waits on NVML, so `/metrics` answers even while the driver is wedged, lost or absent.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from slokit import __version__
from slokit.exporters.nvml import GpuCollector, GpuPoller

log = logging.getLogger("slokit.gpu")

LANDING: Final = """<!doctype html>
<html><head><title>slokit GPU exporter</title></head>
<body><h1>slokit GPU exporter {version}</h1>
<p>NVML metrics of the GPUs this sidecar watches, for slokit's latency-SLO runbooks.</p>
<ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li></ul>
</body></html>
"""


class GpuServer:
    """An HTTP server bound to `address:port` that serves one poller's snapshot.

    Binding happens in the constructor, so a port in use fails before any thread starts.
    """

    def __init__(self, poller: GpuPoller, address: str = "0.0.0.0", port: int = 9835) -> None:
        self.poller = poller
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(GpuCollector(poller))
        self._httpd = ThreadingHTTPServer((address, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port 0)."""
        port: int = self._httpd.server_address[1]
        return port

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = f"slokit-gpu/{__version__}"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
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

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

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
