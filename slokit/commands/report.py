"""`slokit report`: the SLO compliance report of a period (from Prometheus) or of a probe run (from its CSV)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_NO_DATA, EXIT_USAGE, load_one_spec_or_exit
from slokit.commands.paths import check_output_dir
from slokit.units import DURATION_HELP, DurationError, parse_duration

# What slokit.report.render.write_report writes into the output folder (checked against the inputs first).
REPORT_FILES = ("report.html", "report.md", "report.json", "traffic.*", "burn-*", "percentiles-*")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _write_failed(output: Path, error: OSError) -> typer.Exit:
    """A report file that could not be written (the folder checks passed: a full disk, a permission)."""
    where = f" {error.filename}" if error.filename else ""
    return _fail(f"-o {output}: cannot write{where}: {error.strerror or error}")


def parse_time(text: str, flag: str) -> float:
    """Unix seconds, or ISO-8601 (`2026-12-01`, `2026-12-01T08:00:00Z`; UTC when no zone is given)."""
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _fail(
                f"{flag} {text!r} is not a time; write unix seconds or ISO-8601 such as 2026-12-01T08:00:00Z"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    if not math.isfinite(value) or value < 0:
        raise _fail(f"{flag} {text!r} is not a time; write unix seconds or ISO-8601")
    return value


def report_command(
    spec: Annotated[Path, typer.Argument(help="The spec whose objectives are reported.")],
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Prometheus (or Thanos/Mimir) base URL, e.g. http://prom:9090.")
    ] = None,
    probe: Annotated[
        Path | None, typer.Option("--probe", help="A probe run's requests.csv (`slokit probe -o DIR`).")
    ] = None,
    class_name: Annotated[
        str | None, typer.Option("--class", help="--probe: the class the probe ran (default: from probe.json).")
    ] = None,
    start: Annotated[str | None, typer.Option("--from", help="Period start: unix seconds or ISO-8601 (UTC).")] = None,
    end: Annotated[str | None, typer.Option("--to", help="Period end (default: now).")] = None,
    last: Annotated[
        str | None, typer.Option("--last", help=f"Period length ending at --to (default 7d): {DURATION_HELP}.")
    ] = None,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Directory for report.md/.html/.json and CSV (README: Output paths)."),
    ] = Path("report"),
) -> None:
    """Write the SLO compliance report: per objective attainment, budget, burn rate, tiers, worst windows, alerts.

    Exit code 0 when no objective was missed (those without traffic or that cannot be judged print n/a and the
    notes say why), 1 when one was missed, 2 on bad input, 3 when none of the series the spec reads exists at
    --prometheus over the period (a wrong URL or selector; the message lists the selectors looked for).

      slokit report slo.yaml --prometheus http://127.0.0.1:9090 --last 7d -o report/

      slokit report slo.yaml --probe probe-out/requests.csv -o report/
    """
    if (prometheus is None) == (probe is None):
        raise _fail("give exactly one of --prometheus URL or --probe RESULTS.csv")
    check_output_dir(output, inputs=[p for p in (spec, probe) if p is not None], writes=REPORT_FILES)
    loaded = load_one_spec_or_exit(spec)
    if probe is not None:
        if start or end or last:
            raise _fail("--from/--to/--last apply to --prometheus; a probe report covers the whole run")
        from slokit.report import report_from_probe
        from slokit.report.probe import ProbeInputError

        try:
            document, paths = report_from_probe(loaded, probe, output, class_name=class_name)
        except ProbeInputError as exc:
            raise _fail(str(exc)) from None
        except OSError as exc:
            raise _write_failed(output, exc) from None
    else:
        assert prometheus is not None
        if not prometheus.startswith(("http://", "https://")):
            raise _fail(f"--prometheus {prometheus!r} is not a URL; write e.g. http://127.0.0.1:9090")
        if start is not None and last is not None:
            raise _fail("give --from (with --to) or --last, not both")
        to = parse_time(end, "--to") if end is not None else time.time()
        if start is not None:
            begin = parse_time(start, "--from")
        else:
            try:
                begin = to - parse_duration(last or "7d")
            except DurationError as exc:
                raise _fail(f"--last: {exc}") from None
        if begin >= to:
            raise _fail("the period is empty: --from must be before --to")
        from slokit.report import report_from_prometheus
        from slokit.report.prometheus import ReportSourceError
        from slokit.report.reads import NoDataError

        try:
            document, paths = report_from_prometheus(loaded, prometheus, begin, to, output)
        except ReportSourceError as exc:
            raise _fail(str(exc)) from None
        except NoDataError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_NO_DATA) from None
        except OSError as exc:
            raise _write_failed(output, exc) from None
    from slokit.report.render import status_text

    for note in document["notes"]:
        typer.echo(f"note: {note}", err=True)
    for row in document["objectives"]:
        status = status_text(row)
        attainment = "n/a" if row["attainment"] is None else f"{row['attainment']:.4%}"
        typer.echo(f"{row['model']} {row['class']} {row['slo']}: {attainment} of {row['objective']:.2%} ({status})")
    typer.echo(f"report: {paths[0]}")
    if any(row["status"] == "missed" for row in document["objectives"]):
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add the report command."""
    app.command("report")(report_command)
