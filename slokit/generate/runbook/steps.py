"""The debugging guides: the steps of `debug_steps` with the exact PromQL, healthy figures and fixes for one scope."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup

from slokit import schema
from slokit.generate import debug_steps
from slokit.generate.model import AlertRule, heading_anchor
from slokit.generate.queries import Queries, union
from slokit.generate.runbook.context import Context, matchers_text
from slokit.generate.runbook.markdown import md
from slokit.generate.runbook.model import RATE_WINDOW, Guide, Query, Step
from slokit.generate.runbook.template import prose
from slokit.schema import Sli
from slokit.spec import Model


def guide(ctx: Context, rule: AlertRule) -> Guide:
    """The debugging guide of an alert's scope (its class on its model, its model, or every model), built
    once per scope."""
    models = ctx.models_of(rule)
    model = models[0] if len(models) == 1 else None
    name = model.name if model is not None else None
    rc = rule.request_class
    key = (name, rc, tuple(m.name for m in models))
    if key not in ctx.guides:
        where = name if name is not None else ", ".join(m.name for m in models)
        title = f"Debugging {rc} on {where}" if rc is not None else f"Debugging {where}"
        ctx.guides[key] = Guide(title, heading_anchor(title), steps(ctx, models, name, rc))
    return ctx.guides[key]


def steps(ctx: Context, models: Sequence[Model], name: str | None, rc: str | None) -> tuple[Step, ...]:
    """The steps of `debug_steps` that apply to the spec, in its order, for one scope."""
    build: dict[debug_steps.StepKey, Callable[[], Step]] = {
        debug_steps.StepKey.API_SERVER: lambda: api_server_step(ctx, name, rc),
        debug_steps.StepKey.QUEUE: lambda: queue_step(ctx, models, name, rc),
        debug_steps.StepKey.DECODE: lambda: decode_step(ctx, models, name, rc),
        debug_steps.StepKey.KV_CACHE: lambda: kv_step(ctx, name),
        debug_steps.StepKey.INTERCONNECT: lambda: interconnect_step(ctx, models),
    }
    return tuple(build[step.key]() for step in debug_steps.steps(ctx.spec))


def _step(
    ctx: Context,
    step: debug_steps.DebugStep,
    queries: Sequence[Query],
    healthy: Sequence[str],
    fix: Sequence[str],
    variables: Mapping[str, str],
) -> Step:
    """One step as the template renders it: the shared title and question, and a link to the step's panel."""
    return Step(
        step.number,
        step.title,
        step.question,
        tuple(queries),
        tuple(healthy),
        tuple(fix),
        ctx.panel(step.panel, variables),
    )


def api_server_step(ctx: Context, model: str | None, rc: str | None) -> Step:
    """Step 0: the API server holds requests before the engine sees them (the frontend/engine TTFT gap)."""
    m = ctx.m
    series = ctx.series(model, rc)
    group = ", ".join(x for x in (m.model_label, m.class_label) if x)
    frontend, engine = m.frontend_latency[Sli.TTFT], m.latency[Sli.TTFT]
    queries = (
        Query(
            "TTFT p95 at the API server (HTTP arrival to first content byte)",
            debug_steps.quantile(0.95, series, frontend, group),
        ),
        Query("TTFT p95 inside the engine", debug_steps.quantile(0.95, series, engine, group)),
        Query(
            "Mean seconds the API server adds (frontend minus engine mean TTFT)",
            f"{debug_steps.mean(series, frontend, group)}\n- {debug_steps.mean(series, engine, group)}",
        ),
    )
    healthy = prose("steps", "api_server_healthy")
    fix = prose("steps", "api_server_fix")
    return _step(ctx, debug_steps.API_SERVER, queries, healthy, fix, ctx.variables(model, rc))


def queue_step(ctx: Context, models: Sequence[Model], model: str | None, rc: str | None) -> Step:
    m = ctx.m
    engines = ctx.series(model)
    engine = m.engine_label
    maxima = ", ".join(f"{x.name}: {x.max_num_seqs}" for x in models)
    queries = [
        Query("Requests waiting per engine", debug_steps.waiting(ctx.spec, engines, ctx.by(engine))),
        Query("Requests running per engine", debug_steps.running(ctx.spec, engines, ctx.by(engine))),
        Query(
            "Queue time p99 (arrival to first scheduling)",
            debug_steps.queue_time_p99(ctx.spec, ctx.series(model, rc), m.model_label or ""),
        ),
        Query(
            f"Scale-out signal (share of TTFTs over {ctx.spec.alerting.scale_out.fraction_of_slo:g}x the TTFT "
            "threshold against the share the objective allows)",
            f"{schema.RECORD_SCALE_OUT}{{{ctx.rec(model)}}}",
        ),
    ]
    ttft = [f for x in models if (f := ctx.model_facts(x).ttft_threshold) is not None]
    if rc is not None:
        own = ctx.spec.request_class(rc).slos.get(Sli.TTFT) if rc in {c.name for c in ctx.spec.classes} else None
        if own is not None and own.objective is not None:
            ttft = [own.objective.threshold]
    healthy = prose(
        "steps", "queue_healthy", maxima=maxima, ttft=min(ttft) if ttft else None,
        queue_share=debug_steps.QUEUE_TIME_SHARE_OF_TTFT, scale_out=ctx.spec.alerting.scale_out,
    )  # fmt: skip
    fix = prose("steps", "queue_fix", kv=ctx.m.kv_cache_usage is not None)
    return _step(ctx, debug_steps.QUEUE, queries, healthy, fix, ctx.variables(model, rc))


def running_batch(ctx: Context, model: str) -> str:
    """Mean requests running per engine of one model over the rate window: the batch decode runs at."""
    engine = ctx.m.engine_label
    return debug_steps.running_batch(ctx.spec, ctx.series(model), ctx.by(engine))


def expected_decode(ctx: Context, models: Sequence[Model]) -> str | None:
    """Expected decode tokens/s per engine at the batch each engine is running (the planner's step time at
    that batch), for the models the planner has a figure for; None when it has none."""
    return debug_steps.expected_decode(
        (curve, running_batch(ctx, x.name)) for x in models if (curve := ctx.model_facts(x).decode_curve) is not None
    )


def latency_by_engine(ctx: Context, sli: Sli, quantile: float, model: str | None, rc: str | None) -> str:
    """A per-replica percentile of the histogram the class's SLO of `sli` reads (Spec.histogram: its own
    `metric:` in its own unit, scaled to seconds), or of the source's engine histogram without such an SLO."""
    m = ctx.m
    own = None
    if rc is not None and rc in {c.name for c in ctx.spec.classes}:
        request_class = ctx.spec.request_class(rc)
        if sli in request_class.slos:
            own = request_class
    if own is None:
        return (
            f"histogram_quantile({quantile:g}, sum by (le, {ctx.by(m.engine_label)}) "
            f"(rate({m.latency[sli]}_bucket{{{ctx.raw(model, rc)}}}[{RATE_WINDOW}])))"
        )
    hist = ctx.spec.histogram(own, sli)
    names = [model] if model is not None and model in own.models else list(own.models)
    matchers = matchers_text(Queries(ctx.spec).histogram_matchers(own, sli, names))
    labels = [hist.model_label, hist.class_label]
    if hist.engine_label is not None:
        if hist.engine_label == m.engine_label:
            labels.extend(ctx.spec.alerting.replica_labels)
        labels.append(hist.engine_label)
    by = ", ".join(["le", *dict.fromkeys(x for x in labels if x is not None)])
    rate = f"rate({hist.name}_bucket{{{matchers}}}[{RATE_WINDOW}])"
    expr = f"histogram_quantile({quantile:g}, sum by ({by}) ({rate}))"
    return expr if hist.scale == 1.0 else f"({expr}) * {hist.scale:g}"


def decode_step(ctx: Context, models: Sequence[Model], model: str | None, rc: str | None) -> Step:
    m = ctx.m
    engine = m.engine_label
    share = debug_steps.DECODE_HEALTHY_SHARE
    measured = debug_steps.decode_tokens(ctx.spec, ctx.series(model), ctx.by(engine))
    queries = [
        Query("Decode tokens/s per engine", measured),
        Query(
            "Requests running per engine (mean over 5m: the batch decode runs at)",
            union(running_batch(ctx, x.name) for x in models),
        ),
    ]
    expected = expected_decode(ctx, [x for x in models if model is None or x.name == model])
    if expected is not None:
        queries.append(
            Query("Expected decode tokens/s per engine at the batch it is running (roofline planner)", expected)
        )
        queries.append(
            Query(
                f"Measured over expected at the running batch, per engine (healthy: {share:g} or more)",
                f"{measured}\n/ on ({ctx.by(engine)})\n({expected})",
            )
        )
    itl = Sli.ITL if Sli.ITL in m.latency else None
    if itl is not None:
        queries.append(Query("Inter-token latency p99 per engine", latency_by_engine(ctx, itl, 0.99, model, rc)))
    healthy: list[str] = []
    for x in models:
        facts = ctx.model_facts(x)
        curve = facts.decode_curve
        if curve is not None:
            few = next((p for p in curve if p.batch >= 8), curve[0])
            healthy.extend(prose("steps", "decode_healthy", model=x, share=share, curve=curve, few=few))
        else:
            healthy.append(
                md(
                    "{}: the spec names no model preset and GPU, so there is no expected figure; compare "
                    "tokens/s per running request with the same hour yesterday (`offset 1d`).",
                    x.name,
                )
            )
        if facts.itl_target is not None:
            healthy.extend(prose("steps", "decode_itl", name=x.name, itl_target=facts.itl_target))
    fix = prose("steps", "decode_fix", share=share)
    return _step(ctx, debug_steps.DECODE, queries, healthy, fix, ctx.variables(model, rc))


def kv_step(ctx: Context, model: str | None) -> Step:
    m = ctx.m
    engine = m.engine_label
    engines, by = ctx.series(model), ctx.by(engine)
    queries = [
        Query(title, expr)
        for title, expr in (
            ("KV-cache usage per engine (0..1)", debug_steps.kv_cache_usage(ctx.spec, engines, by)),
            ("Preemptions per second", debug_steps.preemptions(ctx.spec, engines, by)),
        )
        if expr is not None
    ]
    hit_rate = debug_steps.prefix_cache_hit_rate(ctx.spec, engines, by)
    if hit_rate is not None:
        queries.append(Query("Prefix-cache hit rate", hit_rate))
    limit = ctx.spec.alerting.kv_cache_usage_max
    healthy = (
        md("KV-cache usage under {} (`alerting.kv_cache_usage_max`).", f"{limit:.0%}"),
        *prose("steps", "kv_healthy"),
    )
    fix = prose("steps", "kv_fix")
    return _step(ctx, debug_steps.KV_CACHE, queries, healthy, fix, ctx.variables(model, None))


def interconnect_step(ctx: Context, models: Sequence[Model]) -> Step:
    queries = (
        Query("NVLink bytes/s sent per GPU", debug_steps.gpu_bytes_rate(schema.GPU_NVLINK_TX, RATE_WINDOW)),
        Query("PCIe bytes/s received per GPU", debug_steps.gpu_bytes_rate(schema.GPU_PCIE_RX, RATE_WINDOW)),
        Query(
            "HBM bandwidth used against the GPU's peak (0..1)",
            debug_steps.gpu_max(schema.GPU_MEMORY_BANDWIDTH_UTILIZATION),
        ),
        Query("Clock-event reasons active (throttling)", f"{debug_steps.clock_event_reasons()} == 1"),
        Query("XID errors in the last hour", debug_steps.xid_errors("1h")),
        Query("GPU sidecar reading the GPU (1) or not (0)", debug_steps.gpu_max(schema.GPU_UP)),
    )
    healthy = list(prose("steps", "interconnect_healthy"))
    for x in models:
        facts = ctx.model_facts(x)
        if facts.hbm_bandwidth is not None:
            healthy.extend(prose("steps", "interconnect_hbm", model=x, hbm_bandwidth=facts.hbm_bandwidth))
    healthy.extend(prose("steps", "interconnect_sidecar"))
    fix = (
        *prose("steps", "interconnect_xid_fix"),
        Markup(
            "NVLink slow or erroring: check `nvidia-smi nvlink -s` and `-e`, run with `NCCL_DEBUG=INFO` to see "
            "the transport NCCL chose (a fall-back to PCIe or sockets is slow), and move the engine to a healthy "
            "node."
        ),
        *prose("steps", "interconnect_link_fix"),
    )
    return _step(ctx, debug_steps.INTERCONNECT, queries, healthy, fix, {"service": ctx.spec.service})
