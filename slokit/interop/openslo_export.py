"""`slokit export openslo`: a spec's objectives as OpenSLO v1 Service, SLI and SLO documents.

Each objective (class x SLI with an `objective:`) becomes one SLI (ratioMetric: the threshold's `le` bucket over
the histogram's `_count`, both as PromQL rates) and one SLO (Occurrences budgeting, rolling window of the spec,
target = percentile / 100). The bucket's `le` matcher is the rules' own: `le=~"5\\.0|5"` for a whole bound, which
Python clients write `5.0` and Go clients `5`. Annotations under `slokit.dev/` keep what OpenSLO has no field for
(SLI kind, class, model label, and the histogram's bucket boundaries), so `slokit import` of the export gives back
the same objectives over the same buckets: without them an imported histogram gets the default ladder, and every
boundary that is not a threshold (the scale-out boundary at 0.8 x the TTFT objective, the consistency ladder) moves
to the nearest default bucket below it.
"""

from __future__ import annotations

from typing import Any, Final

from slokit import promql
from slokit.generate.queries import Queries
from slokit.interop.model import BUCKETS_ANNOTATION, format_buckets
from slokit.spec import Spec
from slokit.units import prom_duration

API: Final = "openslo/v1"


def _query(selectors: list[str]) -> str:
    return "sum(" + " or ".join(f"rate({s}[5m])" for s in selectors) + ")"


def documents(spec: Spec) -> list[dict[str, Any]]:
    """Service first, then an SLI and an SLO per objective, in spec order."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": API,
            "kind": "Service",
            "metadata": {"name": spec.service},
            "spec": {"description": spec.description or f"{spec.service} (exported by slokit)"},
        }
    ]
    queries = Queries(spec)
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            hist = spec.histogram(rc, sli)
            # In the spec's deployment scope (`selector:`), one selector per distinct scope of the class's models.
            le = promql.le_matcher(hist.le_for(slo.objective.threshold))
            good = _query([t.selector for t in queries.histogram_terms(rc, sli, "_bucket", extra=[le])])
            total = _query([t.selector for t in queries.histogram_terms(rc, sli, "_count")])
            name = f"{spec.service}-{rc.name}-{sli.value}"
            annotations = {
                "slokit.dev/class": rc.name,
                "slokit.dev/sli": sli.value,
                "slokit.dev/models": ",".join(rc.models),
            }
            if hist.model_label is not None:
                annotations["slokit.dev/model-label"] = hist.model_label
            if hist.buckets is not None:  # in the histogram's own unit, as its le labels read
                annotations[BUCKETS_ANNOTATION] = format_buckets(hist.buckets, hist.scale)
            source = {"type": "Prometheus"}
            docs.append(
                {
                    "apiVersion": API,
                    "kind": "SLI",
                    "metadata": {"name": name, "annotations": annotations},
                    "spec": {
                        "description": f"{sli.value} of {rc.name}: requests at or under the threshold",
                        "ratioMetric": {
                            "counter": True,
                            "good": {"metricSource": {**source, "spec": {"query": good}}},
                            "total": {"metricSource": {**source, "spec": {"query": total}}},
                        },
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": API,
                    "kind": "SLO",
                    "metadata": {"name": name, "annotations": annotations},
                    "spec": {
                        **({"description": rc.description} if rc.description else {}),
                        "service": spec.service,
                        "indicatorRef": name,
                        "timeWindow": [{"duration": prom_duration(spec.window), "isRolling": True}],
                        "budgetingMethod": "Occurrences",
                        "objectives": [
                            {
                                "displayName": f"{slo.objective.percentile:g}% within {slo.objective.threshold:g}s",
                                "target": round(slo.objective.target_ratio, 9),
                            }
                        ],
                    },
                }
            )
    return docs
