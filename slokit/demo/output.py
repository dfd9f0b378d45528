"""Where the demo tells its story: a terminal gets colours and a live status line; anything else gets plain
timestamped lines."""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
from typing import Final, Protocol, TextIO


class Reporter(Protocol):
    """Where the demo tells its story."""

    def step(self, title: str) -> None:
        """A new step begins."""

    def line(self, text: str, style: str = "") -> None:
        """One line; style is "", "ok", "fail", "warn" or "dim"."""

    def live(self, text: str) -> None:
        """Progress that replaces itself (a terminal) or is printed now and then (a pipe)."""

    def block(self, text: str) -> None:
        """Several lines shown as a quoted block (the runbook section)."""


_ANSI: Final = {"ok": "\x1b[32m", "fail": "\x1b[31;1m", "warn": "\x1b[33m", "dim": "\x1b[2m", "step": "\x1b[1;36m"}
_MARKS: Final = {"ok": "✔ ", "fail": "✘ ", "warn": "! "}


class TerminalReporter:
    """Colours, step numbers and a status line that updates in place (cut to the terminal's width, so clearing
    it never leaves a wrapped half behind). Thread-safe: the webhook receiver reports from its own thread."""

    def __init__(self, stream: TextIO | None = None, width: int | None = None) -> None:
        self.stream = stream or sys.stdout
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self._steps = 0
        self._live = False
        self._lock = threading.RLock()

    def _clear(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[2K")
            self._live = False

    def step(self, title: str) -> None:
        with self._lock:
            self._clear()
            self._steps += 1
            self.stream.write(f"\n{_ANSI['step']}{self._steps}. {title}\x1b[0m\n")
            self.stream.flush()

    def line(self, text: str, style: str = "") -> None:
        with self._lock:
            self._clear()
            colour = _ANSI.get(style, "")
            self.stream.write(f"   {colour}{_MARKS.get(style, '')}{text}{chr(27) + '[0m' if colour else ''}\n")
            self.stream.flush()

    def live(self, text: str) -> None:
        with self._lock:
            self._clear()
            room = max(10, self.width - 4)
            shown = text if len(text) <= room else text[: room - 1] + "…"
            self.stream.write(f"   {_ANSI['dim']}{shown}\x1b[0m")
            self._live = True
            self.stream.flush()

    def block(self, text: str) -> None:
        with self._lock:
            self._clear()
            for row in text.rstrip().splitlines():
                self.stream.write(f"   │ {row}\n")
            self.stream.flush()


class PlainReporter:
    """Timestamped lines for CI logs and pipes; live progress at most every `live_every` seconds. Thread-safe."""

    def __init__(self, stream: TextIO | None = None, live_every: float = 10.0) -> None:
        self.stream = stream or sys.stdout
        self.live_every = live_every
        self._start = time.monotonic()
        self._last_live = -math.inf
        self._steps = 0
        self._lock = threading.RLock()

    def _stamp(self) -> str:
        elapsed = int(time.monotonic() - self._start)
        return f"[{elapsed // 60:02d}:{elapsed % 60:02d}]"

    def step(self, title: str) -> None:
        with self._lock:
            self._steps += 1
            self.stream.write(f"{self._stamp()} == {self._steps}. {title}\n")
            self.stream.flush()

    def line(self, text: str, style: str = "") -> None:
        mark = {"ok": "ok: ", "fail": "FAILED: ", "warn": "warning: "}.get(style, "")
        with self._lock:
            self.stream.write(f"{self._stamp()}    {mark}{text}\n")
            self.stream.flush()

    def live(self, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_live >= self.live_every:
                self._last_live = now
                self.line(text)

    def block(self, text: str) -> None:
        with self._lock:
            for row in text.rstrip().splitlines():
                self.stream.write(f"           | {row}\n")
            self.stream.flush()


def fmt_seconds(value: float | None) -> str:
    """A latency as people read it: `850ms`, `2.4s`; `-` for none."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.1f}s"
