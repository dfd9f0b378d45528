"""Read a report's inputs from a Prometheus (or Thanos/Mimir) HTTP API.

Period figures come from the raw histogram counters, not from the recording rules, so they are exact even for
stretches where the rules were not running. The counters are read as raw samples (range-vector instant queries,
`x[6h]`, one chunk at a time so no answer grows without bound), and summed as reset-aware deltas of consecutive
samples per series: v2 - v1, or v2 after a counter reset. Deltas telescope, so the sum over the period equals
the events counted, whatever the scrape interval and however many pods restarted. A series' first sample is its
baseline (as in Prometheus's `increase`): events a brand-new pod served before its first scrape are not counted.

SLO-window figures come from the records at the period's end (`slokit:sli_error:ratio<window>` and friends, named
by slokit.schema) and are optional: absent records are said plainly. Engine signals (queue, KV cache, decode
throughput) are range queries at the report's step. Alerts are the raw samples of `ALERTS{alertstate="firing"}`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import numpy as np

from slokit import promql, schema
from slokit.generate.queries import Queries
from slokit.plan.roofline import expected_decode_curve, expected_decode_tokens_per_second
from slokit.promql import eq, selector
from slokit.report.analyze import (
    AlertEpisode,
    Floats,
    Histogram,
    Key,
    ReportInput,
    WindowRecords,
    indicator_keys,
)
from slokit.report.reads import missing_warnings, no_data, spec_reads
from slokit.schema import Sli
from slokit.spec import Spec
from slokit.units import prom_duration

CHUNK_SECONDS: Final = 6 * 3600.0
LOOKBACK: Final = 300.0  # Prometheus's default lookback: a series silent longer than this is gone
ALERT_GAP: Final = 300.0  # a firing alert silent longer than this has ended; later samples start a new episode
MAX_CHUNKS: Final = 2000  # about 500 days at 6h chunks: a bound on any one fetch

Progress = Callable[[str], None]
RawSeries = dict[tuple[tuple[str, str], ...], dict[float, float]]


class ReportSourceError(Exception):
    """The source cannot be read (unreachable, bad answer); the message says what to check."""


def stderr_progress(text: str) -> None:
    """Progress lines on stderr (stdout stays for the result)."""
    print(text, file=sys.stderr, flush=True)


class PrometheusApi:
    """A minimal client of the Prometheus HTTP API (instant queries), with clear errors."""

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.queries = 0

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        """Instant query: the `result` list (vectors, or matrices for range selectors)."""
        return self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query: the `result` matrix."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._post("/api/v1/query_range", params)

    def _post(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        self.queries += 1
        body = urllib.parse.urlencode(dict(params)).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=body, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("error", detail)
            raise ReportSourceError(f"{self.url}{path} answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ReportSourceError(
                f"Prometheus at {self.url} did not answer ({exc}); check --prometheus (e.g. http://prometheus:9090)"
            ) from None
        try:
            answer = json.loads(payload)
        except ValueError:
            raise ReportSourceError(f"{self.url}{path} did not answer JSON: is this a Prometheus API URL?") from None
        if answer.get("status") != "success":
            raise ReportSourceError(f"{self.url}{path}: {answer.get('error', answer)}")
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result if isinstance(result, list) else []


def _labels_key(metric: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__"))


def raw_samples(api: PrometheusApi, expr: str, start: float, end: float, progress: Progress | None = None) -> RawSeries:
    """Every raw sample of a series selector in [start - lookback, end], per series, fetched in bounded chunks."""
    series: RawSeries = {}
    first = start - LOOKBACK
    edges = [end]
    while edges[-1] - CHUNK_SECONDS > first and len(edges) < MAX_CHUNKS:
        edges.append(edges[-1] - CHUNK_SECONDS)
    edges.append(first)
    edges.reverse()
    chunks = len(edges) - 1
    for index, (lo, hi) in enumerate(itertools.pairwise(edges)):
        width = max(1.0, hi - lo)
        if progress is not None and chunks > 1:
            progress(f"  {index + 1}/{chunks} {expr[:80]}")
        for item in api.query(f"{expr}[{prom_duration(width)}]", hi):
            points = series.setdefault(_labels_key(item.get("metric", {})), {})
            for t, v in item.get("values", []):
                points[float(t)] = float(v)
    return series


def counter_deltas(points: Mapping[float, float], start: float, end: float) -> list[tuple[float, float]]:
    """(time, events) for every sample in (start, end]: reset-aware delta from the previous sample."""
    out: list[tuple[float, float]] = []
    previous: float | None = None
    for t in sorted(points):
        v = points[t]
        if not math.isfinite(v):
            continue
        if previous is not None and start < t <= end:
            out.append((t, v - previous if v >= previous else v))
        previous = v
    return out


def _bin_index(t: float, start: float, step: float, bins: int) -> int:
    return min(bins - 1, max(0, math.ceil((t - start) / step) - 1))


def _le(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


class PrometheusSource:
    """Fills a `ReportInput` for one spec from a Prometheus API."""

    def __init__(self, spec: Spec, api: PrometheusApi, progress: Progress | None = stderr_progress) -> None:
        self.spec = spec
        self.api = api
        self.progress = progress
        self.queries = Queries(spec)  # selectors in the spec's scope, over the histogram each SLO reads

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _over(self, metric: str, models: Iterable[str], function: str, window: str) -> str:
        """`function(metric{...}[window])` over the models' raw series, in each model's deployment scope (one
        term per distinct `selector:`, joined with `or`)."""
        terms = self.queries.raw_terms(metric, sorted(set(models)))
        return " or ".join(f"{function}({term.selector}[{window}])" for term in terms)

    def read(self, start: float, end: float, step: float) -> ReportInput:
        """Everything the report needs over (start, end]."""
        data = ReportInput("prometheus", self.api.url, start, end, step)
        found = self._histograms(data)
        self._signals(data)
        self._check_found(data, found)
        self._alerts(data)
        self._records(data)
        self._expected(data)
        return data

    def _check_found(self, data: ReportInput, found: set[str]) -> None:
        """No series of any selector the spec reads: NoDataError (exit 3) naming them; some: a note per missing
        histogram selector (a model or class not scraped, rather than one without traffic)."""
        reads = [r for r in spec_reads(self.spec) if r.what.endswith("histogram")]
        if not found and not any(values for values in data.signals.values()):
            period = f"from {data.when(data.start)} to {data.when(data.end)}"
            raise no_data(self.spec, spec_reads(self.spec), self.api.url, period)
        data.notes.extend(missing_warnings(reads, found, self.api.url))

    # -- raw histograms ----------------------------------------------------------------------------------------
    def _histograms(self, data: ReportInput) -> set[str]:
        """Read every latency histogram; returns the selectors that matched any series."""
        spec = self.spec
        found: set[str] = set()
        done: set[tuple[str, Sli]] = set()
        for key in indicator_keys(spec):
            if (key.request_class, key.sli) in done:
                continue
            done.add((key.request_class, key.sli))
            rc = spec.request_class(key.request_class)
            source = spec.histogram(rc, key.sli)  # the histogram the SLO reads: frontend, engine or its own
            self._say(f"reading {source.name} for class {rc.name}")
            per_model: dict[str, dict[float, Floats]] = {}
            for term in self.queries.histogram_terms(rc, key.sli, "_bucket"):
                raw = raw_samples(self.api, term.selector, data.start, data.end, self.progress)
                if raw:
                    found.add(term.selector)
                for labels, points in raw.items():
                    labelmap = dict(labels)
                    le = _le(labelmap.get("le", ""))
                    # A histogram without a model label belongs to the term's (single) model.
                    model = labelmap.get(source.model_label, "") if source.model_label is not None else term.models[0]
                    if le is None or model not in term.models:
                        continue
                    if points:
                        earliest = min(points)
                        if data.history_start is None or earliest < data.history_start:
                            data.history_start = earliest
                    seconds = le * source.scale if math.isfinite(le) else le
                    column = per_model.setdefault(model, {}).setdefault(seconds, np.zeros(data.bins))
                    for t, delta in counter_deltas(points, data.start, data.end):
                        column[_bin_index(t, data.start, data.step, data.bins)] += delta
            for model, columns in per_model.items():
                hist = self._histogram(Key(model, rc.name, key.sli), columns, data)
                if hist is not None:
                    data.histograms[Key(model, rc.name, key.sli)] = hist
        return found

    def _histogram(self, key: Key, columns: Mapping[float, Floats], data: ReportInput) -> Histogram | None:
        if math.inf not in columns:
            data.notes.append(f"{key.label()}: no +Inf bucket series; the histogram cannot be read")
            return None
        bounds = tuple(sorted(b for b in columns if math.isfinite(b)))
        counts = np.stack([columns[b] for b in (*bounds, math.inf)], axis=1)
        slo = self.spec.request_class(key.request_class).slos[key.sli]
        good = None
        if slo.objective is not None:
            threshold = next((b for b in bounds if math.isclose(b, slo.objective.threshold, rel_tol=1e-6)), None)
            if threshold is None:
                data.notes.append(
                    f"{key.label()}: the threshold {slo.objective.threshold:g}s is not a bucket boundary of the "
                    f"series found (boundaries: {', '.join(f'{b:g}' for b in bounds)}): good events cannot be "
                    "counted, so its attainment, budget, burn rate and status are n/a"
                )
            else:
                good = columns[threshold].copy()
        return Histogram(bounds, counts, good)

    # -- engine signals ----------------------------------------------------------------------------------------
    def _signals(self, data: ReportInput) -> None:
        metrics = self.spec.metrics
        models = sorted({m for rc in self.spec.classes for m in rc.models})
        # Just under one step: each point sees its own bin's samples only (range selectors include their left
        # edge on Prometheus 2, not on 3).
        step = prom_duration(data.step - 0.001)
        rate_window = prom_duration(max(data.step, 120.0))
        by = promql.by([metrics.model_label] if metrics.model_label is not None else [])
        queries = {
            **(
                {"queue_waiting": f"max {by} ({self._over(metrics.requests_waiting, models, 'max_over_time', step)})"}
                if metrics.requests_waiting is not None
                else {}
            ),
            **(
                {"kv_cache_usage": f"max {by} ({self._over(metrics.kv_cache_usage, models, 'max_over_time', step)})"}
                if metrics.kv_cache_usage is not None
                else {}
            ),
            # One raw series per engine: the mean of per-series rates is the decode throughput per engine.
            # Mean running requests per engine: the batch the decode expectation is read at.
            "requests_running": f"avg {by} ({self._over(metrics.requests_running, models, 'avg_over_time', step)})",
            "decode_tokens_per_second": (
                f"avg {by} ({self._over(metrics.generation_tokens, models, 'rate', rate_window)})"
            ),
        }
        self._say("reading engine signals (queue, KV cache, running batch, decode throughput)")
        first = data.start + data.step
        for name, expr in queries.items():
            per_model: dict[str, Floats] = {}
            for item in self.api.query_range(expr, first, data.start + data.bins * data.step, data.step):
                # No model label (TGI): the spec's one model.
                model = item.get("metric", {}).get(metrics.model_label, "") if metrics.model_label else models[0]
                values = np.full(data.bins, np.nan)
                for t, v in item.get("values", []):
                    index = round((float(t) - data.start) / data.step) - 1
                    if 0 <= index < data.bins:
                        values[index] = float(v)
                per_model[model] = values
            data.signals[name] = per_model

    # -- alerts ------------------------------------------------------------------------------------------------
    def _alerts(self, data: ReportInput) -> None:
        self._say("reading ALERTS")
        expr = selector(
            schema.PROMETHEUS_ALERTS, [eq(schema.RULE_LABEL_SERVICE, self.spec.service), eq("alertstate", "firing")]
        )
        for labels, points in raw_samples(self.api, expr, data.start, data.end, self.progress).items():
            times = sorted(t for t in points if data.start - LOOKBACK < t <= data.end)
            episode_start: float | None = None
            last = 0.0
            for t in times:
                if episode_start is None:
                    episode_start = t
                elif t - last > ALERT_GAP:
                    data.alerts.append(AlertEpisode(dict(labels), episode_start, last))
                    episode_start = t
                last = t
            if episode_start is not None:
                data.alerts.append(AlertEpisode(dict(labels), episode_start, last))

    # -- SLO-window records ------------------------------------------------------------------------------------
    def _records(self, data: ReportInput) -> None:
        spec = self.spec
        window = prom_duration(spec.window)
        self._say(f"reading the {window} SLO-window records")
        service = [eq(schema.RULE_LABEL_SERVICE, spec.service)]
        names = {
            "total": schema.record_sli_total(window),
            "good": schema.record_sli_good(window),
            "error": schema.record_error_ratio(window),
            "budget": schema.RECORD_ERROR_BUDGET_REMAINING,
        }
        values: dict[str, dict[tuple[str, str, str], float]] = {}
        for field_name, record in names.items():
            answer = self.api.query(selector(record, service), data.end)
            values[field_name] = {
                (
                    item["metric"].get(schema.RULE_LABEL_MODEL, ""),
                    item["metric"].get(schema.RULE_LABEL_CLASS, ""),
                    item["metric"].get(schema.RULE_LABEL_SLO, ""),
                ): float(item["value"][1])
                for item in answer
            }
        history = self._history_starts(data.end)
        for key in indicator_keys(spec):
            if spec.request_class(key.request_class).slos[key.sli].objective is None:
                continue
            k = (key.model, key.request_class, key.sli.value)
            data.records[key] = WindowRecords(
                events_total=values["total"].get(k),
                events_good=values["good"].get(k),
                error_ratio=values["error"].get(k),
                budget_remaining=values["budget"].get(k),
                history_start=history.get((key.model, key.request_class, key.sli)),
            )

    def _history_starts(self, end: float) -> dict[tuple[str, str, Sli], float]:
        """Earliest raw +Inf sample inside the SLO window per indicator, to the hour (a 1h-step subquery)."""
        spec = self.spec
        out: dict[tuple[str, str, Sli], float] = {}
        window = prom_duration(spec.window)
        for rc in spec.classes:
            for sli, slo in rc.slos.items():
                if slo.objective is None:
                    continue
                hist = spec.histogram(rc, sli)
                for term in self.queries.histogram_terms(rc, sli, "_bucket", extra=[promql.INF_MATCHER]):
                    grouping = promql.by([hist.model_label] if hist.model_label is not None else [])
                    expr = f"min {grouping} (min_over_time(timestamp({term.selector})[{window}:1h]))"
                    for item in self.api.query(expr, end):
                        labels = item["metric"]
                        model = labels.get(hist.model_label, "") if hist.model_label is not None else term.models[0]
                        out[(model, rc.name, sli)] = float(item["value"][1])
        return out

    def _expected(self, data: ReportInput) -> None:
        for model in self.spec.models:
            value = expected_decode_tokens_per_second(self.spec, model)
            if value is not None:
                data.expected_decode[model.name] = value
            curve = expected_decode_curve(self.spec, model)
            if curve:
                data.decode_curves[model.name] = tuple((p.batch, p.step_seconds) for p in curve)
