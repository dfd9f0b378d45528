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

    .venv/bin/python bench/exporter_overhead.py            # about a minute on 2 cores
    .venv/bin/python bench/exporter_overhead.py --steps 200 --batch-sizes 1,16,256
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from slokit.exporters.classes import request_class

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600, help="timed engine steps per batch size (default 600)")
    parser.add_argument("--batch-sizes", default="1,4,16,64,256", help="comma-separated (default 1,4,16,64,256)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]

    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from slokit.exporters.vllm import SlokitStatLogger

    config = make_vllm_config()
    vllm_logger = PrometheusStatLogger(config, [0])
    slokit_logger = SlokitStatLogger(
        config, [0], registry=CollectorRegistry(), environ={"SLOKIT_SPEC": str(ENGINE_SPEC)}
    )
    rows = [_run_batch(size, args.steps, vllm_logger, slokit_logger, seed=size) for size in sizes]

    header = (
        f"{'batch':>5}  {'vLLM µs/record':>14}  {'slokit µs/record':>16}  {'ratio':>6}  "
        f"{'+hook µs/rec':>12}  {'ratio incl. hook':>16}  {'p50 ratio':>9}"
    )
    print(f"record() cost per call, same stats objects, {args.steps} steps per batch size (means; last column medians)")
    print(header)
    for row in rows:
        ratio = row["slokit_us"] / row["vllm_us"]
        with_hook = (row["slokit_us"] + row["hook_us_per_record"]) / row["vllm_us"]
        row["ratio"], row["ratio_with_hook"] = ratio, with_hook
        print(
            f"{row['batch']:>5}  {row['vllm_us']:>14.1f}  {row['slokit_us']:>16.1f}  {ratio:>6.2f}  "
            f"{row['hook_us_per_record']:>12.1f}  {with_hook:>16.2f}  {row['slokit_p50_us'] / row['vllm_p50_us']:>9.2f}"
        )
    total_vllm = sum(r["vllm_us"] for r in rows)
    total_slokit = sum(r["slokit_us"] for r in rows)
    print(f"overall (sum over batch sizes): slokit/vLLM = {total_slokit / total_vllm:.2f}  (target <= 0.50)")
    errors = {stage: cell[0] for stage, cell in slokit_logger._errors.items()}
    print(f"slokit exporter errors during the run: {errors}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "errors": errors}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
