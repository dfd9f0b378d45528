"""Built-in model and GPU presets, named as the spec's `gpu` and `preset` fields name them.

Plain data only (nothing imported from the rest of slokit), so the spec loader can validate names against it.
Every figure carries its source in a comment. Datasheet rates are decimal (1 TB/s = 1e12 bytes/s); FLOP/s are dense
(NVIDIA's headline tensor figures assume 2:4 sparsity and are twice these). Memory capacities are what the device
reports (`nvidia-smi --query-gpu=memory.total`, MiB), since that is the total vLLM's `--gpu-memory-utilization` scales.

Model shapes come from each model's published Hugging Face `config.json`; parameter counts are computed from those
shapes (`ModelPreset.counted_params()` recomputes them, and the tests check that both agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

MIB: Final = 1 << 20
TB: Final = 1e12
GB: Final = 1e9
TFLOPS: Final = 1e12


@dataclass(frozen=True)
class GpuPreset:
    """Peak figures of one GPU model, per GPU."""

    name: str  # preset name as the spec's `gpu` field takes it
    description: str
    hbm_bytes: int  # device memory the driver reports (HBM, or GDDR6 on L40S)
    hbm_bandwidth_bytes_per_second: float  # peak device-memory bandwidth
    bf16_dense_flops: float  # dense BF16 tensor-core FLOP/s
    fp8_dense_flops: float | None  # dense FP8 tensor-core FLOP/s; None where the GPU has no FP8 tensor cores
    nvlink_bytes_per_second: float | None  # NVLink per GPU, both directions together (datasheet); None: no NVLink
    nvlink_max_gpus: int  # largest tensor-parallel group NVLink joins all-to-all (8 via NVSwitch, 2 via a bridge)
    pcie_bytes_per_second: float  # PCIe per GPU, both directions together; the TP path beyond NVLink's reach
    nvml_names: tuple[str, ...]  # nvmlDeviceGetName() values of devices these figures describe

    def link_bytes_per_second(self, tensor_parallel: int) -> float:
        """One-direction bandwidth of the link a TP group of this size communicates over (half the datasheet)."""
        if self.nvlink_bytes_per_second is not None and tensor_parallel <= self.nvlink_max_gpus:
            return self.nvlink_bytes_per_second / 2
        return self.pcie_bytes_per_second / 2

    def link_name(self, tensor_parallel: int) -> str:
        """The link a TP group of this size uses: nvlink or pcie."""
        if self.nvlink_bytes_per_second is not None and tensor_parallel <= self.nvlink_max_gpus:
            return "nvlink"
        return "pcie"


@dataclass(frozen=True)
class ModelPreset:
    """The shape of one model, as its config.json gives it."""

    name: str  # preset name as the spec's `preset` field takes it
    description: str
    source: str  # the Hugging Face repository whose config.json these come from
    params: int  # total parameters (all experts)
    active_params: int  # parameters one token passes through (== params for dense models)
    layers: int  # num_hidden_layers
    hidden_size: int  # hidden_size
    attention_heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads (grouped-query attention)
    head_dim: int  # hidden_size / num_attention_heads
    intermediate_size: int  # intermediate_size (per expert for MoE)
    vocab_size: int  # vocab_size
    tied_embeddings: bool  # tie_word_embeddings
    max_context_tokens: int  # max_position_embeddings
    experts: int = 1  # num_local_experts (1: dense)
    experts_per_token: int = 1  # num_experts_per_tok
    qkv_bias: bool = False  # Qwen2 has biases on q, k and v

    def counted_params(self) -> int:
        """Parameters counted from the shape (Llama-style blocks: attention, gated MLP, RMSNorm)."""
        h, q, kv = self.hidden_size, self.attention_heads * self.head_dim, self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        expert = 3 * h * self.intermediate_size
        router = h * self.experts if self.experts > 1 else 0
        per_layer = attention + self.experts * expert + router + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embeddings + h

    @property
    def expert_params(self) -> int:
        """Parameters of all experts together (0 for a dense model): the part a decode step reads only in part."""
        if self.experts <= 1:
            return 0
        return self.layers * self.experts * 3 * self.hidden_size * self.intermediate_size

    @property
    def input_embedding_params(self) -> int:
        """Parameters of the input embedding table: a step reads only the rows of its tokens, unless tied."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size


def _gpus(*presets: GpuPreset) -> Mapping[str, GpuPreset]:
    return MappingProxyType({preset.name: preset for preset in presets})


def _models(*presets: ModelPreset) -> Mapping[str, ModelPreset]:
    return MappingProxyType({preset.name: preset for preset in presets})


GPUS: Final[Mapping[str, GpuPreset]] = _gpus(
    GpuPreset(
        name="h100-sxm",
        description="NVIDIA H100 SXM5 80GB (HBM3)",
        # nvidia-smi memory.total 81559 MiB (datasheet: 80 GB)
        hbm_bytes=81559 * MIB,
        # NVIDIA H100 Tensor Core GPU datasheet (2023): GPU memory bandwidth 3.35 TB/s (SXM)
        hbm_bandwidth_bytes_per_second=3.35 * TB,
        # same datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity -> 989.4 dense
        bf16_dense_flops=989.4 * TFLOPS,
        # same datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity -> 1,978.9 dense
        fp8_dense_flops=1978.9 * TFLOPS,
        # same datasheet: NVLink 900 GB/s (bidirectional, 18 NVLink 4 links); HGX boards join 8 GPUs via NVSwitch
        nvlink_bytes_per_second=900 * GB,
        nvlink_max_gpus=8,
        # same datasheet: PCIe Gen5 128 GB/s
        pcie_bytes_per_second=128 * GB,
        # nvmlDeviceGetName on an H100 SXM5
        nvml_names=("NVIDIA H100 80GB HBM3",),
    ),
    GpuPreset(
        name="h100-pcie",
        description="NVIDIA H100 PCIe 80GB (HBM2e)",
        # nvidia-smi memory.total 81559 MiB (datasheet: 80 GB), the same HBM capacity as the SXM part
        hbm_bytes=81559 * MIB,
        # NVIDIA H100 PCIe product brief PB-11133-001_v02: memory bandwidth 2.0 TB/s
        hbm_bandwidth_bytes_per_second=2.0 * TB,
        # H100 datasheet (PCIe column): BF16 1,513 TFLOPS with sparsity -> 756 dense
        bf16_dense_flops=756.5 * TFLOPS,
        # same: FP8 3,026 TFLOPS with sparsity -> 1,513 dense
        fp8_dense_flops=1513 * TFLOPS,
        # same: NVLink bridge 600 GB/s, joining GPUs in pairs only
        nvlink_bytes_per_second=600 * GB,
        nvlink_max_gpus=2,
        # same: PCIe Gen5 128 GB/s
        pcie_bytes_per_second=128 * GB,
        nvml_names=("NVIDIA H100 PCIe",),
    ),
    GpuPreset(
        name="h200",
        description="NVIDIA H200 SXM 141GB (HBM3e)",
        # nvidia-smi memory.total 143771 MiB (datasheet: 141 GB)
        hbm_bytes=143771 * MIB,
        # NVIDIA H200 Tensor Core GPU datasheet (2024): GPU memory bandwidth 4.8 TB/s
        hbm_bandwidth_bytes_per_second=4.8 * TB,
        # same datasheet: BF16 1,979 TFLOPS with sparsity -> 989.4 dense (the H100 SXM's compute)
        bf16_dense_flops=989.4 * TFLOPS,
        # same datasheet: FP8 3,958 TFLOPS with sparsity -> 1,978.9 dense
        fp8_dense_flops=1978.9 * TFLOPS,
        # same datasheet: NVLink 900 GB/s (bidirectional); HGX H200 joins 8 GPUs via NVSwitch
        nvlink_bytes_per_second=900 * GB,
        nvlink_max_gpus=8,
        # same datasheet: PCIe Gen5 128 GB/s
        pcie_bytes_per_second=128 * GB,
        nvml_names=("NVIDIA H200",),
    ),
    GpuPreset(
        name="a100-40gb",
        description="NVIDIA A100 40GB (HBM2), SXM4 or PCIe",
        # nvidia-smi memory.total 40960 MiB
        hbm_bytes=40960 * MIB,
        # NVIDIA A100 Tensor Core GPU datasheet (2021): A100 40GB memory bandwidth 1,555 GB/s (SXM and PCIe)
        hbm_bandwidth_bytes_per_second=1555 * GB,
        # same datasheet: BF16 Tensor Core 312 TFLOPS dense (624 with sparsity)
        bf16_dense_flops=312 * TFLOPS,
        # Ampere has no FP8 tensor cores (FP8 checkpoints run weight-only, computing in BF16)
        fp8_dense_flops=None,
        # same datasheet: NVLink 600 GB/s (third generation); HGX A100 joins 8 GPUs via NVSwitch
        nvlink_bytes_per_second=600 * GB,
        nvlink_max_gpus=8,
        # same datasheet: PCIe Gen4 64 GB/s
        pcie_bytes_per_second=64 * GB,
        nvml_names=("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
    ),
    GpuPreset(
        name="a100-80gb",
        description="NVIDIA A100 80GB SXM4 (HBM2e)",
        # nvidia-smi memory.total 81920 MiB
        hbm_bytes=81920 * MIB,
        # NVIDIA A100 datasheet (2021): A100 80GB SXM 2,039 GB/s (the PCIe card's 1,935 GB/s is 5% less, so its
        # NVML name "NVIDIA A100 80GB PCIe" is deliberately not listed here)
        hbm_bandwidth_bytes_per_second=2039 * GB,
        # same datasheet: BF16 Tensor Core 312 TFLOPS dense
        bf16_dense_flops=312 * TFLOPS,
        fp8_dense_flops=None,  # Ampere: no FP8 tensor cores
        # same datasheet: NVLink 600 GB/s; HGX A100 joins 8 GPUs via NVSwitch
        nvlink_bytes_per_second=600 * GB,
        nvlink_max_gpus=8,
        # same datasheet: PCIe Gen4 64 GB/s
        pcie_bytes_per_second=64 * GB,
        nvml_names=("NVIDIA A100-SXM4-80GB",),
    ),
    GpuPreset(
        name="l40s",
        description="NVIDIA L40S 48GB (GDDR6)",
        # nvidia-smi memory.total 46068 MiB (datasheet: 48 GB GDDR6 with ECC)
        hbm_bytes=46068 * MIB,
        # NVIDIA L40S datasheet (2023): memory bandwidth 864 GB/s
        hbm_bandwidth_bytes_per_second=864 * GB,
        # same datasheet: BF16 Tensor Core 362.05 TFLOPS dense (733 with sparsity)
        bf16_dense_flops=362.05 * TFLOPS,
        # same datasheet: FP8 Tensor Core 733 TFLOPS dense (1,466 with sparsity)
        fp8_dense_flops=733 * TFLOPS,
        # same datasheet: no NVLink; PCIe Gen4 x16 64 GB/s bidirectional
        nvlink_bytes_per_second=None,
        nvlink_max_gpus=1,
        pcie_bytes_per_second=64 * GB,
        nvml_names=("NVIDIA L40S",),
    ),
)

MODELS: Final[Mapping[str, ModelPreset]] = _models(
    ModelPreset(
        name="llama-3-8b",
        description="Meta Llama 3 8B (also 3.1 8B: same shape, 128k context)",
        # huggingface.co/meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336,
        # num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8, vocab_size 128256,
        # max_position_embeddings 8192, tie_word_embeddings false; 8,030,261,248 parameters in its safetensors
        source="meta-llama/Meta-Llama-3-8B",
        params=8_030_261_248,
        active_params=8_030_261_248,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        tied_embeddings=False,
        max_context_tokens=8192,
    ),
    ModelPreset(
        name="llama-3-70b",
        description="Meta Llama 3 70B (also 3.1/3.3 70B: same shape, 128k context)",
        # huggingface.co/meta-llama/Meta-Llama-3-70B config.json: hidden_size 8192, intermediate_size 28672,
        # num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8, vocab_size 128256,
        # max_position_embeddings 8192, tie_word_embeddings false; 70,553,706,496 parameters
        source="meta-llama/Meta-Llama-3-70B",
        params=70_553_706_496,
        active_params=70_553_706_496,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        tied_embeddings=False,
        max_context_tokens=8192,
    ),
    ModelPreset(
        name="qwen2-72b",
        description="Qwen2 72B",
        # huggingface.co/Qwen/Qwen2-72B-Instruct config.json: hidden_size 8192, intermediate_size 29568,
        # num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8, vocab_size 152064,
        # max_position_embeddings 32768 (131,072 with YaRN rope scaling, per the model card), tie_word_embeddings
        # false, biases on q/k/v; the model card says 72.7B parameters
        source="Qwen/Qwen2-72B-Instruct",
        params=72_706_203_648,
        active_params=72_706_203_648,
        layers=80,
        hidden_size=8192,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate_size=29568,
        vocab_size=152064,
        tied_embeddings=False,
        max_context_tokens=32768,
        qkv_bias=True,
    ),
    ModelPreset(
        name="mixtral-8x7b",
        description="Mistral Mixtral 8x7B (sparse mixture of experts, 2 of 8 experts per token)",
        # huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, intermediate_size 14336,
        # num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8, vocab_size 32000,
        # max_position_embeddings 32768, num_local_experts 8, num_experts_per_tok 2, tie_word_embeddings false;
        # 46,702,792,704 parameters in all, 12,879,925,248 active per token (Mistral's announcement: 46.7B / 12.9B)
        source="mistralai/Mixtral-8x7B-v0.1",
        params=46_702_792_704,
        active_params=12_879_925_248,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        tied_embeddings=False,
        max_context_tokens=32768,
        experts=8,
        experts_per_token=2,
    ),
)

GPU_NAMES: Final = frozenset(GPUS)
MODEL_NAMES: Final = frozenset(MODELS)

GPU_BY_NVML_NAME: Final[Mapping[str, GpuPreset]] = MappingProxyType(
    {nvml_name: preset for preset in GPUS.values() for nvml_name in preset.nvml_names}
)


def gpu_for_nvml_name(nvml_name: str) -> GpuPreset | None:
    """The preset for a device as nvmlDeviceGetName() names it (None when slokit has no figures for it)."""
    return GPU_BY_NVML_NAME.get(nvml_name.strip())
