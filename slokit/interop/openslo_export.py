"""`slokit export openslo`: a spec's objectives as OpenSLO v1 Service, SLI and SLO documents.

Each objective (class x SLI with an `objective:`) becomes one SLI (ratioMetric: the threshold's `le` bucket over
the histogram's `_count`, both as PromQL rates) and one SLO (Occurrences budgeting, rolling window of the spec,
target = percentile / 100). Annotations under `slokit.dev/` keep what OpenSLO has no field for (SLI kind, class,
model label), so `slokit import` of the export gives back the same objectives.
"""

from __future__ import annotations

from typing import Any, Final

from slokit import promql
from slokit.promql import selector
from slokit.spec import Spec
from slokit.units import format_le, prom_duration

API: Final = "openslo/v1"


def _query(name: str, matchers: list[promql.Matcher]) -> str:
    return f"sum(rate({selector(name, matchers)}[5m]))"


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
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            hist = spec.histogram(rc, sli)
            matchers: list[promql.Matcher] = []
            if hist.model_label is not None:
                matchers.append(promql.one_of(hist.model_label, sorted(set(rc.models))))
            matchers.extend(hist.matchers)
            bound = hist.le_for(slo.objective.threshold)
            good = _query(f"{hist.name}_bucket", [*matchers, ("le", "=", format_le(bound))])
            total = _query(f"{hist.name}_count", matchers)
            name = f"{spec.service}-{rc.name}-{sli.value}"
            annotations = {
                "slokit.dev/class": rc.name,
                "slokit.dev/sli": sli.value,
                "slokit.dev/models": ",".join(rc.models),
            }
            if hist.model_label is not None:
                annotations["slokit.dev/model-label"] = hist.model_label
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
