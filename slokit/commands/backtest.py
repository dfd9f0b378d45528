"""`slokit simulate` and `slokit backtest`: raw history with labelled incidents, and alert quality measured on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_NO_DATA, EXIT_USAGE, load_one_spec_or_exit
from slokit.commands.paths import check_output_dir, check_output_file, refuse, write_output_file
from slokit.commands.tools import describe
from slokit.local.procs import StartError
from slokit.local.prometheus import PROMETHEUS_BINARY, PROMTOOL_BINARY, PrometheusError, find_binary

BACKTEST_FILES = ("backtest.json", "backtest.md", "backtest.html", "alerts.csv")  # what write_reports writes


def _incidents_path(output: Path) -> Path:
    return output.with_name(output.name.split(".")[0] + ".incidents.yaml")


def simulate(
    spec: Annotated[Path, typer.Argument(help="The spec whose models, classes and metrics to simulate.")],
    days: Annotated[float, typer.Option("--days", help="Days of history (1-minute scrapes).", min=0.05, max=60)] = 7,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="OpenMetrics file to write (README: Output paths).")
    ] = Path("history.om"),
    incidents: Annotated[
        Path | None,
        typer.Option(
            "--incidents",
            help="Incidents to inject: YAML list of {name, kind, start, end, model}; "
            "kinds: outage, degradation, overload, throttled, exporter_gone. Default: one a day.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed and end, same bytes.")] = 1,
    end: Annotated[
        str | None,
        typer.Option("--end", help="Last timestamp (RFC 3339 or unix seconds); default: the last UTC midnight."),
    ] = None,
    replicas: Annotated[int, typer.Option("--replicas", help="vLLM replicas (pods) per model.", min=1, max=16)] = 2,
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT and its incidents file.")] = False,
) -> None:
    """Write realistic raw vLLM history for a spec, and the incidents injected into it.

    Writes OUTPUT (OpenMetrics, as `promtool tsdb create-blocks-from openmetrics` reads) and OUTPUT's stem
    plus `.incidents.yaml` (both need --force to replace; README: Output paths). Then:
    slokit backtest SPEC --data OUTPUT --incidents STEM.incidents.yaml -o report/
    """
    from slokit.backtest.incidents import InputError, dump_incidents, load_incidents, parse_time
    from slokit.backtest.simulate import KINDS
    from slokit.backtest.simulate import simulate as run

    inputs = [spec, *([incidents] if incidents is not None else [])]
    check_output_file(output, force=force, inputs=inputs, example="history.om")
    check_output_file(_incidents_path(output), force=force, inputs=inputs, example="history.incidents.yaml")
    loaded = load_one_spec_or_exit(spec)
    try:
        stop = parse_time(end) if end is not None else float(int(time.time()) // 86400 * 86400)
    except ValueError as exc:
        typer.echo(f"--end {end!r}: not RFC 3339 or unix seconds ({exc})", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    planned = None
    if incidents is not None:
        try:
            notes: list[str] = []
            planned = load_incidents(incidents, loaded, notes)
            for note in notes:
                typer.echo(f"warning: {note}", err=True)
        except InputError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(EXIT_USAGE) from None
        bad = [i.name for i in planned if i.kind not in KINDS]
        if bad:
            typer.echo(f"{incidents}: incident(s) {', '.join(bad)} need a kind: one of {', '.join(KINDS)}", err=True)
            raise typer.Exit(EXIT_USAGE)
    try:
        with output.open("w", encoding="utf-8") as handle:
            history = run(loaded, days, stop, seed, planned, handle, replicas=replicas)
    except OSError as error:  # a full disk, or a folder that went away: the path and why, not a traceback
        refuse(f"-o {output}: cannot write it: {error.strerror or error}")
    incidents_out = _incidents_path(output)
    write_output_file(incidents_out, dump_incidents(history.incidents))
    typer.echo(f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB, {days:g} days) and {incidents_out} "
               f"({len(history.incidents)} incidents)")  # fmt: skip


def backtest(
    spec: Annotated[Path, typer.Argument(help="The spec whose generated rules and alerts to evaluate.")],
    data: Annotated[
        Path | None, typer.Option("--data", help="Raw history: an OpenMetrics file or a Prometheus TSDB directory.")
    ] = None,
    incidents: Annotated[
        Path | None,
        typer.Option("--incidents", help="Labelled incidents: YAML list of {name, start, end, model, class}."),
    ] = None,
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            help="Variants to compare (repeat): slokit, burn-rate, tiers, baseline, fixed-p99. Default: all.",
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory for the reports (README: Output paths).")
    ] = Path("backtest"),
    prometheus: Annotated[
        str | None, typer.Option("--prometheus", help="Read raw history from this live Prometheus instead of --data.")
    ] = None,
    from_: Annotated[str | None, typer.Option("--from", help="With --prometheus: start (RFC 3339 or unix).")] = None,
    to: Annotated[str | None, typer.Option("--to", help="With --prometheus: end (RFC 3339 or unix).")] = None,
) -> None:
    """Evaluate the spec's generated rules and alerts over history with the real Prometheus engine.

    Writes OUTPUT/backtest.json, backtest.md, backtest.html (plots) and alerts.csv: pages and tickets per week
    (notifications as the generated Alertmanager configuration groups them; firing series apart), flaps, and each
    incident's first page, for each variant side by side. Progress goes to stderr.

    Exit codes: 0 done; 1 Prometheus or promtool failed; 2 bad input; 3 no data (none of the series the spec
    reads is in the history: the message lists the selectors looked for).
    """
    import tempfile

    from slokit.backtest.evaluate import evaluate, stderr_progress
    from slokit.backtest.incidents import InputError, load_incidents, parse_time, range_warnings
    from slokit.backtest.report import rate_note, write_reports
    from slokit.report.reads import NoDataError

    inputs = [p for p in (spec, data, incidents) if p is not None]
    check_output_dir(output, inputs=inputs, writes=BACKTEST_FILES)
    loaded = load_one_spec_or_exit(spec)
    try:
        if (data is None) == (prometheus is None):
            raise InputError("give exactly one of --data PATH or --prometheus URL (with --from and --to)")
        remote_range = None
        if prometheus is not None:
            if from_ is None or to is None:
                raise InputError("--prometheus needs --from and --to (RFC 3339 or unix seconds)")
            try:
                remote_range = (parse_time(from_), parse_time(to))
            except ValueError as exc:
                raise InputError(f"--from/--to: {exc}") from None
            if remote_range[1] <= remote_range[0]:
                raise InputError("--to must be after --from")
        incident_warnings: list[str] = []
        labelled = load_incidents(incidents, loaded, incident_warnings) if incidents is not None else []
        for warning in incident_warnings:
            stderr_progress("warning: " + warning)
        for tool in (PROMETHEUS_BINARY, PROMTOOL_BINARY):  # which ones evaluate: the first on PATH
            found = find_binary(tool)
            if found is not None:
                stderr_progress(f"using {describe(found, tool)}")
        with tempfile.TemporaryDirectory(prefix="slokit-backtest-") as scratch:
            result = evaluate(loaded, Path(scratch), data=data, remote=prometheus, remote_range=remote_range,
                              variants=variants)  # fmt: skip
        for warning in range_warnings(labelled, result.start, result.end):
            stderr_progress("warning: " + warning)
            incident_warnings.append(warning)
        result.warnings.extend(incident_warnings)
        began = time.monotonic()
        try:
            doc = write_reports(loaded, result, labelled, output)
        except OSError as error:
            refuse(f"-o {output}: cannot write the reports there: {error.strerror or error}")
        stderr_progress(f"reports written in {time.monotonic() - began:.1f}s")
    except InputError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    except NoDataError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_NO_DATA) from None
    except (PrometheusError, StartError) as exc:
        typer.echo(f"backtest failed: {exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    typer.echo(f"pages and tickets: notifications as {doc['routing']} groups them; series: alert series that fired")
    if doc["extrapolated"]:
        typer.echo(f"note: {rate_note(doc)}")
    for name, v in doc["variants"].items():
        typer.echo(f"{name:10s} pages/week {v['pages_per_week']:6.1f}  tickets/week {v['tickets_per_week']:6.1f}  "
                   f"(series/week: pages {v['page_series_per_week']:.1f}, tickets {v['ticket_series_per_week']:.1f})  "
                   f"flaps {v['flaps']:3d}  pages outside incidents {v['pages_outside_incidents']}")  # fmt: skip
    typer.echo(f"wrote {output}/backtest.json, backtest.md, backtest.html, alerts.csv")


def register(app: typer.Typer) -> None:
    """Add the simulate and backtest commands."""
    app.command()(simulate)
    app.command()(backtest)
