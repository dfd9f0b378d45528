"""Shared fixtures. Real components (one vLLM engine, Prometheus) are session-scoped and live in their own plugin
modules so each stays owned by one place.

`make test` runs the suite on two pytest-xdist workers. Every test module that runs a vLLM engine goes to one
worker, in order: the session engine is per worker (spreading its tests would start one engine per worker), and
those tests time real latencies, which two engines on two cores would blur. Everything else spreads test by
test, except that a module whose tests share a module-scoped fixture stays on one worker (the fixture is built once).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.fixtures_vllm", "tests.fixtures_prometheus"]

# A module that contains one of these runs a vLLM engine: the session fixture, or one of its own.
ENGINE_MARKS = ("vllm_server", "start_vllm_server", "run_demo")


@functools.cache
def runs_an_engine(path: Path) -> bool:
    """Whether a test module runs a vLLM engine. The xdist controller sees node ids only, not fixtures or marks,
    so it reads the module's text."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    return any(mark in text for mark in ENGINE_MARKS)


def shares_a_module_fixture(path: Path) -> bool:
    """Whether a test module defines a module-scoped fixture (read from its text, as runs_an_engine)."""
    try:
        return 'scope="module"' in path.read_text(encoding="utf-8")
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Load scheduling, one test at a time, except that every engine module's tests are one unit on one worker and
    a module with a module-scoped fixture is a unit of its own.

    (xdist's own `--dist loadgroup` groups by mark, but cannot on pytest 9: it renames node ids through an
    attribute pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class EngineScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if runs_an_engine(config.rootpath / module):
                return "vllm-engine"
            # A module whose tests share a module-scoped fixture (a mutation run, a backfilled history) stays on one
            # worker, so the fixture is built once, not once per worker.
            return module if shares_a_module_fixture(config.rootpath / module) else nodeid

    return EngineScheduling(config, log)
