"""Every metric, label and bucket table slokit reads or writes, per source.

Generators, exporters, dashboards and runbooks never spell a metric name themselves; they ask this module. That
keeps a vLLM rename (it has happened: `gpu_cache_usage_perc` -> `kv_cache_usage_perc`,
`time_per_output_token_seconds` -> `inter_token_latency_seconds`) a one-line change.

Two sources of request latency exist:

* `vllm`: vLLM's own `/metrics`. Fixed names, labels `model_name` and `engine`, buckets fixed per vLLM version
  (configurable only with `--custom-histogram-buckets` from 0.32). No request class.
* `slokit`: slokit's stat-logger plugin inside vLLM. Labels `model`, `engine`, `class`; buckets placed on the
  spec's thresholds, so every threshold is a boundary by construction.
* `sglang`: SGLang's own `/metrics` (`--enable-metrics`). `sglang:` names, label `model_name`, fixed default
  buckets per histogram (changeable per server with `--bucket-time-to-first-token` and friends). No request class.

Any SLO may also read a histogram of its own (`metric: {histogram: ...}` in the spec, `CustomHistogram` below): a
gateway's, another engine's, or one imported from a Pyrra/Sloth/OpenSLO file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class Source(StrEnum):
    """Where request-latency histograms come from."""

    VLLM = "vllm"
    SLOKIT = "slokit"
    SGLANG = "sglang"
    TGI = "tgi"


class Sli(StrEnum):
    """The latency indicators a class can have an SLO on."""

    TTFT = "ttft"  # time to first token: prefill, grows with prompt length
    ITL = "itl"  # inter-token latency, one observation per engine output event
    TPOT = "tpot"  # per-request mean time per output token after the first
    E2E = "e2e"  # end-to-end request latency


class MeasuredAt(StrEnum):
    """Where a latency SLI is measured: at slokit's ASGI layer in vLLM's API server, or inside the engine.

    The engine's clock starts when the request reaches the engine, so it cannot see time the request spent in an
    overloaded API server (HTTP parsing, tokenisation, a starved event loop); the frontend's clock starts when the
    HTTP request enters the app and stops at the bytes the client receives, which is what users feel.
    """

    FRONTEND = "frontend"
    ENGINE = "engine"


# SLIs the frontend can measure (the ASGI layer sees the first content byte and the last byte, not tokens).
FRONTEND_SLIS: Final = frozenset({Sli.TTFT, Sli.E2E})
# SLIs a request that ends before its first token is a bad event of (it has no ITL or TPOT to be slow at).
FAILED_SLIS: Final = frozenset({Sli.TTFT, Sli.E2E})


class FailReason(StrEnum):
    """Why a request ended before its first token (`reason` on the failure counters): a small fixed set.

    A client's own timeout is a disconnect (client_gone at the frontend, abort at the engine); vLLM has no
    server-side request timeout.
    """

    CLIENT_GONE = "client_gone"  # frontend: the client disconnected before the first content byte
    ABORT = "abort"  # engine: aborted (the client went away, or vLLM aborted it) before its first token
    ERROR = "error"  # an error response, an error event in the stream, an engine error (vLLM finish reason error)
    REJECTED = "rejected"  # vLLM's admission control refused it (--max-num-queued-reqs / --max-num-queued-tokens)


FAIL_REASON_LABEL: Final = "reason"
FRONTEND_STREAM_LABEL: Final = "stream"  # "true": a streamed request (the only kind the frontend's TTFT observes)

SLI_TITLES: Final = MappingProxyType(
    {
        Sli.TTFT: "time to first token",
        Sli.ITL: "inter-token latency",
        Sli.TPOT: "time per output token",
        Sli.E2E: "end-to-end latency",
    }
)

# --------------------------------------------------------------------------------------------------------------
# vLLM's bucket families (vllm/v1/metrics/buckets.py). 0.30 and 0.31 share 0.32's boundaries but cannot change
# them from the command line; 0.32 added --custom-histogram-buckets (PR #48867).
# --------------------------------------------------------------------------------------------------------------
VLLM_TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_ITL_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
VLLM_REQUEST_LATENCY_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip


@dataclass(frozen=True)
class VllmVersion:
    """What differs between vLLM releases that slokit must know about."""

    version: str
    buckets: MappingProxyType[str, tuple[float, ...]]  # bucket family -> boundaries
    custom_histogram_buckets: bool  # whether `--custom-histogram-buckets` exists


_VLLM_FAMILIES = MappingProxyType(
    {
        "time_to_first_token": VLLM_TTFT_BUCKETS,
        "inter_token_latency": VLLM_ITL_BUCKETS,
        "request_latency": VLLM_REQUEST_LATENCY_BUCKETS,
    }
)
VLLM_VERSIONS: Final = MappingProxyType(
    {
        "0.32": VllmVersion("0.32", _VLLM_FAMILIES, custom_histogram_buckets=True),
        "0.31": VllmVersion("0.31", _VLLM_FAMILIES, custom_histogram_buckets=False),
        "0.30": VllmVersion("0.30", _VLLM_FAMILIES, custom_histogram_buckets=False),
    }
)
DEFAULT_VLLM_VERSION: Final = "0.32"

# The bucket family each SLI's vLLM histogram belongs to (a family key of --custom-histogram-buckets).
VLLM_SLI_FAMILY: Final = MappingProxyType(
    {
        Sli.TTFT: "time_to_first_token",
        Sli.ITL: "inter_token_latency",
        Sli.TPOT: "inter_token_latency",
        Sli.E2E: "request_latency",
    }
)

# Default ladders for slokit's exporter; the spec's thresholds are merged in, so they are always boundaries.
SLOKIT_DEFAULT_BUCKETS: Final = MappingProxyType(
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


SLOKIT_QUEUE_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


# --------------------------------------------------------------------------------------------------------------
# Metric names and labels per source.
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceMetrics:
    """The names one source exposes. Histogram names are base names (add `_bucket`, `_count`, `_sum`)."""

    source: Source
    # None: the series carry no model label (TGI: one model per server, so a spec with that source has one model,
    # which the rules write onto every recorded series).
    model_label: str | None
    engine_label: str
    class_label: str | None  # None: the source cannot tell request classes apart
    latency: MappingProxyType[Sli, str]
    queue_time: str
    requests_running: str
    requests_waiting: str
    kv_cache_usage: str | None  # 0..1; None: the source has no KV-cache gauge (TGI), so no KV-cache alert
    preemptions: str | None  # counter; None: the source exports none (TGI)
    prompt_tokens: str  # counter
    generation_tokens: str  # counter
    requests_finished: str  # counter, label `finish_reason_label`
    finish_reason_label: str
    prefix_cache_queries: str | None
    prefix_cache_hits: str | None
    prompt_tokens_histogram: str | None  # per-request prompt length (TTFT against prompt length)
    # Histograms measured at the API server's ASGI layer (labels model, class; no engine: the frontend does not
    # know which data-parallel engine served a request). Empty: the source has none.
    frontend_latency: MappingProxyType[Sli, str] = field(default_factory=lambda: MappingProxyType({}))
    # Counters of requests that ended before their first token (label `reason`), so in no latency histogram: the
    # rules add them to the total (never to the good) events of the TTFT and E2E SLIs. `failed` is the engine's
    # (labels model, engine where the source has one, class where it has one); `frontend_failed` the frontend's
    # (labels model, class, reason, stream). None: the source exports none.
    failed: str | None = None
    frontend_failed: str | None = None

    def latency_metric(self, sli: Sli, measured_at: MeasuredAt) -> str:
        """The histogram an SLI is read from, where it is measured."""
        if measured_at is MeasuredAt.FRONTEND and sli in self.frontend_latency:
            return self.frontend_latency[sli]
        return self.latency[sli]

    def failed_metric(self, sli: Sli, measured_at: MeasuredAt) -> str | None:
        """The counter of requests that failed before their first token, for an SLI read where it is measured
        (the same side as its histogram, so no request is counted twice); None: none for this SLI."""
        if sli not in FAILED_SLIS:
            return None
        if measured_at is MeasuredAt.FRONTEND and sli in self.frontend_latency:
            return self.frontend_failed
        return self.failed


VLLM_METRICS: Final = SourceMetrics(
    source=Source.VLLM,
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

# SGLang's own metrics (python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector and
# SchedulerMetricsCollector; docs/references/production_metrics.md). Default buckets as that file sets them when
# the server runs without --bucket-time-to-first-token / --bucket-inter-token-latency / --bucket-e2e-request-latency.
# SGLang has no per-engine index label: per-replica signals split by the scrape target's `instance`.
SGLANG_TTFT_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
)  # fmt: skip
SGLANG_ITL_BUCKETS: Final = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6,
    0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
SGLANG_E2E_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0,
    1200.0, 1800.0, 2400.0,
)  # fmt: skip
# The server flag that changes each SLI's buckets (named in alignment errors).
SGLANG_BUCKET_FLAGS: Final = MappingProxyType(
    {
        Sli.TTFT: "--bucket-time-to-first-token",
        Sli.ITL: "--bucket-inter-token-latency",
        Sli.E2E: "--bucket-e2e-request-latency",
    }
)
SGLANG_BUCKETS: Final = MappingProxyType(
    {Sli.TTFT: SGLANG_TTFT_BUCKETS, Sli.ITL: SGLANG_ITL_BUCKETS, Sli.E2E: SGLANG_E2E_BUCKETS}
)

SGLANG_METRICS: Final = SourceMetrics(
    source=Source.SGLANG,
    model_label="model_name",
    engine_label="instance",
    class_label=None,
    # SGLang has no per-request time-per-output-token histogram; tpot is not available with source: sglang.
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


def _tgi_duration_buckets() -> tuple[float, ...]:
    # router/src/server.rs: 35 buckets, value = 0.0001 then value *= 1.5 before each push (f64, in this order, so
    # the floats and their `le` spellings are the ones TGI writes).
    value, out = 0.0001, []
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


# Hugging Face text-generation-inference (TGI) router metrics (router/src/server.rs): `source: tgi` reads them (see
# TGI_METRICS), and any SLO may name them (`metric: {histogram: tgi_request_duration}`); every `*_duration`
# histogram has the same buckets, which slokit then knows for the alignment check.
TGI_DURATION_BUCKETS: Final = _tgi_duration_buckets()
TGI_HISTOGRAMS: Final = MappingProxyType(
    {
        Sli.E2E: "tgi_request_duration",  # whole request, validation to last token
        Sli.TPOT: "tgi_request_mean_time_per_token_duration",  # per request: decode time / generated tokens
    }
)
TGI_QUEUE_HISTOGRAM: Final = "tgi_request_queue_duration"

# `source: tgi`: TGI's router /metrics (router/src/server.rs, backends/v3/src/{queue,backend}.rs and
# docs/source/reference/metrics.md; v3.3.7). No model label (one model per server), no engine index (replicas are
# told apart by the scrape target), no TTFT or inter-token histogram, no KV-cache gauge and no preemption counter.
# Token counts come from the `_sum` of TGI's per-request token histograms, which only grow.
TGI_METRICS: Final = SourceMetrics(
    source=Source.TGI,
    model_label=None,
    engine_label="instance",
    class_label=None,
    latency=TGI_HISTOGRAMS,
    queue_time=TGI_QUEUE_HISTOGRAM,
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


@dataclass(frozen=True)
class CustomHistogram:
    """The histogram one SLO reads, in one shape: a histogram the SLO names itself (`metric: {histogram: ...}`:
    any engine's, a gateway's, imported) or the source's own (engine or frontend, see `Spec.histogram`).

    `name` is the base name (add `_bucket`, `_count`). `model_label` None: the series carry no model label, and
    the SLO's (single) model is written onto the recorded series. `matchers` are the histogram's own (a custom
    histogram's `selector:`, or the source's class label); the spec's `selector:` scope is added by
    generate/queries.py. `scale` is seconds per unit of `le` (0.001 for a millisecond histogram). `buckets` in
    seconds, when known (alignment is then checked). `engine_label` None: the series carry no per-engine label
    (slokit's frontend histograms). `class_label` None: the series carry no class, which is written on.
    """

    name: str
    model_label: str | None
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value), op one of = != =~ !~
    scale: float = 1.0
    buckets: tuple[float, ...] | None = None
    engine_label: str | None = "instance"
    class_label: str | None = None

    def le_for(self, seconds: float) -> float:
        """The `le` value (in the histogram's unit) of a threshold: the declared boundary it names when there is
        one (TGI's boundaries such as 0.33252567300796504 s are written 332.526ms in a spec), else the threshold."""
        for bound in self.buckets or ():
            if math.isclose(bound, seconds, rel_tol=1e-4):
                seconds = bound
                break
        return seconds if self.scale == 1.0 else round(seconds / self.scale, 9)


# slokit's exporter. Names follow prometheus.io's naming rules: `slokit_` prefix, base units, no colons
# (vLLM unregisters every collector whose name starts with `vllm:` when an engine starts).
SLOKIT_METRICS: Final = SourceMetrics(
    source=Source.SLOKIT,
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

# Exporter self-metrics and the info metric (slokit source only).
SLOKIT_EXPORTER_INFO: Final = "slokit_exporter_info"  # labels: spec_hash, slokit_version, vllm_version
SLOKIT_EXPORTER_ERRORS: Final = "slokit_exporter_errors_total"  # label: stage
SLOKIT_RECORD_DURATION: Final = "slokit_record_duration_seconds"
SLOKIT_RECORD_DURATION_BUCKETS: Final = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
)  # fmt: skip
# Per-class request counts as the exporter's frontend sees them (labels model, class): running = has its first
# token, waiting = admitted without a first token yet (queued or prefilling). Engine totals are requests_running
# and requests_waiting above (labels model, engine), from vLLM's scheduler.
SLOKIT_CLASS_REQUESTS_RUNNING: Final = "slokit_class_requests_running"
SLOKIT_CLASS_REQUESTS_WAITING: Final = "slokit_class_requests_waiting"
SLOKIT_SPEC_ENV: Final = "SLOKIT_SPEC"  # environment variable naming the spec file the exporter reads

# Prometheus's own series of pending and firing alerts (labels alertname, alertstate and the alert's labels); the
# dashboards draw slokit's firing alerts on every panel from it.
PROMETHEUS_ALERTS: Final = "ALERTS"

# vLLM's speculative-decoding counters (only with --speculative-config; labels model_name, engine). The runbook's
# tuning section reads them for the draft acceptance rate.
VLLM_SPEC_DECODE_DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens_total"
VLLM_SPEC_DECODE_ACCEPTED_TOKENS: Final = "vllm:spec_decode_num_accepted_tokens_total"

OTHER_CLASS: Final = "other"  # class label value for requests the spec does not declare
DEFAULT_CLASS: Final = "default"  # the single class used when the exporter runs without a spec
CLASS_HEADER: Final = "x-slokit-class"  # HTTP header clients set to name their request class


def metrics_for(source: Source) -> SourceMetrics:
    """The metric table for a source."""
    if source is Source.SGLANG:
        return SGLANG_METRICS
    if source is Source.TGI:
        return TGI_METRICS
    return VLLM_METRICS if source is Source.VLLM else SLOKIT_METRICS


# --------------------------------------------------------------------------------------------------------------
# GPU sidecar (NVML). Label `UUID` as dcgm-exporter spells it, so series join with dcgm-exporter and vLLM.
# --------------------------------------------------------------------------------------------------------------
GPU_UUID_LABEL: Final = "UUID"
GPU_UP: Final = "slokit_gpu_up"
GPU_MEMORY_USED: Final = "slokit_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL: Final = "slokit_gpu_memory_total_bytes"
GPU_MEMORY_BANDWIDTH_UTILIZATION: Final = "slokit_gpu_memory_bandwidth_utilization_ratio"  # GPM, Hopper+
GPU_PEAK_MEMORY_BANDWIDTH: Final = "slokit_gpu_peak_memory_bandwidth_bytes_per_second"
GPU_NVLINK_TX: Final = "slokit_gpu_nvlink_transmitted_bytes_total"
GPU_NVLINK_RX: Final = "slokit_gpu_nvlink_received_bytes_total"
GPU_PCIE_TX: Final = "slokit_gpu_pcie_transmitted_bytes_total"
GPU_PCIE_RX: Final = "slokit_gpu_pcie_received_bytes_total"
GPU_XID_ERRORS: Final = "slokit_gpu_xid_errors_total"  # label `xid`
GPU_CLOCK_EVENT_REASONS: Final = "slokit_gpu_clock_event_active"  # label `reason`, 0/1
GPU_INFO: Final = "slokit_gpu_info"
# Labels of slokit_gpu_info (dcgm-exporter's spellings where it has one) and of the per-GPU breakdowns.
GPU_MODEL_NAME_LABEL: Final = "modelName"
GPU_PCI_BUS_ID_LABEL: Final = "pci_bus_id"
GPU_DRIVER_VERSION_LABEL: Final = "driver_version"
GPU_PRESET_LABEL: Final = "gpu_preset"  # slokit's preset name (h100-sxm, ...) or "" when slokit has no figures
GPU_LINK_LABEL: Final = "link"  # NVLink index
GPU_REASON_LABEL: Final = "reason"  # clock-event reason (sw_power_cap, hw_thermal_slowdown, ...)
GPU_XID_LABEL: Final = "xid"
GPU_SENSOR_LABEL: Final = "sensor"  # temperature sensor: gpu or memory
GPU_ERROR_LABEL: Final = "error"  # corrected or uncorrected (ECC, remapped rows)
GPU_METRIC_LABEL: Final = "metric"  # slokit_gpu_metric_supported: which metric
GPU_OP_LABEL: Final = "op"  # slokit_gpu_nvml_errors_total: which NVML call failed
GPU_MEMORY_RESERVED: Final = "slokit_gpu_memory_reserved_bytes"
GPU_MEMORY_BUSY: Final = "slokit_gpu_memory_busy_ratio"  # NVML's memory duty cycle: NOT bandwidth
GPU_UTILIZATION: Final = "slokit_gpu_utilization_ratio"  # NVML: share of time any kernel ran (duty cycle)
GPU_SM_ACTIVE: Final = "slokit_gpu_sm_active_ratio"  # GPM, Hopper+: share of SMs busy
GPU_TENSOR_ACTIVE: Final = "slokit_gpu_tensor_active_ratio"  # GPM, Hopper+: tensor pipes busy
GPU_SM_CLOCK: Final = "slokit_gpu_sm_clock_hertz"
GPU_MEMORY_CLOCK: Final = "slokit_gpu_memory_clock_hertz"
GPU_CLOCK_EVENT_SECONDS: Final = "slokit_gpu_clock_event_seconds_total"  # label `reason`
GPU_POWER: Final = "slokit_gpu_power_watts"
GPU_POWER_LIMIT: Final = "slokit_gpu_power_limit_watts"
GPU_ENERGY: Final = "slokit_gpu_energy_joules_total"
GPU_TEMPERATURE: Final = "slokit_gpu_temperature_celsius"  # label `sensor`
GPU_PCIE_LINK_GENERATION: Final = "slokit_gpu_pcie_link_generation"
GPU_PCIE_LINK_MAX_GENERATION: Final = "slokit_gpu_pcie_link_max_generation"
GPU_PCIE_LINK_WIDTH: Final = "slokit_gpu_pcie_link_width"
GPU_PCIE_LINK_MAX_WIDTH: Final = "slokit_gpu_pcie_link_max_width"
GPU_ECC_ERRORS: Final = "slokit_gpu_ecc_errors_total"  # label `error`; volatile counters (since driver load)
GPU_REMAPPED_ROWS: Final = "slokit_gpu_remapped_rows"  # label `error`
GPU_ROW_REMAP_PENDING: Final = "slokit_gpu_row_remap_pending"  # 1: a reset is needed to apply a remap
GPU_ROW_REMAP_FAILURE: Final = "slokit_gpu_row_remap_failure"  # 1: remapping failed (RMA candidate)
GPU_LAST_XID: Final = "slokit_gpu_last_xid"  # last XID seen (0: none); as DCGM_FI_DEV_XID_ERRORS
GPU_METRIC_SUPPORTED: Final = "slokit_gpu_metric_supported"  # labels UUID, metric; 0/1
GPU_NVML_ERRORS: Final = "slokit_gpu_nvml_errors_total"  # labels op, error
GPU_COLLECT_DURATION: Final = "slokit_gpu_collect_duration_seconds"
GPU_LAST_COLLECT: Final = "slokit_gpu_last_collect_timestamp_seconds"
GPU_SNAPSHOT_AGE: Final = "slokit_gpu_snapshot_age_seconds"  # age of the poll a scrape serves (never waits on NVML)
GPU_EXPORTER_PORT: Final = 9835  # default port of `slokit exporter gpu`


# --------------------------------------------------------------------------------------------------------------
# Recorded series (Prometheus rules) that dashboards, runbooks, autoscalers and the demo read. `level:metric:ops`.
# Labels on every SLO series: service, model, class, slo (the Sli value).
# --------------------------------------------------------------------------------------------------------------
RULE_LABEL_SERVICE: Final = "service"
RULE_LABEL_MODEL: Final = "model"
RULE_LABEL_CLASS: Final = "class"
RULE_LABEL_SLO: Final = "slo"
RULE_LABEL_ENGINE: Final = "engine"
# Marks each term of a tiled window so `or` keeps them all before they are summed away (never on a stored series).
RULE_LABEL_TILE: Final = "slokit_tile"
# On the per-series counter record: which raw counter (metric name) the series is the last sample of, and the
# spec's service (its own label, since scraped series often carry a `service` label of their own).
RULE_LABEL_COUNTER: Final = "slokit_counter"
RULE_LABEL_COUNTER_SERVICE: Final = "slokit_service"
RULE_LABEL_CAUSE: Final = "cause"  # on engine alerts that ride along a page of their model (value: CAUSE_ENGINE)
CAUSE_ENGINE: Final = "engine"

# Labels and annotations every alert carries (the monitoring-mixin conventions); the SLO labels above name the rest.
ALERT_LABEL_SEVERITY: Final = "severity"
ALERT_LABEL_NAME: Final = "alertname"
ANNOTATION_SUMMARY: Final = "summary"
ANNOTATION_DESCRIPTION: Final = "description"
ANNOTATION_RUNBOOK_URL: Final = "runbook_url"
RESERVED_ALERT_LABELS: Final = frozenset(
    {ALERT_LABEL_SEVERITY, RULE_LABEL_SERVICE, RULE_LABEL_SLO, RULE_LABEL_MODEL, RULE_LABEL_CLASS, ALERT_LABEL_NAME}
)

# Alert names other modules route, inhibit or join on (Alertmanager config, demo). The exporter-gone page is
# generated with the rules; its labels are service, model and severity.
ALERT_EXPORTER_GONE: Final = "SlokitExporterGone"
ALERTS_SERIES: Final = "ALERTS"  # Prometheus' own series of pending and firing alerts


def record_sli_total(window: str) -> str:
    """Requests (events) observed over `window`, e.g. `slokit:sli_total:increase5m`."""
    return f"slokit:sli_total:increase{window}"


def record_sli_good(window: str) -> str:
    """Events at or under the objective threshold over `window`."""
    return f"slokit:sli_good:increase{window}"


def record_error_ratio(window: str) -> str:
    """Share of events over the threshold over `window` (0 when there was no traffic)."""
    return f"slokit:sli_error:ratio{window}"


def record_burn_rate(window: str) -> str:
    """Error ratio over `window` divided by the error budget (1 = spending exactly the budget)."""
    return f"slokit:burn_rate:ratio{window}"


# Per raw counter series (all its labels, plus slokit_service and slokit_counter): its last sample within the
# lookback of the 5m tiles, so the tiles read each raw sample once per evaluation, not once per term (rules.py).
RECORD_COUNTER_LAST: Final = "slokit_series:counter:last15m"
RECORD_ERROR_BUDGET_REMAINING: Final = "slokit:error_budget_remaining:ratio"  # over the SLO window, 1 = untouched
RECORD_OBJECTIVE: Final = "slokit:objective:ratio"  # e.g. 0.95
RECORD_LATENCY_BUCKET_RATE: Final = "slokit_engine:latency_bucket:rate5m"  # le, slo, model, class, replica, engine
RECORD_LATENCY_QUANTILE: Final = "slokit:latency_seconds:quantile5m"  # quantile, slo, model, class
RECORD_ENGINE_LATENCY_QUANTILE: Final = "slokit_engine:latency_seconds:quantile5m"  # + engine
RECORD_P99_BASELINE: Final = "slokit:latency_seconds:p99_baseline"  # same hour of day, offset (or 7-day median)
RECORD_REQUEST_RATE: Final = "slokit:requests:rate5m"  # requests/s finishing, per model and class
RECORD_CONSISTENCY: Final = "slokit:latency_p99_over_p50:ratio5m"  # interpolated (dashboards only)
# p99/p50 bounded by bucket edges: the true ratio lies between them; the consistency alert reads the lower bound.
RECORD_CONSISTENCY_LOWER: Final = "slokit:latency_p99_over_p50:lower_bound5m"
RECORD_CONSISTENCY_UPPER: Final = "slokit:latency_p99_over_p50:upper_bound5m"
# fraction_of_slo x (share of TTFTs above the scale-out boundary) / (share the objective allows above its threshold):
# it reaches fraction_of_slo exactly when that share reaches the allowance; autoscalers target the fraction.
RECORD_SCALE_OUT: Final = "slokit:scale_out:ratio"
# The scale-out record as prometheus-adapter exposes it on the external metrics API (colons are not allowed there).
EXTERNAL_SCALE_OUT_METRIC: Final = "slokit_scale_out_ratio"
# The predictive autoscaling signal (slokit/generate/autoscale.py): requests/s one engine of a model carries within the
# objectives (a per-model fact), the model's finished-request rate over 1m, and the replicas it should run.
RECORD_AUTOSCALE_CAPACITY: Final = "slokit:autoscale_capacity:rps"
RECORD_AUTOSCALE_RATE: Final = "slokit:autoscale_requests:rate1m"
RECORD_AUTOSCALE_FORECAST: Final = "slokit:autoscale_requests:forecast"  # req/s expected `horizon` ahead
RECORD_AUTOSCALE_NEEDED: Final = "slokit:autoscale_replicas:needed"  # the forecast and the queue at capacity
RECORD_AUTOSCALE_DESIRED: Final = "slokit:autoscale_replicas:desired"
RECORD_QUEUE_WAITING: Final = "slokit_engine:requests_waiting:max1m"
RECORD_QUEUE_RUNNING: Final = "slokit_engine:requests_running:max1m"
RECORD_KV_CACHE_USAGE: Final = "slokit_engine:kv_cache_usage:ratio"
RECORD_PREEMPTIONS: Final = "slokit_engine:preemptions:rate5m"
RECORD_DECODE_TOKENS: Final = "slokit_engine:generation_tokens:rate5m"  # decode tokens/s per engine
RECORD_EXPECTED_DECODE_TOKENS: Final = "slokit:expected_decode_tokens_per_second"  # from the planner, per model
# Parameters and facts as recorded constant series, so that one alert rule per family covers the whole fleet: the
# alert joins a window's ratio with its parameter `on (service, class, slo)` (or `on (service, model)` for model
# facts). They carry the labels their rule writes (service, class, slo; long, short and severity on burn factors).
RECORD_BURN_THRESHOLD: Final = "slokit:burn_rate:threshold"  # the burn factor a tier fires above, per objective
RECORD_CONSISTENCY_LIMIT: Final = "slokit:latency_p99_over_p50:limit"  # the spec's max_p99_over_p50, per SLO
# A bucket boundary of a consistency SLO's histogram in seconds, per `le` spelling: the consistency bounds join
# the recorded bucket shares with it, so one term covers every boundary of every class.
RECORD_BUCKET_BOUND: Final = "slokit:latency_bucket:le_seconds"
RECORD_MAX_NUM_SEQS: Final = "slokit:max_num_seqs"  # the engine's --max-num-seqs, per model
RECORD_MODEL_INFO: Final = "slokit:model_info"  # 1 per model of the spec; `served` says whether a class uses it
RULE_LABEL_LONG: Final = "long"  # a burn-rate tier's long window (`1h`), on its alerts and its factors
RULE_LABEL_SHORT: Final = "short"  # its short window (`5m`)
RULE_LABEL_SERVED: Final = "served"  # on slokit:model_info: "true" when some class with an SLO uses the model
