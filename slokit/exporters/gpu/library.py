"""The NVML library as slokit sees it: the protocol of the calls it makes, and how their errors are classified.

This is the only module that imports `pynvml` (NVIDIA's `nvidia-ml-py` bindings). The rest of `slokit.exporters.gpu`
calls NVML through an `NvmlLibrary` (the real module, or the test fake) and reads NVML's fixed numbers (field ids,
return codes, bit masks, ctypes structures) from `nvml`, the real module, so the fake cannot drift from them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final, Protocol

import pynvml

# NVML's constants and ctypes structures, always from the real module (importing it needs no driver).
nvml: Final[Any] = pynvml


class NvmlLibrary(Protocol):
    """The part of `pynvml`'s module API slokit calls; the real module satisfies it, and so does the test fake.

    Constants (field ids, error codes, bit masks) are always read from the real `pynvml` module: they are fixed
    numbers, and using them from one place keeps the fake honest.
    """

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: Sequence[int | tuple[int, int]]) -> Any: ...
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any) -> None: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any: ...
    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlEventSetFree(self, eventSet: Any) -> None: ...
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any: ...


def real_library() -> NvmlLibrary:
    """The real bindings (importing them needs no driver; `nvmlInit` is what fails without one)."""
    library: NvmlLibrary = pynvml
    return library


# ==============================================================================================================
# How NVML errors are treated
# ==============================================================================================================
NVMLError: Final = nvml.NVMLError

# The GPU (or this build of NVML) cannot answer: leave the metric out for that GPU, say so once, never ask again.
UNSUPPORTED: Final = frozenset(
    {nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_FUNCTION_NOT_FOUND}
)
# The GPU is gone or NVML's session is broken: the GPU is down until a re-open succeeds.
DEVICE_GONE: Final = frozenset(
    {
        nvml.NVML_ERROR_GPU_IS_LOST,
        nvml.NVML_ERROR_UNKNOWN,
        nvml.NVML_ERROR_RESET_REQUIRED,
        nvml.NVML_ERROR_GPU_NOT_FOUND,
    }
)
SESSION_GONE: Final = frozenset(
    {
        nvml.NVML_ERROR_UNINITIALIZED,
        nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        nvml.NVML_ERROR_DRIVER_NOT_LOADED,
        nvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    }
)


def error_name(error: BaseException) -> str:
    """A short, stable label for an NVML error (`NotSupported`, `GpuIsLost`), never calling back into NVML."""
    name = type(error).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    value = getattr(error, "value", None)
    return f"code_{value}" if value is not None else name


def error_code(error: BaseException) -> int | None:
    """The NVML return code of an `NVMLError` (None for anything else)."""
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


class DeviceGone(Exception):
    """Raised inside a poll when a call says the GPU (or the whole NVML session) is gone."""

    def __init__(self, op: str, error: BaseException, session: bool) -> None:
        super().__init__(f"{op}: {error_name(error)}")
        self.op = op
        self.error = error
        self.session = session


def field_value(value: Any) -> float:
    """Decode one `c_nvmlFieldValue_t.value` by its `valueType` (the binding leaves this to the caller)."""
    kind = int(value.valueType)
    union = value.value
    decoded: float | int
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        decoded = union.dVal
    elif kind == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        decoded = union.uiVal
    elif kind == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        decoded = union.ulVal
    elif kind == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        decoded = union.sllVal
    elif kind == nvml.NVML_VALUE_TYPE_SIGNED_INT:
        decoded = union.siVal
    elif kind == nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        decoded = union.usVal
    else:  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG and anything newer
        decoded = union.ullVal
    return float(decoded)


def as_text(value: str | bytes) -> str:
    """A string NVML returned (bytes on older bindings) as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def handle_address(handle: Any) -> int | None:
    """The address behind a device handle, to match an event's device with a GPU when its UUID cannot be read."""
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None
    return int(value) if value is not None else None
