"""Read a report's inputs from a `slokit probe -o DIR` run: its requests.csv (and probe.json beside it, if any).

Every measured request (warm-up excluded) is one event per SLI, judged exactly against the objective threshold
(no buckets needed: the probe measured each value); a failed request is an event over every threshold, as the
probe itself counts it. Time is the request's scheduled time, in seconds from the probe's start: the levels (and
the runs of a level) are laid end to end in file order, so the timeline reads as the probe ran.

The report covers only the class (and model) the probe sent. ITL is n/a in a probe report (said in the notes): it
is one observation per output event, pooled over requests, and requests.csv holds only each request's mean and
largest gap.
"""

from __future__ import annotations

import bisect
import json
import math
from pathlib import Path
from typing import Any, Final

import numpy as np

from slokit.report.analyze import Histogram, Key, ReportInput, choose_step, indicator_keys
from slokit.schema import Sli
from slokit.spec import Spec

REQUIRED_COLUMNS: Final = ("level", "run", "warmup", "ok", "t_sched", "ttft", "tpot", "e2e")


class ProbeInputError(Exception):
    """The CSV is not a probe run's requests.csv; the message says what is missing."""


def _column(sli: Sli, basis: str) -> str | None:
    if sli is Sli.TTFT:
        return "ttft_from_scheduled" if basis == "scheduled" else "ttft"
    if sli is Sli.E2E:
        return "e2e_from_scheduled" if basis == "scheduled" else "e2e"
    if sli is Sli.TPOT:
        return "tpot"
    return None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def read_probe(spec: Spec, csv_path: Path, class_name: str | None = None) -> ReportInput:
    """The report input for one probe run; the class comes from `class_name`, probe.json, or the spec's first."""
    import pandas as pd

    try:
        frame = pd.read_csv(csv_path)
    except FileNotFoundError:
        raise ProbeInputError(
            f"{csv_path}: no such file (pass the requests.csv that `slokit probe -o DIR` wrote)"
        ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProbeInputError(f"{csv_path}: not a CSV file ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ProbeInputError(
            f"{csv_path}: missing column(s) {', '.join(missing)}; expected the requests.csv of `slokit probe -o DIR`"
        )
    document: dict[str, Any] = {}
    sidecar = csv_path.with_name("probe.json")
    if sidecar.exists():
        try:
            document = json.loads(sidecar.read_text(encoding="utf-8"))
        except ValueError:
            document = {}
    notes: list[str] = []
    chosen = class_name or document.get("class") or spec.classes[0].name
    names = [rc.name for rc in spec.classes]
    if chosen not in names:
        raise ProbeInputError(f"class {chosen!r} is not in {spec.path or 'the spec'} (classes: {', '.join(names)})")
    rc = spec.request_class(chosen)
    model: str = document["model"] if document.get("model") in rc.models else rc.models[0]
    if document.get("model") and document.get("model") not in rc.models:
        notes.append(f"the probe sent model {document.get('model')!r}; reported as {model} (class {chosen})")
    basis = document.get("basis") or "scheduled"

    frame = frame[~frame["warmup"].map(_truthy)].copy()
    # Lay levels and runs end to end: each run's times are relative to its own start.
    offsets: dict[tuple[int, int], float] = {}
    cursor = 0.0
    for group, part in frame.groupby(["level", "run"], sort=True):
        level, run = (int(v) for v in group)  # type: ignore[call-overload]
        offsets[(level, run)] = cursor
        done = pd.to_numeric(part.get("t_done", part["t_sched"]), errors="coerce")
        cursor += float(np.nanmax([done.max(), part["t_sched"].max(), 0.0])) + 1.0
    frame["t"] = [
        offsets[(int(lv), int(rn))] + float(ts)
        for lv, rn, ts in zip(frame["level"], frame["run"], frame["t_sched"], strict=True)
    ]
    end = max(cursor, 1.0)
    step = choose_step(end, max_bins=120)
    # Only the class (and model) the probe sent: the spec's other classes were not probed, so not "no traffic".
    data = ReportInput("probe", str(csv_path), 0.0, end, step, notes=notes, scope=frozenset({(model, chosen)}))
    levels = frame["level"].nunique()
    if levels > 1:
        data.notes.append(f"probe run with {levels} load levels: figures pool every measured request of all of them")
    if frame.empty:
        data.notes.append(f"{csv_path}: no measured requests")
    ok = frame["ok"].map(_truthy).to_numpy()
    bins = (
        np.minimum(data.bins - 1, np.floor(frame["t"].to_numpy() / step).astype(int))
        if len(frame)
        else np.array([], int)
    )
    for key in indicator_keys(spec):
        if key.request_class != chosen or key.model != model:
            continue
        column = _column(key.sli, basis)
        if column is None or column not in frame.columns:
            reason = (
                f"{key.label()}: n/a, not in a probe run's requests.csv (ITL is pooled per output event; the CSV "
                "holds each request's mean and largest gap only)"
            )
            data.unmeasured[key] = reason
            data.notes.append(reason)
            continue
        data.histograms[key] = _histogram(spec, key, frame[column].to_numpy(dtype=float), ok, bins, data.bins)
    return data


def _histogram(spec: Spec, key: Key, values: Any, ok: Any, bins: Any, nbins: int) -> Histogram:
    bounds = spec.buckets(key.sli)
    counts = np.zeros((nbins, len(bounds) + 1))
    slo = spec.request_class(key.request_class).slos[key.sli]
    good = np.zeros(nbins) if slo.objective is not None else None
    for value, success, b in zip(values, ok, bins, strict=True):
        if success and not math.isfinite(value):
            continue  # e.g. TPOT of a one-token answer: no observation, as in vLLM's histogram
        index = bisect.bisect_left(bounds, value) if success else len(bounds)
        counts[b, index:] += 1
        if good is not None and slo.objective is not None and success and value <= slo.objective.threshold:
            good[b] += 1
    return Histogram(tuple(bounds), counts, good)
