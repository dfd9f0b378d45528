"""bench/fuzz.py in miniature: every target runs a few cases, and the per-case watchdog stops a hanging one."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def bench_fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fuzz", ROOT / "bench" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fuzz"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_fuzz_target_runs_a_few_cases(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fuzz = bench_fuzz()
    assert fuzz.main(["--cases", "5", "--case-limit", "60", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "per-case limit 60000 ms" in out
    for name in fuzz.TARGETS:
        assert f"\n{name:<11} " in out, out
    assert "within the per-case limit" in out
    written = json.loads((tmp_path / "fuzz.json").read_text(encoding="utf-8"))
    assert [run["target"] for run in written["runs"]] == list(fuzz.TARGETS)
    assert written["figures"]["all"]["cases"] == sum(run["cases"] for run in written["runs"]) > 0


def test_a_case_past_the_limit_stops_the_run_with_its_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fuzz = bench_fuzz()
    never = threading.Event()

    def hanging_target(cases: int, limit: float) -> Any:
        def check(value: int) -> bool:
            never.wait(120)  # a hang: only the watchdog ends it
            return True

        return fuzz._run(st.just(7), cases, check, limit)

    monkeypatch.setitem(fuzz.TARGETS, "spec", (hanging_target, 1.0))
    assert fuzz.main(["--cases", "3", "--targets", "spec", "--case-limit", "0.2"]) == 1
    out = capsys.readouterr().out
    assert "spec        FAILED: a case ran past the 0.2 s per-case limit; the input was:\n7" in out
    assert not never.is_set()
