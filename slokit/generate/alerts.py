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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from slokit import schema
from slokit.generate import queries
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.generate.once import once
from slokit.promql import INF_MATCHER, Matcher, eq, le_matcher, number, selector
from slokit.schema import SLI_TITLES, Sli
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
    """Collects alert rules, giving each its own runbook title, anchor and URL."""

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
        model: str,
        request_class: RequestClass | None = None,
        sli: Sli | None = None,
        extra_labels: Mapping[str, str] | None = None,
        keep_firing: bool = True,
    ) -> None:
        spec = self.spec
        labels: dict[str, str] = {
            schema.ALERT_LABEL_SEVERITY: spec.alerting.severity.label(severity),
            schema.RULE_LABEL_SERVICE: spec.service,
        }
        if sli is not None:
            labels[schema.RULE_LABEL_SLO] = sli.value
        labels[schema.RULE_LABEL_MODEL] = model
        if request_class is not None:
            labels[schema.RULE_LABEL_CLASS] = request_class.name
        labels.update(extra_labels or {})
        labels.update(spec.alerting.labels)
        where = f"{request_class.name} on {model}" if request_class is not None else model
        what = f"{sli.value} " if sli is not None else ""
        title = f"{name}: {what}{where}{', ' + detail if detail else ''} ({labels[schema.ALERT_LABEL_SEVERITY]})"
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
                model=model,
                request_class=request_class.name if request_class is not None else None,
                sli=sli,
                keep_firing_for=prom_duration(KEEP_FIRING_FOR) if keep_firing else "",
            )
        )


_SLO_KEYS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)


def _slo_matchers(spec: Spec, model: str, rc: RequestClass, sli: Sli) -> list[tuple[str, str, str]]:
    return [
        eq(schema.RULE_LABEL_SERVICE, spec.service),
        eq(schema.RULE_LABEL_MODEL, model),
        eq(schema.RULE_LABEL_CLASS, rc.name),
        eq(schema.RULE_LABEL_SLO, sli.value),
    ]


def _burn_alerts(b: _Builder) -> None:
    spec = b.spec
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            objective = slo.objective
            if objective is None:
                continue
            for tier in burn_tiers(spec, rc, sli):
                if tier.skipped:
                    continue
                window, factor = tier.window, tier.factor
                long, short = prom_duration(window.long), prom_duration(window.short)
                for model in rc.models:
                    m = _slo_matchers(spec, model, rc, sli)
                    expr = (
                        f"{selector(schema.record_burn_rate(long), m)} > {number(factor)}\n"
                        f"and\n{selector(schema.record_burn_rate(short), m)} > {number(factor)}"
                    )
                    if tier.adapted:
                        # Short windows: a few requests must not page (one bad request in a quiet 5m is 100%).
                        total = selector(schema.record_sli_total(prom_duration(FAST_SHORT_WINDOW)), m)
                        expr += f"\nand on ({', '.join(_SLO_KEYS)})\n{total} >= {spec.alerting.min_requests}"
                    spends = (
                        f"which spends {_fmt(window.budget_percent)}% of the {_days(spec.window)} budget in {long}"
                        if not tier.adapted
                        else f"adapted from the spec's tier so that a total outage pages within "
                        f"{format_duration(PAGE_WITHIN)}"
                    )
                    description = (
                        f"{SLI_TITLES[sli].capitalize()} of {rc.name} on {model} is spending its error budget "
                        f'{{{{ $value | printf "%.2f" }}}}x as fast as the objective allows over {long} (and '
                        f"{short}); this tier fires above {_fmt(factor)}x ({_fmt(tier.threshold * 100)}% of requests "
                        f"slow), {spends}. Objective: "
                        f"{_fmt(objective.percentile)}% within {format_duration(objective.threshold)}."
                    )
                    b.add(
                        NAME_BURN, AlertKind.BURN_RATE, expr, window.for_, window.severity, description,
                        f"{long}-{short} burn", model=model, request_class=rc, sli=sli,
                        extra_labels={"long": long, "short": short},
                    )  # fmt: skip


def traffic_guard(spec: Spec, matchers: list[Matcher]) -> str:
    """`<requests in the last 5m> >= alerting.min_requests` for one SLO, from the recorded bucket rates.

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


def _tier_alerts(b: _Builder) -> None:
    """Page on p50 worse than critical, ticket on p95 worse than acceptable (or the cells `alerting.tiers` names).

    `p > X` holds exactly when fewer than p of the requests took X or less, and X is a bucket boundary (the spec
    checker makes sure), so the decision is a count against that boundary, not an interpolated quantile.
    """
    spec = b.spec
    on = f"on ({', '.join(_SLO_KEYS)})"
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            for severity in ("ticket", "page"):
                for cell in tier_cells(spec, severity):
                    seconds = slo.tiers.tier(cell.tier).get(cell.percentile)
                    if seconds is None:
                        continue
                    name = NAME_CRITICAL if cell.tier == "critical" else NAME_ACCEPTABLE
                    if cell.tier == "target":
                        name = NAME_TARGET
                    q = PERCENTILES[cell.percentile]
                    for model in rc.models:
                        m = _slo_matchers(spec, model, rc, sli)
                        within = fraction_within(m, seconds, spec.histogram(rc, sli))
                        expr = f"(\n{within}\n) < {number(q)}\nand {on}\n{traffic_guard(spec, m)}"
                        description = (
                            f"Only {{{{ $value | humanizePercentage }}}} of {rc.name} requests on {model} had a "
                            f"{SLI_TITLES[sli]} within {format_duration(seconds)} over the last 5m, so "
                            f"{cell.percentile} is worse than the {cell.tier} tier of {format_duration(seconds)} "
                            f"(it needs {q:.1%}), for {format_duration(spec.alerting.tier_for)}, with at least "
                            f"{spec.alerting.min_requests} requests in the window."
                        )
                        b.add(
                            name, AlertKind.TIER, expr, spec.alerting.tier_for, severity, description,
                            f"{cell.percentile} above {format_duration(seconds)}", model=model, request_class=rc,
                            sli=sli, extra_labels={"percentile": cell.percentile},
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
    for rc in spec.classes:
        for sli in rc.slos:
            for model in rc.models:
                m = _slo_matchers(spec, model, rc, sli)
                p99 = selector(schema.RECORD_LATENCY_QUANTILE, [*m, eq("quantile", "0.99")])
                base = selector(schema.RECORD_P99_BASELINE, m)
                rate = selector(schema.RECORD_REQUEST_RATE, m[:3])
                expr = (
                    f"max without (quantile) ({p99}) > {number(baseline.ratio)} * {base}\n"
                    f"and {on}\n{rate} >= {number(baseline.min_rps)}\n"
                    f"and on ({', '.join(_SLO_KEYS)})\n{traffic_guard(spec, m)}"
                )
                description = (
                    f"p99 {SLI_TITLES[sli]} of {rc.name} on {model} is {{{{ $value | humanizeDuration }}}}, more "
                    f"than {_fmt(baseline.ratio)}x its baseline ({when}), with at least "
                    f"{_fmt(baseline.min_rps)} requests/s now and then and at least {spec.alerting.min_requests} "
                    "requests in the last 5m."
                )
                b.add(
                    NAME_BASELINE, AlertKind.BASELINE, expr, baseline.for_, "ticket", description, "p99 vs baseline",
                    model=model, request_class=rc, sli=sli,
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
    for rc in spec.scale_out_classes():
        slo = rc.slos[Sli.TTFT]
        assert slo.objective is not None
        boundary = scale_out_boundary(spec, rc)
        allowed = slo.objective.error_budget
        for model in rc.models:
            ratio = selector(schema.RECORD_SCALE_OUT, _slo_matchers(spec, model, rc, Sli.TTFT))
            expr = f"{ratio} > {number(scale.fraction_of_slo)}"
            description = (
                f"More than {allowed:.2%} of {rc.name} requests on {model} (what the "
                f"{_fmt(slo.objective.percentile)}% objective allows above {format_duration(slo.objective.threshold)})"
                f" waited longer than {format_duration(boundary)} for their first token over the last 5m, for "
                f"{format_duration(scale.for_)}: headroom is gone before the SLO breaks (signal "
                f'{{{{ $value | printf "%.2f" }}}}, trigger {_fmt(scale.fraction_of_slo)}).'
            )
            b.add(
                NAME_SCALE_OUT, AlertKind.SCALE_OUT, expr, scale.for_, "ticket", description, "", model=model,
                request_class=rc, sli=Sli.TTFT,
            )  # fmt: skip


def page_firing(spec: Spec, model: str) -> str:
    """Prometheus' ALERTS series of this model's firing pages, the engine cause copies left out.

    `cause=""` matters: a cause copy is itself a page-severity alert, so without it a copy would keep itself
    firing (and its ticket muted) after every real page of the model has resolved, and page on its own.
    """
    return selector(
        schema.ALERTS_SERIES,
        [
            eq("alertstate", "firing"),
            eq("severity", spec.alerting.severity.page),
            eq(schema.RULE_LABEL_SERVICE, spec.service),
            eq(schema.RULE_LABEL_MODEL, model),
            eq(schema.RULE_LABEL_CAUSE, ""),
        ],
    )


def _engine_pair(
    b: _Builder, name: str, kind: AlertKind, expr: str, description: str, model: str, detail: str = ""
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
    on = f"on ({schema.RULE_LABEL_SERVICE}, {schema.RULE_LABEL_MODEL})"
    firing = page_firing(spec, model)
    b.add(name, kind, f"(\n{expr}\n)\nunless {on}\n{firing}", spec.alerting.tier_for, "ticket", description, detail,
          model=model)  # fmt: skip
    b.add(
        name, kind, f"(\n{expr}\n)\nand {on}\n{firing}", 0, "page",
        description + " It is shown inside the page of this model as a likely cause.",
        f"{detail + ', ' if detail else ''}cause of a page", model=model,
        extra_labels={schema.RULE_LABEL_CAUSE: schema.CAUSE_ENGINE},
    )  # fmt: skip


def _engine_alerts(b: _Builder) -> None:
    spec = b.spec
    replica = replica_text(spec)
    for model in spec.models:
        m = [eq(schema.RULE_LABEL_SERVICE, spec.service), eq(schema.RULE_LABEL_MODEL, model.name)]
        keys = (schema.RULE_LABEL_SERVICE, *queries.Queries(spec).engine_keys)
        on = f"on ({', '.join(keys)})"
        expr = (
            f"{selector(schema.RECORD_QUEUE_WAITING, m)} > 0\n"
            f"and {on}\n{selector(schema.RECORD_QUEUE_RUNNING, m)} >= {model.max_num_seqs}"
        )
        description = (
            f"Engine {replica} of {model.name} has {{{{ $value }}}} requests waiting while it runs "
            f"its maximum of {model.max_num_seqs} (max_num_seqs); new requests wait for a slot and time to first "
            "token grows."
        )
        _engine_pair(b, NAME_QUEUE, AlertKind.QUEUE_OVERLOAD, expr, description, model.name)
        if spec.metrics.kv_cache_usage is None or spec.metrics.preemptions is None:
            continue  # the source exports no KV-cache gauge or preemption counter (TGI): nothing to alert on
        kv = spec.alerting.kv_cache_usage_max
        expr = f"{selector(schema.RECORD_KV_CACHE_USAGE, m)} > {number(kv)}"
        description = (
            f"Engine {replica} of {model.name} has {{{{ $value | humanizePercentage }}}} of its KV "
            f"cache in use, above {kv:.0%}; new sequences must wait or preempt running ones."
        )
        _engine_pair(b, NAME_KV_FULL, AlertKind.KV_CACHE, expr, description, model.name)
        expr = f"{selector(schema.RECORD_PREEMPTIONS, m)} > 0"
        description = (
            f'Engine {replica} of {model.name} preempts {{{{ $value | printf "%.2f" }}}} requests/s '
            "(5m rate): the KV cache is too small for the running batch, and preempted requests are recomputed."
        )
        _engine_pair(b, NAME_PREEMPTING, AlertKind.KV_CACHE, expr, description, model.name)


def _consistency_alerts(b: _Builder) -> None:
    spec = b.spec
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.consistency is None:
                continue
            limit = slo.consistency.max_p99_over_p50
            for model in rc.models:
                lower = selector(schema.RECORD_CONSISTENCY_LOWER, _slo_matchers(spec, model, rc, sli))
                expr = f"{lower} > {number(limit)}"
                description = (
                    f"p99 {SLI_TITLES[sli]} of {rc.name} on {model} is at least "
                    f'{{{{ $value | printf "%.2f" }}}}x its p50 over the last 5m (a lower bound from bucket edges), '
                    f"above the consistency limit of {_fmt(limit)}x."
                )
                b.add(
                    NAME_CONSISTENCY, AlertKind.CONSISTENCY, expr, spec.alerting.tier_for, "ticket", description,
                    "p99 over p50", model=model, request_class=rc, sli=sli,
                )  # fmt: skip


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


def _absent_alerts(b: _Builder) -> None:
    spec = b.spec
    served = {m for rc in spec.classes for m in rc.models}
    for model in spec.models:
        if model.name not in served:
            continue
        metric, _ = absent_metric(spec, model.name)
        expr = f"absent({selector(*absent_series(spec, model.name))})"
        description = (
            f"No {metric} series for {model.name} for {format_duration(ABSENT_FOR)}: every engine is down, not "
            "scraped, or not exporting. The SLO cannot be measured and no other slokit alert can fire for it."
        )
        b.add(NAME_ABSENT, AlertKind.ABSENT, expr, ABSENT_FOR, "ticket", description, "", model=model.name,
              keep_firing=False)  # fmt: skip


def _exporter_gone_alerts(b: _Builder) -> None:
    """Page when a model that served requests in the last hour has had no raw series for 10 minutes.

    Without its series no SLO alert of the model can fire, so losing every exporter mid-incident must not be
    quieter than the incident. Labelled with service and model (and severity page) so Alertmanager groups it
    with that model's SLO pages. A model that never had traffic never pages (its 5m totals are all zero).
    """
    spec = b.spec
    q = queries.Queries(spec)
    served = {m for rc in spec.classes if any(s.objective for s in rc.slos.values()) for m in rc.models}
    gone = prom_duration(ABSENT_FOR)
    for model in spec.models:
        if model.name not in served:
            continue
        metric, _ = absent_metric(spec, model.name)
        traffic = q.recorded(schema.record_sli_total(prom_duration(300)), model=model.name)
        expr = (
            f"absent_over_time({selector(*absent_series(spec, model.name))}[{gone}])\n"
            f"and on () (max(max_over_time({traffic}[{prom_duration(SERVED_WITHIN)}])) > 0)"
        )
        description = (
            f"{model.name} served requests within the last {format_duration(SERVED_WITHIN)}, but no {metric} "
            f"series has been scraped for {format_duration(ABSENT_FOR)}: every exporter of the model is gone "
            "(pods down, scrape broken, or the plugin not loaded), so none of its SLO alerts can fire."
        )
        b.add(NAME_EXPORTER_GONE, AlertKind.EXPORTER_GONE, expr, 0, "page", description, "", model=model.name,
              keep_firing=False)  # fmt: skip


def alert_rules(spec: Spec) -> list[AlertRule]:
    """Every alert rule of a spec, in a stable order (built once per spec; see generate/once.py)."""
    return list(once(spec, "alerts", None, lambda: tuple(_build_alert_rules(spec))))


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
