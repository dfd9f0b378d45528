"""Recording rules: from raw latency histograms to SLI increases, error ratios, burn rates, quantiles and signals.

The shape, and why:

* **One raw read per histogram.** Every latency histogram is read once per evaluation, as per-engine bucket rates
  over 5m (`slokit_engine:latency_bucket:rate5m`). Quantiles, the 5m SLI counts (`+Inf` and threshold bucket x
  300 s) and everything above them read recorded series only.
* **Long windows are tiled, not averaged.** A window W is a sum of recorded smaller windows laid end to end with
  `offset` (1h = 30m + 30m offset 30m; 1d = 4 x 6h; 28d = 9 x 3d + 1d). Each term is one sample per series, so a
  28d window costs about ten samples instead of the 161,280 raw samples per bucket series that `increase(x[28d])`
  reads at a 15s scrape. Because every group records at fixed times (t, t - interval, ...), a block read at an
  offset that is a multiple of its group's interval ends exactly where the next one starts: the tiles cover
  (t - W, t] with no gap and no overlap, unlike `sum_over_time(x[W:5m])`, whose steps are aligned to absolute time
  and so drop up to 5m at the window's recent edge. It is event-weighted (sum of good over sum of all).
  A term with no history yet (the first days after rollout, a new model) counts as zero events, so long windows
  exist from the first evaluation and converge as history accumulates.
* **No NaN.** The error ratio is 0 when a window saw no events (there was nothing to be slow), quantiles are absent
  at zero traffic (a quantile of nothing is undefined, and an absent series never pages), and the scale-out ratio
  is 0 at zero traffic, so autoscalers always read a number.
* **Groups by window length.** 5m to 1h every 30s (the page tiers read them), 2h to 6h and the baselines every 1m,
  1d and longer every 2m (under the 5m lookback, so readers never see a stale gap on Prometheus 2 or 3).

Labels on every SLO series: service, model, class, slo; engine on `slokit_engine:*`; quantile on quantile records.
Rules run unchanged on Prometheus, Thanos Ruler and Mimir ruler (plain PromQL, no subqueries, no `@`), and are
also written as a prometheus-operator PrometheusRule.

**VictoriaMetrics (`--engine victoriametrics`).** vmalert writes each record through remote write, so a rule reads
another rule's result of the same evaluation one interval late, and a chain of n records trails the raw data by n
intervals. So there: windows up to VM_RAW_WINDOW are `increase()` of the raw buckets (VictoriaMetrics' increase is
the same sample delta as the 5m tile: it starts from the last sample before the window and does not extrapolate);
a longer window is its tiles with the newest one flattened down to such a raw read, so it reads the raw buckets
and records at an `offset` of at least their own window (written long before); error ratios, burn rates and the
budget are computed from those same expressions (MetricsQL `WITH`), not from the records of this evaluation; and
burn-rate alerts compute their own burn rates the same way. Every group asks with `nocache=1`, so
VictoriaMetrics answers as of the evaluation time instead of `-search.latencyOffset` (30s) earlier.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slokit import promql, schema
from slokit.generate import alerts, queries
from slokit.generate.engines import DEFAULT, Engine, group_fields, mimir_namespace
from slokit.generate.model import AlertKind, AlertRule, RecordingRule, RuleGroup
from slokit.generate.once import once
from slokit.plan.roofline import expected_decode_tokens_per_second
from slokit.promql import INF_MATCHER, Matcher, eq, le_matcher, number, one_of, selector
from slokit.schema import Sli
from slokit.spec import PERCENTILES, RequestClass, Spec
from slokit.units import parse_duration, prom_duration

# The SLI windows every objective gets (plus the burn-rate windows and the SLO window of the spec).
STANDARD_WINDOWS: Final = (300.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0, 3 * 86400.0)
BASE_WINDOW: Final = 300.0  # read from the recorded bucket rates
DASHBOARD_QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
BASELINE_QUANTILE: Final = 0.99

# Group evaluation intervals by window length (seconds).
SHORT_INTERVAL: Final = 30.0
MEDIUM_INTERVAL: Final = 60.0
LONG_INTERVAL: Final = 120.0

SLO_LABELS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)
# What a bucket boundary record is keyed by: `le` alone, as its seconds depend on nothing else.
BOUND_LABELS: Final = (schema.RULE_LABEL_SERVICE, "le")
# What a per-SLO parameter (a consistency limit) is keyed by: every model of a class shares it.
SLO_LIMIT_LABELS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)
# An objective is per class and SLI; every model of the class reads the one series (the alerts' parameter join).
ON_OBJECTIVE: Final = alerts.ON_PARAMS


@dataclass(frozen=True)
class WindowPlan:
    """Where a window is recorded and how it is built."""

    window: float
    interval: float
    blocks: tuple[promql.Block, ...]  # empty: the base window (from bucket rates) or read from raw


def sli_windows(spec: Spec) -> list[float]:
    """Every window an objective gets an SLI record for, ascending."""
    windows = set(STANDARD_WINDOWS)
    windows.update(alerts.burn_windows(spec))  # the spec's tiers and any adapted fast page tier
    windows.add(spec.window)
    return sorted(windows)


def window_interval(window: float) -> float:
    """The evaluation interval of the group that records `window`."""
    if window <= 3600:
        return SHORT_INTERVAL
    if window < 86400:
        return MEDIUM_INTERVAL
    return LONG_INTERVAL


def window_plans(spec: Spec) -> list[WindowPlan]:
    """How each SLI window is computed: the base window from bucket rates, every other one tiled from smaller ones."""
    plans: list[WindowPlan] = []
    recorded: list[float] = []
    step_of: dict[float, float] = {}
    for window in sli_windows(spec):
        interval = window_interval(window)
        if window == BASE_WINDOW:
            plans.append(WindowPlan(window, interval, ()))
        else:
            try:
                blocks = tuple(promql.tile(window, recorded, step_of))
            except ValueError:
                blocks = ()  # read from raw counters: only for windows that are not a sum of recorded ones
            plans.append(WindowPlan(window, interval, blocks))
        recorded.append(window)
        step_of[window] = interval
    return plans


# vmalert: windows up to this long are read straight from the raw buckets (the page tiers' windows).
VM_RAW_WINDOW: Final = 3600.0


def vm_head(plans: dict[float, WindowPlan], window: float) -> tuple[float, tuple[promql.Block, ...]]:
    """`window` on vmalert: the raw-read window at its recent end and the recorded blocks behind it.

    The newest tile is replaced by its own tiles, newest first, until it is a window read from raw; every other
    block is a record read at an offset of at least its own length, written long before this evaluation.
    """
    plan = plans[window]
    if window <= VM_RAW_WINDOW or not plan.blocks:
        return window, ()
    head, rest = plan.blocks[0], plan.blocks[1:]
    raw, inner = vm_head(plans, head.window)
    return raw, (*inner, *rest)


def w(seconds: float) -> str:
    """The window's Prometheus spelling as used in record names (`5m`, `1d`, `28d`)."""
    return prom_duration(seconds)


# ==============================================================================================================
# Raw reads (selectors from queries.py, which owns the spec's scope and replica labels)
# ==============================================================================================================
def _service(spec: Spec) -> Matcher:
    return eq(schema.RULE_LABEL_SERVICE, spec.service)


def _objective_slos(spec: Spec) -> list[tuple[RequestClass, Sli]]:
    return [(rc, sli) for rc in spec.classes for sli, slo in rc.slos.items() if slo.objective is not None]


def _aggregate(spec: Spec, op: str, inner: str, labels: Iterable[str]) -> str:
    """`op by (labels) (inner)` in the source's label names, then renamed to slokit's (`model_name` -> `model`)."""
    metrics = spec.metrics
    own = {
        schema.RULE_LABEL_MODEL: metrics.model_label,
        schema.RULE_LABEL_ENGINE: metrics.engine_label,
        schema.RULE_LABEL_CLASS: metrics.class_label or schema.RULE_LABEL_CLASS,
    }
    labels = list(labels)
    names = [name for name in dict.fromkeys(own.get(label, label) for label in labels) if name is not None]
    expr = f"{op} {promql.by(names)} ({inner})"
    if metrics.model_label is not None:
        expr = promql.rename_label(expr, metrics.model_label, schema.RULE_LABEL_MODEL)
    elif schema.RULE_LABEL_MODEL in labels:  # no model label (TGI): the spec's one model, written on
        expr = f'label_replace({expr}, "{schema.RULE_LABEL_MODEL}", {promql.quote(spec.models[0].name)}, "", "")'
    if schema.RULE_LABEL_ENGINE in labels:
        if metrics.engine_label != schema.RULE_LABEL_ENGINE and metrics.engine_label in labels:
            # the engine label is a replica label too (SGLang's instance): copy it, keep the replica label
            engine = promql.quote(metrics.engine_label)
            expr = f'label_replace({expr}, "{schema.RULE_LABEL_ENGINE}", "$1", {engine}, "(.*)")'
        else:
            expr = promql.rename_label(expr, metrics.engine_label, schema.RULE_LABEL_ENGINE)
    if schema.RULE_LABEL_CLASS in labels and metrics.class_label not in (None, schema.RULE_LABEL_CLASS):
        expr = promql.rename_label(expr, metrics.class_label, schema.RULE_LABEL_CLASS)
    return expr


def _with_class(spec: Spec, request_class: RequestClass, expr: str) -> str:
    """Write the class onto a per-class expression when the source has no class label (vLLM's own metrics)."""
    if spec.metrics.class_label is not None:
        return expr
    return f'label_replace({expr}, "{schema.RULE_LABEL_CLASS}", {promql.quote(request_class.name)}, "", "")'


def _with_slo(sli: Sli, expr: str) -> str:
    return f'label_replace({expr}, "{schema.RULE_LABEL_SLO}", "{sli.value}", "", "")'


def _histogram_raws(spec: Spec, rc: RequestClass, sli: Sli, suffix: str, extra: Sequence[Matcher] = ()) -> list[str]:
    """The raw selectors of one class's SLI histogram (Spec.histogram: custom `metric:` or measured_at), one per
    deployment scope, each with the spec's `selector:` (see queries.py)."""
    return [t.selector for t in queries.Queries(spec).histogram_terms(rc, sli, suffix, extra)]


def _histogram_sum(spec: Spec, rc: RequestClass, sli: Sli, inner: str, group: Iterable[str]) -> str:
    """`sum by (group) (inner)` over one class's SLI histogram, its labels renamed to slokit's (model, engine,
    class): the source's label names, a custom histogram's own, or written on when the series lack them.

    Replica labels pass through as named; an engine label that is itself a replica label (`instance`, as for
    SGLang or a custom histogram) is copied to `engine`, not moved, so the replica label stays."""
    hist = spec.histogram(rc, sli)
    group = list(group)
    names: list[str] = []
    for label in group:
        if label == schema.RULE_LABEL_MODEL:
            name = hist.model_label
        elif label == schema.RULE_LABEL_ENGINE:
            name = hist.engine_label or label  # no engine label (frontend): grouping by it is a no-op
        elif label == schema.RULE_LABEL_CLASS:
            name = hist.class_label
        else:
            name = label
        if name is not None and name not in names:
            names.append(name)
    expr = f"sum {promql.by(names)} ({inner})"
    if hist.model_label is not None:
        expr = promql.rename_label(expr, hist.model_label, schema.RULE_LABEL_MODEL)
    else:
        expr = f'label_replace({expr}, "{schema.RULE_LABEL_MODEL}", {promql.quote(rc.models[0])}, "", "")'
    if schema.RULE_LABEL_ENGINE in group and hist.engine_label is not None:
        if hist.engine_label != schema.RULE_LABEL_ENGINE and hist.engine_label in group:  # a replica label: keep it
            expr = (
                f'label_replace({expr}, "{schema.RULE_LABEL_ENGINE}", "$1", {promql.quote(hist.engine_label)}, "(.*)")'
            )
        else:
            expr = promql.rename_label(expr, hist.engine_label, schema.RULE_LABEL_ENGINE)
    if schema.RULE_LABEL_CLASS in group and hist.class_label is None:
        expr = f'label_replace({expr}, "{schema.RULE_LABEL_CLASS}", {promql.quote(rc.name)}, "", "")'
    elif schema.RULE_LABEL_CLASS in group and hist.class_label not in (None, schema.RULE_LABEL_CLASS):
        expr = promql.rename_label(expr, str(hist.class_label), schema.RULE_LABEL_CLASS)
    return expr


def threshold_le(spec: Spec, rc: RequestClass, sli: Sli, seconds: float) -> Matcher:
    """The `le` matcher of a threshold in the histogram's own unit (500 for 0.5 s on a millisecond histogram)."""
    return le_matcher(spec.histogram(rc, sli).le_for(seconds))


def _union(terms: Iterable[str]) -> str:
    """Per-class expressions joined with `or`: their label sets differ by class, so nothing is dropped."""
    return queries.union(terms)


def _raws(
    spec: Spec,
    metric: str,
    models: Iterable[str] | None = None,
    request_class: RequestClass | None = None,
    extra: Sequence[Matcher] = (),
) -> list[str]:
    """The raw selectors of a metric, one per distinct deployment scope of `models` (see queries.py)."""
    return [t.selector for t in queries.Queries(spec).raw_terms(metric, models, request_class, extra)]


# Sample-delta tiles. A tile is, per raw series, its last sample at t minus its last sample at t - 5m, both looked
# up over TILE_LOOKBACK; consecutive tiles telescope (their sum over a window is exactly last(t) - last(t - W)),
# so no event is estimated, dropped at a tile boundary or counted twice, and a missed scrape only moves events into
# the next tile. A tile that holds a counter reset counts the events before it (its highest sample minus the
# previous tile's last) plus the value after it, as `increase()` over the raw range would. A series new in the
# last TILE_SEEN counts from zero; one that comes back after more than TILE_LOOKBACK without a sample is not
# counted from zero again (that would add its whole history): the events of such a long gap are lost.
#
# The last sample over TILE_LOOKBACK is recorded once per raw series (schema.RECORD_COUNTER_LAST) in the same
# group, before the tiles: the tiles then read it as an instant value, now and 5m ago (the group records it every
# 30s, so the sample 5m ago is the one recorded then), instead of re-reading 15 minutes of raw samples in each of
# their five terms; whether a series is new is looked up at 5m steps (a subquery: 12 samples an hour back, where
# the raw range reads every scrape of the hour). Where the record 5m ago is missing (Prometheus itself was down for
# more than the 5m instant lookback) the raw series' last sample before then stands in, looked up at 5m steps:
# while Prometheus is down nothing is scraped either, so that is the sample the record would have held. At 60s
# scrapes that is 43 samples per series and evaluation instead of 140, at 15s scrapes 103 instead of 560.
TILE_LOOKBACK: Final = 900.0  # the `15m` of schema.RECORD_COUNTER_LAST
TILE_SEEN: Final = 3600.0
TILE_SEEN_STEP: Final = BASE_WINDOW  # within the instant lookback (5m), so the steps cover the hour


_MATCHER: Final = re.compile(r'(\w+)(=~|!=|!~|=)"((?:[^"\\]|\\.)*)"')


def _narrower(raw: str, other: str) -> bool:
    """Whether selector `raw` picks a strict subset of `other`'s series: the same metric, and every matcher of
    `other` among `raw`'s."""
    name, _, inner = raw.partition("{")
    other_name, _, other_inner = other.partition("{")
    mine, theirs = set(_MATCHER.findall(inner)), set(_MATCHER.findall(other_inner))
    return name == other_name and raw != other and theirs < mine


class Tiles:
    """Builds the 5m tiles' per-series deltas and remembers the raw counters they read, for the counter record."""

    def __init__(self, spec: Spec) -> None:
        self.service = spec.service
        self.raws: dict[str, queries.RawTerm] = {}

    def _recorded(self, raw: str) -> str:
        name, brace, inner = raw.partition("{")
        own = [eq(schema.RULE_LABEL_COUNTER_SERVICE, self.service), eq(schema.RULE_LABEL_COUNTER, name)]
        inner = inner[:-1] if brace else ""
        head = selector(schema.RECORD_COUNTER_LAST, own)
        return f"{head[:-1]},{inner}}}" if inner else head

    def delta(self, term: queries.RawTerm) -> str:
        """The per-series, reset-aware sample delta of a counter's raw term over the last BASE_WINDOW. The counter
        record holds exactly the term's series and every branch joins with it, so the raw reads use its `lookup`."""
        self.raws.setdefault(term.selector, term)
        base = prom_duration(BASE_WINDOW)
        raw = term.lookup or term.selector
        # The record holds only the series of `term.selector`; within it the class label (with the scope) already
        # tells one term's series from another's, so its reads match without the model-set alternation too.
        cur = self._recorded(raw)
        own = f"ignoring ({schema.RULE_LABEL_COUNTER_SERVICE}, {schema.RULE_LABEL_COUNTER})"
        step = prom_duration(TILE_SEEN_STEP)
        # 5m ago as recorded then; where nothing was recorded then (Prometheus itself was down), the raw series'
        # last sample before that, looked up at 5m steps over TILE_LOOKBACK, as the recorded value would have been.
        fallback = f"last_over_time({raw}[{prom_duration(TILE_LOOKBACK)}:{step}] offset {base})"
        prev = f"({cur} offset {base} or {own} {fallback})"
        seen = f"last_over_time({raw}[{prom_duration(TILE_SEEN)}:{step}] offset {base})"
        reset = f"{cur} + {own} clamp_min(max_over_time({raw}[{base}]) - {own} {prev}, 0)"
        # Every branch carries the raw series' labels only (`ignoring` drops the record's own two in arithmetic,
        # `sum without` after `unless`), so `or` keeps the first branch that applies and never adds two.
        labels = f"{schema.RULE_LABEL_COUNTER_SERVICE}, {schema.RULE_LABEL_COUNTER}"
        new = f"sum without ({labels}) ({cur} unless {own} {seen})"
        return f"({cur} - {own} {prev}) >= 0\n  or\n  ({reset})\n  or\n  {new}"

    def counter_rule(self) -> RecordingRule:
        """The last sample over TILE_LOOKBACK of every raw counter series the tiles read, one term per selector
        that no other term's series include (TTFT's `stream="true"` failures are among E2E's), terms that differ
        only in their class merged (queries.merge_classes: every class's `+Inf` bucket in one)."""
        look = prom_duration(TILE_LOOKBACK)
        kept = [(raw, term) for raw, term in self.raws.items() if not any(_narrower(raw, other) for other in self.raws)]
        terms = [
            f'label_replace(last_over_time({raw}[{look}]), "{schema.RULE_LABEL_COUNTER}", '
            f'{promql.quote(raw.partition("{")[0])}, "", "")'
            for raw in (term.selector for _, term in queries.merge_classes(kept))
        ]
        labels = {schema.RULE_LABEL_COUNTER_SERVICE: self.service}
        return RecordingRule(schema.RECORD_COUNTER_LAST, _union(terms), labels)


# ==============================================================================================================
# Rule builders
# ==============================================================================================================
def _bucket_rate_rules(spec: Spec) -> list[RecordingRule]:
    q = queries.Queries(spec)
    group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, *q.replica_labels, schema.RULE_LABEL_ENGINE, "le"]
    rules: list[RecordingRule] = []
    for sli in Sli:
        # classes that read one histogram over the same models share one selector (queries.merge_classes); they
        # share `_histogram_sum`'s label names too, so the first class's stand for all
        raws = [(rc, term) for rc in spec.classes if sli in rc.slos for term in q.histogram_terms(rc, sli, "_bucket")]
        terms = [
            _histogram_sum(spec, rc, sli, f"rate({term.selector}[5m])", group)
            for rc, term in queries.merge_classes(raws)
        ]
        if terms:
            labels = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_SLO: sli.value}
            rules.append(RecordingRule(schema.RECORD_LATENCY_BUCKET_RATE, _union(terms), labels))
    return rules


def _own_histogram_rate(spec: Spec, rc: RequestClass) -> str | None:
    """Requests/s of a class whose SLOs all read their own histograms (the source's request counter may not
    exist): the `+Inf` bucket rate of a per-request SLI (not ITL, which counts tokens)."""
    if not rc.slos or any(slo.metric is None for slo in rc.slos.values()):
        return None
    sli = next((s for s in rc.slos if s is not Sli.ITL), next(iter(rc.slos)))
    rates = selector(
        schema.RECORD_LATENCY_BUCKET_RATE,
        [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value), INF_MATCHER],
    )
    return f"sum by ({schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS}) ({rates})"


def _request_rate_rules(spec: Spec) -> list[RecordingRule]:
    metrics = spec.metrics
    labels = {schema.RULE_LABEL_SERVICE: spec.service}
    own = {rc.name: _own_histogram_rate(spec, rc) for rc in spec.classes}
    if any(own.values()):
        terms = []
        for rc in spec.classes:
            term = own[rc.name]
            if term is None:
                group = [schema.RULE_LABEL_MODEL] + ([schema.RULE_LABEL_CLASS] if metrics.class_label else [])
                for raw in _raws(spec, metrics.requests_finished, rc.models, rc):
                    terms.append(_with_class(spec, rc, _aggregate(spec, "sum", f"rate({raw}[5m])", group)))
            else:
                terms.append(term)
        return [RecordingRule(schema.RECORD_REQUEST_RATE, _union(terms), labels)]
    if metrics.class_label is not None:
        classes = [one_of(metrics.class_label, [c.name for c in spec.classes])]
        keys = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS]
        terms = [
            _aggregate(spec, "sum", f"rate({raw}[5m])", keys)
            for raw in _raws(spec, metrics.requests_finished, extra=classes)
        ]
        return [RecordingRule(schema.RECORD_REQUEST_RATE, _union(terms), labels)]
    terms = []
    for rc in spec.classes:
        for raw in _raws(spec, metrics.requests_finished, rc.models):
            rate = _aggregate(spec, "sum", f"rate({raw}[5m])", [schema.RULE_LABEL_MODEL])
            terms.append(_with_class(spec, rc, rate))
    return [RecordingRule(schema.RECORD_REQUEST_RATE, _union(terms), labels)]


def _quantile_rules(spec: Spec) -> list[RecordingRule]:
    quantiles = set(DASHBOARD_QUANTILES)
    for rc in spec.classes:
        for slo in rc.slos.values():
            for tier in ("target", "acceptable", "critical"):
                quantiles.update(PERCENTILES[p] for p in slo.tiers.tier(tier))
    # Histograms in another unit than seconds (unit: ms) get their own rules, scaled back to seconds.
    scaled = [
        (rc, sli, spec.histogram(rc, sli).scale)
        for rc in spec.classes
        for sli in rc.slos
        if spec.histogram(rc, sli).scale != 1.0
    ]
    parts: list[tuple[list[Matcher], float]] = [([_service(spec)], 1.0)]
    for rc, sli, scale in scaled:
        parts.append(
            ([_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, sli.value)], scale)
        )
    others = " or ".join(
        f"group by ({schema.RULE_LABEL_CLASS}, {schema.RULE_LABEL_SLO}) "
        f"({selector(schema.RECORD_LATENCY_BUCKET_RATE, matchers)})"
        for matchers, _ in parts[1:]
    )
    # Per model and class only: the dashboards compute per-engine quantiles at query time from the bucket rates,
    # and no alert reads them, so recording them would cost a histogram aggregation per quantile at every evaluation.
    rules: list[RecordingRule] = []
    keys = list(SLO_LABELS)
    on = f"on ({', '.join(keys)})"
    for q in sorted(quantiles):
        exprs = []
        for matchers, scale in parts:
            rates = selector(schema.RECORD_LATENCY_BUCKET_RATE, matchers)
            totals = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, INF_MATCHER])
            # Only where the window saw requests: histogram_quantile of all-zero buckets is NaN.
            expr = (
                f"histogram_quantile({number(q)}, sum {promql.by([*keys, 'le'])} ({rates}) "
                f"and {on} (sum {promql.by(keys)} ({totals}) > 0))"
            )
            if scale != 1.0:
                expr = f"{expr} * {number(scale)}"
            elif others:
                expr = f"({expr}\nunless on ({schema.RULE_LABEL_CLASS}, {schema.RULE_LABEL_SLO}) ({others}))"
            exprs.append(expr)
        rules.append(RecordingRule(schema.RECORD_LATENCY_QUANTILE, _union(exprs), {"quantile": number(q)}))
    return rules


def _constant(record: str, labels: dict[str, str], value: float) -> RecordingRule:
    return RecordingRule(record, f"vector({number(value)})", labels)


def _objective_rules(spec: Spec) -> list[RecordingRule]:
    """Each objective's target ratio, per class and SLI: every model of the class shares it."""
    rules = []
    for rc, sli in _objective_slos(spec):
        objective = rc.slos[sli].objective
        assert objective is not None
        labels = {
            schema.RULE_LABEL_SERVICE: spec.service,
            schema.RULE_LABEL_CLASS: rc.name,
            schema.RULE_LABEL_SLO: sli.value,
        }
        rules.append(_constant(schema.RECORD_OBJECTIVE, labels, objective.target_ratio))
    return rules


def parameter_rules(spec: Spec) -> list[RecordingRule]:
    """The alerts' per-SLO parameters and per-model facts as constant series (see alerts.py): objectives, burn
    factors per tier, consistency limits, each model's --max-num-seqs and whether a class uses it."""
    rules = _objective_rules(spec)
    rules += [
        _constant(schema.RECORD_BURN_THRESHOLD, labels, factor) for labels, factor in alerts.burn_thresholds(spec)
    ]
    rules += [_constant(schema.RECORD_CONSISTENCY_LIMIT, labels, limit)
              for labels, limit in alerts.consistency_limits(spec)]  # fmt: skip
    rules += [_constant(schema.RECORD_BUCKET_BOUND, labels, bound) for labels, bound in bucket_bounds(spec)]
    rules += [_constant(schema.RECORD_MAX_NUM_SEQS, labels, seqs) for labels, seqs in model_facts(spec)]
    return rules


def model_facts(spec: Spec) -> list[tuple[dict[str, str], int]]:
    """Each model's one constant series: its --max-num-seqs, labelled `served` ("true" when a class uses it).

    One series per model, not one per fact: every rule is a query on every evaluation, and these are the only
    parameter rules whose count grows with the fleet."""
    served = set(alerts.served_models(spec))
    return [({schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model.name,
              schema.RULE_LABEL_SERVED: "true" if model.name in served else "false"}, model.max_num_seqs)
            for model in spec.models]  # fmt: skip


# ==============================================================================================================
# Requests that ended before their first token: in no latency histogram, so added to the total events (never the
# good ones) of their class's TTFT and E2E SLIs, from the failure counter on the side the SLO's histogram is measured
# at (frontend or engine), so no request is counted twice. A missing counter leaves the total as it was.
# ==============================================================================================================
def _on_selector(read: Callable[[str], str]) -> Callable[[queries.RawTerm], str]:
    """A reader of raw selectors as a reader of raw terms (their exact selector)."""
    return lambda term: read(term.selector)


def failure_terms(spec: Spec, rc: RequestClass, sli: Sli, delta: Callable[[queries.RawTerm], str]) -> list[str]:
    """`delta(raw)` summed per model and class (slo written on) over the failure counter one SLO reads; empty when
    the SLO reads a histogram of its own (`metric:`) or the source counts no failures for this SLI."""
    return [failure_sum(spec, rc, sli, delta(term)) for term in failure_raw_terms(spec, rc, sli)]


def failure_raw_terms(spec: Spec, rc: RequestClass, sli: Sli) -> list[queries.RawTerm]:
    """The raw terms of the failure counter one SLO reads (see failure_terms); empty where it reads none."""
    slo = rc.slos[sli]
    metrics = spec.metrics
    metric = None if slo.metric is not None else metrics.failed_metric(sli, slo.measured_at)
    if metric is None:
        return []
    # Only streams are TTFT events at the frontend, so only their failures count against its TTFT.
    stream = metric == metrics.frontend_failed and sli is Sli.TTFT
    extra = [eq(schema.FRONTEND_STREAM_LABEL, "true")] if stream else []
    return queries.Queries(spec).raw_terms(metric, rc.models, rc, extra)


def failure_sum(spec: Spec, rc: RequestClass, sli: Sli, inner: str) -> str:
    """`inner` (per-series failures) summed per model and class, the class and slo written on."""
    group = [schema.RULE_LABEL_MODEL] + ([schema.RULE_LABEL_CLASS] if spec.metrics.class_label else [])
    return _with_slo(sli, _with_class(spec, rc, _aggregate(spec, "sum", inner, group)))


def with_failures(events: Sequence[str], failures: Sequence[str]) -> str:
    """Histogram events plus failures, present whenever either is (each side marked so `or` keeps both)."""
    if not failures:
        return _union(events)
    sides = [
        f'label_replace(\n{_union(terms)}\n, "{schema.RULE_LABEL_TILE}", "{mark}", "", "")'
        for terms, mark in ((events, "events"), (failures, "failed"))
        if terms
    ]
    return f"sum without ({schema.RULE_LABEL_TILE}) (\n" + "\nor\n".join(sides) + "\n)"


def _threshold(rc: RequestClass, sli: Sli) -> float:
    objective = rc.slos[sli].objective
    assert objective is not None
    return objective.threshold


def _base_window_rules(spec: Spec) -> list[RecordingRule]:
    """5m total and good events per SLO: sums of reset-aware sample deltas of the raw threshold and +Inf buckets,
    and of the failure counter (total only); first the per-series counter record the tiles read."""
    totals: list[str] = []
    goods: list[str] = []
    group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS]
    tiles = Tiles(spec)
    q = queries.Queries(spec)
    merge = queries.merge_classes
    # Per SLI, the classes' terms that differ only in the class are one term (every class's +Inf bucket, the
    # classes sharing a threshold's bucket, their failures): the sums split the classes again by their label.
    for sli in Sli:
        slos = [rc for rc, s in _objective_slos(spec) if s is sli]
        if not slos:
            continue
        inf = merge((rc, term) for rc in slos for term in q.histogram_terms(rc, sli, "_bucket", [INF_MATCHER]))
        events = [_with_slo(sli, _histogram_sum(spec, rc, sli, tiles.delta(term), group)) for rc, term in inf]
        failed = merge((rc, term) for rc in slos for term in failure_raw_terms(spec, rc, sli))
        totals.append(with_failures(events, [failure_sum(spec, rc, sli, tiles.delta(term)) for rc, term in failed]))
        good = merge(
            (rc, term)
            for rc in slos
            for term in q.histogram_terms(rc, sli, "_bucket", [threshold_le(spec, rc, sli, _threshold(rc, sli))])
        )
        goods += [_with_slo(sli, _histogram_sum(spec, rc, sli, tiles.delta(term), group)) for rc, term in good]
    labels = {schema.RULE_LABEL_SERVICE: spec.service}
    return [
        tiles.counter_rule(),
        RecordingRule(schema.record_sli_total(w(BASE_WINDOW)), _union(totals), labels),
        RecordingRule(schema.record_sli_good(w(BASE_WINDOW)), _union(goods), labels),
    ]


def _tiled(name: Callable[[str], str], spec: Spec, plan: WindowPlan) -> str:
    """Sum of the plan's blocks, present whenever any block is (a missing newest block never hides the window).

    Each block is marked with its own `slokit_tile` value so `or` keeps every one, then summed away.
    """
    terms = []
    for index, block in enumerate(plan.blocks):
        recorded = selector(name(w(block.window)), [_service(spec)])
        if block.offset > 0:
            recorded += f" offset {prom_duration(block.offset)}"
        terms.append(f'label_replace({recorded}, "{schema.RULE_LABEL_TILE}", "{index}", "", "")')
    return f"sum without ({schema.RULE_LABEL_TILE}) (\n  " + "\n  or ".join(terms) + "\n)"


def _raw_window(name: Callable[[str], str], spec: Spec, plan: WindowPlan) -> RecordingRule:
    """A window that cannot be tiled from recorded ones: read the raw counters (costly; only for odd windows)."""
    terms = []
    group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS]
    for rc, sli in _objective_slos(spec):
        objective = rc.slos[sli].objective
        assert objective is not None
        total = name is schema.record_sli_total
        matcher = INF_MATCHER if total else threshold_le(spec, rc, sli, objective.threshold)
        increase = _increase_over(prom_duration(plan.window))
        events = [
            _with_slo(sli, _histogram_sum(spec, rc, sli, increase(raw), group))
            for raw in _histogram_raws(spec, rc, sli, "_bucket", [matcher])
        ]
        terms.append(with_failures(events, failure_terms(spec, rc, sli, _on_selector(increase)) if total else []))
    return RecordingRule(name(w(plan.window)), _union(terms), {schema.RULE_LABEL_SERVICE: spec.service})


def _vm_raw(name: Callable[[str], str], spec: Spec, window: float, only: tuple[str, Sli] | None) -> str:
    """vmalert: events of `window` per SLO from the raw buckets (`increase()`), with the service label."""
    terms = []
    group = [schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS]
    for rc, sli in _objective_slos(spec):
        if only is not None and only != (rc.name, sli):
            continue
        objective = rc.slos[sli].objective
        assert objective is not None
        total = name is schema.record_sli_total
        matcher = INF_MATCHER if total else threshold_le(spec, rc, sli, objective.threshold)
        increase = _increase_over(prom_duration(window))
        events = [
            _with_slo(sli, _histogram_sum(spec, rc, sli, increase(raw), group))
            for raw in _histogram_raws(spec, rc, sli, "_bucket", [matcher])
        ]
        # Requests that failed before their first token are bad events in the total, as in the Prometheus rules.
        terms.append(with_failures(events, failure_terms(spec, rc, sli, _on_selector(increase)) if total else []))
    service = promql.quote(spec.service)
    return f'label_replace(\n  {_union(terms)},\n  "{schema.RULE_LABEL_SERVICE}", {service}, "", ""\n)'


def vm_window(
    name: Callable[[str], str],
    spec: Spec,
    plans: dict[float, WindowPlan],
    window: float,
    only: tuple[str, Sli] | None = None,
) -> str:
    """vmalert: events of `window` from the raw buckets and settled records only (see vm_head); `only` keeps one
    (class, SLI)."""
    raw_window, blocks = vm_head(plans, window)
    raw = _vm_raw(name, spec, raw_window, only)
    if not blocks:
        return raw
    matchers = [_service(spec)]
    if only is not None:
        matchers += [eq(schema.RULE_LABEL_CLASS, only[0]), eq(schema.RULE_LABEL_SLO, only[1].value)]
    terms = [f'label_replace({raw}, "{schema.RULE_LABEL_TILE}", "0", "", "")']
    for index, block in enumerate(blocks, 1):
        recorded = selector(name(w(block.window)), matchers) + promql.offset_suffix(
            block.offset, prom_duration(block.offset)
        )
        terms.append(f'label_replace({recorded}, "{schema.RULE_LABEL_TILE}", "{index}", "", "")')
    return f"sum without ({schema.RULE_LABEL_TILE}) (\n  " + "\n  or ".join(terms) + "\n)"


RATIO_OF: Final = "clamp_min({total} - {good}, 0) / ({total} > 0) or {total} * 0"


def vm_with(parts: Sequence[tuple[str, str]], expr: str) -> str:
    """A MetricsQL `WITH (name = expr, ...) expr` template."""
    inner = ",\n".join(f"{name} = (\n{value}\n)" for name, value in parts)
    return f"WITH (\n{inner}\n)\n{expr}"


def vm_burn_parts(
    spec: Spec, plans: dict[float, WindowPlan], window: float, prefix: str, only: tuple[str, Sli] | None = None
) -> list[tuple[str, str]]:
    """The `WITH` templates `<prefix>total` and `<prefix>good` of one window."""
    return [
        (f"{prefix}total", vm_window(schema.record_sli_total, spec, plans, window, only)),
        (f"{prefix}good", vm_window(schema.record_sli_good, spec, plans, window, only)),
    ]


def vm_ratio(prefix: str) -> str:
    """The error ratio of the `<prefix>total`/`<prefix>good` templates (0 without events)."""
    return RATIO_OF.format(total=f"{prefix}total", good=f"{prefix}good")


def _vm_window_rules(spec: Spec, plans: dict[float, WindowPlan], plan: WindowPlan) -> list[RecordingRule]:
    window = w(plan.window)
    labels = {schema.RULE_LABEL_SERVICE: spec.service}
    total = vm_window(schema.record_sli_total, spec, plans, plan.window)
    good = vm_window(schema.record_sli_good, spec, plans, plan.window)
    parts = vm_burn_parts(spec, plans, plan.window, "")
    objective = selector(schema.RECORD_OBJECTIVE, [_service(spec)])
    burn = f"({vm_ratio('')})\n/ {ON_OBJECTIVE} (1 - {objective})"
    return [
        RecordingRule(schema.record_sli_total(window), total, labels),
        RecordingRule(schema.record_sli_good(window), good, labels),
        RecordingRule(schema.record_error_ratio(window), vm_with(parts, vm_ratio("")), labels),
        RecordingRule(schema.record_burn_rate(window), vm_with(parts, burn), labels),
    ]


def _vm_budget_rule(spec: Spec, plans: dict[float, WindowPlan]) -> RecordingRule:
    objective = selector(schema.RECORD_OBJECTIVE, [_service(spec)])
    burn = f"1 - ({vm_ratio('')})\n/ {ON_OBJECTIVE} (1 - {objective})"
    parts = vm_burn_parts(spec, plans, spec.window, "")
    return RecordingRule(
        schema.RECORD_ERROR_BUDGET_REMAINING, vm_with(parts, burn), {schema.RULE_LABEL_SERVICE: spec.service}
    )


def _increase_over(window: str) -> Callable[[str], str]:
    return lambda raw: f"increase({raw}[{window}])"


def _window_rules(spec: Spec, plan: WindowPlan) -> list[RecordingRule]:
    rules: list[RecordingRule] = []
    window = w(plan.window)
    if plan.window == BASE_WINDOW:
        rules.extend(_base_window_rules(spec))
    elif plan.blocks:
        for name in (schema.record_sli_total, schema.record_sli_good):
            rules.append(RecordingRule(name(window), _tiled(name, spec, plan)))
    else:
        rules.append(_raw_window(schema.record_sli_total, spec, plan))
        rules.append(_raw_window(schema.record_sli_good, spec, plan))
    total = selector(schema.record_sli_total(window), [_service(spec)])
    good = selector(schema.record_sli_good(window), [_service(spec)])
    # 0 when the window saw no events; never NaN or +Inf, so nothing downstream is poisoned. No good events
    # recorded (only failures, no histogram series): every event is bad.
    ratio = f"clamp_min({total} - ({good} or {total} * 0), 0) / ({total} > 0)\nor\n{total} * 0"
    rules.append(RecordingRule(schema.record_error_ratio(window), ratio))
    objective = selector(schema.RECORD_OBJECTIVE, [_service(spec)])
    burn = f"{selector(schema.record_error_ratio(window), [_service(spec)])}\n/ {ON_OBJECTIVE} (1 - {objective})"
    rules.append(RecordingRule(schema.record_burn_rate(window), burn))
    return rules


def _budget_rule(spec: Spec) -> RecordingRule:
    burn = selector(schema.record_burn_rate(w(spec.window)), [_service(spec)])
    return RecordingRule(schema.RECORD_ERROR_BUDGET_REMAINING, f"1 - {burn}")


def _baseline_rule(spec: Spec) -> RecordingRule:
    baseline = spec.alerting.baseline
    quantile = selector(schema.RECORD_LATENCY_QUANTILE, [_service(spec), eq("quantile", number(BASELINE_QUANTILE))])
    rate = selector(schema.RECORD_REQUEST_RATE, [_service(spec)])
    on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS})"

    def at(offset: float) -> str:
        # The p99 of that 5m, only if it had enough traffic to mean something.
        dur = prom_duration(offset)
        guard = f"({rate} offset {dur} >= {number(baseline.min_rps)})"
        return f"max without (quantile) ({quantile} offset {dur}) and {on} {guard}"

    if baseline.median_days < 2:
        return RecordingRule(schema.RECORD_P99_BASELINE, at(baseline.offset))
    days = [
        f'label_replace({at(baseline.offset * day)}, "baseline_day", "{day}", "", "")'
        for day in range(1, baseline.median_days + 1)
    ]
    expr = "quantile without (baseline_day) (0.5,\n  " + "\n  or ".join(days) + "\n)"
    return RecordingRule(schema.RECORD_P99_BASELINE, expr)


def _consistency_matchers(spec: Spec) -> list[Matcher]:
    """The bucket-rate series of every consistency SLO: its classes and SLIs (a pair outside the spec's SLOs that
    these also pick is dropped by the join with the bound or limit parameters)."""
    slos = consistency_slos(spec)
    return [
        _service(spec),
        one_of(schema.RULE_LABEL_CLASS, sorted({rc.name for rc, _ in slos})),
        one_of(schema.RULE_LABEL_SLO, sorted({sli.value for _, sli in slos})),
    ]


def _edge(spec: Spec, q: float, *, upper: bool) -> str:
    """The lower (or upper) edge of the bucket holding quantile `q`, per SLO, from bucket counts only.

    `p_q > b` exactly when fewer than q of the requests took b or less. The lower edge is the largest boundary with
    that share below q (0 if none), the upper edge the smallest boundary with the share at or above q. The share of
    every bucket is joined with its boundary in seconds (schema.RECORD_BUCKET_BOUND), so one term covers every
    boundary of every class: the term count does not grow with the buckets or the classes.
    """
    matchers = _consistency_matchers(spec)
    by = promql.by(SLO_LABELS)
    by_le = promql.by([*SLO_LABELS, "le"])
    total = f"sum {by} ({selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, INF_MATCHER])})"
    buckets = selector(schema.RECORD_LATENCY_BUCKET_RATE, matchers)
    share = f"sum {by_le} ({buckets}) / on ({', '.join(SLO_LABELS)}) group_left () {total}"
    test = f">= {number(q)}" if upper else f"< {number(q)}"
    on_le = f"on ({', '.join(BOUND_LABELS)}) group_left ()"
    bound = selector(schema.RECORD_BUCKET_BOUND, [_service(spec)])
    edge = f"{'min' if upper else 'max'} {by} (({share} {test}) * 0 + {on_le} {bound})"
    if upper:
        return f"(\n    {edge}\n  )"
    # every request under the lowest boundary: the lower edge is 0
    return f"(\n    {edge}\n  or\n    ({total} > 0) * 0\n  )"


def consistency_slos(spec: Spec) -> list[tuple[RequestClass, Sli]]:
    """The SLOs with a consistency objective, in spec order."""
    return [(rc, sli) for rc in spec.classes for sli, slo in rc.slos.items() if slo.consistency is not None]


def bucket_bounds(spec: Spec) -> list[tuple[dict[str, str], float]]:
    """Every boundary of the consistency SLOs' histograms as (labels, seconds), once per `le` spelling.

    An `le` value names the same number in every histogram, so the series are keyed by `le` alone: one per distinct
    spelling however many classes share the buckets (they are constant rules, and each rule is a query on every
    evaluation)."""
    bounds: dict[str, float] = {}
    for rc, sli in consistency_slos(spec):
        hist = spec.histogram(rc, sli)
        for bound in spec.histogram_buckets(rc, sli):
            for spelling in promql.le_spellings(hist.le_for(bound)):
                bounds.setdefault(spelling, bound)
    return [({schema.RULE_LABEL_SERVICE: spec.service, "le": spelling}, bound) for spelling, bound in bounds.items()]


def _consistency_rules(spec: Spec) -> list[RecordingRule]:
    """p99/p50: interpolated (for dashboards), and bounded by bucket edges (for the alert).

    The true p99 lies in (lower edge, upper edge] of its bucket, and so does p50, so p99/p50 lies between
    lower(p99)/upper(p50) and upper(p99)/lower(p50). Only the lower bound above the limit proves inconsistency.
    Both need alerting.min_requests requests in the 5m window. Each is one term for every consistency SLO.
    """
    if not consistency_slos(spec):
        return []
    on = f"on ({', '.join(SLO_LABELS)})"
    matchers = _consistency_matchers(spec)
    p99 = selector(schema.RECORD_LATENCY_QUANTILE, [*matchers, eq("quantile", "0.99")])
    p50 = selector(schema.RECORD_LATENCY_QUANTILE, [*matchers, eq("quantile", "0.5")])
    limit = selector(schema.RECORD_CONSISTENCY_LIMIT, [_service(spec)])
    ratio = (
        f"max without (quantile) ({p99}) / max without (quantile) ({p50} > 0)\n"
        f"and on ({', '.join(SLO_LIMIT_LABELS)}) {limit}"
    )
    guard = alerts.traffic_guard(spec, matchers)
    lower = f"{_edge(spec, 0.99, upper=False)}\n/ {on}\n{_edge(spec, 0.5, upper=True)}\nand {on}\n{guard}"
    upper = f"{_edge(spec, 0.99, upper=True)}\n/ {on}\n({_edge(spec, 0.5, upper=False)} > 0)\nand {on}\n{guard}"
    return [
        RecordingRule(schema.RECORD_CONSISTENCY, ratio),
        RecordingRule(schema.RECORD_CONSISTENCY_LOWER, lower),
        RecordingRule(schema.RECORD_CONSISTENCY_UPPER, upper),
    ]


def _scale_out_rules(spec: Spec) -> list[RecordingRule]:
    """Scale-out pressure per model and class from a bucket count (no interpolation); 0 under the traffic guard.

    The share of TTFTs above the scale-out boundary (fraction_of_slo x the TTFT threshold, or the nearest vLLM
    boundary at or below it) is compared with the share the objective allows above its threshold; the record is
    fraction_of_slo x their quotient, so it crosses fraction_of_slo exactly at the trigger and autoscalers keep
    targeting that fraction.
    """
    terms = []
    on = f"on ({', '.join(SLO_LABELS)})"
    fraction = spec.alerting.scale_out.fraction_of_slo
    for rc in spec.scale_out_classes():
        slo = rc.slos[Sli.TTFT]
        assert slo.objective is not None
        base = [_service(spec), eq(schema.RULE_LABEL_CLASS, rc.name), eq(schema.RULE_LABEL_SLO, Sli.TTFT.value)]
        boundary = alerts.scale_out_boundary(spec, rc)
        within = alerts.fraction_within(base, boundary, spec.histogram(rc, Sli.TTFT))
        scale = number(round(fraction / slo.objective.error_budget, 9))
        idle = selector(schema.record_sli_total(w(BASE_WINDOW)), base)
        terms.append(
            f"(\n  (1 - (\n{within}\n  )) * {scale}\n  and {on}\n  {alerts.traffic_guard(spec, base)}\n"
            f"  or {idle} * 0\n)"
        )
    return [RecordingRule(schema.RECORD_SCALE_OUT, _union(terms))] if terms else []


def _engine_rules(spec: Spec) -> list[RecordingRule]:
    """Per replica (the spec's replica labels plus `engine`): never two pods summed under one `engine="0"`."""
    metrics = spec.metrics
    keys = list(queries.Queries(spec).engine_keys)
    labels = {schema.RULE_LABEL_SERVICE: spec.service}

    def rule(record: str, op: str, metric: str, wrap: str) -> RecordingRule:
        terms = [_aggregate(spec, op, wrap.format(raw), keys) for raw in _raws(spec, metric)]
        return RecordingRule(record, _union(terms), labels)

    signals = [
        (schema.RECORD_QUEUE_WAITING, "max", metrics.requests_waiting, "max_over_time({}[1m])"),
        (schema.RECORD_QUEUE_RUNNING, "max", metrics.requests_running, "max_over_time({}[1m])"),
        (schema.RECORD_KV_CACHE_USAGE, "max", metrics.kv_cache_usage, "{}"),
        (schema.RECORD_PREEMPTIONS, "sum", metrics.preemptions, "rate({}[5m])"),
        (schema.RECORD_DECODE_TOKENS, "sum", metrics.generation_tokens, "rate({}[5m])"),
    ]
    # A signal the source does not export (TGI: KV cache, preemptions) is not recorded.
    return [rule(record, op, metric, wrap) for record, op, metric, wrap in signals if metric is not None]


def _expected_decode_rules(spec: Spec) -> list[RecordingRule]:
    """The planner's expected decode tokens/s per engine, per model, when the planner can tell."""
    rules = []
    for model in spec.models:
        value = expected_decode_tokens_per_second(spec, model)
        if value is None:
            continue
        labels = {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model.name}
        rules.append(RecordingRule(schema.RECORD_EXPECTED_DECODE_TOKENS, f"vector({number(round(value, 1))})", labels))
    return rules


# ==============================================================================================================
# Groups and files
# ==============================================================================================================
def group_name(spec: Spec, part: str) -> str:
    """`slokit-<service>-<part>`."""
    return f"slokit-{spec.service}-{part}"


def recording_groups(spec: Spec, engine: Engine = DEFAULT) -> list[RuleGroup]:
    """The recording-rule groups, in dependency order inside each group."""
    # Bucket rates and what reads them (quantiles, tiers' inputs, consistency, scale-out) every minute: the bucket
    # rates read every bucket of every histogram, the costliest rule by far, and nothing they feed needs 30s
    # resolution (their alerts hold for 5 minutes or more).
    latency: list[RecordingRule] = [
        *_bucket_rate_rules(spec),
        *_request_rate_rules(spec),
        *_quantile_rules(spec),
    ]
    short: list[RecordingRule] = []
    medium: list[RecordingRule] = []
    long: list[RecordingRule] = []
    target = {SHORT_INTERVAL: short, MEDIUM_INTERVAL: medium, LONG_INTERVAL: long}
    if _objective_slos(spec):
        plans = {p.window: p for p in window_plans(spec)}
        for plan in plans.values():
            if engine is Engine.VICTORIAMETRICS:
                target[plan.interval].extend(_vm_window_rules(spec, plans, plan))
            else:
                target[plan.interval].extend(_window_rules(spec, plan))
        budget = _vm_budget_rule(spec, plans) if engine is Engine.VICTORIAMETRICS else _budget_rule(spec)
        target[window_interval(spec.window)].append(budget)
    latency.extend(_consistency_rules(spec))
    latency.extend(_scale_out_rules(spec))
    engine_rules = [*_engine_rules(spec), *_expected_decode_rules(spec)]
    baseline = [_baseline_rule(spec)]
    fields = group_fields(engine)
    source = tuple(RecordingRule(record, expr, labels) for record, expr, labels in spec.source.recording_rules(spec))
    groups = [
        RuleGroup(group_name(spec, "source"), prom_duration(SHORT_INTERVAL), source, fields),
        RuleGroup(group_name(spec, "parameters"), prom_duration(MEDIUM_INTERVAL), tuple(parameter_rules(spec)), fields),
        RuleGroup(group_name(spec, "latency"), prom_duration(MEDIUM_INTERVAL), tuple(latency), fields),
        RuleGroup(group_name(spec, "sli-short"), prom_duration(SHORT_INTERVAL), tuple(short), fields),
        RuleGroup(group_name(spec, "sli-medium"), prom_duration(MEDIUM_INTERVAL), tuple(medium), fields),
        RuleGroup(group_name(spec, "sli-long"), prom_duration(LONG_INTERVAL), tuple(long), fields),
        RuleGroup(group_name(spec, "baseline"), prom_duration(MEDIUM_INTERVAL), tuple(baseline), fields),
        RuleGroup(group_name(spec, "engine"), prom_duration(SHORT_INTERVAL), tuple(engine_rules), fields),
    ]
    return [g for g in groups if g.rules]


def _vm_burn_alert(spec: Spec, plans: dict[float, WindowPlan], rule: AlertRule) -> AlertRule:
    """A burn-rate alert that computes both burn rates from raw buckets and settled records (vmalert), over every
    objective at once; the objectives and burn factors are constant parameter series, so reading them one
    evaluation late changes nothing."""
    long, short = float(rule.condition["long"]), float(rule.condition["short"])
    factor_labels = [
        _service(spec),
        eq(schema.RULE_LABEL_LONG, rule.labels[schema.RULE_LABEL_LONG]),
        eq(schema.RULE_LABEL_SHORT, rule.labels[schema.RULE_LABEL_SHORT]),
        eq(schema.ALERT_LABEL_SEVERITY, rule.labels[schema.ALERT_LABEL_SEVERITY]),
    ]
    parts = [
        *vm_burn_parts(spec, plans, long, "long_"),
        *vm_burn_parts(spec, plans, short, "short_"),
        ("objective", selector(schema.RECORD_OBJECTIVE, [_service(spec)])),
        ("factor", selector(schema.RECORD_BURN_THRESHOLD, factor_labels)),
    ]
    on = f"on ({', '.join(SLO_LABELS)})"
    expr = (
        f"({vm_ratio('long_')}) / {ON_OBJECTIVE} (1 - objective) > {ON_OBJECTIVE} factor\n"
        f"and {on}\n({vm_ratio('short_')}) / {ON_OBJECTIVE} (1 - objective) > {ON_OBJECTIVE} factor"
    )
    if "min_requests" in rule.condition:
        parts.append(("requests", vm_window(schema.record_sli_total, spec, plans, alerts.FAST_SHORT_WINDOW)))
        expr += f"\nand {on}\nrequests >= {spec.alerting.min_requests}"
    return dataclasses.replace(rule, expr=vm_with(parts, expr))


def _for_engine(spec: Spec, rules: Sequence[AlertRule], engine: Engine) -> tuple[AlertRule, ...]:
    if engine is not Engine.VICTORIAMETRICS:
        return tuple(rules)
    plans = {p.window: p for p in window_plans(spec)}
    out = []
    for rule in rules:
        if rule.kind is AlertKind.BURN_RATE:
            rule = _vm_burn_alert(spec, plans, rule)
        out.append(dataclasses.replace(rule, keep_firing_for=""))  # vmalert 1.79 refuses keep_firing_for
    return tuple(out)


def rule_groups(spec: Spec, engine: Engine = DEFAULT, *, max_interval: float | None = None) -> list[RuleGroup]:
    """Every group of the service's rule file: the recording groups, then the alerts.

    `max_interval` (seconds) caps every group's evaluation interval (see `capped_intervals`); the committed files
    never set it.
    """
    groups = list(once(spec, "rule groups", engine, lambda: tuple(_build_rule_groups(spec, engine))))
    return groups if max_interval is None else capped_intervals(groups, max_interval)


# Alert groups by family: a distributed ruler (Thanos, Mimir) shards by group, so a fleet's alerts spread over
# several evaluators. Engine alerts come after the SLO pages they join with (`ALERTS`), so within one evaluation
# order (Prometheus evaluates groups concurrently; promtool in file order) a cause copy sees the page at once.
ALERT_GROUPS: Final = (
    ("alerts-burn", (AlertKind.BURN_RATE,)),
    ("alerts-latency", (AlertKind.TIER, AlertKind.BASELINE, AlertKind.SCALE_OUT, AlertKind.CONSISTENCY)),
    ("alerts-engine", (AlertKind.QUEUE_OVERLOAD, AlertKind.KV_CACHE)),
    ("alerts-absent", (AlertKind.ABSENT, AlertKind.EXPORTER_GONE)),
)


def _build_rule_groups(spec: Spec, engine: Engine) -> list[RuleGroup]:
    alert_rules = _for_engine(spec, alerts.alert_rules(spec), engine)
    groups = recording_groups(spec, engine)
    for part, kinds in ALERT_GROUPS:
        family = tuple(r for r in alert_rules if r.kind in kinds)
        if family:
            groups.append(
                RuleGroup(group_name(spec, part), prom_duration(SHORT_INTERVAL), family, group_fields(engine))
            )
    return groups


def capped_intervals(groups: Iterable[RuleGroup], max_interval: float) -> list[RuleGroup]:
    """The groups with every evaluation interval longer than `max_interval` seconds set to it.

    Production groups evaluate long windows every minute or two; `slokit demo` tells its story in minutes, so it
    evaluates everything often. Expressions and `for:` durations are untouched.
    """
    cap = prom_duration(max_interval)
    return [g if parse_duration(g.interval) <= max_interval else dataclasses.replace(g, interval=cap) for g in groups]


def rules_path(spec: Spec) -> str:
    """Where the service's rule file is written, relative to the output directory."""
    return f"rules/{spec.service}.rules.yaml"


def prometheus_rule(spec: Spec, groups: list[RuleGroup]) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule (monitoring.coreos.com/v1)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": f"slokit-{spec.service}",
            "labels": {
                "app.kubernetes.io/name": "slokit",
                "app.kubernetes.io/component": "slo-rules",
                "app.kubernetes.io/part-of": spec.service,
            },
        },
        "spec": {"groups": [g.to_data() for g in groups]},
    }


def vm_rule(spec: Spec, groups: list[RuleGroup]) -> dict[str, Any]:
    """The `--engine victoriametrics` groups as a VictoriaMetrics operator VMRule (operator.victoriametrics.com).

    Not a PrometheusRule: that CRD has no group `params`, so an apply would refuse or prune the `nocache` the vmalert
    timing needs, and a Prometheus selecting PrometheusRules would load MetricsQL it cannot evaluate. The VMRule
    type (api/operator/v1beta1/vmrule_types.go) takes the groups as vmalert reads them: name, interval, params, rules.
    """
    return {**prometheus_rule(spec, groups), "apiVersion": "operator.victoriametrics.com/v1beta1", "kind": "VMRule"}


def files(spec: Spec, engine: Engine = DEFAULT) -> dict[str, Any]:
    """The rule file and its Kubernetes object for one spec.

    Mimir's file is a `mimirtool rules load` file: its namespace on top. The object carries the same groups: a
    PrometheusRule (`exporters/<service>.prometheusrule.yaml`), or for vmalert a VMRule
    (`exporters/<service>.vmrule.yaml`, `vm_rule`).
    """
    groups = rule_groups(spec, engine)
    data: dict[str, Any] = {"groups": [g.to_data() for g in groups]}
    if engine is Engine.MIMIR:
        data = {"namespace": mimir_namespace(spec.service), **data}
    if engine is Engine.VICTORIAMETRICS:
        return {rules_path(spec): data, f"exporters/{spec.service}.vmrule.yaml": vm_rule(spec, groups)}
    return {
        rules_path(spec): data,
        f"exporters/{spec.service}.prometheusrule.yaml": prometheus_rule(spec, groups),
    }
