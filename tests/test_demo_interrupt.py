"""Ctrl-C during `slokit demo` stops everything it started and exits 130.

The demo runs as a real process; SIGINT (what Ctrl-C sends) arrives while vLLM is starting, with Alertmanager,
the GPU sidecar and the webhook already up. Afterwards no process may hold a file under the demo's run directory
open (every process the demo starts writes its log there, and vLLM's engine core and workers inherit that log),
and the ports it printed must be closed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus]


def _holders(directory: Path) -> list[str]:
    """Processes with a file under `directory` open (from /proc/*/fd)."""
    prefix = str(directory.resolve())
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd).startswith(prefix):
                    found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
                    break
        except OSError:
            continue
    return found


def _closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _reset_sigint() -> None:
    # A shell running tests in the background may ignore SIGINT; the demo gets the default, as in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(240)
def test_ctrl_c_while_starting_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    process = subprocess.Popen(
        [sys.executable, "-m", "slokit.cli", "demo", "-o", str(out), "--plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_reset_sigint,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in process.stdout:
            lines.append(line)
            if "vLLM (tiny model" in line or time.monotonic() > deadline:
                break
        assert any("vLLM (tiny model" in line for line in lines), "".join(lines)
        time.sleep(3)  # vLLM's API server is importing; its engine core may be spawning
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    output = "".join(lines) + rest
    assert process.returncode == 130, output
    assert "interrupted: stopping everything" in output
    assert "Traceback" not in output
    ports = [int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)", output)]
    assert len(ports) >= 3, output  # webhook, alertmanager, GPU sidecar
    assert [p for p in ports if not _closed(p)] == []
    assert _holders(out / "run") == []
