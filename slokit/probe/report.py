"""What the probe shows and writes: the JSON document, the terminal table and the live progress line."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

from slokit import __version__
from slokit.probe.load import Endpoint, Progress, Workload
from slokit.probe.results import Check, Criteria, LevelSummary, binding_check, unreachable
from slokit.probe.search import SearchResult
from slokit.units import format_duration

DOCUMENT_VERSION = 1
WARN_SHARE = 0.01  # coalesced tokens above this share of a level's tokens get a warning


def level_warnings(levels: Sequence[LevelSummary]) -> list[str]:
    """What makes the results less exact than they look: tokens ITL could not separate, and whose fault it was.

    Printed on stderr in every output mode and kept in the document's `warnings`.
    """
    out: list[str] = []
    server = max(levels, key=lambda lv: lv.server_burst_share, default=None)
    if server is not None and server.server_burst_share > WARN_SHARE:
        out.append(
            f"the server sent {server.server_burst_share:.1%} of tokens in bursts (at {server.load.label}: several "
            "events in one read while this client was keeping up): ITL below the burst is not measurable, and "
            "those gaps read as 0"
        )
    client = max(levels, key=lambda lv: lv.client_behind_share, default=None)
    if client is not None and client.client_behind_share > WARN_SHARE:
        out.append(
            f"this client fell behind the stream for {client.client_behind_share:.1%} of tokens (at "
            f"{client.load.label}: read together with the one before while it was busy), so ITL is coarsened "
            "(run fewer streams per probe, or several probes)"
        )
    return out


def single_level_outcome(level: LevelSummary) -> dict[str, Any]:
    """`max_passing`/`min_failing`/`binding_constraint` for a run of one fixed level."""
    binding = binding_check(level.checks)
    value = int(level.load.value) if level.load.kind == "concurrency" else level.load.value
    judged = bool(level.checks)
    return {
        "variable": level.load.kind,
        "max_passing": value if judged and level.passed else None,
        "min_failing": value if judged and not level.passed else None,
        "binding_constraint": binding.to_json() if binding is not None else None,
        "goodput_rps": level.goodput if math.isfinite(level.goodput) else None,
        "stopped": "single_level",
    }


def document(
    *,
    endpoint: Endpoint,
    workload: Workload,
    criteria: Criteria | None,
    spec_path: str | None,
    levels: Sequence[LevelSummary],
    result: SearchResult | None,
) -> dict[str, Any]:
    """The one JSON document `--json` prints and `-o DIR` writes as probe.json."""
    if result is not None:
        outcome = result.to_json()
    elif levels:
        outcome = single_level_outcome(levels[-1])
    else:
        outcome = {"max_passing": None, "min_failing": None, "binding_constraint": None, "goodput_rps": None}
    measured = sum(level.succeeded for level in levels)
    return {
        "slokit_probe": DOCUMENT_VERSION,
        "slokit_version": __version__,
        **outcome,
        "measured_requests": measured,
        "unreachable": unreachable(levels),
        "url": endpoint.url,
        "model": endpoint.model,
        "api": endpoint.api,
        "spec": spec_path,
        "class": criteria.class_name if criteria else None,
        "basis": criteria.basis if criteria else None,
        "workload": {
            "prompt_tokens": str(workload.prompt_tokens),
            "output_tokens": str(workload.output_tokens),
            "class_header": workload.class_header,
            "tokens_per_word": workload.tokens_per_word,
        },
        "criteria": [c.describe() for c in criteria.constraints] if criteria else [],
        "warnings": level_warnings(levels),
        "levels": [level.to_json() for level in levels],
    }


def _ms(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 1000:.1f}"


def _rate(value: float) -> str:
    """`12.34 req/s`, or `no req/s measured` when no request succeeded (a rate of NaN means nothing to a reader)."""
    return f"{value:.2f} req/s" if math.isfinite(value) else "no req/s measured"


def describe_check(check: Check) -> str:
    """`ttft p95 612.0ms > 500ms (acceptable tier)` or `91.2% of ttft within 500ms, need 95%`."""
    c = check.constraint
    if c.kind == "errors":
        return f"{check.value:.1%} of requests failed, at most {c.limit:.1%} allowed"
    assert c.sli is not None
    if c.kind == "objective":
        return f"{check.value:.1%} of {c.sli.value} within {format_duration(c.limit)}, need {c.percentile:g}%"
    if c.kind == "consistency":
        return f"{c.sli.value} p99/p50 = {check.value:.2f}, at most {c.limit:g}"
    op = "<=" if check.passed else ">"
    shown = f"{check.value * 1000:.1f}ms" if math.isfinite(check.value) else "n/a"
    return f"{c.sli.value} p{c.percentile:g} {shown} {op} {format_duration(c.limit)} (acceptable tier)"


def print_summary(levels: Sequence[LevelSummary], outcome: dict[str, Any], criteria: Criteria | None) -> None:
    """The summary table and verdict on stdout."""
    from rich.console import Console
    from rich.table import Table

    basis = criteria.basis if criteria else "scheduled"
    ttft_key = "ttft_from_scheduled" if basis == "scheduled" else "ttft"
    e2e_key = "e2e_from_scheduled" if basis == "scheduled" else "e2e"
    table = Table(title="slokit probe (latencies in ms; TTFT and E2E from the " + basis + " time)")
    for name in ("load", "ok", "failed", "req/s", "goodput", "TTFT p50", "p95", "p99", "p99/p50", "ITL p50", "p95",
                 "TPOT p95", "E2E p95", "p99", "verdict"):  # fmt: skip
        table.add_column(name, justify="right", no_wrap=True)
    for level in sorted(levels, key=lambda lv: lv.load.value):
        ttft, itl, tpot, e2e = (level.metrics[k] for k in (ttft_key, "itl", "tpot", e2e_key))
        verdict = "-" if not level.checks else ("pass" if level.passed else "FAIL")
        table.add_row(
            level.load.label,
            str(level.succeeded),
            str(level.failed),
            f"{level.request_rate:.2f}" if math.isfinite(level.request_rate) else "-",
            f"{level.goodput:.2f}" if math.isfinite(level.goodput) else "-",
            _ms(ttft.p50),
            _ms(ttft.p95),
            _ms(ttft.p99),
            f"{ttft.p99_over_p50:.2f}" if math.isfinite(ttft.p99_over_p50) else "-",
            _ms(itl.p50),
            _ms(itl.p95),
            _ms(tpot.p95),
            _ms(e2e.p95),
            _ms(e2e.p99),
            verdict,
        )
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)
    console.print(table)
    failures: dict[str, int] = {}
    for level in levels:
        for reason, count in level.failures.items():
            failures[reason] = failures.get(reason, 0) + count
    if failures:
        console.print("failures: " + ", ".join(f"{reason} {count}" for reason, count in sorted(failures.items())))
    if criteria is None:
        return
    unit = " users" if outcome.get("variable") == "concurrency" else " req/s"
    passing, failing = outcome.get("max_passing"), outcome.get("min_failing")
    console.print(f"largest passing level: {passing if passing is not None else 'none'}{unit if passing else ''}")
    console.print(f"smallest failing level: {failing if failing is not None else 'none'}{unit if failing else ''}")
    failing_level = next((lv for lv in levels if failing is not None and lv.load.value == failing), None)
    if failing_level is not None:
        worst = binding_check(failing_level.checks)
        if worst is not None:
            console.print(f"bound by: {describe_check(worst)}")
    goodput = outcome.get("goodput_rps")
    if goodput is not None:
        console.print(f"goodput at the largest passing level: {goodput:.2f} req/s")


class ProgressLine:
    """A progress bar on stderr, redrawn twice a second from counters (cheap: no work per request)."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if enabled is None else enabled
        self.progress = Progress()

    def render(self) -> str:
        p = self.progress
        width = 24
        filled = int(width * p.done / p.total) if p.total else 0
        bar = "#" * filled + "-" * (width - filled)
        failed = f", {p.failed} failed" if p.failed else ""
        return f"[{bar}] {p.label}: {p.done}/{p.total} requests{failed}"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Progress]:
        """Redraw while the body runs."""
        task = asyncio.create_task(self._draw()) if self.live else None
        try:
            yield self.progress
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self.stream.write("\r\x1b[2K")
                self.stream.flush()

    async def _draw(self) -> None:
        while True:
            self.stream.write("\r\x1b[2K" + self.render())
            self.stream.flush()
            await asyncio.sleep(0.5)

    def level_done(self, level: LevelSummary) -> None:
        """One line per finished level (also when stderr is not a terminal)."""
        verdict = "" if not level.checks else ("  pass" if level.passed else "  FAIL")
        worst = level.worst_check()
        why = f" ({describe_check(worst)})" if worst is not None and not level.passed else ""
        text = (
            f"{level.load.label}: {level.succeeded} ok, {level.failed} failed, "
            f"{_rate(level.request_rate)}{verdict}{why}"
        )
        if self.live:
            text = "\r\x1b[2K" + text
        self.stream.write(text + "\n")
        self.stream.flush()
