"""The short terminal form of a plan: the numbers that decide a purchase, one line each, the findings after.

`Plan.as_dict()` is the complete form (`slokit plan --json`); this one is for reading.
"""

from __future__ import annotations

from slokit.plan.roofline import Plan
from slokit.units import format_duration


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB"


def _bytes(value: float) -> str:
    if value >= 1 << 20:
        return f"{value / (1 << 20):.1f} MiB"
    return f"{value / 1024:g} KiB"


def _int(value: float) -> str:
    return f"{round(value):,}"


def title(plan: Plan) -> str:
    """`llama-3-70b on 8 x h100-sxm (TP 8), bf16 weights, bf16 KV cache`."""
    i = plan.inputs
    layout = f"TP {i.tensor_parallel}" + (f" x PP {i.pipeline_parallel}" if i.pipeline_parallel > 1 else "")
    if i.engine_nodes > 1:  # a group larger than a server is a different machine to buy and to run
        layout += f" over {i.engine_nodes} servers"
    return (
        f"{i.model.name} on {i.gpus_per_engine} x {i.gpu.name} ({layout}), {i.weight_dtype} weights, "
        f"{i.kv_dtype} KV cache, {_int(i.context_tokens)}-token context"
    )


def render_text(plan: Plan) -> str:
    """The plan as a short two-column table followed by its notes."""
    i = plan.inputs
    rows: list[tuple[str, str]] = []
    fit = "fits" if plan.fits else "DOES NOT FIT"
    rows.append(
        ("weights per GPU", f"{_gb(plan.weight_bytes_per_gpu)} of {_gb(plan.usable_bytes_per_gpu)} usable: {fit}")
    )
    rows.append(
        (
            "KV cache",
            f"{_bytes(plan.kv_bytes_per_token)}/token; {_int(plan.kv_tokens_per_engine)} tokens per engine "
            f"= {_int(plan.max_sequences_by_kv)} sequences",
        )
    )
    one = plan.step_at_batch_1
    if one is not None:
        comm = f" + TP comm {_ms(one.tp_communication)}" if one.tp_communication else ""
        rows.append(
            (
                "decode, batch 1",
                f"ITL {_ms(one.expected)} (floor {_ms(one.floor)}: {one.roof} "
                f"{_ms(max(one.memory_floor, one.compute_floor))}{comm}), {one.bound}-bound",
            )
        )
    slo = f" at ITL SLO {format_duration(i.itl_slo_seconds)}" if i.itl_slo_seconds is not None else ""
    top = plan.step_at_max_batch
    tps = plan.decode_tokens_per_second_per_engine
    if top is not None and tps is not None:
        limit = "ITL SLO" if plan.max_batch < plan.batch_cap else _cap_reason(plan)
        rows.append(
            (
                f"max batch{slo}",
                f"{plan.max_batch} sequences ({plan.max_batch / i.gpus_per_engine:.3g} per GPU, limited by {limit}); "
                f"ITL {_ms(top.expected)}, {top.bound}-bound",
            )
        )
        rows.append(("decode throughput", f"{_int(tps)} tokens/s per engine, {_int(tps / i.gpus_per_engine)} per GPU"))
    elif plan.fits:
        rows.append((f"max batch{slo}", "none: the ITL SLO is missed even by one sequence"))
    pre = plan.prefill
    ttft = ""
    if i.ttft_slo_seconds is not None:
        verdict = "met" if plan.ttft_slo_met else "MISSED"
        ttft = (
            f"; TTFT SLO {format_duration(i.ttft_slo_seconds)} {verdict}, "
            f"prompts up to {plan.max_prompt_tokens_within_ttft_slo}"
        )
    rows.append(
        (
            f"prefill {_int(pre.prompt_tokens)} tokens",
            f"{_ms(pre.expected)} ({pre.bound}-bound; compute outweighs memory above "
            f"{plan.prefill_compute_bound_above_prompt_tokens} tokens){ttft}",
        )
    )
    if i.concurrency is not None:
        if plan.engines is not None and plan.gpus is not None:
            rows.append(
                (
                    "sizing",
                    f"{_int(i.concurrency)} concurrent x {1 + i.headroom:g} headroom -> {_engines(plan.engines)}, "
                    f"{plan.gpus} GPUs",
                )
            )
        else:
            rows.append(("sizing", "no engine meets the SLO, so no number of them does"))
    else:
        # Without a peak the planner sizes one engine only; say what would give the replica and GPU count.
        rows.append(("sizing", "one engine; pass --concurrency N (peak concurrent sequences) for engines and GPUs"))
    other = plan.fp8_kv
    if other is not None and other.fits:
        sized = f", {_engines(other.engines)}" if other.engines is not None else ""
        rows.append(
            (
                "with 8-bit KV cache",
                f"{_int(other.kv_tokens_per_engine)} tokens per engine, max batch {other.max_batch}{sized}",
            )
        )
    width = max(len(name) for name, _ in rows)
    lines = [title(plan)]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)


def _cap_reason(plan: Plan) -> str:
    i = plan.inputs
    if i.max_num_seqs is not None and plan.batch_cap == i.max_num_seqs and plan.batch_cap < plan.max_sequences_by_kv:
        return f"max_num_seqs {i.max_num_seqs}"
    if i.itl_slo_seconds is None:
        return "KV cache (no ITL SLO)"
    return "KV cache"


def _engines(count: int) -> str:
    return f"{count} engine{'s' if count != 1 else ''}"
