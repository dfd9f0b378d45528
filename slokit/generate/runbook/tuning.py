"""The tuning section: levers that move the SLO once an incident is over, each with the metric that shows it worked."""

from __future__ import annotations

from slokit.generate.runbook.context import Context
from slokit.generate.runbook.model import RATE_WINDOW, Query, Tuning
from slokit.generate.runbook.template import prose
from slokit.schema import Sli


def _batch_size(ctx: Context) -> Tuning:
    """The largest --max-num-seqs whose ITL stays within target: the planner's figure per model is in the models
    table, `slokit probe` finds it where the planner has none, and the queries (for the model being tuned) show the
    new maximum holds."""
    m = ctx.m
    engine = m.engine_label
    facts = [ctx.model_facts(x) for x in ctx.spec.models]
    planned = sum(1 for f in facts if f.max_batch is not None and f.itl_target is not None)
    advice = list(prose("tuning", "batch_planned", planned=planned, unplanned=len(facts) - planned))
    queries: list[Query] = []
    if Sli.ITL in m.latency:  # TGI has no inter-token histogram
        queries.append(
            Query(
                "p99 ITL per engine",
                f"histogram_quantile(0.99, sum by (le, {ctx.by(engine)}) (rate({m.latency[Sli.ITL]}_bucket"
                f"{{{ctx.raw_one()}}}[{RATE_WINDOW}])))",
            )
        )
    queries.append(
        Query(
            "The most requests running per engine over the last hour",
            f"max by ({ctx.by(engine)}) (max_over_time({m.requests_running}{{{ctx.raw_one()}}}[1h]))",
        )
    )
    advice.extend(prose("tuning", "batch_set"))
    return Tuning("Largest max batch size that keeps p99 ITL within target", tuple(advice), tuple(queries))


def _prefix_caching(ctx: Context) -> Tuning:
    """Prefix caching for shared prompts; the hit-rate query only where the source exports the prefix-cache
    counters, TTFT p50 always."""
    m = ctx.m
    queries: list[Query] = []
    if m.prefix_cache_hits is not None and m.prefix_cache_queries is not None:
        queries.append(
            Query(
                "Prefix-cache hit rate per model",
                f"sum by ({m.model_label}) (rate({m.prefix_cache_hits}{{{ctx.raw(None)}}}[{RATE_WINDOW}])) / "
                f"sum by ({m.model_label}) (rate({m.prefix_cache_queries}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
            )
        )
    if Sli.TTFT in m.latency:  # TGI has no TTFT histogram
        queries.append(
            Query(
                "TTFT p50 per model (should fall as the hit rate rises)",
                f"histogram_quantile(0.5, sum by ({_le_by(ctx)}) "
                f"(rate({m.latency[Sli.TTFT]}_bucket{{{ctx.raw(None)}}}[{RATE_WINDOW}])))",
            )
        )
    return Tuning(
        "Prefix caching for shared prompts",
        prose("tuning", "prefix_caching"),
        tuple(queries),
    )


def _block_size(ctx: Context) -> Tuning:
    """--block-size: fragmentation against prefix-cache granularity, judged by KV usage per running request."""
    m = ctx.m
    engine = m.engine_label
    return Tuning(
        "KV block size",
        prose("tuning", "block_size"),
        (
            Query(
                "KV-cache usage per running request",
                f"max by ({ctx.by(engine)}) ({m.kv_cache_usage}{{{ctx.raw(None)}}}) / clamp_min(max by "
                f"({ctx.by(engine)}) ({m.requests_running}{{{ctx.raw(None)}}}), 1)",
            ),
            Query(
                "Preemptions per second",
                f"sum by ({ctx.by(engine)}) (rate({m.preemptions}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
            ),
        ),
    )


def _fp8(ctx: Context) -> Tuning:
    """FP8 weights or KV cache, with the planner's larger batch per model where it can estimate one."""
    m = ctx.m
    engine = m.engine_label
    larger = sum(1 for x in ctx.spec.models if ctx.model_facts(x).fp8_kv_max_batch is not None)
    queries = [
        Query(
            "Decode tokens/s per engine",
            f"sum by ({ctx.by(engine)}) (rate({m.generation_tokens}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
        )
    ]
    if m.kv_cache_usage is not None:  # TGI exports no KV-cache usage
        queries.append(
            Query("KV-cache usage per engine", f"max by ({ctx.by(engine)}) ({m.kv_cache_usage}{{{ctx.raw(None)}}})")
        )
    return Tuning(
        "FP8 weights or KV cache",
        prose("tuning", "fp8", larger=larger),
        tuple(queries),
    )


def _speculative_decoding(ctx: Context) -> Tuning:
    """Speculative decoding, judged by TPOT (ITL where the source has no TPOT histogram, as SGLang) and the
    engine's draft acceptance rate where the source exports its counters."""
    m = ctx.m
    per_token = m.latency.get(Sli.TPOT) or m.latency.get(Sli.ITL)  # SGLang has no TPOT histogram
    queries = []
    drafts = ctx.spec.source.draft_acceptance
    if drafts is not None:
        by = drafts.model_label
        queries.append(
            Query(
                "Draft acceptance rate",
                f"sum by ({by}) (rate({drafts.accepted}[{RATE_WINDOW}])) / "
                f"sum by ({by}) (rate({drafts.drafted}[{RATE_WINDOW}]))",
            )
        )
    if per_token is not None:
        queries.append(
            Query(
                f"{'TPOT' if Sli.TPOT in m.latency else 'ITL'} p99 per model",
                f"histogram_quantile(0.99, sum by ({_le_by(ctx)}) "
                f"(rate({per_token}_bucket{{{ctx.raw(None)}}}[{RATE_WINDOW}])))",
            )
        )
    return Tuning("Speculative decoding", prose("tuning", "speculative_decoding"), tuple(queries))


def _le_by(ctx: Context) -> str:
    """`le` and the model label, for a percentile per model (a source without a model label serves one model)."""
    return ", ".join(["le", *([ctx.m.model_label] if ctx.m.model_label else [])])


def tuning(ctx: Context) -> tuple[Tuning, ...]:
    """The tuning levers, one function each, in the order the runbook lists them; the KV block size only where
    the source exports both KV-cache usage and preemptions (TGI exports neither)."""
    block = (_block_size(ctx),) if ctx.m.kv_cache_usage is not None and ctx.m.preemptions is not None else ()
    return (_batch_size(ctx), _prefix_caching(ctx), *block, _fp8(ctx), _speculative_decoding(ctx))
