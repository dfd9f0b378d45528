"""`source: slokit`: slokit's stat-logger plugin inside vLLM (slokit/exporters/vllm.py writes these series).

Labels `model`, `engine`, `class`; every request the spec does not classify is counted as class `other`. Buckets
are placed on the spec's thresholds (the default ladder plus every threshold, the scale-out boundary and, for a
consistency SLO, a dense R10 ladder), so every threshold is a boundary by construction. TTFT and E2E are also
measured at the API server's ASGI layer (`measured_at: frontend`, the default), which sees time an overloaded API
server holds a request before the engine does. Names follow prometheus.io's naming rules: `slokit_` prefix, base
units, no colons (vLLM unregisters every collector whose name starts with `vllm:` when an engine starts).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Final

from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import DraftAcceptance, SignalSource
from slokit.sources.vllm import DRAFT_ACCEPTANCE

if TYPE_CHECKING:
    from slokit.spec.model import Spec, VllmSettings

# Default ladders for slokit's exporter; the spec's thresholds are merged in, so they are always boundaries.
DEFAULT_BUCKETS: Final = MappingProxyType(
    {
        Sli.TTFT: (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0),
        Sli.ITL: (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
        Sli.TPOT: (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
        Sli.E2E: (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
    }
)
# Renard's R10 series: ten boundaries a decade, neighbours at most 1.26x apart (the bucket resolution a latency
# histogram needs when an alert bounds p99/p50 by bucket edges).
R10: Final = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)


def dense_ladder(low: float, high: float) -> tuple[float, ...]:
    """R10 boundaries from `low` to `high` (seconds), both included as they are."""
    out = {low, high}
    decade = 10.0 ** math.floor(math.log10(low))
    while decade <= high:
        out.update(round(step * decade, 9) for step in R10 if low < step * decade < high)
        decade *= 10
    return tuple(sorted(out))


QUEUE_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

METRICS: Final = SourceMetrics(
    model_label="model",
    engine_label="engine",
    class_label="class",
    latency=MappingProxyType(
        {
            Sli.TTFT: "slokit_time_to_first_token_seconds",
            Sli.ITL: "slokit_inter_token_latency_seconds",
            Sli.TPOT: "slokit_time_per_output_token_seconds",
            Sli.E2E: "slokit_e2e_request_latency_seconds",
        }
    ),
    queue_time="slokit_request_queue_time_seconds",
    requests_running="slokit_requests_running",
    requests_waiting="slokit_requests_waiting",
    kv_cache_usage="slokit_kv_cache_usage_ratio",
    preemptions="slokit_preemptions_total",
    prompt_tokens="slokit_prompt_tokens_total",
    generation_tokens="slokit_generation_tokens_total",
    requests_finished="slokit_requests_finished_total",
    finish_reason_label="finish_reason",
    prefix_cache_queries="slokit_prefix_cache_queries_total",
    prefix_cache_hits="slokit_prefix_cache_hits_total",
    prompt_tokens_histogram="slokit_request_prompt_tokens",
    frontend_latency=MappingProxyType(
        {
            Sli.TTFT: "slokit_frontend_time_to_first_token_seconds",
            Sli.E2E: "slokit_frontend_e2e_request_latency_seconds",
        }
    ),
    failed="slokit_requests_failed_total",
    frontend_failed="slokit_frontend_requests_failed_total",
)

# The exporter's own series.
EXPORTER_INFO: Final = "slokit_exporter_info"  # labels: spec_hash, slokit_version, vllm_version
EXPORTER_ERRORS: Final = "slokit_exporter_errors_total"  # label: stage
RECORD_DURATION: Final = "slokit_record_duration_seconds"
RECORD_DURATION_BUCKETS: Final = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
)  # fmt: skip
# Per-class request counts as the exporter's frontend sees them (labels model, class): running = has its first
# token, waiting = admitted without a first token yet (queued or prefilling). Engine totals are requests_running
# and requests_waiting above (labels model, engine), from vLLM's scheduler.
CLASS_REQUESTS_RUNNING: Final = "slokit_class_requests_running"
CLASS_REQUESTS_WAITING: Final = "slokit_class_requests_waiting"
SPEC_ENV: Final = "SLOKIT_SPEC"  # environment variable naming the spec file the exporter reads


class SlokitExporter(SignalSource):
    """slokit's exporter: per-class histograms with boundaries on the spec's thresholds."""

    name = "slokit"
    short = "slokit"
    title = "slokit's exporter's metrics"
    upstream = "slokit/exporters/vllm.py (this repository)"
    METRICS = METRICS
    DEFAULT_BUCKETS = DEFAULT_BUCKETS
    counts_other_class = True
    needs_plugin = True
    deploys_engine = True
    draft_acceptance: ClassVar[DraftAcceptance | None] = DRAFT_ACCEPTANCE  # vLLM's own counters, same pods
    lacks_note = "nothing slokit reads (runs only inside vLLM)"

    def fixed_buckets(self, vllm: VllmSettings, sli: Sli) -> tuple[float, ...] | None:
        del vllm, sli
        return None

    def buckets(self, spec: Spec, sli: Sli) -> tuple[float, ...]:
        """The default ladder plus every threshold the spec names for that SLI."""
        ladder = DEFAULT_BUCKETS[sli]
        values = set(ladder)
        for request_class in spec.classes:
            slo = request_class.slos.get(sli)
            if slo is not None:
                values.update(slo.thresholds())
                if sli is Sli.TTFT and slo.objective is not None:
                    # The scale-out signal counts requests above this boundary (see generate/alerts.py).
                    values.add(round(slo.objective.threshold * spec.alerting.scale_out.fraction_of_slo, 9))
                if slo.consistency is not None:
                    # The consistency alert proves p99/p50 from bucket edges: neighbours at most 1.26x apart make
                    # any true ratio above limit x 1.26^2 fire, wherever p50 and p99 fall.
                    values.update(dense_ladder(ladder[0], ladder[-1]))
        return tuple(sorted(values))
