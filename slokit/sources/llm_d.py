"""`source: llm-d`: llm-d's router, the endpoint picker (EPP) in front of the model servers, where the user-seen
latency of every request is measured per model and per request class.

Names, labels and buckets from llm-d/llm-d-router pkg/epp/metrics/llm_d_router_metrics.go and metrics.go (commit
ebab687927f5331c1b39defcb579a07951bce56c, subsystem `llm_d_epp` from pkg/common/observability/metrics/metrics.go):
`llm_d_epp_request_ttft_seconds` (labels model_name, target_model_name, fairness_id, priority, streaming),
`llm_d_epp_request_streaming_itl_seconds`, `llm_d_epp_request_streaming_tpot_seconds`,
`llm_d_epp_request_duration_seconds` (generalLatencyBuckets), `llm_d_epp_request_total`,
`llm_d_epp_request_running`, `llm_d_epp_flow_control_queue_size`. Client-derived `model_name` and `fairness_id`
values are capped at 1000 distinct values each, beyond which they read `other` (pkg/epp/metrics/cardinality.go).
For a non-streaming request TTFT is the whole request's duration.

The same EPP still writes older names for most of these (`inference_objective_*`, from the Gateway API Inference
Extension, and `llm_d_router_epp_*`, the previous llm-d prefix; llm-d-router commit
b64f44e1b64fb6b3ac92d20596fe21b3279a635e pkg/epp/metrics/metrics.go and llm_d_router_metrics.go), and an older EPP
writes only those. The rules read one recorded series per metric (`slokit_llm_d:<name>`) that takes the canonical
series of a scrape target (job, instance, model_name) and the first deprecated name only where that target writes
no canonical one, so a fleet that writes both counts each request once and an old EPP still counts. Deprecated
series carry no fairness_id, so they count for a class only where the class is its model's only one.

Request class: a class that lists `match.priority` reads the EPP's `priority` label; a class that shares its models
with other classes reads `fairness_id` (the class name is the fairness ID); a class alone on its models reads every
request of them. The EPP measures no KV cache and no preemptions (its pool averages carry the pool, not the model):
KV-cache alerts come from the model servers' own metrics, with a spec for their engine.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from slokit.schema import Sli, SourceMetrics
from slokit.sources.base import RUNBOOK_WIDTH, Draft, Problem, SignalSource

if TYPE_CHECKING:
    from slokit.spec.model import RequestClass, Spec

PREFIX: Final = "llm_d_epp_"
RECORD_PREFIX: Final = "slokit_llm_d:"  # the recorded, de-duplicated series the rules read
SPEC_LABEL: Final = "slokit_spec_service"  # on the recorded series: the spec that records them (one per service)
IDENTITY: Final = ("job", "instance", "model_name")  # one EPP's series of one model
FAIRNESS_LABEL: Final = "fairness_id"
PRIORITY_LABEL: Final = "priority"

# generalLatencyBuckets (metrics.go): request durations, and the deprecated TTFT histograms.
GENERAL_LATENCY_BUCKETS: Final = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
)  # fmt: skip
TTFT_BUCKETS: Final = GENERAL_LATENCY_BUCKETS[:24]  # 0.005 .. 120, as llmdRequestTTFT lists them
TPOT_BUCKETS: Final = (
    0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 2.0,
)  # fmt: skip
ITL_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0)

# Every metric the rules read: canonical name first, then the deprecated names still written, newest first.
HISTOGRAMS: Final = MappingProxyType(
    {
        Sli.TTFT: ("llm_d_epp_request_ttft_seconds", "llm_d_router_epp_request_ttft_seconds",
                   "inference_objective_request_ttft_seconds"),
        Sli.ITL: ("llm_d_epp_request_streaming_itl_seconds",),
        Sli.TPOT: ("llm_d_epp_request_streaming_tpot_seconds", "llm_d_router_epp_request_tpot_seconds",
                   "inference_objective_request_tpot_seconds"),
        Sli.E2E: ("llm_d_epp_request_duration_seconds", "llm_d_router_epp_request_duration_seconds",
                  "inference_objective_request_duration_seconds"),
    }
)  # fmt: skip
COUNTERS_AND_GAUGES: Final = MappingProxyType(
    {
        "request_total": ("llm_d_epp_request_total", "llm_d_router_epp_request_total",
                          "inference_objective_request_total"),
        "request_running": ("llm_d_epp_request_running", "llm_d_router_epp_running_requests",
                            "inference_objective_running_requests"),
        "flow_control_queue_size": ("llm_d_epp_flow_control_queue_size", "llm_d_router_epp_flow_control_queue_size",
                                    "inference_extension_flow_control_queue_size"),
    }
)  # fmt: skip
TOKEN_HISTOGRAMS: Final = MappingProxyType(
    {
        "request_input_tokens": ("llm_d_epp_request_input_tokens", "llm_d_router_epp_input_tokens",
                                 "inference_objective_input_tokens"),
        "request_output_tokens": ("llm_d_epp_request_output_tokens", "llm_d_router_epp_output_tokens",
                                  "inference_objective_output_tokens"),
    }
)  # fmt: skip


def recorded(canonical: str) -> str:
    """The recorded series that stands for one metric: `llm_d_epp_request_total` -> `slokit_llm_d:request_total`."""
    return RECORD_PREFIX + canonical.removeprefix(PREFIX)


METRICS: Final = SourceMetrics(
    model_label="model_name",
    engine_label="instance",
    class_label=None,  # chosen per class (fairness_id, priority or none): LlmD.class_matchers
    latency=MappingProxyType({sli: recorded(names[0]) for sli, names in HISTOGRAMS.items()}),
    queue_time="llm_d_epp_flow_control_request_queue_duration_seconds",
    requests_running=recorded("llm_d_epp_request_running"),
    requests_waiting=recorded("llm_d_epp_flow_control_queue_size"),
    kv_cache_usage=None,
    preemptions=None,
    prompt_tokens=recorded("llm_d_epp_request_input_tokens") + "_sum",
    generation_tokens=recorded("llm_d_epp_request_output_tokens") + "_sum",
    requests_finished=recorded("llm_d_epp_request_total"),
    finish_reason_label="",
    prefix_cache_queries=None,
    prefix_cache_hits=None,
    prompt_tokens_histogram=recorded("llm_d_epp_request_input_tokens"),
)


def _prefer_canonical(names: Sequence[str], suffix: str, present: str) -> str:
    """`canonical or (older unless on (identity) canonical) or ...`: each scrape target's series of the newest name
    it writes (`present` is the suffix whose presence decides: `_count` for a histogram, "" otherwise)."""
    terms = [f"{names[0]}{suffix}"]
    for index, name in enumerate(names[1:], start=1):
        newer = " or ".join(f"{n}{present}" for n in names[:index])
        terms.append(f"({name}{suffix} unless on ({', '.join(IDENTITY)}) ({newer}))")
    return "\n  or\n  ".join(terms)


class LlmD(SignalSource):
    """llm-d's endpoint picker."""

    name = "llm-d"
    short = "llm-d"
    title = "llm-d's endpoint-picker metrics"
    upstream = "llm-d/llm-d-router pkg/epp/metrics/llm_d_router_metrics.go @ ebab687927f5331c1b39defcb579a07951bce56c"
    METRICS = METRICS
    DEFAULT_BUCKETS = MappingProxyType(
        {Sli.TTFT: TTFT_BUCKETS, Sli.ITL: ITL_BUCKETS, Sli.TPOT: TPOT_BUCKETS, Sli.E2E: GENERAL_LATENCY_BUCKETS}
    )
    lacks_note = "KV-cache usage and preemptions (a router has neither); request class on deprecated names"
    metrics_port = "metrics"  # the EPP container's port 9090
    pod_component = "router"
    scale_target = "the Deployment of the model servers in the InferencePool (not the endpoint picker)"

    def exported_name(self, sli: Sli) -> str:
        return HISTOGRAMS[sli][0]

    def class_matchers(self, spec: Spec, request_class: RequestClass) -> tuple[tuple[str, str, str], ...]:
        own = ((SPEC_LABEL, "=", spec.service),)
        if request_class.match.priority:
            values = "|".join(str(p) for p in request_class.match.priority)
            return (*own, (PRIORITY_LABEL, "=~", values))
        shared = any(
            other is not request_class and set(other.models) & set(request_class.models) for other in spec.classes
        )
        return (*own, (FAIRNESS_LABEL, "=", request_class.name)) if shared else own

    def runbook_note(self) -> list[str]:
        text = (
            "This service reads llm-d's endpoint picker: latency as the router sees it, from the request's arrival "
            "to its first (TTFT) and last (E2E) response bytes, so it includes the time a request waits in the "
            "router's flow control. A class that lists priorities reads the picker's priority label, a class sharing "
            "its models reads its fairness ID (the class name), a class alone on its models reads all of them."
        )
        return textwrap.wrap(text, RUNBOOK_WIDTH - 2)

    def shared_model_problems(self, draft: Draft) -> list[Problem]:
        """Classes on one model are told apart by fairness_id or priority: nothing to refuse."""
        del draft
        return []

    def no_kv_cache(self) -> str:
        return (
            "llm-d's endpoint picker measures no KV cache per model (its pool averages carry the pool's name, not the "
            "model's): drop kv_cache_usage_max here and alert on the model servers' own KV-cache gauge with a spec "
            "for their engine (source: vllm or slokit)"
        )

    def recording_rules(self, spec: Spec) -> list[tuple[str, str, dict[str, str]]]:
        """The de-duplicated series the rules read, one record per metric and suffix."""
        labels = {SPEC_LABEL: spec.service}
        out = []
        for names in (*HISTOGRAMS.values(), *TOKEN_HISTOGRAMS.values()):
            for suffix in ("_bucket", "_count", "_sum"):
                out.append((recorded(names[0]) + suffix, _prefer_canonical(names, suffix, "_count"), labels))
        for names in COUNTERS_AND_GAUGES.values():
            out.append((recorded(names[0]), _prefer_canonical(names, "", ""), labels))
        return out
