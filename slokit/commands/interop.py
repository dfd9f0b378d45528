"""`slokit import` (Pyrra, Sloth, OpenSLO files -> one slokit spec) and `slokit export openslo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from slokit.commands.common import EXIT_USAGE, load_one_spec_or_exit, report_spec_error
from slokit.commands.paths import check_output_file, write_output_file
from slokit.spec import SpecError, load_spec_text


def import_(
    files: Annotated[list[Path], typer.Argument(help="Pyrra, Sloth or OpenSLO YAML files.", show_default=False)],
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write the spec to this file (default stdout; README: Output paths)."),
    ] = None,
    service: Annotated[str | None, typer.Option("--service", help="Service name of the spec.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")] = False,
) -> None:
    """Convert latency SLOs from Pyrra, Sloth or OpenSLO files into one slokit spec.

    Converted: every SLO whose good events are one histogram bucket (`le`) over the histogram's count.

    Kept: target, window (Sloth files have none: 30d), metric, matchers, threshold and unit.

    Each class's comment names the source file and SLO; `by (...)` and Pyrra `grouping` are dropped with a warning.

    Read by kind and shape, saying which apiVersion was assumed: Pyrra's groupless `v1alpha1`, `openslo.com/v1`.

    A good-only matcher (a status regex the total lacks) is dropped with a warning saying what it meant.

    Refused SLIs, each named on stderr: ratios of error counters, raw, boolean-gauge and gauge-threshold SLIs.

    Refused too: native histograms, calendar windows, timeslice budgeting, good selectors that differ otherwise.

    Exit status: 0 every SLO converted, 3 some skipped, 2 nothing usable (or a file cannot be read).

    Example: slokit import pyrra/*.yaml sloth.yml -o slo.yaml && slokit generate slo.yaml -o deploy/
    """
    from slokit.interop.importing import ImportFileError, read_files, render_spec, window_notices

    if output is not None:
        check_output_file(output, force=force, inputs=files, example="slo.yaml")
    try:
        result = read_files(files)
    except ImportFileError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    for notice in [*result.notices, *window_notices(result)]:
        typer.echo(str(notice), err=True)
    if not result.objectives:
        typer.echo("no latency objective slokit can express was found", err=True)
        raise typer.Exit(result.exit_code)
    text = render_spec(result, service)
    try:
        load_spec_text(text, str(output or "<imported spec>"))
    except SpecError as error:
        typer.echo("the imported spec does not validate:", err=True)
        report_spec_error(error)
        raise typer.Exit(EXIT_USAGE) from None
    skipped = len({(n.file, n.slo) for n in result.notices if n.skipped})
    summary = f"{len(result.objectives)} objective(s) imported, {skipped} skipped"
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_output_file(output, text)
        summary += f"; wrote {output}"
    typer.echo(summary, err=True)
    raise typer.Exit(result.exit_code)


def openslo(
    spec: Annotated[Path, typer.Argument(help="The slokit spec.", show_default=False)],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write to this file (default stdout; README: Output paths).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")] = False,
) -> None:
    """Write OpenSLO v1 Service, SLI and SLO documents for every objective of a spec (multi-document YAML).

    Example: slokit export openslo examples/assistant.yaml -o assistant.openslo.yaml
    """
    from slokit.interop.openslo_export import documents

    if output is not None:
        check_output_file(output, force=force, inputs=[spec], example=f"{spec.stem}.openslo.yaml")
    loaded = load_one_spec_or_exit(spec)
    text = yaml.safe_dump_all(documents(loaded), sort_keys=False, width=10_000, explicit_start=True)
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_output_file(output, text)
        typer.echo(f"wrote {output}", err=True)


def register(app: typer.Typer) -> None:
    """Add `import` and the `export` group."""
    app.command(name="import")(import_)
    export = typer.Typer(help="Export a spec's objectives to another format.", no_args_is_help=True)
    export.command(name="openslo")(openslo)
    app.add_typer(export, name="export")
