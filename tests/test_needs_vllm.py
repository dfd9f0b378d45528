"""Commands that run a real engine fail at once, with the install line, when vLLM cannot be imported.

A bare `pip install .` has no vLLM and no torch. The check runs in a subprocess whose `sys.meta_path` refuses to
import them (as an environment without them does), and must stop before anything starts: no output directory,
no demo module loaded, no child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKED_RUN = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    BLOCKED = set(json.loads(sys.argv[1]))
    sys.meta_path.insert(0, Blocker())
    from slokit.cli import app
    import multiprocessing, subprocess
    started = []
    real_popen = subprocess.Popen.__init__
    def spy(self, *args, **kwargs):
        started.append(str(args[0] if args else kwargs.get("args")))
        real_popen(self, *args, **kwargs)
    subprocess.Popen.__init__ = spy
    try:
        app(sys.argv[2:], prog_name="slokit")
        code = 0
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"code": code, "started": started, "demo_loaded": "slokit.demo" in sys.modules}))
    """
)


def _run(blocked: list[str], *argv: str) -> tuple[dict[str, object], str]:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, json.dumps(blocked), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    return json.loads(lines[-1]), result.stderr


@pytest.mark.parametrize("blocked", [["vllm", "torch"], ["torch"], ["vllm"]])
def test_demo_without_vllm_exits_2_with_the_install_line_and_starts_nothing(tmp_path: Path, blocked: list[str]) -> None:
    out = tmp_path / "demo-out"
    doc, stderr = _run(blocked, "demo", "-o", str(out))
    assert doc["code"] == 2, (doc, stderr)
    assert "pip install 'slokit[vllm]'" in stderr and "make demo" in stderr
    for name in blocked:
        assert name in stderr
    assert doc["started"] == [] and doc["demo_loaded"] is False
    assert not out.exists()
    assert "Traceback" not in stderr


def test_the_check_passes_where_vllm_is_installed() -> None:
    """The same check with nothing blocked lets the command through (here: to its help, which starts nothing)."""
    from slokit.commands.common import missing_modules

    assert missing_modules() == []
    doc, stderr = _run([], "demo", "--help")
    assert doc["code"] == 0, stderr
