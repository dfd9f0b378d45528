"""`slokit autoscale`: replay a request history under each scaling policy and compare them side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_one_spec_or_exit
from slokit.commands.paths import check_output_dir


def autoscale(
    spec: Annotated[Path, typer.Argument(help="The spec whose models, classes and objectives to replay.")],
    traffic: Annotated[
        Path,
        typer.Option(
            "--traffic",
            help="Request history: an OpenMetrics file (`slokit simulate`) or a probe's requests.csv (or its folder).",
        ),
    ],
    policies: Annotated[
        list[str] | None,
        typer.Option(
            "--policy", help="Policy to replay (repeat): static, reactive, queue, llm-d, slokit. Default: all."
        ),
    ] = None,
    models: Annotated[
        list[str] | None, typer.Option("--model", help="Replay only this model (repeat). Default: every model.")
    ] = None,
    pod_start: Annotated[
        str, typer.Option("--pod-start", help="Time from asking for a pod to its engine serving (e.g. 100s, 5m).")
    ] = "100s",
    warmup: Annotated[
        str, typer.Option("--warmup", help="Replay but do not score this first part (e.g. 1d: yesterday's history).")
    ] = "0s",
    spread: Annotated[
        float,
        typer.Option(
            "--spread", help="Load-balancer imbalance: one half of the pool gets (1+spread)/2.", min=0, max=0.9
        ),
    ] = 0.1,
    headroom: Annotated[
        float,
        typer.Option(
            "--headroom",
            help="The slokit policy's spare capacity over its forecast while it has missed no burst (0.25: a "
            "quarter, as the generated rules). A miss raises it for a day, up to 1.0 (a doubling absorbed while "
            "pods start).",
            min=0,
            max=4,
        ),
    ] = 0.25,
    tick: Annotated[float, typer.Option("--tick", help="Replay step in seconds.", min=1, max=60)] = 5.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the arrival draws (the same for every policy).")] = 1,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory for autoscale.json, .md, .svg (README: Output paths).")
    ] = Path("autoscale"),
) -> None:
    """Replay a request history through a model of the engines under each scaling policy, side by side.

    The engines are modelled from the roofline planner (docs/autoscale.md: the engine model and its measured
    error); every policy sees the same requests. Policies: `static` (the peak's replicas all day), `reactive`
    (the HPA slokit generates on slokit:scale_out:ratio), `queue` (production-stack: waiting requests > 5 per
    replica), `llm-d` (P90 TTFT and TPOT over their SLOs, up above 0.55, down below 0.40) and `slokit` (the
    predictive signal of rules/<service>.autoscale.rules.yaml, acted on by the generated ScaledObject).

    Writes OUTPUT/autoscale.json (per policy: attainment, gpu_hours, scale_events, budget spent, worst 5-minute
    burn, time to recover, per model and class), autoscale.md (the table) and autoscale.svg (load, replicas and
    TTFT over time).

    Example (yesterday warms the same-hour history up, today is scored):

        slokit simulate slo.yaml --days 2 -o day.om
        slokit autoscale slo.yaml --traffic day.om --warmup 1d -o autoscale/

    Exit codes: 0 done; 2 bad input (spec, history with no traffic for a model, unknown policy, an engine model
    that cannot meet the SLO at any batch).
    """
    from slokit.autoscale.compare import run_model
    from slokit.autoscale.engine import EngineModelError
    from slokit.autoscale.history import HistoryError, read_history
    from slokit.autoscale.policies import PolicyError, check_names
    from slokit.autoscale.replay import Config
    from slokit.autoscale.report import FILES, document, write
    from slokit.units import parse_duration

    try:
        names = check_names(list(policies or []))
    except PolicyError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    durations = {}
    for flag, text in (("--pod-start", pod_start), ("--warmup", warmup)):
        try:
            durations[flag] = parse_duration(text)
        except ValueError as exc:
            typer.echo(f"{flag} {text!r}: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
    check_output_dir(output, inputs=[spec, traffic], writes=FILES)
    loaded = load_one_spec_or_exit(spec)
    config = Config(tick=tick, pod_start=durations["--pod-start"], spread=spread, seed=seed)
    try:
        history = read_history(loaded, traffic, list(models or []))
        first = round(durations["--warmup"] / config.tick)
        if first * config.tick >= history.steps * history.step:
            raise HistoryError(
                f"--warmup {warmup}: the history is only {history.steps * history.step / 3600:.1f} h long"
            )
        runs = [
            run_model(
                loaded,
                history,
                loaded.model(name),
                names,
                config,
                headroom=headroom,
                progress=lambda s: typer.echo(s, err=True),
            )
            for name in history.models
        ]
    except (HistoryError, EngineModelError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    hours = (len(runs[0].timelines[names[0]].ready) - first) * config.tick / 3600
    meta = {
        "spec": str(spec),
        "traffic": str(traffic),
        "hours": round(hours, 3),
        "config": {
            "headroom": headroom,
            "tick_s": config.tick,
            "pod_start_s": config.pod_start,
            "spread": config.spread,
            "seed": config.seed,
            "warmup_s": first * config.tick,
        },
    }
    doc = document(runs, names, meta, first)
    try:
        write(output, doc, runs, names, first)
    except OSError as error:
        typer.echo(f"-o {output}: cannot write there: {error.strerror or error}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    for name, p in doc["policies"].items():
        vs = f"  {p['gpu_hours_vs_static']:5.0%} of static" if "gpu_hours_vs_static" in p else ""
        typer.echo(f"{name:9s} attainment {p['attainment']:8.3%}  GPU-hours {p['gpu_hours']:8.1f}{vs}  "
                   f"scale events {p['scale_events']:4d}  worst 5m burn {p['worst_5m_burn']:6.1f}")  # fmt: skip
    typer.echo(f"wrote {output}/autoscale.json, autoscale.md, autoscale.svg")


def register(app: typer.Typer) -> None:
    """Add the autoscale command."""
    app.command()(autoscale)
