"""From a spec to every generated file: rules, alerts, promtool tests, dashboards, runbooks, Kubernetes objects,
Alertmanager routing.

Each generator is a pure function `files(spec) -> {relative path: plain data}`; `generate_all` runs them all and
hands the data to the one writer for serialisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from slokit.generate import alertmanager, autoscale, counter_tests, dashboards, k8s, promtool_tests, rules, runbook
from slokit.generate.engines import DEFAULT, Engine
from slokit.generate.writer import render
from slokit.spec import Spec

Generator = Callable[[Spec], Mapping[str, Any]]

GENERATORS: tuple[Generator, ...] = (
    rules.files,
    promtool_tests.files,
    counter_tests.files,
    dashboards.files,
    runbook.files,
    k8s.files,
    alertmanager.files,
    autoscale.files,
)


class GenerateError(Exception):
    """Specs that cannot be generated together (e.g. two specs for the same service)."""


def _generators(engine: Engine) -> tuple[tuple[Generator, Generator], ...]:
    """The generators for an engine: its own rule files (the main ones and the autoscaling signal's), and promtool
    tests only where promtool reads the rules; each beside the generator it stands for (named in progress lines)."""
    own: dict[Generator, Generator] = {
        rules.files: lambda spec: rules.files(spec, engine),
        autoscale.files: lambda spec: autoscale.files(spec, engine),
    }
    if engine is Engine.PROMETHEUS:
        return tuple((g, g) for g in GENERATORS)
    return tuple((g, own.get(g, g)) for g in GENERATORS if g not in (promtool_tests.files, counter_tests.files))


# Progress lines start once generation has taken this long: a small spec prints none, a fleet of hundreds of
# classes says what it is doing instead of sitting silent.
QUIET_FOR_S: Final = 2.0


class Progress:
    """Says which spec and which part is being generated, once the work has taken longer than QUIET_FOR_S."""

    def __init__(self, say: Callable[[str], None] | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.say = say
        self.clock = clock
        self.start = clock()

    def step(self, service: str, part: str) -> None:
        """Report that `part` of `service` is done, with the time since generation started."""
        elapsed = self.clock() - self.start
        if self.say is not None and elapsed >= QUIET_FOR_S:
            self.say(f"generating {service}: {part} done ({elapsed:.1f}s)")


def _part(generator: Generator) -> str:
    names = dict(zip(GENERATORS, ("rules and alerts", "promtool tests", "counters tests", "dashboards", "runbook",
                                  "Kubernetes objects", "Alertmanager routing", "predictive autoscaling"),
                     strict=True))  # fmt: skip
    return names[generator]


def generate_all(
    specs: Iterable[Spec], engine: Engine = DEFAULT, progress: Callable[[str], None] | None = None
) -> dict[str, str]:
    """Every generated file for every spec: relative path -> file content (rules in `engine`'s form).

    `progress` receives a line per finished part once the work has taken more than a few seconds."""
    tracker = Progress(progress)
    out: dict[str, str] = {}
    owners: dict[str, str] = {}
    data_by_path: dict[str, Any] = {}
    for spec in specs:
        if spec.service in owners:
            raise GenerateError(
                f"{spec.path} and {owners[spec.service]} both define service {spec.service!r}; "
                "service names must be unique because they name the generated files"
            )
        owners[spec.service] = spec.path
        spec_name = Path(spec.path).name if spec.path else spec.service
        for generator, run in _generators(engine):
            for relative, data in run(spec).items():
                if relative in data_by_path:
                    # Files every spec writes alike (Grafana provisioning) name no single spec.
                    if data_by_path[relative] != data:
                        raise GenerateError(f"{spec.path} would overwrite {relative} with different content")
                    out[relative] = render(relative, data, "the slokit specs")
                    continue
                data_by_path[relative] = data
                out[relative] = render(relative, data, spec_name)
            tracker.step(spec.service, _part(generator))
    return out
