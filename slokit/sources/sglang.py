"""`source: sglang`: SGLang's own `/metrics` (`--enable-metrics`).

Names and default buckets from python/sglang/srt/metrics/collector.py (TokenizerMetricsCollector and
SchedulerMetricsCollector; docs/references/production_metrics.md), as that file sets them when the server runs
without --bucket-time-to-first-token / --bucket-inter-token-latency / --bucket-e2e-request-latency. Label
`model_name`; no per-engine index label (per-replica signals split by the scrape target's `instance`); no request
class and no time-per-output-token histogram.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import SignalSource

TTFT_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
)  # fmt: skip
ITL_BUCKETS: Final = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6,
    0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0,
    1200.0, 1800.0, 2400.0,
)  # fmt: skip

METRICS: Final = SourceMetrics(
    model_label="model_name",
    engine_label="instance",
    class_label=None,
    latency=MappingProxyType(
        {
            Sli.TTFT: "sglang:time_to_first_token_seconds",
            Sli.ITL: "sglang:inter_token_latency_seconds",
            Sli.E2E: "sglang:e2e_request_latency_seconds",
        }
    ),
    queue_time="sglang:queue_time_seconds",
    requests_running="sglang:num_running_reqs",
    requests_waiting="sglang:num_queue_reqs",
    kv_cache_usage="sglang:token_usage",  # share of the KV-cache token pool in use, 0..1
    preemptions="sglang:num_retracted_requests_total",  # SGLang "retracts" a request when the KV cache runs out
    prompt_tokens="sglang:prompt_tokens_total",
    generation_tokens="sglang:generation_tokens_total",
    requests_finished="sglang:num_requests_total",
    finish_reason_label="",  # SGLang's request counter carries no finish reason
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram=None,
)


class Sglang(SignalSource):
    """SGLang's own metrics."""

    name = "sglang"
    short = "SGLang"
    title = "SGLang's own metrics"
    upstream = "sgl-project/sglang python/sglang/srt/metrics/collector.py"
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType({Sli.TTFT: TTFT_BUCKETS, Sli.ITL: ITL_BUCKETS, Sli.E2E: E2E_BUCKETS})
    BUCKET_FLAGS = MappingProxyType(
        {
            Sli.TTFT: "--bucket-time-to-first-token",
            Sli.ITL: "--bucket-inter-token-latency",
            Sli.E2E: "--bucket-e2e-request-latency",
        }
    )
    lacks_note = "TPOT histogram (use ITL); request class; prefix-cache counters; failures before the first token"
