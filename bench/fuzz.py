"""Fuzz targets at scale: the spec loader, the class header path, the web-config loader and basic auth.

The same structure-aware generators as the suite (tests/test_spec_fuzz.py, tests/test_hostile_fuzz.py), run for
many more cases (default 10,000 per target for specs and headers, 2,000 for web-configs, whose cases load real
certificates). Every case must get the documented answer (a result, SpecError or WebConfigError); anything else
stops the run with the input. Every case is also bounded in time: one that runs past --case-limit seconds (default
5) is stopped by a watchdog (SIGALRM) and the run fails with that input, so a hang is reported, never waited out.
Printed per target: cases run, how many were accepted and refused, and the slowest case against the limit.

    .venv/bin/python bench/fuzz.py                      # all targets, about 5 minutes on 2 cores
    .venv/bin/python bench/fuzz.py --cases 20000 --targets spec,header
    .venv/bin/python bench/fuzz.py --cases 20 --case-limit 2   # a quick smoke run
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import test_hostile_fuzz as hostile  # noqa: E402
from tests import test_spec_fuzz as specfuzz  # noqa: E402
from tests.tls_certs import make_pki  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder  # noqa: E402


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


DEFAULT_CASE_LIMIT = 5.0  # seconds; the slowest cases take milliseconds, so only a hang comes near it


class CaseTimeout(BaseException):
    """One case ran past the per-case limit. A BaseException, so neither the code under test nor hypothesis
    (which would retry and shrink it, hanging again) can swallow it."""

    def __init__(self, limit: float, value: Any) -> None:
        super().__init__(f"a case ran past the {limit:g} s per-case limit")
        self.limit = limit
        self.value = value


@contextmanager
def watchdog(limit: float, value: Any) -> Iterator[None]:
    """Raise CaseTimeout in the main thread if the block runs longer than `limit` seconds."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout(limit, value)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(strategy: st.SearchStrategy[Any], cases: int, check: Callable[[Any], bool], limit: float) -> Tally:
    tally = Tally()

    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def target(value: Any) -> None:
        start = time.perf_counter()
        with watchdog(limit, value):
            ok = check(value)
        tally.record(ok, time.perf_counter() - start, value)

    target()
    return tally


def spec_target(cases: int, limit: float) -> Tally:
    return _run(specfuzz.mutated(), cases, specfuzz._check, limit)


def header_target(cases: int, limit: float) -> Tally:
    strategy = st.tuples(
        st.lists(st.tuples(hostile.KEYS, hostile.HEADER_VALUES), max_size=6),
        st.none() | st.integers(-(2**70), 2**70),
        st.none() | st.integers(-(2**70), 2**70),
    )

    def check(args: tuple[Any, Any, Any]) -> bool:
        hostile.test_hostile_class_headers_always_map_to_a_declared_class_or_other.hypothesis.inner_test(*args)  # type: ignore[attr-defined]
        return True

    return _run(strategy, cases, check, limit)


def web_config_target(cases: int, limit: float) -> Tally:
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
    return _run(strategy, cases, lambda text: hostile.check_config(folder, text) is not None, limit)


def basic_auth_target(cases: int, limit: float) -> Tally:
    strategy = st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=100).map(lambda b: "Basic " + b.hex()))

    def check(header: str | None) -> bool:
        result = hostile.AUTH.check(header)
        assert isinstance(result, bool)
        return result

    return _run(strategy, cases, check, limit)


TARGETS: dict[str, tuple[Callable[[int, float], Tally], float]] = {
    "spec": (spec_target, 1.0),
    "header": (header_target, 1.0),
    "web-config": (web_config_target, 0.2),
    "basic-auth": (basic_auth_target, 0.5),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000, help="cases for spec and header (others scale down)")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated: {', '.join(TARGETS)}")
    parser.add_argument(
        "--case-limit",
        type=float,
        default=DEFAULT_CASE_LIMIT,
        help="seconds one case may take before the run stops with its input (default %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="CI-sized: 1,000 cases for spec and header")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where fuzz.json goes")
    args = parser.parse_args(argv)
    if args.quick and args.cases == 10_000:
        args.cases = 1_000
    if not 1 <= args.cases <= 10_000_000:
        parser.error("--cases must be between 1 and 10000000")
    if not args.case_limit > 0:
        parser.error("--case-limit must be above 0 seconds")
    chosen = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    limit_ms = args.case_limit * 1000
    recorder = Recorder("fuzz", {"cases": args.cases, "targets": chosen, "case_limit_s": args.case_limit})
    runs: list[dict[str, Any]] = []
    print(f"per-case limit {limit_ms:.0f} ms")
    print(
        f"{'target':<11} {'cases':>7} {'accepted':>9} {'refused':>8} {'slowest ms':>11} {'of limit':>9} {'seconds':>8}"
    )
    for name in chosen:
        run, share = TARGETS[name]
        start = time.perf_counter()
        try:
            tally = run(max(1, int(args.cases * share)), args.case_limit)
        except CaseTimeout as timeout:
            print(f"{name:<11} FAILED: {timeout}; the input was:\n{timeout.value!r}", flush=True)
            return 1
        elapsed = time.perf_counter() - start
        runs.append(
            {
                "target": name,
                "cases": tally.cases,
                "accepted": tally.accepted,
                "refused": tally.cases - tally.accepted,
                "slowest_ms": tally.slowest * 1000,
                "seconds": elapsed,
            }
        )
        print(
            f"{name:<11} {tally.cases:7d} {tally.accepted:9d} {tally.cases - tally.accepted:8d} "
            f"{tally.slowest * 1000:11.1f} {tally.slowest * 1000 / limit_ms:9.1%} {elapsed:8.1f}",
            flush=True,
        )
    print(
        "every case got a result or the documented error (SpecError / WebConfigError) within the per-case limit; "
        "no traceback, no hang"
    )
    figures = {r["target"]: {k: v for k, v in r.items() if k != "target"} for r in runs}
    figures["all"] = {"cases": sum(r["cases"] for r in runs), "slowest_ms": max(r["slowest_ms"] for r in runs),
                      "failures": 0}  # fmt: skip
    recorder.save(figures, runs, args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
