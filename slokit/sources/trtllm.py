"""`source: trtllm`: NVIDIA TensorRT-LLM's `trtllm-serve` `/metrics`.

Names, labels and default buckets from tensorrt_llm/metrics/collector.py (`MetricsCollector`, NVIDIA/TensorRT-LLM
commit 050f80def8df236e326949c8bd9dee10fd896a83): every name carries the `trtllm_` prefix, every series the labels
`trtllm-serve` passes in (`model_name`, `engine_type`). TensorRT-LLM has no inter-token-latency histogram, only a
per-request time per output token (`trtllm_time_per_output_token_seconds`, vLLM's ITL ladder); no per-engine index
(replicas are told apart by the scrape target's `instance`), no request class and no preemption counter. Buckets
change with `prometheus_metrics_config.time_to_first_token_buckets` (and `time_per_output_token_buckets`,
`e2e_request_latency_buckets`) in the LLM API options.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import SignalSource
from slokit.sources.vllm_releases import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS

# collector.py's defaults are vLLM's ladders (the collector is adapted from vLLM's): the same boundaries, copied
# there, named here once.
METRICS: Final = SourceMetrics(
    model_label="model_name",
    engine_label="instance",
    class_label=None,
    latency=MappingProxyType(
        {
            Sli.TTFT: "trtllm_time_to_first_token_seconds",
            Sli.TPOT: "trtllm_time_per_output_token_seconds",
            Sli.E2E: "trtllm_e2e_request_latency_seconds",
        }
    ),
    queue_time="trtllm_request_queue_time_seconds",
    requests_running="trtllm_num_requests_running",
    requests_waiting="trtllm_num_requests_waiting",
    kv_cache_usage="trtllm_kv_cache_utilization",  # share of KV-cache blocks in use, 0..1
    preemptions=None,
    prompt_tokens="trtllm_prompt_tokens_total",
    generation_tokens="trtllm_generation_tokens_total",
    requests_finished="trtllm_request_success_total",
    finish_reason_label="finished_reason",
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram=None,
)


class TensorRtLlm(SignalSource):
    """TensorRT-LLM's trtllm-serve metrics."""

    name = "trtllm"
    short = "TensorRT-LLM"
    title = "TensorRT-LLM's own metrics"
    upstream = "NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py @ 050f80def8df236e326949c8bd9dee10fd896a83"
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType(
        {Sli.TTFT: TTFT_BUCKETS, Sli.TPOT: ITL_BUCKETS, Sli.E2E: REQUEST_LATENCY_BUCKETS}
    )
    BUCKET_FLAGS = MappingProxyType(
        {
            Sli.TTFT: "prometheus_metrics_config.time_to_first_token_buckets",
            Sli.TPOT: "prometheus_metrics_config.time_per_output_token_buckets",
            Sli.E2E: "prometheus_metrics_config.e2e_request_latency_buckets",
        }
    )
    lacks_note = "ITL histogram (use TPOT); request class; preemptions; prefix-cache counters"
    metrics_path = "/prometheus/metrics"  # trtllm-serve: /metrics is its JSON iteration statistics

    def lacks(self, sli: Sli) -> str:
        if sli is Sli.ITL:
            return (
                "TensorRT-LLM exports no inter-token latency histogram (only a per-request time per output token, "
                "trtllm_time_per_output_token_seconds); use a tpot SLO instead, or measure ITL at a gateway in front "
                "of it (source: llm-d, dynamo) and name that histogram with metric: {histogram: ...}"
            )
        return super().lacks(sli)
