"""What every signal source answers: the contract between one source module and the rest of slokit.

A *signal source* is one place request latency is measured and exported to Prometheus: slokit's own exporter
inside vLLM, an engine's own `/metrics` (vLLM, SGLang, TGI, TensorRT-LLM), a gateway in front of the engines
(llm-d's endpoint picker, NVIDIA Dynamo's frontend) or anything that follows the OpenTelemetry GenAI semantic
conventions. Each source is one module under `slokit/sources/` with one `SignalSource` subclass; the registry
(`slokit.sources`) maps a spec's `source:` value to it. The spec loader, the generators and the runbook ask the
source, never `if source is ...`, so a new source is one module (and its row in docs/interop.md).

The defaults here fit a source that exports fixed histograms without a request class; a source overrides what
differs (its buckets follow the spec, it has a class label, it needs a plugin in the engine's pod).
"""

from __future__ import annotations

import bisect
import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from slokit import schema
from slokit.schema import FailReason, Sli, SourceMetrics
from slokit.units import format_duration

if TYPE_CHECKING:  # the spec model imports this module; these are for type hints only
    from slokit.spec.model import RequestClass, SloSpec, Spec, VllmSettings

Path = tuple[str | int, ...]
TIERS: tuple[str, ...] = ("target", "acceptable", "critical")  # as spec.model.TIER_NAMES, in threshold order
RUNBOOK_WIDTH = 114  # the runbook's prose lines wrap here (as the template's own text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec for this source: the field path, the message (what is wrong, what to do)."""

    path: Path
    message: str
    at_key: bool = False  # point at the key rather than its value (a whole SLO that cannot be read)


@dataclass(frozen=True)
class Draft:
    """What a source's checks see of a spec being loaded: the document as written (`top`, for fields whose mere
    presence is the problem), the classes as read, and the vLLM release settings."""

    top: Mapping[str, Any]
    classes: tuple[RequestClass, ...]
    vllm: VllmSettings


@dataclass(frozen=True)
class DraftAcceptance:
    """Speculative decoding's accepted and drafted token counters, for the runbook's acceptance-rate query."""

    accepted: str
    drafted: str
    model_label: str


def threshold_places(slo: SloSpec, path: Path) -> list[tuple[Path, float]]:
    """Every threshold of an SLO (objective, then tiers) with the field path that names it."""
    places: list[tuple[Path, float]] = []
    if slo.objective is not None:
        places.append(((*path, "objective", "threshold"), slo.objective.threshold))
    for tier in TIERS:
        for pct, seconds in slo.tiers.tier(tier).items():
            places.append(((*path, "tiers", tier, pct), seconds))
    return places


def neighbours(bounds: tuple[float, ...], value: float) -> tuple[float | None, float | None]:
    """The boundaries just below and just above `value`."""
    index = bisect.bisect_left(bounds, value)
    below = bounds[index - 1] if index > 0 else None
    above = bounds[index] if index < len(bounds) else None
    return below, above


def nearest_text(bounds: tuple[float, ...], seconds: float) -> str:
    """`400ms and 600ms`: the neighbouring boundaries of an off-bucket threshold, as a user would write them."""
    below, above = neighbours(bounds, seconds)
    return " and ".join(format_duration(b) for b in (below, above) if b is not None)


def bound_problems(slo: SloSpec, path: Path, bounds: tuple[float, ...], what: str, how: str) -> list[Problem]:
    """A problem per threshold of `slo` that is not one of `bounds` (the SLI could not be counted exactly)."""
    out = []
    for fpath, seconds in threshold_places(slo, path):
        if any(math.isclose(seconds, b, rel_tol=1e-4) for b in bounds):
            continue
        out.append(
            Problem(
                fpath,
                f"{slo.sli.value} threshold {format_duration(seconds)} is not a bucket boundary of {what}, so the "
                f"SLI cannot be counted exactly; nearest are {nearest_text(bounds, seconds)}; use one of those, {how}",
            )
        )
    return out


def slo_paths(classes: Iterable[RequestClass]) -> Iterable[tuple[Sli, SloSpec, Path]]:
    """Every SLO that reads the source's own histograms (no `metric:` of its own), with its field path."""
    for index, request_class in enumerate(classes):
        for sli, slo in request_class.slos.items():
            if slo.metric is None:
                yield sli, slo, ("classes", index, "slos", sli.value)


class SignalSource:
    """One place latency is measured. Subclasses set the class attributes and `METRICS`, and override the
    methods where the source differs from a fixed-bucket engine without a request class."""

    name: ClassVar[str]  # the spec's `source:` value
    short: ClassVar[str]  # the product's name in messages: "vLLM", "SGLang"
    title: ClassVar[str]  # what the series are, as a plural noun: "vLLM's own metrics"
    # Where the names, labels and default buckets were read (file and release), for docs/interop.md and errors.
    upstream: ClassVar[str] = ""
    METRICS: ClassVar[SourceMetrics]
    # Default histogram boundaries per SLI (seconds) as the released code sets them; empty for a source whose
    # buckets follow the spec.
    DEFAULT_BUCKETS: ClassVar[Mapping[Sli, tuple[float, ...]]] = {}
    # The server flag that changes each SLI's boundaries, named in alignment errors.
    BUCKET_FLAGS: ClassVar[Mapping[Sli, str]] = {}
    # Requests the source labels with a class the spec does not declare are counted as `other` (slokit's exporter
    # bounds its label values that way); the dashboards offer `other` as a class.
    counts_other_class: ClassVar[bool] = False
    # The engine's pod runs slokit's stat-logger plugin, configured by the spec (Kubernetes: the spec ConfigMap,
    # its mount and SLOKIT_SPEC, and an image with slokit installed).
    needs_plugin: ClassVar[bool] = False
    # A `reason` value the source's failure counter writes (promtool tests put it on synthetic failures).
    failure_reason_example: ClassVar[str] = FailReason.ABORT.value
    draft_acceptance: ClassVar[DraftAcceptance | None] = None
    # What the source cannot measure, one phrase each, for docs/interop.md and `slokit validate`.
    lacks_note: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"<source {self.name}>"

    # -- names and buckets ----------------------------------------------------------------------------------------
    def metrics(self, vllm: VllmSettings) -> SourceMetrics:
        """The source's names and labels (for vLLM: those of the release the spec names)."""
        del vllm
        return self.METRICS

    def exported_name(self, sli: Sli) -> str:
        """The histogram of an SLI as the source writes it (the rules may read a recorded series instead)."""
        return self.METRICS.latency[sli]

    def fixed_buckets(self, vllm: VllmSettings, sli: Sli) -> tuple[float, ...] | None:
        """The boundaries the server exposes for an SLI whatever the spec says; None: they follow the spec."""
        del vllm
        return self.DEFAULT_BUCKETS.get(sli, ())

    def buckets(self, spec: Spec, sli: Sli) -> tuple[float, ...]:
        """The boundaries the spec's SLOs read for an SLI of this source."""
        return self.fixed_buckets(spec.vllm, sli) or ()

    def class_matchers(self, spec: Spec, request_class: RequestClass) -> tuple[tuple[str, str, str], ...]:
        """The matchers that pick one class's series (the class label equal to the class's name, or nothing
        where the source has no class label and each class owns its models)."""
        del spec
        label = self.METRICS.class_label
        return ((label, "=", request_class.name),) if label is not None else ()

    def recording_rules(self, spec: Spec) -> list[tuple[str, str, dict[str, str]]]:
        """Recording rules (record, expr, labels) the source's own series need before the SLO rules read them
        (series under several names merged into one); the rules put them in a group of their own, first."""
        del spec
        return []

    def known_buckets(self, histogram: str) -> tuple[float, ...] | None:
        """Boundaries of one of this source's histograms named by a custom `metric:` (None: not known)."""
        del histogram
        return None

    # -- spec checks ----------------------------------------------------------------------------------------------
    def check(self, draft: Draft) -> list[Problem]:
        """Everything about a spec that this source cannot serve, each with what to do instead."""
        metrics = self.metrics(draft.vllm)
        out = self.shared_model_problems(draft) if metrics.class_label is None else []
        out += self.model_count_problems(draft)
        out += self.kv_cache_problems(draft)
        for sli, _, path in slo_paths(draft.classes):
            if sli not in metrics.latency:
                out.append(Problem(path, self.lacks(sli), at_key=True))
        out += self.alignment_problems(draft)
        return out

    def lacks(self, sli: Sli) -> str:
        """Why an SLO on `sli` cannot read this source, and what to use instead."""
        return (
            f"source {self.name} exposes no {schema.SLI_TITLES[sli]} histogram; drop this SLO or name a histogram "
            "with metric: {histogram: ...}"
        )

    def shared_model_problems(self, draft: Draft) -> list[Problem]:
        """Without a class label two classes on one model would read the same series."""
        owner: dict[str, int] = {}
        out = []
        for index, request_class in enumerate(draft.classes):
            for model in request_class.models:
                if model in owner:
                    out.append(
                        Problem(
                            ("classes", index, "models"),
                            f"model {model!r} already belongs to classes[{owner[model]}]: {self.title} carry no "
                            f"request class, so two classes cannot share a model with source: {self.name}; give each "
                            "class its own models, or use source: slokit for per-class SLOs",
                        )
                    )
                else:
                    owner[model] = index
        return out

    def model_count_problems(self, draft: Draft) -> list[Problem]:
        """Series without a model label can serve one model per spec."""
        models = draft.top.get("models")
        if self.METRICS.model_label is not None or not isinstance(models, list) or len(models) == 1:
            return []
        return [
            Problem(
                ("models",),
                f"source: {self.name} covers one model ({self.title} carry no model label: one model per server), "
                f"but {len(models)} are listed; write one spec per {self.short} deployment",
            )
        ]

    def kv_cache_problems(self, draft: Draft) -> list[Problem]:
        """A KV-cache alert level for a source that exports no KV-cache gauge."""
        alerting = draft.top.get("alerting")
        if self.METRICS.kv_cache_usage is not None or not isinstance(alerting, dict):
            return []
        if "kv_cache_usage_max" not in alerting:
            return []
        return [Problem(("alerting", "kv_cache_usage_max"), self.no_kv_cache())]

    def no_kv_cache(self) -> str:
        """Why a KV-cache alert level does not apply."""
        m = self.METRICS
        return (
            f"{self.short} exports no KV-cache usage gauge (its engine gauges are {m.requests_waiting} and "
            f"{m.requests_running}), so there is no KV-cache alert; drop kv_cache_usage_max"
        )

    def alignment_problems(self, draft: Draft) -> list[Problem]:
        """Thresholds off the source's fixed bucket boundaries."""
        out = []
        metrics = self.metrics(draft.vllm)
        for sli, slo, path in slo_paths(draft.classes):
            bounds = self.fixed_buckets(draft.vllm, sli)
            if sli in metrics.latency and bounds:
                out += bound_problems(slo, path, bounds, self.buckets_what(sli), self.bucket_how(sli))
        return out

    def buckets_what(self, sli: Sli) -> str:
        """The histogram's buckets, in words, for alignment errors."""
        return f"{self.short}'s default {self.METRICS.latency[sli]} buckets"

    def bucket_how(self, sli: Sli) -> str:
        """How to get a boundary at an off-bucket threshold."""
        flag = self.BUCKET_FLAGS.get(sli)
        change = f"or start {self.short} with {flag} listing it" if flag else f"or change {self.short}'s buckets"
        return f"{change} and name the histogram with metric: {{histogram: ..., buckets: [...]}}"

    # -- Kubernetes -----------------------------------------------------------------------------------------------
    # slokit writes the engine's Deployment and Service (vLLM with the GPU sidecar) only for a source that is vLLM;
    # any other engine or gateway runs from its own chart or operator, and slokit writes what watches and scales it:
    # a PodMonitor on `metrics_port` at `metrics_path` of the pods labelled `app.kubernetes.io/component:
    # <pod_component>`, and the autoscalers, aimed at `scale_target`.
    deploys_engine: ClassVar[bool] = False
    metrics_port: ClassVar[str] = "http"  # the container port's name
    metrics_path: ClassVar[str] = "/metrics"
    pod_component: ClassVar[str] = "server"
    # False where the series reach Prometheus without a scrape (pushed over OTLP): no PodMonitor.
    scraped: ClassVar[bool] = True
    scale_target: ClassVar[str] = "the Deployment of the model's engine pods"

    def engine_args(self, spec: Spec) -> list[str]:
        """Arguments the engine container needs for the spec (bucket flags)."""
        del spec
        return []

    # -- runbook --------------------------------------------------------------------------------------------------
    def runbook_note(self) -> list[str]:
        """The lines of an item for the runbook's "how to read" list: where the numbers come from (empty: none)."""
        if self.METRICS.class_label is not None:
            return []
        text = (
            f"This service reads {self.title}, which carry no request class: each class owns its models, so the "
            "model filter selects the class."
        )
        return textwrap.wrap(text, RUNBOOK_WIDTH - 2)
