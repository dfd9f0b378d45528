"""`slokit plan`: roofline capacity planning for latency SLOs, from presets, from flags or from a spec's models."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from slokit.catalog import GPUS, MODELS
from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_one_spec_or_exit
from slokit.plan.report import render_text
from slokit.plan.roofline import (
    DEFAULT_ALLREDUCE_LATENCY_SECONDS,
    DEFAULT_EFFICIENCY,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_HEADROOM,
    DEFAULT_NETWORK_BYTES_PER_SECOND,
    DEFAULT_NETWORK_LATENCY_SECONDS,
    DEFAULT_OVERHEAD_BYTES,
    GIB,
    GPUS_PER_NODE,
    KV_DTYPES,
    WEIGHT_DTYPES,
    Calibration,
    ModelShape,
    Plan,
    PlanError,
    PlanInputs,
    calibrate,
    inputs_for_model,
    plan,
    workload_tokens,
)
from slokit.units import DurationError, parse_duration

_COUNT = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?(?:e\d+)?)\s*(?P<unit>[kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


class UsageError(Exception):
    """A flag the planner cannot use: the message says what would be right."""


def parse_count(text: str, what: str = "--params") -> float:
    """`70B`, `8.03e9`, `46.7b`, `7000M` -> a number of parameters."""
    match = _COUNT.match(text)
    if match is None:
        raise UsageError(f"{what} {text!r} is not a count; write e.g. 70B, 8.03e9 or 7000M")
    value = float(match.group("num")) * _SCALE[match.group("unit").lower()]
    if value <= 0:
        raise UsageError(f"{what} must be positive")
    return value


def choose(name: str, known: Iterable[str], what: str, flag: str) -> str:
    """`name` if it is a known preset, else a UsageError with a 'did you mean'."""
    names = sorted(known)
    if name in names:
        return name
    lowered = name.lower().replace("_", "-").replace(" ", "-")
    if lowered in names:
        return lowered
    close = [n for n in names if n.startswith(lowered)] or difflib.get_close_matches(lowered, names, n=1, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(n) for n in close)}? " if close else ""
    raise UsageError(f"{flag}: unknown {what} {name!r}; {hint}known: {', '.join(names)}")


def _duration(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _custom_shape(
    params: str | None,
    active_params: str | None,
    layers: int | None,
    kv_heads: int | None,
    head_dim: int | None,
    hidden: int | None,
    heads: int | None,
) -> ModelShape:
    missing = [
        flag
        for flag, value in (
            ("--layers", layers),
            ("--kv-heads", kv_heads),
            ("--head-dim", head_dim),
            ("--hidden", hidden),
        )
        if value is None
    ]
    if params is None or missing:
        raise UsageError(
            "a model given by its shape needs --params, --layers, --kv-heads, --head-dim and --hidden"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + f"; or name a preset with --model ({', '.join(sorted(MODELS))})"
        )
    assert layers is not None and kv_heads is not None and head_dim is not None and hidden is not None
    total = parse_count(params)
    attention_heads = heads if heads is not None else hidden // head_dim
    return ModelShape(
        name=f"custom {total / 1e9:g}B",
        params=total,
        active_params=parse_count(active_params, "--active-params") if active_params else total,
        layers=layers,
        hidden_size=hidden,
        attention_heads=attention_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
    )


def _emit(plans: list[Plan], as_json: bool, spec_path: str | None, calibration: Calibration | None) -> None:
    if as_json:
        document: dict[str, Any] = {"plans": [p.as_dict() for p in plans]}
        if calibration is not None:
            document["plans"][0]["calibration"] = calibration.as_dict()
        if spec_path is not None:
            document = {"spec": spec_path, **document}
        typer.echo(json.dumps(document, indent=2))
    else:
        if calibration is not None:
            typer.echo(
                f"calibrated: efficiency {calibration.efficiency:.3f} from a measured ITL of "
                f"{calibration.measured_itl_seconds * 1e3:g} ms at {calibration.batch} running sequences "
                f"(floor {(calibration.roof_seconds + calibration.communication_seconds) * 1e3:.2f} ms)"
            )
        typer.echo("\n\n".join(render_text(p) for p in plans))
    failed = [p for p in plans if not p.fits or p.itl_slo_met is False or p.ttft_slo_met is False]
    if failed:
        raise typer.Exit(EXIT_FAILED)


def plan_command(
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Plan every model of this spec (its GPU, TP, SLOs, workloads).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help=f"Model preset ({', '.join(sorted(MODELS))}); with --spec, the served model to plan.",
        ),
    ] = None,
    params: Annotated[str | None, typer.Option(help="Custom model: parameter count (70B, 8.03e9).")] = None,
    active_params: Annotated[
        str | None,
        typer.Option(
            help="Custom mixture of experts: parameters one token uses (12.9B); steps still read all weights."
        ),
    ] = None,
    layers: Annotated[int | None, typer.Option(help="Custom model: num_hidden_layers.")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="Custom model: num_key_value_heads.")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Custom model: head dimension (hidden / heads).")] = None,
    hidden: Annotated[int | None, typer.Option(help="Custom model: hidden_size.")] = None,
    heads: Annotated[
        int | None, typer.Option(help="Custom model: num_attention_heads (default hidden / head-dim).")
    ] = None,
    gpu: Annotated[str | None, typer.Option(help=f"GPU preset ({', '.join(sorted(GPUS))}).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel GPUs per engine.")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel stages per engine.")] = None,
    weight_dtype: Annotated[
        str | None, typer.Option(help=f"Weight format: {', '.join(WEIGHT_DTYPES)} (default bf16).")
    ] = None,
    kv_dtype: Annotated[
        str | None, typer.Option(help=f"KV-cache format: {', '.join(KV_DTYPES)} (default bf16).")
    ] = None,
    context: Annotated[
        int | None,
        typer.Option(
            help="Average tokens each running sequence holds in the KV cache (prompt + output so far). "
            "From --spec: the classes' workloads (mean prompt + half the mean output)."
        ),
    ] = None,
    prompt: Annotated[
        int | None, typer.Option(help="Prompt tokens for the prefill (TTFT) estimate (default: --context).")
    ] = None,
    itl_slo: Annotated[
        str | None, typer.Option(help="ITL SLO (40ms): bounds the batch. From --spec: the tightest ITL/TPOT objective.")
    ] = None,
    ttft_slo: Annotated[
        str | None, typer.Option(help="TTFT SLO (500ms), checked against an idle engine's prefill.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Peak concurrent sequences to size replicas and GPUs for.")
    ] = None,
    headroom: Annotated[
        float | None, typer.Option(help=f"Provision (1 + headroom) x the peak (default {DEFAULT_HEADROOM}).")
    ] = None,
    efficiency: Annotated[
        float | None,
        typer.Option(
            help=f"Share of peak bandwidth and FLOP/s reached (default {DEFAULT_EFFICIENCY}): memory and compute "
            "times are divided by it, communication is not; calibrate from slokit probe (docs/plan.md)."
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(help=f"vLLM's --gpu-memory-utilization (default {DEFAULT_GPU_MEMORY_UTILIZATION})."),
    ] = None,
    overhead_gib: Annotated[
        float | None,
        typer.Option(
            help=f"Per-GPU memory for activations, CUDA graphs and NCCL (default {DEFAULT_OVERHEAD_BYTES / GIB:g})."
        ),
    ] = None,
    allreduce_latency: Annotated[
        str | None,
        typer.Option(
            help=f"Fixed cost of one all-reduce (default {DEFAULT_ALLREDUCE_LATENCY_SECONDS * 1e6:g}us, "
            "written e.g. 0.008ms)."
        ),
    ] = None,
    network_gbps: Annotated[
        float | None,
        typer.Option(
            help=f"Network between servers, per GPU, Gb/s (default {DEFAULT_NETWORK_BYTES_PER_SECOND * 8 / 1e9:g}): "
            f"what a TP group larger than {GPUS_PER_NODE} GPUs all-reduces over."
        ),
    ] = None,
    network_latency: Annotated[
        str | None,
        typer.Option(
            help=f"Fixed cost of an all-reduce's step between servers (default "
            f"{DEFAULT_NETWORK_LATENCY_SECONDS * 1e6:g}us, written e.g. 0.025ms)."
        ),
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="The engine's --max-num-seqs cap on the batch.")] = None,
    measured_itl: Annotated[
        str | None,
        typer.Option(
            help="Calibrate --efficiency: an ITL measured on this deployment (p50 or mean from slokit probe, 21ms)."
        ),
    ] = None,
    measured_batch: Annotated[
        int | None, typer.Option(help="Calibrate: sequences running while --measured-itl was measured.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every input, term and result as JSON (units in key names).")
    ] = False,
) -> None:
    """Roofline capacity plan: does the model fit, how fast can it decode and prefill, how many GPUs for the SLO.

    Decode is bound by HBM bandwidth (weights + batch x KV read per step), prefill by FLOP/s; tensor-parallel
    all-reduces are a separate term (over NVLink or PCIe inside a server, and over the network too when TP is
    larger than a server's 8 GPUs), and "bound" names the largest of the three. Memory and compute times are lower
    bounds divided by --efficiency; communication is added as computed from the link rate and
    --allreduce-latency. Exits 1 when the model does not fit or an SLO cannot be met, 2 for bad flags.

    Examples:

      slokit plan --model llama-3-70b --gpu h100-sxm --tp 8 --context 4096 --itl-slo 40ms --concurrency 500

      slokit plan --model llama-3-70b --gpu h100-sxm --tp 1 --context 2048   # does not fit

      slokit plan --params 34B --layers 48 --kv-heads 8 --head-dim 128 --hidden 8192 --gpu h200 --context 8192

      slokit plan --spec examples/assistant.yaml --concurrency 300 --json

      slokit plan --spec examples/assistant.yaml --measured-itl 21ms --measured-batch 64   # calibrate
    """
    try:
        overrides: dict[str, Any] = {
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "weight_dtype": weight_dtype,
            "kv_dtype": kv_dtype,
            "context_tokens": context,
            "prompt_tokens": prompt,
            "itl_slo_seconds": _duration(itl_slo, "--itl-slo"),
            "ttft_slo_seconds": _duration(ttft_slo, "--ttft-slo"),
            "concurrency": concurrency,
            "headroom": headroom,
            "efficiency": efficiency,
            "gpu_memory_utilization": gpu_memory_utilization,
            "overhead_bytes_per_gpu": None if overhead_gib is None else overhead_gib * GIB,
            "allreduce_latency_seconds": _duration(allreduce_latency, "--allreduce-latency"),
            "network_bytes_per_second": None if network_gbps is None else network_gbps * 1e9 / 8,
            "network_latency_seconds": _duration(network_latency, "--network-latency"),
            "max_num_seqs": max_num_seqs,
        }
        if weight_dtype is not None:
            choose(weight_dtype, WEIGHT_DTYPES, "weight dtype", "--weight-dtype")
        if kv_dtype is not None:
            choose(kv_dtype, KV_DTYPES, "KV-cache dtype", "--kv-dtype")
        if spec is None and model is not None:
            model = choose(model, MODELS, "model preset", "--model")
        gpu_name = choose(gpu, GPUS, "GPU", "--gpu") if gpu is not None else None
        if spec is not None:
            chosen, spec_path = _from_spec(spec, model, gpu_name, overrides, params), str(spec)
        else:
            shape_flags = (params, active_params, layers, kv_heads, head_dim, hidden, heads)
            chosen, spec_path = [_manual(model, gpu_name, overrides, *shape_flags)], None
        calibration = _calibration(chosen, measured_itl, measured_batch, efficiency)
        if calibration is not None:
            chosen = [replace(chosen[0], efficiency=calibration.efficiency)]
        plans = [_plan_named(inputs, spec_path) for inputs in chosen]
    except (UsageError, PlanError) as exc:
        typer.echo(f"slokit plan: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    _emit(plans, as_json, spec_path, calibration)


def _plan_named(inputs: PlanInputs, spec_path: str | None) -> Plan:
    """The plan, with the spec and model named in any error (a spec's TP may not suit its model)."""
    try:
        return plan(inputs)
    except PlanError as exc:
        if spec_path is None:
            raise
        raise PlanError(f"{spec_path}: model {inputs.model.name}: {exc}") from None


def _calibration(
    chosen: list[PlanInputs], measured_itl: str | None, measured_batch: int | None, efficiency: float | None
) -> Calibration | None:
    if measured_itl is None and measured_batch is None:
        return None
    if measured_itl is None or measured_batch is None:
        raise UsageError("calibration needs both --measured-itl and --measured-batch")
    if efficiency is not None:
        raise UsageError("give either --efficiency or a measurement to calibrate it from, not both")
    if len(chosen) != 1:
        raise UsageError("the spec has several models: name the one the measurement is from with --model")
    seconds = _duration(measured_itl, "--measured-itl")
    assert seconds is not None
    return calibrate(chosen[0], measured_batch, seconds)


def _manual(
    model: str | None,
    gpu_name: str | None,
    overrides: dict[str, Any],
    params: str | None,
    active_params: str | None,
    layers: int | None,
    kv_heads: int | None,
    head_dim: int | None,
    hidden: int | None,
    heads: int | None,
) -> PlanInputs:
    if model is not None:
        if params is not None:
            raise UsageError("give either --model (a preset) or --params with the shape flags, not both")
        shape = ModelShape.from_preset(MODELS[choose(model, MODELS, "model preset", "--model")])
    elif params is not None or layers is not None:
        shape = _custom_shape(params, active_params, layers, kv_heads, head_dim, hidden, heads)
    else:
        raise UsageError(
            f"name a model: --model PRESET ({', '.join(sorted(MODELS))}), or --params with --layers, --kv-heads, "
            "--head-dim and --hidden, or --spec FILE for a spec's models"
        )
    if gpu_name is None:
        raise UsageError(f"--gpu is required: one of {', '.join(sorted(GPUS))}")
    context = overrides.pop("context_tokens")
    if context is None:
        raise UsageError("--context TOKENS is required: the average tokens each running sequence holds (e.g. 2048)")
    prompt = overrides.pop("prompt_tokens") or context
    inputs = PlanInputs(model=shape, gpu=GPUS[gpu_name], context_tokens=context, prompt_tokens=prompt)
    return replace(inputs, **{k: v for k, v in overrides.items() if v is not None})


def _from_spec(
    path: Path, model: str | None, gpu_name: str | None, overrides: dict[str, Any], params: str | None
) -> list[PlanInputs]:
    if params is not None:
        raise UsageError("--params describes a custom model; with --spec the models come from the spec")
    loaded = load_one_spec_or_exit(path)
    models = list(loaded.models)
    if model is not None:
        name = choose(model, [m.name for m in models], f"model of {path}", "--model")
        models = [m for m in models if m.name == name]
    if gpu_name is not None:
        models = [replace(m, gpu=gpu_name) for m in models]
    found: list[PlanInputs] = []
    skipped: list[str] = []
    context = overrides.get("context_tokens")
    for served in models:
        inputs = inputs_for_model(loaded, served, **overrides)
        if inputs is None:
            skipped.append(served.name)
            continue
        if context is None and workload_tokens(loaded, served) is None:
            typer.echo(
                f"{path}: no class on {served.name!r} gives a workload; assuming {inputs.context_tokens}-token "
                "contexts (pass --context, or add classes[].workload)",
                err=True,
            )
        found.append(inputs)
    for name in skipped:
        typer.echo(
            f"{path}: model {name!r} names no planner preset or no gpu (models[].preset, models[].gpu); skipped",
            err=True,
        )
    if not found:
        raise UsageError(f"{path}: no model names both a preset and a gpu, so there is nothing to plan")
    return found


def register(app: typer.Typer) -> None:
    """Add the plan command."""
    app.command("plan")(plan_command)
