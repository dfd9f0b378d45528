"""Soak smoke test: what slokit's exporter holds inside the real vLLM server does not grow with requests.

The session engine loads tests/memory_probe.py as a middleware; it reports, from inside the API server, the
exporter's per-request entries, the label sets its collector exposes, the objects reachable from slokit's modules
and the live memory slokit's own lines allocated (tracemalloc, started by this test and stopped at its end).

Three rounds of the same mix (declared classes, no header, distinct undeclared and hostile values, `n=2`, aborts
mid-stream). After each round the engine goes idle, the exporter's abort sweep runs, and the probe is read. The
first round warms up (label sets for each class and finish reason, dictionaries at their working size); the second
and third must then leave everything where it was: a leak of one object per request shows as dozens.
bench/soak.py runs the same accounting for minutes under steady load.
"""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from slokit import schema
from slokit.local.vllm_server import VllmServer
from tests.memory_probe import PATH
from tests.test_exporter_engine import scrape

pytestmark = pytest.mark.vllm

ROUND = 48  # requests per round
ABORT_EVERY = 4  # every 4th request is closed after its first streamed chunk
SETTLE_S = 2.5  # longer than the exporter's abort sweep interval (2 s)
LINGER_S = 20.0  # at most this long for finished requests' objects to be released by the server (tests/memory_probe.py)
# Allowed change between rounds. The object graph reachable from slokit is exact once warm (the same label sets,
# dictionaries at their working size): a list that keeps every request adds ROUND references per round. slokit's
# live traced memory moves a little without a leak, because a histogram cell's float is a new allocation at its
# first observation after tracing began (bounded by the number of cells); a leak holds at least one object (32
# bytes or more) per request.
OBJECT_SLACK = 0
# Objects and references of a series a round met first (above): its key tuple, labels, cell and entries, and the
# references to them and from the key tuple to each label value. A leak of one object per request adds ROUND (48)
# objects and more references per round.
PER_NEW_SERIES = {"graph_objects": 8, "graph_refs": 16}
BYTES_PER_REQUEST = 32
# The exporter's per-request maps (pending, decoding, by external id) churn, and Python rebuilds a dictionary's table
# at a size set by how many entries it holds at that moment, which vLLM's timing decides: a round can end with two
# of them a step larger than the round before (768 bytes each at ROUND in flight, seen on a fresh-clone run) with
# nothing held. The bytes check therefore spans two rounds: a leak of BYTES_PER_REQUEST adds 2 x ROUND of them.
TABLE_SLACK = 2 * 768
REASON_LABELS = ("finish_reason", schema.FAIL_REASON_LABEL, "stream", "le")  # what a failure series adds (and buckets)


def _probe(server: VllmServer, action: str = "sample") -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("GET", f"{PATH}?action={action}")
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body
        answer: dict[str, Any] = json.loads(body)
        return answer
    finally:
        connection.close()


def _request(server: VllmServer, header: str | bytes | None, abort: bool, n: int = 1) -> str:
    body = json.dumps(
        {
            "model": server.served_model_name,
            "prompt": "soak " * 4,
            "max_tokens": 8,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0 if n == 1 else 1.0,  # vLLM: "n must be 1 when using greedy sampling"
            "n": n,
        }
    )
    headers: dict[str, str | bytes] = {"content-type": "application/json"}
    if header is not None:
        headers[schema.CLASS_HEADER] = header
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        connection.request("POST", "/v1/completions", body=body, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            return f"HTTP {response.status}: {response.read(300)!r}"
        while line := response.readline():
            if abort and line.startswith(b"data: "):
                return "aborted"
            if line.strip() == b"data: [DONE]":
                return "done"
        return "no [DONE]"
    finally:
        connection.close()


def _exported_labels(server: VllmServer) -> set[tuple[str, str]]:
    """The label values (but reasons and `le`) of every slokit series on the server's /metrics."""
    return {
        (k, v)
        for name, labels, _ in scrape(server)
        if name.startswith("slokit_")
        for k, v in labels.items()
        if k not in REASON_LABELS
    }


def _round(server: VllmServer, number: int) -> list[str]:
    jobs: list[tuple[str | bytes | None, bool, int]] = []
    for i in range(ROUND):
        header: str | bytes | None = ("chat", "batch", None, f"tenant-{number}-{i}", b"\xff\xfe", "y" * 300)[i % 6]
        jobs.append((header, i % ABORT_EVERY == ABORT_EVERY - 1, 2 if i % 8 == 0 else 1))
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda job: _request(server, *job), jobs))


def _settled(server: VllmServer) -> dict[str, Any]:
    """Idle engine, abort sweep run (a request after the sweep interval makes vLLM call record()), probe read.

    The reading waits until the server has released the finished requests' objects (only the probe's own request
    is alive): uvicorn's keep-alive timers hold them for a few seconds, and a reading taken before that counts a
    few dozen of them as slokit's memory, differently in every round.
    """
    time.sleep(SETTLE_S)
    assert _request(server, "chat", False) == "done"
    sample: dict[str, Any] = {}
    deadline = time.monotonic() + LINGER_S
    while True:  # the finished record of that request may trail its [DONE] by an engine step
        sample = _probe(server)
        idle = not sum(sample["tracked"].values()) and sample["frontend_requests_alive"] <= 1
        if idle or time.monotonic() > deadline:
            return sample
        time.sleep(0.25)


def test_exporter_state_does_not_grow_with_requests(vllm_server: VllmServer) -> None:
    first = _probe(vllm_server)
    assert first["plugin"], first  # the probe sees the exporter in the API server
    _probe(vllm_server, "start")
    try:
        samples, labels = [], []
        for number in range(3):
            outcomes = _round(vllm_server, number)
            assert outcomes.count("aborted") == ROUND // ABORT_EVERY, outcomes
            assert outcomes.count("done") == ROUND - ROUND // ABORT_EVERY, outcomes
            samples.append(_settled(vllm_server))
            labels.append(_exported_labels(vllm_server))
    finally:
        _probe(vllm_server, "stop")
    warm, second, third = samples
    figures = {
        key: [s[key] for s in samples]
        for key in ("collector_series", "frontend_requests_alive", "graph_objects", "graph_refs", "slokit_traced_bytes")
    }
    detail = f"{figures}; largest slokit allocations after round 3: {third['top']}"

    # Per-request bookkeeping is empty whenever the engine is idle: finished and aborted requests are forgotten,
    # and the server released every finished request's object within LINGER_S.
    assert [s["frontend_requests_alive"] for s in samples] == [1] * 3, detail
    assert [s["tracked"] for s in samples] == [{"pending": 0, "decoding": 0, "by_external": 0}] * 3, detail

    # Label sets are bounded by classes x finish (or failure) reasons: the distinct header values of each round add
    # none. Which reasons a round meets depends on timing (a client's abort lands before or after the engine's first
    # token), so a later round may add a series for a reason it had not met; the label values other than reasons are
    # the warm round's, and no header value of any round is one of them.
    assert labels[0] == labels[1] == labels[2], (labels, detail)
    assert not any(v.startswith(("tenant-", "yyy")) for _, v in labels[2]), detail
    classes = {v for k, v in labels[2] if k == "class"}
    assert warm["collector_series"] <= second["collector_series"] <= third["collector_series"], detail
    assert third["collector_series"] - warm["collector_series"] <= len(classes), detail
    assert not third["graph_truncated"]
    # Not proportional to requests: 2 x ROUND more requests, nothing more held.
    for key in ("graph_objects", "graph_refs"):
        for before, after in ((warm, second), (second, third)):
            new_series = after["collector_series"] - before["collector_series"]
            assert after[key] - before[key] <= OBJECT_SLACK + PER_NEW_SERIES[key] * new_series, (key, detail)
    assert third["slokit_traced_bytes"] - warm["slokit_traced_bytes"] < BYTES_PER_REQUEST * 2 * ROUND + TABLE_SLACK, (
        detail
    )
