"""Autoscaling policies side by side on two histories: a diurnal day with bursts, and llm-d's 2 -> 10 -> 1 req/s ramp.

1. `slokit simulate examples/assistant.yaml --days 2` with two overload incidents on the second day (traffic
   doubles for 30 minutes at 09:30 and for 45 minutes at the 14:30 peak), replayed with `--warmup 1d`: the first
   day only builds the same-hour history, the second is scored.
2. A ramp shaped like llm-d's benchmark on examples/summarize.yaml (Qwen2 72B, TP 4 on H200): 2 req/s for 10
   minutes, up to 10 req/s over 20, 10 for 20, down to 1 over 20, 1 for 10 (80 minutes), written as the counters
   `slokit autoscale` reads.

Each is one `slokit autoscale` run per arrival seed (every policy on the same requests; `--seed` draws other
Poisson arrivals from the same rates); the tables are printed, the outputs kept in OUT, and the figures (each
policy's attainment and GPU-hours over the static peak's, as ranges over the seeds, and in how many seeds the
slokit policy had a higher attainment than each other policy, and that at no more GPU-hours) written to
bench/results/autoscale.json.
`--headroom H` goes to every run (the results file is then not written: the README quotes the defaults).

Run: .venv/bin/python bench/autoscale.py [OUT] [--seeds 1,2,3,4] [--quick] [--headroom H]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from slokit.autoscale.history import shaped, write_openmetrics
from slokit.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder, span

ROOT = Path(__file__).resolve().parent.parent
SLOKIT = str(ROOT / ".venv" / "bin" / "slokit")
END = "1767225600"  # 2026-01-01T00:00:00Z: the second simulated day is 2025-12-31
INCIDENTS = """\
- {name: burst-morning, kind: overload, start: "2025-12-31T09:30:00Z", end: "2025-12-31T10:00:00Z", model: llama-3-70b}
- {name: burst-peak, kind: overload, start: "2025-12-31T14:30:00Z", end: "2025-12-31T15:15:00Z", model: llama-3-70b}
"""
RAMP = {0.0: 2.0, 600.0: 2.0, 1800.0: 10.0, 3000.0: 10.0, 4200.0: 1.0, 4800.0: 1.0}
OTHERS = ("reactive", "queue", "llm-d")
BAR_ATTAINMENT, BAR_VS_STATIC = 0.99, 0.7  # the bar: 99% within the objectives at <= 70% of static


def run(argv: list[str]) -> None:
    """Run a slokit command, echoing it; stop on failure."""
    print("$", " ".join(argv), flush=True)
    subprocess.run(argv, check=True)


def histories(out: Path) -> dict[str, tuple[Path, Path, list[str]]]:
    """Write both histories once: name -> (spec, traffic file, extra autoscale arguments)."""
    assistant, summarize = ROOT / "examples" / "assistant.yaml", ROOT / "examples" / "summarize.yaml"
    (out / "incidents.yaml").write_text(INCIDENTS, encoding="utf-8")
    run([SLOKIT, "simulate", str(assistant), "--days", "2", "--end", END, "--incidents", str(out / "incidents.yaml"),
         "-o", str(out / "day.om"), "--force"])  # fmt: skip
    spec = load_spec(str(summarize))
    with (out / "ramp.om").open("w", encoding="utf-8") as handle:
        write_openmetrics(spec, shaped(spec, "qwen2-72b", RAMP, start=float(END)), handle)
    return {
        "diurnal": (assistant, out / "day.om", ["--warmup", "1d"]),
        "ramp": (summarize, out / "ramp.om", []),
    }


def key(policy: str) -> str:
    """A policy's key in the figures (`llm-d` as `llm_d`: quoted figures name keys without hyphens)."""
    return policy.replace("-", "_")


def figures_of(results: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Per history: each policy's attainment and GPU-hours vs static as ranges over the seeds; the seeds in which
    slokit beat each other policy on attainment at no more GPU-hours; and whether it met every bar in all."""
    figures: dict[str, Any] = {}
    for name, by_seed in results.items():
        policies = next(iter(by_seed.values()))["policies"]
        entry: dict[str, Any] = {"seeds": len(by_seed)}
        for policy in policies:
            rows = [doc["policies"][policy] for doc in by_seed.values()]
            entry[key(policy)] = {
                "attainment_percent": span([100 * r["attainment"] for r in rows]),
                "gpu_hours": span([r["gpu_hours"] for r in rows]),
                "vs_static_percent": span([100 * r.get("gpu_hours_vs_static", 1.0) for r in rows]),
                "scale_events": span([float(r["scale_events"]) for r in rows]),
            }
        beats = {}
        for other in OTHERS:
            beats[key(other)] = sum(
                1
                for doc in by_seed.values()
                if doc["policies"]["slokit"]["attainment"] > doc["policies"][other]["attainment"]
                and doc["policies"]["slokit"]["gpu_hours"] <= doc["policies"][other]["gpu_hours"]
            )
        entry["slokit_beats"] = beats  # higher attainment at no more GPU-hours
        entry["slokit_higher_attainment"] = {
            key(other): sum(
                1
                for doc in by_seed.values()
                if doc["policies"]["slokit"]["attainment"] > doc["policies"][other]["attainment"]
            )
            for other in OTHERS
        }
        entry["slokit_meets_bar"] = sum(
            1
            for doc in by_seed.values()
            if doc["policies"]["slokit"]["attainment"] >= 0.99
            and doc["policies"]["slokit"]["gpu_hours_vs_static"] <= 0.7
        )
        figures[name] = entry
    return figures


def main() -> None:
    """Both histories, every seed, every policy."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder for the histories and outputs (default: a new one)")
    parser.add_argument("--seeds", default="1,2,3,4", help="arrival seeds, comma-separated (default 1,2,3,4)")
    parser.add_argument("--quick", action="store_true", help="seed 1 only")
    parser.add_argument("--headroom", type=float, help="the slokit policy's headroom (default: slokit's)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where autoscale.json goes")
    options = parser.parse_args()
    try:
        seeds = [1] if options.quick else [int(x) for x in options.seeds.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--seeds {options.seeds!r}: integers separated by commas, e.g. 1,2,3,4")
    if not seeds or len(seeds) > 20:
        parser.error("--seeds: 1 to 20 seeds")
    extra = ["--headroom", str(options.headroom)] if options.headroom is not None else []
    recorder = Recorder("autoscale", {"seeds": seeds, "headroom": options.headroom, "pod_start_s": 100, "tick_s": 5})
    out = options.out or Path(tempfile.mkdtemp(prefix="slokit-autoscale-"))
    out.mkdir(exist_ok=True)
    inputs = histories(out)
    results: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in inputs}
    runs = []
    for seed in seeds:
        for name, (spec, traffic, more) in inputs.items():
            where = out / f"{name}-seed{seed}"
            run([SLOKIT, "autoscale", str(spec), "--traffic", str(traffic), *more, "--seed", str(seed),
                 "-o", str(where), *extra])  # fmt: skip
            doc = json.loads((where / "autoscale.json").read_text(encoding="utf-8"))
            results[name][seed] = doc
            print(f"\n## {name}, seed {seed}\n")
            print((where / "autoscale.md").read_text(encoding="utf-8"))
            for policy, figures in doc["policies"].items():
                runs.append({"history": name, "seed": seed, "policy": policy, **{k: v for k, v in figures.items()
                             if isinstance(v, (int, float))}})  # fmt: skip
    figures = figures_of(results)
    for name, entry in figures.items():
        print(f"\n## {name}: ranges over {entry['seeds']} seeds\n")
        print("| policy | attainment | GPU-hours vs static |\n|---|---|---|")
        for policy in results[name][seeds[0]]["policies"]:
            a, v = entry[key(policy)]["attainment_percent"], entry[key(policy)]["vs_static_percent"]
            print(f"| {policy} | {a['min']:.2f}% to {a['max']:.2f}% | {v['min']:.0f}% to {v['max']:.0f}% |")
        print(f"\nseeds of {entry['seeds']} in which slokit had the higher attainment: "
              f"{entry['slokit_higher_attainment']}; also at no more GPU-hours: {entry['slokit_beats']}; "
              f"it kept >= 99% at <= 70% of static in {entry['slokit_meets_bar']}")  # fmt: skip
    if options.headroom is None:
        notes = "The replay is deterministic for a seed: the ranges are over arrival draws, not timing."
        recorder.save(figures, runs, options.results_dir, notes=notes)
    else:
        print("--headroom given: results file not written")
    print(f"outputs in {out}")


if __name__ == "__main__":
    main()
