"""Fixtures: Prometheus, promtool and Alertmanager binaries started on loopback ports.

* `promtool_path` / `prometheus_path`: the binaries, or a skip when they are not installed.
* `prometheus_factory`: builds `LocalPrometheus` servers in the test's tmp dir and stops every one it started at
  teardown, so a test can backfill blocks first, then start with its own rules and scrape targets.
* `prometheus`: a started, empty server (no scrape jobs, no rules) for tests that only need the query engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slokit.local.prometheus import LocalPrometheus, find_binary

PrometheusFactory = Callable[..., LocalPrometheus]


@pytest.fixture(scope="session")
def promtool_path() -> str:
    """promtool, or skip."""
    path = find_binary("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return path


@pytest.fixture(scope="session")
def amtool_path() -> str:
    """amtool (Alertmanager's command-line tool), or skip."""
    path = find_binary("amtool")
    if path is None:
        pytest.skip("amtool is not installed (apt-get install prometheus-alertmanager)")
    return path


@pytest.fixture(scope="session")
def prometheus_path() -> str:
    """The prometheus server binary, or skip."""
    path = find_binary("prometheus")
    if path is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return path


@pytest.fixture
def prometheus_factory(tmp_path: Path, prometheus_path: str) -> Iterator[PrometheusFactory]:
    """Make (not start) servers under tmp_path; every one is stopped at teardown."""
    made: list[LocalPrometheus] = []

    def make(name: str = "prometheus", **kwargs: Any) -> LocalPrometheus:
        server = LocalPrometheus(workdir=tmp_path / name, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture
def prometheus(prometheus_factory: PrometheusFactory) -> LocalPrometheus:
    """A started, empty Prometheus."""
    return prometheus_factory().start()
