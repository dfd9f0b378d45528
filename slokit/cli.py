"""The `slokit` command line: thin wiring from arguments to the library, one module per command group.

Exit codes scripts can rely on: 0 success; 1 the command ran and found a failure (stale generated files, an SLO
not met, nothing measured); 2 the input is wrong (bad spec, bad flag); 130 interrupted.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from slokit import __version__
from slokit.commands import autoscale, backtest, demo, exporter, generate, interop, plan, probe, report, spec_commands

app = typer.Typer(
    name="slokit",
    help=(
        "Latency SLOs for LLM serving, from one spec: exporters, Prometheus rules and alerts, Grafana dashboards, "
        "runbooks, a load probe and a capacity planner.\n\n"
        "Start with `slokit init -o slo.yaml`, edit it, `slokit validate slo.yaml`, then "
        "`slokit generate slo.yaml -o deploy/`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"slokit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Latency SLOs for LLM serving."""


for module in (spec_commands, generate, interop, exporter, probe, plan, report, demo, backtest, autoscale):
    module.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
