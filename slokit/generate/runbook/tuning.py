"""The tuning section: levers that move the SLO once an incident is over, each with the metric that shows it worked."""

from __future__ import annotations

from slokit import schema
from slokit.generate.runbook.context import Context
from slokit.generate.runbook.markdown import md
from slokit.generate.runbook.model import RATE_WINDOW, Query, Tuning
from slokit.schema import Sli
from slokit.units import format_duration


def tuning(ctx: Context) -> tuple[Tuning, ...]:
    m = ctx.m
    engine = m.engine_label
    le_by = ", ".join(["le", *([m.model_label] if m.model_label else [])])  # per model (TGI: its one model)
    out: list[Tuning] = []
    batch_advice: list[str] = []
    batch_queries: list[Query] = []
    for x in ctx.spec.models:
        facts = ctx.model_facts(x)
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
        if Sli.ITL in m.latency:  # TGI has no inter-token histogram
            batch_queries.append(
                Query(
                    f"{x.name}: p99 ITL per engine",
                    f"histogram_quantile(0.99, sum by (le, {ctx.by(engine)}) (rate({m.latency[Sli.ITL]}_bucket"
                    f"{{{ctx.raw(x.name)}}}[{RATE_WINDOW}])))",
                )
            )
        batch_queries.append(
            Query(
                f"{x.name}: the most requests running per engine over the last hour",
                f"max by ({ctx.by(engine)}) (max_over_time({m.requests_running}{{{ctx.raw(x.name)}}}[1h]))",
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
                f"sum by ({m.model_label}) (rate({m.prefix_cache_hits}{{{ctx.raw(None)}}}[{RATE_WINDOW}])) / "
                f"sum by ({m.model_label}) (rate({m.prefix_cache_queries}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
            )
        )
    if Sli.TTFT in m.latency:  # TGI has no TTFT histogram
        prefix_queries.append(
            Query(
                "TTFT p50 per model (should fall as the hit rate rises)",
                f"histogram_quantile(0.5, sum by ({le_by}) "
                f"(rate({m.latency[Sli.TTFT]}_bucket{{{ctx.raw(None)}}}[{RATE_WINDOW}])))",
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
    if m.kv_cache_usage is not None and m.preemptions is not None:  # TGI exports neither
        out.append(_kv_block_size(ctx))
    fp8_queries = [
        Query(
            "Decode tokens/s per engine",
            f"sum by ({ctx.by(engine)}) (rate({m.generation_tokens}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
        )
    ]
    if m.kv_cache_usage is not None:
        fp8_queries.append(
            Query("KV-cache usage per engine", f"max by ({ctx.by(engine)}) ({m.kv_cache_usage}{{{ctx.raw(None)}}})")
        )
    fp8 = [
        f"{x.name}: with an FP8 KV cache the planner's largest batch within the ITL objective is "
        f"{ctx.model_facts(x).fp8_kv_max_batch} sequences (now {ctx.model_facts(x).max_batch})."
        for x in ctx.spec.models
        if ctx.model_facts(x).fp8_kv_max_batch is not None
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
            tuple(fp8_queries),
        )
    )
    vllm_model = schema.VLLM_METRICS.model_label
    per_token = m.latency.get(Sli.TPOT) or m.latency[Sli.ITL]  # SGLang has no TPOT histogram
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
                    f"histogram_quantile(0.99, sum by ({le_by}) "
                    f"(rate({per_token}_bucket{{{ctx.raw(None)}}}[{RATE_WINDOW}])))",
                ),
            ),
        )
    )
    return tuple(out)


def _kv_block_size(ctx: Context) -> Tuning:
    """--block-size: KV-cache usage per running request and preemptions (sources with both signals)."""
    m, by = ctx.m, ctx.by(ctx.m.engine_label)
    return Tuning(
        "KV block size",
        (
            "--block-size (16 tokens by default on GPUs) trades fragmentation against prefix-cache "
            "granularity: smaller blocks waste less memory per sequence and match shorter shared prefixes; "
            "larger blocks cut block-table overhead for long contexts.",
            "It worked when KV-cache usage at the same number of running requests falls, and preemptions stay at 0.",
        ),
        (
            Query(
                "KV-cache usage per running request",
                f"max by ({by}) ({m.kv_cache_usage}{{{ctx.raw(None)}}}) / clamp_min(max by "
                f"({by}) ({m.requests_running}{{{ctx.raw(None)}}}), 1)",
            ),
            Query(
                "Preemptions per second",
                f"sum by ({by}) (rate({m.preemptions}{{{ctx.raw(None)}}}[{RATE_WINDOW}]))",
            ),
        ),
    )
