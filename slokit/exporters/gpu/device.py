"""One GPU's NVML reads: the state kept between polls, the probe at first sight, and every per-poll reading.

`DeviceReader` makes every call for one GPU through `call`, which sorts NVML's answer into "value", "this GPU cannot"
(left out, said once, never asked again), "gone" (`DeviceGone`, for the poller to mark the GPU or the session down)
and "try again next poll" (counted). The poller owns the session and the GPUs; the reader owns what a GPU answers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slokit import catalog as presets
from slokit import schema as S
from slokit.exporters.gpu.catalogue import UUID
from slokit.exporters.gpu.fields import (
    CLOCK_EVENT_REASONS,
    FIXED_FIELDS,
    GPM_KEY,
    GPM_METRICS,
    KIB,
    MIN_INTERVAL,
    FieldDef,
)
from slokit.exporters.gpu.library import (
    DEVICE_GONE,
    SESSION_GONE,
    UNSUPPORTED,
    DeviceGone,
    NVMLError,
    NvmlLibrary,
    error_code,
    error_name,
    field_value,
    nvml,
)
from slokit.exporters.gpu.snapshot import Labels, Series

log = logging.getLogger("slokit.gpu")


@dataclass
class GpuState:
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


class DeviceReader:
    """Reads one GPU at a time through `library`; NVML errors that are not "cannot" or "gone" go to `count_error`."""

    def __init__(self, library: NvmlLibrary, count_error: Callable[[str, str], None]) -> None:
        self._lib = library
        self._count_error = count_error
        self._said: set[tuple[str, str]] = set()  # (uuid, metric) already logged as unsupported

    def _call(self, gpu: GpuState, metric: str, op: str, fn: Callable[[], Any]) -> Any:
        """Run one NVML call for `metric`; None if unsupported (remembered) or transiently failing."""
        if metric in gpu.unsupported:
            return None
        try:
            value = fn()
        except NVMLError as error:
            code = error_code(error)
            if code in UNSUPPORTED:
                self.unsupported(gpu, metric, op, error)
                return None
            if code in DEVICE_GONE or code in SESSION_GONE:
                raise DeviceGone(op, error, session=code in SESSION_GONE) from None
            self._count_error(op, error_name(error))  # timeout, no data, ...: try again next poll
            return None
        gpu.supported.add(metric)
        return value

    @staticmethod
    def _versioned(gpu: GpuState, key: str, new: Callable[[], Any], old: Callable[[], Any]) -> Callable[[], Any]:
        """`new`, or for good `old` once the driver says it lacks `new` (FunctionNotFound on R525/R535 drivers)."""

        def call() -> Any:
            if key not in gpu.legacy:
                try:
                    return new()
                except NVMLError as error:
                    if error_code(error) != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                        raise
                    gpu.legacy.add(key)
            return old()

        return call

    def unsupported(self, gpu: GpuState, metric: str, op: str, error: BaseException) -> None:
        gpu.unsupported.add(metric)
        gpu.supported.discard(metric)
        if (gpu.uuid, metric) not in self._said:
            self._said.add((gpu.uuid, metric))
            log.warning("GPU %s: %s left out (%s answered %s)", gpu.uuid, metric, op, error_name(error))

    def probe(self, gpu: GpuState) -> None:
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
        gpu.fields = list(FIXED_FIELDS)
        gpu.nvlink_links = 0
        count = self._fields(gpu, [(nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)], probe=True)
        links = count.get((nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0))
        if links is None:
            for metric in (S.GPU_NVLINK_TX, S.GPU_NVLINK_RX):
                self.unsupported(gpu, metric, "NVML_FI_DEV_NVLINK_LINK_COUNT", NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED))
        else:
            gpu.nvlink_links = min(int(links), nvml.NVML_NVLINK_MAX_LINKS)
            for link in range(gpu.nvlink_links):
                for fid, metric in (
                    (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, S.GPU_NVLINK_TX),
                    (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, S.GPU_NVLINK_RX),
                ):
                    gpu.fields.append(FieldDef(fid, metric, ((S.GPU_LINK_LABEL, str(link)),), KIB))
        self._probe_gpm(gpu)
        gpu.probed = True

    def _probe_gpm(self, gpu: GpuState) -> None:
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
            error = NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
            for metric in GPM_METRICS.values():
                self.unsupported(gpu, metric, "nvmlGpmQueryDeviceSupport", error)

    def read(self, gpu: GpuState, now: float) -> list[Series]:
        """Every reading of one poll of `gpu`; raises `DeviceGone` when a call says the GPU or session is gone."""
        labels: Labels = ((UUID, gpu.uuid),)
        out: list[Series] = []
        out.append(Series(S.GPU_UP, labels, 1.0))
        out.extend(self._read_memory(gpu, labels))
        out.extend(self._read_utilization(gpu, labels))
        out.extend(self._read_scalars(gpu, labels))
        out.extend(self._read_temperature(gpu, labels))
        out.extend(self._read_clock_events(gpu, labels))
        out.extend(self._read_remapped_rows(gpu, labels))
        out.extend(self._read_fields(gpu, labels))
        out.extend(self._read_gpm(gpu, labels, now))
        return out

    def _read_utilization(self, gpu: GpuState, labels: Labels) -> list[Series]:
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
        util = self._call(gpu, S.GPU_UTILIZATION, "nvmlDeviceGetUtilizationRates",
                          lambda: lib.nvmlDeviceGetUtilizationRates(h))  # fmt: skip
        if util is not None:
            out.append(Series(S.GPU_UTILIZATION, labels, util.gpu / 100.0))
            out.append(Series(S.GPU_MEMORY_BUSY, labels, util.memory / 100.0))
            gpu.supported.add(S.GPU_MEMORY_BUSY)
        elif S.GPU_UTILIZATION in gpu.unsupported:
            gpu.unsupported.add(S.GPU_MEMORY_BUSY)
        return out

    def _read_scalars(self, gpu: GpuState, labels: Labels) -> list[Series]:
        """Clocks, power, energy and the PCIe link: one call, one value, one scale each."""
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
        simple: tuple[tuple[str, str, Callable[[], Any], float, Labels], ...] = (
            (S.GPU_SM_CLOCK, "nvmlDeviceGetClockInfo", lambda: lib.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
             1e6, ()),
            (S.GPU_MEMORY_CLOCK, "nvmlDeviceGetClockInfo",
             lambda: lib.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM), 1e6, ()),
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
        return out

    def _read_temperature(self, gpu: GpuState, labels: Labels) -> list[Series]:
        lib, h = self._lib, gpu.handle
        temp_key = f"{S.GPU_TEMPERATURE}{{sensor=gpu}}"
        temp = self._call(
            gpu,
            temp_key,
            "nvmlDeviceGetTemperatureV",
            self._versioned(
                gpu,
                "temperature",
                lambda: lib.nvmlDeviceGetTemperatureV(h, nvml.NVML_TEMPERATURE_GPU),
                lambda: lib.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
            ),
        )
        if temp is not None:
            return [Series(S.GPU_TEMPERATURE, (*labels, (S.GPU_SENSOR_LABEL, "gpu")), float(temp))]
        return []

    def _read_clock_events(self, gpu: GpuState, labels: Labels) -> list[Series]:
        """One 0/1 series per reason in the GPU's supported mask: 1 while that reason holds clocks down."""
        if not gpu.clock_event_mask:
            return []
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
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
        return out

    def _read_remapped_rows(self, gpu: GpuState, labels: Labels) -> list[Series]:
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
        rows = self._call(gpu, S.GPU_REMAPPED_ROWS, "nvmlDeviceGetRemappedRows",
                          lambda: lib.nvmlDeviceGetRemappedRows(h))  # fmt: skip
        if rows is not None:
            corrected, uncorrected, pending, failure = rows
            out.append(Series(S.GPU_REMAPPED_ROWS, (*labels, (S.GPU_ERROR_LABEL, "corrected")), float(corrected)))
            out.append(Series(S.GPU_REMAPPED_ROWS, (*labels, (S.GPU_ERROR_LABEL, "uncorrected")), float(uncorrected)))
            out.append(Series(S.GPU_ROW_REMAP_PENDING, labels, 1.0 if pending else 0.0))
            out.append(Series(S.GPU_ROW_REMAP_FAILURE, labels, 1.0 if failure else 0.0))
            gpu.supported.update((S.GPU_ROW_REMAP_PENDING, S.GPU_ROW_REMAP_FAILURE))
        return out

    def _read_memory(self, gpu: GpuState, labels: Labels) -> list[Series]:
        lib, h = self._lib, gpu.handle
        out: list[Series] = []
        info = None
        if not gpu.memory_v1:
            try:
                info = lib.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
            except NVMLError as error:
                if error_code(error) in (nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                         nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):  # fmt: skip
                    gpu.memory_v1 = True  # older driver: v1 has no reserved and counts it as used
                    self.unsupported(gpu, S.GPU_MEMORY_RESERVED, "nvmlDeviceGetMemoryInfo_v2", error)
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
        self, gpu: GpuState, ids: Sequence[tuple[int, int]], *, probe: bool = False
    ) -> dict[tuple[int, int], float]:
        """One batched nvmlDeviceGetFieldValues call; per-element errors are checked (the binding does not)."""
        if not ids:
            return {}
        try:
            values = self._lib.nvmlDeviceGetFieldValues(gpu.handle, list(ids))
        except NVMLError as error:
            code = error_code(error)
            if code in DEVICE_GONE or code in SESSION_GONE:
                raise DeviceGone("nvmlDeviceGetFieldValues", error, session=code in SESSION_GONE) from None
            self._count_error("nvmlDeviceGetFieldValues", error_name(error))
            if code in UNSUPPORTED and not probe:
                for fdef in gpu.fields:
                    self.unsupported(gpu, fdef.metric, "nvmlDeviceGetFieldValues", error)
                gpu.fields = []
            return {}
        out: dict[tuple[int, int], float] = {}
        for item in values:
            key = (int(item.fieldId), int(item.scopeId))
            ret = int(item.nvmlReturn)
            if ret == nvml.NVML_SUCCESS:
                out[key] = field_value(item)
            elif ret in DEVICE_GONE or ret in SESSION_GONE:
                raise DeviceGone("nvmlDeviceGetFieldValues", NVMLError(ret), session=ret in SESSION_GONE)
            elif ret in UNSUPPORTED:
                self._drop_fields(gpu, {key: ret})
            else:
                self._count_error(f"nvmlDeviceGetFieldValues[{key[0]}]", error_name(NVMLError(ret)))
        return out

    def _drop_fields(self, gpu: GpuState, failed: Mapping[tuple[int, int], int]) -> None:
        keep: list[FieldDef] = []
        for fdef in gpu.fields:
            key = (fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0")))
            if key in failed:
                metric = fdef.metric if not fdef.labels else f"{fdef.metric}{{{_label_text(fdef.labels)}}}"
                self.unsupported(gpu, metric, f"field {fdef.field_id}", NVMLError(failed[key]))
            else:
                keep.append(fdef)
        gpu.fields = keep
        # A family with no field left is unsupported as a whole.
        remaining = {fdef.metric for fdef in gpu.fields}
        for metric in {fdef.metric for fdef in FIXED_FIELDS} | {S.GPU_NVLINK_TX, S.GPU_NVLINK_RX}:
            if metric not in remaining and metric != S.GPU_TEMPERATURE:
                gpu.unsupported.add(metric)
                gpu.supported.discard(metric)

    def _read_fields(self, gpu: GpuState, labels: Labels) -> list[Series]:
        ids = [(fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0"))) for fdef in gpu.fields]
        values = self._fields(gpu, ids)
        out: list[Series] = []
        for fdef in gpu.fields:
            key = (fdef.field_id, int(dict(fdef.labels).get(S.GPU_LINK_LABEL, "0")))
            if key in values:
                out.append(Series(fdef.metric, labels + fdef.labels, values[key] * fdef.scale))
                gpu.supported.add(fdef.metric)
        return out

    def _read_gpm(self, gpu: GpuState, labels: Labels, now: float) -> list[Series]:
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
                self.free_gpm(gpu)
                return []
            gpu.gpm_last = now
            return []  # the first value needs a second sample, next poll
        if now - gpu.gpm_last < MIN_INTERVAL:
            return []
        previous, current = gpu.gpm_samples
        if self._gpm_call(gpu, "nvmlGpmSampleGet", lambda: lib.nvmlGpmSampleGet(gpu.handle, current)) is None:
            if GPM_KEY in gpu.unsupported:
                self.free_gpm(gpu)
            return []
        gpu.gpm_samples = [current, previous]
        gpu.gpm_last = now
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
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
            if ret == nvml.NVML_SUCCESS:
                gpu.supported.add(metric)
                out.append(Series(metric, labels, max(0.0, float(item.value)) / 100.0))
            elif ret in UNSUPPORTED:
                self.unsupported(gpu, metric, f"nvmlGpmMetricsGet[{metric_id}]", NVMLError(ret))
            elif ret in DEVICE_GONE or ret in SESSION_GONE:
                raise DeviceGone("nvmlGpmMetricsGet", NVMLError(ret), session=ret in SESSION_GONE)
            else:
                self._count_error(f"nvmlGpmMetricsGet[{metric_id}]", error_name(NVMLError(ret)))
        return out

    def _gpm_call(self, gpu: GpuState, op: str, fn: Callable[[], Any]) -> Any:
        """A GPM call whose "cannot" (MIG without a GPU instance, vGPU, fractional shapes) covers all GPM metrics."""
        value = self._call(gpu, GPM_KEY, op, fn)
        if value is None and GPM_KEY in gpu.unsupported:
            for metric in GPM_METRICS.values():
                gpu.unsupported.add(metric)
                gpu.supported.discard(metric)
        return value

    def free_gpm(self, gpu: GpuState) -> None:
        samples, gpu.gpm_samples = gpu.gpm_samples, []
        self._free_samples(samples)

    def _free_samples(self, samples: Iterable[Any]) -> None:
        for sample in samples:
            try:
                self._lib.nvmlGpmSampleFree(sample)
            except NVMLError as error:
                self._count_error("nvmlGpmSampleFree", error_name(error))


def _raiser(error: BaseException) -> Callable[[], Any]:
    def fn() -> Any:
        raise error

    return fn


def _label_text(labels: Labels) -> str:
    return ",".join(f"{k}={v}" for k, v in labels)
