"""The fleet's debugging guide: the steps of `debug_steps` with their PromQL, healthy figures and fixes, written once.

Every alert section links to this one guide. Its queries filter by the model an alert names: the spec's only model
by name, or `<model>` (context.MODEL_PLACEHOLDER) which the reader replaces with the alert's `model` label. What
differs per model (max_num_seqs, the planner's figures, the GPU) is in the models table under "Service at a glance",
never in a copy of the guide per model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from markupsafe import Markup

from slokit import promql, schema
from slokit.generate import debug_steps
from slokit.generate.model import heading_anchor
from slokit.generate.queries import Queries
from slokit.generate.runbook.context import Context, matchers_text
from slokit.generate.runbook.markdown import md
from slokit.generate.runbook.model import RATE_WINDOW, Guide, Query, Step
from slokit.generate.runbook.template import prose
from slokit.schema import Sli
from slokit.spec import Model

GUIDE_TITLE: Final = "Debugging"


# Each distinct planner curve adds an expected-decode query and a ratio; past this many the guide points at the
# dashboard panel and the models' table instead, so the guide does not grow with a fleet of distinct models.
MAX_CURVE_QUERIES: Final = 2


def guide(ctx: Context) -> Guide:
    """The fleet's one debugging guide, built once per runbook."""
    if ctx.guide is None:
        ctx.guide = Guide(GUIDE_TITLE, heading_anchor(GUIDE_TITLE), steps(ctx))
    return ctx.guide


def steps(ctx: Context) -> tuple[Step, ...]:
    """The steps of `debug_steps` that apply to the spec, in its order."""
    build: dict[debug_steps.StepKey, Callable[[], Step]] = {
        debug_steps.StepKey.API_SERVER: lambda: api_server_step(ctx),
        debug_steps.StepKey.QUEUE: lambda: queue_step(ctx),
        debug_steps.StepKey.DECODE: lambda: decode_step(ctx),
        debug_steps.StepKey.KV_CACHE: lambda: kv_step(ctx),
        debug_steps.StepKey.INTERCONNECT: lambda: interconnect_step(ctx),
    }
    return tuple(build[step.key]() for step in debug_steps.steps(ctx.spec))


def _variables(ctx: Context) -> dict[str, str]:
    """Dashboard variables of the guide's panel links: the service, and the model where the spec has one."""
    return ctx.variables(None if ctx.placeholder else ctx.one_model, None)


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


def api_server_step(ctx: Context) -> Step:
    """Step 0: the API server holds requests before the engine sees them (the frontend/engine TTFT gap)."""
    m = ctx.m
    series = ctx.series_one()
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
    return _step(ctx, debug_steps.API_SERVER, queries, healthy, fix, _variables(ctx))


def _maxima(ctx: Context) -> str:
    """Each engine's --max-num-seqs as the queue step quotes it: by name for one model, else the models table."""
    models = ctx.spec.models
    if len(models) == 1:
        return f"{models[0].name}: {models[0].max_num_seqs}"
    return "the max-num-seqs column of the models table under Service at a glance"


def queue_step(ctx: Context) -> Step:
    m = ctx.m
    engines = ctx.series_one()
    engine = m.engine_label
    waiting = debug_steps.waiting(ctx.spec, engines, ctx.by(engine))
    queries = [
        *([Query("Requests waiting per engine", waiting)] if waiting is not None else []),
        Query("Requests running per engine", debug_steps.running(ctx.spec, engines, ctx.by(engine))),
        Query(
            "Queue time p99 (arrival to first scheduling)",
            debug_steps.queue_time_p99(ctx.spec, engines, m.model_label or ""),
        ),
        Query(
            f"Scale-out signal (share of TTFTs over {ctx.spec.alerting.scale_out.fraction_of_slo:g}x the TTFT "
            "threshold against the share the objective allows)",
            f"{schema.RECORD_SCALE_OUT}{{{ctx.rec_one()}}}",
        ),
    ]
    ttft = [f for x in ctx.spec.models if (f := ctx.model_facts(x).ttft_threshold) is not None]
    healthy = prose(
        "steps", "queue_healthy", maxima=_maxima(ctx), ttft=min(ttft) if ttft else None,
        queue_share=debug_steps.QUEUE_TIME_SHARE_OF_TTFT, scale_out=ctx.spec.alerting.scale_out,
    )  # fmt: skip
    fix = prose("steps", "queue_fix", kv=ctx.m.kv_cache_usage is not None)
    return _step(ctx, debug_steps.QUEUE, queries, healthy, fix, _variables(ctx))


def running_batch(ctx: Context, matchers: str) -> str:
    """Mean requests running per engine over the rate window (of the series `matchers` select): the batch decode
    runs at."""
    engine = ctx.m.engine_label
    series = debug_steps.Series(lambda metric: f"{metric}{{{matchers}}}", RATE_WINDOW)
    return debug_steps.running_batch(ctx.spec, series, ctx.by(engine))


def curve_groups(ctx: Context) -> list[list[Model]]:
    """The models the planner has a decode curve for, grouped by identical curve (one query serves a group)."""
    groups: dict[tuple[tuple[int, float], ...], list[Model]] = {}
    for x in ctx.spec.models:
        curve = ctx.model_facts(x).decode_curve
        if curve is not None:
            groups.setdefault(tuple((p.batch, p.step_seconds) for p in curve), []).append(x)
    return list(groups.values())


def _group_matchers(ctx: Context, models: Sequence[Model]) -> str:
    """Matchers on the raw series of a group of models: the scope they share and their model label values."""
    if len(models) == 1 or ctx.m.model_label is None:
        return ctx.raw(models[0].name)
    q = Queries(ctx.spec)
    scopes = {tuple(sorted(q.model_selector(x.name).items())) for x in models}
    scope = promql.labels_matchers(dict(next(iter(scopes)))) if len(scopes) == 1 else q.common_selector()
    return matchers_text([*scope, promql.one_of(ctx.m.model_label, [x.name for x in models])])


def _group_series(ctx: Context, models: Sequence[Model]) -> debug_steps.Series:
    matchers = _group_matchers(ctx, models)
    return debug_steps.Series(lambda metric: f"{metric}{{{matchers}}}", RATE_WINDOW)


def expected_decode(ctx: Context, models: Sequence[Model]) -> str | None:
    """Expected decode tokens/s per engine at the batch each engine is running (the planner's step time at
    that batch), for `models` (which share one planner curve); None when the planner has no figure."""
    curve = ctx.model_facts(models[0]).decode_curve
    if curve is None:
        return None
    return debug_steps.expected_decode([(curve, running_batch(ctx, _group_matchers(ctx, models)))])


def latency_by_engine(ctx: Context, sli: Sli, quantile: float) -> str:
    """A per-replica percentile of the source's engine histogram of `sli`, for the model an alert names."""
    m = ctx.m
    return (
        f"histogram_quantile({quantile:g}, sum by (le, {ctx.by(m.engine_label)}) "
        f"(rate({m.latency[sli]}_bucket{{{ctx.raw_one()}}}[{RATE_WINDOW}])))"
    )


def decode_step(ctx: Context) -> Step:
    m = ctx.m
    engine = m.engine_label
    share = debug_steps.DECODE_HEALTHY_SHARE
    measured = debug_steps.decode_tokens(ctx.spec, ctx.series_one(), ctx.by(engine))
    queries = [
        Query("Decode tokens/s per engine", measured),
        Query(
            "Requests running per engine (mean over 5m: the batch decode runs at)", running_batch(ctx, ctx.raw_one())
        ),
    ]
    groups = curve_groups(ctx)
    if len(groups) <= MAX_CURVE_QUERIES:
        for group in groups:
            expected = expected_decode(ctx, group)
            assert expected is not None
            names = ", ".join(x.name for x in group)
            group_measured = debug_steps.decode_tokens(ctx.spec, _group_series(ctx, group), ctx.by(engine))
            queries.append(
                Query(
                    f"Expected decode tokens/s per engine of {names} at the batch it is running (roofline planner)",
                    expected,
                )
            )
            queries.append(
                Query(
                    f"Measured over expected at the running batch, per engine of {names} (healthy: {share:g} or more)",
                    f"{group_measured}\n/ on ({ctx.by(engine)})\n({expected})",
                )
            )
    if Sli.ITL in m.latency:
        queries.append(Query("Inter-token latency p99 per engine", latency_by_engine(ctx, Sli.ITL, 0.99)))
    without = [x.name for x in ctx.spec.models if ctx.model_facts(x).decode_curve is None]
    healthy = prose(
        "steps", "decode_healthy", share=share, curves=len(groups), queries=len(groups) <= MAX_CURVE_QUERIES,
        without=len(without), models=len(ctx.spec.models),
    )  # fmt: skip
    if any(ctx.model_facts(x).itl_target is not None for x in ctx.spec.models):
        healthy += prose("steps", "decode_itl")
    fix = prose("steps", "decode_fix", share=share)
    return _step(ctx, debug_steps.DECODE, queries, healthy, fix, _variables(ctx))


def kv_step(ctx: Context) -> Step:
    m = ctx.m
    engine = m.engine_label
    engines, by = ctx.series_one(), ctx.by(engine)
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
    return _step(ctx, debug_steps.KV_CACHE, queries, healthy, fix, _variables(ctx))


def interconnect_step(ctx: Context) -> Step:
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
    if any(ctx.model_facts(x).hbm_bandwidth is not None for x in ctx.spec.models):
        healthy.extend(prose("steps", "interconnect_hbm"))
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
