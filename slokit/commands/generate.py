"""`slokit generate`: write rules, alerts, tests, dashboards, runbooks and Kubernetes objects for specs."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from slokit.commands.common import EXIT_FAILED, EXIT_USAGE, load_specs_or_exit
from slokit.commands.k8s_limits import check_sizes_or_exit, print_scrape_warnings
from slokit.commands.paths import check_output_dir
from slokit.commands.tools import describe
from slokit.generate.engines import Engine


def generate(
    ctx: typer.Context,
    specs: Annotated[
        list[Path] | None,
        typer.Argument(help="Spec files (default: the bundled example spec).", show_default=False),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory to write into (README: Output paths).")
    ] = Path("generated"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if any file would change (for CI).")
    ] = False,
    no_promtool: Annotated[
        bool,
        typer.Option("--no-promtool", help="Do not check the new rule files with `promtool check rules` first."),
    ] = False,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="Rule engine the rules are for: prometheus, victoriametrics (vmalert), thanos (Thanos Ruler) or "
            "mimir (Mimir ruler); see docs/rules.md.",
            case_sensitive=False,
        ),
    ] = Engine.PROMETHEUS,
    mutants: Annotated[
        int,
        typer.Option(
            "--mutants",
            help="Write nothing; apply N sampled mutations to each spec's generated rules, run the spec's generated "
            "promtool tests on each and print how many they kill per alert family (docs/rules.md).",
            min=0,
        ),
    ] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the --mutants sample.")] = 16,
    family: Annotated[
        str | None,
        typer.Option(
            "--family",
            help="Draw the --mutants sample from one alert family's mutants: burn rate, tiers, baseline, "
            "scale-out, consistency, engine, absent or budget.",
        ),
    ] = None,
) -> None:
    """Write specs' rules, alerts, promtool tests, dashboards, runbook, Kubernetes objects and Alertmanager config.

    Under OUTPUT:

    rules/: recording rules, alerts and their promtool unit tests.

    dashboards/: Grafana dashboards (JSON) and provisioning files.

    runbooks/: one Markdown runbook per service: a short section per alert, linking its debugging guide.

    exporters/: PrometheusRule (a VMRule, <service>.vmrule.yaml, with --engine victoriametrics), vLLM + GPU sidecar
    Deployment, ConfigMap, PodMonitor (one per distinct model selector; it gives the scraped series the
    selector's labels, and selector labels no scrape can set are warned about), HPA, KEDA ScaledObject.

    alertmanager/: one Alertmanager configuration per service: pages and tickets routed to the spec's receivers,
    grouped and inhibited as the alerts expect (docs/rules.md; amtool check-config passes on it).

    --engine victoriametrics writes rules that fire on time under vmalert (no promtool tests: the file is
    MetricsQL, checked with `vmalert -dryRun` when vmalert is on PATH); thanos and mimir add their rulers' fields.

    Files are replaced all at once: the new set is written to a hidden staging folder in OUTPUT
    (.slokit-staging-PID/, which no rule or dashboard glob matches), the rule files there are checked with
    `promtool check rules` (when promtool is on PATH; --no-promtool skips it), a journal is committed, and only
    then is each file renamed over the old one. A failure or a kill before the journal leaves the previous files
    as they were; a kill during the renames is completed from the journal by the next run (or --check).

    --mutants N writes nothing: it breaks the rules N ways per spec (numbers, ranges, offsets, comparisons,
    arithmetic, matchers, grouping labels, aggregations, functions, dropped clauses, deleted records, `for`, `le`),
    drawn uniformly from all of them (--family: from one family's), and reports the share the generated tests
    kill, overall and per family, with a 95% interval. N at least the number of mutants runs every one.

    Example: slokit generate examples/*.yaml -o . --check
    """
    _refuse_contradictions(ctx, mutants=mutants, check=check, no_promtool=no_promtool)
    if mutants:
        _mutation_check(specs, mutants, seed, engine, family)
        return
    check_output_dir(output)
    from slokit.generate import GenerateError, generate_all  # grafanalib and jinja2 load only for this command
    from slokit.generate.writer import JOURNAL, IncompleteWriteError, WriteError, write_files

    loaded = load_specs_or_exit(specs)
    check_sizes_or_exit(loaded)
    print_scrape_warnings(loaded)
    try:
        files = generate_all(loaded, engine, progress=lambda line: typer.echo(line, err=True))
    except GenerateError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    check_output_dir(output, inputs=[Path(spec.path) for spec in loaded], writes=files)
    created = _missing_folders(output, files)
    try:
        verify = None if no_promtool else (lambda staged: _verify(staged, engine))
        report = write_files(files, output, check=check, verify=verify)
    except WriteError as error:
        _remove_empty(created)
        typer.echo(f"nothing written: {error}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    except IncompleteWriteError as error:  # after the commit point: some files are new, the journal finishes them
        typer.echo(f"written in part: {error}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    except OSError as error:  # the writer raises plain OSError only before its commit point
        _remove_empty(created)
        typer.echo(f"nothing written: cannot write under {output}: {error.strerror or error}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if report.recovered:
        typer.echo(
            f"completed an interrupted write from {output / JOURNAL}: {len(report.recovered)} file(s) put in place",
            err=True,
        )
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


def _refuse_contradictions(ctx: typer.Context, *, mutants: int, check: bool, no_promtool: bool) -> None:
    """Exit 2 on options that ask for two different things: the run would silently honour only one of them.

    `--mutants` writes nothing and runs promtool, so it cannot also check files on disk (`--check`), skip promtool
    (`--no-promtool`) or write into a folder (`-o`); `--seed` picks the mutants, so it means nothing without them.
    """
    given = set()
    for name in ("output", "seed", "family"):
        source = ctx.get_parameter_source(name)  # an enum of typer's own click copy: compared by name
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(name)
    if mutants:
        contradictions = (
            ("--check", check, "--check compares the files on disk with the spec; run the two separately"),
            ("--no-promtool", no_promtool, "--mutants runs the generated tests with promtool"),
            ("-o", "output" in given, "--mutants writes nothing; drop -o"),
        )
        for flag, used, why in contradictions:
            if used:
                typer.echo(f"--mutants {mutants} and {flag} contradict each other: {why}", err=True)
                raise typer.Exit(EXIT_USAGE)
    else:
        for flag in ("seed", "family"):
            if flag in given:
                typer.echo(f"--{flag} picks the --mutants sample; without --mutants N it does nothing: drop it",
                           err=True)  # fmt: skip
                raise typer.Exit(EXIT_USAGE)


def _missing_folders(output: Path, files: Mapping[str, str]) -> list[Path]:
    """The folders a write of `files` under `output` would create, deepest first (to remove them after a refusal)."""
    folders = {output}
    for relative in files:
        folders.update((output / relative).parents)
    inside = [f for f in folders if f == output or output in f.parents]
    return sorted((f for f in inside if not f.exists()), key=lambda f: len(f.parts), reverse=True)


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders this run created and left empty: a refused generate leaves no empty tree behind."""
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty (someone wrote there meanwhile) or already gone: keep it
            folder.rmdir()


def _mutation_check(specs: list[Path] | None, n: int, seed: int, engine: Engine, family: str | None) -> None:
    """`--mutants N`: the mutation score of each spec's generated tests, a table per spec."""
    from slokit.generate.mutants import FAMILIES, OVERALL, run_mutants
    from slokit.local.prometheus import PROMTOOL_BINARY, find_binary

    if family is not None and family not in FAMILIES:
        typer.echo(f"--family {family!r} is not an alert family; use one of: {', '.join(FAMILIES)}", err=True)
        raise typer.Exit(EXIT_USAGE)
    if engine is not Engine.PROMETHEUS:
        typer.echo("--mutants needs --engine prometheus: promtool runs the generated tests", err=True)
        raise typer.Exit(EXIT_USAGE)
    promtool = find_binary(PROMTOOL_BINARY)
    if promtool is None:
        typer.echo("--mutants needs promtool on PATH", err=True)
        raise typer.Exit(EXIT_USAGE)
    typer.echo(f"running the generated tests with {describe(promtool, PROMTOOL_BINARY)}", err=True)
    failed = False
    for spec in load_specs_or_exit(specs):
        report = run_mutants(spec, n, seed=seed, family=family)
        drawn = (
            f"of the {family} family's {report.population.get(family, 0)}"
            if family
            else f"of {report.population.get(OVERALL, 0)}"
        )
        typer.echo(f"{spec.service} ({spec.path}): {len(report.outcomes)} mutants {drawn}, seed {seed}")
        if not report.baseline_ok:
            typer.echo(f"the unmutated rules fail their own tests:\n{report.baseline_output}", err=True)
            failed = True
            continue
        typer.echo(report.table())
        for mutant in report.survivors():
            typer.echo(f"  survived: {mutant.rule_name}: {mutant.operator}: {mutant.description}")
        typer.echo("")
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _verify(staged: Mapping[str, Path], engine: Engine) -> None:
    """Check the staged rule files with the engine's checker: promtool, or `vmalert -dryRun` for vmalert."""
    if engine is Engine.VICTORIAMETRICS:
        _vmalert_verify(staged)
    else:
        _promtool_verify(staged, engine)


def _vmalert_verify(staged: Mapping[str, Path]) -> None:
    """`vmalert -dryRun` on the staged rule files; raises WriteError with vmalert's words if it refuses."""
    import subprocess

    from slokit.generate.writer import WriteError
    from slokit.local.prometheus import find_binary

    rule_files = [path for relative, path in sorted(staged.items()) if relative.endswith(RULE_SUFFIX)]
    vmalert = find_binary("vmalert")
    if not rule_files:
        return
    if vmalert is None:
        typer.echo("vmalert is not on PATH: rule files written without `vmalert -dryRun`", err=True)
        return
    typer.echo(f"checking the new rule files with {describe(vmalert, 'vmalert')} -dryRun", err=True)
    for path in rule_files:
        argv = [vmalert, "-dryRun", f"-rule={path}", "-loggerLevel=ERROR"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            relative = next(name for name, staged_path in staged.items() if staged_path == path)
            output = (result.stdout + result.stderr).replace(str(path), relative)
            raise WriteError(f"vmalert -dryRun refused the new rule file:\n{output.strip()}")


def _promtool_verify(staged: Mapping[str, Path], engine: Engine = Engine.PROMETHEUS) -> None:
    """`promtool check rules` on the staged rule files; raises WriteError with promtool's words if it refuses.

    Thanos and Mimir files are checked as promtool reads them: without the ruler's own fields."""
    from slokit.generate.writer import WriteError
    from slokit.local.prometheus import PROMTOOL_BINARY, check_rule_files, find_binary

    rule_files = [path for relative, path in sorted(staged.items()) if relative.endswith(RULE_SUFFIX)]
    if not rule_files:
        return
    if engine is not Engine.PROMETHEUS:
        staged, rule_files = _promtool_views(staged, rule_files)
    promtool = find_binary(PROMTOOL_BINARY)
    if promtool is None:
        typer.echo("promtool is not on PATH: rule files written without `promtool check rules`", err=True)
        return
    typer.echo(f"checking the new rule files with {describe(promtool, PROMTOOL_BINARY)} check rules", err=True)
    try:
        result = check_rule_files(rule_files)
    finally:
        if engine is not Engine.PROMETHEUS:
            for view in rule_files:
                view.unlink(missing_ok=True)
    if not result.ok:
        names = {str(path): relative for relative, path in staged.items()}
        output = result.output
        for staged_path, relative in names.items():
            output = output.replace(staged_path, relative)
        raise WriteError(f"promtool check rules refused the new rule files:\n{output.strip()}")


RULE_SUFFIX = ".rules.yaml"


def _promtool_views(staged: Mapping[str, Path], rule_files: list[Path]) -> tuple[dict[str, Path], list[Path]]:
    """Beside each staged Thanos/Mimir rule file (in the staging folder), its promtool view
    (engines.promtool_view), deleted with the staging folder; returns the views in place of the files."""
    import yaml

    from slokit.generate.engines import promtool_view

    views: dict[str, Path] = dict(staged)
    paths = []
    for relative, path in staged.items():
        if path not in rule_files:
            continue
        view = path.with_name(path.name.replace(RULE_SUFFIX, ".promtool" + RULE_SUFFIX))
        data = promtool_view(yaml.safe_load(path.read_text(encoding="utf-8")))
        view.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        views[relative] = view
        paths.append(view)
    return views, paths


def register(app: typer.Typer) -> None:
    """Add the generate command."""
    app.command()(generate)
