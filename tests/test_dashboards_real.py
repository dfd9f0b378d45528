"""Every dashboard and runbook query against real data: a real vLLM engine with slokit's exporter, scraped by a
real Prometheus running the generated rules, plus a backfilled TSDB for the GPU series (no GPU here).

Each query goes through Prometheus's HTTP API with the dashboard variables substituted as Grafana would with
every value selected. None may error, and each must return data, except queries on series that cannot exist on
this setup, which `CANNOT_EXIST` lists by name with the reason, and alert expressions (which hold only while the
SLO is breached).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from slokit import schema
from slokit.generate import alerts, dashboards, rules, runbook
from slokit.local.prometheus import LocalPrometheus, OpenMetricsWriter, PrometheusError, backfill_openmetrics
from slokit.sources import vllm as vllm_source
from slokit.spec import Spec, load_spec
from slokit.units import prom_duration
from tests.test_dashboards import substitute
from tests.test_runbook import promql_blocks

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus, pytest.mark.slow]

CANNOT_EXIST = {
    schema.RECORD_EXPECTED_DECODE_TOKENS: "the test model names no planner preset or GPU, so no expected "
    "decode tokens/s is recorded for it",
    vllm_source.DRAFT_ACCEPTANCE.drafted: "the test engine runs without speculative decoding",
    vllm_source.DRAFT_ACCEPTANCE.accepted: "the test engine runs without speculative decoding",
}
GPU_METRICS = [v for k, v in vars(schema).items() if k.startswith("GPU_") and str(v).startswith("slokit_gpu_")]
GPU_UUIDS = ("GPU-00000000-0000-0000-0000-000000000001", "GPU-00000000-0000-0000-0000-000000000002")
# The same engine read through vLLM's own metrics (no class label; thresholds on vLLM 0.32's bucket bounds).
VLLM_SOURCE_SPEC = """\
version: slokit/v1
service: engine-test-vllm
source: vllm
vllm: {version: "0.32"}
window: 28d
models:
  - {name: tiny-llama, max_num_seqs: 4}
classes:
  - name: chat
    models: [tiny-llama]
    slos:
      ttft:
        objective: {percentile: 95, threshold: 250ms}
        tiers: {target: {p50: 100ms}, acceptable: {p50: 250ms, p95: 500ms}, critical: {p50: 1s}}
      itl: {objective: {percentile: 95, threshold: 50ms}}
      tpot: {objective: {percentile: 95, threshold: 75ms}}
      e2e: {objective: {percentile: 99, threshold: 2.5s}}
alerting:
  severity: {page: critical, ticket: warning}
"""
RATE_INTERVAL = "2m"
RULE_INTERVAL = "2s"  # every group evaluates every 2s here, so the whole chain of records exists within seconds


def _gpu_history(end: float) -> str:
    """20 minutes of GPU sidecar series for two GPUs, one sample every 10s, ending at `end`."""
    w = OpenMetricsWriter()
    counters = {
        schema.GPU_NVLINK_TX: 40e9, schema.GPU_NVLINK_RX: 40e9, schema.GPU_PCIE_TX: 2e9, schema.GPU_PCIE_RX: 3e9,
    }  # fmt: skip
    gauges = {
        schema.GPU_UP: 1.0, schema.GPU_MEMORY_USED: 70e9, schema.GPU_MEMORY_TOTAL: 80e9,
        schema.GPU_MEMORY_BANDWIDTH_UTILIZATION: 0.7, schema.GPU_PEAK_MEMORY_BANDWIDTH: 3.35e12,
    }  # fmt: skip
    for name in counters:
        w.family(name.removesuffix("_total"), "counter")
    for name in gauges:
        w.family(name, "gauge")
    w.family(schema.GPU_CLOCK_EVENT_REASONS, "gauge")
    w.family(schema.GPU_XID_ERRORS.removesuffix("_total"), "counter")
    steps = 120
    for i in range(steps + 1):
        t = end - (steps - i) * 10.0
        for uuid in GPU_UUIDS:
            labels = {schema.GPU_UUID_LABEL: uuid}
            for name, per_second in counters.items():
                w.sample(name.removesuffix("_total"), name, labels, per_second * 10.0 * i, t)
            for name, value in gauges.items():
                w.sample(name, name, labels, value, t)
            for reason, active in (("gpu_idle", 1.0), ("hw_thermal_slowdown", 0.0)):
                w.sample(schema.GPU_CLOCK_EVENT_REASONS, schema.GPU_CLOCK_EVENT_REASONS,
                         {**labels, schema.GPU_REASON_LABEL: reason}, active, t)  # fmt: skip
            xid = schema.GPU_XID_ERRORS
            w.sample(xid.removesuffix("_total"), xid, {**labels, schema.GPU_XID_LABEL: "79"}, float(i >= steps - 3), t)
    return w.text()


def _send(base_url: str, model: str, request_class: str, prompt_chars: int, tokens: int) -> None:
    response = requests.post(
        f"{base_url}/v1/completions",
        json={"model": model, "prompt": "x" * prompt_chars, "max_tokens": tokens, "ignore_eos": True, "stream": True},
        headers={schema.CLASS_HEADER: request_class},
        timeout=120,
        stream=True,
    )
    # Streamed, as chat clients read: the frontend's TTFT is the first streamed token's byte (a non-streamed
    # response has no first token to time, so it counts only towards E2E).
    with response:
        response.raise_for_status()
        for _ in response.iter_lines():
            pass


def _traffic(base_url: str, model: str) -> None:
    """A bounded burst: more concurrent requests than --max-num-seqs, for both classes (some queue)."""
    jobs = [("chat", 40, 12)] * 10 + [("batch", 260, 20)] * 4
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(_send, base_url, model, c, p, t) for c, p, t in jobs]:
            future.result()


@pytest.fixture(params=["slokit", "vllm"], ids=["source-slokit", "source-vllm"])
def stack(
    request: pytest.FixtureRequest, vllm_server: Any, engine_spec_path: Path, prometheus_factory: Any, tmp_path: Path
) -> Iterator[tuple[Spec, LocalPrometheus, float, float]]:
    """Prometheus scraping the session engine every second with the generated rules, plus GPU history.

    Two specs read the same engine: the test engine's own (slokit's exporter, per-class series) and one reading
    vLLM's own metrics.
    """
    if request.param == "slokit":
        spec = load_spec(engine_spec_path)
    else:
        path = tmp_path / "engine-vllm.yaml"
        path.write_text(VLLM_SOURCE_SPEC)
        spec = load_spec(path)
    rule_file = tmp_path / "rules.yaml"
    data = rules.files(spec)[rules.rules_path(spec)]
    for group in data["groups"]:
        group["interval"] = RULE_INTERVAL
    rule_file.write_text(yaml.safe_dump(data, sort_keys=False))
    target = vllm_server.base_url.removeprefix("http://")
    prom: LocalPrometheus = prometheus_factory(
        static_targets={"vllm": [target]}, rule_files=[rule_file], scrape_interval="1s", evaluation_interval="1s"
    )
    gpu_end = time.time() - 5
    backfill_openmetrics(_gpu_history(gpu_end), prom.data_dir, workdir=tmp_path)
    prom.start()
    # The first scrape must come before the traffic, or every counter starts at its final value and rates read 0.
    prom.wait_for(spec.metrics.requests_running, timeout=60)
    time.sleep(1.5)  # one more scrape: the counters' values at `traffic_start` are the ones before any request
    traffic_start = time.time()
    _traffic(vllm_server.base_url, vllm_server.served_model_name)
    time.sleep(3)
    _traffic(vllm_server.base_url, vllm_server.served_model_name)
    # A scrape that began a second after the last response holds every request's observation.
    prom.wait_for(f"timestamp(up) > {time.time() + 1:.3f}", timeout=30, poll=0.5)
    prom.wait_for(f'{schema.RECORD_LATENCY_QUANTILE}{{class="chat", slo="ttft", quantile="0.5"}}', timeout=90)
    prom.wait_for(schema.record_burn_rate("5m"), timeout=60)
    prom.wait_rules_evaluated(timeout=60)
    # Long windows are tiled from shorter records across groups; the budget over the SLO window is the last link.
    prom.wait_for(schema.RECORD_ERROR_BUDGET_REMAINING, timeout=60)
    prom.wait_for(schema.record_burn_rate(prom_duration(spec.longest_alert_window())), timeout=60)
    yield spec, prom, gpu_end, traffic_start


def _allowed_empty(expr: str) -> str | None:
    for name, reason in CANNOT_EXIST.items():
        if name in expr:
            return reason
    return None


def _run(prom: LocalPrometheus, expr: str, gpu_end: float) -> tuple[str | None, int]:
    """(error or None, number of series); GPU queries read the backfilled history at its last sample."""
    at = gpu_end if any(name in expr for name in GPU_METRICS) else None
    try:
        return None, len(prom.query(expr, at=at).samples)
    except PrometheusError as exc:
        return str(exc), 0


def _guarded(spec: Spec, expr: str) -> bool:
    """A query shown only with at least alerting.min_requests requests in 5m, or only below it ("too little traffic"):
    on a panel that has both, exactly one returns data, depending on the traffic."""
    least = spec.alerting.min_requests
    return (
        f">= {least})" in expr
        or f"< {least}) * 0" in expr
        or schema.RECORD_CONSISTENCY_LOWER in expr  # recorded with the traffic guard inside
        or schema.RECORD_CONSISTENCY_UPPER in expr
    )


def test_every_dashboard_and_runbook_query_returns_data(stack: tuple[Spec, LocalPrometheus, float, float]) -> None:
    spec, prom, gpu_end, _ = stack
    checks: list[tuple[str, str, bool]] = []  # where, PromQL, must be non-empty
    either: dict[str, list[str]] = {}  # panel -> its traffic-guarded queries, at least one of which has data
    for name, board in dashboards.build(spec).dashboards.items():
        for panel_id, title, expr in dashboards.queries(board):
            where = f"{name}#{panel_id} {title}"
            if _guarded(spec, expr) and " or on (" not in expr:  # the tier state holds both sides in one query
                either.setdefault(where, []).append(substitute(expr, spec, RATE_INTERVAL))
                continue
            checks.append((where, substitute(expr, spec, RATE_INTERVAL), True))
        for expr in dashboards.variable_queries(board):
            inner = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
            assert inner is not None
            checks.append((f"{name} variable {inner.group(2)}", substitute(inner.group(1), spec), True))
        for expr in dashboards.annotation_queries(board):  # firing alerts: none need be firing now
            checks.append((f"{name} alert annotations", substitute(expr, spec), False))
    alert_rules = alerts.alert_rules(spec)
    alert_exprs = {rule.expr.strip() for rule in alert_rules}
    for expr in dict.fromkeys(promql_blocks(runbook.render(spec, alert_rules))):
        checks.append(("runbook", expr, expr not in alert_exprs))
    errors, empty = [], []
    for where, expr, must_have_data in checks:
        error, series = _run(prom, expr, gpu_end)
        if error is not None:
            errors.append(f"{where}: {error}\n    {expr}")
        elif series == 0 and must_have_data and _allowed_empty(expr) is None:
            empty.append(f"{where}:\n    {expr}")
    for where, exprs in either.items():
        results = [_run(prom, expr, gpu_end) for expr in exprs]
        errors.extend(f"{where}: {error}\n    {expr}" for (error, _), expr in zip(results, exprs, strict=True) if error)
        if not any(series for _, series in results):
            empty.append(f'{where}: neither the signal nor "too little traffic":\n    ' + "\n    ".join(exprs))
    assert not errors, "queries failed:\n" + "\n".join(errors)
    assert not empty, "queries returned no data:\n" + "\n".join(empty)
    # The exceptions are real: each listed series is absent, and no other query was excused.
    for name in CANNOT_EXIST:
        assert not prom.query(f"{{__name__={name!r}}}".replace("'", '"')).samples, name
    assert len(checks) > 100


def test_variables_and_engine_label_come_from_the_engine(stack: tuple[Spec, LocalPrometheus, float, float]) -> None:
    spec, prom, _, _ = stack
    board = dashboards.build(spec).dashboards["debugging"]
    (expr,) = dashboards.variable_queries(board)
    inner = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
    assert inner is not None
    result = prom.query(substitute(inner.group(1), spec))
    assert {s.labels.get(inner.group(2)) for s in result.samples} == {"0"}


# What the backfilled GPU history holds per GPU, by the series a debugging panel plots (numbers written by hand
# from `_gpu_history`, not read from the generator).
GPU_PANEL_VALUES = {
    "HBM used": {schema.GPU_MEMORY_USED: 70e9, schema.GPU_MEMORY_TOTAL: 80e9},
    "NVLink throughput": {schema.GPU_NVLINK_TX: 40e9, schema.GPU_NVLINK_RX: 40e9},
    "PCIe throughput": {schema.GPU_PCIE_TX: 2e9, schema.GPU_PCIE_RX: 3e9},
    "GPU sidecar up": {schema.GPU_UP: 1.0},
}


def test_panels_read_the_values_that_were_written(stack: tuple[Spec, LocalPrometheus, float, float]) -> None:
    """Not just data: the GPU panels read the backfilled figures, and the SLI counters count the requests sent."""
    spec, prom, gpu_end, traffic_start = stack
    board = dashboards.build(spec).dashboards["debugging"]
    seen: set[str] = set()
    for _, title, expr in dashboards.queries(board):
        expected = GPU_PANEL_VALUES.get(title)
        if expected is None:
            continue
        (metric,) = [name for name in expected if name in expr]
        answer = prom.query(substitute(expr, spec, RATE_INTERVAL), at=gpu_end)
        assert {s.labels.get(schema.GPU_UUID_LABEL) for s in answer.samples} == set(GPU_UUIDS), expr
        for sample in answer.samples:
            assert sample.value == pytest.approx(expected[metric], rel=1e-6), expr
        seen.add(metric)
    assert seen == {m for values in GPU_PANEL_VALUES.values() for m in values}
    # Both bursts of `_traffic` came after `traffic_start`: 20 chat and 8 batch requests, 28 in all. The baseline is
    # each series' last scraped value before the traffic (a series that did not exist yet starts from 0), read at
    # `traffic_start`; the final value is its newest sample.
    count = spec.metrics.latency[schema.Sli.TTFT] + "_count"

    def by_key(samples: Any) -> dict[str, float]:
        totals: dict[str, float] = {}
        for sample in samples:
            key = sample.labels.get(spec.metrics.class_label, "all") if spec.source.name == "slokit" else "all"
            totals[key] = totals.get(key, 0.0) + sample.value
        return totals

    before = by_key(prom.query(count, at=traffic_start).samples)
    after = by_key(prom.query(count).samples)
    got = {key: value - before.get(key, 0.0) for key, value in after.items()}
    got = {k: v for k, v in got.items() if v}  # `other` saw none
    assert got == ({"chat": 20, "batch": 8} if spec.source.name == "slokit" else {"all": 28})
