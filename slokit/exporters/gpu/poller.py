"""The GPU sidecar's poller: owns the NVML session, polls the chosen GPUs on a thread, waits for XIDs on another.

Why a background poller, against the Prometheus habit of reading at scrape time: GPM bandwidth needs two samples
taken apart, a wedged driver must never hang a scrape (and through it Prometheus' view of the vLLM pod), and NVML
cost must not grow with the number of scrapers. One thread writes an immutable `Snapshot`; `GpuCollector.collect()`
converts the latest one and never calls NVML. XID events arrive on a blocking wait, so they get their own thread.

Tests drive `GpuPoller.poll_once()` and `GpuPoller.xid_once()` directly with a fake library that raises the real
`nvml.NVMLError` subclasses; `start()` runs the same steps on threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from slokit import catalog as presets
from slokit import schema as S
from slokit.exporters.gpu.device import DeviceReader, GpuState
from slokit.exporters.gpu.fields import GPM_KEY, MIN_INTERVAL
from slokit.exporters.gpu.library import (
    SESSION_GONE,
    UNSUPPORTED,
    DeviceGone,
    NVMLError,
    NvmlLibrary,
    as_text,
    error_code,
    error_name,
    handle_address,
    nvml,
    real_library,
)
from slokit.exporters.gpu.snapshot import EMPTY_SNAPSHOT, Series, Snapshot

log = logging.getLogger("slokit.gpu")

MAX_BACKOFF: Final = 60.0  # longest wait between attempts to re-initialise NVML or re-open a lost GPU
XID_WAIT_MS: Final = 1000  # nvmlEventSetWait_v2 timeout: how quickly the XID thread notices shutdown


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
        self._gpus: dict[str, GpuState] = {}
        self._initialised = False
        self._driver = ""
        self._init_next = 0.0
        self._init_backoff = 0.0
        self._init_error_logged: set[str] = set()
        self._snapshot: Snapshot = EMPTY_SNAPSHOT
        self._reader = DeviceReader(self._lib, self._count_error)
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
                    self._driver = as_text(self._lib.nvmlSystemGetDriverVersion())
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
            self._reader.free_gpm(gpu)
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
                self._reader.free_gpm(self._gpus.pop(uuid))

    def _discover(self, now: float) -> None:
        if self._wanted:
            for uuid in self._wanted:
                self._gpus.setdefault(uuid, GpuState(uuid=uuid, next_attempt=now))
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
                uuid = as_text(self._lib.nvmlDeviceGetUUID(handle))
            except NVMLError as error:
                self._count_error("nvmlDeviceGetHandleByIndex", error_name(error))
                continue
            self._gpus[uuid] = GpuState(uuid=uuid, handle=handle, next_attempt=now)

    def _open(self, gpu: GpuState, now: float) -> bool:
        """Resolve the handle by UUID and read the static identity; False (and backoff) if the GPU is not there."""
        try:
            gpu.handle = self._lib.nvmlDeviceGetHandleByUUID(gpu.uuid)
            gpu.name = as_text(self._lib.nvmlDeviceGetName(gpu.handle))
            try:
                gpu.pci_bus_id = as_text(self._lib.nvmlDeviceGetPciInfo_v3(gpu.handle).busId)
            except NVMLError as error:
                if error_code(error) not in UNSUPPORTED:
                    raise
                gpu.pci_bus_id = ""
        except NVMLError as error:
            self._count_error("nvmlDeviceGetHandleByUUID", error_name(error))
            if error_code(error) in SESSION_GONE:
                self._session_lost(now, "nvmlDeviceGetHandleByUUID", error)
                return False
            self._mark_down(gpu, now)
            return False
        gpu.preset = presets.gpu_for_nvml_name(gpu.name)
        if not gpu.probed:
            log.info("GPU %s: %s at %s", gpu.uuid, gpu.name, gpu.pci_bus_id or "unknown bus")
        return True

    def _mark_down(self, gpu: GpuState, now: float, *, reset_backoff: bool = False) -> None:
        if gpu.up:
            log.warning("GPU %s stopped answering; retrying with backoff up to %.0fs", gpu.uuid, MAX_BACKOFF)
        gpu.up = False
        self._reader.free_gpm(gpu)
        gpu.backoff = 0.0 if reset_backoff else min(MAX_BACKOFF, max(self.interval, gpu.backoff * 2 or 1.0))
        gpu.next_attempt = now + gpu.backoff

    # -- one GPU --------------------------------------------------------------------------------------------
    def _poll_gpu(self, gpu: GpuState, now: float) -> list[Series]:
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
                self._reader.probe(gpu)
            out.extend(gpu.static)
            out.extend(self._reader.read(gpu, now))
        except DeviceGone as gone:
            self._count_error(gone.op, error_name(gone.error))
            if gone.session:
                self._session_lost(now, gone.op, gone.error)
            else:
                self._mark_down(gpu, now)
            return []
        return out

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
                if error_code(error) == nvml.NVML_ERROR_TIMEOUT:
                    return True
                self._count_error("nvmlEventSetWait_v2", error_name(error))
                self._free_event_set()  # re-registered on the next call
                return False
            if not int(data.eventType) & nvml.nvmlEventTypeXidCriticalError:
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
            return as_text(self._lib.nvmlDeviceGetUUID(device))
        except NVMLError as error:
            self._count_error("nvmlDeviceGetUUID", error_name(error))
        address = handle_address(device)
        for uuid, gpu in list(self._gpus.items()):
            if address is not None and handle_address(gpu.handle) == address:
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
                if not supported & nvml.nvmlEventTypeXidCriticalError:
                    raise NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
                self._lib.nvmlDeviceRegisterEvents(gpu.handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except NVMLError as error:
                if error_code(error) in UNSUPPORTED:
                    self._reader.unsupported(gpu, S.GPU_XID_ERRORS, "nvmlDeviceRegisterEvents", error)
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
            table.pop(GPM_KEY, None)
            out[uuid] = MappingProxyType(dict(sorted(table.items())))
        return out


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
