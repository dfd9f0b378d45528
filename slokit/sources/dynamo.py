"""`source: dynamo`: NVIDIA Dynamo's OpenAI-compatible frontend (the HTTP entry point in front of the workers).

Names, labels and buckets from lib/llm/src/http/service/metrics.rs (`Metrics::new`, ai-dynamo/dynamo commit
79a21ca4f5200e76a2bcc19580eb6176298c7e59) and the `dynamo_frontend` prefix of lib/runtime/src/metrics/
prometheus_names.rs: histograms labelled `model` only, with log-spaced buckets rounded to two significant figures
(`generate_log_buckets(min, max, count)`: 0, then count-1 values from min to max; `round_to_sig_figs` rounds half
away from zero), configurable per histogram with DYN_METRICS_{TTFT,ITL,REQUEST_DURATION}_{MIN,MAX,COUNT}. The
frontend measures what the client sees (TTFT, ITL, request duration) per model, with no request class, no engine
index (replicas are frontend pods, told apart by `instance`), no TPOT histogram and no KV-cache gauge (the workers
export those under their engine's own names).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Final

from slokit import schema
from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import SignalSource


def _round_to_sig_figs(value: float, figures: int) -> float:
    """metrics.rs `round_to_sig_figs`: Rust's `f64::round` rounds half away from zero (values here are > 0)."""
    scale = 10.0 ** (figures - 1 - math.floor(math.log10(abs(value))))
    return math.floor(value * scale + 0.5) / scale


def log_buckets(low: float, high: float, count: int) -> tuple[float, ...]:
    """metrics.rs `generate_log_buckets`: 0.0, then `count - 1` log-spaced values up to `high` (the first value
    above `low`), each rounded to two significant figures, consecutive duplicates removed."""
    out = [0.0]
    for i in range(1, count):
        value = math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1))
        rounded = _round_to_sig_figs(value, 2)
        if rounded != out[-1]:
            out.append(rounded)
    return tuple(out)


# Defaults as Metrics::new passes them to parse_bucket_config (the doc comment there says 256 for the request
# duration's maximum; the code passes 512).
TTFT_BUCKETS: Final = log_buckets(0.001, 480.0, 18)
ITL_BUCKETS: Final = log_buckets(0.001, 2.0, 13)
REQUEST_DURATION_BUCKETS: Final = log_buckets(1.0, 512.0, 10)

METRICS: Final = SourceMetrics(
    model_label="model",
    engine_label="instance",
    class_label=None,
    latency=MappingProxyType(
        {
            Sli.TTFT: "dynamo_frontend_time_to_first_token_seconds",
            Sli.ITL: "dynamo_frontend_inter_token_latency_seconds",
            Sli.E2E: "dynamo_frontend_request_duration_seconds",
        }
    ),
    queue_time="",  # no queue-time histogram (the HTTP queue is a gauge: requests without a first token yet)
    requests_running="dynamo_frontend_inflight_requests",
    requests_waiting="dynamo_frontend_queued_requests",
    kv_cache_usage=None,
    preemptions=None,
    prompt_tokens="dynamo_frontend_input_sequence_tokens_sum",
    generation_tokens="dynamo_frontend_output_tokens_total",
    requests_finished="dynamo_frontend_requests_total",
    finish_reason_label="",  # its `status` is success or error, not a finish reason
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram="dynamo_frontend_input_sequence_tokens",
)


class Dynamo(SignalSource):
    """Dynamo's frontend metrics."""

    name = "dynamo"
    short = "Dynamo"
    title = "Dynamo's frontend metrics"
    upstream = "ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs @ 79a21ca4f5200e76a2bcc19580eb6176298c7e59"
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType(
        {Sli.TTFT: TTFT_BUCKETS[1:], Sli.ITL: ITL_BUCKETS[1:], Sli.E2E: REQUEST_DURATION_BUCKETS[1:]}
    )
    BUCKET_FLAGS = MappingProxyType(
        {
            Sli.TTFT: "DYN_METRICS_TTFT_{MIN,MAX,COUNT}",
            Sli.ITL: "DYN_METRICS_ITL_{MIN,MAX,COUNT}",
            Sli.E2E: "DYN_METRICS_REQUEST_DURATION_{MIN,MAX,COUNT}",
        }
    )
    lacks_note = "TPOT histogram (use ITL); request class; KV-cache usage and preemptions (a frontend has neither)"
    pod_component = "frontend"
    scale_target = "the Deployment of the model's workers (or leave scaling to Dynamo's planner)"

    def lacks(self, sli: Sli) -> str:
        return (
            f"Dynamo's frontend exports no {schema.SLI_TITLES[sli]} histogram (it has time to first token, "
            "inter-token latency and request duration); use itl, or read the workers' engine histograms with "
            "metric: {histogram: ...}"
        )

    def no_kv_cache(self) -> str:
        return (
            "Dynamo's frontend exports no KV-cache usage (a frontend has no KV cache; its gauges are "
            "dynamo_frontend_queued_requests and dynamo_frontend_inflight_requests): drop kv_cache_usage_max, and "
            "alert on the workers' own KV-cache gauges with a spec for their engine"
        )

    def bucket_how(self, sli: Sli) -> str:
        return (
            f"or set {self.BUCKET_FLAGS[sli]} on the frontend so the threshold is one of its rounded log-spaced "
            "boundaries, and name the histogram with metric: {histogram: ..., buckets: [...]}"
        )
