"""`slokit validate --prometheus URL`: the histogram boundaries a running Prometheus actually holds, against the
thresholds the spec names.

A static check can only trust what the spec says about buckets (vLLM's fixed ladders, slokit's own, a custom
histogram's declared `buckets:`). A histogram the spec names without buckets (a gateway's, an imported SLO's) is
only known once it is scraped: a threshold that is not one of its `le` boundaries makes every good-event count a
guess, so this check reads the live `le` values of each SLO's histogram, in the spec's scope, and names the nearest
boundaries of any threshold that misses.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from slokit.generate.alerts import scale_out_boundary
from slokit.generate.queries import Queries, union
from slokit.report.prometheus import PrometheusApi
from slokit.schema import Sli
from slokit.spec import Spec
from slokit.units import format_duration


@dataclass(frozen=True)
class LiveFinding:
    """One problem found live: which SLO, what is wrong."""

    request_class: str
    sli: Sli
    message: str


def live_bucket_findings(
    spec: Spec, api: PrometheusApi, at: float | None = None
) -> tuple[list[str], list[LiveFinding]]:
    """(what was checked, problems) for every SLO of the spec, read at `at` (default now)."""
    when = time.time() if at is None else at
    queries = Queries(spec)
    checked: list[str] = []
    findings: list[LiveFinding] = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            wanted = dict.fromkeys(slo.thresholds(), "threshold")
            if sli is Sli.TTFT and slo.objective is not None:  # the boundary the scale-out signal counts against
                wanted.setdefault(scale_out_boundary(spec, rc), "scale-out boundary")
            if not wanted:
                continue
            hist = spec.histogram(rc, sli)
            terms = queries.histogram_terms(rc, sli, "_bucket")
            expr = f"count by (le) ({union(term.selector for term in terms)})"
            bounds: set[float] = set()
            for item in api.query(expr, when):
                try:
                    le = float(item["metric"].get("le", ""))
                except ValueError:
                    continue
                if math.isfinite(le):
                    bounds.add(round(le * hist.scale, 12))
            where = f"{rc.name} {sli.value} ({hist.name}_bucket)"
            if not bounds:
                findings.append(
                    LiveFinding(
                        rc.name,
                        sli,
                        f"{where}: no series at {api.url} for {' or '.join(t.selector for t in terms)}; is the "
                        "histogram scraped, and are the name, model label and selector right?",
                    )
                )
                continue
            checked.append(f"{where}: {len(bounds)} live boundaries")
            for threshold, what in sorted(wanted.items()):
                if any(math.isclose(b, threshold, rel_tol=1e-6) for b in bounds):
                    continue
                below = max((b for b in bounds if b < threshold), default=None)
                above = min((b for b in bounds if b > threshold), default=None)
                near = " and ".join(format_duration(b) for b in (below, above) if b is not None)
                findings.append(
                    LiveFinding(
                        rc.name,
                        sli,
                        f"{where}: the {what} {format_duration(threshold)} is not a live bucket boundary "
                        f"(nearest are {near}); its events would be counted at a neighbouring boundary. Move the "
                        "threshold to a boundary, or add it to the histogram's buckets and declare them in "
                        "`metric.buckets`.",
                    )
                )
    return checked, findings
