"""Name the external checker a command runs (promtool, vmalert), so a wrong or old one on PATH is visible.

Two promtools on one host (a distribution's and a newer download) accept different rule syntax; a check that
passed or failed says little unless the output says which binary gave the verdict.
"""

from __future__ import annotations

import subprocess

# The flag each tool prints its version with (Go's flag package: vmalert takes one dash).
VERSION_FLAGS = {"vmalert": "-version"}


def version_of(path: str, name: str) -> str:
    """The first line `NAME --version` prints (empty when the binary prints none or cannot run)."""
    try:
        done = subprocess.run(
            [path, VERSION_FLAGS.get(name, "--version")], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (done.stdout + done.stderr).strip().splitlines()
    first = lines[0].split(" (branch:")[0].strip() if lines else ""  # Prometheus tools: name, version (branch...)
    return first if done.returncode == 0 else ""


def describe(path: str, name: str) -> str:
    """`/usr/bin/promtool (promtool, version 2.42.0+ds ...)`, or the path alone when no version is printed."""
    version = version_of(path, name)
    return f"{path} ({version})" if version else path
