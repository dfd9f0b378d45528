"""A small webhook receiver that keeps and prints what Alertmanager sends.

Alertmanager's webhook receiver POSTs one JSON document per notification (payload version 4: `receiver`, `status`,
`alerts` with labels, annotations and times, `commonLabels`, ...). This receiver answers 200, keeps every
notification in memory with the path it arrived on (the demo gives each severity route its own path), and calls a
callback so the demo can show it as it lands. Tests wait on it with a deadline.

It runs in a thread of the calling process (`WebhookReceiver`), or on its own for manual use:
`python -m slokit.local.webhook --port 9095` prints one line per alert in each notification.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from slokit.local.procs import LOOPBACK

MAX_BODY_BYTES: Final = 4 * 1024 * 1024  # Alertmanager payloads are small; refuse anything absurd


@dataclass(frozen=True)
class Notification:
    """One POST from Alertmanager."""

    path: str  # e.g. "/page": the route it came through
    received_at: float  # time.time()
    payload: Mapping[str, Any]

    @property
    def receiver(self) -> str:
        """The receiver name Alertmanager reports."""
        return str(self.payload.get("receiver", ""))

    @property
    def status(self) -> str:
        """`firing` or `resolved` for the group."""
        return str(self.payload.get("status", ""))

    @property
    def alerts(self) -> list[Mapping[str, Any]]:
        """The alerts in this notification."""
        alerts = self.payload.get("alerts", [])
        return [a for a in alerts if isinstance(a, Mapping)] if isinstance(alerts, list) else []

    def firing(self, alertname: str | None = None) -> list[Mapping[str, Any]]:
        """Firing alerts in this notification, optionally of one alertname."""
        return [
            a
            for a in self.alerts
            if a.get("status") == "firing" and (alertname is None or _labels(a).get("alertname") == alertname)
        ]


def _labels(alert: Mapping[str, Any]) -> Mapping[str, str]:
    labels = alert.get("labels", {})
    return labels if isinstance(labels, Mapping) else {}


def describe_alert(alert: Mapping[str, Any], path: str = "") -> str:
    """One line for one alert of a notification: route, status, name, severity, runbook_url."""
    labels = _labels(alert)
    annotations = alert.get("annotations", {})
    runbook = annotations.get("runbook_url", "") if isinstance(annotations, Mapping) else ""
    where = {k: labels[k] for k in ("service", "model", "class", "slo", "cause") if k in labels}
    route = f"[{path.strip('/') or '-'}] " if path else ""
    return (
        f"{route}{str(alert.get('status', '?')).upper()} {labels.get('alertname', '?')} "
        f"severity={labels.get('severity', '?')} "
        + " ".join(f"{k}={v}" for k, v in where.items())
        + (f" runbook_url={runbook}" if runbook else "")
    )


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self._answer(400, "expected a JSON body")
            return
        try:
            payload = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self._answer(400, "body is not JSON")
            return
        if not isinstance(payload, dict):
            self._answer(400, "body is not a JSON object")
            return
        self.server.receiver.add(Notification(self.path, time.time(), payload))
        self._answer(200, "ok")

    def do_GET(self) -> None:
        self._answer(200, json.dumps({"notifications": len(self.server.receiver.notifications)}))

    def _answer(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the receiver reports notifications itself."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], receiver: WebhookReceiver) -> None:
        self.receiver = receiver
        super().__init__(address, _Handler)


@dataclass
class WebhookReceiver:
    """Alertmanager webhook receiver on 127.0.0.1, serving from a background thread.

    `on_notification` is called (from the server thread) for each notification as it arrives.
    """

    port: int = 0
    on_notification: Callable[[Notification], None] | None = None
    notifications: list[Notification] = field(default_factory=list, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _server: _Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> WebhookReceiver:
        """Bind (port 0: any free port) and serve in a daemon thread."""
        self._server = _Server((LOOPBACK, self.port), self)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="slokit-webhook", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """Base URL; Alertmanager routes post to paths under it."""
        return f"http://{LOOPBACK}:{self.port}"

    def add(self, notification: Notification) -> None:
        """Keep a notification, wake waiters, call the callback (its errors never reach Alertmanager)."""
        with self._cond:
            self.notifications.append(notification)
            self._cond.notify_all()
        if self.on_notification is not None:
            # A display problem must not fail the delivery.
            with contextlib.suppress(Exception):
                self.on_notification(notification)

    def wait_for(self, predicate: Callable[[Notification], bool], timeout: float) -> Notification | None:
        """The first notification (already received or arriving within `timeout` s) matching `predicate`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for notification in self.notifications[seen:]:
                    if predicate(notification):
                        return notification
                seen = len(self.notifications)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0))

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the receiver in the foreground and print each alert as it arrives (Ctrl-C stops it)."""
    parser = argparse.ArgumentParser(description="Print what Alertmanager's webhook receiver sends.")
    parser.add_argument("--port", type=int, default=9095, help="port on 127.0.0.1 (default 9095)")
    args = parser.parse_args(argv)

    def show(notification: Notification) -> None:
        for alert in notification.alerts:
            print(describe_alert(alert, notification.path), flush=True)

    receiver = WebhookReceiver(args.port, show).start()
    print(f"listening on {receiver.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
