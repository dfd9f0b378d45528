"""Alerts: burn rates, tiers, baseline deviation, scale-out, engine overload, consistency and missing metrics.

Every alert follows the monitoring-mixin conventions: a `Slokit...` CamelCase name, a `severity` label with the
spec's page or ticket value, `service`, `slo`, `model`, `class` where they apply, the spec's extra labels, a static
`summary`, a `description` templated with the measured `{{ $value }}` and the threshold, and a `runbook_url` that
points at this rule's own runbook section. Alerts read recorded series only (see rules.py), so an alert evaluation
costs a handful of samples.

Every objective pages fast: the fastest page tier is adapted (shorter windows, the same error ratio capped at 90%)
when a total outage would not page within PAGE_WITHIN, e.g. the 13.44x page tier of a 90% objective over 28d, whose
error ratio would have to exceed 100%. Any other tier whose threshold cannot be reached is left out;
`skipped_burn_tiers` and `adapted_burn_tiers` list them so `validate`, the docs and the generated promtool tests can
say so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from slokit import schema
from slokit.generate import queries
from slokit.generate.model import AlertKind, AlertRule, Member, heading_anchor
from slokit.generate.once import once
from slokit.promql import INF_MATCHER, Matcher, eq, le_matcher, number, one_of, selector
from slokit.promql import quote as promql_quote
from slokit.promql import rename_label as rename
from slokit.schema import Sli
from slokit.spec import PERCENTILES, BurnRateWindow, RequestClass, Spec, TierCell
from slokit.units import format_duration, prom_duration

BASE_SECONDS: Final = 300.0  # the 5m window of bucket rates the tier and guard counts read
ABSENT_FOR: Final = 600.0  # missing metrics for 10 minutes: a scrape hiccup is not an alert
# Pages and tickets stay firing this long after their condition clears, so a restart or a scrape gap in the middle
# of an incident (the short windows read 0 while the data is missing) does not resolve and re-fire it.
KEEP_FIRING_FOR: Final = 600.0
SERVED_WITHIN: Final = 3600.0  # the exporter-gone page is for models that served traffic this recently

NAME_BURN: Final = "SlokitErrorBudgetBurn"
NAME_ACCEPTABLE: Final = "SlokitLatencyAboveAcceptable"
NAME_CRITICAL: Final = "SlokitLatencyAboveCritical"
NAME_TARGET: Final = "SlokitLatencyAboveTarget"  # only when `alerting.tiers` opts a target cell in
NAME_BASELINE: Final = "SlokitLatencyAboveBaseline"
NAME_SCALE_OUT: Final = "SlokitScaleOutNeeded"
NAME_QUEUE: Final = "SlokitEngineQueueFull"
NAME_KV_FULL: Final = "SlokitKVCacheNearFull"
NAME_PREEMPTING: Final = "SlokitEnginePreempting"
NAME_CONSISTENCY: Final = "SlokitLatencyInconsistent"
NAME_ABSENT: Final = "SlokitMetricsAbsent"
NAME_EXPORTER_GONE: Final = "SlokitExporterGone"

ENGINE_ALERTS: Final = (NAME_QUEUE, NAME_KV_FULL, NAME_PREEMPTING)
# Alerts that read a model's latency or request metrics: blind (and so inhibited) while its exporter is gone.
SLO_ALERTS: Final = (NAME_BURN, NAME_ACCEPTABLE, NAME_CRITICAL, NAME_TARGET, NAME_BASELINE, NAME_SCALE_OUT,
                     NAME_CONSISTENCY, NAME_ABSENT)  # fmt: skip

SUMMARIES: Final = {
    NAME_BURN: "Latency error budget is burning too fast.",
    NAME_ACCEPTABLE: "A latency percentile is worse than its acceptable tier.",
    NAME_CRITICAL: "A latency percentile is worse than its critical tier.",
    NAME_TARGET: "A latency percentile is worse than its target tier.",
    NAME_BASELINE: "p99 latency is far above the same hour's baseline.",
    NAME_SCALE_OUT: "Too many requests wait close to the time-to-first-token SLO; add capacity.",
    NAME_QUEUE: "Requests are queueing on an engine that is already full ({replica}).",
    NAME_KV_FULL: "An engine's KV cache is nearly full ({replica}).",
    NAME_PREEMPTING: "An engine is preempting requests ({replica}).",
    NAME_CONSISTENCY: "Batch latency is inconsistent: p99 is too far above p50.",
    NAME_ABSENT: "slokit cannot see a model's latency metrics.",
    NAME_EXPORTER_GONE: "A model that was serving traffic has lost every metric series: its SLO is blind.",
}
# Engine alerts name the replica: `{replica}` above becomes its labels, e.g. `{{ $labels.instance }} engine 0`.
REPLICA_SUMMARIES: Final = frozenset({NAME_QUEUE, NAME_KV_FULL, NAME_PREEMPTING})


# A total outage (every request bad) must page within this long (11m), for every objective, `for:` included; the
# rest of the 15 minutes an on-call team expects is left to scrapes, rate windows and rule evaluation.
PAGE_WITHIN: Final = 660.0
# An adapted page tier never asks for more than this share of bad requests (a total outage reaches it).
MAX_ERROR_RATIO: Final = 0.9
# Long windows an adapted fast page tier may shorten to (each is tiled from 5m records); longest first.
FAST_LONG_WINDOWS: Final = (1800.0, 900.0, 600.0, 300.0)
FAST_SHORT_WINDOW: Final = 300.0


@dataclass(frozen=True)
class BurnTier:
    """One burn-rate tier as generated for one objective: the spec's tier, adapted where it could not page fast.

    `threshold` is the error ratio both windows must exceed (factor x error budget); `skipped` tiers can never fire
    (the ratio would have to exceed 100%) and are left out; `adapted` says why a tier differs from the spec's.
    """

    request_class: str
    sli: Sli
    window: BurnRateWindow  # the windows actually used (the spec's, or the adapted fast page tier's)
    spec_window: BurnRateWindow  # as the spec (or the defaults) wrote it
    factor: float
    error_budget: float
    skipped: bool
    adapted: str  # "" when the tier is the spec's

    @property
    def threshold(self) -> float:
        """The error ratio this tier fires above."""
        return self.factor * self.error_budget

    def seconds_to_fire(self, error_ratio: float) -> float | None:
        """Time from a clean start to firing at a constant error ratio, `for:` included; None if it never fires.

        Both windows fill linearly: the long one reaches `error_ratio` x elapsed / long, so it crosses the
        threshold after threshold / error_ratio x long (the short window crosses first).
        """
        if self.skipped or error_ratio <= self.threshold:
            return None
        return self.threshold / error_ratio * self.window.long + self.window.for_

    def reason(self) -> str:
        """One sentence for docs, validate and test names."""
        where = f"{self.request_class} {self.sli.value}"
        tier = (
            f"{self.spec_window.severity} tier {format_duration(self.spec_window.long)}/"
            f"{format_duration(self.spec_window.short)}"
        )
        if self.skipped:
            return (
                f"{tier} left out for {where}: factor {self.factor:.4g} x error budget {self.error_budget:.4g} >= 1, "
                "so it could never fire"
            )
        return f"{tier} adapted for {where}: {self.adapted}"


# Kept for readers of the old name (promtool tests, docs): a skipped tier is a BurnTier with `skipped` set.
SkippedTier = BurnTier


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def window_text(seconds: float) -> str:
    """SLO windows read in days (`28d`, not `4w`)."""
    return _days(seconds)


def _days(seconds: float) -> str:
    """SLO windows read in days (`28d`, not `4w`)."""
    if seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    return format_duration(seconds)


def burn_factor(spec: Spec, window: BurnRateWindow) -> float:
    """The burn-rate threshold of a tier for this spec's SLO window (13.44 for 2% of 28d in 1h)."""
    return round(window.factor(spec.window), 6)


def _fast_page(spec: Spec, window: BurnRateWindow, budget: float) -> tuple[BurnRateWindow, float, str] | None:
    """The fastest page tier shortened so that a total outage pages within PAGE_WITHIN; None if already fast.

    The error ratio it asks for is kept (capped at MAX_ERROR_RATIO, which a total outage still reaches); only the
    long window shrinks, to the longest of FAST_LONG_WINDOWS that fires in time. Lowering the factor instead would
    page on mild, slow burns, which is what tickets are for.
    """
    factor = burn_factor(spec, window)
    ratio = min(factor * budget, MAX_ERROR_RATIO)
    if factor * budget < 1 and ratio * window.long + window.for_ <= PAGE_WITHIN:
        return None
    for long in FAST_LONG_WINDOWS:
        if long < window.long and ratio * long + window.for_ <= PAGE_WITHIN:
            short = min(FAST_SHORT_WINDOW, long)
            adapted = BurnRateWindow(window.severity, long, short, window.budget_percent, window.for_)
            was = f"{format_duration(window.long)}/{format_duration(window.short)} at factor {factor:.4g}"
            why = (
                f"windows {format_duration(long)}/{format_duration(short)} at factor {ratio / budget:.4g} (error "
                f"ratio {ratio:.4g}) instead of {was}, which "
                + ("could never fire" if factor * budget >= 1 else
                   f"would page {_minutes(ratio * window.long + window.for_)} into a total outage")
                + f"; now it pages within {format_duration(PAGE_WITHIN)}"
            )  # fmt: skip
            return adapted, round(ratio / budget, 6), why
    return None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes"


def burn_tiers(spec: Spec, request_class: RequestClass, sli: Sli) -> list[BurnTier]:
    """The burn-rate tiers of one objective, in the spec's order (empty without an objective)."""
    objective = request_class.slos[sli].objective
    if objective is None:
        return []
    budget = objective.error_budget
    pages = [w for w in spec.alerting.burn_rates if w.severity == "page"]
    fastest = min(pages, key=lambda w: w.long) if pages else None
    out = []
    for window in spec.alerting.burn_rates:
        factor = burn_factor(spec, window)
        fast = _fast_page(spec, window, budget) if window is fastest else None
        if fast is not None:
            used, factor_used, why = fast
            out.append(BurnTier(request_class.name, sli, used, window, factor_used, budget, False, why))
            continue
        out.append(BurnTier(request_class.name, sli, window, window, factor, budget, factor * budget >= 1, ""))
    return out


def replica_text(spec: Spec) -> str:
    """`{{ $labels.instance }} engine {{ $labels.engine }}`: the replica as an alert template names it."""
    labels = "/".join(f"{{{{ $labels.{label} }}}}" for label in spec.alerting.replica_labels)
    return f"{labels} engine {{{{ $labels.{schema.RULE_LABEL_ENGINE} }}}}"


def all_burn_tiers(spec: Spec) -> list[BurnTier]:
    """Every objective's burn-rate tiers."""
    return [t for rc in spec.classes for sli in rc.slos for t in burn_tiers(spec, rc, sli)]


def burn_windows(spec: Spec) -> set[float]:
    """Every window a burn-rate alert reads (the spec's and the adapted tiers'), for the SLI records."""
    windows: set[float] = set()
    for tier in all_burn_tiers(spec):
        if not tier.skipped:
            windows.update((tier.window.long, tier.window.short))
    for window in spec.alerting.burn_rates:
        windows.update((window.long, window.short))
    return windows


def skipped_burn_tiers(spec: Spec) -> list[BurnTier]:
    """Every (objective, tier) pair that is left out because factor x error budget >= 1 (and was not adapted)."""
    return [t for t in all_burn_tiers(spec) if t.skipped]


def adapted_burn_tiers(spec: Spec) -> list[BurnTier]:
    """Every (objective, tier) pair whose windows were adapted so that a total outage pages fast."""
    return [t for t in all_burn_tiers(spec) if t.adapted]


class _Builder:
    """Collects alert rules, giving each its own runbook title, anchor and URL.

    A rule covers the whole fleet: its labels are the rule's own (severity, service, windows, the spec's extra
    labels); model, class and slo come from the series it reads. Its title and anchor name the rule, not a model,
    so adding a model changes neither.
    """

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.rules: list[AlertRule] = []
        self.anchors: set[str] = set()

    def add(
        self,
        name: str,
        kind: AlertKind,
        expr: str,
        for_: float,
        severity: str,
        description: str,
        detail: str,
        *,
        members: Sequence[Member],
        condition: Mapping[str, float | str] | None = None,
        extra_labels: Mapping[str, str] | None = None,
        keep_firing: bool = True,
    ) -> None:
        spec = self.spec
        if not members:
            return
        labels: dict[str, str] = {
            schema.ALERT_LABEL_SEVERITY: spec.alerting.severity.label(severity),
            schema.RULE_LABEL_SERVICE: spec.service,
        }
        labels.update(extra_labels or {})
        labels.update(spec.alerting.labels)
        title = f"{name}: {detail} ({labels[schema.ALERT_LABEL_SEVERITY]})" if detail else (
            f"{name} ({labels[schema.ALERT_LABEL_SEVERITY]})")  # fmt: skip
        anchor = heading_anchor(title)
        if anchor in self.anchors:
            raise ValueError(f"two alerts would share the runbook section {anchor!r}")
        self.anchors.add(anchor)
        summary = SUMMARIES[name]
        if name in REPLICA_SUMMARIES:
            summary = summary.replace("{replica}", replica_text(spec))
        annotations = {
            schema.ANNOTATION_SUMMARY: summary,
            schema.ANNOTATION_DESCRIPTION: description,
            schema.ANNOTATION_RUNBOOK_URL: spec.alerting.runbook_link(spec.service, anchor),
        }
        self.rules.append(
            AlertRule(
                name=name,
                expr=expr,
                for_=prom_duration(for_) if for_ > 0 else "0s",
                labels=labels,
                annotations=annotations,
                kind=kind,
                anchor=anchor,
                title=title,
                keep_firing_for=prom_duration(KEEP_FIRING_FOR) if keep_firing else "",
                members=tuple(members),
                condition=dict(condition or {}),
            )
        )


_SLO_KEYS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)
# Per-SLO parameters are per class and SLI: every model of a class shares them.
_PARAM_KEYS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)
ON_SLO: Final = f"on ({', '.join(_SLO_KEYS)})"
ON_PARAMS: Final = f"on ({', '.join(_PARAM_KEYS)}) group_left ()"
ON_MODEL: Final = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL})"

# Template text an alert's annotations use for the series it fires on.
WHO: Final = "{{ $labels.class }} on {{ $labels.model }}"
SLO_TEXT: Final = "{{ $labels.slo }}"


def _service(spec: Spec) -> Matcher:
    return eq(schema.RULE_LABEL_SERVICE, spec.service)


def _recorded(spec: Spec, record: str, extra: Sequence[Matcher] = ()) -> str:
    return queries.Queries(spec).recorded(record, extra=extra)


def _burn_key(tier: BurnTier) -> tuple[str, float, float, float, bool]:
    return (tier.window.severity, tier.window.long, tier.window.short, tier.window.for_, bool(tier.adapted))


def burn_threshold_labels(spec: Spec, tier: BurnTier) -> dict[str, str]:
    """The labels of one objective's burn factor series (slokit:burn_rate:threshold) for one tier."""
    return {
        schema.RULE_LABEL_SERVICE: spec.service,
        schema.RULE_LABEL_CLASS: tier.request_class,
        schema.RULE_LABEL_SLO: tier.sli.value,
        schema.RULE_LABEL_LONG: prom_duration(tier.window.long),
        schema.RULE_LABEL_SHORT: prom_duration(tier.window.short),
        schema.ALERT_LABEL_SEVERITY: spec.alerting.severity.label(tier.window.severity),
    }


def burn_thresholds(spec: Spec) -> list[tuple[dict[str, str], float]]:
    """Every objective's burn factor per tier that can fire, as (labels, factor) for the parameter records."""
    return [(burn_threshold_labels(spec, t), t.factor) for t in all_burn_tiers(spec) if not t.skipped]


def _burn_alerts(b: _Builder) -> None:
    """One rule per burn-rate tier shape (severity, windows, `for`): both windows' burn rates above the factor of
    each objective's own parameter series, so every model and class with that tier is covered by one rule."""
    spec = b.spec
    grouped: dict[tuple[str, float, float, float, bool], list[BurnTier]] = {}
    for tier in all_burn_tiers(spec):
        if not tier.skipped:
            grouped.setdefault(_burn_key(tier), []).append(tier)
    rc_of = {rc.name: rc for rc in spec.classes}
    for (severity, long_s, short_s, for_s, adapted), tiers in grouped.items():
        long, short = prom_duration(long_s), prom_duration(short_s)
        factor_labels = [
            eq(schema.RULE_LABEL_LONG, long),
            eq(schema.RULE_LABEL_SHORT, short),
            eq(schema.ALERT_LABEL_SEVERITY, spec.alerting.severity.label(severity)),
        ]
        factor = _recorded(spec, schema.RECORD_BURN_THRESHOLD, factor_labels)
        expr = (
            f"(\n{_recorded(spec, schema.record_burn_rate(long))}\n> {ON_PARAMS}\n{factor}\n)\n"
            f"and {ON_SLO}\n"
            f"(\n{_recorded(spec, schema.record_burn_rate(short))}\n> {ON_PARAMS}\n{factor}\n)"
        )
        condition: dict[str, float | str] = {"long": long_s, "short": short_s, "for": for_s}
        if adapted:
            # Short windows: a few requests must not page (one bad request in a quiet 5m is 100%).
            total = _recorded(spec, schema.record_sli_total(prom_duration(FAST_SHORT_WINDOW)))
            expr += f"\nand {ON_SLO}\n{total} >= {spec.alerting.min_requests}"
            condition["min_requests"] = spec.alerting.min_requests
        members = []
        for tier in tiers:
            objective = rc_of[tier.request_class].slos[tier.sli].objective
            assert objective is not None
            params = {"factor": tier.factor, "error_ratio": tier.threshold, "error_budget": tier.error_budget,
                      "objective": objective.target_ratio, "threshold": objective.threshold}  # fmt: skip
            members += [
                Member(model, tier.request_class, tier.sli, params) for model in rc_of[tier.request_class].models
            ]
        factors = sorted({t.factor for t in tiers})
        if adapted:
            spends = (
                f"this fast page tier is adapted per objective (its factor is in the runbook) so that a total outage "
                f"pages within {format_duration(PAGE_WITHIN)}"
            )
        else:
            spends = (
                f"this tier fires above {_fmt(factors[0])}x, which spends {_fmt(tiers[0].window.budget_percent)}% of "
                f"the {_days(spec.window)} budget in {long}"
            )
        description = (
            f"{SLO_TEXT} of {WHO} is spending its error budget "
            f'{{{{ $value | printf "%.2f" }}}}x as fast as the objective allows over {long} (and {short}); '
            f"{spends}."
        )
        detail = f"{long}-{short} burn" + (", fast page" if adapted else "")
        b.add(
            NAME_BURN, AlertKind.BURN_RATE, expr, for_s, severity, description, detail, members=members,
            condition=condition, extra_labels={schema.RULE_LABEL_LONG: long, schema.RULE_LABEL_SHORT: short},
        )  # fmt: skip


def traffic_guard(spec: Spec, matchers: list[Matcher]) -> str:
    """`<requests in the last 5m> >= alerting.min_requests` per SLO, from the recorded bucket rates.

    Tier, baseline, consistency and scale-out signals decide on a 5m window; below the guard one slow request would
    be a p50 or a p99, so they stay quiet (the dashboards say "too little traffic").
    """
    total = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, INF_MATCHER])
    return f"sum by ({', '.join(_SLO_KEYS)}) ({total}) * {number(BASE_SECONDS)} >= {spec.alerting.min_requests}"


def fraction_within(matchers: list[Matcher], seconds: float, hist: schema.CustomHistogram | None = None) -> str:
    """Share of the last 5m's requests at or under `seconds` (a bucket boundary): an exact count, no interpolation.

    `hist` (Spec.histogram of the SLO) spells the boundary in the histogram's own `le` (unit, declared buckets)."""
    by = f"sum by ({', '.join(_SLO_KEYS)})"
    le = le_matcher(hist.le_for(seconds) if hist is not None else seconds)
    good = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, le])
    total = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, INF_MATCHER])
    return f"{by} ({good})\n/ {by} ({total})"


def tier_cells(spec: Spec, kind: str) -> tuple[TierCell, ...]:
    """The tier cells that alert with severity `kind` (page: critical.p50, ticket: acceptable.p95 by default)."""
    return spec.alerting.page_tiers if kind == "page" else spec.alerting.ticket_tiers


def _class_matcher(names: Sequence[str]) -> Matcher:
    return one_of(schema.RULE_LABEL_CLASS, list(names))


def _tier_alerts(b: _Builder) -> None:
    """Page on p50 worse than critical, ticket on p95 worse than acceptable (or the cells `alerting.tiers` names):
    one rule per cell and severity.

    `p > X` holds exactly when fewer than p of the requests took X or less, and X is a bucket boundary (the spec
    checker makes sure), so the decision is a count against that boundary, not an interpolated quantile. Classes
    whose threshold is the same boundary of the same SLI share one term; each other boundary adds one.
    """
    spec = b.spec
    for severity in ("ticket", "page"):
        for cell in tier_cells(spec, severity):
            name = {"critical": NAME_CRITICAL, "target": NAME_TARGET}.get(cell.tier, NAME_ACCEPTABLE)
            q = PERCENTILES[cell.percentile]
            terms: dict[tuple[Sli, tuple[str, str, str]], list[RequestClass]] = {}
            members: list[Member] = []
            for rc in spec.classes:
                for sli, slo in rc.slos.items():
                    seconds = slo.tiers.tier(cell.tier).get(cell.percentile)
                    if seconds is None:
                        continue
                    hist = spec.histogram(rc, sli)
                    terms.setdefault((sli, le_matcher(hist.le_for(seconds))), []).append(rc)
                    members += [Member(m, rc.name, sli, {"seconds": seconds, "quantile": q}) for m in rc.models]
            if not members:
                continue
            fractions = []
            for (sli, _), classes in terms.items():
                rc = classes[0]
                seconds = rc.slos[sli].tiers.tier(cell.tier)[cell.percentile]
                base = [_service(spec), _class_matcher([c.name for c in classes]), eq(schema.RULE_LABEL_SLO, sli.value)]
                fractions.append(fraction_within(base, seconds, spec.histogram(rc, sli)))
            within = queries.union(fractions)
            expr = f"(\n{within}\n) < {number(q)}\nand {ON_SLO}\n{traffic_guard(spec, [_service(spec)])}"
            description = (
                f"Only {{{{ $value | humanizePercentage }}}} of {WHO} requests had a {SLO_TEXT} within the "
                f"{cell.tier} tier's {cell.percentile} threshold over the last 5m (it needs {q:.1%}; each class's "
                f"threshold is in the runbook), for {format_duration(spec.alerting.tier_for)}, with at least "
                f"{spec.alerting.min_requests} requests in the window."
            )
            condition: dict[str, float | str] = {
                "tier": cell.tier,
                "percentile": cell.percentile,
                "quantile": q,
                "window": BASE_SECONDS,
                "min_requests": spec.alerting.min_requests,
            }
            b.add(
                name, AlertKind.TIER, expr, spec.alerting.tier_for, severity, description,
                f"{cell.percentile} above {cell.tier}", members=members, condition=condition,
                extra_labels={"percentile": cell.percentile},
            )  # fmt: skip


def _baseline_alerts(b: _Builder) -> None:
    spec = b.spec
    baseline = spec.alerting.baseline
    on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}, {schema.RULE_LABEL_CLASS})"
    when = (
        f"the median of the same hour over the last {baseline.median_days} days"
        if baseline.median_days >= 2
        else f"the same 5m {format_duration(baseline.offset)} ago"
    )
    members = [Member(m, rc.name, sli) for rc in spec.classes for sli in rc.slos for m in rc.models]
    p99 = _recorded(spec, schema.RECORD_LATENCY_QUANTILE, [eq("quantile", "0.99")])
    base = _recorded(spec, schema.RECORD_P99_BASELINE)
    rate = _recorded(spec, schema.RECORD_REQUEST_RATE)
    expr = (
        f"max without (quantile) ({p99}) > {number(baseline.ratio)} * {base}\n"
        f"and {on}\n{rate} >= {number(baseline.min_rps)}\n"
        f"and {ON_SLO}\n{traffic_guard(spec, [_service(spec)])}"
    )
    description = (
        f"p99 {SLO_TEXT} of {WHO} is {{{{ $value | humanizeDuration }}}}, more than {_fmt(baseline.ratio)}x its "
        f"baseline ({when}), with at least {_fmt(baseline.min_rps)} requests/s now and then and at least "
        f"{spec.alerting.min_requests} requests in the last 5m."
    )
    condition: dict[str, float | str] = {"ratio": baseline.ratio, "min_rps": baseline.min_rps,
                                         "offset": baseline.offset, "median_days": baseline.median_days,
                                         "min_requests": spec.alerting.min_requests}  # fmt: skip
    b.add(
        NAME_BASELINE, AlertKind.BASELINE, expr, baseline.for_, "ticket", description, "p99 vs baseline",
        members=members, condition=condition,
    )  # fmt: skip


def scale_out_boundary(spec: Spec, request_class: RequestClass) -> float:
    """The TTFT bucket boundary the scale-out signal counts against: fraction_of_slo x the objective's threshold.

    With `source: slokit` the exporter has that boundary (Spec.buckets adds it); with `source: vllm` it is the
    nearest boundary at or below it (`slokit validate` names it), so the signal errs towards scaling early.
    """
    slo = request_class.slos[Sli.TTFT]
    assert slo.objective is not None
    wanted = slo.objective.threshold * spec.alerting.scale_out.fraction_of_slo
    buckets = spec.histogram_buckets(request_class, Sli.TTFT)
    bounds = [b for b in buckets if b <= wanted * (1 + 1e-9)]
    return max(bounds) if bounds else min(buckets)


def _scale_out_alerts(b: _Builder) -> None:
    spec = b.spec
    scale = spec.alerting.scale_out
    members = []
    for rc in spec.scale_out_classes():
        slo = rc.slos[Sli.TTFT]
        assert slo.objective is not None
        params = {"boundary": scale_out_boundary(spec, rc), "allowed": slo.objective.error_budget,
                  "scale": round(scale.fraction_of_slo / slo.objective.error_budget, 9)}  # fmt: skip
        members += [Member(m, rc.name, Sli.TTFT, params) for m in rc.models]
    expr = f"{_recorded(spec, schema.RECORD_SCALE_OUT)} > {number(scale.fraction_of_slo)}"
    description = (
        f"More of {WHO} requests than the time-to-first-token objective allows above its threshold waited longer "
        f"than the scale-out boundary ({_fmt(scale.fraction_of_slo)} of the threshold; each class's is in the "
        f"runbook) for their first token over the last 5m, for {format_duration(scale.for_)}: headroom is gone "
        f'before the SLO breaks (signal {{{{ $value | printf "%.2f" }}}}, trigger {_fmt(scale.fraction_of_slo)}).'
    )
    condition: dict[str, float | str] = {"fraction_of_slo": scale.fraction_of_slo, "for": scale.for_}
    b.add(NAME_SCALE_OUT, AlertKind.SCALE_OUT, expr, scale.for_, "ticket", description, "", members=members,
          condition=condition)  # fmt: skip


def page_firing(spec: Spec, model: str | None = None) -> str:
    """Prometheus' ALERTS series of firing pages (of one model, when given), the engine cause copies left out.

    `cause=""` matters: a cause copy is itself a page-severity alert, so without it a copy would keep itself
    firing (and its ticket muted) after every real page of the model has resolved, and page on its own.
    """
    matchers = [
        eq("alertstate", "firing"),
        eq("severity", spec.alerting.severity.page),
        eq(schema.RULE_LABEL_SERVICE, spec.service),
    ]
    if model is not None:
        matchers.append(eq(schema.RULE_LABEL_MODEL, model))
    matchers.append(eq(schema.RULE_LABEL_CAUSE, ""))
    return selector(schema.ALERTS_SERIES, matchers)


def _engine_pair(
    b: _Builder,
    name: str,
    kind: AlertKind,
    expr: str,
    description: str,
    members: Sequence[Member],
    condition: Mapping[str, float | str],
) -> None:
    """An engine alert as a ticket, or, while a page of its model fires, as a cause inside that page.

    Engine alerts (queue, KV cache, preemption) explain an SLO page; sent on their own they would be a second
    notification of the same incident. So each is generated twice with the same alertname: a ticket `unless` a page
    of the model fires, and a page-severity copy labelled `cause: engine` only while one does. Alertmanager's page
    route groups by service and model, so the copy joins the page's group (see alertmanager.py); it never exists
    without a page (the join leaves the copies themselves out, see page_firing), so it never wakes anyone on its
    own. The copy has no `for:` of its own: it joins at once.
    """
    spec = b.spec
    firing = page_firing(spec)
    b.add(name, kind, f"(\n{expr}\n)\nunless {ON_MODEL}\n{firing}", spec.alerting.tier_for, "ticket", description,
          "", members=members, condition=condition)  # fmt: skip
    b.add(
        name, kind, f"(\n{expr}\n)\nand {ON_MODEL}\n{firing}", 0, "page",
        description + " It is shown inside the page of this model as a likely cause.",
        "cause of a page", members=members, condition=condition,
        extra_labels={schema.RULE_LABEL_CAUSE: schema.CAUSE_ENGINE},
    )  # fmt: skip


def _engine_alerts(b: _Builder) -> None:
    spec = b.spec
    replica = replica_text(spec)
    keys = (schema.RULE_LABEL_SERVICE, *queries.Queries(spec).engine_keys)
    on = f"on ({', '.join(keys)})"
    members = [Member(m.name, params={"max_num_seqs": float(m.max_num_seqs)}) for m in spec.models]
    running = _recorded(spec, schema.RECORD_QUEUE_RUNNING)
    expr = (
        f"{_recorded(spec, schema.RECORD_QUEUE_WAITING)} > 0\n"
        f"and {on}\n({running} >= {ON_MODEL} group_left () {_recorded(spec, schema.RECORD_MAX_NUM_SEQS)})"
    )
    description = (
        f"Engine {replica} of {{{{ $labels.model }}}} has {{{{ $value }}}} requests waiting while it runs its maximum "
        "(max_num_seqs, in the runbook's table); new requests wait for a slot and time to first token grows."
    )
    if spec.metrics.requests_waiting is not None:  # a source without a queue gauge (OpenTelemetry GenAI): none
        _engine_pair(b, NAME_QUEUE, AlertKind.QUEUE_OVERLOAD, expr, description, members, {})
    if spec.metrics.kv_cache_usage is None or spec.metrics.preemptions is None:
        return  # the source exports no KV-cache gauge or preemption counter (TGI): nothing to alert on
    plain = [Member(m.name) for m in spec.models]
    kv = spec.alerting.kv_cache_usage_max
    expr = f"{_recorded(spec, schema.RECORD_KV_CACHE_USAGE)} > {number(kv)}"
    description = (
        f"Engine {replica} of {{{{ $labels.model }}}} has {{{{ $value | humanizePercentage }}}} of its KV "
        f"cache in use, above {kv:.0%}; new sequences must wait or preempt running ones."
    )
    _engine_pair(b, NAME_KV_FULL, AlertKind.KV_CACHE, expr, description, plain, {"kv_cache_usage_max": kv})
    expr = f"{_recorded(spec, schema.RECORD_PREEMPTIONS)} > 0"
    description = (
        f'Engine {replica} of {{{{ $labels.model }}}} preempts {{{{ $value | printf "%.2f" }}}} requests/s '
        "(5m rate): the KV cache is too small for the running batch, and preempted requests are recomputed."
    )
    _engine_pair(b, NAME_PREEMPTING, AlertKind.KV_CACHE, expr, description, plain, {})


def _consistency_alerts(b: _Builder) -> None:
    spec = b.spec
    members = [
        Member(m, rc.name, sli, {"limit": slo.consistency.max_p99_over_p50})
        for rc in spec.classes
        for sli, slo in rc.slos.items()
        if slo.consistency is not None
        for m in rc.models
    ]
    lower = _recorded(spec, schema.RECORD_CONSISTENCY_LOWER)
    expr = f"{lower}\n> {ON_PARAMS}\n{_recorded(spec, schema.RECORD_CONSISTENCY_LIMIT)}"
    description = (
        f'p99 {SLO_TEXT} of {WHO} is at least {{{{ $value | printf "%.2f" }}}}x its p50 over the last 5m (a lower '
        "bound from bucket edges), above the class's consistency limit (in the runbook)."
    )
    b.add(NAME_CONSISTENCY, AlertKind.CONSISTENCY, expr, spec.alerting.tier_for, "ticket", description,
          "p99 over p50", members=members)  # fmt: skip


def consistency_limits(spec: Spec) -> list[tuple[dict[str, str], float]]:
    """Each SLO's consistency limit as (labels, limit) for the parameter records."""
    return [
        ({schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_CLASS: rc.name, schema.RULE_LABEL_SLO: sli.value},
         slo.consistency.max_p99_over_p50)
        for rc in spec.classes
        for sli, slo in rc.slos.items()
        if slo.consistency is not None
    ]  # fmt: skip


def _first_histogram(spec: Spec, model: str) -> tuple[RequestClass, Sli] | None:
    for rc in spec.classes:
        if model in rc.models and rc.slos:
            return rc, next(iter(rc.slos))
    return None


def _any_sli(spec: Spec) -> Sli:
    """The SLI whose histogram stands for a model that has no SLO: TTFT, or the source's first (TGI has none)."""
    return Sli.TTFT if Sli.TTFT in spec.metrics.latency else next(iter(spec.metrics.latency))


def absent_metric(spec: Spec, model: str) -> tuple[str, Sli]:
    """The raw histogram whose absence means a model's latency cannot be measured (its first SLI's `_count`)."""
    first = _first_histogram(spec, model)
    if first is None:
        sli = _any_sli(spec)
        return spec.metrics.latency[sli] + "_count", sli
    rc, sli = first
    return spec.histogram(rc, sli).name + "_count", sli


def absent_series(spec: Spec, model: str) -> tuple[str, list[Matcher]]:
    """The raw `_count` series (name, matchers) of a model's first SLI histogram (Spec.histogram), with the spec's
    scope and the histogram's own selector (a custom histogram's), not the source's class label (any class keeps
    it present)."""
    q = queries.Queries(spec)
    first = _first_histogram(spec, model)
    if first is None:
        return spec.metrics.latency[_any_sli(spec)] + "_count", q.raw_matchers(model)
    rc, sli = first
    return spec.histogram(rc, sli).name + "_count", q.histogram_matchers(rc, sli, [model], with_class=False)


def served_models(spec: Spec) -> list[str]:
    """Models some class uses, in the spec's order."""
    served = {m for rc in spec.classes for m in rc.models}
    return [m.name for m in spec.models if m.name in served]


def _presence(spec: Spec, models: Sequence[str], wrap: str) -> str:
    """Which of `models` have their absent_series present, per model: `group by (model)` of `wrap` over each
    model's `_count` series, one term per distinct histogram and scope (the model matcher left out: a model the
    spec does not name is simply never asked about)."""
    groups: dict[tuple[str, tuple[Matcher, ...], str | None], list[str]] = {}
    for model in models:
        metric, matchers = absent_series(spec, model)
        first = _first_histogram(spec, model)
        label = spec.histogram(*first).model_label if first is not None else spec.metrics.model_label
        kept = tuple(m for m in matchers if label is None or m[0] != label)
        groups.setdefault((metric, kept, label), []).append(model)
    terms = []
    for (metric, kept_matchers, label), group in groups.items():
        inner = wrap.format(selector(metric, list(kept_matchers)))
        if label is None:  # no model label (TGI, a custom histogram without one): one model per scope
            terms += [
                f'label_replace(group({inner}), "{schema.RULE_LABEL_MODEL}", {promql_quote(model)}, "", "")'
                for model in group
            ]
        else:
            terms.append(rename(f"group by ({label}) ({inner})", label, schema.RULE_LABEL_MODEL))
    return queries.union(terms)


def _absent_alerts(b: _Builder) -> None:
    """Models of the spec (that some class uses) without any series of their first SLI histogram, for 10m."""
    spec = b.spec
    models = served_models(spec)
    if not models:
        return
    info = _recorded(spec, schema.RECORD_MAX_NUM_SEQS, [eq(schema.RULE_LABEL_SERVED, "true")])
    expr = (
        f"group by ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}) ({info})\n"
        f"unless on ({schema.RULE_LABEL_MODEL})\n(\n{_presence(spec, models, '{}')}\n)"
    )
    description = (
        "No latency series (the `_count` of its first SLO histogram, named in the runbook) for "
        f"{{{{ $labels.model }}}} for {format_duration(ABSENT_FOR)}: every engine is down, not scraped, or not "
        "exporting. The SLO cannot be measured and no other slokit alert can fire for it."
    )
    b.add(NAME_ABSENT, AlertKind.ABSENT, expr, ABSENT_FOR, "ticket", description, "",
          members=[Member(m) for m in models], keep_firing=False)  # fmt: skip


def _exporter_gone_alerts(b: _Builder) -> None:
    """Page when a model that served requests in the last hour has had no raw series for 10 minutes.

    Without its series no SLO alert of the model can fire, so losing every exporter mid-incident must not be
    quieter than the incident. Labelled with service and model (and severity page) so Alertmanager groups it
    with that model's SLO pages. A model that never had traffic never pages (its 5m totals are all zero).
    """
    spec = b.spec
    served = {m for rc in spec.classes if any(s.objective for s in rc.slos.values()) for m in rc.models}
    models = [m for m in served_models(spec) if m in served]
    if not models:
        return
    gone = prom_duration(ABSENT_FOR)
    traffic = _recorded(spec, schema.record_sli_total(prom_duration(300)))
    expr = (
        f"group by ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL}) "
        f"(max_over_time({traffic}[{prom_duration(SERVED_WITHIN)}]) > 0)\n"
        f"unless on ({schema.RULE_LABEL_MODEL})\n(\n{_presence(spec, models, 'present_over_time({}[' + gone + '])')}\n)"
    )
    description = (
        f"{{{{ $labels.model }}}} served requests within the last {format_duration(SERVED_WITHIN)}, but no latency "
        f"series has been scraped for {format_duration(ABSENT_FOR)}: every exporter of the model is gone "
        "(pods down, scrape broken, or the plugin not loaded), so none of its SLO alerts can fire."
    )
    b.add(NAME_EXPORTER_GONE, AlertKind.EXPORTER_GONE, expr, 0, "page", description, "",
          members=[Member(m) for m in models], keep_firing=False)  # fmt: skip


def alert_rules(spec: Spec) -> list[AlertRule]:
    """Every alert rule of a spec, in a stable order (built once per spec; see generate/once.py)."""
    return list(once(spec, "alerts", None, lambda: tuple(_build_alert_rules(spec))))


def alert_instances(spec: Spec, models: Collection[str] | None = None) -> list[AlertRule]:
    """Every rule's per-member view (see AlertRule.instances), of `models` only when given."""
    return [inst for rule in alert_rules(spec) for inst in rule.instances(models)]


def _build_alert_rules(spec: Spec) -> list[AlertRule]:
    builder = _Builder(spec)
    _burn_alerts(builder)
    _tier_alerts(builder)
    _baseline_alerts(builder)
    _scale_out_alerts(builder)
    _consistency_alerts(builder)
    _engine_alerts(builder)
    _absent_alerts(builder)
    _exporter_gone_alerts(builder)
    return builder.rules
