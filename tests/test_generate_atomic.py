"""`slokit generate` replaces the generated set all at once: killed mid-write, the previous set stays intact.

The generate command runs as a real subprocess and is killed with SIGKILL at a point a hook in that subprocess
announces (after some files are staged, or after some renames), so the test needs no timing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slokit.cli import app
from slokit.commands.generate import _promtool_verify
from slokit.generate.writer import JOURNAL, STAGING_PREFIX, WriteError, recover, write_files

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

# Runs `slokit generate` with a hook: after the N-th call of a writer step, announce it in a marker file and hang.
HOOK = """
import os, sys, time
from pathlib import Path
import slokit.generate.writer as w
step, after, marker = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
calls = [0]
if step == "stage":
    original = w._stage_one
    def hooked(*args):
        result = original(*args)
        calls[0] += 1
        if calls[0] == after:
            marker.write_text("staged")
            time.sleep(600)
        return result
    w._stage_one = hooked
else:
    real_replace = os.replace
    def replace(src, dst):
        real_replace(src, dst)
        if Path(dst).name != w.JOURNAL:
            calls[0] += 1
            if calls[0] == after:
                marker.write_text("renamed")
                time.sleep(600)
    w.os.replace = replace
from slokit.cli import app
app(sys.argv[4:], standalone_mode=True)
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def staged(name: str) -> bool:
    return name.startswith(STAGING_PREFIX)


def globbed(folder: Path) -> set[str]:
    """Every file a Prometheus or Grafana glob of a generated folder (`rules/*`, `dashboards/*`, ...) would match.

    Go's filepath.Glob matches dotfiles with `*`, so hidden names count too."""
    folders = {folder, *(p for p in folder.rglob("*") if p.is_dir() and not staged(str(p.relative_to(folder))))}
    return {str(p.relative_to(folder)) for f in folders for p in f.iterdir() if p.is_file()}


def edited_specs(tmp: Path) -> list[Path]:
    """The example specs with a new description, so that every generated file that quotes it changes."""
    out = []
    folder = tmp / "specs"
    folder.mkdir()
    for path in EXAMPLES:
        text = path.read_text()
        assert "\ndescription:" in text, path
        edited = text.replace("\ndescription:", "\ndescription: Edited for the kill test.\nx_old_description:", 1)
        edited = edited.replace("\nx_old_description:", "\n# old description:", 1)
        target = folder / path.name
        target.write_text(edited)
        out.append(target)
    return out


def generate(specs: list[Path], out: Path, *extra: str) -> None:
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), *extra])
    assert result.exit_code == 0, result.output


def run_killed(step: str, after: int, specs: list[Path], out: Path, tmp: Path) -> None:
    marker = tmp / f"marker-{step}"
    argv = [sys.executable, "-c", HOOK, step, str(after), str(marker), "generate", *map(str, specs), "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(1200):  # bounded: 120 s for imports and generation on a loaded machine
            if marker.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), (proc.poll(), proc.stdout.read().decode() if proc.stdout else "")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def sets(tmp_path: Path) -> tuple[Path, dict[str, bytes], list[Path], dict[str, bytes]]:
    """(output dir holding the previous set, previous set, edited specs, the set the edited specs generate)."""
    out = tmp_path / "out"
    generate(EXAMPLES, out, "--no-promtool")
    previous = snapshot(out)
    specs = edited_specs(tmp_path)
    expected_dir = tmp_path / "expected"
    generate(specs, expected_dir, "--no-promtool")
    expected = snapshot(expected_dir)
    changed = [k for k in expected if expected[k] != previous.get(k)]
    assert len(changed) >= 6, changed  # the edit reaches many files, so a mixed set would show
    return out, previous, specs, expected


def test_killed_while_staging_leaves_the_previous_set_intact(
    sets: tuple[Path, dict[str, bytes], list[Path], dict[str, bytes]], tmp_path: Path
) -> None:
    out, previous, specs, expected = sets
    run_killed("stage", 4, specs, out, tmp_path)
    after = snapshot(out)
    debris = [name for name in after if staged(name)]
    assert debris  # the kill really happened mid-write: staged files were left behind...
    assert {k: v for k, v in after.items() if k not in debris} == previous  # ...and no target was touched
    assert globbed(out) == set(previous)  # ...and no rule or dashboard glob sees a staged file
    assert not (out / JOURNAL).exists()
    # The next run drops the debris and writes the new set.
    generate(specs, out, "--no-promtool")
    assert snapshot(out) == expected


@pytest.mark.parametrize("completer", ["check", "generate"])
def test_killed_while_renaming_is_completed_from_the_journal_by_the_next_run(
    completer: str, sets: tuple[Path, dict[str, bytes], list[Path], dict[str, bytes]], tmp_path: Path
) -> None:
    out, previous, specs, expected = sets
    run_killed("rename", 2, specs, out, tmp_path)
    assert (out / JOURNAL).exists()
    mixed = {k: v for k, v in snapshot(out).items() if not staged(k) and k != JOURNAL}
    assert mixed != previous and mixed != expected  # killed between renames: what a kill here leaves (docs/rules.md)
    assert globbed(out) == set(previous) | {JOURNAL}  # staged files stay out of every glob even now
    # Any next run, --check included, completes the committed set from the journal before anything else.
    args = ["--check"] if completer == "check" else ["--no-promtool"]
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    assert "completed an interrupted write" in result.output
    assert snapshot(out) == expected
    assert recover(out) == []


def test_a_folder_in_the_way_fails_before_anything_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("old a\n")
    (tmp_path / "b").mkdir()
    with pytest.raises(WriteError, match="is a folder"):
        write_files({"a.yaml": "new a\n", "b": "new b\n"}, tmp_path, check=False)
    assert (tmp_path / "a.yaml").read_text() == "old a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b"]


@pytest.mark.prometheus
def test_promtool_refusal_writes_nothing(tmp_path: Path) -> None:
    if shutil.which("promtool") is None and not Path("/usr/bin/promtool").exists():
        pytest.skip("promtool not installed")
    good = "groups:\n  - name: g\n    rules:\n      - record: job:up:sum\n        expr: sum(up)\n"
    bad = "groups:\n  - name: g\n    rules:\n      - record: job:up:sum\n        expr: sum(up\n"
    write_files({"rules/x.rules.yaml": good, "dashboards/d.json": "{}\n"}, tmp_path, check=False)
    before = snapshot(tmp_path)
    with pytest.raises(WriteError, match=r"promtool check rules refused[\s\S]*rules/x\.rules\.yaml"):
        write_files(
            {"rules/x.rules.yaml": bad, "dashboards/d.json": '{"new": 1}\n'},
            tmp_path,
            check=False,
            verify=_promtool_verify,
        )
    assert snapshot(tmp_path) == before  # neither the bad rule file nor the dashboard beside it replaced
    report = write_files({"rules/x.rules.yaml": good.replace("sum(up)", "max(up)")}, tmp_path, check=False,
                         verify=_promtool_verify)  # fmt: skip
    assert report.written == ["rules/x.rules.yaml"]


FAILING_PROMTOOL = """#!/bin/sh
echo "promtool (fake): $* refused: bad rule" >&2
exit 1
"""


def test_generate_checks_rules_with_promtool_and_can_skip_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import slokit.local.prometheus as prometheus

    out = tmp_path / "out"
    generate(EXAMPLES, out, "--no-promtool")
    specs = edited_specs(tmp_path)
    (out / "rules" / "assistant.rules.yaml").write_text("# an older rule file\ngroups: []\n")  # rules change too
    previous = snapshot(out)
    # A promtool that refuses everything, first on PATH (and found there, not in /usr/bin).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "promtool"
    fake.write_text(FAILING_PROMTOOL)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(prometheus, "find_binary", shutil.which)
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "nothing written: promtool check rules refused the new rule files" in result.output
    assert "promtool (fake): check rules" in result.output and ".rules.yaml" in result.output
    assert snapshot(out) == previous  # the previous files intact, no staging or journal left
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), "--no-promtool"])
    assert result.exit_code == 0, result.output
    assert snapshot(out) != previous and not [name for name in snapshot(out) if staged(name) or name == JOURNAL]


def test_a_failure_after_the_commit_point_does_not_say_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import slokit.generate.writer as writer

    out = tmp_path / "out"
    generate(EXAMPLES, out, "--no-promtool")
    specs = edited_specs(tmp_path)
    real_replace = os.replace
    calls = [0]

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name != JOURNAL:
            calls[0] += 1
            if calls[0] == 3:
                raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", replace)
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), "--no-promtool"])
    assert result.exit_code == 1, result.output
    assert "nothing written" not in result.output
    assert "written in part" in result.output and "run slokit generate again" in result.output
    monkeypatch.setattr(writer.os, "replace", real_replace)
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), "--check"])
    assert result.exit_code == 0, result.output
