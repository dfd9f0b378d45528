"""Which NVML numbers answer which metric: clock-event reason bits, batched field ids and GPM metric ids."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from slokit import schema as S
from slokit.exporters.gpu.library import nvml

MIN_INTERVAL: Final = 0.1  # GPM needs at least 100 ms between its two samples: the shortest poll interval

# Clock-event reason bits (nvmlClocksEventReason*), as label values.
CLOCK_EVENT_REASONS: Final = MappingProxyType(
    {
        "gpu_idle": nvml.nvmlClocksEventReasonGpuIdle,
        "applications_clocks_setting": nvml.nvmlClocksEventReasonApplicationsClocksSetting,
        "sw_power_cap": nvml.nvmlClocksEventReasonSwPowerCap,
        "hw_slowdown": nvml.nvmlClocksEventReasonHwSlowdown,
        "sync_boost": nvml.nvmlClocksEventReasonSyncBoost,
        "sw_thermal_slowdown": nvml.nvmlClocksEventReasonSwThermalSlowdown,
        "hw_thermal_slowdown": nvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": nvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "display_clock_setting": nvml.nvmlClocksEventReasonDisplayClockSetting,
    }
)


@dataclass(frozen=True)
class FieldDef:
    """One NVML field id read in the batched nvmlDeviceGetFieldValues call, and where its value goes."""

    field_id: int
    metric: str
    labels: tuple[tuple[str, str], ...]
    scale: float  # multiply the raw value by this to get base units


FIXED_FIELDS: Final[tuple[FieldDef, ...]] = (
    FieldDef(nvml.NVML_FI_DEV_MEMORY_TEMP, S.GPU_TEMPERATURE, ((S.GPU_SENSOR_LABEL, "memory"),), 1.0),
    FieldDef(nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, S.GPU_PCIE_TX, (), 1.0),
    FieldDef(nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, S.GPU_PCIE_RX, (), 1.0),
    FieldDef(nvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, S.GPU_ECC_ERRORS, ((S.GPU_ERROR_LABEL, "corrected"),), 1.0),
    FieldDef(nvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, S.GPU_ECC_ERRORS, ((S.GPU_ERROR_LABEL, "uncorrected"),), 1.0),
    *(
        FieldDef(fid, S.GPU_CLOCK_EVENT_SECONDS, ((S.GPU_REASON_LABEL, reason),), 1e-9)
        for fid, reason in (
            (nvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, "sw_power_cap"),
            (nvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, "sync_boost"),
            (nvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, "sw_thermal_slowdown"),
            (nvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, "hw_thermal_slowdown"),
            (nvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
        )
    ),
)
KIB: Final = 1024.0

# GPM metric ids and where they go (values are percent: divided by 100).
GPM_KEY: Final = "GPM metrics"  # support key of the sampling calls shared by every GPM metric
GPM_METRICS: Final = MappingProxyType(
    {
        nvml.NVML_GPM_METRIC_DRAM_BW_UTIL: S.GPU_MEMORY_BANDWIDTH_UTILIZATION,
        nvml.NVML_GPM_METRIC_SM_UTIL: S.GPU_SM_ACTIVE,
        nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: S.GPU_TENSOR_ACTIVE,
    }
)
