"""Autoscaling policies side by side on two histories: a diurnal day with bursts, and llm-d's 2 -> 10 -> 1 req/s ramp.

1. `slokit simulate examples/assistant.yaml --days 2` with two overload incidents on the second day (traffic
   doubles for 30 minutes at 09:30 and for 45 minutes at the 14:30 peak), replayed with `--warmup 1d`: the first
   day only builds the same-hour history, the second is scored.
2. A ramp shaped like llm-d's benchmark on examples/summarize.yaml (Qwen2 72B, TP 4 on H200): 2 req/s for 10
   minutes, up to 10 req/s over 20, 10 for 20, down to 1 over 20, 1 for 10 (80 minutes), written as the counters
   `slokit autoscale` reads.

Each is one `slokit autoscale` run (every policy on the same requests); the tables are printed and the outputs kept
in OUT. `--headroom H` goes to both runs.

Run: .venv/bin/python bench/autoscale.py [OUT] [--headroom H]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from slokit.autoscale.history import shaped, write_openmetrics
from slokit.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
SLOKIT = str(ROOT / ".venv" / "bin" / "slokit")
END = "1767225600"  # 2026-01-01T00:00:00Z: the second simulated day is 2025-12-31
INCIDENTS = """\
- {name: burst-morning, kind: overload, start: "2025-12-31T09:30:00Z", end: "2025-12-31T10:00:00Z", model: llama-3-70b}
- {name: burst-peak, kind: overload, start: "2025-12-31T14:30:00Z", end: "2025-12-31T15:15:00Z", model: llama-3-70b}
"""
RAMP = {0.0: 2.0, 600.0: 2.0, 1800.0: 10.0, 3000.0: 10.0, 4200.0: 1.0, 4800.0: 1.0}


def run(argv: list[str]) -> None:
    """Run a slokit command, echoing it; stop on failure."""
    print("$", " ".join(argv), flush=True)
    subprocess.run(argv, check=True)


def main() -> None:
    """Both histories, both replays."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder for the histories and outputs (default: a new one)")
    parser.add_argument("--headroom", type=float, help="the slokit policy's headroom (default: slokit's)")
    options = parser.parse_args()
    extra = ["--headroom", str(options.headroom)] if options.headroom is not None else []
    out = options.out or Path(tempfile.mkdtemp(prefix="slokit-autoscale-"))
    out.mkdir(exist_ok=True)
    assistant, summarize = ROOT / "examples" / "assistant.yaml", ROOT / "examples" / "summarize.yaml"
    (out / "incidents.yaml").write_text(INCIDENTS, encoding="utf-8")
    run([SLOKIT, "simulate", str(assistant), "--days", "2", "--end", END, "--incidents", str(out / "incidents.yaml"),
         "-o", str(out / "day.om"), "--force"])  # fmt: skip
    run([SLOKIT, "autoscale", str(assistant), "--traffic", str(out / "day.om"), "--warmup", "1d",
         "-o", str(out / "diurnal"), *extra])  # fmt: skip
    spec = load_spec(str(summarize))
    with (out / "ramp.om").open("w", encoding="utf-8") as handle:
        write_openmetrics(spec, shaped(spec, "qwen2-72b", RAMP, start=float(END)), handle)
    run([SLOKIT, "autoscale", str(summarize), "--traffic", str(out / "ramp.om"), "-o", str(out / "ramp"), *extra])
    for name in ("diurnal", "ramp"):
        print(f"\n## {name}\n")
        print((out / name / "autoscale.md").read_text(encoding="utf-8"))
    print(f"outputs in {out}")


if __name__ == "__main__":
    main()
