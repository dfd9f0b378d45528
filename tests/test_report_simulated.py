"""`slokit report` over `slokit simulate`'s history on a real Prometheus: decode against the planner, and no data.

* The simulated decode throughput follows the spec's planner, so the report's "decode vs planner" figure (the mean
  per-engine decode rate over the planner's expectation at the mean running batch, slokit.report.analyze) is
  near 1 in every healthy hour and far below it in the outage, on both models of examples/assistant-vllm.yaml.
* A report whose spec reads nothing that exists (another namespace, or an empty server) stops with exit 3 and
  names the selectors it looked for and where, instead of "no traffic" for every objective.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slokit.backtest.incidents import Incident
from slokit.backtest.simulate import simulate
from slokit.cli import app
from slokit.local.prometheus import LocalPrometheus, backfill_openmetrics_file, find_binary
from slokit.report.analyze import _signals_during, analyze
from slokit.report.prometheus import PrometheusApi, PrometheusSource
from slokit.spec import Spec, load_spec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
END = 1_764_806_400.0  # 2025-12-04T00:00:00Z, as in test_backtest.py
HOURS = 6
OUTAGE = Incident("outage-1", END - 3 * 3600, END - 3 * 3600 + 1800, "llama-3-70b", None, "outage")
pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spec() -> Spec:
    return load_spec(EXAMPLES / "assistant-vllm.yaml")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, spec: Spec) -> Iterator[LocalPrometheus]:
    if find_binary("prometheus") is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    work = tmp_path_factory.mktemp("simulated")
    history = work / "h.om"
    with history.open("w", encoding="utf-8") as handle:
        simulate(spec, HOURS / 24, END, 7, [OUTAGE], handle, replicas=2)
    live = LocalPrometheus(workdir=work / "prometheus", retention="100y")
    backfill_openmetrics_file(history, live.data_dir, max_block_duration="24h")
    live.start()
    yield live
    live.stop()


def test_decode_vs_planner_separates_the_outage_from_healthy_hours(spec: Spec, server: LocalPrometheus) -> None:
    start = END - (HOURS - 1) * 3600  # the first hour's rates need a sample before them
    data = PrometheusSource(spec, PrometheusApi(server.url), progress=None).read(start, END, 60.0)
    per_hour = 60  # one-minute bins
    healthy: dict[str, list[float]] = {}
    for model in ("llama-3-70b", "llama-3-8b"):
        for hour in range(HOURS - 1):
            lo = start + hour * 3600
            if OUTAGE.model == model and lo < OUTAGE.end + 600 and lo + 3600 > OUTAGE.start:
                continue
            ratio = _signals_during(model, slice(hour * per_hour, (hour + 1) * per_hour), data)["decode_vs_expected"]
            assert ratio is not None
            healthy.setdefault(model, []).append(ratio)
    for model, ratios in healthy.items():
        assert len(ratios) >= 3 and all(0.85 <= r <= 1.15 for r in ratios), (model, ratios)
    first = round((OUTAGE.start - start) / 60)
    outage = _signals_during(OUTAGE.model, slice(first + 5, first + 25), data)["decode_vs_expected"]
    assert outage is not None and outage < 0.2, outage
    # The report's worst window for the outage's objective shows it: decode far under the planner's figure.
    document = analyze(spec, data)
    windows = [w for o in document["objectives"] if o["model"] == OUTAGE.model and o["class"] == "chat"
               for w in o["worst_windows"]]  # fmt: skip

    def inside(w: dict[str, Any]) -> float:  # the share of the window inside the outage
        overlap = min(w["end_unix"], OUTAGE.end) - max(w["start_unix"], OUTAGE.start)
        return max(0.0, overlap) / (w["end_unix"] - w["start_unix"])

    mostly = [w["signals"]["decode_vs_expected"] for w in windows if inside(w) >= 0.9]
    clear = [w["signals"]["decode_vs_expected"] for w in windows if inside(w) == 0]
    assert mostly and all(r < 0.3 for r in mostly), [(inside(w), w["signals"]) for w in windows]
    assert all(r > 0.8 for r in clear), [(inside(w), w["signals"]) for w in windows]


runner = CliRunner()


def test_report_over_nothing_the_spec_reads_exits_3_naming_the_selectors(
    spec: Spec, server: LocalPrometheus, tmp_path: Path
) -> None:
    # The same series, read by a spec deployed in another namespace: nothing matches its scope.
    text = (EXAMPLES / "assistant-vllm.yaml").read_text().replace("namespace: prod", "namespace: staging")
    other = tmp_path / "staging.yaml"
    other.write_text(text)
    args = ["report", str(other), "--prometheus", server.url, "--from", str(int(END - 3 * 3600)), "--to", str(int(END)),
            "-o", str(tmp_path / "out")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "no data" in result.stderr and server.url in result.stderr
    assert 'namespace="staging"' in result.stderr and "vllm:time_to_first_token_seconds_bucket" in result.stderr
    assert not (tmp_path / "out" / "report.md").exists()
    # The right spec over the same server: exit 0 (nothing missed) or 1 (the outage missed an objective).
    result = runner.invoke(app, [*args[:1], str(EXAMPLES / "assistant-vllm.yaml"), *args[2:]])
    assert result.exit_code in (0, 1), result.output
    assert "no data" not in result.output
