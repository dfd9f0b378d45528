"""Recognising a histogram-latency SLI in the queries of any SLO format: good = `le` bucket, total = `_count`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from slokit.interop.model import Unsupported
from slokit.interop.selectors import Matcher, Query, QueryError, Selector, le_value, parse_query
from slokit.schema import Sli
from slokit.units import format_duration

RATIO = "ratio SLI of error counters"
NATIVE = "native histogram"
VMRANGE = "VictoriaMetrics histogram_share"
DIFFERENT = "good selector differs from the total beyond le"
NARROWER = "good selector narrower than the total"
GAUGE_THRESHOLD = "gauge-threshold SLI"

# A comparison of a series with a number (`gauge < 0.75`, `0.5 >= x`), outside label matchers and range brackets.
_COMPARISON = re.compile(r"(?:[<>]=?|[!=]=)\s*(?:bool\s+)?[-+]?(?:\d|\.\d)|(?:\d|\))\s*(?:[<>]=?|[!=]=)")


def _compares_values(text: str) -> bool:
    """Whether a query filters series by their value against a number (a gauge threshold)."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", text)
    return bool(_COMPARISON.search(bare))


@dataclass(frozen=True)
class Latency:
    """The histogram, its matchers, the threshold (seconds) and its unit."""

    histogram: str
    matchers: tuple[Matcher, ...]
    threshold: float
    scale: float
    grouping: tuple[str, ...]
    warnings: tuple[str, ...]
    good_only: tuple[Matcher, ...] = ()  # matchers of the good selector the total lacks (dropped, with a warning)


def _parse(text: object, role: str) -> Query:
    if not isinstance(text, str) or not text.strip():
        raise Unsupported("missing query", f"the {role} query is empty or not a string")
    try:
        return parse_query(text)
    except QueryError as exc:
        raise Unsupported("unreadable query", f"{role} query: {exc}") from None


def _base(selector: Selector, suffixes: tuple[str, ...]) -> str | None:
    for suffix in suffixes:
        if selector.name.endswith(suffix):
            return selector.name[: -len(suffix)]
    return None


def _good_bucket(query: Query, role: str) -> Selector:
    if "histogram_share" in query.functions or any(s.on("vmrange") for s in query.selectors):
        raise Unsupported(
            VMRANGE,
            f"the {role} query reads VictoriaMetrics vmrange buckets with histogram_share "
            f"({query.text.strip()!r}), a ratio per window rather than counted events",
        )
    if "histogram_fraction" in query.functions or "histogram_count" in query.functions:
        raise Unsupported(
            NATIVE,
            f"the {role} query reads a native histogram ({query.text.strip()!r}); slokit reads "
            "classic histograms (_bucket series with an le label)",
        )
    buckets = [s for s in query.selectors if s.name.endswith("_bucket") and s.on("le")]
    if not buckets and _compares_values(query.text):
        raise Unsupported(
            GAUGE_THRESHOLD,
            f"the {role} query {query.text.strip()!r} counts series whose value crosses a threshold (a gauge "
            "compared with a number), not requests in a histogram bucket; slokit imports latency SLIs (an le "
            "bucket over the count)",
        )
    if not buckets:
        raise Unsupported(
            RATIO,
            f"the {role} query {query.text.strip()!r} counts events with a counter, not a "
            "histogram bucket; slokit imports latency SLIs (an le bucket over the count)",
        )
    if len(buckets) > 1:
        raise Unsupported("several buckets", f"the {role} query reads {len(buckets)} bucket selectors")
    return buckets[0]


def _unit(histogram: str) -> tuple[float, tuple[str, ...]]:
    if histogram.endswith(("_milliseconds", "_ms")):
        return 0.001, ()
    if histogram.endswith("_seconds"):
        return 1.0, ()
    return 1.0, (
        f"unit: {histogram} does not say its unit in its name; read as seconds (set metric.unit: ms if "
        "it counts milliseconds)",
    )


def latency(good: object | None, total: object, bad: object | None = None) -> Latency:
    """The latency SLI of a good (or bad) over total pair of queries; raises `Unsupported` naming the construct."""
    if bad is not None and good is None:
        bad_q = _parse(bad, "bad/error")
        # bad = count - bucket{le}: the good events are that bucket.
        counts = [s for s in bad_q.selectors if s.name.endswith("_count")]
        if not counts:
            _good_bucket(bad_q, "bad/error")  # raises with the right construct
            raise Unsupported(RATIO, f"the error query {bad_q.text.strip()!r} is not the count minus an le bucket")
        good_sel = _good_bucket(bad_q, "bad/error")
        grouping = bad_q.grouping
    else:
        good_q = _parse(good, "good")
        good_sel = _good_bucket(good_q, "good")
        grouping = good_q.grouping
    total_q = _parse(total, "total")
    if len(total_q.selectors) != 1:
        raise Unsupported(
            DIFFERENT, f"the total query reads {len(total_q.selectors)} selectors; expected the histogram's _count"
        )
    total_sel = total_q.selectors[0]
    base = _base(good_sel, ("_bucket",))
    total_base = _base(total_sel, ("_count",))
    if total_base is None and total_sel.name.endswith("_bucket") and le_value(total_sel) == math.inf:
        total_base = _base(total_sel, ("_bucket",))
    if total_base is None:
        raise Unsupported(RATIO, f"the total {total_sel.name} is not a histogram's _count (or +Inf bucket)")
    if base != total_base:
        raise Unsupported(DIFFERENT, f"good reads {good_sel.name} but total reads {total_sel.name}")
    bound = le_value(good_sel)
    if bound is None or not math.isfinite(bound) or bound <= 0:
        raise Unsupported("le matcher", f"the good bucket's le matcher {good_sel.on('le')} is not one finite bound")
    good_m, total_m = set(good_sel.without("le")), set(total_sel.without("le"))
    if not total_m <= good_m:
        extra = sorted(good_m ^ total_m)
        raise Unsupported(
            DIFFERENT, "matchers in only one of good and total: " + ", ".join(f'{k}{op}"{v}"' for k, op, v in extra)
        )
    narrower = tuple(sorted(good_m - total_m))
    labels = [m[0] for m in total_sel.matchers if m[0] != "le"]
    if len(labels) != len(set(labels)):
        raise Unsupported(
            "two matchers on one label",
            f"{total_sel.name} matches a label twice; a slokit selector holds one matcher per label",
        )
    assert base is not None
    scale, warnings = _unit(base)
    if narrower:
        warnings = (*warnings, _narrower_good(narrower, bound * scale))
    return Latency(
        histogram=base,
        matchers=tuple(m for m in total_sel.matchers if m[0] != "le"),
        threshold=round(bound * scale, 12),
        scale=scale,
        grouping=tuple(dict.fromkeys((*grouping, *total_q.grouping))),
        warnings=warnings,
        good_only=narrower,
    )


# Labels that carry an HTTP or gRPC status, whose matchers in a good selector mean "and it succeeded" (or failed).
_STATUS_LABELS: Final = frozenset({"code", "status", "status_code", "http_status", "response_code", "grpc_code"})


def _narrower_good(extra: tuple[Matcher, ...], threshold: float) -> str:
    """The warning for good matchers the total lacks: what the original counted, and what slokit counts instead.

    The original SLO's good events were requests within the threshold that also matched these matchers, so a fast
    request outside them (typically an error, when the matcher is a status regex) was a bad event; a slokit
    objective reads one selector for good and total, the total's, so such requests now count as good when fast.
    The objective is still worth importing, but the reader must know what moved.
    """
    shown = ", ".join(f'{label}{op}"{value}"' for label, op, value in extra)
    within = format_duration(threshold)
    hint = ""
    status = [(op, value) for label, op, value in extra if label in _STATUS_LABELS]
    if status:
        op, value = status[0]
        keeps_errors = (op in ("=", "=~") and value.startswith("5")) or (op in ("!=", "!~") and value.startswith("2"))
        hint = (
            " As written only server errors could be good there, which is most likely a slip in the original."
            if keeps_errors
            else " Failed requests that answer fast now count as good: keep an availability SLO for them."
        )
    return (
        f"{NARROWER}: the good selector also matches {shown}, which the total does not: there a request counted "
        f"as good only when it was within {within} and matched that too, so a fast request outside it was bad; "
        f"slokit reads the total's series for both, so every request within {within} is good and the matcher is "
        f"dropped.{hint}"
    )


def guess_sli(histogram: str) -> Sli:
    """Which of slokit's indicators a histogram measures, from its name (end-to-end when it does not say)."""
    name = histogram.lower()
    if "first_token" in name or "ttft" in name:
        return Sli.TTFT
    if "inter_token" in name or "itl" in name:
        return Sli.ITL
    if "per_output_token" in name or "tpot" in name or "time_per_token" in name:
        return Sli.TPOT
    return Sli.E2E
