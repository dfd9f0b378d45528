"""The roofline planner's formulas against hand-computed cases, and the presets against their published shapes."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slokit.catalog import GPU_NAMES, GPUS, MODEL_NAMES, MODELS, gpu_for_nvml_name
from slokit.plan.roofline import (
    DEFAULT_EFFICIENCY,
    ModelShape,
    PlanError,
    PlanInputs,
    attention_flops,
    calibrate,
    decode_step,
    expected_decode_tokens_per_second,
    experts_touched,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    plan,
    prefill,
    ring_allreduce_seconds,
    transfer_seconds,
    weight_bytes,
    weight_bytes_read_per_step,
)
from slokit.spec import load_spec, load_spec_text

H100 = GPUS["h100-sxm"]
LLAMA_8B = ModelShape.from_preset(MODELS["llama-3-8b"])
LLAMA_70B = ModelShape.from_preset(MODELS["llama-3-70b"])
MIXTRAL = ModelShape.from_preset(MODELS["mixtral-8x7b"])


def inputs(shape: ModelShape = LLAMA_70B, gpu: str = "h100-sxm", **fields: object) -> PlanInputs:
    base = PlanInputs(model=shape, gpu=GPUS[gpu], context_tokens=2048, prompt_tokens=2048)
    return replace(base, **fields)  # type: ignore[arg-type]


# -- presets ----------------------------------------------------------------------------------------------------
def test_preset_names_are_the_spec_names() -> None:
    assert frozenset({"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l40s"}) == GPU_NAMES
    assert frozenset({"llama-3-8b", "llama-3-70b", "qwen2-72b", "mixtral-8x7b"}) == MODEL_NAMES
    assert all(name == preset.name for name, preset in GPUS.items())
    assert all(name == preset.name for name, preset in MODELS.items())


@pytest.mark.parametrize("name", sorted(MODEL_NAMES))
def test_parameter_counts_follow_from_the_config_shapes(name: str) -> None:
    preset = MODELS[name]
    assert preset.counted_params() == preset.params
    assert preset.head_dim * preset.attention_heads == preset.hidden_size


def test_published_parameter_counts() -> None:
    # model cards: 8.03B, 70.6B, 72.7B, Mixtral 46.7B total / 12.9B active
    assert MODELS["llama-3-8b"].params == pytest.approx(8.03e9, rel=1e-3)
    assert MODELS["llama-3-70b"].params == pytest.approx(70.55e9, rel=1e-3)
    assert MODELS["qwen2-72b"].params == pytest.approx(72.7e9, rel=1e-3)
    assert MODELS["mixtral-8x7b"].params == pytest.approx(46.7e9, rel=1e-3)
    assert MODELS["mixtral-8x7b"].active_params == pytest.approx(12.9e9, rel=2e-3)
    # active = shared + 2 of 8 experts
    mixtral = MODELS["mixtral-8x7b"]
    assert mixtral.params - mixtral.expert_params + mixtral.expert_params * 2 // 8 == mixtral.active_params


def test_gpu_figures_and_nvml_lookup() -> None:
    assert H100.hbm_bandwidth_bytes_per_second == 3.35e12
    assert GPUS["h200"].hbm_bandwidth_bytes_per_second == 4.8e12
    assert GPUS["a100-40gb"].fp8_dense_flops is None and GPUS["a100-80gb"].fp8_dense_flops is None
    assert GPUS["l40s"].nvlink_bytes_per_second is None
    for preset in GPUS.values():
        assert preset.bf16_dense_flops > 1e14 and preset.hbm_bytes > 40e9
        assert preset.fp8_dense_flops is None or preset.fp8_dense_flops == pytest.approx(
            2 * preset.bf16_dense_flops, rel=0.02
        )
        for nvml_name in preset.nvml_names:
            assert gpu_for_nvml_name(nvml_name) is preset
    assert gpu_for_nvml_name("NVIDIA H100 80GB HBM3") is H100
    assert gpu_for_nvml_name("NVIDIA GeForce RTX 4090") is None
    assert H100.link_bytes_per_second(8) == 450e9  # one direction of 900 GB/s
    assert GPUS["h100-pcie"].link_name(2) == "nvlink" and GPUS["h100-pcie"].link_name(4) == "pcie"


# -- the formulas, one by one -------------------------------------------------------------------------------------
def test_seed_figure_77_gb_at_3_35_tb_per_s_takes_about_23_ms() -> None:
    assert transfer_seconds(77e9, 3.35e12) == pytest.approx(0.023, abs=0.0002)
    # the same through a decode step: a dense model whose weights are 77 GB in bf16, one sequence of one token
    shape = ModelShape("seed", 38.5e9, 38.5e9, layers=1, hidden_size=128, attention_heads=1, kv_heads=1, head_dim=128)
    step = decode_step(inputs(shape, context_tokens=1, prompt_tokens=1), 1)
    assert step.weight_bytes_read_per_gpu == 77e9
    assert step.memory_floor == pytest.approx(0.023, abs=0.0002)
    assert step.bound == "memory"
    assert step.floor == step.memory_floor  # TP 1: no communication term
    assert step.expected == pytest.approx(step.floor / DEFAULT_EFFICIENCY)


def test_kv_bytes_per_token_by_hand() -> None:
    # 2 (K and V) x 80 layers x 8 KV heads x 128 dims x 2 bytes
    assert kv_bytes_per_token(LLAMA_70B, "bf16") == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_bytes_per_token(LLAMA_8B, "fp16") == 2 * 32 * 8 * 128 * 2 == 131_072
    # an 8-bit KV cache halves KV bytes
    assert kv_bytes_per_token(LLAMA_70B, "int8") == kv_bytes_per_token(LLAMA_70B, "bf16") / 2
    assert kv_bytes_per_token(LLAMA_70B, "fp8") == 163_840


def test_kv_bytes_per_gpu_split_by_tp_replicated_beyond_the_kv_heads() -> None:
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, "bf16", 8, 1) == 327_680 / 8
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, "bf16", 16, 1) == 327_680 / 8  # 8 KV heads on 16 GPUs: replicated
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, "bf16", 4, 2) == 327_680 / 8  # half the heads, half the layers


def test_int8_kv_doubles_the_tokens_that_fit() -> None:
    wide = plan(inputs(tensor_parallel=8))
    narrow = plan(inputs(tensor_parallel=8, kv_dtype="int8"))
    assert narrow.kv_bytes_per_token == wide.kv_bytes_per_token / 2
    assert narrow.kv_tokens_per_engine in (2 * wide.kv_tokens_per_engine, 2 * wide.kv_tokens_per_engine + 1)
    assert wide.fp8_kv is not None and wide.fp8_kv.kv_tokens_per_engine == narrow.kv_tokens_per_engine
    assert narrow.fp8_kv is None  # already 8-bit: no what-if


def test_weight_bytes_and_what_a_decode_step_reads() -> None:
    assert weight_bytes(LLAMA_70B, "bf16") == 2 * 70_553_706_496
    assert weight_bytes(LLAMA_70B, "int4") == 70_553_706_496 / 2
    # the input embedding table (128256 x 4096) is looked up, not read whole
    assert weight_bytes_read_per_step(LLAMA_8B, "bf16", 1) == 2 * (8_030_261_248 - 128_256 * 4096)


def test_experts_touched_by_a_batch() -> None:
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert experts_touched(8, 2, 64) == pytest.approx(8.0, abs=1e-6)
    assert experts_touched(1, 1, 100) == 1.0
    # one sequence reads exactly the active parameters (minus the embedding lookup)
    one = weight_bytes_read_per_step(MIXTRAL, "bf16", 1)
    assert one == pytest.approx(2 * (MIXTRAL.active_params - MIXTRAL.input_embedding_params))
    assert weight_bytes_read_per_step(MIXTRAL, "bf16", 256) == pytest.approx(
        2 * (MIXTRAL.params - MIXTRAL.input_embedding_params)
    )


def test_ring_allreduce_by_hand() -> None:
    # 2 x (8 - 1) / 8 x 1 MB / 450 GB/s = 3.889 us, plus the stated latency
    assert ring_allreduce_seconds(1e6, 8, 450e9, 0.0) == pytest.approx(3.8889e-6, rel=1e-4)
    assert ring_allreduce_seconds(1e6, 8, 450e9, 8e-6) == pytest.approx(11.8889e-6, rel=1e-4)
    assert ring_allreduce_seconds(1e6, 1, 450e9, 8e-6) == 0.0


def test_tp_communication_is_two_allreduces_per_layer() -> None:
    tp8 = inputs(tensor_parallel=8, allreduce_latency_seconds=8e-6)
    step = decode_step(tp8, 64)
    message = 64 * 8192 * 2  # batch x hidden x bf16
    assert step.tp_communication == pytest.approx(2 * 80 * (8e-6 + 2 * 7 / 8 * message / 450e9))
    assert step.floor == pytest.approx(max(step.memory_floor, step.compute_floor) + step.tp_communication)


def test_decode_memory_floor_by_hand() -> None:
    # Llama 3 70B, TP 8, batch 32 x 2048 tokens on H100 SXM
    step = decode_step(inputs(tensor_parallel=8), 32)
    weights = 2 * (70_553_706_496 - 128_256 * 8192) / 8
    kv = 32 * 2048 * 40_960
    assert step.memory_floor == pytest.approx((weights + kv) / 3.35e12)
    assert step.memory_floor == pytest.approx(0.0060, abs=0.0001)
    assert step.compute_floor == pytest.approx((2 * 70_553_706_496 * 32 + 4 * 80 * 8192 * 32 * 2048) / (8 * 989.4e12))


def test_decode_turns_compute_bound_at_large_batches_of_short_sequences() -> None:
    small = inputs(LLAMA_8B, context_tokens=1, prompt_tokens=1)
    assert decode_step(small, 1).bound == "memory"
    assert decode_step(small, 4096).bound == "compute"


def test_prefill_by_hand() -> None:
    one = inputs(LLAMA_8B, prompt_tokens=1000)
    result = prefill(one, 1000)
    flops = 2 * 8_030_261_248 * 1000 + 2 * 32 * 4096 * 1000**2  # dense + causal attention
    assert result.flops == pytest.approx(flops)
    assert result.compute_floor == pytest.approx(flops / 989.4e12)
    assert result.compute_floor == pytest.approx(0.0165, abs=0.0002)
    assert result.bound == "compute"
    assert attention_flops(LLAMA_8B, 1, 1000) == 4 * 32 * 32 * 128 * 1000
    # FP8 weights run on the FP8 tensor cores where the GPU has them, on BF16 where not (A100)
    assert prefill(replace(one, weight_dtype="fp8"), 1000).compute_floor == pytest.approx(flops / 1978.9e12)
    assert prefill(replace(one, weight_dtype="fp8", gpu=GPUS["a100-80gb"]), 1000).compute_floor == pytest.approx(
        flops / 312e12
    )


def test_prefill_turns_compute_bound_near_flops_over_bandwidth() -> None:
    # bf16 on H100 SXM: N* = F x 2 bytes / (2 x BW) = 989.4e12 / 3.35e12 = 295 tokens
    result = plan(inputs(tensor_parallel=8))
    assert 290 <= result.prefill_compute_bound_above_prompt_tokens <= 300
    assert prefill(inputs(tensor_parallel=8), 100).bound == "memory"


# -- fit, batch and sizing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["llama-3-70b", "qwen2-72b"])
def test_a_70b_model_in_fp16_does_not_fit_on_one_80_gb_gpu(model: str) -> None:
    result = plan(inputs(ModelShape.from_preset(MODELS[model]), weight_dtype="fp16"))
    assert not result.weights_fit and not result.fits
    assert result.kv_tokens_per_engine == 0 and result.step_at_max_batch is None
    assert result.min_tensor_parallel_to_fit == 2
    assert result.notes[0].startswith("DOES NOT FIT")
    assert "--tp 2" in result.notes[0]
    # ... nor on one H200 (141 GB < 141.1 GB of weights once vLLM's 0.9 utilisation applies), but FP8 weights fit
    assert not plan(inputs(ModelShape.from_preset(MODELS[model]), gpu="h200")).fits
    assert plan(inputs(ModelShape.from_preset(MODELS[model]), weight_dtype="fp8")).fits


def test_kv_tokens_that_fit_by_hand() -> None:
    result = plan(inputs(tensor_parallel=8))
    usable = 81559 * 2**20 * 0.9 - 2 * 2**30
    budget = usable - 2 * 70_553_706_496 / 8
    assert result.kv_tokens_per_engine == math.floor(budget / 40_960)
    assert result.max_sequences_by_kv == result.kv_tokens_per_engine // 2048


def test_max_batch_is_the_largest_that_keeps_the_itl_slo() -> None:
    slo = inputs(LLAMA_8B, itl_slo_seconds=0.025, context_tokens=4096)
    result = plan(slo)
    assert 1 < result.max_batch < result.batch_cap
    assert decode_step(slo, result.max_batch).expected <= 0.025 < decode_step(slo, result.max_batch + 1).expected
    assert result.decode_tokens_per_second_per_engine == pytest.approx(
        result.max_batch / decode_step(slo, result.max_batch).expected
    )


def test_an_itl_slo_below_the_weight_read_cannot_be_met() -> None:
    result = plan(inputs(tensor_parallel=8, itl_slo_seconds=0.004))  # 17.6 GB per GPU takes 5.2 ms to read
    assert result.max_batch == 0 and result.itl_slo_met is False
    assert result.decode_tokens_per_second_per_engine is None
    assert any("cannot be met at any batch" in note for note in result.notes)


def test_batch_is_capped_by_max_num_seqs() -> None:
    result = plan(inputs(tensor_parallel=8, max_num_seqs=64))
    assert result.batch_cap == result.max_batch == 64


def test_sizing_with_headroom() -> None:
    # 100 sequences per engine (max_num_seqs), 1,000 at peak, 30% headroom: ceil(1300 / 100) = 13 engines
    result = plan(inputs(LLAMA_8B, max_num_seqs=100, concurrency=1000, headroom=0.3))
    assert result.max_batch == 100
    assert (result.engines, result.gpus) == (13, 13)
    exact = plan(inputs(LLAMA_8B, max_num_seqs=100, concurrency=100, headroom=0.0))
    assert exact.engines == 1
    tp8 = plan(inputs(tensor_parallel=8, max_num_seqs=100, concurrency=1000, headroom=0.3))
    assert (tp8.engines, tp8.gpus) == (13, 104)


def test_pipeline_parallel_splits_weights_and_runs_stages_in_turn() -> None:
    tp8 = inputs(tensor_parallel=8)
    tp4pp2 = inputs(tensor_parallel=4, pipeline_parallel=2)
    assert plan(tp4pp2).weight_bytes_per_gpu == plan(tp8).weight_bytes_per_gpu
    # a token passes both stages in turn: each stage reads its quarter-width half of the weights
    assert decode_step(tp4pp2, 2).memory_floor == pytest.approx(2 * decode_step(tp8, 2).memory_floor, rel=0.01)
    # while the stages work side by side on different micro-batches, so compute spreads over all 8 GPUs
    assert decode_step(tp4pp2, 64).compute_floor == pytest.approx(decode_step(tp8, 64).compute_floor)
    # one prompt passes the stages in turn: prefill compute is that of TP 4 alone
    assert prefill(tp4pp2, 1000).compute_floor == pytest.approx(prefill(inputs(tensor_parallel=4), 1000).compute_floor)


def test_impossible_inputs_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="does not divide the 64 attention heads"):
        plan(inputs(tensor_parallel=3))
    with pytest.raises(PlanError, match="efficiency"):
        plan(inputs(efficiency=1.5))
    with pytest.raises(PlanError, match="weight dtype"):
        plan(inputs(weight_dtype="fp4"))


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 2000),
    context=st.integers(1, 32768),
    tp=st.sampled_from([1, 2, 4, 8]),
    model=st.sampled_from(sorted(MODEL_NAMES)),
)
def test_step_time_grows_with_batch(batch: int, context: int, tp: int, model: str) -> None:
    setup = inputs(ModelShape.from_preset(MODELS[model]), tensor_parallel=tp, context_tokens=context)
    now, more = decode_step(setup, batch), decode_step(setup, batch + 1)
    assert more.floor >= now.floor and more.expected >= now.expected
    assert now.expected >= now.floor > 0


# -- from a spec -------------------------------------------------------------------------------------------------
def test_expected_decode_tokens_per_second_for_the_example_specs() -> None:
    spec = load_spec("examples/assistant.yaml")
    (model,) = spec.models
    value = expected_decode_tokens_per_second(spec, model)
    assert value is not None
    # 8 x H100 at the 256-sequence cap: 256 / ITL, with ITL between 10 and 25 ms
    assert 256 / 0.025 < value < 256 / 0.010
    summarize = load_spec("examples/summarize.yaml")
    assert expected_decode_tokens_per_second(summarize, summarize.models[0]) is not None


SPEC = """
version: slokit/v1
service: svc
source: slokit
window: 28d
models:
  - {{name: m, {model}tensor_parallel: {tp}, max_num_seqs: 64}}
classes:
  - name: chat
    workload: {{prompt_tokens: constant(1000), output_tokens: constant(200)}}
    slos:
      itl: {{objective: {{percentile: 95, threshold: 50ms}}}}
      tpot: {{objective: {{percentile: 95, threshold: 30ms}}}}
"""


def test_expected_decode_from_a_spec_uses_its_slos_and_workload() -> None:
    spec = load_spec_text(SPEC.format(model="preset: llama-3-8b, gpu: h100-sxm, ", tp=1))
    value = expected_decode_tokens_per_second(spec, spec.models[0])
    by_hand = plan(inputs(LLAMA_8B, context_tokens=1100, itl_slo_seconds=0.030, max_num_seqs=64))
    assert value == pytest.approx(by_hand.decode_tokens_per_second_per_engine)


def test_expected_decode_is_none_without_a_gpu_or_when_it_cannot_run() -> None:
    no_gpu = load_spec_text(SPEC.format(model="preset: llama-3-8b, ", tp=1))
    assert expected_decode_tokens_per_second(no_gpu, no_gpu.models[0]) is None
    too_big = load_spec_text(SPEC.format(model="preset: llama-3-70b, gpu: l40s, ", tp=1))
    assert expected_decode_tokens_per_second(too_big, too_big.models[0]) is None


# -- calibration -------------------------------------------------------------------------------------------------
def test_calibration_recovers_the_efficiency_that_produced_a_measurement() -> None:
    truth = inputs(tensor_parallel=8, efficiency=0.62)
    measured = decode_step(truth, 64).expected
    found = calibrate(replace(truth, efficiency=DEFAULT_EFFICIENCY), 64, measured)
    assert found.efficiency == pytest.approx(0.62)
    # by hand: roof / (measured - communication)
    step = decode_step(truth, 64)
    assert found.efficiency == pytest.approx(step.memory_floor / (measured - step.tp_communication))


def test_calibration_rejects_a_measurement_faster_than_the_floor() -> None:
    setup = inputs(tensor_parallel=8)
    with pytest.raises(PlanError, match="below the roofline floor"):
        calibrate(setup, 64, decode_step(setup, 64).floor * 0.9)
