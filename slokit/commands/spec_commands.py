"""`slokit validate` and `slokit init`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_specs_or_exit
from slokit.commands.k8s_limits import check_sizes_or_exit, print_scrape_warnings
from slokit.commands.paths import check_output_file, write_output_file
from slokit.spec import Spec, default_spec_path


def validate(
    specs: Annotated[list[Path], typer.Argument(help="Spec files to check.", show_default=False)],
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Also read each SLO's histogram from this Prometheus (e.g. http://prometheus:9090) and check that "
            "every threshold is one of its live bucket boundaries.",
        ),
    ] = None,
) -> None:
    """Check spec files and report every problem as `file:line:col: field: message`.

    Exits 0 when every spec is valid and 2 when any is not. Thresholds are checked against the histogram
    buckets the spec's source exposes (vLLM's fixed buckets with `source: vllm`). For a valid spec it prints,
    per objective, the burn-rate tiers as generated: windows, factor, the error ratio each fires above, the
    budget spent by the time a total outage pages, and the time to fire at 100% errors and at twice the budget
    rate; it warns (on stderr) when a tier had to be adapted or left out, and names the bucket boundary the
    scale-out signal counts against.

    With `--prometheus URL` it also reads the `le` boundaries each SLO's histogram has on that server (in the
    spec's `selector:` scope): the check for histograms the spec names without `buckets:`. A threshold that is
    not a live boundary, or a histogram with no series, exits 1; an unreachable server exits 2.

    Example: slokit validate examples/*.yaml
    Example: slokit validate gateway.yaml --prometheus http://localhost:9090
    """
    from slokit.commands.alerting_report import burn_report, warnings  # only validate needs the alert model

    loaded = load_specs_or_exit(specs)
    check_sizes_or_exit(loaded)
    print_scrape_warnings(loaded)
    for spec in loaded:
        classes = ", ".join(c.name for c in spec.classes)
        typer.echo(f"{spec.path}: ok (service {spec.service}, source {spec.source.name}, classes {classes})")
        for line in burn_report(spec):
            typer.echo(line)
        for line in warnings(spec):
            typer.echo(f"{spec.path}: warning: {line}", err=True)
    if prometheus is not None:
        _check_live(loaded, prometheus)


def _check_live(specs: list[Spec], url: str) -> None:
    from slokit.live_buckets import live_bucket_findings
    from slokit.report.prometheus import PrometheusApi, ReportSourceError

    api = PrometheusApi(url, timeout=30.0)
    failed = False
    for spec in specs:
        try:
            checked, findings = live_bucket_findings(spec, api)
        except ReportSourceError as exc:
            typer.echo(f"{spec.path}: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        for line in checked:
            typer.echo(f"{spec.path}: live: {line}")
        for finding in findings:
            typer.echo(f"{spec.path}: live: {finding.message}", err=True)
        failed = failed or bool(findings)
    if failed:
        raise typer.Exit(EXIT_FAILED)


def init(
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write the spec to this file instead of stdout (README: Output paths)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")] = False,
) -> None:
    """Print a commented example spec to start from (chat and code completion on Llama 3 70B).

    Example: slokit init -o slo.yaml && slokit validate slo.yaml
    """
    text = default_spec_path().read_text(encoding="utf-8")
    if output is None:
        typer.echo(text, nl=False)
        return
    check_output_file(output, force=force, example="slo.yaml")
    write_output_file(output, text)
    typer.echo(f"wrote {output}", err=True)


def register(app: typer.Typer) -> None:
    """Add the spec commands."""
    app.command()(validate)
    app.command()(init)
