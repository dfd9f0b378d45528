"""A small run of bench/rule_cost.py on faulty data: slokit's windows add up to the scraped counters exactly, stay
close to the requests emitted, and touch fewer samples than the naive and Sloth-shaped rules; with the default 3
classes and with the fleet case's 4 (`--classes 4`, every model serving every class)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DUMP = re.compile(r"^  slokit\s+[\d.]+\s+([\d,]+)\s+\w+\s+(\S+)$", re.MULTILINE)  # every rule's cost (stderr)
ROW = re.compile(r"^(\w+)\s+(naive|sloth|slokit)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)$", re.MULTILINE)


def _fraction(text: str) -> float:
    """A printed relative error (`0.8746%`, `0`) as a fraction; `-` (not recorded by that set) as NaN."""
    return float("nan") if text == "-" else float(text.rstrip("%")) / (100 if text.endswith("%") else 1)


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.parametrize("classes", [3, 4])
def test_rule_cost_smoke(prometheus_path: str, classes: int, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rule_cost.py"), "--smoke", "--classes", str(classes),
         "--results-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "restarts (counter resets" in done.stdout and "scrapes missed" in done.stdout, done.stdout
    assert f"2 models x {classes} classes x 2 engines" in done.stdout, done.stdout
    assert f"x {2 * classes} model/class series" in done.stdout, done.stdout
    rows = {(m[1], m[2]): [_fraction(g) for g in m.groups()[2:7]] + [int(m[8])] for m in ROW.finditer(done.stdout)}
    windows = ("5m", "1h", "6h", "1d", "3d", "4w")
    assert set(rows) == {(w, s) for w in windows for s in ("naive", "sloth", "slokit")}, done.stdout
    for window in windows:
        ratio_max, _, events_max, _, scraped_max, missing = rows[(window, "slokit")]
        assert missing == 0, (window, done.stdout)
        # Sample-delta tiles add up to exactly what the scrapes recorded, across the restarts (counter resets
        # inside the 5m and 1h windows) and the missed scrapes on tile boundaries: a dropped, doubled or shifted
        # tile, or a reset counted wrong, leaves a ratio off by far more than the printed 1e-6.
        assert scraped_max == 0, (window, done.stdout)
        # Against the requests emitted, the only loss is a missed scrape at a window's edge (one engine's minute
        # moves to the next tile); the 26h history lets a dropped 1d tile show (the mutants in docs/rules.md).
        assert events_max < 0.02, (window, done.stdout)
        if window != "5m":
            assert ratio_max < 0.015, (window, done.stdout)
    for window in ("5m", "1h"):  # extrapolated raw-range reads are further off at short windows
        assert rows[(window, "slokit")][0] < rows[(window, "naive")][0], done.stdout
    # The mean of 5m ratios is not event-weighted: far off under diurnal traffic with bursts.
    assert rows[("4w", "sloth")][0] > 0.05, done.stdout

    match = re.search(r"samples per hour: naive/slokit = ([\d,.]+)x, sloth/slokit = ([\d,.]+)x", done.stdout)
    assert match, done.stdout
    naive, sloth = (float(g.replace(",", "")) for g in match.groups())
    # Samples touched are counted, not timed. All sets evaluate each window at the same interval, and the smoke's
    # 26h history caps the naive and Sloth-shaped 1d-28d reads at 26h, so the ratio (11.9x with 3 or 4 classes) is
    # below the full run's (docs/rules.md); 4x still fails rules that read raw series for long windows.
    assert naive >= 4
    assert sloth >= 4
    # The burn rates join the objective the parameters group records per class (`on (service, class, slo)`): the
    # slokit set evaluates those records (one per class), so its 5m burn rate reads more than its own ratios.
    costs = {m[2]: float(m[1].replace(",", "")) for m in DUMP.finditer(done.stderr)}  # record -> samples per hour
    objectives = {f'slokit:objective:ratio{{class="{c}"}}' for c in ("chat", "code", "batch", "agent")[:classes]}
    assert objectives <= set(costs), done.stderr
    assert costs["slokit:burn_rate:ratio5m"] > 2 * classes * 120, done.stderr
    assert "slokit's 10 costliest rules by engine time:" in done.stdout, done.stdout
