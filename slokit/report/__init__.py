"""`slokit report`: the SLO compliance report for on-call handover and the weekly review.

Layers, one direction: a source (`prometheus.py`: raw series and records over the HTTP API; `probe.py`: a probe
run's requests.csv) fills a `ReportInput` of binned event counts; `analyze.py` turns it into plain data (the JSON
document); `render.py` writes report.md, a self-contained report.html, report.json and the CSV behind every plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slokit.spec import Spec

MIN_STEP = 15.0


def report_from_prometheus(
    spec: Spec, url: str, start: float, end: float, directory: Path, *, progress: Any = None, step: float | None = None
) -> tuple[dict[str, Any], list[Path]]:
    """Read (start, end] from a Prometheus API, analyse, write every file; returns the document and the paths."""
    from slokit.report.analyze import analyze, choose_step
    from slokit.report.prometheus import PrometheusApi, PrometheusSource, stderr_progress
    from slokit.report.render import public, write_report

    source = PrometheusSource(spec, PrometheusApi(url), progress if progress is not None else stderr_progress)
    # Bins of at least 15s: shorter ones would hold no sample at common scrape intervals.
    data = source.read(start, end, step or max(MIN_STEP, choose_step(end - start)))
    document = analyze(spec, data)
    return public(document), write_report(document, directory)


def report_from_probe(
    spec: Spec, csv_path: Path, directory: Path, *, class_name: str | None = None
) -> tuple[dict[str, Any], list[Path]]:
    """The same report for one probe run's requests.csv."""
    from slokit.report.analyze import analyze
    from slokit.report.probe import read_probe
    from slokit.report.render import public, write_report

    document = analyze(spec, read_probe(spec, csv_path, class_name))
    return public(document), write_report(document, directory)
