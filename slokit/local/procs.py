"""Start, wait for and stop local helper processes (vLLM, Prometheus, Alertmanager) on loopback ports.

Every wait is bounded by a deadline, every process is stopped (SIGTERM, then SIGKILL) and its process group with
it, and output goes to a log file that errors quote, so a failed start explains itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


class StartError(RuntimeError):
    """A helper process did not become ready; the message quotes the end of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ManagedProcess:
    """A child process in its own process group, with its output in `log_path`."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> ManagedProcess:
        """Start the process (output to the log file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise StartError(f"{self.name}: cannot run {self.argv[0]}: {exc.strerror}") from None
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        """The process id once started (for checks that it is gone after stop())."""
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        """Whether the process is still alive."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the process's output."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_http(self, url: str, timeout: float) -> None:
        """Wait until GET `url` answers 2xx; raise StartError if the process exits or the deadline passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise StartError(f"{self.name} exited with code {code} before {url} answered:\n{self.log_tail()}")
            if http_ok(url):
                return
            time.sleep(0.5)
        raise StartError(f"{self.name} did not answer {url} within {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL after `grace` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        # Children that left the group's leader behind (vLLM's engine core) go with the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
