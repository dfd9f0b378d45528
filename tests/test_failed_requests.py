"""Requests that end before their first token: counted by the exporter, and bad TTFT and E2E events in the rules.

* The real engine: streamed requests the client abandons while they wait in the engine's queue show up in the
  frontend's and the engine's failure counters of their class, in no latency histogram, and the generated rules fed
  with those counters make them bad TTFT events of the class (and page).
* The exporter on vLLM's own frontend code (no engine): finish reasons abort and error before the first token,
  requests vanished without a finish record, admission rejections, and the frontend's view of an HTTP request.
* The rules on raw series with promtool: a failure-only burst (no latency observation at all) is a 5m error ratio
  of 1 and pages; the generated promtool tests fail when the rules stop adding failures.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.exporter_overhead import FrontendSim
from slokit import schema
from slokit.exporters.classes import FRONTEND_REQUEST_VAR, FrontendRequest, request_class
from slokit.generate import alerts, generate_all, rules
from slokit.generate.writer import write_files
from slokit.local.prometheus import run_rule_tests
from slokit.local.vllm_server import VllmServer
from slokit.promql import selector
from slokit.schema import FailReason, Sli
from slokit.sources import exporter as exporter_source
from slokit.spec import load_spec, load_spec_text
from slokit.units import format_le
from tests.fixtures_vllm import ENGINE_SPEC, MAX_NUM_SEQS
from tests.test_exporter import make_logger, value
from tests.test_exporter_engine import Samples, scrape, total

M = exporter_source.METRICS
ROOT = Path(__file__).resolve().parent.parent


# ==============================================================================================================
# The frontend's view of one HTTP request (plain Python)
# ==============================================================================================================
def _request(status: int = 200, stream: bool = True) -> FrontendRequest:
    request = FrontendRequest(0.0)
    request.cls = 0
    content_type = b"text/event-stream" if stream else b"application/json"
    request.on_start({"status": status, "headers": [(b"content-type", content_type)]})
    return request


def test_frontend_failure_reasons() -> None:
    role_only = b'data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\n\n'
    text = b'data: {"choices": [{"text": "hi"}]}\n\n'

    gone = _request()
    gone.on_body({"body": role_only, "more_body": True}, 1.0)
    gone.on_receive({"type": "http.disconnect"})
    assert gone.failure() is FailReason.CLIENT_GONE and gone.ttft() is None and gone.e2e() is None

    served = _request()
    served.on_body({"body": text, "more_body": True}, 1.0)
    served.on_receive({"type": "http.disconnect"})  # gone after its first token: not a failure before it
    assert served.failure() is None and served.ttft() == 1.0

    error_event = _request()
    error_event.on_body({"body": b'data: {"error": {"message": "engine dead"}}\n\n', "more_body": True}, 1.0)
    error_event.on_body({"body": b"data: [DONE]\n\n", "more_body": False}, 2.0)
    error_event.on_receive({"type": "http.disconnect"})  # after the response completed: not the client's doing
    assert error_event.failure() is FailReason.ERROR and error_event.e2e() is None

    status = _request(500, stream=False)
    status.on_body({"body": b'{"error": "boom"}', "more_body": False}, 1.0)
    assert status.failure() is FailReason.ERROR

    stopped = _request()  # the app raised: the response never finished, the client is still there
    assert stopped.failure() is FailReason.ERROR

    empty = _request()  # a complete answer without content (an immediate stop) is an answer
    empty.on_body({"body": role_only, "more_body": False}, 1.0)
    assert empty.failure() is None and empty.e2e() == 1.0

    plain = _request(stream=False)
    plain.on_body({"body": b'{"choices": []}', "more_body": False}, 1.0)
    assert plain.failure() is None and not plain.streamed()
    plain.stream = True  # what the engine request said wins over the content type
    assert plain.streamed()

    body = FrontendRequest(0.0)
    body.on_receive({"type": "http.request", "body": b'{"stream": true, "prio', "more_body": True})
    body.on_receive({"type": "http.request", "body": b'rity": 5, "prompt": "x"}'})
    assert body.request_fields() == (True, 5)
    assert FrontendRequest(0.0).request_fields() == (None, None)


# ==============================================================================================================
# The stat logger on vLLM's frontend code
# ==============================================================================================================
@pytest.fixture(scope="module")
def vllm_config() -> Any:
    from bench.exporter_overhead import make_vllm_config

    return make_vllm_config()


def _failed(logger: Any, cls: str, reason: str, **labels: str) -> float:
    return value(logger, M.failed or "", **{"class": cls, schema.FAIL_REASON_LABEL: reason, **labels})


@pytest.mark.vllm
def test_aborts_before_the_first_token_are_failures_and_later_ones_not(vllm_config: Any) -> None:
    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=21)
    started = sim.add("chat", 10, 50)
    scheduler, iteration = sim.step()  # its first token
    logger.record(scheduler, iteration)
    queued = [sim.add("chat", 10, 50) for _ in range(3)]  # admitted, never scheduled
    logger._next_sweep = 0.0
    scheduler, iteration = sim.step(batch=0, abort=[started, *queued])
    logger.record(scheduler, iteration)
    assert _failed(logger, "chat", "abort", engine="0") == 3
    assert value(logger, M.requests_finished, **{"class": "chat", M.finish_reason_label: "abort"}) == 4
    assert value(logger, M.latency[Sli.TTFT] + "_count", **{"class": "chat"}) == 1  # no fake observation
    assert value(logger, exporter_source.CLASS_REQUESTS_WAITING, **{"class": "chat"}) == 0


@pytest.mark.vllm
def test_engine_errors_before_the_first_token_are_failures_not_latencies(vllm_config: Any) -> None:
    from vllm.v1.engine import EngineCoreOutput, FinishReason
    from vllm.v1.metrics.stats import IterationStats

    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=22)
    sim.add("batch", 10, 5)
    internal = next(iter(sim.live))
    del sim.live[internal]
    iteration = IterationStats()
    output = EngineCoreOutput(request_id=internal, new_token_ids=[], finish_reason=FinishReason.ERROR)
    sim.processor.process_outputs([output], time.monotonic(), iteration)
    logger.record(None, iteration)
    assert _failed(logger, "batch", "error", engine="0") == 1
    assert value(logger, M.latency[Sli.E2E] + "_count", **{"class": "batch"}) == 0
    assert value(logger, M.requests_finished, **{"class": "batch", M.finish_reason_label: "error"}) == 1


@pytest.mark.vllm
def test_admission_rejections_are_failures_of_their_class(vllm_config: Any) -> None:
    logger = make_logger(vllm_config)
    frontend = FrontendRequest(0.0)
    frontend.on_receive({"type": "http.request", "body": b'{"stream": true, "prompt": "x"}'})
    token = FRONTEND_REQUEST_VAR.set(frontend)
    try:
        with request_class("chat"):
            logger.record_admission_rejection("max_num_queued_reqs")
    finally:
        FRONTEND_REQUEST_VAR.reset(token)
    assert _failed(logger, "chat", "rejected", engine="") == 1
    assert frontend.rejected and frontend.cls == 0 and frontend.stream is True
    frontend.on_start({"status": 503, "headers": [(b"content-type", b"application/json")]})
    logger.frontend.observe(frontend)
    failed = M.frontend_failed or ""
    assert value(logger, failed, **{"class": "chat", schema.FAIL_REASON_LABEL: "rejected", "stream": "true"}) == 1
    assert value(logger, M.frontend_latency[Sli.E2E] + "_count") == 0


# ==============================================================================================================
# The real engine: clients that give up while their requests wait in the queue
# ==============================================================================================================
ABANDONED = 6  # streamed chat requests abandoned while queued behind the blockers
MIN_SEEN = 4  # at least this many must have had no first token when their client left (the queue makes it all)
SCALE = 10  # the promtool input repeats the scraped growth this many times a minute
BLOCKER_TOKENS = 480  # each blocker holds an engine slot for this many decode steps (the prompt is 5 tokens of 512)
BLOCKERS = 10 * MAX_NUM_SEQS  # ten rounds of blockers queued ahead of the chat requests (vLLM schedules FCFS), so
# the chat requests wait for all of them even when the engine decodes fast. On a loaded machine the API server can
# take seconds to answer a scrape, so the queue it reports may be seconds old (once 15 blockers were reported waiting
# when 17 of 24 had already finished): ten rounds leave several seconds of queue beyond what a stale scrape shows.
QUEUED_AHEAD = 3 * MAX_NUM_SEQS  # the chat requests are sent only while at least three rounds still wait ahead
ROUNDS = 4  # rounds of abandoned requests at most (see the test)


def _completion(server: VllmServer, header: str, max_tokens: int, stream: bool) -> bytes:
    body = {"model": server.served_model_name, "prompt": "hold", "max_tokens": max_tokens, "ignore_eos": True,
            "stream": stream, "temperature": 0}  # fmt: skip
    payload = json.dumps(body).encode()
    return (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"{schema.CLASS_HEADER}: {header}\r\ncontent-length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def _blocker(server: VllmServer, done: list[int]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    try:
        body = json.dumps({"model": server.served_model_name, "prompt": "hold", "max_tokens": BLOCKER_TOKENS,
                           "ignore_eos": True, "temperature": 0})  # fmt: skip
        connection.request("POST", "/v1/completions", body=body,
                           headers={"content-type": "application/json", schema.CLASS_HEADER: "batch"})  # fmt: skip
        response = connection.getresponse()
        response.read()
        done.append(response.status)
    finally:
        connection.close()


def _wait(server: VllmServer, test: Any, timeout: float, trace: list[str] | None = None) -> Samples:
    """Scrape until `test` holds or `timeout` passes; each scrape's queue state goes to `trace` (for the message
    of a failed assertion: which requests waited, ran and finished, and when)."""
    start = time.monotonic()
    while True:
        samples = scrape(server)
        if trace is not None:
            waiting, running = exporter_source.CLASS_REQUESTS_WAITING, exporter_source.CLASS_REQUESTS_RUNNING
            finished = M.frontend_latency[Sli.E2E] + "_count"
            trace.append(
                f"{time.monotonic() - start:.2f}s waiting batch={total(samples, waiting, **{'class': 'batch'}):g}"
                f" chat={_chat(samples, waiting):g} running chat={_chat(samples, running):g}"
                f" finished chat={_chat(samples, finished):g}"
            )
        if test(samples) or time.monotonic() - start > timeout:
            return samples
        time.sleep(0.1)


def _chat(samples: Samples, name: str, **labels: str) -> float:
    return total(samples, name, **{"class": "chat", **labels})


@dataclass
class _Round:
    """One round of abandoned requests: the scrapes before and after, how many waited together, the trace."""

    before: Samples
    after: Samples
    queued: float
    trace: list[str]


def _abandon_round(server: VllmServer) -> _Round:
    """Queue ABANDONED streamed chat requests behind rounds of blockers, reset their connections, and wait until
    each is settled: counted as a failure by the frontend (and the engine), or finished normally (the server did
    not notice the client leaving before it answered; uvicorn and vLLM decide that, not slokit)."""
    frontend_failed, engine_failed = M.frontend_failed or "", M.failed or ""
    before = scrape(server)
    done: list[int] = []
    blockers = [threading.Thread(target=_blocker, args=(server, done)) for _ in range(BLOCKERS)]
    for thread in blockers:
        thread.start()
    sockets: list[socket.socket] = []
    trace: list[str] = []

    def batch_waiting(s: Samples) -> float:
        return total(s, exporter_source.CLASS_REQUESTS_WAITING, **{"class": "batch"})

    def grew(s: Samples, name: str) -> float:
        return _chat(s, name) - _chat(before, name)

    def settled(s: Samples) -> bool:  # no chat request left in the frontend's view, each failure seen by the engine
        in_flight = _chat(s, exporter_source.CLASS_REQUESTS_WAITING) + _chat(s, exporter_source.CLASS_REQUESTS_RUNNING)
        return in_flight == 0 and grew(s, engine_failed) >= grew(s, frontend_failed)

    try:
        # Every engine slot busy and at least three rounds of blockers queued (the engine may already have finished
        # some: how fast it decodes depends on the machine), then the chat requests queue behind them.
        ahead = batch_waiting(_wait(server, lambda s: batch_waiting(s) >= QUEUED_AHEAD, 120, trace))
        # Blockers all done before QUEUED_AHEAD waited at once (a fast or a starved engine): the chat requests may
        # not queue, and such a round is run again (see the caller); it goes on so its accounting is still checked.
        trace.append(f"blockers waiting {ahead}, done {len(done)}")
        for _ in range(ABANDONED):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(_completion(server, "chat", 8, stream=True))
            sockets.append(sock)
        trace.append("chat requests sent")
        waiting = _wait(server, lambda s: _chat(s, exporter_source.CLASS_REQUESTS_WAITING) >= ABANDONED, 60, trace)
        queued = _chat(waiting, exporter_source.CLASS_REQUESTS_WAITING)
        for sock in sockets:  # the clients give up before any byte of the answer: the connection is reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        sockets.clear()
        # The engine's sweep runs every SWEEP_INTERVAL_S while it works; on a loaded machine the API server takes
        # a while to see the closed sockets and vLLM to abort, so the deadline is generous (it returns as soon).
        trace.append("chat clients gone")
        after = _wait(server, settled, 180, trace)
    finally:
        for sock in sockets:
            sock.close()
        for thread in blockers:
            thread.join(timeout=300)
    assert done == [200] * BLOCKERS
    assert settled(after), trace[-5:]
    return _Round(before, after, queued, trace)


@pytest.mark.vllm
@pytest.mark.prometheus
def test_clients_gone_before_the_first_token_are_bad_ttft_events_of_their_class(
    vllm_server: VllmServer, tmp_path: Path, promtool_path: str
) -> None:
    frontend_failed, engine_failed = M.frontend_failed or "", M.failed or ""
    ttft_frontend, ttft_engine = M.frontend_latency[Sli.TTFT], M.latency[Sli.TTFT]

    # Whether the server notices a reset connection of a request that waits in the engine's queue is uvicorn's and
    # vLLM's doing; now and then (a loaded machine) it misses all of them and answers them as if nobody left. Up
    # to ROUNDS rounds, until one has at least MIN_SEEN noticed; every round's accounting is checked the same way.
    # A round whose chat requests were never seen waiting together (on a loaded machine the engine can drain the
    # blockers before they arrive, and they are served) abandoned nothing while queued: it is run again too.
    def noticed(one: _Round) -> float:
        return _chat(one.after, frontend_failed) - _chat(one.before, frontend_failed)

    rounds: list[_Round] = []
    for _ in range(ROUNDS):
        rounds.append(_abandon_round(vllm_server))
        if rounds[-1].queued >= MIN_SEEN and noticed(rounds[-1]) >= MIN_SEEN:
            break
    # The round checked below: the one that queued and was noticed, else the one that came closest (a later round
    # that never queued must not hide an earlier one that did).
    best = max(rounds, key=lambda one: (min(one.queued, noticed(one)) >= MIN_SEEN, one.queued >= MIN_SEEN,
                                        noticed(one)))  # fmt: skip
    before, after, queued, trace = best.before, best.after, best.queued, best.trace
    assert queued >= MIN_SEEN, ([r.queued for r in rounds], trace[:20], trace[-5:])

    def grew(name: str, **labels: str) -> float:
        return _chat(after, name, **labels) - _chat(before, name, **labels)

    gone = grew(frontend_failed, reason=FailReason.CLIENT_GONE.value, stream="true")
    aborted = grew(engine_failed, reason=FailReason.ABORT.value)
    print(f"rounds={len(rounds)} queued={queued} frontend client_gone={gone} engine abort={aborted}")
    assert MIN_SEEN <= gone <= ABANDONED and MIN_SEEN <= aborted <= ABANDONED, (len(rounds), gone, aborted, trace[-5:])
    assert grew(frontend_failed) == gone and grew(engine_failed) == aborted  # under one reason each
    # Their class only, and no latency was made up for them.
    assert total(after, frontend_failed, **{"class": "batch"}) == total(before, frontend_failed, **{"class": "batch"})
    first_tokens = grew(ttft_frontend + "_count")
    assert first_tokens <= ABANDONED - gone and grew(ttft_engine + "_count") <= ABANDONED - aborted
    assert grew(M.frontend_latency[Sli.E2E] + "_count") <= ABANDONED - gone  # only those nobody saw leave

    # The generated rules on those counters: the failures are TTFT events of class chat, all bad, and it pages.
    spec = load_spec(ENGINE_SPEC)
    write_files({k: v for k, v in generate_all([spec]).items() if k.startswith("rules/")}, tmp_path, check=False)
    series = []  # the scraped growth, SCALE times a minute for 70 minutes (above any traffic guard)
    for name in (ttft_frontend + "_bucket", frontend_failed):
        for key, count in _deltas(before, after, name).items():
            series.append({"series": selector(name, [(k, "=", v) for k, v in key]),
                           "values": f"0+{count * SCALE:g}x70"})  # fmt: skip
    slo = [("service", "=", spec.service), ("class", "=", "chat"), ("slo", "=", "ttft")]
    bad = f"sum({selector(schema.record_sli_total('5m'), slo)}) - sum({selector(schema.record_sli_good('5m'), slo)})"
    page = f'max(ALERTS{{alertname="{alerts.NAME_BURN}",alertstate="firing",class="chat",slo="ttft"}})'
    expected_bad = 5 * SCALE * (gone + first_tokens - _good_ttfts(spec, before, after))
    doc = {
        "rule_files": [f"rules/{spec.service}.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": bad, "eval_time": "30m", "exp_samples": [{"value": expected_bad}]},
            {"expr": page, "eval_time": "65m", "exp_samples": [{"value": 1}]},
        ]}],
    }  # fmt: skip
    test_file = tmp_path / "failed.test.yaml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = run_rule_tests([test_file])
    assert result.ok, result.output[-4000:]


def _deltas(before: Samples, after: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Per-series growth of one name for class chat (labels as scraped, engine and all)."""
    then = {tuple(sorted(lab.items())): v for n, lab, v in before if n == name and lab.get("class") == "chat"}
    out = {}
    for n, lab, v in after:
        if n == name and lab.get("class") == "chat":
            key = tuple(sorted(lab.items()))
            out[key] = v - then.get(key, 0.0)
    return out


def _good_ttfts(spec: Any, before: Samples, after: Samples) -> float:
    """Frontend TTFTs of class chat at or under the objective's threshold that arrived meanwhile."""
    objective = spec.request_class("chat").slos[Sli.TTFT].objective
    le = format_le(objective.threshold)
    name = M.frontend_latency[Sli.TTFT] + "_bucket"
    return sum(v for key, v in _deltas(before, after, name).items() if dict(key)["le"] == le)


# ==============================================================================================================
# The rules on raw series (promtool)
# ==============================================================================================================
SPEC = """
version: slokit/v1
service: failing
source: slokit
window: 28d
models:
  - {name: m, max_num_seqs: 64}
classes:
  - name: chat
    match: {header: chat}
    slos:
      ttft:
        objective: {percentile: 95, threshold: 1s}
      e2e:
        objective: {percentile: 95, threshold: 10s}
alerting:
  severity: {page: critical, ticket: warning}
"""


def _histogram(name: str, bounds: tuple[float, ...], values: str) -> list[dict[str, str]]:
    """Every bucket of one frontend histogram (class chat), all following `values` (every request fast)."""
    out = []
    for bound in [*bounds, math.inf]:
        le = "+Inf" if math.isinf(bound) else format_le(bound)
        out.append({"series": f'{name}_bucket{{model="m",class="chat",le="{le}"}}', "values": values})
    return out


def _run(tmp_path: Path, rule_groups: list[dict[str, Any]], series: list[dict[str, str]],
         checks: list[tuple[str, str, float]]) -> Any:  # fmt: skip
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False), encoding="utf-8")
    doc = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "group_eval_order": [g["name"] for g in rule_groups],
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": expr, "eval_time": at, "exp_samples": [{"labels": "{}", "value": v}]} for expr, at, v in checks
        ]}],
    }  # fmt: skip
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return run_rule_tests([tmp_path / "rules.test.yaml"])


def _groups(spec: Any) -> list[dict[str, Any]]:
    groups = [g.to_data() for g in rules.rule_groups(spec)]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return groups


def _ratio(sli: Sli) -> str:
    return f'sum(slokit:sli_error:ratio5m{{class="chat",slo="{sli.value}"}})'


def _page(sli: Sli) -> str:
    firing = f'ALERTS{{alertname="{alerts.NAME_BURN}",alertstate="firing",slo="{sli.value}",severity="critical"}}'
    return f"clamp_max(count({firing}) or vector(0), 1)"


def _failure_burst(spec: Any) -> list[dict[str, str]]:
    """An hour of healthy traffic (60/min, every request fast), then every request fails before its first token:
    the histograms stand still, the frontend's failure counter grows 60/min (clients gone, streams)."""
    series: list[dict[str, str]] = []
    for sli in (Sli.TTFT, Sli.E2E):
        series += _histogram(M.frontend_latency[sli], spec.buckets(sli), "0+60x60 3600x30")
    failed = f'{M.frontend_failed}{{model="m",class="chat",reason="client_gone",stream="true"}}'
    series.append({"series": failed, "values": "0x60 60+60x30"})
    return series


@pytest.mark.prometheus
def test_a_failure_only_burst_is_a_full_error_ratio_and_pages(tmp_path: Path, promtool_path: str) -> None:
    spec = load_spec_text(SPEC, "failing.yaml")
    checks: list[tuple[str, str, float]] = []
    for sli in (Sli.TTFT, Sli.E2E):
        checks += [(_ratio(sli), "55m", 0), (_ratio(sli), "70m", 1), (_page(sli), "55m", 0), (_page(sli), "75m", 1)]
    checks.append(('sum(slokit:sli_total:increase5m{class="chat",slo="ttft"})', "70m", 300))
    result = _run(tmp_path, _groups(spec), _failure_burst(spec), checks)
    assert result.ok, result.output[-4000:]


@pytest.mark.prometheus
def test_without_the_failures_the_same_burst_reads_healthy(tmp_path: Path, promtool_path: str) -> None:
    """What the rules did before failures counted (and would do again if they stopped): nothing to see."""
    spec = load_spec_text(SPEC, "failing.yaml")
    groups = _groups(spec)
    text = yaml.safe_dump(groups).replace(M.frontend_failed or "", "slokit_nothing_total")
    checks = [(_ratio(Sli.TTFT), "70m", 0), (_page(Sli.TTFT), "75m", 0)]
    result = _run(tmp_path, yaml.safe_load(text), _failure_burst(spec), checks)
    assert result.ok, result.output[-4000:]


@pytest.mark.prometheus
def test_generated_tests_fail_when_the_rules_stop_adding_failures(tmp_path: Path, promtool_path: str) -> None:
    spec = load_spec_text(SPEC, "failing.yaml")
    write_files({k: v for k, v in generate_all([spec]).items() if k.startswith("rules/")}, tmp_path, check=False)
    rule_file = tmp_path / "rules" / "failing.rules.yaml"
    tests = tmp_path / "rules" / "failing.rules.test.yaml"
    assert run_rule_tests([tests]).ok
    text = rule_file.read_text()
    assert M.frontend_failed and M.frontend_failed in text
    rule_file.write_text(text.replace(M.frontend_failed, "slokit_nothing_total"))
    broken = run_rule_tests([tests])
    assert not broken.ok
    assert "fails before its first token" in broken.output
