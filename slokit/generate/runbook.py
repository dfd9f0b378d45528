"""The on-call runbook, generated from the spec and the alerts: one section per alert, in a fixed debugging order.

The only module that imports jinja2. Every alert the rules generator writes gets a section whose heading is the
alert's `title`, so the anchor its `runbook_url` points at exists by construction. Each section says what fired and
what it means for users, then walks the same four steps in the same order, because experience says that is the
order causes are found in: (1) queue depth, (2) decode throughput against the expected tokens/s, (3) the KV cache,
(4) the interconnect and GPU. Every step carries the exact PromQL for that alert's model and class, what healthy
looks like in numbers taken from the spec (and the roofline planner), and the fix. A tuning section follows.

Text from the spec (descriptions, names, label values) is escaped for Markdown and HTML by the template
environment's `finalize` hook, so no spec can inject links, headings or HTML. Only values built here as `Markup`
(code blocks, links this module makes) pass through unescaped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import jinja2
from markupsafe import Markup

from slokit import promql, schema
from slokit.catalog import GPUS
from slokit.generate import alerts, dashboards, debug_steps
from slokit.generate.model import AlertKind, AlertRule, heading_anchor
from slokit.generate.queries import Queries, expected_decode_at_batch, union
from slokit.plan import roofline
from slokit.schema import Sli, Source
from slokit.spec import PERCENTILES, TIER_NAMES, Model, RequestClass, Spec
from slokit.units import format_duration

TEMPLATE: Final = "runbook.md.j2"
RATE_WINDOW: Final = "5m"
_MD_INLINE: Final = re.compile(r"([\\`*_\[\]|~])")  # special anywhere in a line
_MD_LINE_START: Final = re.compile(r"^(\s*)([#>+=-]|\d+[.)])")  # special only where a line (block) starts


# ==============================================================================================================
# Safe Markdown
# ==============================================================================================================
def md_escape(text: str) -> Markup:
    """Spec text made inert in Markdown and HTML.

    Entities for `<>&`, backslashes before the punctuation that starts emphasis, code, links or table cells, and a
    backslash before a leading `#`, `-`, `>` or `1.` (a heading, list or quote); newlines become spaces so a value
    can never start a block of its own.
    """
    one_line = re.sub(r"\s+", " ", str(text))
    escaped = _MD_INLINE.sub(r"\\\1", one_line)
    escaped = escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = _MD_LINE_START.sub(_escape_line_start, escaped)
    return Markup(escaped)


def _escape_line_start(match: re.Match[str]) -> str:
    r"""`\#`, `\-`; an ordered-list marker at its punctuation (`1\.`: a backslash before a digit is no escape)."""
    indent, marker = match.group(1), match.group(2)
    if marker[0].isdigit():
        return f"{indent}{marker[:-1]}\\{marker[-1]}"
    return f"{indent}\\{marker}"


def md(template: str, *values: object) -> Markup:
    """Markdown written here (trusted, may use `code`), with spec values escaped into its `{}` slots."""
    return Markup(template.format(*(md_escape(str(v)) for v in values)))


def code_span(text: str) -> Markup:
    """Inline code whose fence is longer than any backtick run inside (so the content cannot close it)."""
    one_line = " ".join(str(text).split())
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return Markup(f"{fence}{pad}{one_line}{pad}{fence}")


def code_block(text: str, language: str = "promql") -> Markup:
    """A fenced block whose fence is longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return Markup(f"{fence}{language}\n{text.strip()}\n{fence}")


def link(text: str, url: str) -> Markup:
    """A Markdown link with escaped text and a URL that cannot break out of the parentheses."""
    safe_url = url.replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C").replace(">", "%3E")
    return Markup(f"[{md_escape(text)}]({safe_url})")


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if value is None:
        return ""
    return md_escape(str(value))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("slokit.generate", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["code"] = code_span
    env.filters["block"] = code_block
    env.filters["duration"] = format_duration
    return env


# ==============================================================================================================
# What the template renders
# ==============================================================================================================
@dataclass(frozen=True)
class Query:
    """One PromQL query with what it shows."""

    label: str
    promql: str


@dataclass(frozen=True)
class Step:
    """One step of the ordered workflow."""

    number: int
    title: str
    question: str
    queries: tuple[Query, ...]
    healthy: tuple[str, ...]
    fix: tuple[str, ...]
    panel: Markup | None = None


@dataclass(frozen=True)
class Section:
    """The runbook section of one alert."""

    rule: AlertRule
    title: str
    anchor: str
    severity: str
    summary: str
    description: str
    meaning: tuple[str, ...]
    fires_when: str
    labels: tuple[tuple[str, str], ...]
    panel: Markup
    guide: Guide


@dataclass(frozen=True)
class Guide:
    """The ordered debugging steps for one scope (a class on a model, a model, or the whole service), written
    once and linked from every alert of that scope: an on-call reads the alert's short section, then one guide."""

    title: str
    anchor: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Tuning:
    """One tuning lever: what to change, the planner's figure where it has one, and the metric that shows it."""

    title: str
    advice: tuple[str, ...]
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class ModelFacts:
    """Numbers the runbook quotes for one model."""

    model: Model
    classes: tuple[RequestClass, ...]
    expected_decode: float | None
    max_batch: int | None
    batch_cap: int | None
    fp8_kv_max_batch: int | None
    hbm_bandwidth: float | None
    itl_target: float | None  # the tightest ITL/TPOT threshold of the model's classes (seconds)
    ttft_threshold: float | None
    decode_curve: tuple[roofline.DecodePoint, ...] | None = None  # expected tokens/s per engine by running batch


@dataclass
class _Builder:
    spec: Spec
    built: dashboards.Built
    facts: dict[str, ModelFacts] = field(default_factory=dict)
    guides: dict[tuple[str | None, str | None, tuple[str, ...]], Guide] = field(default_factory=dict)

    # -- selectors ------------------------------------------------------------------------------------------------
    @property
    def m(self) -> schema.SourceMetrics:
        return self.spec.metrics

    def raw(self, model: str | None, request_class: str | None = None) -> str:
        """Matchers on raw metrics for one model (its deployment scope, model and class), from queries.py.

        Without a model: the scope every model shares.
        """
        q = Queries(self.spec)
        matchers = q.raw_matchers(model, request_class) if model is not None else q.common_selector()
        return _matchers(matchers)

    def rec(self, model: str | None, request_class: str | None = None, sli: Sli | None = None) -> str:
        return _matchers(Queries(self.spec).recorded_matchers(model, request_class, sli))

    def by(self, *extra: str) -> str:
        """Grouping labels; per engine always means per replica (replica labels before `engine`)."""
        labels = [self.m.model_label]
        for label in extra:
            if label == self.m.engine_label:
                labels.extend(self.spec.alerting.replica_labels)
            labels.append(label)
        return ", ".join(labels)

    # -- facts ----------------------------------------------------------------------------------------------------
    def model_facts(self, model: Model) -> ModelFacts:
        if model.name in self.facts:
            return self.facts[model.name]
        classes = self.spec.classes_on(model.name)
        try:
            plan = roofline.plan_for_model(self.spec, model)
        except roofline.PlanError:
            plan = None
        expected = plan.decode_tokens_per_second_per_engine if plan is not None else None
        itl = [
            slo.objective.threshold
            for rc in classes
            for sli, slo in rc.slos.items()
            if sli in (Sli.ITL, Sli.TPOT) and slo.objective is not None
        ]
        ttft = [
            slo.objective.threshold
            for rc in classes
            for sli, slo in rc.slos.items()
            if sli is Sli.TTFT and slo.objective is not None
        ]
        gpu = GPUS.get(model.gpu) if model.gpu is not None else None
        facts = ModelFacts(
            model=model,
            classes=classes,
            expected_decode=expected,
            max_batch=plan.max_batch if plan is not None else None,
            batch_cap=plan.batch_cap if plan is not None else None,
            fp8_kv_max_batch=plan.fp8_kv.max_batch if plan is not None and plan.fp8_kv is not None else None,
            hbm_bandwidth=gpu.hbm_bandwidth_bytes_per_second if gpu is not None else None,
            itl_target=min(itl) if itl else None,
            ttft_threshold=min(ttft) if ttft else None,
            decode_curve=roofline.expected_decode_curve(self.spec, model),
        )
        self.facts[model.name] = facts
        return facts

    def models_of(self, rule: AlertRule) -> list[Model]:
        if rule.model is not None:
            return [m for m in self.spec.models if m.name == rule.model] or list(self.spec.models)
        if rule.request_class is not None:
            try:
                names = self.spec.request_class(rule.request_class).models
            except KeyError:
                names = ()
            return [m for m in self.spec.models if m.name in names] or list(self.spec.models)
        return list(self.spec.models)

    # -- the four steps -------------------------------------------------------------------------------------------
    def guide(self, rule: AlertRule) -> Guide:
        """The debugging guide of an alert's scope (its class on its model, its model, or every model), built
        once per scope."""
        models = self.models_of(rule)
        model = models[0] if len(models) == 1 else None
        name = model.name if model is not None else None
        rc = rule.request_class
        key = (name, rc, tuple(m.name for m in models))
        if key not in self.guides:
            where = name if name is not None else ", ".join(m.name for m in models)
            title = f"Debugging {rc} on {where}" if rc is not None else f"Debugging {where}"
            self.guides[key] = Guide(title, heading_anchor(title), self.steps(models, name, rc))
        return self.guides[key]

    def steps(self, models: Sequence[Model], name: str | None, rc: str | None) -> tuple[Step, ...]:
        first = (self.api_server_step(name, rc),) if debug_steps.has_frontend(self.spec) else ()
        return (
            *first,
            self.queue_step(models, name, rc),
            self.decode_step(models, name, rc),
            self.kv_step(name),
            self.interconnect_step(models),
        )

    def _panel(self, key: tuple[str, ...], variables: Mapping[str, str]) -> Markup | None:
        ref = self.built.refs.get(key)
        if ref is None:
            return None
        base = self.spec.alerting.grafana_url.rstrip("/")
        return link(f"{ref.dashboard_title} › {ref.title}", base + ref.path(variables))

    def _vars(self, model: str | None, request_class: str | None) -> dict[str, str]:
        out = {"service": self.spec.service}
        if model is not None:
            out["model"] = model
        if request_class is not None:
            out["class"] = request_class
        return out

    def api_server_step(self, model: str | None, rc: str | None) -> Step:
        """Step 0: the API server holds requests before the engine sees them (the frontend/engine TTFT gap)."""
        m = self.m
        sel_f = self.raw(model, rc)
        group = ", ".join(x for x in (m.model_label, m.class_label) if x)
        frontend, engine = m.frontend_latency[Sli.TTFT], m.latency[Sli.TTFT]
        queries = (
            Query(
                "TTFT p95 at the API server (HTTP arrival to first content byte)",
                f"histogram_quantile(0.95, sum by (le, {group}) (rate({frontend}_bucket{{{sel_f}}}[{RATE_WINDOW}])))",
            ),
            Query(
                "TTFT p95 inside the engine",
                f"histogram_quantile(0.95, sum by (le, {group}) (rate({engine}_bucket{{{sel_f}}}[{RATE_WINDOW}])))",
            ),
            Query(
                "Mean seconds the API server adds (frontend minus engine mean TTFT)",
                f"sum by ({group}) (rate({frontend}_sum{{{sel_f}}}[{RATE_WINDOW}])) / sum by ({group}) "
                f"(rate({frontend}_count{{{sel_f}}}[{RATE_WINDOW}]))\n- sum by ({group}) "
                f"(rate({engine}_sum{{{sel_f}}}[{RATE_WINDOW}])) / sum by ({group}) "
                f"(rate({engine}_count{{{sel_f}}}[{RATE_WINDOW}]))",
            ),
        )
        healthy = (
            "The two p95s are close (the frontend adds HTTP and tokenisation: milliseconds) and the gap is flat.",
        )
        fix = (
            "Frontend TTFT high while the engine's is low: the API server is saturated before the engine sees the "
            "request (a CPU-starved event loop, slow tokenisation of long prompts, a slow middleware). Give the "
            "API server CPU (requests and limits of the pod), run more API-server processes (--api-server-count), "
            "and check the node's CPU throttling. Adding engines does not help.",
            "Both high together: the engine is the cause; go on to step 1.",
        )
        return Step(
            0,
            "API server saturation",
            "Does the API server hold requests before the engine sees them?",
            queries,
            healthy,
            fix,
            self._panel(("frontend",), self._vars(model, rc)),
        )

    def queue_step(self, models: Sequence[Model], model: str | None, rc: str | None) -> Step:
        m = self.m
        sel = self.raw(model)
        engine = m.engine_label
        maxima = ", ".join(f"{x.name}: {x.max_num_seqs}" for x in models)
        queries = [
            Query("Requests waiting per engine", f"sum by ({self.by(engine)}) ({m.requests_waiting}{{{sel}}})"),
            Query("Requests running per engine", f"sum by ({self.by(engine)}) ({m.requests_running}{{{sel}}})"),
            Query(
                "Queue time p99 (arrival to first scheduling)",
                f"histogram_quantile(0.99, sum by (le, {m.model_label}) "
                f"(rate({m.queue_time}_bucket{{{self.raw(model, rc)}}}[{RATE_WINDOW}])))",
            ),
            Query(
                f"Scale-out signal (share of TTFTs over {self.spec.alerting.scale_out.fraction_of_slo:g}x the TTFT "
                "threshold against the share the objective allows)",
                f"{schema.RECORD_SCALE_OUT}{{{self.rec(model)}}}",
            ),
        ]
        ttft = [f for x in models if (f := self.model_facts(x).ttft_threshold) is not None]
        if rc is not None:
            own = self.spec.request_class(rc).slos.get(Sli.TTFT) if rc in {c.name for c in self.spec.classes} else None
            if own is not None and own.objective is not None:
                ttft = [own.objective.threshold]
        healthy = [
            "Waiting is 0 most of the time; short bursts that clear within a scrape or two are normal.",
            f"Running stays below each engine's --max-num-seqs ({maxima}).",
        ]
        if ttft:
            healthy.append(
                f"Queue time p99 is a small part of the TTFT objective ({format_duration(min(ttft))}): under "
                f"{format_duration(min(ttft) * 0.2)}."
            )
        healthy.append(
            f"The scale-out signal stays under {self.spec.alerting.scale_out.fraction_of_slo:g}; above it for "
            f"{format_duration(self.spec.alerting.scale_out.for_)} the autoscaler adds replicas."
        )
        fix = (
            "Running at the maximum with requests waiting: the engine receives more concurrent requests than it "
            "can run. Scale out (add replicas; the generated HPA/KEDA objects in exporters/ act on the scale-out "
            "signal), or shed batch traffic to another pool.",
            "Waiting grows while running is below the maximum: the scheduler cannot admit more because the KV "
            "cache is full; go to step 3.",
            "Neither: the queue is not the cause; go on to step 2.",
        )
        return Step(
            1,
            "Queue depth",
            "Is the engine receiving more concurrent requests than it can handle?",
            tuple(queries),
            tuple(healthy),
            fix,
            self._panel(("queue",), self._vars(model, rc)),
        )

    def running_batch(self, model: str) -> str:
        """Mean requests running per engine of one model over the rate window: the batch decode runs at."""
        engine = self.m.engine_label
        return (
            f"sum by ({self.by(engine)}) (avg_over_time({self.m.requests_running}{{{self.raw(model)}}}[{RATE_WINDOW}]))"
        )

    def expected_decode(self, models: Sequence[Model]) -> str | None:
        """Expected decode tokens/s per engine at the batch each engine is running (the planner's step time at
        that batch), for the models the planner has a figure for; None when it has none."""
        terms = []
        for x in models:
            curve = self.model_facts(x).decode_curve
            if curve is not None:
                terms.append(expected_decode_at_batch([(p.batch, p.step_seconds) for p in curve],
                                                      self.running_batch(x.name)))  # fmt: skip
        return union(terms) if terms else None

    def latency_by_engine(self, sli: Sli, quantile: float, model: str | None, rc: str | None) -> str:
        """A per-replica percentile of the histogram the class's SLO of `sli` reads (Spec.histogram: its own
        `metric:` in its own unit, scaled to seconds), or of the source's engine histogram without such an SLO."""
        m = self.m
        own = None
        if rc is not None and rc in {c.name for c in self.spec.classes}:
            request_class = self.spec.request_class(rc)
            if sli in request_class.slos:
                own = request_class
        if own is None:
            return (
                f"histogram_quantile({quantile:g}, sum by (le, {self.by(m.engine_label)}) "
                f"(rate({m.latency[sli]}_bucket{{{self.raw(model, rc)}}}[{RATE_WINDOW}])))"
            )
        hist = self.spec.histogram(own, sli)
        names = [model] if model is not None and model in own.models else list(own.models)
        matchers = _matchers(Queries(self.spec).histogram_matchers(own, sli, names))
        labels = [hist.model_label, hist.class_label]
        if hist.engine_label is not None:
            if hist.engine_label == m.engine_label:
                labels.extend(self.spec.alerting.replica_labels)
            labels.append(hist.engine_label)
        by = ", ".join(["le", *dict.fromkeys(x for x in labels if x is not None)])
        rate = f"rate({hist.name}_bucket{{{matchers}}}[{RATE_WINDOW}])"
        expr = f"histogram_quantile({quantile:g}, sum by ({by}) ({rate}))"
        return expr if hist.scale == 1.0 else f"({expr}) * {hist.scale:g}"

    def decode_step(self, models: Sequence[Model], model: str | None, rc: str | None) -> Step:
        m = self.m
        engine = m.engine_label
        measured = f"sum by ({self.by(engine)}) (rate({m.generation_tokens}{{{self.raw(model)}}}[{RATE_WINDOW}]))"
        queries = [
            Query("Decode tokens/s per engine", measured),
            Query(
                "Requests running per engine (mean over 5m: the batch decode runs at)",
                union(self.running_batch(x.name) for x in models),
            ),
        ]
        expected = self.expected_decode([x for x in models if model is None or x.name == model])
        if expected is not None:
            queries.append(
                Query("Expected decode tokens/s per engine at the batch it is running (roofline planner)", expected)
            )
            queries.append(
                Query(
                    "Measured over expected at the running batch, per engine (healthy: 0.7 or more)",
                    f"{measured}\n/ on ({self.by(engine)})\n({expected})",
                )
            )
        itl = Sli.ITL if Sli.ITL in m.latency else None
        if itl is not None:
            queries.append(Query("Inter-token latency p99 per engine", self.latency_by_engine(itl, 0.99, model, rc)))
        healthy = []
        for x in models:
            facts = self.model_facts(x)
            curve = facts.decode_curve
            if curve is not None:
                few = next((p for p in curve if p.batch >= 8), curve[0])
                healthy.append(
                    f"{x.name}: at least 70% of the expected tokens/s at the batch each engine is running (query "
                    f"above; the roofline planner on {x.tensor_parallel}x {x.gpu}). A light load expects little: "
                    f"about {curve[0].tokens_per_second:,.0f} tokens/s at 1 running request, "
                    f"{few.tokens_per_second:,.0f} at {few.batch}, {curve[-1].tokens_per_second:,.0f} at "
                    f"{curve[-1].batch} (the table under Service at a glance)."
                )
            else:
                healthy.append(
                    md(
                        "{}: the spec names no model preset and GPU, so there is no expected figure; compare "
                        "tokens/s per running request with the same hour yesterday (`offset 1d`).",
                        x.name,
                    )
                )
            if facts.itl_target is not None:
                healthy.append(
                    f"{x.name}: ITL p99 at or under {format_duration(facts.itl_target)} (the tightest ITL/TPOT "
                    "objective)."
                )
        fix = (
            "Tokens/s under 70% of the expected at the running batch: the GPU is slower than it should be; check "
            "it (step 4: clocks throttled, an XID, a slow link), and that the engine runs the planned "
            "configuration (tensor parallel size, dtype, quantisation).",
            "Tokens/s low but at the expected for the few requests running: decode is not the bottleneck; the "
            "slowness is before decode (step 1) or in prefill (long prompts: see the latency dashboard's TTFT "
            "against prompt length).",
            "ITL over target with a full batch: the batch is too large for the ITL objective; lower "
            "--max-num-seqs to the planner's largest batch (tuning section) and scale out instead.",
        )
        return Step(
            2,
            "Decode throughput",
            "Is decode slower than the expected tokens/s at the batch it is running?",
            tuple(queries),
            tuple(healthy),
            fix,
            self._panel(("decode",), self._vars(model, rc)),
        )

    def kv_step(self, model: str | None) -> Step:
        m = self.m
        engine = m.engine_label
        queries = [
            Query(
                "KV-cache usage per engine (0..1)",
                f"max by ({self.by(engine)}) ({m.kv_cache_usage}{{{self.raw(model)}}})",
            ),
            Query(
                "Preemptions per second",
                f"sum by ({self.by(engine)}) (rate({m.preemptions}{{{self.raw(model)}}}[{RATE_WINDOW}]))",
            ),
        ]
        if m.prefix_cache_hits is not None and m.prefix_cache_queries is not None:
            queries.append(
                Query(
                    "Prefix-cache hit rate",
                    f"sum by ({self.by(engine)}) (rate({m.prefix_cache_hits}{{{self.raw(model)}}}[{RATE_WINDOW}])) / "
                    f"sum by ({self.by(engine)}) (rate({m.prefix_cache_queries}{{{self.raw(model)}}}[{RATE_WINDOW}]))",
                )
            )
        limit = self.spec.alerting.kv_cache_usage_max
        healthy = (
            md("KV-cache usage under {} (`alerting.kv_cache_usage_max`).", f"{limit:.0%}"),
            "Preemptions at 0: every preemption throws away a request's KV and recomputes its prefill later.",
            "Prefix-cache hit rate steady; a sudden drop means prompts stopped sharing prefixes (a new system "
            "prompt, a client change) and prefill work rose.",
        )
        fix = (
            "Usage at the limit and preempting: the engine admits more sequences than its KV cache holds at this "
            "context length. Lower --max-num-seqs or --max-model-len, use an FP8 KV cache (--kv-cache-dtype fp8), "
            "raise --gpu-memory-utilization if HBM allows, or scale out.",
            "KV offloading to host memory (PCIe traffic in step 4) is slower than recompute at short contexts; turn "
            "it off for latency classes.",
        )
        return Step(
            3,
            "KV cache",
            "Is the KV cache at its limit, preempting or offloading?",
            tuple(queries),
            healthy,
            fix,
            self._panel(("kv",), self._vars(model, None)),
        )

    def interconnect_step(self, models: Sequence[Model]) -> Step:
        uuid = schema.GPU_UUID_LABEL
        queries = (
            Query("NVLink bytes/s sent per GPU", f"sum by ({uuid}) (rate({schema.GPU_NVLINK_TX}[{RATE_WINDOW}]))"),
            Query("PCIe bytes/s received per GPU", f"sum by ({uuid}) (rate({schema.GPU_PCIE_RX}[{RATE_WINDOW}]))"),
            Query(
                "HBM bandwidth used against the GPU's peak (0..1)",
                f"max by ({uuid}) ({schema.GPU_MEMORY_BANDWIDTH_UTILIZATION})",
            ),
            Query(
                "Clock-event reasons active (throttling)",
                f"max by ({uuid}, {schema.GPU_REASON_LABEL}) ({schema.GPU_CLOCK_EVENT_REASONS}) == 1",
            ),
            Query(
                "XID errors in the last hour",
                f"sum by ({uuid}, {schema.GPU_XID_LABEL}) (increase({schema.GPU_XID_ERRORS}[1h]))",
            ),
            Query("GPU sidecar reading the GPU (1) or not (0)", f"max by ({uuid}) ({schema.GPU_UP})"),
        )
        healthy = [
            "NVLink traffic about equal on every GPU of a tensor-parallel engine while requests run; one GPU "
            "far lower than its peers points at a degraded link.",
            "XID errors: none. Clock-event reasons: only idle (or none) while serving; any thermal or power "
            "slowdown during the breach explains slow decode.",
        ]
        for x in models:
            facts = self.model_facts(x)
            if facts.hbm_bandwidth is not None:
                healthy.append(
                    f"{x.name} on {x.gpu}: decode at a full batch keeps HBM bandwidth utilisation high (peak "
                    f"{facts.hbm_bandwidth / 1e12:.2f} TB/s per GPU); low utilisation with low tokens/s means the "
                    "GPUs wait on something else (NCCL, the host, small batches)."
                )
        healthy.append("The GPU sidecar reports 1 for every GPU; 0 means the panels above are blind for that GPU.")
        fix = (
            "An XID (79: off the bus, 48/94/95: ECC) or remapping pending: cordon and drain the node, then reset "
            "or replace the GPU.",
            Markup(
                "NVLink slow or erroring: check `nvidia-smi nvlink -s` and `-e`, run with `NCCL_DEBUG=INFO` to see "
                "the transport NCCL chose (a fall-back to PCIe or sockets is slow), and move the engine to a healthy "
                "node."
            ),
            "PCIe link trained down (generation or width below its maximum) or busy with KV offload: reseat or "
            "move; turn offload off for latency classes.",
            "Thermal or power throttling: check cooling and power capping on the node.",
        )
        return Step(
            4,
            "Interconnect and GPU",
            "Is NCCL / NVLink / PCIe slower than expected, or erroring?",
            queries,
            tuple(healthy),
            fix,
            self._panel(("nvlink",), {"service": self.spec.service}),
        )

    # -- sections ---------------------------------------------------------------------------------------------
    def section(self, rule: AlertRule) -> Section:
        severity = rule.labels.get("severity", "")
        kind = "page" if severity == self.spec.alerting.severity.page else "ticket"
        ref = dashboards.panel_for(self.built, rule)
        base = self.spec.alerting.grafana_url.rstrip("/")
        panel = link(
            f"{ref.dashboard_title} › {ref.title}", base + ref.path(dashboards.panel_variables(self.spec, rule))
        )
        labels = tuple((k, v) for k, v in rule.labels.items())
        fires = f"for {rule.for_}" if rule.for_ not in ("", "0s") else "as soon as it is true"
        return Section(
            rule=rule,
            title=rule.title,
            anchor=rule.anchor,
            severity=f"{severity} ({kind})" if severity else kind,
            summary=for_humans(rule.annotations.get("summary", "")),
            description=for_humans(rule.annotations.get("description", "")),
            meaning=self.meaning(rule),
            fires_when=fires,
            labels=labels,
            panel=panel,
            guide=self.guide(rule),
        )

    def meaning(self, rule: AlertRule) -> tuple[str, ...]:
        spec = self.spec
        who = _who(rule)
        slo = None
        if rule.request_class is not None and rule.sli is not None:
            try:
                slo = spec.request_class(rule.request_class).slos.get(rule.sli)
            except KeyError:
                slo = None
        sli_text = schema.SLI_TITLES[rule.sli] if rule.sli is not None else "latency"
        effect = _USER_EFFECT.get(rule.sli, "requests are slow") if rule.sli is not None else "requests are slow"
        out: list[str] = []
        if rule.kind is AlertKind.BURN_RATE:
            if slo is not None and slo.objective is not None:
                out.append(
                    f"{who} miss the {sli_text} objective ({slo.objective.percentile:g}% within "
                    f"{format_duration(slo.objective.threshold)}) fast enough to spend a large share of the "
                    f"{format_duration(spec.window)} error budget: both the long and the short window burn faster "
                    "than the factor, so it is happening now and not a blip."
                )
            else:
                out.append(f"{who} spend the {sli_text} error budget faster than planned.")
            out.append(f"Users: {effect}.")
        elif rule.kind is AlertKind.TIER:
            tiers = _tier_text(slo) if slo is not None else ""
            out.append(
                f"A {sli_text} percentile of {who.lower()} is worse than its tier for "
                f"{format_duration(spec.alerting.tier_for)}. {tiers}"
            )
            out.append(f"Users: {effect}; a p50 over critical means most users are affected.")
        elif rule.kind is AlertKind.BASELINE:
            base = spec.alerting.baseline
            reference = (
                f"median of the same hour over {base.median_days} days"
                if base.median_days
                else f"the same hour {format_duration(base.offset)} ago"
            )
            out.append(
                f"The trailing 5m p99 {sli_text} of {who.lower()} is above {base.ratio:g}x its baseline "
                f"({reference}), "
                f"with at least {base.min_rps:g} requests/s now and then: latency regressed relative to normal, "
                "even if the absolute SLO still holds."
            )
            out.append(f"Users: the slowest 1% notice first; {effect}.")
        elif rule.kind is AlertKind.SCALE_OUT:
            out.append(
                f"More of {who.lower()} than the TTFT objective allows above its threshold have waited longer than "
                f"{spec.alerting.scale_out.fraction_of_slo:g}x that threshold for their first token, for "
                f"{format_duration(spec.alerting.scale_out.for_)} (a bucket count, with at least "
                f"{spec.alerting.min_requests} requests in 5m): the service runs out of headroom before the SLO "
                "breaks. The autoscaler should be adding replicas; this alert means it is not, or cannot."
            )
            out.append("Users: nothing yet; soon a longer wait for the first token.")
        elif rule.kind is AlertKind.QUEUE_OVERLOAD:
            out.append(
                f"Requests wait while every slot of the engine is taken ({who.lower()}): the engine receives "
                "more concurrent requests than it can run, and each waiting request adds its wait to TTFT."
            )
            out.append("Users: a growing wait before the first token.")
        elif rule.kind is AlertKind.KV_CACHE:
            out.append(
                f"The KV cache of {who.lower()} is above {spec.alerting.kv_cache_usage_max:.0%} or preempting: "
                "the scheduler stops admitting requests and evicts running ones, whose prefill is recomputed."
            )
            out.append("Users: stalls mid-answer (preempted requests) and longer waits for the first token.")
        elif rule.kind is AlertKind.CONSISTENCY:
            limit = slo.consistency.max_p99_over_p50 if slo is not None and slo.consistency is not None else None
            out.append(
                f"p99 over p50 {sli_text} of {who.lower()} exceeds "
                f"{f'{limit:g}' if limit is not None else 'its limit'}: the tail is far from the median, so batch "
                "jobs cannot be scheduled predictably."
            )
            out.append("Users: batch jobs finish at unpredictable times; deadlines slip.")
        elif rule.kind is AlertKind.EXPORTER_GONE:
            out.append(
                f"Every metric series of {who.lower()} is gone although it served requests within the last hour: "
                "its pods are down, the scrape is broken, or the slokit plugin is not loaded. Every SLO alert of "
                "this model is blind until the series are back."
            )
            out.append("Users: possibly a full outage of this model; check its pods and the scrape targets first.")
        elif rule.kind is AlertKind.ABSENT:
            out.append(
                f"The metrics of {who.lower()} are missing: the exporter, the scrape or the engine is down. Every "
                "SLO alert of this model is blind until it is back."
            )
            out.append("Users: possibly nothing, possibly a full outage; check the engine first.")
        return tuple(out)

    def tuning(self) -> tuple[Tuning, ...]:
        m = self.m
        engine = m.engine_label
        out: list[Tuning] = []
        batch_advice: list[str] = []
        batch_queries: list[Query] = []
        for x in self.spec.models:
            facts = self.model_facts(x)
            if facts.max_batch is not None and facts.itl_target is not None:
                batch_advice.append(
                    f"{x.name}: the planner's largest batch within the {format_duration(facts.itl_target)} ITL "
                    f"objective is {facts.max_batch} sequences (KV cache and --max-num-seqs allow {facts.batch_cap}); "
                    f"the engine runs with --max-num-seqs {x.max_num_seqs}."
                )
            else:
                batch_advice.append(
                    md(
                        "{}: no planner figure (no preset, GPU or ITL objective); find it with `slokit probe`: "
                        "raise concurrency until p99 ITL reaches the target.",
                        x.name,
                    )
                )
            batch_queries.append(
                Query(
                    f"{x.name}: p99 ITL per engine",
                    f"histogram_quantile(0.99, sum by (le, {self.by(engine)}) (rate({m.latency[Sli.ITL]}_bucket"
                    f"{{{self.raw(x.name)}}}[{RATE_WINDOW}])))",
                )
            )
            batch_queries.append(
                Query(
                    f"{x.name}: the most requests running per engine over the last hour",
                    f"max by ({self.by(engine)}) (max_over_time({m.requests_running}{{{self.raw(x.name)}}}[1h]))",
                )
            )
        batch_advice.append(
            "Set --max-num-seqs to that batch: larger batches raise tokens/s per GPU but every sequence's ITL with "
            "it. It worked when p99 ITL stays within the target while running reaches the new maximum."
        )
        out.append(
            Tuning("Largest max batch size that keeps p99 ITL within target", tuple(batch_advice), tuple(batch_queries))
        )
        prefix_queries: list[Query] = []
        if m.prefix_cache_hits is not None and m.prefix_cache_queries is not None:
            prefix_queries.append(
                Query(
                    "Prefix-cache hit rate per model",
                    f"sum by ({m.model_label}) (rate({m.prefix_cache_hits}{{{self.raw(None)}}}[{RATE_WINDOW}])) / "
                    f"sum by ({m.model_label}) (rate({m.prefix_cache_queries}{{{self.raw(None)}}}[{RATE_WINDOW}]))",
                )
            )
        prefix_queries.append(
            Query(
                "TTFT p50 per model (should fall as the hit rate rises)",
                f"histogram_quantile(0.5, sum by (le, {m.model_label}) "
                f"(rate({m.latency[Sli.TTFT]}_bucket{{{self.raw(None)}}}[{RATE_WINDOW}])))",
            )
        )
        out.append(
            Tuning(
                "Prefix caching for shared prompts",
                (
                    "Keep automatic prefix caching on (--enable-prefix-caching, the default in vLLM's v1 engine) when "
                    "requests share a system prompt or few-shot examples; put the shared part first and identical.",
                    "It worked when the hit rate rises and TTFT p50 falls at the same prompt length.",
                ),
                tuple(prefix_queries),
            )
        )
        out.append(
            Tuning(
                "KV block size",
                (
                    "--block-size (16 tokens by default on GPUs) trades fragmentation against prefix-cache "
                    "granularity: smaller blocks waste less memory per sequence and match shorter shared prefixes; "
                    "larger blocks cut block-table overhead for long contexts.",
                    "It worked when KV-cache usage at the same number of running requests falls, and preemptions "
                    "stay at 0.",
                ),
                (
                    Query(
                        "KV-cache usage per running request",
                        f"max by ({self.by(engine)}) ({m.kv_cache_usage}{{{self.raw(None)}}}) / clamp_min(max by "
                        f"({self.by(engine)}) ({m.requests_running}{{{self.raw(None)}}}), 1)",
                    ),
                    Query(
                        "Preemptions per second",
                        f"sum by ({self.by(engine)}) (rate({m.preemptions}{{{self.raw(None)}}}[{RATE_WINDOW}]))",
                    ),
                ),
            )
        )
        fp8 = [
            f"{x.name}: with an FP8 KV cache the planner's largest batch within the ITL objective is "
            f"{self.model_facts(x).fp8_kv_max_batch} sequences (now {self.model_facts(x).max_batch})."
            for x in self.spec.models
            if self.model_facts(x).fp8_kv_max_batch is not None
        ]
        out.append(
            Tuning(
                "FP8 weights or KV cache",
                (
                    "--kv-cache-dtype fp8 halves KV bytes per token, so twice the sequences fit; --quantization fp8 "
                    "halves weight bytes read per decode step, which raises tokens/s when decode is bandwidth-bound "
                    "(H100/H200 have FP8 tensor cores). Check quality on your evaluation set first.",
                    *fp8,
                    "It worked when decode tokens/s per engine rises (or KV usage falls) with p99 ITL still within "
                    "the target.",
                ),
                (
                    Query(
                        "Decode tokens/s per engine",
                        f"sum by ({self.by(engine)}) (rate({m.generation_tokens}{{{self.raw(None)}}}[{RATE_WINDOW}]))",
                    ),
                    Query(
                        "KV-cache usage per engine",
                        f"max by ({self.by(engine)}) ({m.kv_cache_usage}{{{self.raw(None)}}})",
                    ),
                ),
            )
        )
        vllm_model = schema.VLLM_METRICS.model_label
        per_token = m.latency.get(Sli.TPOT, m.latency[Sli.ITL])  # SGLang has no TPOT histogram
        out.append(
            Tuning(
                "Speculative decoding",
                (
                    "--speculative-config (a draft model, n-gram or EAGLE heads) emits several tokens per step when "
                    "drafts are accepted: ITL per token falls at small batches, and gains shrink as batches fill up "
                    "(the GPU is busy anyway). Use it for latency classes with spare compute, not for full batches.",
                    "vLLM's inter-token latency then measures the gap between output events, each carrying several "
                    "tokens; judge it by TPOT (per-request time per output token).",
                    "It worked when the acceptance rate stays high (above about 0.6) and p99 TPOT falls.",
                ),
                (
                    Query(
                        "Draft acceptance rate",
                        f"sum by ({vllm_model}) (rate({schema.VLLM_SPEC_DECODE_ACCEPTED_TOKENS}[{RATE_WINDOW}])) / "
                        f"sum by ({vllm_model}) (rate({schema.VLLM_SPEC_DECODE_DRAFT_TOKENS}[{RATE_WINDOW}]))",
                    ),
                    Query(
                        f"{'TPOT' if Sli.TPOT in m.latency else 'ITL'} p99 per model",
                        f"histogram_quantile(0.99, sum by (le, {m.model_label}) "
                        f"(rate({per_token}_bucket{{{self.raw(None)}}}[{RATE_WINDOW}])))",
                    ),
                ),
            )
        )
        return tuple(out)


_USER_EFFECT: Final[Mapping[Sli | None, str]] = {
    Sli.TTFT: "a longer wait before the first token appears",
    Sli.ITL: "text streams in stutters, slower than people read",
    Sli.TPOT: "answers take longer to stream out",
    Sli.E2E: "whole requests take longer to finish",
}


_TEMPLATE_VALUE: Final = re.compile(r"\{\{\s*\$value\b[^}]*\}\}")
_TEMPLATE_LABEL: Final = re.compile(r"\{\{\s*\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def for_humans(annotation: str) -> str:
    """An alert annotation as a person reads it in the runbook: Prometheus' template expressions become the
    placeholders the notification fills in (`{{ $value | humanizePercentage }}` -> "(value)", `{{ $labels.x }}`
    -> "(x)")."""
    return _TEMPLATE_LABEL.sub(r"(\1)", _TEMPLATE_VALUE.sub("(value)", annotation))


def _who(rule: AlertRule) -> str:
    if rule.request_class is not None and rule.model is not None:
        return f"Requests of class {rule.request_class} on {rule.model}"
    if rule.request_class is not None:
        return f"Requests of class {rule.request_class}"
    if rule.model is not None:
        return f"Requests on {rule.model}"
    return "Requests"


def _tier_text(slo: Any) -> str:
    parts = []
    for pct in PERCENTILES:
        named = [
            f"{tier} {format_duration(slo.tiers.tier(tier)[pct])}" for tier in TIER_NAMES if pct in slo.tiers.tier(tier)
        ]
        if named:
            parts.append(f"{pct}: " + ", ".join(named))
    return ("Tiers: " + "; ".join(parts) + ".") if parts else ""


def _quote(value: str) -> str:
    return promql.quote(value)


def _matchers(matchers: Sequence[promql.Matcher]) -> str:
    return ", ".join(f"{label}{op}{promql.quote(value)}" for label, op, value in matchers)


def _model_matcher(label: str, models: Sequence[Model]) -> str:
    return _matchers([promql.one_of(label, [x.name for x in models])])


# ==============================================================================================================
# Entry points
# ==============================================================================================================
def _alert_rules(spec: Spec) -> list[AlertRule]:
    """The generated alerts the runbook has a section for."""
    return list(alerts.alert_rules(spec))


def render(spec: Spec, rules: Sequence[AlertRule]) -> str:
    """The runbook Markdown for a spec and its alerts (the body; the writer adds the do-not-edit notice)."""
    built = dashboards.build(spec)
    builder = _Builder(spec, built)
    sections = [builder.section(rule) for rule in rules]
    guides = list(builder.guides.values())
    seen: dict[str, str] = {g.anchor: g.title for g in guides}
    for section in sections:
        if section.anchor in seen:
            raise ValueError(
                f"alerts {seen[section.anchor]} and {section.rule.name} share runbook anchor {section.anchor!r}"
            )
        seen[section.anchor] = section.rule.name
        if heading_anchor(section.title) != section.anchor:
            raise ValueError(
                f"alert {section.rule.name}: heading {section.title!r} gives anchor {heading_anchor(section.title)!r}, "
                f"not its runbook anchor {section.anchor!r}"
            )
    template = _environment().get_template(TEMPLATE)
    board_links = [
        link(data["title"], spec.alerting.grafana_url.rstrip("/") + f"/d/{data['uid']}")
        for data in built.dashboards.values()
    ]
    text: str = template.render(
        spec=spec,
        source_is_vllm=spec.source is Source.VLLM,
        has_frontend=debug_steps.has_frontend(spec),
        sections=sections,
        guides=guides,
        tuning=builder.tuning(),
        dashboards=board_links,
        link=link,
        models=[builder.model_facts(x) for x in spec.models],
        decode_tables=[table for x in spec.models if (table := _decode_table(builder.model_facts(x))) is not None],
        slo_rows=_slo_rows(spec),
    )
    return text


@dataclass(frozen=True)
class DecodeTable:
    """The planner's expected decode of one model's engine by running batch, as table cells."""

    model: str
    batches: tuple[str, ...]
    tokens: tuple[str, ...]
    itl: tuple[str, ...]


def _decode_table(facts: ModelFacts) -> DecodeTable | None:
    curve = facts.decode_curve
    if curve is None:
        return None
    return DecodeTable(
        facts.model.name,
        tuple(str(p.batch) for p in curve),
        tuple(f"{p.tokens_per_second:,.0f}" for p in curve),
        tuple(format_duration(round(p.step_seconds, 4)) for p in curve),
    )


def _slo_rows(spec: Spec) -> list[tuple[str, str, str, str]]:
    rows = []
    for rc in spec.classes:
        for sli in Sli:
            slo = rc.slos.get(sli)
            if slo is None:
                continue
            objective = (
                f"{slo.objective.percentile:g}% within {format_duration(slo.objective.threshold)}"
                if slo.objective is not None
                else "none"
            )
            rows.append((rc.name, sli.value, objective, _tier_text(slo).removeprefix("Tiers: ").rstrip(".") or "none"))
    return rows


def files(spec: Spec) -> dict[str, Any]:
    """`runbooks/<service>.md`."""
    return {f"runbooks/{spec.service}.md": render(spec, _alert_rules(spec))}
