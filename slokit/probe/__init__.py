"""`slokit probe`: drive an OpenAI-compatible streaming endpoint and find the largest load that meets the SLO.

The Python API (what the CLI and `slokit demo` call):

    from slokit.probe import Endpoint, Limits, Load, measure_level, workload_for
    summary = await measure_level(
        Endpoint("http://127.0.0.1:8000/v1/completions", model="tiny-llama"),
        workload_for(spec, "chat"), Load.concurrency(4), Limits(requests=50, duration=20),
        criteria=Criteria.from_class(spec.request_class("chat")),
    )
    summary.passed, summary.metrics["ttft"].p95, summary.failures  # {"http_500": 2, ...}

`run_level` returns the raw per-request records; `probe_search` runs the SLO search (see `search`).
Modules: client (HTTP and SSE with arrival stamps), load (closed and open loops), results (percentiles,
constraints, files), search (bracket and bisect), report (JSON document, terminal table, progress).
Its test server, the emulator (a local server with a known latency model), lives in `slokit.local.emulator`.
"""

from __future__ import annotations

from slokit.distributions import Distribution, parse_distribution
from slokit.probe.load import Endpoint, LevelRun, Limits, Load, Progress, RequestRecord, Workload, run_level
from slokit.probe.results import Criteria, LevelSummary, summarize
from slokit.probe.search import OnLevel, SearchConfig, SearchResult, search
from slokit.spec import Spec

DEFAULT_PROMPT_TOKENS = "256"
DEFAULT_OUTPUT_TOKENS = "64"

__all__ = [
    "Criteria",
    "Endpoint",
    "LevelRun",
    "LevelSummary",
    "Limits",
    "Load",
    "Progress",
    "RequestRecord",
    "SearchConfig",
    "SearchResult",
    "Workload",
    "auto_warmup",
    "measure_level",
    "probe_search",
    "run_level",
    "workload_for",
]


def workload_for(
    spec: Spec | None,
    class_name: str | None,
    prompt_tokens: str | Distribution | None = None,
    output_tokens: str | Distribution | None = None,
    tokens_per_word: float = 1.0,
) -> Workload:
    """The workload of a spec class, with length flags overriding it (a plain number or a distribution).

    Without a class (or a class without `workload`), lengths default to 256 prompt and 64 output tokens. The
    class header is the class's `match.header`. Raises KeyError for an unknown class, DistributionError for a bad
    length.
    """
    request_class = spec.request_class(class_name) if spec is not None and class_name is not None else None
    declared = request_class.workload if request_class is not None else None

    def pick(flag: str | Distribution | None, fallback: Distribution | None, default: str) -> Distribution:
        if isinstance(flag, Distribution):
            return flag
        if flag is not None:
            return parse_distribution(flag)
        return fallback if fallback is not None else parse_distribution(default)

    return Workload(
        prompt_tokens=pick(prompt_tokens, declared.prompt_tokens if declared else None, DEFAULT_PROMPT_TOKENS),
        output_tokens=pick(output_tokens, declared.output_tokens if declared else None, DEFAULT_OUTPUT_TOKENS),
        class_header=request_class.match.header if request_class is not None else None,
        tokens_per_word=tokens_per_word,
    )


def auto_warmup(load: Load, requests: int) -> int:
    """Default warm-up: one request per user (the cold ramp), or about two seconds of arrivals for a rate."""
    if load.kind == "concurrency":
        return max(1, min(int(load.value), max(1, requests // 5)))
    return max(1, min(round(load.value * 2), max(1, requests // 10)))


async def measure_level(
    endpoint: Endpoint,
    workload: Workload,
    load: Load,
    limits: Limits,
    *,
    criteria: Criteria | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> LevelSummary:
    """Run one level (bounded by `limits`) and summarise it; with `criteria`, also judge it.

    Never raises for server behaviour: failures are counted per reason in `summary.failures`.
    """
    run = await run_level(endpoint, workload, load, limits, seed=seed, progress=progress)
    return summarize(load, [run], criteria)


async def probe_search(
    endpoint: Endpoint,
    workload: Workload,
    limits: Limits,
    criteria: Criteria,
    config: SearchConfig,
    *,
    warmup: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    on_level: OnLevel | None = None,
) -> SearchResult:
    """Search for the largest level meeting `criteria`; `warmup` None means `auto_warmup` per level."""
    counter = 0

    async def measure(load: Load, _run: int) -> LevelRun:
        nonlocal counter
        counter += 1
        level_limits = Limits(
            requests=limits.requests,
            duration=limits.duration,
            warmup=auto_warmup(load, limits.requests) if warmup is None else warmup,
            drain=limits.drain,
            max_in_flight=limits.max_in_flight,
        )
        return await run_level(endpoint, workload, load, level_limits, seed=seed + counter, progress=progress)

    return await search(measure, criteria, config, on_level)
