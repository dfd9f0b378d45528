"""`slokit validate`, `slokit init`, `slokit --version` and `slokit generate --check` as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from slokit import __version__
from slokit.cli import app
from slokit.spec import load_spec

ROOT = Path(__file__).parent.parent
runner = CliRunner()


def slokit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slokit.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_validate_examples_exit_zero() -> None:
    result = slokit("validate", *(str(p) for p in sorted((ROOT / "examples").glob("*.yaml"))))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == 3


def test_validate_reports_every_error_and_exits_two(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: slokit/v1\nservice: Svc\nwindw: 1d\nmodels: []\nclasses: []\n")
    result = slokit("validate", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(str(bad))]
    assert len(lines) == 4, result.stderr
    assert lines[0].startswith(f"{bad}:2:10: service:")
    assert any(":3:1: windw: unknown key 'windw'; did you mean 'window'?" in line for line in lines)
    assert result.stderr.rstrip().endswith("4 problems found")


def test_validate_missing_file_is_a_user_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_validate_needs_an_argument() -> None:
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2


def test_init_writes_a_valid_commented_spec(tmp_path: Path) -> None:
    target = tmp_path / "slo.yaml"
    result = runner.invoke(app, ["init", "-o", str(target)])
    assert result.exit_code == 0
    assert "#" in target.read_text()
    assert load_spec(target).service == "assistant"
    again = runner.invoke(app, ["init", "-o", str(target)])
    assert again.exit_code == 2 and "--force" in again.output
    assert runner.invoke(app, ["init", "-o", str(target), "--force"]).exit_code == 0


def test_init_to_stdout_is_the_spec() -> None:
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 0
    assert result.stdout.startswith("# slokit spec")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"slokit {__version__}"


def test_generate_then_check(tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "summarize.yaml")
    first = runner.invoke(app, ["generate", spec, "-o", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert runner.invoke(app, ["generate", spec, "-o", str(tmp_path), "--check"]).exit_code == 0
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    if written:
        victim = written[0]
        victim.write_text(victim.read_text() + "\n# edited by hand\n")
        stale = runner.invoke(app, ["generate", spec, "-o", str(tmp_path), "--check"])
        assert stale.exit_code == 1 and "stale" in stale.output


def test_generate_rejects_two_specs_for_one_service(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "summarize.yaml"
    copy = tmp_path / "copy.yaml"
    copy.write_text(spec.read_text())
    result = runner.invoke(app, ["generate", str(spec), str(copy), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "both define service 'summarize'" in result.output
