"""slokit's stat logger on vLLM's real frontend code, without an engine.

`FrontendSim` (bench/exporter_overhead.py) runs vLLM's own `OutputProcessor` with slokit's admission hook, so
these tests see the real `RequestStateStats`, `IterationStats` and `FinishedRequestStats` objects vLLM gives
the logger; only the engine core is replaced by synthetic outputs. The real-engine tests are in
test_exporter_engine.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bench.exporter_overhead import ENGINE_SPEC, FrontendSim, make_vllm_config
from slokit.exporters.classes import (
    CLASS_HEADER_VAR,
    ClassHeaderMiddleware,
    ClassMap,
    ExporterConfigError,
    FastHistogram,
    header_from_scope,
    load_exporter_spec,
    model_label,
    plan_buckets,
)
from slokit.schema import Sli
from slokit.sources import exporter as exporter_source
from slokit.spec import load_spec

M = exporter_source.METRICS
DECLARED = ("chat", "batch", "other")


# -- helpers ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vllm_config() -> Any:
    return make_vllm_config()


def make_logger(vllm_config: Any, spec: Path | None = ENGINE_SPEC, engines: list[int] | None = None, **env: str) -> Any:
    from slokit.exporters.vllm import SlokitStatLogger

    environ = {"SLOKIT_SPEC": str(spec)} if spec else {}
    environ.update(env)
    registry = CollectorRegistry()
    logger = SlokitStatLogger(vllm_config, engines or [0], registry=registry, environ=environ)
    logger.test_registry = registry
    return logger


def samples(logger: Any) -> list[tuple[str, dict[str, str], float]]:
    text = generate_latest(logger.test_registry).decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(logger: Any, name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples(logger) if n == name and all(lab.get(k) == x for k, x in labels.items()))


def drain(sim: FrontendSim, logger: Any, engine: int = 0, batch: int | None = None) -> None:
    for _ in range(1000):
        if not sim.live:
            return
        scheduler, iteration = sim.step(batch)
        logger.record(scheduler, iteration, engine_idx=engine)
    raise AssertionError("requests did not finish")


# -- classes ---------------------------------------------------------------------------------------------------
def test_classes_follow_the_spec_and_everything_else_is_other() -> None:
    classes = ClassMap.from_spec(load_spec(ENGINE_SPEC))
    assert classes.names == DECLARED
    name = lambda *a: classes.names[classes.classify(*a)]  # noqa: E731
    assert name("chat", None, 10) == "chat"
    assert name("batch", None, 10) == "batch"
    assert name(None, 5, 10) == "chat"  # priority rule
    assert name(None, 0, 250) == "batch"  # prompt-length rule
    assert name("nope", 0, 10) == "other"
    assert name("nope", 0, 250) == "batch"  # an unknown header does not block the other rules
    assert name("CHAT", 0, 10) == "other"  # header values are exact


def test_without_a_spec_there_is_one_default_class() -> None:
    classes = ClassMap.from_spec(None)
    assert classes.names == ("default",)
    assert classes.classify("chat", 5, 1000) == 0
    assert plan_buckets(None)[Sli.TTFT] == exporter_source.DEFAULT_BUCKETS[Sli.TTFT]


def test_bad_spec_path_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "spec.yaml"
    bad.write_text("version: slokit/v1\nservice: x\n", encoding="utf-8")
    with pytest.raises(ExporterConfigError, match=r"SLOKIT_SPEC=.*spec\.yaml is not a usable slokit spec"):
        load_exporter_spec({"SLOKIT_SPEC": str(bad)})
    with pytest.raises(ExporterConfigError, match="no such file"):
        load_exporter_spec({"SLOKIT_SPEC": str(tmp_path / "missing.yaml")})
    assert load_exporter_spec({"SLOKIT_SPEC": "  "}) is None


def test_model_label_prefers_the_spec_name_when_unambiguous() -> None:
    spec = load_spec(ENGINE_SPEC)
    assert model_label(spec, "tiny-llama") == ("tiny-llama", None)
    label, warning = model_label(spec, "served-as-something-else")
    assert label == "tiny-llama" and warning is not None and "--served-model-name tiny-llama" in warning
    assert model_label(None, "x") == ("x", None)


def test_header_parsing_is_bounded() -> None:
    scope = {"type": "http", "headers": [(b"X-Slokit-Class", b" chat "), (b"x-other", b"1")]}
    assert header_from_scope(scope) == "chat"
    assert header_from_scope({"headers": [(b"x-slokit-class", b"a" * 65)]}) is None
    assert header_from_scope({"headers": [(b"x-slokit-class", "é".encode())]}) is None
    assert header_from_scope({"headers": []}) is None


def test_asgi_middleware_sets_the_header_for_the_request_only() -> None:
    seen: list[str | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(CLASS_HEADER_VAR.get())

    async def call() -> None:
        middleware = ClassHeaderMiddleware(app)
        await middleware({"type": "http", "headers": [(b"x-slokit-class", b"batch")]}, None, None)  # type: ignore[arg-type]
        await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]

    asyncio.run(call())
    assert seen == ["batch", None]
    assert CLASS_HEADER_VAR.get() is None


@pytest.mark.vllm
def test_fastapi_hook_carries_the_header_into_the_request(vllm_config: Any) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    make_logger(vllm_config)  # installs the hooks
    app = FastAPI()

    @app.post("/probe")
    async def probe() -> dict[str, str | None]:
        return {"header": CLASS_HEADER_VAR.get()}

    with TestClient(app) as client:
        assert client.post("/probe", headers={"x-slokit-class": "chat"}).json() == {"header": "chat"}
        assert client.post("/probe").json() == {"header": None}


def test_histogram_uses_le_semantics() -> None:
    hist = FastHistogram((0.1, 0.5, 1.0))
    for v in (0.1, 0.2, 0.5, 2.0):
        hist.observe(v)
    buckets, count, total = hist.snapshot()
    assert buckets == [("0.1", 1.0), ("0.5", 3.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert count == 4 and total == pytest.approx(2.8)


# -- the logger on vLLM's frontend -------------------------------------------------------------------------------
@pytest.mark.vllm
def test_per_class_counts_tokens_and_buckets(vllm_config: Any) -> None:
    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=1)
    vllm_ttfts: list[float] = []
    for i in range(9):
        sim.add("chat", 20, 4)
        sim.add(None, 250, 6)  # batch by prompt length
        sim.add(f"unknown-{i}", 20, 3)
    sim.add(None, 20, 2, priority=5)  # chat by priority
    for _ in range(100):
        if not sim.live:
            break
        scheduler, iteration = sim.step(batch=8)
        vllm_ttfts.extend(iteration.time_to_first_tokens_iter)
        logger.record(scheduler, iteration)
    assert not sim.live
    finished = M.requests_finished
    assert value(logger, finished, **{"class": "chat"}) == 10
    assert value(logger, finished, **{"class": "batch"}) == 9
    assert value(logger, finished, **{"class": "other"}) == 9
    assert value(logger, M.prompt_tokens, **{"class": "batch"}) == 9 * 250
    assert value(logger, M.generation_tokens, **{"class": "chat"}) == 9 * 4 + 2
    assert value(logger, M.latency[Sli.TTFT] + "_count") == 28
    # Each TTFT observation is the very float vLLM computed for that request.
    assert value(logger, M.latency[Sli.TTFT] + "_sum") == pytest.approx(sum(vllm_ttfts), rel=1e-9)
    # Every decode step after the first token is one ITL observation.
    assert value(logger, M.latency[Sli.ITL] + "_count", **{"class": "batch"}) == 9 * 5
    spec = load_spec(ENGINE_SPEC)
    for sli in Sli:
        les = {lab["le"] for n, lab, _ in samples(logger) if n == M.latency[sli] + "_bucket"}
        assert les == {*(repr(float(b)) for b in spec.buckets(sli)), "+Inf"}
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING) == 0
    assert value(logger, exporter_source.CLASS_REQUESTS_WAITING) == 0
    assert value(logger, exporter_source.EXPORTER_ERRORS) == 0
    assert value(logger, exporter_source.EXPORTER_INFO, class_tracking="true", spec_hash=spec.digest) == 1


@pytest.mark.vllm
def test_ten_thousand_unknown_classes_create_no_series(vllm_config: Any) -> None:
    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=2)
    for i in range(10_000):
        sim.add(f"tenant-{i}", 8, 1)
        if len(sim.live) >= 256:
            drain(sim, logger)
    drain(sim, logger)
    classes = {lab["class"] for _, lab, _ in samples(logger) if "class" in lab}
    assert classes <= set(DECLARED)
    assert value(logger, M.requests_finished, **{"class": "other"}) == 10_000
    series = {(n, tuple(sorted(lab.items()))) for n, lab, _ in samples(logger) if n.startswith(M.latency[Sli.TTFT])}
    buckets = len(load_spec(ENGINE_SPEC).buckets(Sli.TTFT)) + 1
    assert len(series) == len(DECLARED) * (buckets + 2)  # per class: buckets, _count, _sum


@pytest.mark.vllm
def test_a_rebuilt_logger_replaces_its_store_and_a_new_registry_at_a_freed_address_is_new(vllm_config: Any) -> None:
    """vLLM may build the logger again in one process: the new store replaces the old one on the registry. A
    registry that is gone is forgotten, so a new one that CPython puts at its address (same id()) is a registry
    like any other: remembered by id(), a fresh registry once failed to unregister a stranger's store (KeyError)."""
    from slokit.exporters.vllm import SlokitStatLogger

    environ = {"SLOKIT_SPEC": str(ENGINE_SPEC)}
    registry = CollectorRegistry()
    SlokitStatLogger(vllm_config, [0], registry=registry, environ=environ)
    SlokitStatLogger(vllm_config, [0], registry=registry, environ=environ)  # would raise on duplicated series
    names = [family.name for family in registry.collect()]
    assert names and len(names) == len(set(names))  # one store's families, once

    seen: set[int] = set()
    reused = 0
    for _ in range(30):
        fresh = CollectorRegistry()
        reused += id(fresh) in seen
        seen.add(id(fresh))
        SlokitStatLogger(vllm_config, [0], registry=fresh, environ=environ)
        del fresh  # no cycle holds it: freed here
    assert reused > 0  # else the loop proved nothing (CPython reuses freed addresses: 28 of 30 when written)


@pytest.mark.vllm
def test_faults_are_counted_and_never_raised(vllm_config: Any) -> None:
    logger = make_logger(vllm_config, SLOKIT_EXPORTER_DRILL_HEADER="drill")
    logger.record(None, object())  # not an IterationStats at all
    assert value(logger, exporter_source.EXPORTER_ERRORS, stage="record") == 1
    sim = FrontendSim(seed=3)
    for _ in range(3):
        sim.add("drill", 10, 2)
        sim.add("chat", 10, 2)
    drain(sim, logger)
    assert value(logger, exporter_source.EXPORTER_ERRORS, stage="finished") == 3
    assert value(logger, M.requests_finished, **{"class": "chat"}) == 3  # the rest of each batch is recorded
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING) == 0  # faulted requests are still forgotten


@pytest.mark.vllm
def test_aborted_requests_are_counted_and_forgotten(vllm_config: Any) -> None:
    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=4)
    keep = sim.add("chat", 10, 50)
    gone = sim.add("batch", 10, 50)
    scheduler, iteration = sim.step()
    logger.record(scheduler, iteration)
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING) == 2
    logger._next_sweep = 0.0
    scheduler, iteration = sim.step(abort=[gone])
    logger.record(scheduler, iteration)
    assert value(logger, M.requests_finished, **{"class": "batch", M.finish_reason_label: "abort"}) == 1
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING, **{"class": "batch"}) == 0
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING, **{"class": "chat"}) == 1
    assert keep in logger._by_external  # the running request is still tracked


def _without_request_ids(iteration: Any) -> Any:
    """vLLM 0.11 to 0.19: the same finished records, but their dataclass has no `request_id` field."""
    import dataclasses
    import types

    iteration.finished_requests = [
        types.SimpleNamespace(**{f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "request_id"})
        for r in iteration.finished_requests
    ]
    return iteration


@pytest.mark.vllm
def test_finished_records_without_request_ids_still_find_their_class(vllm_config: Any) -> None:
    """Before vLLM 0.20 a finished record does not name its request; the exporter finds it by the e2e latency vLLM
    computed from the request's own stats. Requests of different classes finish in the same batches, some in the
    batch of their first token, and an abort in between must still be counted as one."""
    logger = make_logger(vllm_config)
    sim = FrontendSim(seed=7)
    for i in range(6):
        sim.add("chat", 20, 3 + i % 3)
        sim.add("batch", 20, 3 + i % 3)  # the same lengths: the same batches, told apart by arrival only
        sim.add(f"unknown-{i}", 20, 1)  # first token and finish in one batch
    gone = sim.add("batch", 20, 50)
    logger._next_sweep = float("inf")  # the sweep, run explicitly below, must find nothing but the abort
    for step in range(100):
        if not sim.live:
            break
        scheduler, iteration = sim.step(batch=10, abort=[gone] if step == 2 else ())
        logger.record(scheduler, _without_request_ids(iteration))
    assert not sim.live
    logger._sweep()
    finished = M.requests_finished
    reason = M.finish_reason_label
    assert value(logger, finished, **{"class": "chat", reason: "length"}) == 6
    assert value(logger, finished, **{"class": "batch", reason: "length"}) == 6
    assert value(logger, finished, **{"class": "other", reason: "length"}) == 6
    assert value(logger, finished, **{"class": "batch", reason: "abort"}) == 1
    assert value(logger, finished, **{reason: "abort"}) == 1
    assert value(logger, M.latency[Sli.E2E] + "_count", **{"class": "chat"}) == 6
    assert value(logger, M.latency[Sli.E2E] + "_count", **{"class": "other"}) == 6
    assert value(logger, M.generation_tokens, **{"class": "chat"}) == 2 * (3 + 4 + 5)
    assert value(logger, exporter_source.EXPORTER_ERRORS) == 0
    assert value(logger, exporter_source.CLASS_REQUESTS_RUNNING) == 0
    assert value(logger, exporter_source.CLASS_REQUESTS_WAITING) == 0
    assert not logger._by_external


@pytest.mark.vllm
def test_data_parallel_engines_get_their_own_label(vllm_config: Any) -> None:
    logger = make_logger(vllm_config, engines=[0, 1])
    sims = {engine: FrontendSim(seed=10 + engine) for engine in (0, 1)}
    sims[0].add("chat", 10, 3)
    for _ in range(2):
        sims[1].add("batch", 10, 3)
    for _ in range(5):
        for engine, sim in sims.items():
            if sim.live:
                scheduler, iteration = sim.step()
                logger.record(scheduler, iteration, engine_idx=engine)
    assert value(logger, M.requests_finished, engine="0", **{"class": "chat"}) == 1
    assert value(logger, M.requests_finished, engine="1", **{"class": "batch"}) == 2
    assert value(logger, M.latency[Sli.TTFT] + "_count", engine="1") == 2
    assert value(logger, M.latency[Sli.ITL] + "_count", engine="0") == 2
    # The gauge is the scheduler's count at each engine's last recorded step, not a sum over engines.
    assert value(logger, M.requests_running, engine="1") == 2
    assert value(logger, M.requests_running, engine="0") == 1


@pytest.mark.vllm
def test_without_a_spec_everything_is_default(vllm_config: Any) -> None:
    logger = make_logger(vllm_config, spec=None)
    sim = FrontendSim(seed=5)
    sim.add("chat", 10, 2)
    sim.add("anything", 300, 2)
    drain(sim, logger)
    assert {lab["class"] for _, lab, _ in samples(logger) if "class" in lab} == {"default"}
    assert value(logger, M.requests_finished, **{"class": "default"}) == 2
    les = {lab["le"] for n, lab, _ in samples(logger) if n == M.latency[Sli.E2E] + "_bucket"}
    assert les == {*(repr(float(b)) for b in exporter_source.DEFAULT_BUCKETS[Sli.E2E]), "+Inf"}


@pytest.fixture
def untracked(vllm_config: Any) -> Iterator[Any]:
    logger = make_logger(vllm_config)
    logger.tracking = False
    yield logger


@pytest.mark.vllm
def test_without_class_tracking_values_still_flow_under_other(untracked: Any) -> None:
    sim = FrontendSim(seed=6)
    sim.add("chat", 10, 3)
    drain(sim, untracked)
    assert value(untracked, M.latency[Sli.TTFT] + "_count", **{"class": "other"}) == 1
    assert value(untracked, M.latency[Sli.ITL] + "_count", **{"class": "other"}) == 2
    assert value(untracked, M.requests_finished, **{"class": "other"}) == 1
