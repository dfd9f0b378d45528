"""The NVML poller and collector against the fake library: exposition, unsupported metrics, errors, recovery."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slokit import schema as S
from slokit.exporters.gpu.collector import GpuCollector
from slokit.exporters.gpu.library import field_value
from slokit.exporters.gpu.poller import MAX_BACKOFF, GpuPoller, parse_uuid_list
from tests.test_nvml_fake import FakeGpu, FakeNvml, err

A = "GPU-8e2f3c1a-0000-4000-8000-000000000001"
B = "GPU-1c0a9b7d-0000-4000-8000-000000000002"


class Clock:
    """Monotonic time the test moves by hand, so backoff is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(gpus: list[FakeGpu] | None = None, **kwargs: object) -> tuple[FakeNvml, GpuPoller, Clock, CollectorRegistry]:
    nvml = FakeNvml(gpus if gpus is not None else [FakeGpu(A)])
    clock = Clock()
    poller = GpuPoller(nvml, interval=1.0, monotonic=clock, wall=lambda: 1_700_000_000.0, **kwargs)  # type: ignore[arg-type]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(poller))
    return nvml, poller, clock, registry


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every exposed sample, keyed by (name, sorted labels), parsed back from the text exposition."""
    text = generate_latest(registry).decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def names(registry: CollectorRegistry) -> set[str]:
    return {name for name, _ in samples(registry)}


def poll(poller: GpuPoller, clock: Clock, times: int = 1) -> None:
    for _ in range(times):
        poller.poll_once()
        clock.advance(1.0)


# ==============================================================================================================
# Exposition
# ==============================================================================================================
def test_a_healthy_h100_exposes_every_metric_in_base_units() -> None:
    _, poller, clock, registry = make()
    poll(poller, clock, 2)  # GPM needs two samples
    u = {"UUID": A}
    assert value(registry, S.GPU_UP, **u) == 1
    assert (
        value(
            registry,
            S.GPU_INFO,
            UUID=A,
            modelName="NVIDIA H100 80GB HBM3",
            pci_bus_id="00000000:19:00.0",
            driver_version="550.54.15",
            gpu_preset="h100-sxm",
        )
        == 1
    )
    assert value(registry, S.GPU_MEMORY_TOTAL, **u) == 81559 * 2**20
    assert value(registry, S.GPU_MEMORY_USED, **u) == 72000 * 2**20
    assert value(registry, S.GPU_MEMORY_RESERVED, **u) == 500 * 2**20
    assert value(registry, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, **u) == pytest.approx(0.715)
    assert value(registry, S.GPU_SM_ACTIVE, **u) == pytest.approx(0.55)
    assert value(registry, S.GPU_TENSOR_ACTIVE, **u) == pytest.approx(0.40)
    assert value(registry, S.GPU_PEAK_MEMORY_BANDWIDTH, **u) == pytest.approx(3.35e12)
    assert value(registry, S.GPU_MEMORY_BUSY, **u) == pytest.approx(0.64)
    assert value(registry, S.GPU_UTILIZATION, **u) == pytest.approx(0.87)
    assert value(registry, S.GPU_SM_CLOCK, **u) == 1980e6
    assert value(registry, S.GPU_MEMORY_CLOCK, **u) == 2619e6
    assert value(registry, S.GPU_POWER, **u) == pytest.approx(512.345)
    assert value(registry, S.GPU_POWER_LIMIT, **u) == pytest.approx(700.0)
    assert value(registry, S.GPU_ENERGY, **u) == pytest.approx(9876.543)
    assert value(registry, S.GPU_TEMPERATURE, UUID=A, sensor="gpu") == 61
    assert value(registry, S.GPU_TEMPERATURE, UUID=A, sensor="memory") == 70
    assert value(registry, S.GPU_CLOCK_EVENT_REASONS, UUID=A, reason="sw_power_cap") == 1
    assert value(registry, S.GPU_CLOCK_EVENT_REASONS, UUID=A, reason="hw_thermal_slowdown") == 0
    assert value(registry, S.GPU_CLOCK_EVENT_REASONS, UUID=A, reason="sync_boost") is None  # not in the mask
    assert value(registry, S.GPU_CLOCK_EVENT_SECONDS, UUID=A, reason="sw_power_cap") == pytest.approx(2.5)
    assert value(registry, S.GPU_CLOCK_EVENT_SECONDS, UUID=A, reason="hw_thermal_slowdown") == pytest.approx(1e-3)
    assert value(registry, S.GPU_NVLINK_TX, UUID=A, link="0") == 1000 * 1024
    assert value(registry, S.GPU_NVLINK_RX, UUID=A, link="1") == 4000 * 1024
    assert value(registry, S.GPU_PCIE_TX, **u) == 123_456_789
    assert value(registry, S.GPU_PCIE_RX, **u) == 987_654_321
    assert value(registry, S.GPU_PCIE_LINK_GENERATION, **u) == 5
    assert value(registry, S.GPU_PCIE_LINK_MAX_WIDTH, **u) == 16
    assert value(registry, S.GPU_ECC_ERRORS, UUID=A, error="corrected") == 3
    assert value(registry, S.GPU_ECC_ERRORS, UUID=A, error="uncorrected") == 0
    assert value(registry, S.GPU_REMAPPED_ROWS, UUID=A, error="corrected") == 2
    assert value(registry, S.GPU_ROW_REMAP_PENDING, **u) == 0
    assert value(registry, S.GPU_LAST_COLLECT) == 1_700_000_000.0
    assert value(registry, S.GPU_COLLECT_DURATION) is not None
    assert value(registry, S.GPU_METRIC_SUPPORTED, UUID=A, metric=S.GPU_POWER) == 1


def test_types_help_and_names_follow_prometheus_conventions() -> None:
    _, poller, clock, registry = make()
    poll(poller, clock, 2)
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, family in families.items():
        assert name.startswith("slokit_gpu_"), name
        assert ":" not in name
        assert family.documentation, name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), name
    assert families["slokit_gpu_energy_joules"].type == "counter"
    assert families[S.GPU_POWER].type == "gauge"
    # Background polling is a deliberate departure from scrape-time reads; the HELP text says so.
    assert "background thread" in families[S.GPU_LAST_COLLECT].documentation


def test_the_first_poll_has_no_gpm_value_and_the_second_does() -> None:
    _, poller, clock, registry = make()
    poll(poller, clock)
    assert value(registry, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, UUID=A) is None
    poll(poller, clock)
    assert value(registry, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, UUID=A) == pytest.approx(0.715)


def test_a_scrape_never_calls_nvml() -> None:
    nvml, poller, clock, registry = make()
    poll(poller, clock, 2)
    before = sum(nvml.calls.values())
    for _ in range(5):
        generate_latest(registry)
    assert sum(nvml.calls.values()) == before


def test_field_values_decode_by_value_type() -> None:
    item = pynvml.c_nvmlFieldValue_t()
    for kind, attr, raw in (
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 1.5),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 7),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**40),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -5),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -3),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 9),
    ):
        item.valueType = kind
        setattr(item.value, attr, raw)
        assert field_value(item) == raw


# ==============================================================================================================
# Unsupported metrics: left out, said once, never asked again
# ==============================================================================================================
def test_unsupported_metrics_are_left_out_said_once_and_not_asked_again(caplog: pytest.LogCaptureFixture) -> None:
    gpu = FakeGpu(
        A,
        name="NVIDIA A100-SXM4-80GB",
        nvlink_links=0,
        gpm_supported=False,
        errors={
            "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetRemappedRows": pynvml.NVML_ERROR_NO_PERMISSION,
            "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        },
        field_errors={
            (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0): pynvml.NVML_ERROR_NOT_SUPPORTED,
            (pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0): pynvml.NVML_ERROR_NOT_SUPPORTED,
            (pynvml.NVML_FI_DEV_MEMORY_TEMP, 0): pynvml.NVML_ERROR_NO_PERMISSION,
            (pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0): pynvml.NVML_ERROR_NOT_SUPPORTED,
        },
    )
    nvml, poller, clock, registry = make([gpu])
    with caplog.at_level(logging.WARNING, logger="slokit.gpu"):
        poll(poller, clock, 4)
    present = names(registry)
    for missing in (S.GPU_POWER, S.GPU_POWER_LIMIT, S.GPU_REMAPPED_ROWS, S.GPU_ECC_ERRORS,
                    S.GPU_NVLINK_TX, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, S.GPU_SM_ACTIVE):  # fmt: skip
        assert missing not in present, missing
    assert value(registry, S.GPU_TEMPERATURE, UUID=A, sensor="memory") is None
    assert value(registry, S.GPU_TEMPERATURE, UUID=A, sensor="gpu") == 61  # the rest still flows
    assert value(registry, S.GPU_MEMORY_USED, UUID=A) is not None
    assert value(registry, S.GPU_UP, UUID=A) == 1
    assert value(registry, S.GPU_PEAK_MEMORY_BANDWIDTH, UUID=A) == pytest.approx(2.039e12)
    for metric in (S.GPU_POWER, S.GPU_POWER_LIMIT, S.GPU_REMAPPED_ROWS, S.GPU_ECC_ERRORS, S.GPU_NVLINK_TX,
                   S.GPU_MEMORY_BANDWIDTH_UTILIZATION):  # fmt: skip
        assert value(registry, S.GPU_METRIC_SUPPORTED, UUID=A, metric=metric) == 0, metric
    # Asked once, at the probe, never again.
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1
    assert nvml.calls["nvmlDeviceGetRemappedRows"] == 1
    assert nvml.calls["nvmlGpmSampleGet"] == 0
    # Said once each, though polled four times.
    messages = [r.getMessage() for r in caplog.records]
    for metric in (S.GPU_POWER, S.GPU_REMAPPED_ROWS, S.GPU_MEMORY_BANDWIDTH_UTILIZATION):
        assert sum(f" {metric} left out" in m for m in messages) == 1, (metric, messages)
    assert sum("temperature_celsius{sensor=memory}" in m for m in messages) == 1


def test_a_per_field_error_drops_only_that_field() -> None:
    gpu = FakeGpu(A, field_errors={(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 1): pynvml.NVML_ERROR_NOT_SUPPORTED})
    nvml, poller, clock, registry = make([gpu])
    poll(poller, clock, 3)
    assert value(registry, S.GPU_NVLINK_RX, UUID=A, link="0") == 2000 * 1024
    assert value(registry, S.GPU_NVLINK_RX, UUID=A, link="1") is None
    assert value(registry, S.GPU_NVLINK_TX, UUID=A, link="1") == 2000 * 1024
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 1 + 3  # link count at the probe, then one batch per poll


def test_gpm_metric_with_its_own_error_is_left_out_alone() -> None:
    gpu = FakeGpu(A, gpm_errors={pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: pynvml.NVML_ERROR_NOT_SUPPORTED})
    _, poller, clock, registry = make([gpu])
    poll(poller, clock, 3)
    assert value(registry, S.GPU_TENSOR_ACTIVE, UUID=A) is None
    assert value(registry, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, UUID=A) == pytest.approx(0.715)
    assert value(registry, S.GPU_METRIC_SUPPORTED, UUID=A, metric=S.GPU_TENSOR_ACTIVE) == 0


def test_gpm_sampling_that_cannot_work_leaves_out_every_gpm_metric() -> None:
    gpu = FakeGpu(A, errors={"nvmlGpmSampleGet": pynvml.NVML_ERROR_NOT_SUPPORTED})  # e.g. a vGPU profile
    nvml, poller, clock, registry = make([gpu])
    poll(poller, clock, 3)
    for metric in (S.GPU_MEMORY_BANDWIDTH_UTILIZATION, S.GPU_SM_ACTIVE, S.GPU_TENSOR_ACTIVE):
        assert value(registry, metric, UUID=A) is None
        assert value(registry, S.GPU_METRIC_SUPPORTED, UUID=A, metric=metric) == 0
    assert value(registry, S.GPU_MEMORY_BUSY, UUID=A) == pytest.approx(0.64)  # the duty cycle stays
    assert nvml.calls["nvmlGpmSampleGet"] == 1
    assert nvml.gpm_allocated == nvml.gpm_freed == 2


def test_older_drivers_are_read_through_the_older_entry_points() -> None:
    nvml, poller, clock, registry = make()
    nvml.missing |= {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons",
                     "nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetMemoryInfo_v2"}  # fmt: skip
    poll(poller, clock, 2)
    assert value(registry, S.GPU_TEMPERATURE, UUID=A, sensor="gpu") == 61
    assert value(registry, S.GPU_CLOCK_EVENT_REASONS, UUID=A, reason="sw_power_cap") == 1
    assert value(registry, S.GPU_MEMORY_USED, UUID=A) == (72000 + 500) * 2**20  # v1 counts reserved as used
    assert value(registry, S.GPU_MEMORY_RESERVED, UUID=A) is None
    assert nvml.calls["nvmlDeviceGetTemperatureV"] == 1  # found missing once, then the old call only
    assert nvml.calls["nvmlDeviceGetTemperature"] == 2


# ==============================================================================================================
# Transient errors, lost GPUs, broken sessions, no driver
# ==============================================================================================================
def test_a_timeout_skips_one_reading_counts_it_and_keeps_the_metric() -> None:
    gpu = FakeGpu(A)
    _, poller, clock, registry = make([gpu])
    poll(poller, clock)
    gpu.errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_TIMEOUT
    poll(poller, clock)
    assert value(registry, S.GPU_UTILIZATION, UUID=A) is None
    assert value(registry, S.GPU_NVML_ERRORS, op="nvmlDeviceGetUtilizationRates", error="Timeout") == 1
    assert value(registry, S.GPU_UP, UUID=A) == 1
    del gpu.errors["nvmlDeviceGetUtilizationRates"]
    poll(poller, clock)
    assert value(registry, S.GPU_UTILIZATION, UUID=A) == pytest.approx(0.87)


def test_a_lost_gpu_reads_down_keeps_the_other_and_recovers_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    lost, healthy = FakeGpu(A), FakeGpu(B, bus_id="00000000:3B:00.0")
    nvml, poller, clock, registry = make([lost, healthy])
    poll(poller, clock, 2)
    assert value(registry, S.GPU_UP, UUID=A) == 1
    lost.lost = True
    with caplog.at_level(logging.WARNING, logger="slokit.gpu"):
        poller.poll_once()
    assert value(registry, S.GPU_UP, UUID=A) == 0
    assert value(registry, S.GPU_MEMORY_USED, UUID=A) is None  # no stale values for a lost GPU
    assert value(registry, S.GPU_POWER, UUID=A) is None
    assert value(registry, S.GPU_UP, UUID=B) == 1  # the other GPU is unaffected
    assert value(registry, S.GPU_POWER, UUID=B) is not None
    assert any(labels[0] == ("error", "GpuIsLost") for (name, labels) in samples(registry) if name == S.GPU_NVML_ERRORS)
    assert any("stopped answering" in r.getMessage() for r in caplog.records)
    # Backoff: the next attempts to re-open it come 1 s, then 2 s, then 4 s ... later, capped.
    opened = nvml.calls["nvmlDeviceGetHandleByUUID"]
    poller.poll_once()  # same instant: no attempt
    assert nvml.calls["nvmlDeviceGetHandleByUUID"] == opened
    attempts = []
    for _ in range(60):
        clock.advance(0.5)
        before = nvml.calls["nvmlDeviceGetHandleByUUID"]
        poller.poll_once()
        if nvml.calls["nvmlDeviceGetHandleByUUID"] > before:
            attempts.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], attempts  # waits grow
    assert all(g <= MAX_BACKOFF for g in gaps)
    # The GPU comes back (reset): re-opened by UUID, probed support kept, values flow again.
    lost.lost = False
    clock.advance(MAX_BACKOFF)
    poll(poller, clock, 2)
    assert value(registry, S.GPU_UP, UUID=A) == 1
    assert value(registry, S.GPU_MEMORY_USED, UUID=A) == 72000 * 2**20
    assert value(registry, S.GPU_MEMORY_BANDWIDTH_UTILIZATION, UUID=A) == pytest.approx(0.715)


def test_a_broken_session_is_shut_down_and_initialised_again() -> None:
    gpu = FakeGpu(A)
    nvml, poller, clock, registry = make([gpu])
    poll(poller, clock)
    gpu.errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH  # driver upgraded underneath
    poll(poller, clock)
    assert value(registry, S.GPU_UP, UUID=A) == 0
    assert nvml.calls["nvmlShutdown"] == 1
    assert nvml.initialised == 0
    del gpu.errors["nvmlDeviceGetPowerUsage"]
    clock.advance(MAX_BACKOFF)
    poll(poller, clock, 2)
    assert nvml.calls["nvmlInit"] == 2
    assert value(registry, S.GPU_UP, UUID=A) == 1
    assert value(registry, S.GPU_POWER, UUID=A) == pytest.approx(512.345)


def test_a_session_broken_by_one_gpu_is_not_hammered_by_the_others() -> None:
    first, second = FakeGpu(A), FakeGpu(B)
    nvml, poller, clock, registry = make([first, second])
    poll(poller, clock)
    first.errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_UNINITIALIZED
    calls = nvml.calls["nvmlDeviceGetPowerUsage"]
    poll(poller, clock)
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == calls  # polling stopped at the break
    assert nvml.calls["nvmlShutdown"] == 1
    assert value(registry, S.GPU_UP, UUID=A) == value(registry, S.GPU_UP, UUID=B) == 0


def test_without_a_driver_gpu_up_is_0_and_init_is_retried_until_the_driver_loads() -> None:
    nvml = FakeNvml([FakeGpu(A)], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    clock = Clock()
    poller = GpuPoller(nvml, interval=1.0, monotonic=clock)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(poller))
    for _ in range(5):
        poller.poll_once()
        clock.advance(1.0)
    assert samples(registry)[(S.GPU_UP, ())] == 0  # one unlabelled series
    assert value(registry, S.GPU_NVML_ERRORS, op="nvmlInit", error="LibraryNotFound") == 3  # at 0 s, 1 s, 3 s
    nvml.init_error = None  # the GPU operator finished installing the driver
    clock.advance(MAX_BACKOFF)
    poller.poll_once()
    assert value(registry, S.GPU_UP, UUID=A) == 1
    assert (S.GPU_UP, ()) not in samples(registry)


def test_no_gpu_at_all_reads_gpu_up_0() -> None:
    _, poller, clock, registry = make([])
    poll(poller, clock)
    assert samples(registry)[(S.GPU_UP, ())] == 0


def test_a_stale_snapshot_is_served_as_down() -> None:
    _, poller, clock, registry = make()
    poll(poller, clock)
    assert value(registry, S.GPU_UP, UUID=A) == 1
    clock.advance(60)  # the poll thread is stuck inside a wedged driver call
    assert value(registry, S.GPU_UP, UUID=A) == 0
    assert value(registry, S.GPU_MEMORY_USED, UUID=A) is None
    assert not poller.healthy()


# ==============================================================================================================
# Which GPUs
# ==============================================================================================================
def test_listed_uuids_restrict_polling_and_a_missing_one_reads_down() -> None:
    missing = "GPU-00000000-0000-4000-8000-00000000dead"
    nvml, poller, clock, registry = make([FakeGpu(A), FakeGpu(B)], uuids=[B, missing])
    poll(poller, clock, 2)
    assert value(registry, S.GPU_UP, UUID=B) == 1
    assert value(registry, S.GPU_UP, UUID=missing) == 0
    assert value(registry, S.GPU_UP, UUID=A) is None
    assert nvml.calls["nvmlDeviceGetCount"] == 0


def test_the_gpu_file_is_waited_for_then_followed(tmp_path: Path) -> None:
    path = tmp_path / "gpus"
    _, poller, clock, registry = make([FakeGpu(A), FakeGpu(B)], uuids_file=path)
    poll(poller, clock)
    assert samples(registry)[(S.GPU_UP, ())] == 0  # nothing to watch yet
    path.write_text(f"{A}\n")  # what `nvidia-smi --query-gpu=uuid --format=csv,noheader` writes
    poll(poller, clock, 2)
    assert value(registry, S.GPU_UP, UUID=A) == 1
    assert value(registry, S.GPU_UP, UUID=B) is None


def test_uuid_lists_accept_nvidia_smi_and_visible_devices_shapes() -> None:
    assert parse_uuid_list(f"{A}\n{B}\n") == (A, B)
    assert parse_uuid_list(f"{A},{B},{A}") == (A, B)
    assert parse_uuid_list("all") == ()


# ==============================================================================================================
# XID events
# ==============================================================================================================
def test_xid_events_are_counted_per_gpu_and_xid() -> None:
    nvml, poller, clock, registry = make([FakeGpu(A), FakeGpu(B)])
    poll(poller, clock)
    assert poller.xid_once() is True  # registers, then times out: nothing yet
    poll(poller, clock)
    assert value(registry, S.GPU_LAST_XID, UUID=A) == 0
    nvml.events.extend([(A, 79), (A, 79), (B, 13)])
    for _ in range(4):
        poller.xid_once()
    assert value(registry, S.GPU_XID_ERRORS, UUID=A, xid="79") == 2
    assert value(registry, S.GPU_XID_ERRORS, UUID=B, xid="13") == 1
    assert value(registry, S.GPU_LAST_XID, UUID=B) == 13
    assert len(nvml.event_sets) == 1


def test_the_event_set_is_rebuilt_after_a_gpu_is_lost_and_counts_survive() -> None:
    gpu = FakeGpu(A)
    nvml, poller, clock, registry = make([gpu])
    poll(poller, clock)
    nvml.events.append((A, 79))
    poller.xid_once()
    gpu.lost = True
    poll(poller, clock)
    assert poller.xid_once() is False  # the answering GPUs changed: registered again, and none is left
    assert not nvml.event_sets
    gpu.lost = False
    clock.advance(MAX_BACKOFF)
    poll(poller, clock)
    poller.xid_once()
    assert len(nvml.event_sets) == 1
    assert value(registry, S.GPU_XID_ERRORS, UUID=A, xid="79") == 1


def test_gpus_without_xid_events_say_so() -> None:
    _, poller, clock, registry = make([FakeGpu(A, event_types=0)])
    poll(poller, clock)
    assert poller.xid_once() is False
    poll(poller, clock)
    assert value(registry, S.GPU_METRIC_SUPPORTED, UUID=A, metric=S.GPU_XID_ERRORS) == 0


# ==============================================================================================================
# Threads
# ==============================================================================================================
def test_start_and_stop_run_both_threads_and_release_nvml() -> None:
    nvml = FakeNvml([FakeGpu(A)])
    poller = GpuPoller(nvml, interval=0.1)
    poller.start()
    try:
        for _ in range(200):  # bounded wait for the first poll, not a timing assertion
            if poller.snapshot().timestamp:
                break
            poller._stop.wait(0.05)
        assert poller.snapshot().up == {A: True}
        assert poller.healthy()
    finally:
        poller.stop()
    assert all(not t.is_alive() for t in poller._threads)
    assert nvml.initialised == 0
    assert nvml.gpm_allocated == nvml.gpm_freed
    assert not nvml.event_sets


def test_an_interval_below_gpm_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="100 ms"):
        GpuPoller(FakeNvml(), interval=0.05)


def test_err_builds_the_real_subclass() -> None:
    assert type(err(pynvml.NVML_ERROR_TIMEOUT)).__name__ == "NVMLError_Timeout"


def test_every_metric_is_documented() -> None:
    from slokit.exporters.gpu.catalogue import METRICS

    text = (Path(__file__).resolve().parent.parent / "docs" / "gpu-exporter.md").read_text(encoding="utf-8")
    missing = [m.name for m in METRICS if f"`{m.name}`" not in text]
    assert not missing, f"docs/gpu-exporter.md does not describe {missing}"
