#!/usr/bin/env bash
# Check slokit's GPU sidecar against the real GPUs of this machine.
#
# Starts `slokit exporter gpu` (the real NVML collector) on a loopback port, scrapes /metrics every second for
# GPU_CHECK_SECONDS (default 10), then prints: the GPUs found, every metric sample of the last scrape, the metrics
# each GPU does not support, NVML errors, the poll cost, and whether SIGTERM stopped it cleanly.
#
#   scripts/gpu_check.sh                      # all visible GPUs
#   scripts/gpu_check.sh --gpus GPU-8e2f...   # extra arguments go to `slokit exporter gpu`
#   GPU_CHECK_OUT=/tmp/check scripts/gpu_check.sh   # also keep every scrape and the exporter log there
#
# Exit status: 0 when every GPU found reads slokit_gpu_up 1 and the exporter stopped cleanly on SIGTERM;
# 1 when no GPU answered (no driver, no GPU) or the exporter misbehaved; 2 when slokit cannot be found.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$here/.venv/bin/python" ]]; then python="$here/.venv/bin/python"; else python="python3"; fi
fi
if ! "$python" -c "import slokit.exporters.gpu.poller" 2>/dev/null; then
    echo "gpu_check: cannot import slokit with $python; run 'make install' or set PYTHON=/path/to/python" >&2
    exit 2
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== nvidia-smi -L"
    nvidia-smi -L || true
fi

exec "$python" - "${GPU_CHECK_SECONDS:-10}" "${GPU_CHECK_OUT:-}" "$@" <<'PY'
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

seconds = float(sys.argv[1])
out = Path(sys.argv[2]) if sys.argv[2] else Path(tempfile.mkdtemp(prefix="slokit-gpu-check-"))
extra = sys.argv[3:]
out.mkdir(parents=True, exist_ok=True)

with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
log_path = out / "exporter.log"
argv = [sys.executable, "-m", "slokit.cli", "exporter", "gpu", "--address", "127.0.0.1", "--port", str(port),
        "--interval", "1s", *extra]
print("== running", " ".join(argv[2:]), f"for {seconds:g}s (log: {log_path})", flush=True)
with log_path.open("wb") as log:
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def scrape() -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


problems: list[str] = []
texts: list[str] = []
try:
    deadline = time.monotonic() + 60
    while scrape() is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            print(log_path.read_text(errors="replace"), file=sys.stderr)
            sys.exit("gpu_check: the exporter did not start")
        time.sleep(0.2)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        text = scrape()
        if text is None:
            problems.append("a scrape failed while the exporter ran")
        else:
            texts.append(text)
            (out / f"scrape-{len(texts):02d}.prom").write_text(text)
        time.sleep(1.0)
finally:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        stopped = time.monotonic()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            problems.append("the exporter ignored SIGTERM for 30s")
        took = time.monotonic() - stopped
        print(f"== SIGTERM: exit code {code} after {took:.2f}s")
        if code != 0:
            problems.append(f"the exporter exited with {code} on SIGTERM")

if not texts:
    sys.exit("gpu_check: no scrape succeeded")
samples = [s for f in text_string_to_metric_families(texts[-1]) for s in f.samples]


def series(sample) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
    return f"{sample.name}{{{pairs}}}" if pairs else sample.name


print("== GPUs")
for s in samples:
    if s.name == "slokit_gpu_info":
        print(f"  {s.labels['UUID']}: {s.labels['modelName']} at {s.labels['pci_bus_id']}, driver "
              f"{s.labels['driver_version']}, slokit preset {s.labels['gpu_preset'] or '(none)'}")
up = {s.labels.get("UUID", ""): s.value for s in samples if s.name == "slokit_gpu_up"}
for uuid, value in sorted(up.items()):
    print(f"  slokit_gpu_up{{UUID=\"{uuid}\"}} {value:g}" if uuid else f"  slokit_gpu_up {value:g} (no GPU answered)")

print("== every metric of the last scrape")
for s in samples:
    if s.name not in ("slokit_gpu_metric_supported",):
        print(f"  {series(s)} {s.value!r}")

print("== unsupported (left out; said once in the log)")
unsupported = [s for s in samples if s.name == "slokit_gpu_metric_supported" and s.value == 0]
for s in unsupported:
    print(f"  {s.labels['UUID']}: {s.labels['metric']}")
if not unsupported:
    print("  none")

print("== NVML errors")
errors = [s for s in samples if s.name == "slokit_gpu_nvml_errors_total"]
for s in errors:
    print(f"  {s.labels['op']}: {s.labels['error']} x{s.value:g}")
if not errors:
    print("  none")

durations = [s.value for t in texts for f in text_string_to_metric_families(t) for s in f.samples
             if s.name == "slokit_gpu_collect_duration_seconds"]
gpus = sum(1 for value in up.values() if value == 1)
if durations:
    per_gpu = f" ({max(durations) * 1e3 / gpus:.1f} ms per GPU at worst)" if gpus else ""
    print(f"== poll cost: max {max(durations) * 1e3:.1f} ms, last {durations[-1] * 1e3:.1f} ms for {gpus} GPU(s)"
          f"{per_gpu}, over {len(durations)} scrapes")
bandwidth = [s for s in samples if s.name == "slokit_gpu_memory_bandwidth_utilization_ratio"]
print("== GPM DRAM bandwidth:", "present" if bandwidth else "absent (pre-Hopper GPU, MIG, or GPM unavailable)")
print(f"== scrapes and log kept in {out}")

if not up or all(value == 0 for value in up.values()):
    problems.append("no GPU answered (slokit_gpu_up 0): no driver, no GPU, or none visible to this process")
elif any(value == 0 for value in up.values()):
    problems.append("some GPUs read slokit_gpu_up 0")
for problem in problems:
    print(f"PROBLEM: {problem}")
sys.exit(1 if problems else 0)
PY
