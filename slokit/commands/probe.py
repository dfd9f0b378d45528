"""`slokit probe`: load an OpenAI-compatible streaming endpoint and find the largest load that meets the SLO."""

from __future__ import annotations

import asyncio
import json
import math
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_one_spec_or_exit
from slokit.commands.paths import check_output_dir
from slokit.distributions import DistributionError
from slokit.units import DurationError, parse_duration

if TYPE_CHECKING:  # the probe (aiohttp-free client, pandas, matplotlib) loads only when the command runs
    from slokit.probe import Criteria, Limits, Load, SearchConfig
    from slokit.probe.load import LoadKind
    from slokit.spec import RequestClass, Spec

PROBE_FILES = ("requests.csv", "probe.json", "probe.png")  # what slokit.probe.results.write_outputs writes


class ApiChoice(StrEnum):
    """Which OpenAI API shape to send."""

    completions = "completions"
    chat = "chat"


class SearchChoice(StrEnum):
    """What the search varies."""

    concurrency = "concurrency"
    rate = "rate"


class BasisChoice(StrEnum):
    """Where TTFT and E2E are measured from when judging a level."""

    scheduled = "scheduled"
    sent = "sent"


def _fail_usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _seconds(value: str, flag: str) -> float:
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise _fail_usage(f"{flag}: {exc}") from None


def _headers(values: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise _fail_usage(f"--header {item!r}: write NAME:VALUE, e.g. --header 'Authorization: Bearer $TOKEN'")
        headers[name.strip()] = value.strip()
    return headers


def probe(
    url: Annotated[
        str,
        typer.Argument(
            help="The server (http://127.0.0.1:8000) or endpoint (.../v1/completions, .../v1/chat/completions).",
            show_default=False,
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Model name to send (default: the first of /v1/models).", rich_help_panel="Target"
        ),
    ] = None,
    api: Annotated[
        ApiChoice | None,
        typer.Option(
            "--api",
            metavar="API",
            help="completions or chat (default: from the URL, else completions).",
            rich_help_panel="Target",
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="Spec whose class SLOs judge each level (default: bundled spec).",
            rich_help_panel="SLO criteria",
        ),
    ] = None,
    class_name: Annotated[
        str | None,
        typer.Option(
            "--class",
            help="Request class: its SLOs, workload and x-slokit-class header (default: first).",
            rich_help_panel="SLO criteria",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", help="Run one closed-loop level with N users.", rich_help_panel="Load"),
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", "-r", help="Run one open-loop level at R req/s.", rich_help_panel="Load")
    ] = None,
    search_var: Annotated[
        SearchChoice | None,
        typer.Option(
            "--search",
            help="Search for the largest passing concurrency or rate (the default mode).",
            rich_help_panel="Load",
        ),
    ] = None,
    burstiness: Annotated[
        float,
        typer.Option(
            help="Open-loop arrivals: gamma shape; 1 Poisson, <1 burstier, inf evenly spaced.", rich_help_panel="Load"
        ),
    ] = 1.0,
    requests: Annotated[
        int, typer.Option("--requests", "-n", help="Measured requests per level.", rich_help_panel="Limits")
    ] = 300,
    duration: Annotated[
        str, typer.Option(help="No new request after this long, per level.", rich_help_panel="Limits")
    ] = "60s",
    warmup: Annotated[
        int | None,
        typer.Option(
            help="Unmeasured requests first (default: one per user, ~2s of arrivals).", rich_help_panel="Limits"
        ),
    ] = None,
    drain: Annotated[
        str, typer.Option(help="After --duration, time left for running requests.", rich_help_panel="Limits")
    ] = "30s",
    request_timeout: Annotated[
        str, typer.Option(help="Longest a single request may take.", rich_help_panel="Limits")
    ] = "5m",
    prompt_tokens: Annotated[
        str | None,
        typer.Option(
            help="Prompt length: 512, uniform(128,1024), normal(512,64), lognormal(512,0.6), choice(...).",
            rich_help_panel="Workload",
        ),
    ] = None,
    output_tokens: Annotated[
        str | None, typer.Option(help="Output length, same forms (sent with ignore_eos).", rich_help_panel="Workload")
    ] = None,
    start: Annotated[
        float | None, typer.Option(help="Search: first level (default 1).", rich_help_panel="Load")
    ] = None,
    maximum: Annotated[
        float | None,
        typer.Option("--max", help="Search: highest level (default 1024 users or 1000 req/s).", rich_help_panel="Load"),
    ] = None,
    step: Annotated[
        float | None,
        typer.Option(
            help="Search resolution (default 1 user; for rates 10% of the passing rate).", rich_help_panel="Load"
        ),
    ] = None,
    repeats: Annotated[
        int, typer.Option(help="Search: runs of a level near the boundary, pooled.", rich_help_panel="Load")
    ] = 2,
    max_error_rate: Annotated[
        float, typer.Option(help="Failed share a passing level may have.", rich_help_panel="SLO criteria")
    ] = 0.01,
    basis: Annotated[
        BasisChoice,
        typer.Option(
            "--from", help="Judge TTFT and E2E from the scheduled or the sent time.", rich_help_panel="SLO criteria"
        ),
    ] = BasisChoice.scheduled,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header", "-H", metavar="NAME:VALUE", help="Extra header, repeatable.", rich_help_panel="Target"
        ),
    ] = None,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos/--no-ignore-eos", help="Send vLLM's ignore_eos for exact lengths.", rich_help_panel="Workload"
        ),
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed for lengths, prompts and arrivals.", rich_help_panel="Workload")] = 0,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write requests.csv, probe.json and probe.png into this directory (README: Output paths).",
            rich_help_panel="Output",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document on stdout.", rich_help_panel="Output")
    ] = False,
) -> None:
    """Load an OpenAI-compatible streaming endpoint and find the largest load that meets the SLO.

    Each level is bounded (--requests, --duration, then --drain) and judged against the class's objective,
    acceptable tier and consistency SLOs and --max-error-rate. By default the probe searches: it doubles the
    concurrency from 1 while levels pass, then bisects to the boundary, re-running levels close to it.

    Per request it stamps scheduled, sent, first byte, first content token, every chunk and done times on a
    monotonic clock, takes token counts from the server's usage (else one per chunk), and reports TTFT, ITL,
    TPOT and E2E (TTFT and E2E also from the scheduled time, so client queueing cannot hide). Unreachable
    servers, HTTP errors, malformed SSE and cut streams are counted per reason, never fatal.

    Exit codes: 0 measured (whatever the verdict), 1 nothing could be measured, 2 bad input.

    Examples:

      slokit probe http://127.0.0.1:8000 --model llama --spec slo.yaml --class chat

      slokit probe http://127.0.0.1:8000/v1/chat/completions -c 32 -n 1000 --json

      slokit probe http://127.0.0.1:8000 --search rate --burstiness 0.5 -o out/
    """
    from slokit.probe import Criteria, Limits, Load, workload_for
    from slokit.probe.load import endpoint_url

    _check_load_flags(concurrency, rate, search_var, requests, burstiness, max_error_rate)
    if output is not None:  # before the run: a path mistake must not cost the minutes a probe takes
        check_output_dir(output, inputs=[spec] if spec is not None else [], writes=PROBE_FILES)
    limits = Limits(
        requests=requests,
        duration=_seconds(duration, "--duration"),
        warmup=0,
        drain=_seconds(drain, "--drain"),
    )
    timeout = _seconds(request_timeout, "--request-timeout")
    try:
        resolved_url, resolved_api = endpoint_url(url, api.value if api else None)
    except ValueError as exc:
        raise _fail_usage(str(exc)) from None
    loaded = load_one_spec_or_exit(spec)
    request_class = _request_class(loaded, class_name, spec)
    try:
        workload = workload_for(loaded, request_class.name, prompt_tokens, output_tokens)
    except DistributionError as exc:
        raise _fail_usage(f"token lengths: {exc}") from None
    criteria = Criteria.from_class(request_class, max_error_rate=max_error_rate, basis=basis.value)
    search_config = (
        _search_config(search_var, start, maximum, step, repeats, burstiness)
        if concurrency is None and rate is None
        else None
    )
    extra_headers = _headers(header or [])
    document_out = asyncio.run(
        _run(
            resolved_url,
            resolved_api,
            model,
            extra_headers,
            timeout,
            ignore_eos,
            workload,
            criteria,
            limits,
            warmup,
            seed,
            search_config,
            Load.concurrency(concurrency) if concurrency is not None else Load.rate(rate, burstiness) if rate else None,
            str(spec) if spec else None,
            output,
            as_json,
        )
    )
    if as_json:
        typer.echo(json.dumps(document_out, indent=2))
    if not document_out["measured_requests"]:
        unreachable = document_out.get("unreachable")
        why = (
            f"{unreachable} (every request failed to connect)"
            if unreachable
            else "no request succeeded (see the failure reasons above)"
        )
        typer.echo(f"nothing could be measured: {why}", err=True)
        raise typer.Exit(EXIT_FAILED)


def _check_load_flags(
    concurrency: int | None,
    rate: float | None,
    search_var: SearchChoice | None,
    requests: int,
    burstiness: float,
    max_error_rate: float,
) -> None:
    """One load mode at a time, and every count and share in its range, before anything is sent."""
    modes = [m for m in (concurrency is not None, rate is not None, search_var is not None) if m]
    if len(modes) > 1:
        raise _fail_usage("give one of --concurrency, --rate or --search")
    if concurrency is not None and concurrency < 1:
        raise _fail_usage(f"--concurrency {concurrency}: need at least 1 user")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise _fail_usage(f"--rate {rate}: need a positive number of requests per second")
    if requests < 1:
        raise _fail_usage(f"--requests {requests}: need at least 1")
    if not burstiness > 0:
        raise _fail_usage(f"--burstiness {burstiness}: must be > 0 (1 is Poisson)")
    if not 0 <= max_error_rate < 1:
        raise _fail_usage(f"--max-error-rate {max_error_rate}: must be in [0, 1)")


def _request_class(loaded: Spec, class_name: str | None, spec: Path | None) -> RequestClass:
    """The class whose SLOs judge the levels: the one named, else the spec's first (said on stderr)."""
    if class_name is None:
        class_name = loaded.classes[0].name
        typer.echo(f"judging against class {class_name!r} of {spec or 'the bundled spec'}", err=True)
    try:
        return loaded.request_class(class_name)
    except KeyError:
        names = ", ".join(c.name for c in loaded.classes)
        raise _fail_usage(f"--class {class_name!r}: {spec or 'the bundled spec'} has classes {names}") from None


def _search_config(
    search_var: SearchChoice | None,
    start: float | None,
    maximum: float | None,
    step: float | None,
    repeats: int,
    burstiness: float,
) -> SearchConfig:
    """The search over concurrency (the default) or rate, from --start up to --max."""
    from slokit.probe import SearchConfig

    variable: LoadKind = "rate" if search_var is SearchChoice.rate else "concurrency"
    default_max = 1024.0 if variable == "concurrency" else 1000.0
    try:
        return SearchConfig(
            variable=variable,
            start=start if start is not None else 1.0,
            maximum=maximum if maximum is not None else max(default_max, start or 1.0),
            step=step,
            repeats=repeats,
            burstiness=burstiness,
        )
    except ValueError as exc:
        raise _fail_usage(str(exc)) from None


async def _run(
    url: str,
    api: Any,
    model: str | None,
    headers: dict[str, str],
    timeout: float,
    ignore_eos: bool,
    workload: Any,
    criteria: Criteria,
    limits: Limits,
    warmup: int | None,
    seed: int,
    search_config: SearchConfig | None,
    load: Load | None,
    spec_path: str | None,
    output: Path | None,
    as_json: bool,
) -> dict[str, Any]:
    from slokit.probe import Endpoint, Limits, auto_warmup, probe_search
    from slokit.probe import results as probe_results
    from slokit.probe.client import ConnectError
    from slokit.probe.load import calibrate_tokens_per_word, discover_model, run_level
    from slokit.probe.report import ProgressLine, document, print_summary

    if model is None:
        try:
            model = await discover_model(url)
        except ConnectError as exc:  # no server there: "pass --model" would not help
            typer.echo(f"error: {exc} (reading /v1/models for the model name); is the server running?", err=True)
            raise typer.Exit(EXIT_FAILED) from None
        if model is None:
            typer.echo(f"error: could not read a model name from {url}'s /v1/models; pass --model NAME", err=True)
            raise typer.Exit(EXIT_FAILED)
        typer.echo(f"model: {model} (from /v1/models)", err=True)
    per_word = await calibrate_tokens_per_word(url, model)
    if per_word is not None:
        typer.echo(f"prompt calibration: {per_word:.2f} tokens per word (server /tokenize)", err=True)
        workload = type(workload)(workload.prompt_tokens, workload.output_tokens, workload.class_header, per_word)
    endpoint = Endpoint(url=url, model=model, api=api, headers=headers, request_timeout=timeout, ignore_eos=ignore_eos)
    progress = ProgressLine()
    levels: list[probe_results.LevelSummary] = []
    result = None
    async with progress.running() as counters:
        if search_config is not None:
            result = await probe_search(
                endpoint,
                workload,
                limits,
                criteria,
                search_config,
                warmup=warmup,
                seed=seed,
                progress=counters,
                on_level=progress.level_done,
            )
            levels = result.levels
        else:
            assert load is not None
            level_limits = Limits(
                requests=limits.requests,
                duration=limits.duration,
                warmup=auto_warmup(load, limits.requests) if warmup is None else warmup,
                drain=limits.drain,
            )
            run = await run_level(endpoint, workload, load, level_limits, seed=seed, progress=counters)
            summary = probe_results.summarize(load, [run], criteria)
            progress.level_done(summary)
            levels = [summary]
    doc = document(
        endpoint=endpoint, workload=workload, criteria=criteria, spec_path=spec_path, levels=levels, result=result
    )
    if not as_json:
        print_summary(levels, doc, criteria)
    for warning in doc["warnings"]:  # on stderr in every mode; also in the JSON document and probe.json
        typer.echo(f"warning: {warning}", err=True)
    if output is not None:
        try:
            paths = probe_results.write_outputs(output, doc, levels, criteria)
        except OSError as exc:
            typer.echo(f"error: cannot write into {output}: {exc.strerror or exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        for path in paths:
            typer.echo(f"wrote {path}", err=True)
    return doc


def register(app: typer.Typer) -> None:
    """Add the probe command."""
    app.command()(probe)
