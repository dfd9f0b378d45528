"""`source: tgi`: Hugging Face text-generation-inference's router `/metrics`.

Names from router/src/server.rs, backends/v3/src/{queue,backend}.rs and docs/source/reference/metrics.md (v3.3.7).
No model label (one model per server), no engine index (replicas are told apart by the scrape target), no TTFT or
inter-token histogram, no KV-cache gauge and no preemption counter. Token counts come from the `_sum` of TGI's
per-request token histograms, which only grow. Every `*_duration` histogram has the same buckets, which slokit
then knows for the alignment check, also where an SLO names one with `metric: {histogram: tgi_...}`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from slokit import schema
from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import SignalSource


def _duration_buckets() -> tuple[float, ...]:
    # router/src/server.rs: 35 buckets, value = 0.0001 then value *= 1.5 before each push (f64, in this order, so
    # the floats and their `le` spellings are the ones TGI writes).
    value, out = 0.0001, []
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


DURATION_BUCKETS: Final = _duration_buckets()
HISTOGRAMS: Final = MappingProxyType(
    {
        Sli.E2E: "tgi_request_duration",  # whole request, validation to last token
        Sli.TPOT: "tgi_request_mean_time_per_token_duration",  # per request: decode time / generated tokens
    }
)

METRICS: Final = SourceMetrics(
    model_label=None,
    engine_label="instance",
    class_label=None,
    latency=HISTOGRAMS,
    queue_time="tgi_request_queue_duration",
    requests_running="tgi_batch_current_size",
    requests_waiting="tgi_queue_size",
    kv_cache_usage=None,
    preemptions=None,
    prompt_tokens="tgi_request_input_length_sum",
    generation_tokens="tgi_request_generated_tokens_sum",
    requests_finished="tgi_request_success",
    finish_reason_label="",  # TGI's success counter carries no finish reason
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram="tgi_request_input_length",
)


class Tgi(SignalSource):
    """TGI's router metrics."""

    name = "tgi"
    short = "TGI"
    title = "TGI's metrics"
    upstream = "huggingface/text-generation-inference router/src/server.rs (v3.3.7)"
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType(dict.fromkeys(HISTOGRAMS, DURATION_BUCKETS))
    lacks_note = "TTFT and ITL histograms; model label (one model per server); KV-cache usage; preemptions"

    def known_buckets(self, histogram: str) -> tuple[float, ...] | None:
        """TGI sets the same buckets on every *_duration histogram."""
        return DURATION_BUCKETS if histogram.startswith("tgi_") and histogram.endswith("_duration") else None

    def lacks(self, sli: Sli) -> str:
        return (
            f"TGI exports no {schema.SLI_TITLES[sli]} histogram (its router has tgi_request_duration for e2e and "
            "tgi_request_mean_time_per_token_duration for tpot); measure it at a gateway in front of TGI and name "
            "that histogram with metric: {histogram: ..., unit: ...}"
        )

    def buckets_what(self, sli: Sli) -> str:
        return f"TGI's {METRICS.latency[sli]} buckets"

    def bucket_how(self, sli: Sli) -> str:
        return "TGI sets them in router/src/server.rs (0.00015 s, then x1.5 each); pick one of them"
