"""Shared fixtures. Real components (one vLLM engine, Prometheus) are session-scoped and live in their own plugin
modules so each stays owned by one place.

`make test` runs the suite on two pytest-xdist workers. Every test module that runs a vLLM engine goes to one
worker, in order: the session engine is per worker (spreading its tests would start one engine per worker), and
those tests time real latencies, which two engines on two cores would blur. Everything else spreads test by
test, except that a module whose tests share a module-scoped fixture stays on one worker (the fixture is built once).
The longest units go first (the engine modules, then every unit with a test marked `slow`), so that the two workers
finish together instead of one waiting while the other runs a two-minute test it picked up last.
"""

from __future__ import annotations

import ast
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


@functools.cache
def slow_tests(path: Path) -> frozenset[str]:
    """The test functions of a module marked `slow` (read from its source, as runs_an_engine)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return frozenset()
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("mark.slow" in ast.unparse(decorator) for decorator in node.decorator_list)
    )


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
        ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            # Longest first, so that no long unit starts while the other worker runs out of work: the engine
            # modules, then every unit with a test marked slow (one vmalert test alone takes over two minutes),
            # then the rest as xdist orders them (most tests first).
            if not self.ordered:
                self.ordered = True
                for scope in sorted(self.workqueue, key=self._rank):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

        def _rank(self, scope: str) -> int:
            if scope == "vllm-engine":
                return 0
            nodeids = self.workqueue[scope]
            slow = any(
                nodeid.split("::")[1].split("[")[0] in slow_tests(config.rootpath / nodeid.split("::")[0])
                for nodeid in nodeids
                if "::" in nodeid
            )
            return 1 if slow else 2

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if runs_an_engine(config.rootpath / module):
                return "vllm-engine"
            # A module whose tests share a module-scoped fixture (a mutation run, a backfilled history) stays on one
            # worker, so the fixture is built once, not once per worker.
            return module if shares_a_module_fixture(config.rootpath / module) else nodeid

    return EngineScheduling(config, log)
