"""`source: otel-genai`: histograms that follow the OpenTelemetry GenAI semantic conventions, as Prometheus stores
them after the OTLP receiver's name translation.

Instruments from open-telemetry/semantic-conventions docs/gen-ai/gen-ai-metrics.md (commit
ce3b534088cbb00e0e9e5261acd7f01699ffedc9; model/gen-ai/metrics.yaml at b29e7598ef4bcc07a4eea087f39b1cfd6e1ccf51):
`gen_ai.server.time_to_first_token`, `gen_ai.server.time_per_output_token`, `gen_ai.server.request.duration`, all in
`s`, with the ExplicitBucketBoundaries that document advises. Prometheus's OTLP receiver (the default translation
strategy, UnderscoreEscapingWithSuffixes) replaces dots with underscores and appends the unit: `s` becomes
`_seconds`; attributes become labels the same way (`gen_ai.request.model` -> `gen_ai_request_model`), and the
resource's `service.instance.id` becomes `instance`. An AI gateway or engine that emits these measures per model
and operation, with no request class, no queue, KV-cache or preemption signal and no inter-token histogram.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from slokit import schema
from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import SignalSource

TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
TPOT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

METRICS: Final = SourceMetrics(
    model_label="gen_ai_request_model",
    engine_label="instance",
    class_label=None,
    latency=MappingProxyType(
        {
            Sli.TTFT: "gen_ai_server_time_to_first_token_seconds",
            Sli.TPOT: "gen_ai_server_time_per_output_token_seconds",
            Sli.E2E: "gen_ai_server_request_duration_seconds",
        }
    ),
    queue_time="",  # the conventions define no queue-time instrument
    # The GenAI conventions define no queue gauge (so no queue alert); the HTTP conventions'
    # `http.server.active_requests` (OTLP: `http_server_active_requests`) is the concurrency gauge such servers emit.
    requests_running="http_server_active_requests",
    requests_waiting=None,
    kv_cache_usage=None,
    preemptions=None,
    # gen_ai.client.token.usage is the conventions' only token instrument (label gen_ai_token_type: input, output).
    prompt_tokens="gen_ai_client_token_usage_sum",
    generation_tokens="gen_ai_client_token_usage_sum",
    requests_finished="gen_ai_server_request_duration_seconds_count",
    finish_reason_label="",
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram=None,
)


class OtelGenAi(SignalSource):
    """OpenTelemetry GenAI server metrics, read in Prometheus."""

    name = "otel-genai"
    short = "OpenTelemetry GenAI"
    title = "the OpenTelemetry GenAI metrics"
    upstream = (
        "open-telemetry/semantic-conventions docs/gen-ai/gen-ai-metrics.md @ ce3b534088cbb00e0e9e5261acd7f01699ffedc9"
    )
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType({Sli.TTFT: TTFT_BUCKETS, Sli.TPOT: TPOT_BUCKETS, Sli.E2E: DURATION_BUCKETS})
    lacks_note = "ITL histogram (use TPOT); request class; queue, KV-cache and preemption signals"
    scraped = False  # pushed over OTLP to Prometheus's receiver
    scale_target = "the Deployment of the engine pods behind the gateway that emits these metrics"

    def lacks(self, sli: Sli) -> str:
        return (
            f"the OpenTelemetry GenAI conventions define no {schema.SLI_TITLES[sli]} instrument (server-side they "
            "have time_to_first_token, time_per_output_token and request.duration); use tpot, or name the "
            "engine's own histogram with metric: {histogram: ...}"
        )

    def bucket_how(self, sli: Sli) -> str:
        return (
            "or configure a metric View with ExplicitBucketBoundaries that include it in the emitting SDK, and name "
            "the histogram with metric: {histogram: ..., buckets: [...]}"
        )
