"""One rule for every command's output path, so a mistake reads the same everywhere (README: "Output paths").

A command writes either one FILE (`init`, `import`, `export openslo`, `simulate`) or into one DIRECTORY
(`generate`, `report`, `backtest`, `probe`, `demo`). For both:

- the folder that holds the output must exist (slokit creates the output directory itself, never its parents:
  a typo in `-o deploy/prdo/x` should not quietly grow a new tree);
- a FILE output that exists is replaced only with `--force`; a DIRECTORY output may exist, and the command replaces
  the files it names in its help there and leaves every other file alone;
- no command writes over one of its own inputs, `--force` or not (`export openslo a.yaml -o a.yaml` would destroy
  the spec it reads);
- a FILE where a directory is expected, or a directory where a file is expected, is refused before any work.

Every refusal is one line on stderr that names the path and what would be right, with exit code 2 (the input is
wrong), checked before the command does its (possibly minutes-long) work, never a traceback afterwards.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

import typer

from slokit.commands.common import EXIT_USAGE


def refuse(message: str) -> NoReturn:
    """Print `message` as the one line a user mistake gets, and exit 2."""
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_USAGE)


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name the same file (through links and `..`); False when either does not exist."""
    try:
        return a.samefile(b)
    except OSError:
        return False


def _holder(path: Path, flag: str) -> None:
    """Refuse when the folder that would hold `path` is missing or is not a folder."""
    parent = path.parent
    if parent.is_dir():
        return
    if parent.exists():
        refuse(f"{flag} {path}: {parent} is a file, not a folder; write the output into a folder")
    refuse(f"{flag} {path}: the folder {parent} does not exist; create it first (mkdir -p {parent}) or write elsewhere")


def _clobbers_input(flag: str, path: Path, source: Path) -> NoReturn:
    refuse(
        f"{flag} {path}: would write over {source}, an input of this command; slokit never writes over its inputs "
        "(--force or not): write the output elsewhere"
    )


def check_output_file(
    path: Path, *, force: bool, inputs: Iterable[Path] = (), flag: str = "-o", example: str = "out.yaml"
) -> None:
    """Exit 2 with one line unless `path` can be written as this command's output file.

    Checked before the command works, so a long run never ends in a traceback over a path typo. `example` is the
    file name suggested when `path` is a folder.
    """
    if path.is_dir():
        refuse(f"{flag} {path}: is a folder; name a file, e.g. {flag} {path / example}")
    _holder(path, flag)
    for source in inputs:
        if _same_file(path, source):
            _clobbers_input(flag, path, source)
    if path.exists() and not force:
        refuse(f"{flag} {path}: {path} exists; pass --force to overwrite it")


def check_output_dir(path: Path, *, inputs: Iterable[Path] = (), writes: Iterable[str] = (), flag: str = "-o") -> None:
    """Exit 2 with one line unless `path` can be this command's output directory.

    `writes` are the names (shell patterns, relative to `path`) the command writes there: an input among them is
    refused, since the command would replace it.
    """
    if path.exists() and not path.is_dir():
        refuse(f"{flag} {path}: is a file; name a folder (it is created if missing)")
    _holder(path, flag)
    if not path.is_dir():
        return
    patterns = list(writes)
    for source in inputs:
        for pattern in patterns:
            if _writes_over(path, source, pattern):
                _clobbers_input(flag, path, source)


def _writes_over(directory: Path, source: Path, pattern: str) -> bool:
    """Whether writing `pattern` under `directory` would replace the file `source`."""
    if not any(c in pattern for c in "*?["):
        return _same_file(directory / pattern, source)
    try:
        relative = source.resolve().relative_to(directory.resolve())
    except (OSError, ValueError):
        return False
    return source.is_file() and fnmatch.fnmatchcase(relative.as_posix(), pattern)


def write_output_file(path: Path, text: str, flag: str = "-o") -> None:
    """Write `text` to `path` whole or not at all (a temporary beside it, renamed over it); exit 2 on an OS error.

    Whole or not at all: a full disk or a kill must not leave a half spec where a good one was (`--force`).
    """
    handle = None
    target = path.resolve() if path.is_symlink() else path  # --force through a link replaces what it points at
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        handle = Path(temporary)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(handle, target.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(handle, 0o666 & ~umask)
        os.replace(handle, target)
    except OSError as error:
        if handle is not None:
            handle.unlink(missing_ok=True)
        refuse(f"{flag} {path}: cannot write it: {error.strerror or error}")
