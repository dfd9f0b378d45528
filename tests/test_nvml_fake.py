"""A fake NVML library for GPU-less machines, and the tests that keep it faithful to the real bindings.

`FakeNvml` implements the functions of `slokit.exporters.gpu.library.NvmlLibrary` the way `pynvml` does: it raises the
real `pynvml.NVMLError` subclasses (built from the real return codes), returns the real ctypes structures where the
bindings do (`c_nvmlMemory_v2_t`, `c_nvmlFieldValue_t` arrays with a per-element `nvmlReturn`, GPM metric
requests), refuses every call before `nvmlInit` with `Uninitialized`, and counts calls so tests can see what the
poller asked.
"""

from __future__ import annotations

import collections
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from slokit.exporters.gpu.library import NvmlLibrary

H100 = "NVIDIA H100 80GB HBM3"
MIB = 1 << 20


def err(code: int) -> pynvml.NVMLError:
    """The real exception NVML raises for `code` (an `NVMLError_*` subclass)."""
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    """One simulated GPU, H100-like by default. Set `errors[function] = code` to make a call fail."""

    uuid: str
    name: str = H100
    bus_id: str = "00000000:19:00.0"
    memory_total: int = 81559 * MIB
    memory_reserved: int = 500 * MIB
    memory_used: int = 72000 * MIB
    util_gpu: int = 87
    util_memory: int = 64
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    power_mw: int = 512_345
    power_limit_mw: int = 700_000
    energy_mj: int = 9_876_543
    temperature: int = 61
    pcie_gen: int = 5
    pcie_max_gen: int = 5
    pcie_width: int = 16
    pcie_max_width: int = 16
    clock_reasons: int = pynvml.nvmlClocksEventReasonSwPowerCap
    supported_reasons: int = (
        pynvml.nvmlClocksEventReasonGpuIdle
        | pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwSlowdown
        | pynvml.nvmlClocksEventReasonSwThermalSlowdown
        | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    remapped: tuple[int, int, int, int] = (2, 0, 0, 0)
    nvlink_links: int = 2
    fields: dict[tuple[int, int], tuple[int, float]] = field(default_factory=dict)  # (id, scope) -> (type, value)
    field_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # per-element nvmlReturn
    gpm_supported: bool = True
    gpm_values: dict[int, float] = field(
        default_factory=lambda: {
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 71.5,
            pynvml.NVML_GPM_METRIC_SM_UTIL: 55.0,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 40.0,
        }
    )
    gpm_errors: dict[int, int] = field(default_factory=dict)
    event_types: int = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML return code, raised every call
    lost: bool = False  # every device call raises GpuIsLost (XID 79: fallen off the bus)

    def __post_init__(self) -> None:
        ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        defaults: dict[tuple[int, int], tuple[int, float]] = {
            (pynvml.NVML_FI_DEV_MEMORY_TEMP, 0): (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 70),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0): (ull, 123_456_789),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0): (ull, 987_654_321),
            (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0): (ull, 3),
            (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0): (ull, 0),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0): (ull, 2_500_000_000),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0): (ull, 0),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0): (ull, 0),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0): (ull, 1_000_000),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0): (ull, 0),
            (pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0): (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, self.nvlink_links),
        }
        for link in range(self.nvlink_links):
            defaults[(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link)] = (ull, 1000 * (link + 1))
            defaults[(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)] = (ull, 2000 * (link + 1))
        self.fields = {**defaults, **self.fields}


@dataclass(frozen=True)
class FakeHandle:
    """What nvmlDeviceGetHandleBy* returns: opaque to the poller, bound to one UUID and one NVML session."""

    uuid: str
    session: int


class FakeNvml:
    """The NVML library of a machine with `gpus`; `init_error` set: no driver (nvmlInit raises it)."""

    def __init__(self, gpus: list[FakeGpu] | None = None, init_error: int | None = None) -> None:
        self.gpus = {gpu.uuid: gpu for gpu in (gpus or [])}
        self.init_error = init_error
        self.driver = "550.54.15"
        self.initialised = 0  # nvmlInit is reference-counted
        self.session = 0
        self.calls: collections.Counter[str] = collections.Counter()
        self.events: collections.deque[tuple[str, int]] = collections.deque()  # (uuid, xid) waiting to be read
        self.event_sets: dict[int, set[str]] = {}
        self.freed_event_sets = 0
        self.gpm_allocated = 0
        self.gpm_freed = 0
        self._gpm_gpu: str | None = None
        self.missing: set[str] = set()  # functions this "driver" lacks: FunctionNotFound

    # -- plumbing -------------------------------------------------------------------------------------------
    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.missing:
            raise err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if not self.initialised:
            raise err(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any, name: str) -> FakeGpu:
        self._enter(name)
        if not isinstance(handle, FakeHandle):
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.session != self.session:
            raise err(pynvml.NVML_ERROR_UNINITIALIZED)  # a handle from before nvmlShutdown
        gpu = self.gpus.get(handle.uuid)
        if gpu is None or gpu.lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.errors:
            raise err(gpu.errors[name])
        return gpu

    # -- session --------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise err(self.init_error)
        if not self.initialised:
            self.session += 1
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        uuids = list(self.gpus)
        if not 0 <= index < len(uuids):
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(uuids[index], self.session)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        self._enter("nvmlDeviceGetHandleByUUID")
        gpu = self.gpus.get(uuid)
        if gpu is None:
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        if gpu.lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(uuid, self.session)

    # -- identity -------------------------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo_v3")
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        return info

    # -- readings -------------------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        name = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu = self._gpu(handle, name)
        if version:
            v2 = pynvml.c_nvmlMemory_v2_t()
            v2.version = version
            v2.total, v2.reserved, v2.used = gpu.memory_total, gpu.memory_reserved, gpu.memory_used
            v2.free = gpu.memory_total - gpu.memory_reserved - gpu.memory_used
            return v2
        v1 = pynvml.c_nvmlMemory_t()
        v1.total, v1.used = gpu.memory_total, gpu.memory_used + gpu.memory_reserved
        v1.free = gpu.memory_total - v1.used
        return v1

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.util_gpu, gpu.util_memory
        return util

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        return gpu.sm_clock_mhz if type == pynvml.NVML_CLOCK_SM else gpu.mem_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_reasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetSupportedClocksEventReasons").supported_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_reasons

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetSupportedClocksThrottleReasons").supported_reasons

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetTemperatureV").temperature

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration").pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration").pcie_max_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth").pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth").pcie_max_width

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: Any) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for index, item in enumerate(fieldIds):
            fid, scope = item if isinstance(item, tuple) else (item, 0)
            slot = values[index]
            slot.fieldId, slot.scopeId = fid, scope
            key = (fid, scope)
            if key in gpu.field_errors:
                slot.nvmlReturn = gpu.field_errors[key]
            elif key in gpu.fields:
                kind, value = gpu.fields[key]
                slot.nvmlReturn = pynvml.NVML_SUCCESS
                slot.valueType = kind
                if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
                    slot.value.dVal = value
                elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                    slot.value.uiVal = int(value)
                elif kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
                    slot.value.sllVal = int(value)
                else:
                    slot.value.ullVal = int(value)
            else:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    # -- GPM ------------------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu = self._gpu(handle, "nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if gpu.gpm_supported else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        self.gpm_allocated += 1
        return pynvml.c_nvmlGpmSample_t()

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        self.gpm_freed += 1

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        gpu = self._gpu(handle, "nvmlGpmSampleGet")
        if not gpu.gpm_supported:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_gpu = gpu.uuid
        return sample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        assert metricsGet.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        gpu = self.gpus[self._gpm_gpu or ""]
        for index in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[index]
            if metric.metricId in gpu.gpm_errors:
                metric.nvmlReturn = gpu.gpm_errors[metric.metricId]
            elif metric.metricId in gpu.gpm_values:
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = gpu.gpm_values[metric.metricId]
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    # -- events ---------------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        key = len(self.event_sets) + 1
        self.event_sets[key] = set()
        return key

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        self.event_sets.pop(eventSet)
        self.freed_event_sets += 1

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetSupportedEventTypes").event_types

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        self.event_sets[eventSet].add(gpu.uuid)

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        registered = self.event_sets[eventSet]
        for item in list(self.events):
            uuid, xid = item
            if uuid in registered:
                self.events.remove(item)
                return SimpleNamespace(
                    device=FakeHandle(uuid, self.session),
                    eventType=pynvml.nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
        raise err(pynvml.NVML_ERROR_TIMEOUT)  # nothing pending: what a real wait returns after timeoutms


# ==============================================================================================================
# The fake stays faithful to the real bindings
# ==============================================================================================================
PROTOCOL_FUNCTIONS = sorted(
    name for name, _ in inspect.getmembers(NvmlLibrary, inspect.isfunction) if name.startswith("nvml")
)


@pytest.mark.parametrize("name", PROTOCOL_FUNCTIONS)
def test_every_function_the_poller_calls_exists_in_pynvml_and_the_fake(name: str) -> None:
    real = getattr(pynvml, name)
    fake = getattr(FakeNvml, name)
    real_params = [p for p in inspect.signature(real).parameters if p != "version"]
    fake_params = [p for p in inspect.signature(fake).parameters if p not in ("self", "version")]
    assert len(real_params) == len(fake_params), (name, real_params, fake_params)


def test_the_fake_raises_the_real_error_classes() -> None:
    nvml = FakeNvml([FakeGpu("GPU-a", lost=True)])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    handle = FakeHandle("GPU-a", nvml.session)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetName(handle)
    assert isinstance(err(pynvml.NVML_ERROR_NOT_SUPPORTED), pynvml.NVMLError_NotSupported)


def test_without_a_driver_the_real_bindings_raise_what_the_fake_is_told_to() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        assert isinstance(error, pynvml.NVMLError_LibraryNotFound | pynvml.NVMLError_DriverNotLoaded)
    else:  # a machine with a GPU: nothing to compare
        pynvml.nvmlShutdown()
        pytest.skip("NVML is available here")


def test_field_values_are_the_real_ctypes_array_with_per_element_returns() -> None:
    gpu = FakeGpu("GPU-a", field_errors={(pynvml.NVML_FI_DEV_MEMORY_TEMP, 0): pynvml.NVML_ERROR_NO_PERMISSION})
    nvml = FakeNvml([gpu])
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByUUID("GPU-a")
    values = nvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP, (138, 1)])
    assert isinstance(values[0], pynvml.c_nvmlFieldValue_t)
    assert values[0].nvmlReturn == pynvml.NVML_ERROR_NO_PERMISSION
    assert (values[1].fieldId, values[1].scopeId, values[1].value.ullVal) == (138, 1, 2000)
