"""The typed SLO spec: immutable dataclasses, and the questions every generator asks of them.

One spec file describes one service: the models it serves, its request classes, their latency SLOs and the
alerting options. Everything else (rules, dashboards, runbooks, exporter buckets, the probe's workload) is derived
from the `Spec` that `slokit.spec.loader` returns; derived questions (which histogram a class's SLI reads, which
classes run on a model, which classes get a scale-out signal) are answered here, once. See docs/spec.md for every
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from slokit import schema
from slokit.distributions import Distribution
from slokit.schema import MeasuredAt, Sli
from slokit.sources import exporter, vllm_releases
from slokit.sources.base import SignalSource
from slokit.units import format_duration

SPEC_VERSION: Final = "slokit/v1"
PERCENTILES: Final = MappingProxyType({"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p99.9": 0.999})
TIER_NAMES: Final = ("target", "acceptable", "critical")


@dataclass(frozen=True)
class TokenRange:
    """Prompt-token range, `min` inclusive and `max` exclusive (max None: unbounded)."""

    min: int
    max: int | None

    def contains(self, tokens: int) -> bool:
        """Whether a prompt of `tokens` tokens falls in the range."""
        return tokens >= self.min and (self.max is None or tokens < self.max)


@dataclass(frozen=True)
class Match:
    """How the exporter assigns a request to a class.

    The `x-slokit-class` header decides when its value equals a class's `header`. Otherwise the first class (in
    spec order) whose `priority` and `prompt_tokens` rules all hold takes the request; a class with neither rule
    is reached only through the header. Anything else is counted as class `other`.
    """

    header: str
    priority: tuple[int, ...] = ()
    prompt_tokens: TokenRange | None = None

    @property
    def has_request_rules(self) -> bool:
        """Whether the class can be chosen without the header."""
        return bool(self.priority) or self.prompt_tokens is not None

    def matches_request(self, priority: int | None, prompt_tokens: int | None) -> bool:
        """Whether the non-header rules all hold for a request (False if the class has no such rules)."""
        if not self.has_request_rules:
            return False
        if self.priority and (priority is None or priority not in self.priority):
            return False
        return not (
            self.prompt_tokens is not None and (prompt_tokens is None or not self.prompt_tokens.contains(prompt_tokens))
        )


@dataclass(frozen=True)
class Objective:
    """Error-budget objective: `percentile` % of requests at or under `threshold` seconds."""

    percentile: float
    threshold: float

    @property
    def target_ratio(self) -> float:
        """Share of requests that must be good, e.g. 0.95."""
        return self.percentile / 100.0

    @property
    def error_budget(self) -> float:
        """Share of requests allowed to be slow, e.g. 0.05."""
        return 1.0 - self.percentile / 100.0


@dataclass(frozen=True)
class Tiers:
    """Per-percentile latency tiers in seconds, keyed by the percentile name (`p50`, `p95`, ...)."""

    target: Mapping[str, float]
    acceptable: Mapping[str, float]
    critical: Mapping[str, float]

    def tier(self, name: str) -> Mapping[str, float]:
        """One tier by name (target, acceptable or critical)."""
        value: Mapping[str, float] = getattr(self, name)
        return value

    def in_words(self) -> list[str]:
        """Each percentile's thresholds in words ("p95: target 2s, acceptable 4s"), for dashboards and runbooks."""
        lines = []
        for pct in PERCENTILES:
            named = [f"{tier} {format_duration(self.tier(tier)[pct])}" for tier in TIER_NAMES if pct in self.tier(tier)]
            if named:
                lines.append(f"{pct}: " + ", ".join(named))
        return lines

    def thresholds(self) -> list[float]:
        """Every threshold named in any tier."""
        return [v for name in TIER_NAMES for v in self.tier(name).values()]


@dataclass(frozen=True)
class Consistency:
    """Batch classes: p99 may be at most `max_p99_over_p50` times p50."""

    max_p99_over_p50: float


@dataclass(frozen=True)
class SloSpec:
    """The SLO of one latency indicator for one class."""

    sli: Sli
    objective: Objective | None
    tiers: Tiers
    consistency: Consistency | None
    # Where the SLI is measured (schema.MeasuredAt): the API server's ASGI layer sees time an overloaded server
    # holds a request before the engine does; only TTFT and E2E with source slokit can be measured there.
    measured_at: MeasuredAt = MeasuredAt.ENGINE
    # The SLO's own histogram (`metric:`); None: the source's, where measured_at says. Spec.histogram answers both.
    metric: schema.CustomHistogram | None = None

    def thresholds(self) -> list[float]:
        """Every latency threshold this SLO names (objective and tiers)."""
        values = self.tiers.thresholds()
        if self.objective is not None:
            values.append(self.objective.threshold)
        return values


@dataclass(frozen=True)
class Workload:
    """What a typical request of the class looks like, for `slokit probe`."""

    prompt_tokens: Distribution
    output_tokens: Distribution


@dataclass(frozen=True)
class RequestClass:
    """A request type (chat, code completion, batch summarisation) with its own SLOs."""

    name: str
    description: str
    match: Match
    models: tuple[str, ...]  # served model names this class runs on (resolved: never empty)
    slos: Mapping[Sli, SloSpec]
    workload: Workload | None


@dataclass(frozen=True)
class Model:
    """One served model: its name as vLLM's `--served-model-name`, and how it is deployed."""

    name: str
    preset: str | None  # planner preset (llama-3-70b, ...), for expected decode throughput
    gpu: str | None  # GPU preset name (h100-sxm, ...)
    tensor_parallel: int
    max_num_seqs: int  # the engine's --max-num-seqs: running requests at this level mean the engine is full
    # Label matchers every raw series of this model carries (the spec's top-level `selector:` with the model's own
    # merged over it), e.g. {namespace: prod, job: vllm}: staging traffic on the same model name never counts.
    selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class BurnRateWindow:
    """One multi-window burn-rate alert: fire when both windows burn faster than the factor."""

    severity: str  # "page" or "ticket": which of alerting.severity's label values it carries
    long: float  # seconds
    short: float  # seconds
    budget_percent: float  # share of the whole window's budget this tier may spend within `long`
    for_: float  # seconds

    def factor(self, window: float) -> float:
        """Burn-rate factor for an SLO window: budget share x window / long window (14.4 for 2% of 30d in 1h)."""
        return (self.budget_percent / 100.0) * window / self.long


@dataclass(frozen=True)
class Baseline:
    """Relative alert: trailing 5m p99 above `ratio` x the p99 at the same hour `offset` ago."""

    ratio: float
    offset: float  # seconds
    min_rps: float  # requests/s needed both now and at the baseline time
    median_days: int  # 0: baseline is the single offset; N >= 2: median of the same hour over N days
    for_: float


@dataclass(frozen=True)
class ScaleOut:
    """Autoscaling signal: p99 TTFT above `fraction_of_slo` x the TTFT threshold for `for_` seconds."""

    fraction_of_slo: float
    for_: float


@dataclass(frozen=True)
class Severity:
    """The `severity` label values written on page and ticket alerts."""

    page: str
    ticket: str

    def label(self, kind: str) -> str:
        """The label value for `page` or `ticket`."""
        return self.page if kind == "page" else self.ticket


@dataclass(frozen=True)
class TierCell:
    """One tier cell that alerts: the `percentile` (`p50`) of the `tier` (`critical`)."""

    tier: str
    percentile: str

    def __str__(self) -> str:
        return f"{self.tier}.{self.percentile}"


# The design's tiers: page when p50 is worse than critical, ticket when p95 is worse than acceptable. Every other
# cell is drawn on the dashboards only, unless `alerting.tiers` opts it in.
DEFAULT_PAGE_TIERS: Final = (TierCell("critical", "p50"),)
DEFAULT_TICKET_TIERS: Final = (TierCell("acceptable", "p95"),)
# Requests a 5m window needs before a tier, baseline, consistency or scale-out signal may decide: 30 is one request
# every 10 s. Below it one slow request is a p50 (or a p99), so those signals stay quiet.
DEFAULT_MIN_REQUESTS: Final = 30


@dataclass(frozen=True)
class Receivers:
    """Alertmanager receiver names for pages and tickets (declared without integrations; the team supplies them)."""

    page: str = "page"
    ticket: str = "ticket"

    def name(self, kind: str) -> str:
        """The receiver for `page` or `ticket`."""
        return self.page if kind == "page" else self.ticket


@dataclass(frozen=True)
class Alerting:
    """Alerting options shared by every SLO of the spec."""

    burn_rates: tuple[BurnRateWindow, ...]
    baseline: Baseline
    scale_out: ScaleOut
    severity: Severity
    runbook_url: str  # pattern with {service} and {alert}
    tier_for: float  # seconds a tier breach must last
    kv_cache_usage_max: float  # KV-cache pressure alert level (0..1)
    labels: Mapping[str, str]  # extra labels on every alert
    grafana_url: str = ""  # Grafana base URL for dashboard-panel links in the runbook ("": links start at /d/...)
    # Labels that tell one replica (pod) from another on engine-level series; vLLM's `engine` label is the
    # data-parallel rank, "0" in every pod, so it is never enough alone.
    replica_labels: tuple[str, ...] = ("instance",)
    page_tiers: tuple[TierCell, ...] = DEFAULT_PAGE_TIERS
    ticket_tiers: tuple[TierCell, ...] = DEFAULT_TICKET_TIERS
    min_requests: int = DEFAULT_MIN_REQUESTS  # per 5m window, for tier, baseline, consistency and scale-out signals
    receivers: Receivers = field(default_factory=Receivers)

    def runbook_link(self, service: str, anchor: str) -> str:
        """The runbook URL for one alert section."""
        return self.runbook_url.replace("{service}", service).replace("{alert}", anchor)


@dataclass(frozen=True)
class VllmSettings:
    """The vLLM release whose metrics a `source: vllm` spec reads, and any custom buckets it runs with."""

    version: str
    custom_histogram_buckets: Mapping[str, tuple[float, ...]]

    def buckets(self, sli: Sli) -> tuple[float, ...]:
        """The boundaries vLLM exposes for an SLI's histogram."""
        family = vllm_releases.SLI_FAMILY[sli]
        if family in self.custom_histogram_buckets:
            return self.custom_histogram_buckets[family]
        return vllm_releases.RELEASES[self.version].buckets[family]


@dataclass(frozen=True)
class GpuExporterSettings:
    """How the generated GPU sidecar is protected and scraped (`gpu_exporter:`; empty: plain HTTP, no auth).

    `web_config_secret` names a Secret holding `web-config.yml` (exporter-toolkit format) and the files it names,
    with the CA that signed the sidecar's certificate under `ca.crt`; Prometheus reads that CA from the same Secret.
    """

    web_config_secret: str | None = None
    scheme: str = "https"  # how Prometheus scrapes when web_config_secret is set
    server_name: str = "slokit-gpu-exporter"  # the DNS name in the sidecar's certificate
    client_cert_secret: str | None = None  # kubernetes.io/tls Secret (tls.crt, tls.key) Prometheus presents
    basic_auth_secret: str | None = None  # Secret with keys `username` and `password` Prometheus sends

    @property
    def tls(self) -> bool:
        """Whether the sidecar serves HTTPS."""
        return self.web_config_secret is not None and self.scheme == "https"


@dataclass(frozen=True)
class Spec:
    """A validated spec. Immutable; generators and exporters read it and nothing writes it."""

    version: str
    service: str
    description: str
    source: SignalSource  # where latency is measured (slokit.sources: the module that knows its names)
    window: float  # seconds
    demo: bool  # shortened windows for `slokit demo`; never a production spec
    vllm: VllmSettings
    models: tuple[Model, ...]
    classes: tuple[RequestClass, ...]
    alerting: Alerting
    selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # top-level `selector:`
    gpu_exporter: GpuExporterSettings = GpuExporterSettings()
    path: str = ""
    digest: str = field(default="", compare=False)
    text: str = field(default="", compare=False, repr=False)  # the spec as written (for the generated ConfigMap)

    @property
    def metrics(self) -> schema.SourceMetrics:
        """Metric names of this spec's source."""
        return self.source.metrics(self.vllm)

    def model(self, name: str) -> Model:
        """A model by served name."""
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)

    def request_class(self, name: str) -> RequestClass:
        """A class by name."""
        for request_class in self.classes:
            if request_class.name == name:
                return request_class
        raise KeyError(name)

    def latency_metric(self, sli: Sli, request_class: RequestClass | None = None) -> str:
        """The histogram (base name) an SLI of a class is read from (see `histogram`); without a class, the
        source's engine histogram."""
        if request_class is None:
            return self.metrics.latency[sli]
        return self.histogram(request_class, sli).name

    def buckets(self, sli: Sli) -> tuple[float, ...]:
        """Histogram boundaries the source exposes for an SLI.

        For `source: slokit` these are the default ladder plus every threshold the spec names for that SLI, so
        every threshold is a boundary by construction.
        """
        return self.source.buckets(self, sli)

    def histogram(self, request_class: RequestClass, sli: Sli) -> schema.CustomHistogram:
        """Which histogram one class's SLI reads and which label names it carries: the SLO's own `metric:`, or
        else the source's, at the SLO's `measured_at` (frontend histograms have no engine label). Every generator
        (rules, alerts, promtool tests, dashboards, runbook) asks this one function."""
        slo = request_class.slos.get(sli)
        if slo is not None and slo.metric is not None:
            return slo.metric
        m = self.metrics
        where = slo.measured_at if slo is not None else MeasuredAt.ENGINE
        frontend = where is MeasuredAt.FRONTEND and sli in m.frontend_latency
        return schema.CustomHistogram(
            name=m.latency_metric(sli, where),
            model_label=m.model_label,
            matchers=self.source.class_matchers(self, request_class),
            buckets=self.buckets(sli),
            engine_label=None if frontend else m.engine_label,
            class_label=m.class_label,
        )

    def histogram_buckets(self, request_class: RequestClass, sli: Sli) -> tuple[float, ...]:
        """Boundaries (seconds) of one class's SLI histogram; for a custom histogram without declared buckets,
        the default ladder plus the SLO's thresholds (what `validate --prometheus` checks live)."""
        hist = self.histogram(request_class, sli)
        if hist.buckets is not None:
            return hist.buckets
        values = set(exporter.DEFAULT_BUCKETS[sli])
        values.update(request_class.slos[sli].thresholds())
        return tuple(sorted(values))

    def classify(self, header: str | None, priority: int | None, prompt_tokens: int | None) -> str:
        """The class label for a request (see `Match`); `other` when no class takes it."""
        if header is not None:
            for request_class in self.classes:
                if request_class.match.header == header:
                    return request_class.name
        for request_class in self.classes:
            if request_class.match.matches_request(priority, prompt_tokens):
                return request_class.name
        return schema.OTHER_CLASS

    def classes_on(self, model: str) -> tuple[RequestClass, ...]:
        """The request classes that run on a model (by served name), in spec order."""
        return tuple(rc for rc in self.classes if model in rc.models)

    def scale_out_classes(self) -> tuple[RequestClass, ...]:
        """The classes that get a scale-out signal: those with a TTFT objective, in spec order."""
        return tuple(
            rc for rc in self.classes if (slo := rc.slos.get(Sli.TTFT)) is not None and slo.objective is not None
        )

    def has_scale_out_signal(self, model: str) -> bool:
        """Whether the rules record a scale-out signal for a model: some class on it gets one."""
        return any(model in rc.models for rc in self.scale_out_classes())

    def longest_alert_window(self) -> float:
        """The longest window any alert reads, in seconds."""
        windows = [w.long for w in self.alerting.burn_rates]
        return max(windows, default=0.0)
