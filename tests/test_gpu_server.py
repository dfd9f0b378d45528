"""The GPU sidecar over real HTTP: in-process with the fake NVML, and `slokit exporter gpu` as a real process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from slokit import schema as S
from slokit.cli import app
from slokit.exporters.gpu.poller import GpuPoller
from slokit.exporters.gpu.server import GpuServer, serve_until_signalled
from slokit.local.procs import LOOPBACK, ManagedProcess, free_port
from slokit.local.prometheus import LocalPrometheus
from tests.test_nvml_fake import FakeGpu, FakeNvml

A = "GPU-8e2f3c1a-0000-4000-8000-000000000001"


def get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.headers["Content-Type"], error.read().decode()


def gpu_up(text: str) -> dict[str, float]:
    """UUID -> slokit_gpu_up ("" for the unlabelled series)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == S.GPU_UP:
            for sample in family.samples:
                out[sample.labels.get("UUID", "")] = sample.value
    return out


@pytest.fixture
def fake_server() -> Iterator[tuple[GpuServer, GpuPoller, FakeGpu]]:
    gpu = FakeGpu(A)
    poller = GpuPoller(FakeNvml([gpu]), interval=1.0)
    server = GpuServer(poller, LOOPBACK, 0)
    server.start()
    try:
        yield server, poller, gpu
    finally:
        server.close()
        poller.stop()


def test_metrics_healthz_and_landing_page(fake_server: tuple[GpuServer, GpuPoller, FakeGpu]) -> None:
    server, poller, _ = fake_server
    poller.poll_once()
    base = f"http://{LOOPBACK}:{server.port}"
    status, ctype, body = get(f"{base}/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert gpu_up(body) == {A: 1.0}
    status, ctype, body = get(f"{base}/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")
    assert get(f"{base}/healthz")[:1] == (200,)
    status, _, body = get(f"{base}/")
    assert status == 200 and 'href="/metrics"' in body
    assert get(f"{base}/nope")[0] == 404


def test_metrics_keep_answering_while_the_gpu_is_lost_and_back(
    fake_server: tuple[GpuServer, GpuPoller, FakeGpu],
) -> None:
    server, poller, gpu = fake_server
    url = f"http://{LOOPBACK}:{server.port}/metrics"
    poller.poll_once()
    assert gpu_up(get(url)[2]) == {A: 1.0}
    gpu.lost = True
    poller.poll_once()
    status, _, body = get(url)
    assert status == 200 and gpu_up(body) == {A: 0.0}
    assert f"\n{S.GPU_MEMORY_USED}{{" not in body  # no stale values
    gpu.lost = False
    poller._gpus[A].next_attempt = 0.0  # skip the backoff wait
    poller.poll_once()
    assert gpu_up(get(url)[2]) == {A: 1.0}


def test_healthz_fails_when_the_poll_is_stuck() -> None:
    now = [100.0]
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0, monotonic=lambda: now[0])
    server = GpuServer(poller, LOOPBACK, 0)
    server.start()
    try:
        poller.poll_once()
        assert get(f"http://{LOOPBACK}:{server.port}/healthz")[0] == 200
        now[0] += 120  # the poll thread has been inside a driver call for two minutes
        status, _, body = get(f"http://{LOOPBACK}:{server.port}/healthz")
        assert status == 503 and "stuck" in body
        assert get(f"http://{LOOPBACK}:{server.port}/metrics")[0] == 200
    finally:
        server.close()


def test_serve_until_signalled_stops_threads_and_nvml() -> None:
    nvml = FakeNvml([FakeGpu(A)])
    poller = GpuPoller(nvml, interval=0.1)
    server = GpuServer(poller, LOOPBACK, 0)
    stop = threading.Event()
    ready = threading.Event()
    runner = threading.Thread(target=serve_until_signalled, args=(poller, server, ready.set, stop))
    runner.start()
    assert ready.wait(30)
    stop.set()
    runner.join(30)
    assert not runner.is_alive()
    assert nvml.initialised == 0
    with pytest.raises(OSError):
        get(f"http://{LOOPBACK}:{server.port}/metrics")


def _slokit() -> list[str]:
    script = Path(sys.executable).with_name("slokit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "slokit.cli"]


def test_the_real_process_without_a_gpu_serves_gpu_up_0_and_stops_on_sigterm(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver; scripts/gpu_check.sh covers it")
    port = free_port()
    proc = ManagedProcess(
        "slokit exporter gpu",
        [*_slokit(), "exporter", "gpu", "--address", LOOPBACK, "--port", str(port), "--interval", "200ms"],
        tmp_path / "gpu.log",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ).start()
    try:
        proc.wait_http(f"http://{LOOPBACK}:{port}/healthz", timeout=60)
        status, _, body = get(f"http://{LOOPBACK}:{port}/metrics")
        assert status == 200
        assert gpu_up(body) == {"": 0.0}
        assert "slokit_gpu_up 0.0" in body
        assert 'slokit_gpu_nvml_errors_total{error="LibraryNotFound",op="nvmlInit"}' in body
        assert proc.process is not None
        proc.process.send_signal(signal.SIGTERM)
        assert proc.process.wait(timeout=30) == 0
        assert "received SIGTERM, shutting down" in proc.log_tail()
    finally:
        proc.stop()


def test_cli_rejects_bad_flags_with_exit_2() -> None:
    runner = CliRunner()
    for args, message in (
        (["--interval", "10ms"], "100ms..60s"),
        (["--interval", "soon"], "--interval"),
        (["--gpus", "0,1"], "not a GPU UUID"),
        (["--log-level", "loud"], "--log-level"),
        (["--gpus", A, "--gpus-file", "/tmp/x"], "one of them"),
    ):
        result = runner.invoke(app, ["exporter", "gpu", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_cli_reports_a_port_in_use_with_exit_1() -> None:
    poller = GpuPoller(FakeNvml(), interval=1.0)
    busy = GpuServer(poller, LOOPBACK, 0)
    try:
        result = CliRunner().invoke(app, ["exporter", "gpu", "--address", LOOPBACK, "--port", str(busy.port)])
        assert result.exit_code == 1
        assert "cannot listen" in result.output
    finally:
        busy.close()


def test_help_teaches_the_options() -> None:
    result = CliRunner().invoke(app, ["exporter", "gpu", "--help"])
    assert result.exit_code == 0
    for word in ("--gpus", "--gpus-file", "--interval", "slokit_gpu_up 0", "SIGTERM"):
        assert word in result.output


def test_gpu_check_script_runs_the_real_exporter_and_reports_no_gpu_here(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: run scripts/gpu_check.sh by hand")
    script = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
    env = {**os.environ, "GPU_CHECK_SECONDS": "1", "GPU_CHECK_OUT": str(tmp_path), "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "== SIGTERM: exit code 0" in result.stdout
    assert "slokit_gpu_up 0 (no GPU answered)" in result.stdout
    assert "nvmlInit: LibraryNotFound" in result.stdout
    assert list(tmp_path.glob("scrape-*.prom"))


@pytest.mark.prometheus
def test_real_prometheus_scrapes_every_family_and_the_documented_joins_work(
    prometheus_factory: Callable[..., LocalPrometheus],
) -> None:
    b = "GPU-1c0a9b7d-0000-4000-8000-000000000002"
    a100 = FakeGpu(b, name="NVIDIA A100-SXM4-80GB", gpm_supported=False, nvlink_links=0)
    poller = GpuPoller(FakeNvml([FakeGpu(A), a100]), interval=0.2)
    server = GpuServer(poller, LOOPBACK, 0)
    poller.start()
    server.start()
    try:
        prom = prometheus_factory(static_targets={"gpu": [f"{LOOPBACK}:{server.port}"]}, scrape_interval="1s")
        prom.start()
        prom.wait_for(f"{S.GPU_MEMORY_BANDWIDTH_UTILIZATION}", timeout=60)
        (target,) = prom.targets()
        assert target["health"] == "up" and not target["lastError"], target
        stored = {s.labels["__name__"] for s in prom.query('count by (__name__) ({__name__=~"slokit_gpu_.*"})').samples}
        expected = {name + "_total" if f.type == "counter" else name for name, f in _families(server).items()}
        assert len(expected) > 30 and expected <= stored, expected - stored
        # Achieved HBM bandwidth in bytes/s, with the GPU model joined in, as docs/gpu-exporter.md writes it.
        achieved = prom.query(
            f"{S.GPU_MEMORY_BANDWIDTH_UTILIZATION} * on(UUID) {S.GPU_PEAK_MEMORY_BANDWIDTH}"
            f" * on(UUID) group_left(modelName) {S.GPU_INFO}"
        )
        (sample,) = achieved.samples
        assert sample.labels["modelName"] == "NVIDIA H100 80GB HBM3"
        assert sample.value == pytest.approx(0.715 * 3.35e12)
        unsupported = prom.query(f"{S.GPU_METRIC_SUPPORTED} == 0").by_labels("UUID", "metric")
        assert (b, S.GPU_MEMORY_BANDWIDTH_UTILIZATION) in unsupported
    finally:
        server.close()
        poller.stop()


def _families(server: GpuServer) -> dict[str, Any]:
    from prometheus_client import generate_latest

    return {f.name: f for f in text_string_to_metric_families(generate_latest(server.registry).decode())}


class BlockingNvml(FakeNvml):
    """Fake NVML whose memory read hangs (until released) once `block` is set, like a wedged driver call."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__(gpus)
        self.block = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if self.block.is_set():
            self.entered.set()
            self.release.wait(120)
        return super().nvmlDeviceGetMemoryInfo(handle, version)


def test_metrics_answer_with_the_last_poll_while_nvml_is_stuck() -> None:
    import time

    nvml = BlockingNvml([FakeGpu(A)])
    offset = [0.0]
    poller = GpuPoller(nvml, interval=0.1, monotonic=lambda: time.monotonic() + offset[0])
    server = GpuServer(poller, LOOPBACK, 0)
    url = f"http://{LOOPBACK}:{server.port}/metrics"

    def age(body: str) -> float:
        (family,) = [f for f in text_string_to_metric_families(body) if f.name == S.GPU_SNAPSHOT_AGE]
        return float(family.samples[0].value)

    poller.start()
    server.start()
    try:
        for _ in range(600):  # bounded wait for the first poll to finish
            if poller.snapshot().timestamp:
                break
            time.sleep(0.05)
        assert poller.snapshot().timestamp
        nvml.block.set()
        assert nvml.entered.wait(60)  # the poll thread is now inside a driver call that does not return
        status, _, first = get(url)
        assert status == 200 and gpu_up(first) == {A: 1.0}  # the last completed poll, served at once
        offset[0] += 60.0  # a minute passes with the poll still stuck
        status, _, second = get(url)
        assert status == 200 and gpu_up(second).get(A) is not None
        assert age(second) >= age(first) + 60.0
        assert not nvml.release.is_set()  # both scrapes were answered while the poll was stuck
    finally:
        nvml.release.set()
        server.close()
        poller.stop()
