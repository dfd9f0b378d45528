"""Issue 32, items 4, 5, 6, 8 and 9: output paths, overwrites, contradictory options, the checker on PATH, and a
spec too large for its ConfigMap, each through the real command line.

Output paths follow one rule (README "Output paths", slokit/commands/paths.py): every mistake is one line on
stderr naming the path, exit 2, before any work; a file is replaced only with --force; no command writes over one
of its inputs. The seven mistakes the issue lists ended in a traceback (exit 1); `export openslo a.yaml -o a.yaml`
destroyed the spec with exit 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slokit.cli import app
from slokit.commands.common import EXIT_USAGE
from slokit.spec import default_spec_path

ROOT = Path(__file__).resolve().parent.parent
PYRRA = ROOT / "tests" / "data" / "interop" / "pyrra" / "caddy-response-latency.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def _cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slokit.cli", *args], capture_output=True, text=True, timeout=300, check=False,
        cwd=cwd, env=env or ENV,
    )  # fmt: skip


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a spec, a folder `d`, a file `afile` and a probe run's requests.csv (as `slokit probe` writes)."""
    from tests.test_report_probe_html import COLUMNS, SPEC, _rows

    shutil.copy(default_spec_path(), tmp_path / "spec.yaml")
    (tmp_path / "p.yaml").write_text(SPEC, encoding="utf-8")
    lines = [",".join(COLUMNS)] + [",".join(str(row[c]) for c in COLUMNS) for row in _rows()]
    (tmp_path / "requests.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "probe.json").write_text('{"class": "chat", "model": "m1", "basis": "scheduled"}', encoding="utf-8")
    (tmp_path / "d").mkdir()
    (tmp_path / "afile").write_text("not a folder\n", encoding="utf-8")
    return tmp_path


def _one_line_exit_2(done: subprocess.CompletedProcess[str], path: str) -> None:
    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0], done.stderr


# -- item 5: the seven mistakes of the issue, and their siblings ---------------------------------------------------
ISSUE_CASES = [
    (["init", "-o", "missing/dir/x.yaml"], "missing/dir/x.yaml"),
    (["init", "-o", "d", "--force"], "d"),
    (["simulate", "spec.yaml", "--days", "0.05", "-o", "d"], "d"),
    (["report", "p.yaml", "--probe", "requests.csv", "-o", "afile"], "afile"),
    (["export", "openslo", "spec.yaml", "-o", "d"], "d"),
    (["export", "openslo", "spec.yaml", "-o", "missing/x.yaml"], "missing/x.yaml"),
    (["import", str(PYRRA), "-o", "d", "--force"], "d"),
]
MORE_CASES = [
    (["import", str(PYRRA), "-o", "missing/x.yaml"], "missing/x.yaml"),
    (["simulate", "spec.yaml", "--days", "0.05", "-o", "missing/h.om"], "missing/h.om"),
    (["init", "-o", "afile/x.yaml"], "afile/x.yaml"),
    (["generate", "spec.yaml", "-o", "afile", "--no-promtool"], "afile"),
    (["generate", "spec.yaml", "-o", "missing/deploy", "--no-promtool"], "missing/deploy"),
    (["report", "p.yaml", "--probe", "requests.csv", "-o", "missing/report"], "missing/report"),
    (["backtest", "spec.yaml", "--data", "requests.csv", "-o", "afile"], "afile"),
    (["probe", "http://127.0.0.1:9", "--model", "m", "-n", "1", "-o", "afile"], "afile"),
]


@pytest.mark.parametrize(
    ("args", "path"), ISSUE_CASES + MORE_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_an_output_path_mistake_is_one_line_naming_it_with_exit_2(work: Path, args: list[str], path: str) -> None:
    before = sorted(p.relative_to(work).as_posix() for p in work.rglob("*"))
    _one_line_exit_2(_cli(work, *args), path)
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == before  # nothing made, nothing left


FAILING_PROMTOOL = """#!/bin/sh
case "$1" in --version) echo "promtool, version 9.9.9-fake (branch: x)"; exit 0;; esac
echo "promtool (fake): $* refused: bad rule" >&2
exit 1
"""
PASSING_PROMTOOL = """#!/bin/sh
case "$1" in --version) echo "promtool, version 9.9.9-fake (branch: x)"; exit 0;; esac
echo "SUCCESS (fake)"
exit 0
"""


def _fake_promtool(folder: Path, script: str) -> tuple[Path, dict[str, str]]:
    folder.mkdir()
    fake = folder / "promtool"
    fake.write_text(script, encoding="utf-8")
    fake.chmod(0o755)
    return fake, {**ENV, "PATH": f"{folder}{os.pathsep}{ENV.get('PATH', '')}"}


def test_generate_refused_by_promtool_leaves_no_empty_tree(work: Path) -> None:
    _, env = _fake_promtool(work / "bin", FAILING_PROMTOOL)
    (work / "deploy").mkdir()
    done = _cli(work, "generate", "spec.yaml", "-o", "deploy/new", env=env)
    assert done.returncode == 1 and "promtool check rules refused" in done.stderr, done.stderr
    assert list((work / "deploy").iterdir()) == []  # not deploy/new, not deploy/new/rules, nothing
    (work / "deploy" / "new").mkdir()
    (work / "deploy" / "new" / "mine.txt").write_text("kept\n", encoding="utf-8")
    done = _cli(work, "generate", "spec.yaml", "-o", "deploy/new", env=env)
    assert done.returncode == 1, done.stderr
    assert [p.name for p in (work / "deploy" / "new").iterdir()] == ["mine.txt"]  # a folder it did not make stays


# -- item 6: no command writes over its inputs; export needs --force ----------------------------------------------
def test_export_never_overwrites_its_input_spec(work: Path) -> None:
    spec = work / "spec.yaml"
    original = spec.read_bytes()
    for extra in ([], ["--force"]):
        done = _cli(work, "export", "openslo", "spec.yaml", "-o", "spec.yaml", *extra)
        _one_line_exit_2(done, "spec.yaml")
        assert "input" in done.stderr
        assert spec.read_bytes() == original
    os.symlink(spec, work / "link.yaml")  # the same file under another name is the same input
    _one_line_exit_2(_cli(work, "export", "openslo", "spec.yaml", "-o", "link.yaml", "--force"), "link.yaml")
    assert spec.read_bytes() == original


def test_export_needs_force_to_replace_a_file(work: Path) -> None:
    runner = CliRunner()
    target = work / "out.openslo.yaml"
    assert runner.invoke(app, ["export", "openslo", str(work / "spec.yaml"), "-o", str(target)]).exit_code == 0
    text = target.read_text(encoding="utf-8")
    assert "kind: SLO" in text
    target.write_text("mine\n", encoding="utf-8")
    again = runner.invoke(app, ["export", "openslo", str(work / "spec.yaml"), "-o", str(target)])
    assert again.exit_code == EXIT_USAGE and "--force" in again.output
    assert target.read_text(encoding="utf-8") == "mine\n"
    forced = runner.invoke(app, ["export", "openslo", str(work / "spec.yaml"), "-o", str(target), "--force"])
    assert forced.exit_code == 0 and target.read_text(encoding="utf-8") == text


def test_import_simulate_and_generate_refuse_to_write_over_an_input(work: Path) -> None:
    runner = CliRunner()
    pyrra = work / "pyrra.yaml"
    shutil.copy(PYRRA, pyrra)
    done = runner.invoke(app, ["import", str(pyrra), "-o", str(pyrra), "--force"])
    assert done.exit_code == EXIT_USAGE and "input" in done.output
    assert pyrra.read_bytes() == PYRRA.read_bytes()
    # simulate writes OUTPUT's stem + .incidents.yaml: here that is the --incidents file it reads
    incidents = work / "h.incidents.yaml"
    incidents.write_text("[]\n", encoding="utf-8")
    done = runner.invoke(app, ["simulate", str(work / "spec.yaml"), "--days", "0.05", "--incidents", str(incidents),
                               "-o", str(work / "h.om"), "--force"])  # fmt: skip
    assert done.exit_code == EXIT_USAGE and "input" in done.output and "h.incidents.yaml" in done.output
    assert incidents.read_text(encoding="utf-8") == "[]\n" and not (work / "h.om").exists()
    # generate would write runbooks/assistant.md: a spec kept under that name is not overwritten
    (work / "out" / "runbooks").mkdir(parents=True)
    inside = work / "out" / "runbooks" / "assistant.md"
    shutil.copy(work / "spec.yaml", inside)
    done = runner.invoke(app, ["generate", str(inside), "-o", str(work / "out"), "--no-promtool"])
    assert done.exit_code == EXIT_USAGE and "input" in done.output, done.output
    assert inside.read_bytes() == (work / "spec.yaml").read_bytes()


def test_simulate_needs_force_to_replace_its_files(work: Path) -> None:
    runner = CliRunner()
    out = work / "h.om"
    out.write_text("old\n", encoding="utf-8")
    done = runner.invoke(app, ["simulate", str(work / "spec.yaml"), "--days", "0.05", "-o", str(out)])
    assert done.exit_code == EXIT_USAGE and "--force" in done.output
    assert out.read_text(encoding="utf-8") == "old\n"


# -- item 4: the checker is the first on PATH, and the output names it ---------------------------------------------
def test_find_binary_takes_the_first_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slokit.local.prometheus import find_binary

    fake, env = _fake_promtool(tmp_path / "bin", PASSING_PROMTOOL)
    monkeypatch.setenv("PATH", env["PATH"])
    assert find_binary("promtool") == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_binary("prometheus") is None  # not on PATH: not found, whatever /usr/bin holds


def test_generate_checks_with_the_promtool_on_path_and_names_it(work: Path) -> None:
    fake, env = _fake_promtool(work / "bin", PASSING_PROMTOOL)
    done = _cli(work, "generate", "spec.yaml", "-o", "deploy", env=env)
    assert done.returncode == 0, done.stderr
    assert f"checking the new rule files with {fake} (promtool, version 9.9.9-fake) check rules" in done.stderr
    real = shutil.which("promtool", path="/usr/bin:/bin")
    if real is not None:  # and without the fake, the real one is named with its own version
        done = _cli(work, "generate", "spec.yaml", "-o", "deploy2", env={**ENV, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        assert f"with {real} (promtool, version " in done.stderr


# -- item 8: contradictory generate options ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--check", "--mutants", "2"], "--check"),
        (["--mutants", "2", "--no-promtool"], "--no-promtool"),
        (["--mutants", "2", "-o", "deploy"], "-o"),
        (["--seed", "3"], "--seed"),
        (["--family", "tiers"], "--family"),
    ],
)
def test_generate_refuses_contradictory_options(
    work: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    monkeypatch.chdir(work)  # the default -o is ./generated
    done = CliRunner().invoke(app, ["generate", "spec.yaml", *args])
    assert done.exit_code == EXIT_USAGE, done.output
    assert named in done.output and "mutants" in done.output
    assert ", seed " not in done.output  # refused before any mutant ran
    assert not (work / "deploy").exists() and not (work / "generated").exists()


def test_generate_refuses_a_family_that_does_not_exist(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--family` names one of the alert families, listed in the error; nothing runs."""
    monkeypatch.chdir(work)
    done = CliRunner().invoke(app, ["generate", "spec.yaml", "--mutants", "2", "--family", "burn"])
    assert done.exit_code == EXIT_USAGE, done.output
    assert "--family 'burn' is not an alert family" in done.output
    assert "burn rate, tiers, baseline" in done.output and ", seed " not in done.output


# -- item 9: a spec too large for the ConfigMap it travels in -----------------------------------------------------
def _with_description(work: Path, size: int) -> Path:
    text = (work / "spec.yaml").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("description:"))
    path = work / f"desc-{size}.yaml"
    path.write_text(text.replace(line, "description: " + "x" * size), encoding="utf-8")
    return path


def test_a_spec_over_1_mib_is_refused_at_validate_and_generate(work: Path) -> None:
    big = _with_description(work, 2 * 1024 * 1024)
    line_no = next(i for i, line in enumerate(big.read_text().splitlines(), 1) if line.startswith("description:"))
    for args in (["validate", big.name], ["generate", big.name, "-o", "deploy", "--no-promtool"]):
        done = _cli(work, *args)
        assert done.returncode == EXIT_USAGE, done.stderr[-2000:]
        first = done.stderr.splitlines()[0]
        assert first.startswith(f"{big.name}:{line_no}:14: description: this value is 2.0 MiB"), first
        assert "ConfigMap exporters/assistant-configmap.yaml" in first and "1 MiB" in first
    assert not (work / "deploy").exists()


def test_a_spec_over_256_kib_warns_about_client_side_apply(work: Path) -> None:
    mid = _with_description(work, 300 * 1024)
    done = _cli(work, "validate", mid.name)
    assert done.returncode == 0, done.stderr
    assert "--server-side" in done.stderr and "description" in done.stderr
    small = _cli(work, "validate", "spec.yaml")
    assert small.returncode == 0 and "--server-side" not in small.stderr


# -- the one place it is documented -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["init"],
        ["import"],
        ["export", "openslo"],
        ["simulate"],
        ["generate"],
        ["report"],
        ["backtest"],
        ["probe"],
        ["autoscale"],
    ],
)
def test_every_output_option_points_at_the_readme_section(command: list[str]) -> None:
    done = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "300"})
    assert done.exit_code == 0 and "README: Output paths" in done.output
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("### Output paths") == 1
