"""`slokit generate`: write rules, alerts, tests, dashboards, runbooks and Kubernetes objects for specs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_specs_or_exit


def generate(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(help="Spec files (default: the bundled example spec).", show_default=False),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write into.")] = Path("generated"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if any file would change (for CI).")
    ] = False,
) -> None:
    """Write the rules, alerts, promtool tests, dashboards, runbook and Kubernetes objects of specs.

    Under OUTPUT:

    rules/: recording rules, alerts and their promtool unit tests.

    dashboards/: Grafana dashboards (JSON) and provisioning files.

    runbooks/: one Markdown runbook per service, a section per alert.

    exporters/: PrometheusRule, vLLM + GPU sidecar Deployment, ConfigMap, PodMonitor, HPA, KEDA ScaledObject.

    Example: slokit generate examples/*.yaml -o . --check
    """
    from slokit.generate import GenerateError, generate_all  # grafanalib and jinja2 load only for this command
    from slokit.generate.writer import write_files

    loaded = load_specs_or_exit(specs)
    try:
        files = generate_all(loaded)
    except GenerateError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    report = write_files(files, output, check=check)
    if check:
        if report.changed:
            for relative in report.written:
                typer.echo(f"stale: {output / relative}", err=True)
            typer.echo(
                f"{len(report.written)} generated file(s) out of date; run: slokit generate "
                f"{' '.join(str(s) for s in specs or [])} -o {output}".replace("  ", " "),
                err=True,
            )
            raise typer.Exit(EXIT_FAILED)
        typer.echo(f"{len(report.unchanged)} generated files are up to date")
        return
    for relative in report.written:
        typer.echo(f"wrote     {output / relative}")
    for relative in report.unchanged:
        typer.echo(f"unchanged {output / relative}")


def register(app: typer.Typer) -> None:
    """Add the generate command."""
    app.command()(generate)
