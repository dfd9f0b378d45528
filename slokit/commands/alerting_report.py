"""What `slokit validate` says about a spec's alerts: the burn-rate table per objective, and the warnings.

An on-call team should know before rollout how fast each objective pages: a 90% objective cannot use the 14.4x
tier (it would need 144% errors), and a 95% objective's 1h/5m tier needs 40 minutes of total outage. The table
shows each tier as generated (after adaptation), so nobody has to work the arithmetic out by hand.
"""

from __future__ import annotations

from slokit.generate import alerts
from slokit.schema import Sli, Source
from slokit.spec import Spec
from slokit.units import format_duration

OUTAGE: float = 1.0  # error ratio of a total outage
BUDGET_RATE: float = 2.0  # "twice the budget rate": an error ratio of 2 x the error budget


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
            if sli is Sli.TTFT and spec.source is Source.VLLM:
                boundary = alerts.scale_out_boundary(spec, rc)
                wanted = objective.threshold * spec.alerting.scale_out.fraction_of_slo
                if abs(boundary - wanted) > 1e-9 * wanted:
                    out.append(
                        f"{rc.name} ttft: vLLM has no bucket boundary at {format_duration(wanted)} "
                        f"({spec.alerting.scale_out.fraction_of_slo:g} x {format_duration(objective.threshold)}); "
                        f"scale-out counts requests above {format_duration(boundary)}, the nearest boundary at or "
                        f"below, an effective fraction of {boundary / objective.threshold:.3g}"
                    )
    return out
