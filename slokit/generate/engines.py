"""The rule engines `slokit generate --engine` writes for, and what each one's rule file needs beyond Prometheus's.

* `prometheus` (default): Prometheus 2.42+ rule files (also what prometheus-operator, and Thanos or Mimir without
  their own fields, load).
* `victoriametrics`: vmalert + VictoriaMetrics. vmalert writes each recording rule's result through remote write,
  so a rule never sees another rule's result of the same evaluation, and VictoriaMetrics answers a query for a time
  within `-search.latencyOffset` (30s) of now as of 30s ago. So every group asks with `nocache=1` (answers as of
  the evaluation time), alert-critical records read raw series and settled records (`offset` >= their block) only,
  and burn-rate alerts compute their burn rates themselves. vmalert 1.79 refuses `keep_firing_for`, so it is left
  out. Its Kubernetes object is a VMRule (the PrometheusRule CRD has no `params`). See rules.py and docs/rules.md.
* `thanos`: Thanos Ruler; every group says `partial_response_strategy: abort`, so an evaluation that cannot reach
  every store fails instead of recording undercounted events.
* `mimir`: Mimir (or Cortex) ruler; the file is a `mimirtool rules load`/`sync` file with a top-level `namespace`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final


class Engine(StrEnum):
    """Where the generated rules are evaluated."""

    PROMETHEUS = "prometheus"
    VICTORIAMETRICS = "victoriametrics"
    THANOS = "thanos"
    MIMIR = "mimir"


DEFAULT: Final = Engine.PROMETHEUS

# vmalert group `params`: sent with every query of the group.
VM_GROUP_PARAMS: Final = {"nocache": ["1"]}
THANOS_PARTIAL_RESPONSE: Final = "abort"


def mimir_namespace(service: str) -> str:
    """The Mimir ruler namespace of a service's rule file (`mimirtool rules load` reads it from the file)."""
    return f"slokit-{service}"


def group_fields(engine: Engine) -> dict[str, Any]:
    """Fields the engine wants on every rule group, beyond name, interval and rules."""
    if engine is Engine.VICTORIAMETRICS:
        return {"params": {k: list(v) for k, v in VM_GROUP_PARAMS.items()}}
    if engine is Engine.THANOS:
        return {"partial_response_strategy": THANOS_PARTIAL_RESPONSE}
    return {}


def promtool_view(data: Any) -> Any:
    """A Thanos or Mimir rule file's data as promtool reads it (without the engine's own fields)."""
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        return data
    groups = []
    for group in data["groups"]:
        if isinstance(group, dict):
            group = {k: v for k, v in group.items() if k != "partial_response_strategy"}
        groups.append(group)
    return {"groups": groups}
