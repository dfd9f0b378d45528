"""The metric catalogue of the GPU sidecar: one entry per exported family, in exposition order.

Each HELP text names the NVML call or field that answers it; `collector.py` builds the families from this table
and `docs/gpu-exporter.md` lists the same families.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from slokit import schema

UUID: Final = schema.GPU_UUID_LABEL


@dataclass(frozen=True)
class MetricDef:
    """One exported family: name, type, the extra labels besides UUID, and HELP text naming the NVML source."""

    name: str
    kind: str  # gauge or counter
    help: str
    labels: tuple[str, ...] = ()
    per_gpu: bool = True  # carries the UUID label


def _g(name: str, help: str, *labels: str) -> MetricDef:
    return MetricDef(name, "gauge", help, labels)


def _c(name: str, help: str, *labels: str) -> MetricDef:
    return MetricDef(name, "counter", help, labels)


S = schema
METRICS: Final[tuple[MetricDef, ...]] = (
    _g(S.GPU_UP, "1 if the GPU answered NVML in the last poll, 0 if it is lost or NVML is unavailable (no UUID label "
       "then)."),
    _g(S.GPU_INFO, "GPU identity for joins (`* on(UUID) group_left(modelName)`); from nvmlDeviceGetName, "
       "nvmlDeviceGetPciInfo_v3 and nvmlSystemGetDriverVersion.", S.GPU_MODEL_NAME_LABEL, S.GPU_PCI_BUS_ID_LABEL,
       S.GPU_DRIVER_VERSION_LABEL, S.GPU_PRESET_LABEL),
    _g(S.GPU_MEMORY_TOTAL, "Device memory (HBM) in bytes (nvmlDeviceGetMemoryInfo_v2 total)."),
    _g(S.GPU_MEMORY_USED, "Device memory in use in bytes (nvmlDeviceGetMemoryInfo_v2 used). vLLM pre-allocates its "
       "share, so this stays flat; KV-cache pressure is vLLM's kv_cache_usage."),
    _g(S.GPU_MEMORY_RESERVED, "Device memory reserved by the driver and firmware, in bytes (nvmlDeviceGetMemoryInfo_v2 "
       "reserved)."),
    _g(S.GPU_MEMORY_BANDWIDTH_UTILIZATION, "Share of the GPU's peak DRAM bandwidth used between two polls, 0-1 "
       "(GPM DRAM_BW_UTIL, Hopper and newer). This is bandwidth; compare slokit_gpu_memory_busy_ratio."),
    _g(S.GPU_PEAK_MEMORY_BANDWIDTH, "Datasheet peak device-memory bandwidth of this GPU model in bytes/s (slokit's "
       "GPU presets, matched by nvmlDeviceGetName)."),
    _g(S.GPU_MEMORY_BUSY, "Share of NVML's sample window in which device memory was read or written at all, 0-1 "
       "(nvmlDeviceGetUtilizationRates memory). A duty cycle, NOT bandwidth: a latency-bound kernel can read 1."),
    _g(S.GPU_UTILIZATION, "Share of NVML's sample window in which any kernel ran, 0-1 (nvmlDeviceGetUtilizationRates "
       "gpu). A duty cycle, not SM occupancy."),
    _g(S.GPU_SM_ACTIVE, "Share of SMs busy between two polls, 0-1 (GPM SM_UTIL, Hopper and newer)."),
    _g(S.GPU_TENSOR_ACTIVE, "Share of time the SMs ran any tensor-core instruction between two polls, 0-1 (GPM "
       "ANY_TENSOR_UTIL, Hopper and newer)."),
    _g(S.GPU_SM_CLOCK, "SM clock in hertz (nvmlDeviceGetClockInfo NVML_CLOCK_SM)."),
    _g(S.GPU_MEMORY_CLOCK, "Memory clock in hertz (nvmlDeviceGetClockInfo NVML_CLOCK_MEM)."),
    _g(S.GPU_CLOCK_EVENT_REASONS, "1 while a reason is holding clocks down (nvmlDeviceGetCurrentClocksEventReasons); "
       "one series per reason the GPU supports. gpu_idle is normal.", S.GPU_REASON_LABEL),
    _c(S.GPU_CLOCK_EVENT_SECONDS, "Time clocks were held down per reason, in seconds "
       "(NVML_FI_DEV_CLOCKS_EVENT_REASON_* field values, ns).", S.GPU_REASON_LABEL),
    _g(S.GPU_POWER, "Power draw in watts (nvmlDeviceGetPowerUsage; a 1 s average on Ampere and newer)."),
    _g(S.GPU_POWER_LIMIT, "Enforced power limit in watts (nvmlDeviceGetEnforcedPowerLimit)."),
    _c(S.GPU_ENERGY, "Energy used since the driver loaded, in joules (nvmlDeviceGetTotalEnergyConsumption)."),
    _g(S.GPU_TEMPERATURE, "Temperature in degrees Celsius: sensor=gpu (nvmlDeviceGetTemperatureV), sensor=memory "
       "(NVML_FI_DEV_MEMORY_TEMP).", S.GPU_SENSOR_LABEL),
    _c(S.GPU_NVLINK_TX, "NVLink data bytes transmitted per link (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB x 1024).",
       S.GPU_LINK_LABEL),
    _c(S.GPU_NVLINK_RX, "NVLink data bytes received per link (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, KiB x 1024).",
       S.GPU_LINK_LABEL),
    _c(S.GPU_PCIE_TX, "PCIe bytes transmitted (NVML_FI_DEV_PCIE_COUNT_TX_BYTES)."),
    _c(S.GPU_PCIE_RX, "PCIe bytes received (NVML_FI_DEV_PCIE_COUNT_RX_BYTES)."),
    _g(S.GPU_PCIE_LINK_GENERATION, "Current PCIe link generation (nvmlDeviceGetCurrPcieLinkGeneration); may drop at "
       "idle to save power."),
    _g(S.GPU_PCIE_LINK_MAX_GENERATION, "Highest PCIe generation the GPU and slot support "
       "(nvmlDeviceGetMaxPcieLinkGeneration)."),
    _g(S.GPU_PCIE_LINK_WIDTH, "Current PCIe link width in lanes (nvmlDeviceGetCurrPcieLinkWidth)."),
    _g(S.GPU_PCIE_LINK_MAX_WIDTH, "Widest PCIe link the GPU and slot support (nvmlDeviceGetMaxPcieLinkWidth)."),
    _c(S.GPU_ECC_ERRORS, "ECC errors since the driver loaded: corrected (single-bit) and uncorrected (double-bit) "
       "(NVML_FI_DEV_ECC_SBE_VOL_TOTAL, NVML_FI_DEV_ECC_DBE_VOL_TOTAL).", S.GPU_ERROR_LABEL),
    _g(S.GPU_REMAPPED_ROWS, "HBM rows remapped after corrected or uncorrected errors (nvmlDeviceGetRemappedRows).",
       S.GPU_ERROR_LABEL),
    _g(S.GPU_ROW_REMAP_PENDING, "1 if a row remap waits for a GPU reset (nvmlDeviceGetRemappedRows isPending)."),
    _g(S.GPU_ROW_REMAP_FAILURE, "1 if a row remap failed: the GPU needs service (nvmlDeviceGetRemappedRows "
       "failureOccurred)."),
    _c(S.GPU_XID_ERRORS, "XID critical-error events seen since the sidecar started, by XID (nvmlEventSetWait_v2). "
       "A series appears at its first event: alert on it existing, not only on increase().", S.GPU_XID_LABEL),
    _g(S.GPU_LAST_XID, "The last XID seen since the sidecar started (0: none), as DCGM_FI_DEV_XID_ERRORS."),
    _g(S.GPU_METRIC_SUPPORTED, "1 if this GPU answers the metric, 0 if NVML said it cannot (not supported, no "
       "permission, function missing); probed once per GPU.", S.GPU_METRIC_LABEL),
    MetricDef(S.GPU_NVML_ERRORS, "counter", "NVML calls that failed, by call and error.", (S.GPU_OP_LABEL, "error"),
              per_gpu=False),
    MetricDef(S.GPU_COLLECT_DURATION, "gauge", "Seconds the last NVML poll took, all GPUs together.", per_gpu=False),
    MetricDef(S.GPU_LAST_COLLECT, "gauge", "Unix time of the last completed NVML poll. The sidecar polls in a "
              "background thread and serves the latest snapshot (GPM needs two samples apart; a wedged driver must "
              "not hang scrapes).", per_gpu=False),
)  # fmt: skip
METRIC_BY_NAME: Final = MappingProxyType({m.name: m for m in METRICS})
