"""`slokit report --probe`: figures from a probe run's requests.csv, and report.html rendered by headless Chromium.

The CSV has the columns `slokit probe -o DIR` writes (two load levels, warm-up rows, failed requests, a one-token
answer with no TPOT); the expected figures are counted here. Chromium (Debian's `chromium`, fresh profile, no
network: a refusing proxy and a resolver that finds no host) loads a copy of report.html, of that probe run and of a
Prometheus-mode report built from a measured input without a server, with a probe script appended that records,
after load, how many rows the headline table has and each image's decoded size; a screenshot at phone width must not
be blank and the page must not scroll sideways.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE

SPEC = """
version: slokit/v1
service: ptest
source: slokit
models: [{name: m1, max_num_seqs: 8}]
classes:
  - name: chat
    slos:
      ttft:
        objective: {percentile: 90, threshold: 500ms}
        tiers:
          target:     {p50: 200ms}
          acceptable: {p50: 300ms}
          critical:   {p50: 1s}
      tpot:
        objective: {percentile: 95, threshold: 50ms}
      itl:
        objective: {percentile: 95, threshold: 50ms}
"""
COLUMNS = ("level", "load_kind", "load", "run", "request", "warmup", "ok", "reason", "t_sched", "t_done", "ttft",
           "ttft_from_scheduled", "tpot", "e2e", "e2e_from_scheduled", "itl_mean", "itl_max")  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    rows = []
    for level in (0, 1):
        for i in range(40):
            slow = level == 1 and i % 4 == 0  # the second level: every fourth request slow
            ttft = 0.9 if slow else 0.1 + 0.005 * (i % 10)
            rows.append(
                {"level": level, "load_kind": "concurrency", "load": 2 + level * 6, "run": 0, "request": i,
                 "warmup": i < 2, "ok": not (level == 1 and i == 5), "reason": "", "t_sched": i * 0.5,
                 "t_done": i * 0.5 + 2, "ttft": ttft - 0.01, "ttft_from_scheduled": ttft,
                 "tpot": float("nan") if i == 7 else (0.06 if slow else 0.02), "e2e": 2.0, "e2e_from_scheduled": 2.0,
                 "itl_mean": 0.02, "itl_max": 0.05}
            )  # fmt: skip
    return rows


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "slokit.cli", "report", *args], capture_output=True, text=True, env=env, timeout=120,
        check=False,
    )  # fmt: skip


def test_probe_report_figures_and_bad_input(tmp_path: Path) -> None:
    import pandas as pd

    spec = tmp_path / "ptest.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    rows = _rows()
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(tmp_path / "requests.csv", index=False)
    (tmp_path / "probe.json").write_text(json.dumps({"class": "chat", "model": "m1", "basis": "scheduled"}))
    out = tmp_path / "out"
    done = _run(str(spec), "--probe", str(tmp_path / "requests.csv"), "-o", str(out))
    assert done.returncode == EXIT_FAILED, done.stderr  # TTFT misses 90%: the second level is slow
    doc = json.loads((out / "report.json").read_text())
    measured = [r for r in rows if not r["warmup"]]
    rows_by = {o["slo"]: o for o in doc["objectives"]}
    ttft_good = sum(1 for r in measured if r["ok"] and r["ttft_from_scheduled"] <= 0.5)
    assert rows_by["ttft"]["events_total"] == len(measured) and rows_by["ttft"]["events_good"] == ttft_good
    assert rows_by["ttft"]["attainment"] == pytest.approx(ttft_good / len(measured), rel=1e-12)
    assert rows_by["ttft"]["met"] is (ttft_good / len(measured) >= 0.9)
    tpot = [r for r in measured if not (r["ok"] and r["tpot"] != r["tpot"])]  # NaN TPOT: no observation
    tpot_good = sum(1 for r in tpot if r["ok"] and r["tpot"] <= 0.05)
    assert rows_by["tpot"]["events_total"] == len(tpot) and rows_by["tpot"]["events_good"] == tpot_good
    budget = 1 - 0.95
    assert rows_by["tpot"]["budget_remaining"] == pytest.approx(1 - (len(tpot) - tpot_good) / len(tpot) / budget)
    assert rows_by["itl"]["events_total"] is None and rows_by["itl"]["attainment"] is None
    assert rows_by["itl"]["status"] == "n/a"  # not measured by a probe: n/a with its reason, not "no traffic"
    assert any("ITL" in n for n in doc["notes"]) and any("2 load levels" in n for n in doc["notes"])
    assert not any("no traffic" in n for n in doc["notes"])
    assert rows_by["ttft"]["worst_windows"] and rows_by["ttft"]["worst_windows"][0]["start"].startswith("+")
    assert "NaN" not in (out / "report.json").read_text()

    bad = _run(str(spec), "--probe", str(tmp_path / "missing.csv"), "-o", str(out))
    assert bad.returncode == EXIT_USAGE and "no such file" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    bad = _run(str(spec), "--probe", str(tmp_path / "other.csv"), "-o", str(out))
    assert bad.returncode == EXIT_USAGE and "missing column" in bad.stderr
    bad = _run(str(spec), "--prometheus", "http://127.0.0.1:1", "--last", "1h", "-o", str(out))
    assert bad.returncode == EXIT_USAGE and "did not answer" in bad.stderr and "Traceback" not in bad.stderr
    bad = _run(str(spec), "--prometheus", "http://127.0.0.1:1", "--last", "7", "-o", str(out))
    assert bad.returncode == EXIT_USAGE and "--last" in bad.stderr
    bad = _run(str(spec), "-o", str(out))
    assert bad.returncode == EXIT_USAGE and "exactly one of" in bad.stderr


PROBE_SCRIPT = """
<script>
window.addEventListener('load', function () {
  var images = Array.prototype.map.call(document.images, function (i) { return [i.naturalWidth, i.naturalHeight]; });
  var rows = document.querySelectorAll('#headline tbody tr').length;
  var out = document.createElement('pre');
  out.id = 'probe-result';
  out.textContent = JSON.stringify({images: images, rows: rows,
    overflow: document.documentElement.scrollWidth - window.innerWidth});
  document.body.appendChild(out);
});
</script>
"""


def _prometheus_report(out: Path, spec_path: Path) -> int:
    """A Prometheus-mode report built from a measured input without a server (6h of 1m bins: burn rates,
    percentiles, worst windows with engine signals, an alert, SLO-window records); returns its objectives."""
    import numpy as np

    from slokit.report.analyze import AlertEpisode, Histogram, Key, ReportInput, WindowRecords, analyze
    from slokit.report.render import write_report
    from slokit.schema import Sli
    from slokit.spec import load_spec

    spec = load_spec(spec_path)
    end = 1_764_806_400.0
    data = ReportInput("prometheus", "http://127.0.0.1:9090", end - 6 * 3600, end, 60.0)
    rng = np.random.default_rng(7)
    bins = data.bins
    slow = np.zeros(bins)
    slow[120:150] = 1.0  # a half-hour incident
    for sli, scale in ((Sli.TTFT, 0.15), (Sli.TPOT, 0.02), (Sli.ITL, 0.02)):
        bounds = spec.buckets(sli)
        counts = np.zeros((bins, len(bounds) + 1))
        for i in range(bins):
            values = rng.lognormal(np.log(scale * (1 + 4 * slow[i])), 0.5, size=40 + int(20 * np.sin(i / 30)))
            for j, bound in enumerate((*bounds, float("inf"))):
                counts[i, j] = float((values <= bound).sum())
        threshold = spec.request_class("chat").slos[sli].objective.threshold  # type: ignore[union-attr]
        data.histograms[Key("m1", "chat", sli)] = Histogram(tuple(bounds), counts, counts[:, bounds.index(threshold)])
        data.records[Key("m1", "chat", sli)] = WindowRecords(1e6, 0.97e6, 0.03, 0.4, end - 10 * 86400)
    data.signals = {
        "queue_waiting": {"m1": 30 * slow},
        "kv_cache_usage": {"m1": 0.3 + 0.6 * slow},
        "requests_running": {"m1": 4 + 4 * slow},
        "decode_tokens_per_second": {"m1": 400 - 300 * slow},
    }
    data.alerts = [AlertEpisode({"alertname": "SlokitErrorBudgetBurn", "severity": "critical", "model": "m1",
                                 "class": "chat", "slo": "ttft"}, data.start + 7260, data.start + 8400)]  # fmt: skip
    document = analyze(spec, data)
    write_report(document, out)
    return len(document["objectives"])


PROBE = "probe"
PROMETHEUS = "prometheus"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("source", [PROBE, PROMETHEUS])
def test_report_html_renders_in_headless_chromium(tmp_path: Path, source: str) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium; make system-deps)")
    import pandas as pd

    spec = tmp_path / "ptest.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    out = tmp_path / "out"
    if source == PROBE:
        pd.DataFrame(_rows(), columns=list(COLUMNS)).to_csv(tmp_path / "requests.csv", index=False)
        done = _run(str(spec), "--probe", str(tmp_path / "requests.csv"), "--class", "chat", "-o", str(out))
        assert done.returncode in (0, EXIT_FAILED), done.stderr
        objectives = 3
    else:
        objectives = _prometheus_report(out, spec)
        assert objectives == 3
        assert "| m1 | chat | ttft <= 500.0ms |" in (out / "report.md").read_text()
    page = (out / "report.html").read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE_SCRIPT + "</body>"), encoding="utf-8")
    # No network: a proxy that refuses and a resolver that finds no host, on top of the background switches.
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=10000", "--window-size=390,2400",
    ]  # fmt: skip
    dom = subprocess.run(
        [chromium, *flags, f"--user-data-dir={tmp_path / 'profile1'}", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert 'id="probe-result"' in dom.stdout, dom.stderr[-2000:]
    result = json.loads(dom.stdout.split('id="probe-result">', 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
    plots = len(list(out.glob("*.png")))
    assert plots >= (3 if source == PROBE else 5) and len(result["images"]) == plots
    assert all(w > 100 and h > 50 for w, h in result["images"]), result  # every plot decoded
    assert result["rows"] == objectives  # one headline row per objective
    assert result["overflow"] <= 0, result  # tables scroll inside their box; the page never scrolls sideways

    shot = tmp_path / "shot.png"
    subprocess.run(
        [chromium, *flags, f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}",
         (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05  # not blank
    assert len({tuple(p) for p in pixels[::20, ::20].reshape(-1, pixels.shape[-1]).tolist()}) > 20
