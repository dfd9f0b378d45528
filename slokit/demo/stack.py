"""The local stack of the demo: vLLM with slokit's exporter, the GPU sidecar, Prometheus with the generated rules,
Alertmanager with the generated configuration, and the webhook receiver; and the signal handling that makes sure
every process started is stopped."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from slokit import schema
from slokit.demo.config import DemoAborted, DemoConfig, DemoResult
from slokit.demo.contract import demo_class
from slokit.demo.output import Reporter
from slokit.demo.readings import Readings
from slokit.demo.traffic import tokens_per_word
from slokit.generate import alertmanager as alertmanager_config
from slokit.generate import rules
from slokit.generate.writer import to_yaml
from slokit.local.alertmanager import Alertmanager, start_alertmanager, with_webhooks
from slokit.local.procs import LOOPBACK, ManagedProcess, free_port
from slokit.local.prometheus import LocalPrometheus
from slokit.local.webhook import Notification, WebhookReceiver
from slokit.sources import exporter as exporter_source
from slokit.spec import Spec
from slokit.units import parse_duration


@dataclass
class Engine:
    """A running vLLM server as the demo needs it."""

    base_url: str
    metrics_url: str
    model: str
    stop: Callable[[], None]
    pid: int | None = None


def start_engine(spec: Spec, run_dir: Path, config: DemoConfig) -> Engine:
    """Build the tiny model and start vLLM with slokit's exporter (SLOKIT_SPEC) on a free loopback port."""
    from slokit.local.tiny_model import build_tiny_model
    from slokit.local.vllm_server import start_vllm_server

    model = spec.models[0]
    # transformers draws a progress bar while saving the model the first time; keep the story's output clean.
    with contextlib.redirect_stderr(io.StringIO()):
        model_dir = build_tiny_model()
    server = start_vllm_server(
        model=model_dir,
        served_model_name=model.name,
        spec_path=Path(spec.path).resolve(),
        max_num_seqs=model.max_num_seqs,
        max_model_len=config.max_model_len,
        log_path=run_dir / "vllm.log",
        startup_timeout=config.startup_timeout,
    )
    return Engine(server.base_url, server.metrics_url, model.name, server.stop, server.process.pid)


def start_gpu_sidecar(run_dir: Path, timeout: float = 60.0) -> tuple[ManagedProcess, int]:
    """`slokit exporter gpu` as its own process on a free loopback port; returns it once /metrics answers."""
    port = free_port()
    process = ManagedProcess(
        "gpu-sidecar",
        [sys.executable, "-m", "slokit.cli", "exporter", "gpu", "--address", LOOPBACK, "--port", str(port)],
        run_dir / "gpu-sidecar.log",
    ).start()
    try:
        process.wait_http(f"http://{LOOPBACK}:{port}/metrics", timeout)
    except BaseException:
        process.stop()
        raise
    return process, port


def host_port(url: str) -> str:
    """`127.0.0.1:9090` from `http://127.0.0.1:9090/...`."""
    match = re.match(r"^https?://([^/]+)", url)
    if not match:
        raise ValueError(f"not an http URL: {url}")
    return match.group(1)


def port_open(port: int) -> bool:
    """Whether something still listens on this loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


def pid_alive(pid: int) -> bool:
    """Whether this process still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as stopped.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so a killed demo still stops what it started (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM while the stack is being stopped (main thread only), so a second Ctrl-C cannot
    leave a process behind; each stop is bounded, so this cannot hang."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Stack:
    """The running stack's handles, as the later steps of the story need them."""

    webhook: WebhookReceiver
    alertmanager: Alertmanager
    engine: Engine
    prometheus: LocalPrometheus
    readings: Readings
    tokens_per_word: float


class StackStarter:
    """Starts the stack on loopback ports, alerting first (quick) so a slow vLLM start is the only wait; every
    process goes onto `stack` (which stops it) and into `result` (pids and ports, for the "all stopped" check)."""

    def __init__(self, spec: Spec, config: DemoConfig, reporter: Reporter, result: DemoResult) -> None:
        self.spec = spec
        self.config = config
        self.out = reporter
        self.result = result
        request_class = demo_class(spec)
        assert request_class is not None  # load_demo_spec checked
        self.request_class = request_class
        self.model = spec.models[0]
        self.metrics = spec.metrics
        self.run_dir = result.output / "run"

    def start(self, stack: contextlib.ExitStack, on_notification: Callable[[Notification], None]) -> Stack:
        """Start everything, wait until Prometheus scrapes both exporters, and return the handles."""
        self.out.step("Start the stack on loopback ports")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        webhook = WebhookReceiver(on_notification=on_notification).start()
        stack.callback(webhook.stop)
        self.result.ports["webhook"] = webhook.port
        self.out.line(f"webhook receiver      {webhook.url}")
        alertmanager = self._start_alertmanager(stack, webhook)
        sidecar, sidecar_port = start_gpu_sidecar(self.run_dir)
        stack.callback(sidecar.stop)
        self._remember("gpu-sidecar", sidecar.pid, f"http://{LOOPBACK}:{sidecar_port}")
        self.out.line(f"GPU sidecar           http://{LOOPBACK}:{sidecar_port}/metrics")
        self.out.line(
            f"vLLM (tiny model, --max-num-seqs {self.model.max_num_seqs}, slokit exporter) starting; "
            "this takes a minute on two cores ...",
            "dim",
        )
        started = time.monotonic()
        engine = start_engine(self.spec, self.run_dir, self.config)
        stack.callback(engine.stop)
        self._remember("vllm", engine.pid, engine.base_url)
        self.out.line(f"vLLM                  {engine.base_url}  (ready in {time.monotonic() - started:.0f}s)")
        per_word = tokens_per_word(engine.base_url, engine.model)
        prometheus = self._start_prometheus(stack, engine, sidecar_port, alertmanager)
        readings = Readings(self.spec, self.request_class, prometheus)
        self._wait_scraped(prometheus, readings)
        return Stack(webhook, alertmanager, engine, prometheus, readings, per_word)

    def _start_alertmanager(self, stack: contextlib.ExitStack, webhook: WebhookReceiver) -> Alertmanager:
        """The generated configuration, as a team would run it: its receivers given integrations (webhooks to the
        receiver, on /<receiver name>), its timers shortened so the story does not wait 30s per group."""
        relative = alertmanager_config.path(self.spec)
        data = with_webhooks(
            alertmanager_config.config(self.spec),
            webhook.url,
            group_wait=self.config.group_wait,
            group_interval=self.config.group_interval,
        )
        alertmanager = start_alertmanager(self.run_dir / "alertmanager", [], config_data=data)
        stack.callback(alertmanager.stop)
        self._remember("alertmanager", alertmanager.pid, alertmanager.url)
        receivers = self.spec.alerting.receivers
        self.out.line(
            f"alertmanager          {alertmanager.url}  ({relative}: pages grouped by service and model -> "
            f"/{receivers.page}, tickets by class -> /{receivers.ticket})"
        )
        return alertmanager

    def _start_prometheus(
        self, stack: contextlib.ExitStack, engine: Engine, sidecar_port: int, alertmanager: Alertmanager
    ) -> LocalPrometheus:
        """Prometheus with the generated rules, every group evaluated at least every `evaluation_interval`."""
        rules_dir = self.run_dir / "rules"
        rules_dir.mkdir(parents=True, exist_ok=True)
        cap = parse_duration(self.config.evaluation_interval)
        groups = rules.rule_groups(self.spec, max_interval=cap)
        target = rules_dir / Path(rules.rules_path(self.spec)).name
        target.write_text(to_yaml({"groups": [g.to_data() for g in groups]}), encoding="utf-8")
        rule_files = [target]
        prometheus = LocalPrometheus(
            self.run_dir / "prometheus",
            static_targets={"vllm": [host_port(engine.metrics_url)], "gpu": [f"{LOOPBACK}:{sidecar_port}"]},
            rule_files=rule_files,
            scrape_interval=self.config.scrape_interval,
            evaluation_interval=self.config.evaluation_interval,
            alertmanagers=[host_port(alertmanager.url)],
        )
        stack.callback(prometheus.stop)
        try:
            prometheus.start(timeout=60)
        finally:
            self._remember("prometheus", prometheus.pid, prometheus.url)
        self.out.line(f"prometheus            {prometheus.url}  ({len(rule_files)} rule files)")
        return prometheus

    def _remember(self, name: str, pid: int | None, url: str) -> None:
        if pid is not None:
            self.result.pids[name] = pid
        port = host_port(url).rsplit(":", 1)[1]
        self.result.ports[name] = int(port)

    def _wait_scraped(self, prometheus: LocalPrometheus, readings: Readings) -> None:
        """Both exporters, as Prometheus sees them, or `DemoAborted` saying what is missing."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            targets = prometheus.targets()
            if targets and all(t.get("health") == "up" for t in targets):
                break
            time.sleep(1)
        else:
            down = [f"{t['labels'].get('job')}: {t.get('lastError')}" for t in prometheus.targets()]
            raise DemoAborted(f"Prometheus targets not up within 60s: {down}")
        prometheus.wait_for(f"{self.metrics.requests_running}{readings.selector(False)}", timeout=60)
        # Both exporters, as Prometheus sees them: slokit's plugin inside vLLM running this very spec (its info
        # metric carries the spec's digest) with per-class tracking on, and the GPU sidecar answering without a GPU.
        info = prometheus.query(f"{exporter_source.EXPORTER_INFO}{readings.selector(False)}")
        labels = dict(info.samples[0].labels) if info.samples else {}
        gpu_up = readings.value(schema.GPU_UP)
        problems = []
        if labels.get("spec_hash") != self.spec.digest:
            problems.append(f"vLLM's exporter runs spec {labels.get('spec_hash') or '?'}, not {self.spec.digest}")
        if labels.get("class_tracking") != "true":
            problems.append("vLLM's exporter cannot tell request classes apart (class_tracking is not true)")
        if gpu_up is None:
            problems.append(f"the GPU sidecar exposes no {schema.GPU_UP}")
        self.out.line(
            f"slokit's exporter in vLLM {labels.get('vllm_version', '?')}: spec {labels.get('spec_hash', '?')}, "
            f"class tracking {labels.get('class_tracking', '?')}; GPU sidecar: {schema.GPU_UP} "
            f"{'-' if gpu_up is None else f'{gpu_up:g}'} (no GPU here)",
            "fail" if problems else "ok",
        )
        detail = "; ".join(problems) or "vLLM with slokit's exporter, GPU sidecar, Prometheus, Alertmanager, webhook"
        self.result.add("stack started", not problems, detail)
        if problems:
            raise DemoAborted(detail)
