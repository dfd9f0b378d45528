"""Every metric, label and bucket table slokit reads or writes that is common to every signal source.

Generators, exporters, dashboards and runbooks never spell a metric name themselves. The names, labels and buckets
of one source (slokit's exporter, vLLM per release, SGLang, TGI, ...) live in that source's module under
slokit/sources/, in the common shape `SourceMetrics` defined here; a histogram an SLO names itself
(`metric: {histogram: ...}`) is a `CustomHistogram`. What stays here: the SLIs, where they are measured, the failure
reasons, the GPU sidecar's names and the recorded series and labels the rules write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final


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
# The shape of one source's metric names and labels (each source module fills one in).
# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceMetrics:
    """The names one source exposes. Histogram names are base names (add `_bucket`, `_count`, `_sum`)."""

    # None: the series carry no model label (TGI: one model per server, so a spec with that source has one model,
    # which the rules write onto every recorded series).
    model_label: str | None
    engine_label: str
    class_label: str | None  # None: the source cannot tell request classes apart
    latency: MappingProxyType[Sli, str]
    queue_time: str
    requests_running: str
    requests_waiting: str | None  # gauge of queued requests; None: the source has none (no queue alert)
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


# Prometheus's own series of pending and firing alerts (labels alertname, alertstate and the alert's labels); the
# dashboards draw slokit's firing alerts on every panel from it.
PROMETHEUS_ALERTS: Final = "ALERTS"

OTHER_CLASS: Final = "other"  # class label value for requests the spec does not declare
DEFAULT_CLASS: Final = "default"  # the single class used when the exporter runs without a spec
CLASS_HEADER: Final = "x-slokit-class"  # HTTP header clients set to name their request class


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
# On a neighbour service's recorded series in the generated promtool tests (never in rules): the record it stands for.
TEST_LABEL_NEIGHBOUR_INPUT: Final = "slokit_neighbour_input"
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
# The predictive signal's desired replicas on the same API (the predictive HPA reads it).
EXTERNAL_AUTOSCALE_DESIRED_METRIC: Final = "slokit_autoscale_replicas_desired"
# The predictive autoscaling signal (slokit/generate/autoscale.py): requests/s one engine of a model carries within the
# objectives (a per-model fact), the model's finished-request rate over 1m, and the replicas it should run.
RECORD_AUTOSCALE_CAPACITY: Final = "slokit:autoscale_capacity:rps"
RECORD_AUTOSCALE_RATE: Final = "slokit:autoscale_requests:rate1m"
RECORD_AUTOSCALE_FORECAST: Final = "slokit:autoscale_requests:forecast"  # req/s expected `horizon` ahead
RECORD_AUTOSCALE_MISS: Final = "slokit:autoscale_forecast:miss"  # load over the forecast made `horizon` ago
RECORD_AUTOSCALE_HEADROOM: Final = "slokit:autoscale_headroom:ratio"  # spare capacity over the forecast
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
RECORD_MAX_NUM_SEQS: Final = "slokit:max_num_seqs"  # the engine's --max-num-seqs, one per model of the spec
RULE_LABEL_LONG: Final = "long"  # a burn-rate tier's long window (`1h`), on its alerts and its factors
RULE_LABEL_SHORT: Final = "short"  # its short window (`5m`)
RULE_LABEL_SERVED: Final = "served"  # on slokit:max_num_seqs: "true" when some class with an SLO uses the model
