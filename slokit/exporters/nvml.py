"""NVML collection for the GPU sidecar: a poller thread, an XID thread, and a collector that only converts snapshots.

This is the only module that imports `pynvml` (NVIDIA's `nvidia-ml-py` bindings). Everything NVML-specific lives
here: which call answers which metric, how field values and GPM samples are decoded, which errors mean "this GPU
cannot do that" (left out, said once) and which mean "this GPU is gone" (`slokit_gpu_up 0`, re-initialised with
backoff).

Why a background poller, against the Prometheus habit of reading at scrape time: GPM bandwidth needs two samples
taken apart, a wedged driver must never hang a scrape (and through it Prometheus' view of the vLLM pod), and NVML
cost must not grow with the number of scrapers. One thread writes an immutable `Snapshot`; `GpuCollector.collect()`
converts the latest one and never calls NVML. XID events arrive on a blocking wait, so they get their own thread.

Tests drive `GpuPoller.poll_once()` and `GpuPoller.xid_once()` directly with a fake library that raises the real
`pynvml.NVMLError` subclasses; `start()` runs the same steps on threads.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol

import pynvml
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slokit import catalog as presets
from slokit import schema

log = logging.getLogger("slokit.gpu")

UUID: Final = schema.GPU_UUID_LABEL
MIN_INTERVAL: Final = 0.1  # GPM needs at least 100 ms between its two samples
MAX_BACKOFF: Final = 60.0  # longest wait between attempts to re-initialise NVML or re-open a lost GPU
XID_WAIT_MS: Final = 1000  # nvmlEventSetWait_v2 timeout: how quickly the XID thread notices shutdown


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
NVMLError: Final = pynvml.NVMLError

# The GPU (or this build of NVML) cannot answer: leave the metric out for that GPU, say so once, never ask again.
_UNSUPPORTED: Final = frozenset(
    {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
)
# The GPU is gone or NVML's session is broken: the GPU is down until a re-open succeeds.
_DEVICE_GONE: Final = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
    }
)
_SESSION_GONE: Final = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
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


class _DeviceGone(Exception):
    """Raised inside a poll when a call says the GPU (or the whole NVML session) is gone."""

    def __init__(self, op: str, error: BaseException, session: bool) -> None:
        super().__init__(f"{op}: {error_name(error)}")
        self.op = op
        self.error = error
        self.session = session


# ==============================================================================================================
# The metric catalogue: one entry per exported family, in exposition order
# ==============================================================================================================
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

# Clock-event reason bits (nvmlClocksEventReason*), as label values.
CLOCK_EVENT_REASONS: Final = MappingProxyType(
    {
        "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
        "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
        "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
        "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
        "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
    }
)


@dataclass(frozen=True)
class FieldDef:
    """One NVML field id read in the batched nvmlDeviceGetFieldValues call, and where its value goes."""

    field_id: int
    metric: str
    labels: tuple[tuple[str, str], ...]
    scale: float  # multiply the raw value by this to get base units


_FIXED_FIELDS: Final[tuple[FieldDef, ...]] = (
    FieldDef(pynvml.NVML_FI_DEV_MEMORY_TEMP, S.GPU_TEMPERATURE, ((S.GPU_SENSOR_LABEL, "memory"),), 1.0),
    FieldDef(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, S.GPU_PCIE_TX, (), 1.0),
    FieldDef(pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, S.GPU_PCIE_RX, (), 1.0),
    FieldDef(pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, S.GPU_ECC_ERRORS, ((S.GPU_ERROR_LABEL, "corrected"),), 1.0),
    FieldDef(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, S.GPU_ECC_ERRORS, ((S.GPU_ERROR_LABEL, "uncorrected"),), 1.0),
    *(
        FieldDef(fid, S.GPU_CLOCK_EVENT_SECONDS, ((S.GPU_REASON_LABEL, reason),), 1e-9)
        for fid, reason in (
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, "sw_power_cap"),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, "sync_boost"),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, "sw_thermal_slowdown"),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, "hw_thermal_slowdown"),
            (pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
        )
    ),
)
_KIB: Final = 1024.0

# GPM metric ids and where they go (values are percent: divided by 100).
_GPM_KEY: Final = "GPM metrics"  # support key of the sampling calls shared by every GPM metric
GPM_METRICS: Final = MappingProxyType(
    {
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: S.GPU_MEMORY_BANDWIDTH_UTILIZATION,
        pynvml.NVML_GPM_METRIC_SM_UTIL: S.GPU_SM_ACTIVE,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: S.GPU_TENSOR_ACTIVE,
    }
)


def field_value(value: Any) -> float:
    """Decode one `c_nvmlFieldValue_t.value` by its `valueType` (the binding leaves this to the caller)."""
    kind = int(value.valueType)
    union = value.value
    decoded: float | int
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        decoded = union.dVal
    elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        decoded = union.uiVal
    elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        decoded = union.ulVal
    elif kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        decoded = union.sllVal
    elif kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        decoded = union.siVal
    elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        decoded = union.usVal
    else:  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG and anything newer
        decoded = union.ullVal
    return float(decoded)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ==============================================================================================================
# Snapshot: what one poll saw (immutable; the collector converts it)
# ==============================================================================================================
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    """One sample: family name, labels in family order (UUID first), value."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """Everything one poll produced. `nvml_ok` False: NVML could not be initialised (no driver, no library)."""

    timestamp: float  # unix time at the end of the poll (0: never polled)
    monotonic: float  # time.monotonic() at the end of the poll
    duration: float
    nvml_ok: bool
    series: tuple[Series, ...]
    up: Mapping[str, bool]  # UUID -> answering
    support: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)  # UUID -> metric -> answered
    identities: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)  # UUID -> (modelName, bus, preset)
    driver_version: str = ""


EMPTY_SNAPSHOT: Final = Snapshot(0.0, 0.0, 0.0, False, (), MappingProxyType({}))


# ==============================================================================================================
# Per-GPU state kept between polls
# ==============================================================================================================
@dataclass
class _Gpu:
    """One GPU: its handle (re-resolved after a loss), static identity, what it supports, GPM samples."""

    uuid: str
    handle: Any = None
    name: str = ""
    pci_bus_id: str = ""
    preset: presets.GpuPreset | None = None
    up: bool = False
    probed: bool = False
    unsupported: set[str] = field(default_factory=set)  # metric names NVML said this GPU cannot answer
    supported: set[str] = field(default_factory=set)
    fields: list[FieldDef] = field(default_factory=list)
    nvlink_links: int = 0
    clock_event_mask: int = 0
    memory_v1: bool = False  # the driver lacks nvmlDeviceGetMemoryInfo_v2
    legacy: set[str] = field(default_factory=set)  # calls answered by their older entry point on this driver
    static: list[Series] = field(default_factory=list)  # probed once: max PCIe, peak bandwidth
    gpm_samples: list[Any] = field(default_factory=list)  # [previous, spare] while GPM works
    gpm_last: float = 0.0
    next_attempt: float = 0.0
    backoff: float = 0.0


class GpuPoller:
    """Owns the NVML session: initialises it once, polls the chosen GPUs, re-opens lost ones with backoff.

    `uuids` (or the first non-empty `uuids_file`) restricts polling to those GPUs; otherwise every GPU NVML sees
    is polled. `monotonic` and `wall` are injectable so tests can move time without sleeping.
    """

    def __init__(
        self,
        library: NvmlLibrary | None = None,
        *,
        interval: float = 1.0,
        uuids: Sequence[str] = (),
        uuids_file: Path | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval < MIN_INTERVAL:
            raise ValueError(f"interval must be at least {MIN_INTERVAL}s (GPM needs 100 ms between samples)")
        self._lib: NvmlLibrary = library if library is not None else real_library()
        self.interval = interval
        self._wanted: tuple[str, ...] = tuple(u.strip() for u in uuids if u.strip())
        self._uuids_file = uuids_file
        self._uuids_file_mtime: float | None = None
        self._monotonic = monotonic
        self._wall = wall
        self._gpus: dict[str, _Gpu] = {}
        self._initialised = False
        self._driver = ""
        self._init_next = 0.0
        self._init_backoff = 0.0
        self._init_error_logged: set[str] = set()
        self._said: set[tuple[str, str]] = set()  # (uuid, metric) already logged as unsupported
        self._snapshot: Snapshot = EMPTY_SNAPSHOT
        # Shared with the XID thread and the collector.
        self._lock = threading.Lock()  # guards the counters below
        self._errors: dict[tuple[str, str], int] = {}
        self._xid: dict[tuple[str, int], int] = {}
        self._last_xid: dict[str, int] = {}
        self._session = 0  # bumped at every (re-)initialisation; the XID thread re-registers when it changes
        self._session_lock = threading.Lock()  # held by the XID wait and by NVML (re)initialisation
        self._xid_pause = threading.Event()
        self._event_set: Any = None
        self._event_session = -1
        self._event_uuids: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started_at = monotonic()

    # -- public ---------------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The latest completed poll (a reference swap: never blocks on NVML)."""
        return self._snapshot

    def counters(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, int], int], dict[str, int]]:
        """Copies of the NVML error counts, the XID counts and the last XID per GPU."""
        with self._lock:
            return dict(self._errors), dict(self._xid), dict(self._last_xid)

    def healthy(self, max_age: float | None = None) -> bool:
        """Whether the poll loop is alive: a poll finished within `max_age` seconds (default 3 intervals, >= 10 s).

        A poll that reports "no driver" is healthy; a poll stuck inside a wedged driver call is not, which is what
        a liveness probe should restart.
        """
        limit = max_age if max_age is not None else max(3 * self.interval, 10.0)
        return self.age() <= limit

    def age(self) -> float:
        """Seconds since the last poll finished (since construction or start if none has)."""
        snap = self._snapshot
        reference = snap.monotonic if snap.timestamp else self._started_at
        return max(0.0, self._monotonic() - reference)

    def start(self) -> None:
        """Run `poll_once` every interval and `xid_once` in a loop, each on its own daemon thread."""
        self._started_at = self._monotonic()
        self._stop.clear()
        poll = threading.Thread(target=self._poll_loop, name="slokit-gpu-poll", daemon=True)
        xid = threading.Thread(target=self._xid_loop, name="slokit-gpu-xid", daemon=True)
        self._threads = [poll, xid]
        poll.start()
        xid.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads (the XID wait returns within a second), free NVML resources and shut NVML down."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        with self._session_lock:
            self._free_event_set()
            self._close_session()

    # -- the poll -------------------------------------------------------------------------------------------
    def poll_once(self) -> Snapshot:
        """Poll every chosen GPU once and publish the result as the new snapshot."""
        started = self._monotonic()
        if not self._initialised and started >= self._init_next:
            self._try_init(started)
        series: list[Series] = []
        if self._initialised:
            self._refresh_wanted()
            self._discover(started)
            for gpu in list(self._gpus.values()):
                if not self._initialised:  # a GPU's answer broke the session: the rest wait for re-init
                    break
                series.extend(self._poll_gpu(gpu, started))
        ended = self._monotonic()
        snap = Snapshot(
            timestamp=self._wall(),
            monotonic=ended,
            duration=max(0.0, ended - started),
            nvml_ok=self._initialised,
            series=tuple(series),
            up=MappingProxyType({uuid: gpu.up for uuid, gpu in self._gpus.items()}),
            support=MappingProxyType(self._support()),
            identities=MappingProxyType(
                {
                    uuid: (gpu.name, gpu.pci_bus_id, gpu.preset.name if gpu.preset else "")
                    for uuid, gpu in self._gpus.items()
                    if gpu.name
                }
            ),
            driver_version=self._driver,
        )
        self._snapshot = snap
        return snap

    def _poll_loop(self) -> None:
        next_at = self._monotonic()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a bug must not silence the sidecar: log it and keep polling
                log.exception("GPU poll failed")
                self._count_error("poll", "exception")
            next_at += self.interval
            now = self._monotonic()
            if next_at < now:  # fell behind (slow driver): start a fresh schedule instead of bursting
                next_at = now + self.interval
            self._stop.wait(max(0.0, next_at - now))

    # -- NVML session -----------------------------------------------------------------------------------------
    def _try_init(self, now: float) -> None:
        self._xid_pause.set()
        try:
            with self._session_lock:
                try:
                    self._lib.nvmlInit()
                except NVMLError as error:
                    self._count_error("nvmlInit", error_name(error))
                    self._init_backoff = min(MAX_BACKOFF, max(self.interval, self._init_backoff * 2 or 1.0))
                    self._init_next = now + self._init_backoff
                    name = error_name(error)
                    if name not in self._init_error_logged:
                        self._init_error_logged.add(name)
                        log.warning(
                            "NVML unavailable (%s): serving slokit_gpu_up 0 and retrying with backoff up to %.0fs",
                            name,
                            MAX_BACKOFF,
                        )
                    return
                self._initialised = True
                self._init_backoff = 0.0
                self._session += 1
                try:
                    self._driver = _text(self._lib.nvmlSystemGetDriverVersion())
                except NVMLError as error:
                    self._count_error("nvmlSystemGetDriverVersion", error_name(error))
                    self._driver = ""
                for gpu in self._gpus.values():  # handles from the old session are void
                    self._mark_down(gpu, now, reset_backoff=True)
                    gpu.next_attempt = now
                log.info("NVML initialised, driver %s", self._driver or "unknown")
        finally:
            self._xid_pause.clear()

    def _close_session(self) -> None:
        for gpu in self._gpus.values():
            self._free_gpm(gpu)
        if self._initialised:
            self._initialised = False
            try:
                self._lib.nvmlShutdown()
            except NVMLError as error:
                self._count_error("nvmlShutdown", error_name(error))

    def _session_lost(self, now: float, op: str, error: BaseException) -> None:
        log.warning("NVML session broken (%s in %s): re-initialising with backoff", error_name(error), op)
        self._xid_pause.set()
        try:
            with self._session_lock:
                self._free_event_set()
                self._close_session()
        finally:
            self._xid_pause.clear()
        for gpu in self._gpus.values():
            self._mark_down(gpu, now)
        self._init_backoff = min(MAX_BACKOFF, max(self.interval, self._init_backoff * 2 or 1.0))
        self._init_next = now + self._init_backoff

    # -- which GPUs -----------------------------------------------------------------------------------------
    def _refresh_wanted(self) -> None:
        if self._uuids_file is None:
            return
        try:
            mtime = self._uuids_file.stat().st_mtime
        except OSError:
            return  # not written yet: poll nothing until the vLLM container writes it
        if mtime == self._uuids_file_mtime:
            return
        self._uuids_file_mtime = mtime
        try:
            text = self._uuids_file.read_text(encoding="utf-8")
        except OSError:
            return
        wanted = parse_uuid_list(text)
        if wanted != self._wanted:
            log.info("GPUs from %s: %s", self._uuids_file, ", ".join(wanted) or "none")
            self._wanted = wanted
            for uuid in [u for u in self._gpus if u not in wanted]:
                self._free_gpm(self._gpus.pop(uuid))

    def _discover(self, now: float) -> None:
        if self._wanted:
            for uuid in self._wanted:
                self._gpus.setdefault(uuid, _Gpu(uuid=uuid, next_attempt=now))
            return
        if self._uuids_file is not None:
            return  # waiting for the file
        if self._gpus:
            return  # found once; lost ones are re-opened by UUID
        try:
            count = self._lib.nvmlDeviceGetCount()
        except NVMLError as error:
            self._count_error("nvmlDeviceGetCount", error_name(error))
            return
        for index in range(count):
            try:
                handle = self._lib.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(self._lib.nvmlDeviceGetUUID(handle))
            except NVMLError as error:
                self._count_error("nvmlDeviceGetHandleByIndex", error_name(error))
                continue
            self._gpus[uuid] = _Gpu(uuid=uuid, handle=handle, next_attempt=now)

    def _open(self, gpu: _Gpu, now: float) -> bool:
        """Resolve the handle by UUID and read the static identity; False (and backoff) if the GPU is not there."""
        try:
            gpu.handle = self._lib.nvmlDeviceGetHandleByUUID(gpu.uuid)
            gpu.name = _text(self._lib.nvmlDeviceGetName(gpu.handle))
            try:
                gpu.pci_bus_id = _text(self._lib.nvmlDeviceGetPciInfo_v3(gpu.handle).busId)
            except NVMLError as error:
                if error_code(error) not in _UNSUPPORTED:
                    raise
                gpu.pci_bus_id = ""
        except NVMLError as error:
            self._count_error("nvmlDeviceGetHandleByUUID", error_name(error))
            if error_code(error) in _SESSION_GONE:
                self._session_lost(now, "nvmlDeviceGetHandleByUUID", error)
                return False
            self._mark_down(gpu, now)
            return False
        gpu.preset = presets.gpu_for_nvml_name(gpu.name)
        if not gpu.probed:
            log.info("GPU %s: %s at %s", gpu.uuid, gpu.name, gpu.pci_bus_id or "unknown bus")
        return True

    def _mark_down(self, gpu: _Gpu, now: float, *, reset_backoff: bool = False) -> None:
        if gpu.up:
            log.warning("GPU %s stopped answering; retrying with backoff up to %.0fs", gpu.uuid, MAX_BACKOFF)
        gpu.up = False
        self._free_gpm(gpu)
        gpu.backoff = 0.0 if reset_backoff else min(MAX_BACKOFF, max(self.interval, gpu.backoff * 2 or 1.0))
        gpu.next_attempt = now + gpu.backoff

    # -- one GPU --------------------------------------------------------------------------------------------
    def _poll_gpu(self, gpu: _Gpu, now: float) -> list[Series]:
        if not gpu.up:
            if now < gpu.next_attempt or not self._open(gpu, now):
                return []
            gpu.up = True
            gpu.backoff = 0.0
            if gpu.probed:
                log.info("GPU %s answers again", gpu.uuid)
        out: list[Series] = []
        try:
            if not gpu.probed:
                self._probe(gpu)
            out.extend(gpu.static)
            out.extend(self._read(gpu, now))
        except _DeviceGone as gone:
            self._count_error(gone.op, error_name(gone.error))
            if gone.session:
                self._session_lost(now, gone.op, gone.error)
            else:
                self._mark_down(gpu, now)
            return []
        return out

    def _call(self, gpu: _Gpu, metric: str, op: str, fn: Callable[[], Any]) -> Any:
        """Run one NVML call for `metric`; None if unsupported (remembered) or transiently failing."""
        if metric in gpu.unsupported:
            return None
        try:
            value = fn()
        except NVMLError as error:
            code = error_code(error)
            if code in _UNSUPPORTED:
                self._unsupported(gpu, metric, op, error)
                return None
            if code in _DEVICE_GONE or code in _SESSION_GONE:
                raise _DeviceGone(op, error, session=code in _SESSION_GONE) from None
            self._count_error(op, error_name(error))  # timeout, no data, ...: try again next poll
            return None
        gpu.supported.add(metric)
        return value

    @staticmethod
    def _versioned(gpu: _Gpu, key: str, new: Callable[[], Any], old: Callable[[], Any]) -> Callable[[], Any]:
        """`new`, or for good `old` once the driver says it lacks `new` (FunctionNotFound on R525/R535 drivers)."""

        def call() -> Any:
            if key not in gpu.legacy:
                try:
                    return new()
                except NVMLError as error:
                    if error_code(error) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                        raise
                    gpu.legacy.add(key)
            return old()

        return call

    def _unsupported(self, gpu: _Gpu, metric: str, op: str, error: BaseException) -> None:
        gpu.unsupported.add(metric)
        gpu.supported.discard(metric)
        if (gpu.uuid, metric) not in self._said:
            self._said.add((gpu.uuid, metric))
            log.warning("GPU %s: %s left out (%s answered %s)", gpu.uuid, metric, op, error_name(error))

    def _probe(self, gpu: _Gpu) -> None:
        """Once per GPU: static values, supported masks, which fields and links exist, GPM support."""
        lib, h = self._lib, gpu.handle
        gpu.static = []
        labels: Labels = ((UUID, gpu.uuid),)
        for metric, op, fn in (
            (S.GPU_PCIE_LINK_MAX_GENERATION, "nvmlDeviceGetMaxPcieLinkGeneration",
             lib.nvmlDeviceGetMaxPcieLinkGeneration),
            (S.GPU_PCIE_LINK_MAX_WIDTH, "nvmlDeviceGetMaxPcieLinkWidth", lib.nvmlDeviceGetMaxPcieLinkWidth),
        ):  # fmt: skip
            value = self._call(gpu, metric, op, functools.partial(fn, h))
            if value is not None:
                gpu.static.append(Series(metric, labels, float(value)))
        if gpu.preset is not None:
            gpu.supported.add(S.GPU_PEAK_MEMORY_BANDWIDTH)
            gpu.static.append(Series(S.GPU_PEAK_MEMORY_BANDWIDTH, labels, gpu.preset.hbm_bandwidth_bytes_per_second))
        else:
            gpu.unsupported.add(S.GPU_PEAK_MEMORY_BANDWIDTH)
            if (gpu.uuid, S.GPU_PEAK_MEMORY_BANDWIDTH) not in self._said:
                self._said.add((gpu.uuid, S.GPU_PEAK_MEMORY_BANDWIDTH))
                log.warning("GPU %s: no peak-bandwidth figure for %r in slokit's GPU presets", gpu.uuid, gpu.name)
        mask = self._call(
            gpu,
            S.GPU_CLOCK_EVENT_REASONS,
            "nvmlDeviceGetSupportedClocksEventReasons",
            self._versioned(
                gpu,
                "clock_event_reasons_supported",
                lambda: lib.nvmlDeviceGetSupportedClocksEventReasons(h),
                lambda: lib.nvmlDeviceGetSupportedClocksThrottleReasons(h),
            ),
        )
        if mask is not None:
            gpu.clock_event_mask = int(mask)
        elif S.GPU_CLOCK_EVENT_REASONS in gpu.unsupported:
            gpu.clock_event_mask = 0
        # NVLink: how many links (field 91); a GPU without NVLink answers NotSupported.
        gpu.fields = list(_FIXED_FIELDS)
        gpu.nvlink_links = 0
        count = self._fields(gpu, [(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)], probe=True)
        links = count.get((pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0))
        if links is None:
            for metric in (S.GPU_NVLINK_TX, S.GPU_NVLINK_RX):
                self._unsupported(
                    gpu, metric, "NVML_FI_DEV_NVLINK_LINK_COUNT", NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
                )
        else:
            gpu.nvlink_links = min(int(links), pynvml.NVML_NVLINK_MAX_LINKS)
            for link in range(gpu.nvlink_links):
                for fid, metric in (
                    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, S.GPU_NVLINK_TX),
                    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, S.GPU_NVLINK_RX),
                ):
                    gpu.fields.append(FieldDef(fid, metric, ((S.GPU_LINK_LABEL, str(link)),), _KIB))
        self._probe_gpm(gpu)
        gpu.probed = True

    def _probe_gpm(self, gpu: _Gpu) -> None:
        support = self._call(
            gpu, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, "nvmlGpmQueryDeviceSupport",
            lambda: self._lib.nvmlGpmQueryDeviceSupport(gpu.handle),
        )  # fmt: skip
        if support is None:
            if S.GPU_MEMORY_BANDWIDTH_UTILIZATION in gpu.unsupported:
                for metric in GPM_METRICS.values():
                    gpu.unsupported.add(metric)
                    gpu.supported.discard(metric)
            return
        if not int(support.isSupportedDevice):
            error = NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            for metric in GPM_METRICS.values():
                self._unsupported(gpu, metric, "nvmlGpmQueryDeviceSupport", error)

    def _read(self, gpu: _Gpu, now: float) -> list[Series]:
        lib, h = self._lib, gpu.handle
        labels: Labels = ((UUID, gpu.uuid),)
        out: list[Series] = []
        out.append(Series(S.GPU_UP, labels, 1.0))
        out.extend(self._read_memory(gpu, labels))
        util = self._call(gpu, S.GPU_UTILIZATION, "nvmlDeviceGetUtilizationRates",
                          lambda: lib.nvmlDeviceGetUtilizationRates(h))  # fmt: skip
        if util is not None:
            out.append(Series(S.GPU_UTILIZATION, labels, util.gpu / 100.0))
            out.append(Series(S.GPU_MEMORY_BUSY, labels, util.memory / 100.0))
            gpu.supported.add(S.GPU_MEMORY_BUSY)
        elif S.GPU_UTILIZATION in gpu.unsupported:
            gpu.unsupported.add(S.GPU_MEMORY_BUSY)
        simple: tuple[tuple[str, str, Callable[[], Any], float, Labels], ...] = (
            (S.GPU_SM_CLOCK, "nvmlDeviceGetClockInfo", lambda: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
             1e6, ()),
            (S.GPU_MEMORY_CLOCK, "nvmlDeviceGetClockInfo",
             lambda: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM), 1e6, ()),
            (S.GPU_POWER, "nvmlDeviceGetPowerUsage", lambda: lib.nvmlDeviceGetPowerUsage(h), 1e-3, ()),
            (S.GPU_POWER_LIMIT, "nvmlDeviceGetEnforcedPowerLimit", lambda: lib.nvmlDeviceGetEnforcedPowerLimit(h),
             1e-3, ()),
            (S.GPU_ENERGY, "nvmlDeviceGetTotalEnergyConsumption",
             lambda: lib.nvmlDeviceGetTotalEnergyConsumption(h), 1e-3, ()),
            (S.GPU_PCIE_LINK_GENERATION, "nvmlDeviceGetCurrPcieLinkGeneration",
             lambda: lib.nvmlDeviceGetCurrPcieLinkGeneration(h), 1.0, ()),
            (S.GPU_PCIE_LINK_WIDTH, "nvmlDeviceGetCurrPcieLinkWidth", lambda: lib.nvmlDeviceGetCurrPcieLinkWidth(h),
             1.0, ()),
        )  # fmt: skip
        for metric, op, fn, scale, extra in simple:
            value = self._call(gpu, metric, op, fn)
            if value is not None:
                out.append(Series(metric, labels + extra, float(value) * scale))
        temp_key = f"{S.GPU_TEMPERATURE}{{sensor=gpu}}"
        temp = self._call(
            gpu,
            temp_key,
            "nvmlDeviceGetTemperatureV",
            self._versioned(
                gpu,
                "temperature",
                lambda: lib.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
                lambda: lib.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            ),
        )
        if temp is not None:
            out.append(Series(S.GPU_TEMPERATURE, (*labels, (S.GPU_SENSOR_LABEL, "gpu")), float(temp)))
        if gpu.clock_event_mask:
            reasons = self._call(
                gpu,
                S.GPU_CLOCK_EVENT_REASONS,
                "nvmlDeviceGetCurrentClocksEventReasons",
                self._versioned(
                    gpu,
                    "clock_event_reasons",
                    lambda: lib.nvmlDeviceGetCurrentClocksEventReasons(h),
                    lambda: lib.nvmlDeviceGetCurrentClocksThrottleReasons(h),
                ),
            )
            if reasons is not None:
                for reason, bit in CLOCK_EVENT_REASONS.items():
                    if gpu.clock_event_mask & bit:
                        out.append(
                            Series(
                                S.GPU_CLOCK_EVENT_REASONS,
                                (*labels, (S.GPU_REASON_LABEL, reason)),
                                1.0 if int(reasons) & bit else 0.0,
                            )
                        )
        rows = self._call(gpu, S.GPU_REMAPPED_ROWS, "nvmlDeviceGetRemappedRows",
                          lambda: lib.nvmlDeviceGetRemappedRows(h))  # fmt: skip
        if rows is not None:
            corrected, uncorrected, pending, failure = rows
            out.append(Series(S.GPU_REMAPPED_ROWS, (*labels, (S.GPU_ERROR_LABEL, "corrected")), float(corrected)))
            out.append(Series(S.GPU_REMAPPED_ROWS, (*labels, (S.GPU_ERROR_LABEL, "uncorrected")), float(uncorrected)))
            out.append(Series(S.GPU_ROW_REMAP_PENDING, labels, 1.0 if pending else 0.0))
            out.append(Series(S.GPU_ROW_REMAP_FAILURE, labels, 1.0 if failure else 0.0))
            gpu.supported.update((S.GPU_ROW_REMAP_PENDING, S.GPU_ROW_REMAP_FAILURE))
        out.extend(self._read_fields(gpu, labels))
        out.extend(self._read_gpm(gpu, labels, now))
        return out

    def _read_memory(self, gpu: _Gpu, labels: Labels) -> list[Series]:
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
        info = None
        if not gpu.memory_v1:
            try:
                info = lib.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            except NVMLError as error:
                if error_code(error) in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                         pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):  # fmt: skip
                    gpu.memory_v1 = True  # older driver: v1 has no reserved and counts it as used
                    self._unsupported(gpu, S.GPU_MEMORY_RESERVED, "nvmlDeviceGetMemoryInfo_v2", error)
                else:  # classified like any other call: unsupported, gone, or transient
                    info = self._call(gpu, S.GPU_MEMORY_TOTAL, "nvmlDeviceGetMemoryInfo_v2", _raiser(error))
        if gpu.memory_v1:
            info = self._call(
                gpu, S.GPU_MEMORY_TOTAL, "nvmlDeviceGetMemoryInfo", lambda: lib.nvmlDeviceGetMemoryInfo(h)
            )
        if info is None:
            if S.GPU_MEMORY_TOTAL in gpu.unsupported:
                gpu.unsupported.update((S.GPU_MEMORY_USED, S.GPU_MEMORY_RESERVED))
            return out
        gpu.supported.update((S.GPU_MEMORY_TOTAL, S.GPU_MEMORY_USED))
        out.append(Series(S.GPU_MEMORY_TOTAL, labels, float(info.total)))
        out.append(Series(S.GPU_MEMORY_USED, labels, float(info.used)))
        if not gpu.memory_v1:
            gpu.supported.add(S.GPU_MEMORY_RESERVED)
            out.append(Series(S.GPU_MEMORY_RESERVED, labels, float(info.reserved)))
        return out

    def _fields(
        self, gpu: _Gpu, ids: Sequence[tuple[int, int]], *, probe: bool = False
    ) -> dict[tuple[int, int], float]:
        """One batched nvmlDeviceGetFieldValues call; per-element errors are checked (the binding does not)."""
        if not ids:
            return {}
        try:
            values = self._lib.nvmlDeviceGetFieldValues(gpu.handle, list(ids))
        except NVMLError as error:
            code = error_code(error)
            if code in _DEVICE_GONE or code in _SESSION_GONE:
                raise _DeviceGone("nvmlDeviceGetFieldValues", error, session=code in _SESSION_GONE) from None
            self._count_error("nvmlDeviceGetFieldValues", error_name(error))
            if code in _UNSUPPORTED and not probe:
                for fdef in gpu.fields:
                    self._unsupported(gpu, fdef.metric, "nvmlDeviceGetFieldValues", error)
                gpu.fields = []
            return {}
        out: dict[tuple[int, int], float] = {}
        for item in values:
            key = (int(item.fieldId), int(item.scopeId))
            ret = int(item.nvmlReturn)
            if ret == pynvml.NVML_SUCCESS:
                out[key] = field_value(item)
            elif ret in _DEVICE_GONE or ret in _SESSION_GONE:
                raise _DeviceGone("nvmlDeviceGetFieldValues", NVMLError(ret), session=ret in _SESSION_GONE)
            elif ret in _UNSUPPORTED:
                self._drop_fields(gpu, {key: ret})
            else:
                self._count_error(f"nvmlDeviceGetFieldValues[{key[0]}]", error_name(NVMLError(ret)))
        return out

    def _drop_fields(self, gpu: _Gpu, failed: Mapping[tuple[int, int], int]) -> None:
        keep: list[FieldDef] = []
        for fdef in gpu.fields:
            key = (fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0")))
            if key in failed:
                metric = fdef.metric if not fdef.labels else f"{fdef.metric}{{{_label_text(fdef.labels)}}}"
                self._unsupported(gpu, metric, f"field {fdef.field_id}", NVMLError(failed[key]))
            else:
                keep.append(fdef)
        gpu.fields = keep
        # A family with no field left is unsupported as a whole.
        remaining = {fdef.metric for fdef in gpu.fields}
        for metric in {fdef.metric for fdef in _FIXED_FIELDS} | {S.GPU_NVLINK_TX, S.GPU_NVLINK_RX}:
            if metric not in remaining and metric != S.GPU_TEMPERATURE:
                gpu.unsupported.add(metric)
                gpu.supported.discard(metric)

    def _read_fields(self, gpu: _Gpu, labels: Labels) -> list[Series]:
        ids = [(fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0"))) for fdef in gpu.fields]
        values = self._fields(gpu, ids)
        out: list[Series] = []
        for fdef in gpu.fields:
            key = (fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0")))
            if key in values:
                out.append(Series(fdef.metric, labels + fdef.labels, values[key] * fdef.scale))
                gpu.supported.add(fdef.metric)
        return out

    def _read_gpm(self, gpu: _Gpu, labels: Labels, now: float) -> list[Series]:
        wanted = [mid for mid, metric in GPM_METRICS.items() if metric not in gpu.unsupported]
        if not wanted:
            return []
        lib = self._lib
        if not gpu.gpm_samples:
            first = self._gpm_call(gpu, "nvmlGpmSampleAlloc", lib.nvmlGpmSampleAlloc)
            if first is None:
                return []
            second = self._gpm_call(gpu, "nvmlGpmSampleAlloc", lib.nvmlGpmSampleAlloc)
            if second is None:
                self._free_samples([first])
                return []
            gpu.gpm_samples = [first, second]
            if self._gpm_call(gpu, "nvmlGpmSampleGet", lambda: lib.nvmlGpmSampleGet(gpu.handle, first)) is None:
                self._free_gpm(gpu)
                return []
            gpu.gpm_last = now
            return []  # the first value needs a second sample, next poll
        if now - gpu.gpm_last < MIN_INTERVAL:
            return []
        previous, current = gpu.gpm_samples
        if self._gpm_call(gpu, "nvmlGpmSampleGet", lambda: lib.nvmlGpmSampleGet(gpu.handle, current)) is None:
            if _GPM_KEY in gpu.unsupported:
                self._free_gpm(gpu)
            return []
        gpu.gpm_samples = [current, previous]
        gpu.gpm_last = now
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = previous
        request.sample2 = current
        for index, metric_id in enumerate(wanted):
            request.metrics[index].metricId = metric_id
        result = self._gpm_call(gpu, "nvmlGpmMetricsGet", lambda: lib.nvmlGpmMetricsGet(request))
        if result is None:
            return []
        out: list[Series] = []
        for index, metric_id in enumerate(wanted):
            item = result.metrics[index]
            metric = GPM_METRICS[metric_id]
            ret = int(item.nvmlReturn)
            if ret == pynvml.NVML_SUCCESS:
                gpu.supported.add(metric)
                out.append(Series(metric, labels, max(0.0, float(item.value)) / 100.0))
            elif ret in _UNSUPPORTED:
                self._unsupported(gpu, metric, f"nvmlGpmMetricsGet[{metric_id}]", NVMLError(ret))
            elif ret in _DEVICE_GONE or ret in _SESSION_GONE:
                raise _DeviceGone("nvmlGpmMetricsGet", NVMLError(ret), session=ret in _SESSION_GONE)
            else:
                self._count_error(f"nvmlGpmMetricsGet[{metric_id}]", error_name(NVMLError(ret)))
        return out

    def _gpm_call(self, gpu: _Gpu, op: str, fn: Callable[[], Any]) -> Any:
        """A GPM call whose "cannot" (MIG without a GPU instance, vGPU, fractional shapes) covers all GPM metrics."""
        value = self._call(gpu, _GPM_KEY, op, fn)
        if value is None and _GPM_KEY in gpu.unsupported:
            for metric in GPM_METRICS.values():
                gpu.unsupported.add(metric)
                gpu.supported.discard(metric)
        return value

    def _free_gpm(self, gpu: _Gpu) -> None:
        samples, gpu.gpm_samples = gpu.gpm_samples, []
        self._free_samples(samples)

    def _free_samples(self, samples: Iterable[Any]) -> None:
        for sample in samples:
            try:
                self._lib.nvmlGpmSampleFree(sample)
            except NVMLError as error:
                self._count_error("nvmlGpmSampleFree", error_name(error))

    # -- XID events -----------------------------------------------------------------------------------------
    def xid_once(self, timeout_ms: int = XID_WAIT_MS) -> bool:
        """Wait up to `timeout_ms` for one XID event and count it; False when there is nothing to wait on."""
        if self._xid_pause.is_set():
            return False
        with self._session_lock:
            if not self._initialised:
                self._free_event_set()
                return False
            if self._event_session != self._session or self._event_uuids != self._up_uuids():
                self._register_events()
            if self._event_set is None:
                return False
            try:
                data = self._lib.nvmlEventSetWait_v2(self._event_set, timeout_ms)
            except NVMLError as error:
                if error_code(error) == pynvml.NVML_ERROR_TIMEOUT:
                    return True
                self._count_error("nvmlEventSetWait_v2", error_name(error))
                self._free_event_set()  # re-registered on the next call
                return False
            if not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                return True
            xid = int(data.eventData)
            uuid = self._uuid_of(data.device)
        log.warning("GPU %s: XID %d", uuid or "unknown", xid)
        with self._lock:
            self._xid[(uuid, xid)] = self._xid.get((uuid, xid), 0) + 1
            self._last_xid[uuid] = xid
        return True

    def _up_uuids(self) -> list[str]:
        return sorted(uuid for uuid, gpu in list(self._gpus.items()) if gpu.up)

    def _uuid_of(self, device: Any) -> str:
        try:
            return _text(self._lib.nvmlDeviceGetUUID(device))
        except NVMLError as error:
            self._count_error("nvmlDeviceGetUUID", error_name(error))
        address = _address(device)
        for uuid, gpu in list(self._gpus.items()):
            if address is not None and _address(gpu.handle) == address:
                return uuid
        return ""

    def _register_events(self) -> None:
        self._free_event_set()
        self._event_session = self._session
        self._event_uuids = self._up_uuids()
        registered = 0
        try:
            event_set = self._lib.nvmlEventSetCreate()
        except NVMLError as error:
            self._count_error("nvmlEventSetCreate", error_name(error))
            return
        gpus = dict(self._gpus)
        for uuid in self._event_uuids:
            gpu = gpus[uuid]
            if S.GPU_XID_ERRORS in gpu.unsupported:
                continue
            try:
                supported = int(self._lib.nvmlDeviceGetSupportedEventTypes(gpu.handle))
                if not supported & pynvml.nvmlEventTypeXidCriticalError:
                    raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
                self._lib.nvmlDeviceRegisterEvents(gpu.handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except NVMLError as error:
                if error_code(error) in _UNSUPPORTED:
                    self._unsupported(gpu, S.GPU_XID_ERRORS, "nvmlDeviceRegisterEvents", error)
                else:
                    self._count_error("nvmlDeviceRegisterEvents", error_name(error))
                continue
            gpu.supported.add(S.GPU_XID_ERRORS)
            registered += 1
        if registered:
            self._event_set = event_set
        else:
            self._event_set = None
            try:
                self._lib.nvmlEventSetFree(event_set)
            except NVMLError as error:
                self._count_error("nvmlEventSetFree", error_name(error))

    def _free_event_set(self) -> None:
        event_set, self._event_set = self._event_set, None
        self._event_session = -1
        if event_set is not None and self._initialised:
            try:
                self._lib.nvmlEventSetFree(event_set)
            except NVMLError as error:
                self._count_error("nvmlEventSetFree", error_name(error))

    def _xid_loop(self) -> None:
        while not self._stop.is_set():
            try:
                waited = self.xid_once()
            except Exception:
                log.exception("XID wait failed")
                self._count_error("xid", "exception")
                waited = False
            if not waited:
                self._stop.wait(1.0)

    # -- bookkeeping ----------------------------------------------------------------------------------------
    def _count_error(self, op: str, error: str) -> None:
        with self._lock:
            self._errors[(op, error)] = self._errors.get((op, error), 0) + 1

    def _support(self) -> dict[str, Mapping[str, bool]]:
        """Per GPU, every metric probed: True if answered, False if NVML said it cannot."""
        out: dict[str, Mapping[str, bool]] = {}
        for uuid, gpu in list(self._gpus.items()):
            table = dict.fromkeys(set(gpu.supported), True)
            table.update(dict.fromkeys(set(gpu.unsupported), False))
            table.pop(_GPM_KEY, None)
            out[uuid] = MappingProxyType(dict(sorted(table.items())))
        return out


def _raiser(error: BaseException) -> Callable[[], Any]:
    def fn() -> Any:
        raise error

    return fn


def _address(handle: Any) -> int | None:
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None
    return int(value) if value is not None else None


def _label_text(labels: Labels) -> str:
    return ",".join(f"{k}={v}" for k, v in labels)


def parse_uuid_list(text: str) -> tuple[str, ...]:
    """UUIDs from `--gpus` or the GPU file: separated by commas, spaces or new lines; `all`/`none`/`void` skipped.

    The file is what `nvidia-smi --query-gpu=uuid --format=csv,noheader` prints (or the value of
    NVIDIA_VISIBLE_DEVICES), so both shapes are accepted.
    """
    out: list[str] = []
    for raw in text.replace(",", " ").split():
        item = raw.strip()
        if not item or item.lower() in {"all", "none", "void"} or item in out:
            continue
        out.append(item)
    return tuple(out)


# ==============================================================================================================
# The collector: snapshot -> metric families (never calls NVML)
# ==============================================================================================================
class GpuCollector(Collector):
    """Converts the poller's latest snapshot into Prometheus families on every scrape.

    A snapshot older than `stale_after` seconds (a wedged poll) is not served as current: every GPU reads
    `slokit_gpu_up 0` until the poller catches up, so dashboards never show frozen values as live.
    """

    def __init__(self, poller: GpuPoller, stale_after: float | None = None) -> None:
        self._poller = poller
        self._stale_after = stale_after if stale_after is not None else max(5 * poller.interval, 15.0)

    def describe(self) -> Iterable[Metric]:
        """Nothing: registration must not trigger a collection."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per catalogue entry, built fresh from the latest snapshot."""
        poller = self._poller
        snap = poller.snapshot()
        errors, xids, last_xid = poller.counters()
        stale = snap.timestamp > 0 and poller.age() > self._stale_after
        by_name: dict[str, list[Series]] = {}
        if not stale:
            for series in snap.series:
                by_name.setdefault(series.name, []).append(series)
        uuids = sorted(snap.up)
        up_any = [(uuid, snap.up[uuid] and not stale) for uuid in uuids]
        identities = snap.identities
        support = snap.support
        for mdef in METRICS:
            family = _family(mdef)
            name = mdef.name
            if name == S.GPU_UP:
                if not up_any:
                    family.add_sample(name, {}, 0.0)  # no driver, no GPU: one unlabelled 0
                for uuid, up in up_any:
                    family.add_sample(name, {UUID: uuid}, 1.0 if up else 0.0)
            elif name == S.GPU_INFO:
                for uuid in uuids:
                    if uuid in identities:
                        model, bus, preset = identities[uuid]
                        family.add_metric([uuid, model, bus, snap.driver_version, preset], 1.0)
            elif name == S.GPU_XID_ERRORS:
                for (uuid, xid), count in sorted(xids.items()):
                    family.add_metric([uuid, str(xid)], float(count))
            elif name == S.GPU_LAST_XID:
                for uuid in uuids:
                    if S.GPU_XID_ERRORS in support.get(uuid, {}) or uuid in last_xid:
                        family.add_metric([uuid], float(last_xid.get(uuid, 0)))
            elif name == S.GPU_METRIC_SUPPORTED:
                for uuid in uuids:
                    for metric, ok in support.get(uuid, {}).items():
                        family.add_metric([uuid, metric], 1.0 if ok else 0.0)
            elif name == S.GPU_NVML_ERRORS:
                for (op, error), count in sorted(errors.items()):
                    family.add_metric([op, error], float(count))
            elif name == S.GPU_COLLECT_DURATION:
                if snap.timestamp:
                    family.add_metric([], snap.duration)
            elif name == S.GPU_LAST_COLLECT:
                if snap.timestamp:
                    family.add_metric([], snap.timestamp)
            else:
                for series in by_name.get(name, []):
                    family.add_metric([v for _, v in series.labels], series.value)
            if family.samples:
                yield family


def _family(mdef: MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    labels = ([UUID] if mdef.per_gpu else []) + list(mdef.labels)
    if mdef.kind == "counter":
        return CounterMetricFamily(mdef.name, mdef.help, labels=labels)
    return GaugeMetricFamily(mdef.name, mdef.help, labels=labels)
