"""A real Alertmanager on a loopback port, routing by severity to webhook receivers.

The demo and the end-to-end test use Debian's `prometheus-alertmanager` binary exactly as an on-call setup would:
Prometheus sends firing alerts, Alertmanager groups them and routes them by the `severity` label (the spec's page
and ticket values) to a receiver each. Both receivers here are webhooks pointing at slokit's small receiver
(`slokit.local.webhook`), on different paths, so what arrives shows which route the alert took.

The timings are shortened (group_wait 1s, group_interval 5s) so a notification arrives within seconds of an alert
firing; production routing is not generated here. Clustering is switched off (`--cluster.listen-address=`) so
nothing listens beyond the one loopback port.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from slokit.local.procs import LOOPBACK, ManagedProcess, StartError, free_port

BINARY_NAMES: Final = ("prometheus-alertmanager", "alertmanager")
PAGE_RECEIVER: Final = "page"
TICKET_RECEIVER: Final = "ticket"
DEFAULT_RECEIVER: Final = "other"


def find_binary() -> str:
    """Path of the Alertmanager binary (Debian names it prometheus-alertmanager); StartError when missing."""
    for name in BINARY_NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise StartError(
        "Alertmanager is not installed: install Debian's prometheus-alertmanager package "
        "(`make system-deps`, or apt-get install prometheus-alertmanager)"
    )


@dataclass(frozen=True)
class Route:
    """One route: alerts whose `severity` equals `severity` go to the webhook at `url`."""

    receiver: str
    severity: str | None  # None: the default route for anything else
    url: str


def severity_routes(webhook_base: str, page_severity: str, ticket_severity: str) -> list[Route]:
    """Routes for a spec's two severities plus a catch-all, each to its own path on one webhook receiver."""
    base = webhook_base.rstrip("/")
    return [
        Route(PAGE_RECEIVER, page_severity, f"{base}/{PAGE_RECEIVER}"),
        Route(TICKET_RECEIVER, ticket_severity, f"{base}/{TICKET_RECEIVER}"),
        Route(DEFAULT_RECEIVER, None, f"{base}/{DEFAULT_RECEIVER}"),
    ]


def config(
    routes: Sequence[Route], group_by: Sequence[str] = ("alertname", "service", "model", "class")
) -> dict[str, Any]:
    """Alertmanager configuration as plain data: one receiver per route, routed on `severity`.

    `severity` is not in `group_by` on purpose: the routes split by it already, and each notification then carries
    it in `commonLabels`.
    """
    default = next((r for r in routes if r.severity is None), None)
    if default is None:
        raise ValueError("one route must be the default (severity None)")
    children = [
        {"receiver": r.receiver, "matchers": [f'severity="{r.severity}"'], "continue": False}
        for r in routes
        if r.severity is not None
    ]
    return {
        "route": {
            "receiver": default.receiver,
            "group_by": list(group_by),
            "group_wait": "1s",
            "group_interval": "5s",
            "repeat_interval": "1h",
            "routes": children,
        },
        "receivers": [
            {"name": r.receiver, "webhook_configs": [{"url": r.url, "send_resolved": True, "max_alerts": 0}]}
            for r in routes
        ],
    }


def with_webhooks(
    data: Mapping[str, Any], webhook_base: str, *, group_wait: str = "1s", group_interval: str = "5s"
) -> dict[str, Any]:
    """A copy of an Alertmanager configuration for a run on loopback ports.

    Every receiver's integrations are replaced by one webhook to `<webhook_base>/<receiver name>` (what a team does
    to the receivers the generated configuration declares by name only), and every route's `group_wait` and
    `group_interval` are shortened: the root route's are set, and any child route that sets its own is changed, so
    a notification arrives within seconds. Grouping, matchers, repeat intervals and inhibitions are untouched.
    """
    out = copy.deepcopy(dict(data))
    base = webhook_base.rstrip("/")
    integrations = {"webhook_configs", "email_configs", "pagerduty_configs", "slack_configs", "opsgenie_configs",
                    "victorops_configs", "pushover_configs", "wechat_configs", "telegram_configs", "sns_configs",
                    "webex_configs", "discord_configs", "msteams_configs", "msteamsv2_configs", "jira_configs",
                    "rocketchat_configs"}  # fmt: skip
    receivers = []
    for receiver in out.get("receivers", []):
        kept = {k: v for k, v in receiver.items() if k not in integrations}
        url = f"{base}/{urllib.parse.quote(str(receiver['name']), safe='')}"
        kept["webhook_configs"] = [{"url": url, "send_resolved": True, "max_alerts": 0}]
        receivers.append(kept)
    out["receivers"] = receivers

    def shorten(route: dict[str, Any], root: bool) -> None:
        for key, value in (("group_wait", group_wait), ("group_interval", group_interval)):
            if root or key in route:
                route[key] = value
        for child in route.get("routes", []):
            shorten(child, False)

    shorten(out.setdefault("route", {}), True)
    return out


@dataclass
class Alertmanager:
    """A running Alertmanager: its URL, the routes it was given, and stop()."""

    url: str
    routes: tuple[Route, ...]
    process: ManagedProcess
    config_path: Path
    _stopped: bool = field(default=False, init=False)

    @property
    def pid(self) -> int | None:
        """The process id (for checks that it is gone after stop())."""
        return self.process.pid

    def alerts(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (API v2), each with labels, annotations and status."""
        data = _get_json(f"{self.url}/api/v2/alerts", timeout)
        return list(data) if isinstance(data, list) else []

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]], timeout: float = 5.0) -> None:
        """Send alerts as Prometheus would (API v2); for tests of the routing."""
        body = json.dumps(list(alerts)).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()

    def stop(self) -> None:
        """Stop the process (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self.process.stop()


def _get_json(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode())


def check_config(path: Path) -> str | None:
    """`amtool check-config` on a file when amtool is installed: None when valid, else its output."""
    amtool = shutil.which("amtool")
    if amtool is None:
        return None
    done = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=30, check=False)
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


def start_alertmanager(
    workdir: Path,
    routes: Sequence[Route],
    *,
    port: int | None = None,
    timeout: float = 30.0,
    config_data: Mapping[str, Any] | None = None,
) -> Alertmanager:
    """Start Alertmanager on 127.0.0.1 with `routes`, wait until it is ready, and return it.

    Its configuration, data and log live under `workdir`. Raises StartError (quoting the log) when the binary is
    missing, the configuration is refused or it does not become ready within `timeout` seconds. `config_data`
    replaces the severity routing built from `routes` (the generated configuration merged with webhooks).
    """
    binary = find_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "alertmanager.yml"
    config_path.write_text(
        yaml.safe_dump(dict(config_data) if config_data is not None else config(routes), sort_keys=False),
        encoding="utf-8",
    )
    port = port or free_port()
    url = f"http://{LOOPBACK}:{port}"
    process = ManagedProcess(
        "alertmanager",
        [
            binary,
            f"--config.file={config_path}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            f"--web.external-url={url}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        workdir / "alertmanager.log",
    ).start()
    try:
        process.wait_http(f"{url}/-/ready", timeout)
    except BaseException:
        process.stop()
        raise
    return Alertmanager(url, tuple(routes), process, config_path)


def is_reachable(url: str) -> bool:
    """Whether an Alertmanager answers at `url`."""
    try:
        _get_json(f"{url}/api/v2/status", 2.0)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True
