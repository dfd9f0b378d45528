"""Pure parts of the probe: SSE parsing, HTTP chunked framing, arrivals, checks and the search algorithm."""

from __future__ import annotations

import asyncio
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slokit.probe.client import MALFORMED_SSE, NO_CONTENT, STREAM_ERROR, RawResponse, _Connection, parse_stream
from slokit.probe.load import LevelRun, Limits, Load, RequestRecord, arrival_offsets, endpoint_url, finalize
from slokit.probe.results import Criteria, summarize
from slokit.probe.search import SearchConfig, search
from slokit.spec import load_spec_text

SPEC = """
version: slokit/v1
service: unit
source: slokit
window: 28d
models: [{name: m}]
classes:
  - name: chat
    slos:
      ttft:
        objective: {percentile: 95, threshold: 50ms}
        tiers: {acceptable: {p95: 50ms}}
      e2e:
        objective: {percentile: 99, threshold: 10s}
        consistency: {max_p99_over_p50: 1.6}
alerting:
  runbook_url: https://runbooks.example.com/{service}#{alert}
"""


def _event(obj: str) -> bytes:
    return b"data: " + obj.encode() + b"\n\n"


def test_role_chunk_and_usage_chunk_do_not_move_ttft_or_e2e() -> None:
    role = _event('{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}')
    token = _event('{"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}]}')
    last = _event('{"id":"c1","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]}')
    usage = _event('{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}')
    pieces = [(1.0, role), (2.0, token), (3.0, last), (4.0, usage), (5.0, b"data: [DONE]\n\n")]
    result = parse_stream(pieces, "chat")
    assert result.content_times == [2.0, 3.0]
    assert result.usage == {"prompt_tokens": 3, "completion_tokens": 2}
    assert result.done_seen and result.finish_reason == "length" and result.response_id == "c1"


def test_events_split_across_reads_take_the_stamp_of_the_read_that_completed_them() -> None:
    text = _event('{"choices":[{"text":"a"}]}') + b": keep-alive comment\n\n" + _event('{"choices":[{"text":"b"}]}')
    text = text.replace(b"\n", b"\r\n")
    pieces = [(1.0, text[:10]), (2.0, text[10:40]), (3.0, text[40:])]
    result = parse_stream(pieces, "completions")
    assert result.content_times == [2.0, 3.0]


def test_usage_repeated_on_every_chunk_takes_the_last_not_the_sum() -> None:
    pieces = [
        (float(i), _event(f'{{"choices":[{{"text":"x"}}],"usage":{{"completion_tokens":{i}}}}}')) for i in range(1, 4)
    ]
    assert parse_stream(pieces, "completions").usage == {"completion_tokens": 3}


def _finalized(events: list[tuple[float, bytes]]) -> RequestRecord:
    record = RequestRecord(0, False, 1, 4)
    record.t_send = 0.0
    pieces = [*events, (events[-1][0], b"data: [DONE]\n\n")]
    record.raw = RawResponse(200, {"content-type": "text/event-stream"}, 0.0, 0.5, 9.0, pieces, [False] * len(pieces))
    finalize(record, "completions")
    return record


def test_tokens_come_from_usage_when_text_events_are_fewer_than_tokens() -> None:
    # A detokenizer holds back partial UTF-8 and one event can carry several tokens: 2 text events for 5 tokens.
    record = _finalized([
        (1.0, _event('{"choices":[{"text":"ab"}]}')),
        (2.0, _event('{"choices":[{"text":""}]}')),
        (3.0, _event('{"choices":[{"text":"\u00e9!","finish_reason":"length"}]}')),
        (3.5, _event('{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}')),
    ])  # fmt: skip
    assert record.ok and record.content_times == [1.0, 3.0]
    assert (record.output_tokens, record.tokens_source) == (5, "usage")
    assert record.ttft == 1.0 and record.e2e == 3.0
    assert record.tpot == pytest.approx(2.0 / 4)  # the server's 5 tokens, not the 2 events
    assert record.itls == [2.0]  # ITL is per event: what the user saw


def test_tokens_without_text_are_no_content_and_the_detail_says_the_servers_count() -> None:
    record = _finalized([
        (1.0, _event('{"choices":[{"text":""}]}')),
        (2.0, _event('{"choices":[{"text":"","finish_reason":"length"}]}')),
        (2.5, _event('{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}')),
    ])  # fmt: skip
    assert not record.ok and record.reason == NO_CONTENT
    assert "4 completion tokens" in record.detail and "partial UTF-8" in record.detail
    assert math.isnan(record.ttft)


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"data: {oops\n\n", MALFORMED_SSE), (b"data: [1, 2]\n\n", MALFORMED_SSE),
     (b'data: {"error": {"message": "boom"}}\n\n', STREAM_ERROR)],
)  # fmt: skip
def test_bad_events_are_failures(data: bytes, reason: str) -> None:
    result = parse_stream([(1.0, _event('{"choices":[{"text":"a"}]}') + data)], "completions")
    assert result.failure == reason
    assert result.content_times == [1.0]


@settings(max_examples=60, deadline=None)
@given(
    body_parts=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=10),
)
def test_chunked_framing_survives_any_split(body_parts: list[bytes], cuts: list[int]) -> None:
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    for part in body_parts:
        wire += b"%x\r\n%s\r\n" % (len(part), part)
    wire += b"0\r\n\r\n"
    loop = asyncio.new_event_loop()
    try:
        conn = _Connection(loop)

        class _Transport(asyncio.Transport):
            def write(self, data: bytes | bytearray | memoryview) -> None:
                pass

            def abort(self) -> None:
                pass

        conn.connection_made(_Transport())
        future = conn.send(b"GET / HTTP/1.1\r\n\r\n", deadline=math.inf)
        positions = sorted({c for c in cuts if c < len(wire)})
        for start, end in zip([0, *positions], [*positions, len(wire)], strict=True):
            conn.data_received(wire[start:end])
        assert future.done()
        response = future.result()
    finally:
        loop.close()
    assert response.complete and response.error is None and response.status == 200
    assert response.body == b"".join(body_parts)


def test_arrivals_are_poisson_gamma_or_even() -> None:
    rng = random.Random(1)
    even = arrival_offsets(10.0, math.inf, 5, rng)
    assert even == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    for burstiness in (1.0, 0.25, 4.0):
        offsets = arrival_offsets(50.0, burstiness, 20_000, random.Random(2))
        gaps = [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]
        assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.05)
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


@pytest.mark.parametrize(
    ("url", "api", "expected"),
    [
        ("http://h:8000", None, ("http://h:8000/v1/completions", "completions")),
        ("http://h:8000/v1", "chat", ("http://h:8000/v1/chat/completions", "chat")),
        ("http://h:8000/v1/chat/completions", None, ("http://h:8000/v1/chat/completions", "chat")),
        ("https://h/v1/completions", None, ("https://h/v1/completions", "completions")),
    ],
)
def test_endpoint_url(url: str, api: str | None, expected: tuple[str, str]) -> None:
    assert endpoint_url(url, api) == expected  # type: ignore[arg-type]


def _record(index: int, ttft: float, e2e: float, ok: bool = True) -> RequestRecord:
    record = RequestRecord(index, False, 10, 5)
    record.t_sched = record.t_send = float(index)
    if ok:
        record.ok = True
        record.t_first_content = index + ttft
        record.t_last_content = index + e2e
        record.content_times = [index + ttft + (e2e - ttft) * i / 4 for i in range(5)]
        record.output_tokens = 5
        record.t_done = index + e2e
    else:
        record.reason = "http_500"
        record.t_done = index + 0.01
    return record


def _run(load: Load, records: list[RequestRecord]) -> LevelRun:
    return LevelRun(load, Limits(), records, 0.0, float(len(records)), "requests")


def test_checks_objective_tier_consistency_and_errors() -> None:
    criteria = Criteria.from_class(load_spec_text(SPEC).request_class("chat"))
    keys = [c.key for c in criteria.constraints]
    assert keys == ["ttft.objective", "ttft.acceptable.p95", "e2e.objective", "e2e.consistency", "errors"]
    good = [_record(i, 0.02, 1.0) for i in range(100)]
    summary = summarize(Load.concurrency(1), [_run(Load.concurrency(1), good)], criteria)
    assert summary.passed and summary.goodput > 0
    slow = [_record(i, 0.02 if i < 90 else 0.2, 1.0) for i in range(100)]  # 90% within 50 ms: objective fails
    checks = {
        c.constraint.key: c for c in summarize(Load.concurrency(1), [_run(Load.concurrency(1), slow)], criteria).checks
    }
    assert not checks["ttft.objective"].passed and checks["ttft.objective"].value == pytest.approx(0.9)
    assert not checks["ttft.acceptable.p95"].passed
    spread = [_record(i, 0.02, 1.0 if i < 95 else 3.0) for i in range(100)]  # p99/p50 = 3
    checks = {
        c.constraint.key: c
        for c in summarize(Load.concurrency(1), [_run(Load.concurrency(1), spread)], criteria).checks
    }
    assert not checks["e2e.consistency"].passed and checks["e2e.objective"].passed
    failing = [_record(i, 0.02, 1.0, ok=i >= 2) for i in range(100)]  # 2% failed, 1% allowed
    checks = {
        c.constraint.key: c
        for c in summarize(Load.concurrency(1), [_run(Load.concurrency(1), failing)], criteria).checks
    }
    assert not checks["errors"].passed and checks["errors"].value == pytest.approx(0.02)
    assert checks["ttft.objective"].value == pytest.approx(0.98)  # failed requests count as misses


def _fake_measure(limit: float, calls: list[float]):  # type: ignore[no-untyped-def]
    async def measure(load: Load, _run_index: int) -> LevelRun:
        calls.append(load.value)
        ttft = 0.02 if load.value <= limit else 0.2
        return _run(load, [_record(i, ttft, 1.0) for i in range(40)])

    return measure


@settings(max_examples=15, deadline=None)
@given(limit=st.integers(min_value=1, max_value=300), start=st.sampled_from([1, 2, 8]))
def test_concurrency_search_brackets_and_bisects_to_the_limit(limit: int, start: int) -> None:
    criteria = Criteria.from_class(load_spec_text(SPEC).request_class("chat"))
    calls: list[float] = []
    config = SearchConfig("concurrency", start=start, maximum=512, repeats=1)
    result = asyncio.run(search(_fake_measure(limit, calls), criteria, config))
    assert result.max_passing == limit and result.min_failing == limit + 1
    assert result.stopped == "converged"
    assert result.binding is not None and result.binding.constraint.key == "ttft.objective"
    assert len(calls) <= 2 * math.log2(512) + 2


def test_rate_search_converges_to_the_tolerance() -> None:
    criteria = Criteria.from_class(load_spec_text(SPEC).request_class("chat"))
    calls: list[float] = []
    config = SearchConfig("rate", start=1.0, maximum=1000.0, tolerance=0.05, repeats=1)
    result = asyncio.run(search(_fake_measure(37.3, calls), criteria, config))
    assert result.max_passing is not None and result.min_failing is not None
    assert result.max_passing <= 37.3 < result.min_failing
    assert result.min_failing - result.max_passing <= 0.05 * result.max_passing


def test_search_when_nothing_passes_or_everything_passes() -> None:
    criteria = Criteria.from_class(load_spec_text(SPEC).request_class("chat"))
    nothing = asyncio.run(search(_fake_measure(0, []), criteria, SearchConfig("concurrency", start=4, repeats=1)))
    assert nothing.max_passing is None and nothing.min_failing == 1 and nothing.stopped == "minimum"
    everything = asyncio.run(
        search(_fake_measure(10_000, []), criteria, SearchConfig("concurrency", maximum=64, repeats=1))
    )
    assert everything.max_passing == 64 and everything.min_failing is None and everything.stopped == "maximum"
    assert everything.binding is None


def test_levels_near_the_boundary_are_repeated_and_pooled() -> None:
    criteria = Criteria.from_class(load_spec_text(SPEC).request_class("chat"))
    calls: list[float] = []

    async def measure(load: Load, run_index: int) -> LevelRun:
        calls.append(load.value)
        # From 4 users on, 96% of TTFTs are within 50 ms: the 95% objective holds with margin -0.2 (a fifth of
        # the error budget left), inside `near` = 0.3, so those levels are run twice.
        slow = 4 if load.value >= 4 else 0
        records = [_record(i, 0.2 if i < slow else 0.02, 1.0) for i in range(100)]
        return _run(load, records)

    result = asyncio.run(search(measure, criteria, SearchConfig("concurrency", maximum=8, repeats=2, near=0.3)))
    assert calls.count(4.0) == 2 and calls.count(8.0) == 2  # margin -0.2: within `near`, so run twice
    assert calls.count(1.0) == 1
    assert result.level(4.0) is not None and len(result.level(4.0).runs) == 2  # type: ignore[union-attr]
    assert result.max_passing == 8


def test_coalesced_events_are_counted() -> None:
    record = RequestRecord(0, False, 1, 4)
    record.content_times = [1.0, 1.0, 2.0, 2.0]
    assert record.coalesced == 2 and record.itls == [0.0, 1.0, 0.0]
