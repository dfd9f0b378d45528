"""Fuzz targets at scale: the spec loader, the class header path, the web-config loader and basic auth.

The same structure-aware generators as the suite (tests/test_spec_fuzz.py, tests/test_hostile_fuzz.py), run for
many more cases (default 10,000 per target for specs and headers, 2,000 for web-configs, whose cases load real
certificates). Every case must get the documented answer (a result, SpecError or WebConfigError); anything else
stops the run with the input. Printed per target: cases run, how many were accepted and refused, and the slowest
case (a hang would show here; the run is bounded by the case count).

    .venv/bin/python bench/fuzz.py                      # all targets, about 5 minutes on 2 cores
    .venv/bin/python bench/fuzz.py --cases 20000 --targets spec,header
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import test_hostile_fuzz as hostile  # noqa: E402
from tests import test_spec_fuzz as specfuzz  # noqa: E402
from tests.tls_certs import make_pki  # noqa: E402


@dataclass
class Tally:
    """What one target saw."""

    cases: int = 0
    accepted: int = 0
    slowest: float = 0.0
    slowest_input: Any = None

    def record(self, ok: bool, seconds: float, value: Any) -> None:
        self.cases += 1
        self.accepted += int(ok)
        if seconds > self.slowest:
            self.slowest, self.slowest_input = seconds, value


def _run(strategy: st.SearchStrategy[Any], cases: int, check: Callable[[Any], bool]) -> Tally:
    tally = Tally()

    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def target(value: Any) -> None:
        start = time.perf_counter()
        ok = check(value)
        tally.record(ok, time.perf_counter() - start, value)

    target()
    return tally


def spec_target(cases: int) -> Tally:
    return _run(specfuzz.mutated(), cases, specfuzz._check)


def header_target(cases: int) -> Tally:
    strategy = st.tuples(
        st.lists(st.tuples(hostile.KEYS, hostile.HEADER_VALUES), max_size=6),
        st.none() | st.integers(-(2**70), 2**70),
        st.none() | st.integers(-(2**70), 2**70),
    )

    def check(args: tuple[Any, Any, Any]) -> bool:
        hostile.test_hostile_class_headers_always_map_to_a_declared_class_or_other.hypothesis.inner_test(*args)  # type: ignore[attr-defined]
        return True

    return _run(strategy, cases, check)


def web_config_target(cases: int) -> Tally:
    folder = Path(tempfile.mkdtemp(prefix="slokit-fuzz-"))
    pki = make_pki(folder / "pki")
    from slokit.exporters.webconfig import hash_password

    doc = {
        "tls_server_config": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca),
            "client_auth_type": "RequireAndVerifyClientCert",
            "min_version": "TLS12",
            "client_allowed_sans": ["prometheus"],
        },
        "basic_auth_users": {"prometheus": hash_password("pw", rounds=4)},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    }
    assert hostile.check_config(folder, yaml.safe_dump(doc)) is not None
    strategy = st.one_of(hostile.mutated_config(doc), st.binary(max_size=300))
    return _run(strategy, cases, lambda text: hostile.check_config(folder, text) is not None)


def basic_auth_target(cases: int) -> Tally:
    strategy = st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=100).map(lambda b: "Basic " + b.hex()))

    def check(header: str | None) -> bool:
        result = hostile.AUTH.check(header)
        assert isinstance(result, bool)
        return result

    return _run(strategy, cases, check)


TARGETS: dict[str, tuple[Callable[[int], Tally], float]] = {
    "spec": (spec_target, 1.0),
    "header": (header_target, 1.0),
    "web-config": (web_config_target, 0.2),
    "basic-auth": (basic_auth_target, 0.5),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000, help="cases for spec and header (others scale down)")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated: {', '.join(TARGETS)}")
    args = parser.parse_args(argv)
    chosen = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    print(f"{'target':<11} {'cases':>7} {'accepted':>9} {'refused':>8} {'slowest ms':>11} {'seconds':>8}")
    for name in chosen:
        run, share = TARGETS[name]
        start = time.perf_counter()
        tally = run(max(1, int(args.cases * share)))
        elapsed = time.perf_counter() - start
        print(
            f"{name:<11} {tally.cases:7d} {tally.accepted:9d} {tally.cases - tally.accepted:8d} "
            f"{tally.slowest * 1000:11.1f} {elapsed:8.1f}",
            flush=True,
        )
    print("every case got a result or the documented error (SpecError / WebConfigError); no traceback, no hang")
    return 0


if __name__ == "__main__":
    sys.exit(main())
