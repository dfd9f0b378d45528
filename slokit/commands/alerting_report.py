"""What `slokit validate` says about a spec's alerts: the burn-rate table per objective, and the warnings.

An on-call team should know before rollout how fast each objective pages: a 90% objective cannot use the 14.4x
tier (it would need 144% errors), and a 95% objective's 1h/5m tier needs 40 minutes of total outage. The table
shows each tier as generated (after adaptation), so nobody has to work the arithmetic out by hand.
"""

from __future__ import annotations

import itertools
import math

from slokit.generate import alerts
from slokit.schema import Sli
from slokit.spec import Spec
from slokit.spec.model import DEFAULT_PAGE_TIERS, DEFAULT_TICKET_TIERS
from slokit.units import format_duration

OUTAGE: float = 1.0  # error ratio of a total outage
BUDGET_RATE: float = 2.0  # "twice the budget rate": an error ratio of 2 x the error budget
CONSISTENCY_BLIND: float = 2.0  # warn when a true p99/p50 this many times the limit may not fire


def _when(seconds: float | None) -> str:
    """`8m43s`, `4h21m`, `1d12h`: read at a glance; `never` when the tier cannot fire."""
    if seconds is None:
        return "never"
    total = round(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def _row(cells: list[str], widths: list[int]) -> str:
    return "    " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def burn_report(spec: Spec) -> list[str]:
    """The burn-rate table of every objective, as lines of text."""
    lines: list[str] = []
    header = ["tier", "windows", "factor", "fires above", "budget spent", "fires at 100% errors", "at 2x budget rate"]
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            objective = slo.objective
            if objective is None:
                continue
            budget = objective.error_budget
            lines.append(
                f"  {rc.name} {sli.value}: {objective.percentile:g}% within {format_duration(objective.threshold)} "
                f"(error budget {budget:.4g} of {alerts.window_text(spec.window)}; budget spent: by the time a total "
                "outage fires the tier)"
            )
            rows = [header]
            for tier in alerts.burn_tiers(spec, rc, sli):
                window = tier.window
                outage = tier.seconds_to_fire(OUTAGE)
                spent = "-" if outage is None else f"{outage / (budget * spec.window):.2%}"
                rows.append(
                    [
                        window.severity + (" (adapted)" if tier.adapted else " (left out)" if tier.skipped else ""),
                        f"{format_duration(window.long)}/{format_duration(window.short)}",
                        f"{tier.factor:.4g}x",
                        "-" if tier.skipped else f"{tier.threshold:.2%}",
                        spent,
                        _when(outage),
                        _when(tier.seconds_to_fire(BUDGET_RATE * budget)),
                    ]
                )
            widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
            lines.extend(_row(r, widths) for r in rows)
            if sli is Sli.TTFT:
                boundary = alerts.scale_out_boundary(spec, rc)
                wanted = objective.threshold * spec.alerting.scale_out.fraction_of_slo
                lines.append(
                    f"    scale-out: more than {budget:.2%} of requests above {format_duration(boundary)} "
                    f"({boundary / objective.threshold:.3g} x the threshold; asked for {format_duration(wanted)})"
                )
    lines.extend(consistency_report(spec))
    return lines


def bucket_spacing(buckets: tuple[float, ...]) -> float:
    """The largest ratio between neighbouring boundaries (above 0): how far a bucket edge can be from a quantile."""
    positive = [b for b in buckets if b > 0]
    return max((b / a for a, b in itertools.pairwise(positive)), default=math.inf)


def consistency_report(spec: Spec) -> list[str]:
    """Per consistency SLO, which true p99/p50 ratios fire for certain, as lines of text.

    The alert fires only when the bucket edges prove the ratio above the limit (lower edge of p99's bucket over
    the upper edge of p50's), so it never fires at or below the limit; it fires for certain once the true ratio
    exceeds the limit times the square of the largest neighbour ratio of the histogram's boundaries.
    """
    lines: list[str] = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.consistency is None:
                continue
            limit = slo.consistency.max_p99_over_p50
            spacing = bucket_spacing(spec.histogram_buckets(rc, sli))
            lines.append(
                f"  {rc.name} {sli.value}: p99/p50 at most {limit:g}: never fires at or below it; fires for certain "
                f"above {limit * spacing**2:.3g} (neighbouring bucket boundaries up to {spacing:.3g}x apart)"
            )
    return lines


def warnings(spec: Spec) -> list[str]:
    """Tiers adapted or left out, objectives that still page slowly, and inexact scale-out boundaries."""
    out: list[str] = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            objective = slo.objective
            if objective is None:
                continue
            tiers = alerts.burn_tiers(spec, rc, sli)
            out.extend(t.reason() for t in tiers if t.adapted or t.skipped)
            pages = [t.seconds_to_fire(OUTAGE) for t in tiers if t.window.severity == "page"]
            fastest = min((p for p in pages if p is not None), default=None)
            if fastest is None or fastest > alerts.PAGE_WITHIN:
                out.append(
                    f"{rc.name} {sli.value}: a total outage pages only after {_when(fastest)}, later than "
                    f"{format_duration(alerts.PAGE_WITHIN)}; add a page tier with shorter windows"
                )
            if sli is Sli.TTFT:
                boundary = alerts.scale_out_boundary(spec, rc)
                wanted = objective.threshold * spec.alerting.scale_out.fraction_of_slo
                if abs(boundary - wanted) > 1e-9 * wanted:
                    histogram = spec.histogram(rc, Sli.TTFT).name
                    out.append(
                        f"{rc.name} ttft: {histogram} has no bucket boundary at {format_duration(wanted)} "
                        f"({spec.alerting.scale_out.fraction_of_slo:g} x {format_duration(objective.threshold)}); "
                        f"scale-out counts requests above {format_duration(boundary)}, the nearest boundary at or "
                        f"below, an effective fraction of {boundary / objective.threshold:.3g}"
                    )
    out.extend(_tier_warnings(spec))
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.consistency is None:
                continue
            limit = slo.consistency.max_p99_over_p50
            certain = limit * bucket_spacing(spec.histogram_buckets(rc, sli)) ** 2
            if certain > CONSISTENCY_BLIND * limit:
                out.append(
                    f"{rc.name} {sli.value}: the histogram's buckets are too coarse for the p99/p50 limit of "
                    f"{limit:g}: a true ratio up to {certain:.3g} may never fire; use buckets at most "
                    f"{CONSISTENCY_BLIND**0.5:.2g}x apart"
                )
    return out


def _tier_warnings(spec: Spec) -> list[str]:
    """`alerting.tiers` cells that no SLO defines alert on nothing, and silently, since the list replaces the
    default: say so."""
    out: list[str] = []
    chosen = (
        ("page", spec.alerting.page_tiers, DEFAULT_PAGE_TIERS),
        ("ticket", spec.alerting.ticket_tiers, DEFAULT_TICKET_TIERS),
    )
    for kind, cells, default in chosen:
        if cells == default:
            continue  # the design's defaults: a spec without p95 tiers simply has no p95 ticket
        for cell in cells:
            if not any(cell.percentile in slo.tiers.tier(cell.tier) for rc in spec.classes for slo in rc.slos.values()):
                out.append(
                    f"alerting.tiers.{kind}: no SLO has a {cell} threshold, so {cell} alerts on nothing; add "
                    f"{cell.percentile} to an SLO's {cell.tier} tier or remove it"
                )
    return out
