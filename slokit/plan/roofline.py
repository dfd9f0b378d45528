"""The roofline capacity model: what one vLLM engine can do for a model on a GPU, before anything is measured.

Decode is bound by memory bandwidth: every step reads the weights once and each running sequence's KV cache, so
the step time at batch B is (weights + B x context x KV bytes per token) / bandwidth, unless the B tokens' FLOPs take
longer. Prefill is bound by compute: 2 x active params FLOPs per prompt token plus causal attention, unless reading
the weights once takes longer. Tensor parallelism adds two all-reduces per layer, a stated term of its own: over
NVLink or PCIe inside one server, and over the inter-node network as well when the TP group is larger than a server
(`GPUS_PER_NODE`), as a hierarchical all-reduce (NCCL's shape for it).

Every figure here is a floor (perfect overlap, peak rates). The *expected* values divide the memory and compute
floor by one efficiency factor (default `DEFAULT_EFFICIENCY`), calibrated from `slokit probe` results (docs/plan.md);
the communication term is added as it stands, its latency and link rate being stated inputs of their own. The model
leaves out scheduling, sampling, paging, chunked-prefill interleaving and queueing, which is why a pure roofline
under-predicts ITL by 15-30% against a real vLLM and why sizing adds headroom.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from slokit.catalog import GPUS, MODELS, GpuPreset, ModelPreset
from slokit.schema import Sli
from slokit.spec import Model, Spec

GIB: Final = 1 << 30
DTYPE_BYTES: Final[Mapping[str, float]] = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
WEIGHT_DTYPES: Final = ("fp16", "bf16", "fp8", "int8", "int4")
KV_DTYPES: Final = ("fp16", "bf16", "fp8", "int8")
ACTIVATION_BYTES: Final = 2.0  # bf16 activations cross the TP all-reduce

DEFAULT_EFFICIENCY: Final = 0.75
"""Share of peak bandwidth and FLOP/s a real engine reaches. A roofline under-predicts vLLM's ITL by about 15-30%
(published simulator comparisons), so 0.75 is the middle; calibrate it from `slokit probe` (docs/plan.md)."""
DEFAULT_GPU_MEMORY_UTILIZATION: Final = 0.9  # vLLM's --gpu-memory-utilization default
DEFAULT_OVERHEAD_BYTES: Final = 2 * GIB  # per GPU: activations at peak, CUDA graphs, NCCL buffers (vLLM profiles it)
DEFAULT_ALLREDUCE_LATENCY_SECONDS: Final = 8e-6  # per small all-reduce on NVLink (vLLM's custom all-reduce: ~5-10 us)
GPUS_PER_NODE: Final = 8
"""GPUs one server holds (HGX/DGX H100, H200 and A100 boards, and the usual 8-slot PCIe servers): a TP group larger
than this spans servers, and its all-reduces cross the network between them."""
DEFAULT_NETWORK_BYTES_PER_SECOND: Final = 400e9 / 8
"""One direction, per GPU, between servers: 400 Gb/s NDR InfiniBand or RoCE, one ConnectX-7 per GPU as on DGX H100
and H200 (50 GB/s, against NVLink's 450 GB/s)."""
DEFAULT_NETWORK_LATENCY_SECONDS: Final = 25e-6
"""Fixed cost of the inter-node step of one all-reduce (NCCL over InfiniBand: tens of microseconds for small
messages, against NVLink's ~8 us), paid twice per layer per decode step."""
DEFAULT_CONTEXT_TOKENS: Final = 2048  # resident tokens per sequence when a spec's classes give no workload
DEFAULT_HEADROOM: Final = 0.3
MAX_BATCH_SEARCH: Final = 1 << 20


class PlanError(ValueError):
    """Inputs the planner cannot use; the message says which and what would be right."""


@dataclass(frozen=True)
class ModelShape:
    """What the formulas need to know about a model (from a preset or from flags)."""

    name: str
    params: float
    active_params: float  # params one token passes through (MoE: shared + k experts)
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    expert_params: float = 0.0  # all experts together; 0 for a dense model
    experts: int = 1
    experts_per_token: int = 1
    input_embedding_params: float = 0.0  # a decode step reads only its tokens' rows of this table
    max_context_tokens: int | None = None

    @classmethod
    def from_preset(cls, preset: ModelPreset) -> ModelShape:
        """The shape of a built-in model."""
        return cls(
            name=preset.name,
            params=float(preset.params),
            active_params=float(preset.active_params),
            layers=preset.layers,
            hidden_size=preset.hidden_size,
            attention_heads=preset.attention_heads,
            kv_heads=preset.kv_heads,
            head_dim=preset.head_dim,
            expert_params=float(preset.expert_params),
            experts=preset.experts,
            experts_per_token=preset.experts_per_token,
            input_embedding_params=float(preset.input_embedding_params),
            max_context_tokens=preset.max_context_tokens,
        )


@dataclass(frozen=True)
class PlanInputs:
    """Everything one plan depends on; `Plan.as_dict()` echoes all of it."""

    model: ModelShape
    gpu: GpuPreset
    context_tokens: int  # average tokens resident in the KV cache per running sequence (prompt + output so far)
    prompt_tokens: int  # prompt length for the prefill (TTFT) estimate
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    itl_slo_seconds: float | None = None
    ttft_slo_seconds: float | None = None
    concurrency: int | None = None  # peak concurrent sequences to size for
    headroom: float = DEFAULT_HEADROOM  # provision (1 + headroom) x the peak
    efficiency: float = DEFAULT_EFFICIENCY
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    overhead_bytes_per_gpu: float = DEFAULT_OVERHEAD_BYTES
    allreduce_latency_seconds: float = DEFAULT_ALLREDUCE_LATENCY_SECONDS
    max_num_seqs: int | None = None  # the engine's --max-num-seqs cap on the batch
    network_bytes_per_second: float = DEFAULT_NETWORK_BYTES_PER_SECOND  # per GPU, one direction, between servers
    network_latency_seconds: float = DEFAULT_NETWORK_LATENCY_SECONDS  # inter-node step of one all-reduce

    @property
    def gpus_per_engine(self) -> int:
        """GPUs one engine (one replica) occupies."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def topology(self) -> TpTopology:
        """Where the TP group sits: one server or several, and over which links its all-reduces run."""
        return tp_topology(self.gpu, self.tensor_parallel)

    @property
    def engine_nodes(self) -> int:
        """Servers one engine spans (TP x PP GPUs, `GPUS_PER_NODE` to a server)."""
        return math.ceil(self.gpus_per_engine / GPUS_PER_NODE)


@dataclass(frozen=True)
class TpTopology:
    """How a tensor-parallel group is laid out: `nodes` servers of `gpus_per_node` TP GPUs each.

    Inside a server the GPUs talk over NVLink where it joins them all, else PCIe; between servers over the network.
    """

    tensor_parallel: int
    nodes: int
    gpus_per_node: int
    intra_link: str  # "nvlink" or "pcie" (also named for TP 1, where nothing is sent)
    intra_bytes_per_second: float  # one direction

    @property
    def link(self) -> str:
        """`nvlink`, `pcie`, or `nvlink+network` / `pcie+network` for a group spanning servers."""
        return self.intra_link + ("+network" if self.nodes > 1 else "")


def tp_topology(gpu: GpuPreset, tensor_parallel: int) -> TpTopology:
    """The layout of a TP group: as many full servers as it needs, its GPUs split evenly between them."""
    nodes = max(1, math.ceil(tensor_parallel / GPUS_PER_NODE))
    per_node = math.ceil(tensor_parallel / nodes)
    return TpTopology(tensor_parallel, nodes, per_node, gpu.link_name(per_node), gpu.link_bytes_per_second(per_node))


def check_inputs(inputs: PlanInputs) -> None:
    """Raise `PlanError` naming every input that cannot work, e.g. a TP size the heads do not divide by."""
    problems: list[str] = []
    shape, tp, pp = inputs.model, inputs.tensor_parallel, inputs.pipeline_parallel
    if inputs.weight_dtype not in WEIGHT_DTYPES:
        problems.append(f"weight dtype {inputs.weight_dtype!r} is not one of {', '.join(WEIGHT_DTYPES)}")
    if inputs.kv_dtype not in KV_DTYPES:
        problems.append(f"KV-cache dtype {inputs.kv_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    for name, value in (
        ("params", shape.params), ("layers", shape.layers), ("hidden size", shape.hidden_size),
        ("attention heads", shape.attention_heads), ("KV heads", shape.kv_heads), ("head dim", shape.head_dim),
        ("tensor parallel", tp), ("pipeline parallel", pp), ("context tokens", inputs.context_tokens),
        ("prompt tokens", inputs.prompt_tokens),
    ):  # fmt: skip
        if not value > 0:
            problems.append(f"{name} must be positive, not {value}")
    if problems:
        raise PlanError("; ".join(problems))
    if shape.attention_heads % tp:
        problems.append(
            f"tensor parallel {tp} does not divide the {shape.attention_heads} attention heads of {shape.name}; "
            f"use one of {', '.join(str(d) for d in _divisors(shape.attention_heads) if d <= 64)}"
        )
    elif (tp % shape.kv_heads) if tp >= shape.kv_heads else (shape.kv_heads % tp):
        problems.append(f"tensor parallel {tp} and the {shape.kv_heads} KV heads must divide one another")
    if pp > shape.layers:
        problems.append(f"pipeline parallel {pp} exceeds the {shape.layers} layers")
    if shape.active_params > shape.params:
        problems.append("active params cannot exceed params")
    if shape.kv_heads > shape.attention_heads:
        problems.append(f"KV heads ({shape.kv_heads}) cannot exceed attention heads ({shape.attention_heads})")
    if not 0 < inputs.efficiency <= 1:
        problems.append(f"efficiency must be in (0, 1], not {inputs.efficiency}")
    if not 0 < inputs.gpu_memory_utilization <= 1:
        problems.append(f"GPU memory utilization must be in (0, 1], not {inputs.gpu_memory_utilization}")
    if not 0 <= inputs.headroom <= 10:
        problems.append(f"headroom must be in [0, 10] (0.3 = 30% above peak), not {inputs.headroom}")
    if inputs.concurrency is not None and inputs.concurrency < 1:
        problems.append(f"concurrency must be at least 1, not {inputs.concurrency}")
    for name, slo in (("ITL SLO", inputs.itl_slo_seconds), ("TTFT SLO", inputs.ttft_slo_seconds)):
        if slo is not None and not slo > 0:
            problems.append(f"{name} must be positive, not {slo}")
    if inputs.max_num_seqs is not None and inputs.max_num_seqs < 1:
        problems.append(f"max_num_seqs must be at least 1, not {inputs.max_num_seqs}")
    if inputs.overhead_bytes_per_gpu < 0 or inputs.allreduce_latency_seconds < 0 or inputs.network_latency_seconds < 0:
        problems.append("overhead, all-reduce latency and network latency cannot be negative")
    if not inputs.network_bytes_per_second > 0:
        problems.append(f"network bandwidth must be positive, not {inputs.network_bytes_per_second}")
    if problems:
        raise PlanError("; ".join(problems))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ==============================================================================================================
# The formulas, one function per term (the tests check each against hand-computed cases)
# ==============================================================================================================
def weight_bytes(shape: ModelShape, weight_dtype: str) -> float:
    """Bytes of all weights (quantisation scales and layers kept in bf16 are left out)."""
    return shape.params * DTYPE_BYTES[weight_dtype]


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str) -> float:
    """KV-cache bytes one token takes in the whole model: K and V x layers x KV heads x head dim x dtype bytes."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * DTYPE_BYTES[kv_dtype]


def kv_bytes_per_token_per_gpu(shape: ModelShape, kv_dtype: str, tp: int, pp: int) -> float:
    """One token's KV bytes on one GPU: its stage's layers, its share of the KV heads (replicated when TP > heads)."""
    heads = math.ceil(shape.kv_heads / tp)
    layers = math.ceil(shape.layers / pp)
    return 2 * layers * heads * shape.head_dim * DTYPE_BYTES[kv_dtype]


def experts_touched(experts: int, per_token: int, batch: float) -> float:
    """Expected distinct experts a batch routes to in one layer (uniform routing): E x (1 - (1 - k/E)^B)."""
    if experts <= 1:
        return 1.0
    return experts * (1.0 - math.pow(1.0 - per_token / experts, max(batch, 0.0)))


def weight_bytes_read_per_step(shape: ModelShape, weight_dtype: str, batch: float) -> float:
    """Weight bytes one decode step reads in the whole model: all but the input embedding, and for a mixture of
    experts only the experts the batch's tokens route to."""
    dense = shape.params - shape.expert_params - shape.input_embedding_params
    experts = 0.0
    if shape.expert_params:
        experts = shape.expert_params * experts_touched(shape.experts, shape.experts_per_token, batch) / shape.experts
    return (dense + experts) * DTYPE_BYTES[weight_dtype]


def transfer_seconds(num_bytes: float, bytes_per_second: float) -> float:
    """Time to move `num_bytes` at a rate (the seed case: 77 GB at 3.35 TB/s is about 23 ms)."""
    return num_bytes / bytes_per_second


def ring_allreduce_seconds(message_bytes: float, tp: int, link_bytes_per_second: float, latency: float) -> float:
    """One ring all-reduce: each GPU sends and receives 2(TP-1)/TP of the message, plus a fixed latency."""
    if tp <= 1:
        return 0.0
    return latency + 2 * (tp - 1) / tp * message_bytes / link_bytes_per_second


def allreduce_seconds(inputs: PlanInputs, message_bytes: float) -> float:
    """One all-reduce of `message_bytes` across the TP group.

    Inside one server it is a ring over the server's link. A group spanning servers reduces hierarchically, as NCCL
    does: a reduce-scatter and an all-gather inside each server (a ring all-reduce's traffic over NVLink or PCIe),
    and between them an all-reduce of each GPU's 1/g share across the servers over the network, every GPU on its
    own NIC in parallel. Modelling it as one flat ring over PCIe (what a TP of 16 used to be) hid both the network
    and its latency, which is what dominates a cross-server decode step at small batches.
    """
    topology = inputs.topology
    inside = ring_allreduce_seconds(
        message_bytes, topology.gpus_per_node, topology.intra_bytes_per_second, inputs.allreduce_latency_seconds
    )
    if topology.nodes == 1:
        return inside
    across = ring_allreduce_seconds(
        message_bytes / topology.gpus_per_node,
        topology.nodes,
        inputs.network_bytes_per_second,
        inputs.network_latency_seconds,
    )
    return inside + across


def compute_flops_rate(gpu: GpuPreset, weight_dtype: str) -> float:
    """Peak dense FLOP/s the GEMMs run at: FP8 tensor cores for FP8 weights where the GPU has them, else BF16
    (INT8/INT4 are taken as weight-only quantisation that dequantises to BF16)."""
    if weight_dtype == "fp8" and gpu.fp8_dense_flops is not None:
        return gpu.fp8_dense_flops
    return gpu.bf16_dense_flops


def attention_flops(shape: ModelShape, query_tokens: float, context_tokens: float) -> float:
    """FLOPs of QK^T and AV: 4 x layers x heads x head dim x queries x keys (halve it yourself for causal prefill)."""
    return 4 * shape.layers * shape.attention_heads * shape.head_dim * query_tokens * context_tokens


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of an engine at a batch, split into its terms (seconds unless named otherwise)."""

    batch: int
    weight_bytes_read_per_gpu: float
    kv_bytes_read_per_gpu: float
    memory_floor: float  # (weights + KV) / bandwidth, summed over pipeline stages
    compute_floor: float  # FLOPs / FLOP/s
    tp_communication: float  # 2 all-reduces per layer
    pp_communication: float  # activations handed between stages
    floor: float  # max(memory, compute) + communication: the ITL lower bound
    expected: float  # max(memory, compute) / efficiency + communication

    @property
    def roof(self) -> str:
        """Which roof holds: memory or compute."""
        return "memory" if self.memory_floor >= self.compute_floor else "compute"

    @property
    def bound(self) -> str:
        """The largest term of the floor: memory, compute or communication (what to change to go faster)."""
        return _largest_term(self.memory_floor, self.compute_floor, self.tp_communication + self.pp_communication)


def decode_step(inputs: PlanInputs, batch: int) -> DecodeStep:
    """The decode step (= the ITL every running sequence sees) with `batch` sequences running on one engine.

    With pipeline parallelism the batch is split into one micro-batch per stage and a token round passes every
    stage once, so ITL = stages x stage time at batch / stages.
    """
    shape, gpu = inputs.model, inputs.gpu
    tp, pp = inputs.tensor_parallel, inputs.pipeline_parallel
    micro = batch / pp
    weights = weight_bytes_read_per_step(shape, inputs.weight_dtype, micro) / (tp * pp)
    kv = micro * inputs.context_tokens * kv_bytes_per_token_per_gpu(shape, inputs.kv_dtype, tp, pp)
    memory = pp * transfer_seconds(weights + kv, gpu.hbm_bandwidth_bytes_per_second)
    flops = 2 * shape.active_params * batch + attention_flops(shape, batch, inputs.context_tokens)
    # each stage runs its layers for all pp micro-batches per round, the stages side by side: all tp x pp GPUs busy
    compute = flops / (compute_flops_rate(gpu, inputs.weight_dtype) * tp * pp)
    message = micro * shape.hidden_size * ACTIVATION_BYTES
    tp_comm = pp * 2 * math.ceil(shape.layers / pp) * allreduce_seconds(inputs, message)
    pp_comm = 0.0
    if pp > 1:  # stages on other servers hand their activations over the network
        across = inputs.engine_nodes > 1
        link = inputs.network_bytes_per_second if across else inputs.topology.intra_bytes_per_second
        latency = inputs.network_latency_seconds if across else inputs.allreduce_latency_seconds
        pp_comm = pp * (pp - 1) / pp * (latency + message / link)
    roof = max(memory, compute)
    comm = tp_comm + pp_comm
    return DecodeStep(
        batch, weights, kv, memory, compute, tp_comm, pp_comm, roof + comm, roof / inputs.efficiency + comm
    )


@dataclass(frozen=True)
class Prefill:
    """Prefill of one prompt on an idle engine (the TTFT floor, no queueing), seconds unless named otherwise."""

    prompt_tokens: int
    flops: float
    compute_floor: float
    memory_floor: float  # weights read once + the prompt's KV written
    tp_communication: float
    floor: float
    expected: float

    @property
    def roof(self) -> str:
        """Which roof holds: memory or compute."""
        return "memory" if self.memory_floor >= self.compute_floor else "compute"

    @property
    def bound(self) -> str:
        """The largest term of the floor: memory, compute or communication."""
        return _largest_term(self.memory_floor, self.compute_floor, self.tp_communication)


def _largest_term(memory: float, compute: float, communication: float) -> str:
    """The name of the largest term; ties go to the roof (communication binds only when it is strictly larger)."""
    roof_name, roof = ("memory", memory) if memory >= compute else ("compute", compute)
    return "communication" if communication > roof else roof_name


def prefill(inputs: PlanInputs, prompt_tokens: int) -> Prefill:
    """Prefill time for one prompt: compute floor 2 x active params x N + causal attention, memory floor the weights
    read once; with TP, two all-reduces of N x hidden activations per layer."""
    shape, gpu, tp = inputs.model, inputs.gpu, inputs.tensor_parallel
    flops = 2 * shape.active_params * prompt_tokens + attention_flops(shape, prompt_tokens, prompt_tokens) / 2
    compute = flops / (compute_flops_rate(gpu, inputs.weight_dtype) * tp)
    read = weight_bytes(shape, inputs.weight_dtype) / tp
    written = prompt_tokens * kv_bytes_per_token(shape, inputs.kv_dtype) / tp
    memory = transfer_seconds(read + written, gpu.hbm_bandwidth_bytes_per_second)
    message = prompt_tokens * shape.hidden_size * ACTIVATION_BYTES
    comm = 2 * shape.layers * allreduce_seconds(inputs, message)
    roof = max(compute, memory)
    return Prefill(prompt_tokens, flops, compute, memory, comm, roof + comm, roof / inputs.efficiency + comm)


def _largest(limit: int, ok: Callable[[int], bool]) -> int:
    """The largest n in [1, limit] with ok(n), for ok true up to some point and false after; 0 if ok(1) fails."""
    if limit < 1 or not ok(1):
        return 0
    low, high = 1, limit
    while low < high:
        middle = (low + high + 1) // 2
        if ok(middle):
            low = middle
        else:
            high = middle - 1
    return low


# ==============================================================================================================
# The plan
# ==============================================================================================================
@dataclass(frozen=True)
class Plan:
    """The planner's answer for one model on one GPU type; `as_dict()` is the `--json` form."""

    inputs: PlanInputs
    weight_bytes_total: float
    weight_bytes_per_gpu: float
    usable_bytes_per_gpu: float  # HBM x utilization - overhead
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    weights_fit: bool
    kv_budget_bytes_per_gpu: float
    kv_tokens_per_engine: int
    max_sequences_by_kv: int
    fits: bool
    min_tensor_parallel_to_fit: int | None
    batch_cap: int  # min(KV capacity, max_num_seqs)
    max_batch: int  # largest batch that keeps the ITL SLO (== batch_cap without one)
    step_at_max_batch: DecodeStep | None
    step_at_batch_1: DecodeStep | None
    prefill: Prefill
    prefill_compute_bound_above_prompt_tokens: int
    max_prompt_tokens_within_ttft_slo: int | None
    engines: int | None
    gpus: int | None
    fp8_kv: Plan | None  # the same plan with an 8-bit KV cache, when this one uses 16-bit
    notes: tuple[str, ...]

    @property
    def decode_tokens_per_second_per_engine(self) -> float | None:
        """Expected decode throughput of one engine at `max_batch` (None when nothing runs)."""
        if self.step_at_max_batch is None:
            return None
        return self.max_batch / self.step_at_max_batch.expected

    @property
    def itl_slo_met(self) -> bool | None:
        """Whether a batch of one meets the ITL SLO (None without an SLO)."""
        if self.inputs.itl_slo_seconds is None:
            return None
        return self.max_batch >= 1

    @property
    def ttft_slo_met(self) -> bool | None:
        """Whether the expected prefill of the planned prompt fits the TTFT SLO (None without an SLO)."""
        if self.inputs.ttft_slo_seconds is None:
            return None
        return self.prefill.expected <= self.inputs.ttft_slo_seconds

    def as_dict(self) -> dict[str, Any]:
        """All inputs, intermediate terms and results, with units in the key names."""
        i, shape, gpu = self.inputs, self.inputs.model, self.inputs.gpu
        tps = self.decode_tokens_per_second_per_engine
        out: dict[str, Any] = {
            "inputs": {
                "model": shape.name,
                "total_params": shape.params,
                "active_params": shape.active_params,
                "layers": shape.layers,
                "hidden_size": shape.hidden_size,
                "attention_heads": shape.attention_heads,
                "kv_heads": shape.kv_heads,
                "head_dim": shape.head_dim,
                "experts": shape.experts,
                "experts_per_token": shape.experts_per_token,
                "gpu": gpu.name,
                "hbm_bytes": gpu.hbm_bytes,
                "hbm_bandwidth_bytes_per_second": gpu.hbm_bandwidth_bytes_per_second,
                "compute_flops_per_second": compute_flops_rate(gpu, i.weight_dtype),
                "link": i.topology.link,
                "link_one_direction_bytes_per_second": i.topology.intra_bytes_per_second,
                "tp_nodes": i.topology.nodes,
                "tp_gpus_per_node": i.topology.gpus_per_node,
                "engine_nodes": i.engine_nodes,
                "network_one_direction_bytes_per_second": i.network_bytes_per_second,
                "network_latency_seconds": i.network_latency_seconds,
                "tensor_parallel": i.tensor_parallel,
                "pipeline_parallel": i.pipeline_parallel,
                "gpus_per_engine": i.gpus_per_engine,
                "weight_dtype": i.weight_dtype,
                "kv_dtype": i.kv_dtype,
                "context_tokens": i.context_tokens,
                "prompt_tokens": i.prompt_tokens,
                "itl_slo_seconds": i.itl_slo_seconds,
                "ttft_slo_seconds": i.ttft_slo_seconds,
                "concurrency_sequences": i.concurrency,
                "headroom_ratio": i.headroom,
                "efficiency_ratio": i.efficiency,
                "gpu_memory_utilization_ratio": i.gpu_memory_utilization,
                "overhead_per_gpu_bytes": i.overhead_bytes_per_gpu,
                "allreduce_latency_seconds": i.allreduce_latency_seconds,
                "max_num_seqs": i.max_num_seqs,
            },
            "memory": {
                "weights_total_bytes": self.weight_bytes_total,
                "weights_per_gpu_bytes": self.weight_bytes_per_gpu,
                "usable_per_gpu_bytes": self.usable_bytes_per_gpu,
                "weights_fit": self.weights_fit,
                "kv_per_token_bytes": self.kv_bytes_per_token,
                "kv_per_token_per_gpu_bytes": self.kv_bytes_per_token_per_gpu,
                "kv_budget_per_gpu_bytes": self.kv_budget_bytes_per_gpu,
                "kv_capacity_per_engine_tokens": self.kv_tokens_per_engine,
                "kv_capacity_sequences": self.max_sequences_by_kv,
                "fits": self.fits,
                "min_tensor_parallel_to_fit": self.min_tensor_parallel_to_fit,
            },
            "decode": {
                "batch_cap_sequences": self.batch_cap,
                "max_batch_within_itl_slo_sequences": self.max_batch,
                "max_batch_per_gpu_sequences": self.max_batch / i.gpus_per_engine,
                "itl_slo_met": self.itl_slo_met,
                "at_batch_1": _step_dict(self.step_at_batch_1),
                "at_max_batch": _step_dict(self.step_at_max_batch),
                "per_engine_tokens_per_second": tps,
                "per_gpu_tokens_per_second": None if tps is None else tps / i.gpus_per_engine,
            },
            "prefill": {
                "prompt_tokens": self.prefill.prompt_tokens,
                "compute_flops": self.prefill.flops,
                "compute_floor_seconds": self.prefill.compute_floor,
                "memory_floor_seconds": self.prefill.memory_floor,
                "tp_communication_seconds": self.prefill.tp_communication,
                "floor_seconds": self.prefill.floor,
                "expected_seconds": self.prefill.expected,
                "bound": self.prefill.bound,
                "compute_bound_above_prompt_tokens": self.prefill_compute_bound_above_prompt_tokens,
                "max_prompt_within_ttft_slo_tokens": self.max_prompt_tokens_within_ttft_slo,
                "ttft_slo_met": self.ttft_slo_met,
            },
            "sizing": {
                "engines": self.engines,
                "gpus": self.gpus,
                "capacity_sequences": None if self.engines is None else self.engines * self.max_batch,
                # What a count needs: without a peak (--concurrency) engines and gpus are null, and this says why.
                "needs": None if self.inputs.concurrency is not None else "--concurrency",
            },
            "notes": list(self.notes),
        }
        if self.fp8_kv is not None:
            other = self.fp8_kv
            out["with_8bit_kv_cache"] = {
                "kv_dtype": other.inputs.kv_dtype,
                "kv_per_token_bytes": other.kv_bytes_per_token,
                "kv_capacity_per_engine_tokens": other.kv_tokens_per_engine,
                "max_batch_within_itl_slo_sequences": other.max_batch,
                "per_engine_tokens_per_second": other.decode_tokens_per_second_per_engine,
                "engines": other.engines,
                "gpus": other.gpus,
            }
        return out


def _step_dict(step: DecodeStep | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {
        "batch_sequences": step.batch,
        "weights_read_per_gpu_bytes": step.weight_bytes_read_per_gpu,
        "kv_read_per_gpu_bytes": step.kv_bytes_read_per_gpu,
        "memory_floor_seconds": step.memory_floor,
        "compute_floor_seconds": step.compute_floor,
        "tp_communication_seconds": step.tp_communication,
        "pp_communication_seconds": step.pp_communication,
        "itl_floor_seconds": step.floor,
        "itl_expected_seconds": step.expected,
        "bound": step.bound,
    }


def _memory(inputs: PlanInputs, tp: int) -> tuple[float, float, float]:
    """(weights per GPU, usable bytes per GPU, KV budget per GPU) at a TP size."""
    per_gpu = weight_bytes(inputs.model, inputs.weight_dtype) / (tp * inputs.pipeline_parallel)
    usable = inputs.gpu.hbm_bytes * inputs.gpu_memory_utilization - inputs.overhead_bytes_per_gpu
    return per_gpu, usable, usable - per_gpu


def _min_tp_to_fit(inputs: PlanInputs) -> int | None:
    """The smallest TP (a power of two the heads allow, up to 64) that holds the weights and one sequence."""
    for tp in (1, 2, 4, 8, 16, 32, 64):
        try:
            check_inputs(replace(inputs, tensor_parallel=tp))
        except PlanError:
            continue
        _, _, budget = _memory(inputs, tp)
        per_token = kv_bytes_per_token_per_gpu(inputs.model, inputs.kv_dtype, tp, inputs.pipeline_parallel)
        if budget >= per_token * inputs.context_tokens:
            return tp
    return None


def plan(inputs: PlanInputs, *, with_8bit_kv: bool = True) -> Plan:
    """Work out the whole plan; raises `PlanError` for inputs that cannot work."""
    check_inputs(inputs)
    shape, tp, pp = inputs.model, inputs.tensor_parallel, inputs.pipeline_parallel
    per_gpu, usable, budget = _memory(inputs, tp)
    weights_fit = budget > 0
    per_token_gpu = kv_bytes_per_token_per_gpu(shape, inputs.kv_dtype, tp, pp)
    kv_tokens = max(0, math.floor(budget / per_token_gpu)) if weights_fit else 0
    sequences = kv_tokens // inputs.context_tokens
    fits = weights_fit and sequences >= 1
    cap = min(sequences, inputs.max_num_seqs) if inputs.max_num_seqs is not None else sequences
    itl = inputs.itl_slo_seconds

    def keeps_itl(batch: int) -> bool:
        return itl is None or decode_step(inputs, batch).expected <= itl

    max_batch = _largest(cap, keeps_itl)
    step_max = decode_step(inputs, max_batch) if max_batch >= 1 else None
    step_one = decode_step(inputs, 1) if fits else None
    prompt = prefill(inputs, inputs.prompt_tokens)
    ttft = inputs.ttft_slo_seconds
    max_prompt: int | None = None
    if ttft is not None:
        limit = shape.max_context_tokens or MAX_BATCH_SEARCH
        max_prompt = _largest(limit, lambda n: prefill(inputs, n).expected <= ttft)
    crossover = _largest(MAX_BATCH_SEARCH, lambda n: prefill(inputs, n).roof == "memory") + 1
    engines = gpus = None
    if inputs.concurrency is not None and max_batch >= 1:
        engines = math.ceil(inputs.concurrency * (1 + inputs.headroom) / max_batch - 1e-9)
        gpus = engines * inputs.gpus_per_engine
    other = None
    if with_8bit_kv and DTYPE_BYTES[inputs.kv_dtype] == 2:
        other = plan(replace(inputs, kv_dtype="fp8"), with_8bit_kv=False)
    result = Plan(
        inputs=inputs,
        weight_bytes_total=weight_bytes(shape, inputs.weight_dtype),
        weight_bytes_per_gpu=per_gpu,
        usable_bytes_per_gpu=usable,
        kv_bytes_per_token=kv_bytes_per_token(shape, inputs.kv_dtype),
        kv_bytes_per_token_per_gpu=per_token_gpu,
        weights_fit=weights_fit,
        kv_budget_bytes_per_gpu=max(budget, 0.0),
        kv_tokens_per_engine=kv_tokens,
        max_sequences_by_kv=sequences,
        fits=fits,
        min_tensor_parallel_to_fit=None if fits else _min_tp_to_fit(inputs),
        batch_cap=cap,
        max_batch=max_batch,
        step_at_max_batch=step_max,
        step_at_batch_1=step_one,
        prefill=prompt,
        prefill_compute_bound_above_prompt_tokens=crossover,
        max_prompt_tokens_within_ttft_slo=max_prompt,
        engines=engines,
        gpus=gpus,
        fp8_kv=other,
        notes=(),
    )
    return replace(result, notes=tuple(_notes(result)))


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB"


def _notes(p: Plan) -> list[str]:
    """Plain-language findings, the ones that change a decision first."""
    i = p.inputs
    notes: list[str] = []
    where = f"{i.tensor_parallel} x {i.gpu.name}" if i.gpus_per_engine > 1 else f"one {i.gpu.name}"
    if i.pipeline_parallel > 1:
        where += f" (TP {i.tensor_parallel} x PP {i.pipeline_parallel})"
    if not p.weights_fit:
        hint = (f"use --tp {p.min_tensor_parallel_to_fit}" if p.min_tensor_parallel_to_fit else "use a larger GPU") + (
            " or --weight-dtype fp8" if DTYPE_BYTES[i.weight_dtype] == 2 else ""
        )
        notes.append(
            f"DOES NOT FIT: {i.model.name} in {i.weight_dtype} needs {_gb(p.weight_bytes_per_gpu)} of weights per "
            f"GPU on {where}, but each {i.gpu.name} has {_gb(p.usable_bytes_per_gpu)} usable "
            f"({_gb(i.gpu.hbm_bytes)} x {i.gpu_memory_utilization:g} - {_gb(i.overhead_bytes_per_gpu)} overhead); "
            f"{hint}"
        )
    elif not p.fits:
        notes.append(
            f"DOES NOT FIT: the weights fit, but the {_gb(p.kv_budget_bytes_per_gpu)} left per GPU holds "
            f"{p.kv_tokens_per_engine} KV tokens, less than one {i.context_tokens}-token sequence; "
            f"use --tp {p.min_tensor_parallel_to_fit or 'larger'} or an 8-bit KV cache"
        )
    if p.fits and i.itl_slo_seconds is not None and p.max_batch == 0 and p.step_at_batch_1 is not None:
        notes.append(
            f"ITL SLO {i.itl_slo_seconds * 1e3:g} ms cannot be met at any batch: one sequence alone needs "
            f"{p.step_at_batch_1.expected * 1e3:.1f} ms per token; use more tensor parallelism, FP8 weights or a "
            "faster GPU"
        )
    elif (
        p.fits
        and p.max_batch
        and p.max_batch == p.max_sequences_by_kv
        and (i.max_num_seqs is None or p.max_batch < i.max_num_seqs)
    ):
        notes.append(
            f"the KV cache, not the ITL SLO, limits the batch to {p.max_batch} sequences of {i.context_tokens} "
            "tokens; an 8-bit KV cache or more GPUs per engine raises it"
        )
    if i.ttft_slo_seconds is not None and p.ttft_slo_met is False:
        notes.append(
            f"TTFT SLO {i.ttft_slo_seconds * 1e3:g} ms is not met even on an idle engine: a {i.prompt_tokens}-token "
            f"prefill takes {p.prefill.expected * 1e3:.0f} ms; prompts up to {p.max_prompt_tokens_within_ttft_slo} "
            "tokens fit"
        )
    if p.fp8_kv is not None and p.fits and p.fp8_kv.max_batch > p.max_batch:
        notes.append(
            f"an 8-bit KV cache (--kv-dtype fp8; vLLM's --kv-cache-dtype fp8) halves KV bytes per token and raises "
            f"the batch from "
            f"{p.max_batch} to {p.fp8_kv.max_batch}"
            + (
                f" ({p.engines} -> {p.fp8_kv.engines} engines)"
                if p.engines and p.fp8_kv.engines and p.fp8_kv.engines < p.engines
                else ""
            )
        )
    notes.extend(_communication_notes(p))
    notes.append(
        f"every memory and compute time here is a lower bound divided by efficiency {i.efficiency:.3g} (the "
        "roofline leaves out scheduling, sampling, chunked-prefill interleaving and queueing; calibrate "
        "--efficiency from slokit probe, docs/plan.md); communication is added undivided, from its stated link "
        "rate and latency"
    )
    return notes


def _communication_notes(p: Plan) -> list[str]:
    """Say when the TP group spans servers (and what that costs), and when communication is the largest term.

    A TP group larger than a server sends every all-reduce over the network between servers; a planner that says
    nothing about it, or names the memory roof while communication dominates the step, points the reader at the
    wrong fix.
    """
    i = p.inputs
    topology = i.topology
    notes: list[str] = []
    step = p.step_at_max_batch or p.step_at_batch_1
    if topology.nodes > 1:
        split = f"{topology.nodes} servers of {topology.gpus_per_node} x {i.gpu.name}"
        cost = ""
        if step is not None:
            share = step.tp_communication / step.expected if step.expected else 0.0
            cost = (
                f"; at batch {step.batch} communication is {step.tp_communication * 1e3:.1f} ms of the "
                f"{step.expected * 1e3:.1f} ms step ({share:.0%})"
            )
        alternative = ""
        pp_alternative = replace(
            i, tensor_parallel=topology.gpus_per_node, pipeline_parallel=i.pipeline_parallel * topology.nodes
        )
        try:
            check_inputs(pp_alternative)
        except PlanError:
            pass
        else:
            alternative = (
                f"; --tp {topology.gpus_per_node} --pp {pp_alternative.pipeline_parallel} keeps every all-reduce "
                f"inside a server ({topology.intra_link})"
            )
        notes.append(
            f"TP {i.tensor_parallel} spans {split} (at most {GPUS_PER_NODE} GPUs to a server): every all-reduce "
            f"also crosses the network between them, modelled at {i.network_bytes_per_second * 8 / 1e9:g} Gb/s per "
            f"GPU and {i.network_latency_seconds * 1e6:g} us per all-reduce (--network-gbps, --network-latency)"
            f"{cost}{alternative}"
        )
    elif i.pipeline_parallel > 1 and i.engine_nodes > 1:
        notes.append(
            f"TP {i.tensor_parallel} x PP {i.pipeline_parallel} spans {i.engine_nodes} servers: the pipeline "
            "hand-offs between them cross the network; the all-reduces stay inside each server"
        )
    for label, candidate in (("at the largest batch", p.step_at_max_batch), ("at batch 1", p.step_at_batch_1)):
        if candidate is not None and candidate.bound == "communication":
            roof = max(candidate.memory_floor, candidate.compute_floor)
            notes.append(
                f"communication, not {candidate.roof}, bounds the decode step {label}: "
                f"{(candidate.tp_communication + candidate.pp_communication) * 1e3:.1f} ms of all-reduces against "
                f"{roof * 1e3:.1f} ms of {candidate.roof} time; fewer GPUs per all-reduce (less TP, more PP or "
                "more engines) or a faster link shortens it"
            )
            break
    return notes


# ==============================================================================================================
# From a spec
# ==============================================================================================================
def itl_objective_seconds(spec: Spec, model: Model) -> float | None:
    """The tightest ITL or TPOT objective threshold among the classes that run on a model (the batch bound)."""
    values = [
        slo.objective.threshold
        for request_class in spec.classes_on(model.name)
        for sli, slo in request_class.slos.items()
        if sli in (Sli.ITL, Sli.TPOT) and slo.objective is not None
    ]
    return min(values) if values else None


def ttft_objective_seconds(spec: Spec, model: Model) -> float | None:
    """The tightest TTFT objective threshold among the classes that run on a model."""
    values = [
        slo.objective.threshold
        for request_class in spec.classes_on(model.name)
        for sli, slo in request_class.slos.items()
        if sli is Sli.TTFT and slo.objective is not None
    ]
    return min(values) if values else None


def workload_tokens(spec: Spec, model: Model) -> tuple[int, int] | None:
    """(context, prompt) tokens from the workloads of the classes on a model: the largest mean prompt + half the
    mean output (a sequence's average resident KV over its decode), and the largest mean prompt."""
    pairs = [
        (c.workload.prompt_tokens.mean, c.workload.output_tokens.mean)
        for c in spec.classes_on(model.name)
        if c.workload is not None
    ]
    if not pairs:
        return None
    context = max(prompt + output / 2 for prompt, output in pairs)
    prompt = max(prompt for prompt, _ in pairs)
    return max(1, round(context)), max(1, round(prompt))


def inputs_for_model(spec: Spec, model: Model, **overrides: Any) -> PlanInputs | None:
    """Planner inputs for one of a spec's models (None when it names no preset or no GPU)."""
    if model.preset is None or model.gpu is None:
        return None
    shape = ModelShape.from_preset(MODELS[model.preset])
    tokens = workload_tokens(spec, model)
    context, prompt = tokens if tokens is not None else (DEFAULT_CONTEXT_TOKENS, DEFAULT_CONTEXT_TOKENS)
    base = PlanInputs(
        model=replace(shape, name=model.name if model.name == model.preset else f"{model.name} ({model.preset})"),
        gpu=GPUS[model.gpu],
        context_tokens=context,
        prompt_tokens=prompt,
        tensor_parallel=model.tensor_parallel,
        itl_slo_seconds=itl_objective_seconds(spec, model),
        ttft_slo_seconds=ttft_objective_seconds(spec, model),
        max_num_seqs=model.max_num_seqs,
    )
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})


def plan_for_model(spec: Spec, model: Model, **overrides: Any) -> Plan | None:
    """The plan for one of a spec's models; `overrides` replace `PlanInputs` fields (None values are ignored)."""
    inputs = inputs_for_model(spec, model, **overrides)
    return None if inputs is None else plan(inputs)


def expected_decode_tokens_per_second(spec: Spec, model: Model) -> float | None:
    """Expected decode throughput of one engine (tokens/s) for one of a spec's models.

    The engine runs the largest batch that keeps the tightest ITL/TPOT objective of the model's classes (capped by
    `max_num_seqs` and by the KV cache at the classes' workload context), at the default efficiency. None when the
    spec names no preset or GPU for the model, or when the model cannot run there (does not fit, or misses the ITL
    objective even alone): then there is no expectation to compare a measurement with.
    """
    try:
        result = plan_for_model(spec, model)
    except PlanError:
        return None
    return None if result is None else result.decode_tokens_per_second_per_engine


def decode_tokens_per_second(inputs: PlanInputs, batch: int) -> float:
    """Expected decode tokens/s of one engine with `batch` sequences running: each step emits one token per
    sequence, so `batch / decode_step(batch).expected` (0 at batch 0). Decode is bandwidth-bound at small batches:
    a step reads the weights once and the running sequences' KV, so a lightly loaded engine emits far fewer
    tokens/s than a full one, and its expectation must be the one at its own batch."""
    if batch <= 0:
        return 0.0
    return batch / decode_step(inputs, batch).expected


@dataclass(frozen=True)
class DecodePoint:
    """The expected decode step and throughput of one engine at one batch."""

    batch: int
    step_seconds: float  # the expected ITL at this batch
    tokens_per_second: float


def curve_batches(cap: int) -> tuple[int, ...]:
    """The batches a decode curve is tabulated at: powers of two up to `cap`, and `cap` itself."""
    if cap < 1:
        return ()
    batches = {1 << k for k in range(cap.bit_length()) if 1 << k <= cap}
    batches.add(cap)
    return tuple(sorted(batches))


def decode_curve(inputs: PlanInputs, batches: Sequence[int]) -> tuple[DecodePoint, ...]:
    """Expected step time and tokens/s of one engine at each of `batches` (raises `PlanError` for bad inputs)."""
    check_inputs(inputs)
    points = []
    for batch in batches:
        step = decode_step(inputs, batch).expected
        points.append(DecodePoint(batch, step, batch / step))
    return tuple(points)


def expected_decode_curve(spec: Spec, model: Model) -> tuple[DecodePoint, ...] | None:
    """The expected decode throughput of one engine of a spec's model from a batch of 1 to the most sequences it
    can run (the KV cache at the classes' workload context, capped by `max_num_seqs`): what a measurement at the
    batch actually running should be compared with. None when the spec names no preset or GPU for the model, or
    when the model cannot run there."""
    try:
        result = plan_for_model(spec, model)
    except PlanError:
        return None
    if result is None or result.batch_cap < 1:
        return None
    return decode_curve(result.inputs, curve_batches(result.batch_cap))


@dataclass(frozen=True)
class Calibration:
    """The efficiency a measured ITL implies: roofline floor / (measured - communication)."""

    measured_itl_seconds: float
    batch: int  # running sequences while it was measured
    roof_seconds: float  # max(memory, compute) floor at that batch
    communication_seconds: float
    efficiency: float

    def as_dict(self) -> dict[str, Any]:
        """The `--json` form."""
        return {
            "measured_itl_seconds": self.measured_itl_seconds,
            "measured_batch_sequences": self.batch,
            "roof_seconds": self.roof_seconds,
            "communication_seconds": self.communication_seconds,
            "efficiency_ratio": self.efficiency,
        }


def calibrate(inputs: PlanInputs, batch: int, measured_itl_seconds: float) -> Calibration:
    """The efficiency factor that makes the model's expected ITL at `batch` equal a measured ITL.

    Use a measurement of the same model, GPU, TP, dtypes and context, taken with `batch` sequences decoding (a
    closed-loop `slokit probe` at that concurrency, below max_num_seqs). Raises `PlanError` when the measurement
    is faster than the floor, which means the inputs do not describe what was measured.
    """
    check_inputs(inputs)
    if batch < 1:
        raise PlanError(f"the measured batch must be at least 1 running sequence, not {batch}")
    if not measured_itl_seconds > 0:
        raise PlanError(f"the measured ITL must be positive, not {measured_itl_seconds}")
    step = decode_step(inputs, batch)
    roof = max(step.memory_floor, step.compute_floor)
    comm = step.tp_communication + step.pp_communication
    if measured_itl_seconds <= step.floor:
        raise PlanError(
            f"a measured ITL of {measured_itl_seconds * 1e3:.2f} ms at batch {batch} is below the roofline floor of "
            f"{step.floor * 1e3:.2f} ms, so the inputs do not describe what was measured: check the GPU, TP, weight "
            "and KV dtypes and --context against the deployment"
        )
    return Calibration(measured_itl_seconds, batch, roof, comm, roof / (measured_itl_seconds - comm))
