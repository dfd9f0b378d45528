"""Readers for Pyrra, Sloth and OpenSLO documents: each SLO becomes `Objective`s, or `Notice`s naming why not.

Formats (as their projects publish them):
* Pyrra `pyrra.dev/v1alpha1` `ServiceLevelObjective`: `spec.target` (percent, a string), `spec.window`,
  `spec.indicator.latency.{success,total}.metric` and `grouping`. `ratio`, `latencyNative` and `bool_gauge`
  indicators are refused.
* Sloth `version: prometheus/v1` files and `sloth.slok.dev/v1` `PrometheusServiceLevel` objects: `slos[]` with
  `objective` (percent) and `sli.events.{error_query,total_query}` (camelCase in the CRD). Sloth has no window
  in the file; its default SLO period is 30 days. `raw` and `plugin` SLIs are refused.
* OpenSLO `openslo/v1alpha` and `openslo/v1` `SLO` (and v1 `SLI` documents referenced by `indicatorRef`):
  `ratioMetric(s)` with `good` or `bad` over `total`, `target` (0..1) or `targetPercent`, rolling time windows,
  `Occurrences` budgeting. Threshold/raw metrics, calendar windows and timeslice budgeting are refused.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, Final

from slokit.interop.latency import guess_sli, latency
from slokit.interop.model import BUCKETS_ANNOTATION, Notice, Objective, Unsupported
from slokit.schema import Sli
from slokit.units import DurationError, parse_duration

SLOTH_DEFAULT_WINDOW: Final = 30 * 86400.0
CALENDAR: Final = "calendar window"
TIMESLICES: Final = "timeslice budgeting"
_OPENSLO_UNITS: Final = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}


def _percent(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Unsupported("target", f"{what} {value!r} is not a number") from None
    if not 0 < number < 100:
        raise Unsupported("target", f"{what} {value!r} must be a percentage between 0 and 100")
    return number


def _duration(value: Any, what: str) -> float:
    text = str(value).strip()
    if re.fullmatch(r"\d+\s*[MQY]", text):
        raise Unsupported(
            CALENDAR,
            f"{what} {text!r} is a calendar period (months, quarters, years have no fixed "
            "length); slokit windows are rolling, fixed durations such as 28d",
        )
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise Unsupported("window", f"{what}: {exc}") from None


def _objective(
    file: str,
    slo: str,
    kind: str,
    service: str | None,
    description: str,
    percentile: float,
    window: float,
    good: Any,
    total: Any,
    bad: Any = None,
    annotations: Mapping[str, Any] | None = None,
) -> Objective:
    found = latency(good, total, bad)
    notes = annotations or {}
    sli = guess_sli(found.histogram)
    if notes.get("slokit.dev/sli") in {s.value for s in Sli}:
        sli = Sli(notes["slokit.dev/sli"])
    model_label = notes.get("slokit.dev/model-label") or None
    models = tuple(m for m in str(notes.get("slokit.dev/models", "")).split(",") if m)
    buckets, bucket_warnings = _buckets(notes.get(BUCKETS_ANNOTATION), found.threshold / found.scale)
    return Objective(
        file=file,
        slo=slo,
        kind=kind,
        service=service,
        description=description,
        percentile=percentile,
        window=window,
        histogram=found.histogram,
        matchers=found.matchers,
        threshold=found.threshold,
        scale=found.scale,
        sli=sli,
        grouping=found.grouping,
        warnings=found.warnings + bucket_warnings,
        model_label=str(model_label) if model_label else None,
        class_name=str(notes["slokit.dev/class"]) if notes.get("slokit.dev/class") else None,
        models=models,
        buckets=buckets,
        good_only=found.good_only,
    )


def _buckets(value: Any, threshold: float) -> tuple[tuple[float, ...] | None, tuple[str, ...]]:
    """The `slokit.dev/buckets` annotation of slokit's own export: the histogram's le boundaries (its unit).

    Kept so an export and import round trip reads the same buckets: without them the imported spec assumes the
    default ladder, and boundaries that are not thresholds (the scale-out boundary) move. A value that is not an
    increasing list of positive numbers holding the threshold is left out, with a warning, rather than refusing
    the objective: the default ladder still works, only less exactly.
    """
    if value is None:
        return None, ()
    try:
        bounds = tuple(float(part) for part in str(value).split(","))
    except ValueError:
        bounds = ()
    ordered = all(b > a for a, b in itertools.pairwise(bounds))
    holds = any(math.isclose(b, threshold, rel_tol=1e-9) for b in bounds)
    if bounds and ordered and bounds[0] > 0 and all(math.isfinite(b) for b in bounds) and holds:
        return bounds, ()
    return None, (
        f"buckets: {BUCKETS_ANNOTATION} {str(value)[:80]!r} is not an increasing list of positive bounds holding "
        "the threshold; the imported histogram gets slokit's default ladder",
    )


Result = Iterator[Objective | Notice]


def _attempt(file: str, slo: str, build: Any) -> Result:
    try:
        objective = build()
    except Unsupported as exc:
        yield Notice(file, slo, exc.construct, exc.detail, skipped=True)
        return
    for warning in objective.warnings:
        construct, _, detail = warning.partition(": ")
        yield Notice(file, slo, construct, detail, skipped=False)
    if objective.grouping:
        yield Notice(
            file,
            slo,
            "grouping",
            f"by ({', '.join(objective.grouping)}) is not kept: slokit computes the "
            "objective over all selected series, per model and class",
            skipped=False,
        )
    yield objective


# -- Pyrra ------------------------------------------------------------------------------------------------------
def pyrra(doc: Mapping[str, Any], file: str) -> Result:
    """A Pyrra ServiceLevelObjective."""
    meta = doc.get("metadata") or {}
    name = str(meta.get("name", "unnamed"))
    spec = doc.get("spec") or {}
    indicator = spec.get("indicator") or {}
    for key, construct in (
        ("ratio", "ratio SLI of error counters"),
        ("latencyNative", "native histogram"),
        ("bool_gauge", "boolean-gauge SLI"),
        ("boolGauge", "boolean-gauge SLI"),
    ):
        if key in indicator:
            yield Notice(
                file, name, construct, f"Pyrra indicator {key!r} is not a classic-histogram latency SLI", skipped=True
            )
            return
    lat = indicator.get("latency")
    if not isinstance(lat, dict):
        yield Notice(file, name, "indicator", f"no latency indicator (found {sorted(indicator)})", skipped=True)
        return

    def build() -> Objective:
        objective = _objective(
            file,
            name,
            "Pyrra ServiceLevelObjective",
            meta.get("namespace"),
            str(spec.get("description") or ""),
            _percent(spec.get("target"), "target"),
            _duration(spec.get("window", "28d"), "window"),
            (lat.get("success") or {}).get("metric"),
            (lat.get("total") or {}).get("metric"),
        )
        grouping = tuple(str(g) for g in lat.get("grouping") or ())
        if grouping:
            objective = replace(objective, grouping=tuple(dict.fromkeys((*objective.grouping, *grouping))))
        return objective

    yield from _attempt(file, name, build)


# -- Sloth ------------------------------------------------------------------------------------------------------
def _sloth_slos(service: Any, slos: Any, file: str, kind: str, window: float) -> Result:
    if not isinstance(slos, list):
        yield Notice(file, str(service), "slos", "the file has no list of slos", skipped=True)
        return
    for item in slos:
        if not isinstance(item, dict):
            continue
        name = str(item.get("name", "unnamed"))
        sli = item.get("sli") or {}
        if "raw" in sli:
            yield Notice(
                file,
                name,
                "raw SLI",
                "a raw error-ratio query cannot be split into good and total events",
                skipped=True,
            )
            continue
        if "plugin" in sli:
            yield Notice(
                file,
                name,
                "SLI plugin",
                f"Sloth plugin {(sli['plugin'] or {}).get('id')!r} is code, not a query",
                skipped=True,
            )
            continue
        events = sli.get("events") or {}
        error = events.get("error_query", events.get("errorQuery"))
        total = events.get("total_query", events.get("totalQuery"))

        def build(item: dict[str, Any] = item, name: str = name, error: Any = error, total: Any = total) -> Objective:
            return _objective(
                file,
                name,
                kind,
                str(service),
                str(item.get("description") or ""),
                _percent(item.get("objective"), "objective"),
                window,
                None,
                total,
                error,
            )

        yield from _attempt(file, name, build)


def sloth(doc: Mapping[str, Any], file: str) -> Result:
    """A Sloth prometheus/v1 file or PrometheusServiceLevel object."""
    if doc.get("kind") == "PrometheusServiceLevel":
        spec = doc.get("spec") or {}
        window = _sloth_window(spec, file)
        yield from _sloth_slos(spec.get("service"), spec.get("slos"), file, "Sloth PrometheusServiceLevel", window)
    else:
        window = _sloth_window(doc, file)
        yield from _sloth_slos(doc.get("service"), doc.get("slos"), file, "Sloth prometheus/v1", window)


def _sloth_window(doc: Mapping[str, Any], file: str) -> float:
    for key in ("slo_period", "sloPeriod"):
        if key in doc:
            try:
                return _duration(doc[key], key)
            except Unsupported:
                return SLOTH_DEFAULT_WINDOW
    return SLOTH_DEFAULT_WINDOW


# -- OpenSLO ----------------------------------------------------------------------------------------------------
def _openslo_query(metric: Any, sources: Mapping[str, str]) -> str | None:
    """The PromQL of an OpenSLO metric (v1 `metricSource.spec.query`, v1alpha `query`); raises on other sources."""
    if metric is None:
        return None
    if not isinstance(metric, dict):
        raise Unsupported("metric source", f"{metric!r} is not a metric definition")
    if "metricSource" in metric:
        source = metric["metricSource"] or {}
        kind = str(source.get("type") or sources.get(str(source.get("metricSourceRef")), "") or "")
        spec = source.get("spec") or {}
        query = spec.get("query", spec.get("promql"))
    else:
        kind = str(metric.get("source") or "")
        query = metric.get("query")
    if kind and kind.lower() not in ("prometheus", "thanos", "mimir", "cortex", "victoriametrics", "any"):
        raise Unsupported("metric source", f"metric source type {kind!r} is not Prometheus; slokit reads PromQL")
    return None if query is None else str(query)


def _openslo_window(spec: Mapping[str, Any]) -> float:
    windows = spec.get("timeWindow", spec.get("timeWindows")) or []
    if not windows:
        return 28 * 86400.0
    window = windows[0] or {}
    if window.get("calendar") is not None or window.get("isRolling") is False:
        raise Unsupported(CALENDAR, "the SLO's time window is calendar-aligned; slokit windows are rolling")
    if "duration" in window:
        return _duration(window["duration"], "timeWindow duration")
    unit = str(window.get("unit", "")).lower()
    if unit in ("month", "quarter", "year"):
        raise Unsupported(CALENDAR, f"a window of {window.get('count')} {unit}(s) has no fixed length")
    if unit not in _OPENSLO_UNITS:
        raise Unsupported("window", f"time window unit {window.get('unit')!r} is not known")
    return float(window.get("count", 1)) * _OPENSLO_UNITS[unit]


def _target(objective: Mapping[str, Any]) -> float:
    if "targetPercent" in objective:
        return _percent(objective["targetPercent"], "targetPercent")
    value = objective.get("target")
    try:
        ratio = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise Unsupported("target", f"target {value!r} is not a number between 0 and 1") from None
    return _percent(round(ratio * 100, 9), "target x 100")


def openslo(doc: Mapping[str, Any], file: str, slis: Mapping[str, Any], sources: Mapping[str, str]) -> Result:
    """An OpenSLO SLO (v1alpha or v1); `slis` are the SLI documents by name, `sources` DataSource types."""
    version = str(doc.get("apiVersion"))
    meta = doc.get("metadata") or {}
    name = str(meta.get("name", "unnamed"))
    spec = doc.get("spec") or {}
    kind = f"OpenSLO {version.removeprefix('openslo/')} SLO"
    method = str(spec.get("budgetingMethod", "Occurrences"))
    refusals: list[Notice] = []
    if method.lower() != "occurrences":
        refusals.append(
            Notice(
                file,
                name,
                TIMESLICES,
                f"budgetingMethod {method}: slokit counts events (Occurrences), not good time slices",
                skipped=True,
            )
        )
    window = 0.0
    try:
        window = _openslo_window(spec)
    except Unsupported as exc:
        refusals.append(Notice(file, name, exc.construct, exc.detail, skipped=True))
    if refusals:
        yield from refusals
        return
    indicator: Mapping[str, Any] = {}
    indicator_meta: Mapping[str, Any] = {}
    if "indicator" in spec and isinstance(spec["indicator"], dict):
        indicator_doc = spec["indicator"]
        indicator = indicator_doc.get("spec") or indicator_doc  # v1: {metadata, spec}; v1alpha: thresholdMetric
        indicator_meta = indicator_doc.get("metadata") or {}
    elif "indicatorRef" in spec:
        ref = str(spec["indicatorRef"])
        if ref not in slis:
            yield Notice(file, name, "indicatorRef", f"no SLI document named {ref!r} among the files", skipped=True)
            return
        indicator = slis[ref].get("spec") or {}
        indicator_meta = slis[ref].get("metadata") or {}
    annotations = {**(indicator_meta.get("annotations") or {}), **(meta.get("annotations") or {})}
    objectives = spec.get("objectives") or []
    for index, objective in enumerate(objectives):
        label = name if len(objectives) == 1 else f"{name} objective {index + 1}"
        if not isinstance(objective, dict):
            continue
        if objective.get("timeSliceTarget") is not None or objective.get("timeSliceWindow") is not None:
            yield Notice(file, label, TIMESLICES, "the objective has a time-slice target", skipped=True)
            continue
        ratio = objective.get("ratioMetrics") or indicator.get("ratioMetric")
        if ratio is None:
            yield Notice(
                file,
                label,
                "threshold (raw) metric SLI",
                "a thresholdMetric compares a single value to a threshold; slokit "
                "needs a ratio of good (le bucket) over total events",
                skipped=True,
            )
            continue
        if "raw" in ratio:
            yield Notice(
                file,
                label,
                "raw ratio SLI",
                "a precomputed ratio (ratioMetric.raw) has no events to count",
                skipped=True,
            )
            continue

        def build(
            objective: dict[str, Any] = objective, ratio: dict[str, Any] = ratio, label: str = label
        ) -> Objective:
            return _objective(
                file,
                label,
                kind,
                str(spec.get("service") or "") or None,
                str(spec.get("description") or ""),
                _target(objective),
                window,
                _openslo_query(ratio.get("good"), sources),
                _openslo_query(ratio.get("total"), sources),
                _openslo_query(ratio.get("bad"), sources),
                annotations=annotations,
            )

        yield from _attempt(file, label, build)
