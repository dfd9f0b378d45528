"""Several API-server processes (vLLM's --api-server-count > 1): slokit's series on vLLM's merged /metrics.

With several API servers vLLM sets PROMETHEUS_MULTIPROC_DIR and serves /metrics from a registry holding only a
`MultiProcessCollector`. Two real processes stand in for two API servers here: each runs vLLM's own frontend
(`FrontendSim`) with slokit's logger under PROMETHEUS_MULTIPROC_DIR; this process then merges their files the
way vLLM's /metrics does and checks that the per-class counts add up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from slokit.schema import Sli
from slokit.sources import exporter as exporter_source

ROOT = Path(__file__).resolve().parent.parent
M = exporter_source.METRICS

WRITER = """
import sys
from prometheus_client import CollectorRegistry
from bench.exporter_overhead import ENGINE_SPEC, FrontendSim, make_vllm_config
from slokit.exporters.vllm import SlokitStatLogger

logger = SlokitStatLogger(make_vllm_config(), [0], registry=CollectorRegistry(),
                          environ={"SLOKIT_SPEC": str(ENGINE_SPEC)})
assert logger._mirror is not None, "multiprocess mode not detected"
sim = FrontendSim(seed=int(sys.argv[1]))
for _ in range(3):
    sim.add("chat", 20, 4)
sim.add(None, 250, 2)
while sim.live:
    scheduler, iteration = sim.step()
    logger.record(scheduler, iteration)
logger.flush()
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_two_api_server_processes_merge_on_the_multiprocess_endpoint(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("SLOKIT_SPEC", None)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(seed)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for seed in (1, 2)
    ]
    for writer in writers:
        out, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0, out.decode(errors="replace")[-3000:]

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]

    def total(name: str, **labels: str) -> float:
        return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))

    assert total(M.requests_finished, **{"class": "chat"}) == 6
    assert total(M.requests_finished, **{"class": "batch"}) == 2
    assert total(M.latency[Sli.TTFT] + "_count") == 8
    assert total(M.latency[Sli.ITL] + "_count", **{"class": "chat"}) == 6 * 3
    assert total(M.prompt_tokens, **{"class": "batch"}) == 2 * 250
    assert total(M.latency[Sli.TTFT] + "_bucket", le="+Inf") == 8
    assert total(exporter_source.CLASS_REQUESTS_RUNNING) == 0
    assert total(exporter_source.EXPORTER_ERRORS) == 0
