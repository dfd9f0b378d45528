"""`slokit report` without a server: the Prometheus source against a small in-memory API, and the analysis.

Each test pins one behaviour a reader relies on: traffic counts requests (not tokens), an objective whose
threshold is no bucket boundary is n/a (never 0% and MISSED), partial history and empty SLO-window records are
said in the notes, and a probe report covers only the class the probe sent.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from slokit import schema
from slokit.report.analyze import Histogram, Key, ReportInput, analyze
from slokit.report.prometheus import PrometheusSource
from slokit.report.render import headline_rows, public, write_report
from slokit.schema import Sli
from slokit.spec import Spec, load_spec_text
from slokit.units import parse_duration, prom_duration

SPEC = """
version: slokit/v1
service: utest
source: slokit
window: 28d
models: [{name: m1, max_num_seqs: 8}]
classes:
  - name: stream
    slos:
      itl:
        objective: {percentile: 95, threshold: 50ms}
      ttft:
        objective: {percentile: 95, threshold: 400ms}
  - name: tokens
    match: {header: tokens}
    slos:
      itl:
        objective: {percentile: 95, threshold: 50ms}
"""
WINDOW = prom_duration(28 * 86400)  # as the records of a 28d window are named
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _spec(tmp_path: Path, text: str = SPEC) -> Spec:
    return load_spec_text(text, str(tmp_path / "utest.yaml"))


def _hist(spec: Spec, sli: Sli, per_bin: list[float], bins: int) -> Histogram:
    """Every event of a bin in the first bucket (all good)."""
    bounds = spec.buckets(sli)
    counts = np.zeros((bins, len(bounds) + 1))
    for i, n in enumerate(per_bin):
        counts[i, :] = n
    return Histogram(tuple(bounds), counts, counts[:, 0].copy())


def test_traffic_counts_requests_from_ttft_even_when_itl_is_listed_first(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    data = ReportInput("prometheus", "test", 0.0, 240.0, 60.0)
    data.histograms[Key("m1", "stream", Sli.ITL)] = _hist(spec, Sli.ITL, [3000, 3000, 3000, 3000], 4)
    data.histograms[Key("m1", "stream", Sli.TTFT)] = _hist(spec, Sli.TTFT, [10, 20, 30, 40], 4)
    data.histograms[Key("m1", "tokens", Sli.ITL)] = _hist(spec, Sli.ITL, [500, 0, 0, 0], 4)
    document = analyze(spec, data)
    traffic = {t["class"]: t for t in document["traffic"]}
    stream = traffic["stream"]
    assert stream["unit"] == "requests" and stream["counted_from"] == "ttft"
    assert stream["requests"] == 100 and stream["requests_per_second"] == 100 / 240
    assert stream["timeline"]["events"] == [10, 20, 30, 40]
    only_itl = traffic["tokens"]
    assert only_itl["unit"] == "tokens" and only_itl["counted_from"] == "itl" and only_itl["events"] == 500
    assert only_itl["requests"] is None and only_itl["requests_per_second"] is None
    assert any("class tokens on m1 is counted in output tokens" in n for n in document["notes"])

    out = tmp_path / "out"
    write_report(document, out)
    csv = (out / "traffic.csv").read_text().splitlines()
    assert csv[0] == "bin_start,stream on m1 requests,tokens on m1 tokens"
    assert csv[1:] == ["0.0,10.0,500.0", "60.0,20.0,0.0", "120.0,30.0,0.0", "180.0,40.0,0.0"]
    markdown = (out / "report.md").read_text()
    assert "| m1 | stream | requests (ttft events) | 100 |" in markdown
    assert "| m1 | tokens | tokens (itl events) | 500 |" in markdown
    assert "Traffic: requests per 1m; (tokens): output tokens of ITL-only classes" in markdown


class FakeApi:
    """Answers the queries PrometheusSource sends from a few canned series; everything else is empty."""

    url = "http://fake"

    def __init__(self, buckets: dict[str, dict[str, dict[float, float]]], records: dict[str, str]) -> None:
        self.buckets = buckets  # metric name -> le -> {time: cumulative value}
        self.records = records  # record name -> value as Prometheus writes it ("NaN", "0", ...)
        self.queries = 0

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        for record, value in self.records.items():
            if expr.startswith(record + "{"):
                labels = {"service": "utest", "model": "m1", "class": "stream", "slo": "ttft"}
                return [{"metric": labels, "value": [at, value]}]
        window = re.search(r"\[([0-9a-z]+)\]$", expr)
        if window is None or "timestamp(" in expr or "ALERTS" in expr:
            return []
        lo = at - parse_duration(window.group(1))
        out = []
        for metric, by_le in self.buckets.items():
            if not expr.startswith(metric + "_bucket{"):
                continue
            for le, points in by_le.items():
                values = [[t, str(v)] for t, v in sorted(points.items()) if lo < t <= at]
                labels = {"__name__": f"{metric}_bucket", "model": "m1", "class": "stream", "le": le}
                out.append({"metric": labels, "values": values})
        return out

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return []


def _ttft_series(spec: Spec, first: int, end: int, les: tuple[str, ...]) -> dict[str, dict[str, dict[float, float]]]:
    """Cumulative TTFT buckets of class stream, one sample a minute from `first`: 10 events a minute, half of them
    in each of the two lowest buckets listed."""
    name = spec.latency_metric(Sli.TTFT, spec.request_class("stream"))
    series: dict[str, dict[float, float]] = {}
    for index, le in enumerate(les):
        per_minute = 5.0 if index == 0 else 10.0
        series[le] = {float(t): per_minute * (t - first) / 60 for t in range(first, end + 1, 60)}
    return {name: series}


def _read(spec: Spec, api: FakeApi, start: float, end: float) -> dict[str, Any]:
    source = PrometheusSource(spec, api, progress=None)  # type: ignore[arg-type]
    return analyze(spec, source.read(start, end, 60.0))


def test_threshold_off_the_buckets_is_na_not_missed(tmp_path: Path) -> None:
    spec = _spec(tmp_path)  # ttft threshold 400ms: not one of the boundaries below
    api = FakeApi(_ttft_series(spec, 0, 3600, ("0.25", "0.5", "+Inf")), {})
    document = _read(spec, api, 0.0, 3600.0)
    row = next(o for o in document["objectives"] if o["slo"] == "ttft")
    assert row["events_total"] == 600 and row["events_good"] is None
    assert row["attainment"] is None and row["met"] is None and row["status"] == "n/a"
    assert row["budget_remaining"] is None and row["burn_rate_timeline"]["burn_rate"] == []
    assert row["worst_windows"] == []
    assert any("0.4s is not a bucket boundary" in n and "n/a" in n for n in document["notes"])
    headline = next(r for r in headline_rows(document) if r[1] == "stream" and r[2].startswith("ttft"))
    assert headline[3] == "n/a" and headline[4] == "n/a" and "MISSED" not in headline
    text = json.dumps(public(document), allow_nan=False)  # raises on NaN
    assert "NaN" not in text


def test_partial_history_and_empty_slo_window_records_are_said(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    day = 86400
    # Raw samples start 5 days into a 7-day period; the SLO-window records exist but are 0/0 (NaN).
    api = FakeApi(
        _ttft_series(spec, 5 * day, 5 * day + 7200, ("0.1", "0.4", "+Inf")),
        {
            schema.record_sli_total(WINDOW): "0",
            schema.record_sli_good(WINDOW): "0",
            schema.record_error_ratio(WINDOW): "NaN",
            schema.RECORD_ERROR_BUDGET_REMAINING: "NaN",
        },
    )
    document = _read(spec, api, 0.0, 7 * day)
    notes = document["notes"]
    assert any(n.startswith("history covers 2.0 of 7 days of the period") for n in notes), notes
    row = next(o for o in document["objectives"] if o["slo"] == "ttft")
    assert row["events_total"] == 1200 and row["attainment"] == 1.0
    window = row["slo_window"]
    assert window["attainment"] is None and window["budget_remaining"] is None and window["events_total"] == 0
    assert any("stream/ttft on m1: no events in the 28d SLO window" in n for n in notes), notes

    # Samples from before the period's start: full coverage, no such note.
    api = FakeApi(_ttft_series(spec, 0, 7200, ("0.1", "0.4", "+Inf")), {})
    document = _read(spec, api, 60.0, 7200.0)
    assert not any(n.startswith("history covers") for n in document["notes"]), document["notes"]


def test_probe_report_covers_only_the_probed_class(tmp_path: Path) -> None:
    import pandas as pd

    from slokit.report import report_from_probe
    from slokit.spec import load_spec

    spec = load_spec(EXAMPLES / "assistant.yaml")
    rows = [
        {"level": 0, "run": 0, "warmup": False, "ok": True, "t_sched": i * 0.5, "t_done": i * 0.5 + 2,
         "ttft": 0.1, "ttft_from_scheduled": 0.9 if i == 3 else 0.12, "tpot": 0.02, "e2e": 2.0,
         "e2e_from_scheduled": 2.0}
        for i in range(20)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "requests.csv", index=False)
    document, _ = report_from_probe(spec, tmp_path / "requests.csv", tmp_path / "out", class_name="chat")
    assert {o["class"] for o in document["objectives"]} == {"chat"}
    assert {i["class"] for i in document["indicators"]} == {"chat"}
    assert [t["class"] for t in document["traffic"]] == ["chat"]
    rows_by = {o["slo"]: o for o in document["objectives"]}
    assert rows_by["ttft"]["status"] == "met" and rows_by["e2e"]["status"] == "met"
    itl = rows_by["itl"]
    assert itl["status"] == "n/a" and itl["events_total"] is None and itl["attainment"] is None
    notes = document["notes"]
    assert not any("no traffic" in n for n in notes), notes  # neither the unprobed classes nor ITL
    assert not any("code" in n for n in notes), notes
    assert sum("itl" in n for n in notes) == 1  # ITL: one reason, not also "no traffic"
    assert any(n.startswith("SLO-window (28d) figures are n/a: a probe run") for n in notes), notes
    assert all(o["slo_window"] is None for o in document["objectives"])
    assert rows_by["ttft"]["worst_windows"]  # the one slow request
    assert any("engine signals and planner figures are n/a for a probe run" in n for n in notes), notes
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| code |" not in markdown and "no traffic" not in markdown
    assert not math.isnan(rows_by["ttft"]["attainment"])
