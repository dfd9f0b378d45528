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
from slokit.generate.writer import JOURNAL, WriteError, recover, write_files

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
    def hooked(target, content):
        result = original(target, content)
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
    debris = [name for name in after if "/.slokit-tmp-" in f"/{name}"]
    assert debris  # the kill really happened mid-write: staged files were left behind...
    assert {k: v for k, v in after.items() if k not in debris} == previous  # ...and no target was touched
    assert not (out / JOURNAL).exists()
    # The next run drops the debris and writes the new set.
    generate(specs, out, "--no-promtool")
    assert snapshot(out) == expected


def test_killed_while_renaming_is_completed_from_the_journal(
    sets: tuple[Path, dict[str, bytes], list[Path], dict[str, bytes]], tmp_path: Path
) -> None:
    out, previous, specs, expected = sets
    run_killed("rename", 2, specs, out, tmp_path)
    assert (out / JOURNAL).exists()
    mixed = {k: v for k, v in snapshot(out).items() if ".slokit-tmp-" not in k and k != JOURNAL}
    assert mixed != previous and mixed != expected  # killed between renames: the journal must finish the set
    completed = recover(out, {p.parent for p in out.rglob("*")})
    assert completed
    assert snapshot(out) == expected
    result = CliRunner().invoke(app, ["generate", *map(str, specs), "-o", str(out), "--check"])
    assert result.exit_code == 0, result.output


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


def test_generate_checks_rules_with_promtool_and_can_skip_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["generate", "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["generate", "-o", str(tmp_path / "b"), "--no-promtool"])
    assert result.exit_code == 0, result.output
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
    assert not list(tmp_path.rglob(".slokit-tmp-*")) and not list(tmp_path.rglob(JOURNAL))
