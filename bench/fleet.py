"""Fleet scale: what `slokit generate` writes and how long it and the generated tests take, 4 models against 32.

Two specs of one shape (slokit.fleet: four classes modelled on examples/assistant.yaml) with 4 and 32 models, for
each source (slokit: every model serves every class; vllm: the classes spread over the models), side by side in one
run, repeated: alert rules, rules bytes, runbook lines and generated-test bytes (counted once; they do not vary), and
the wall time of `slokit generate` (promtool checks included) and of `promtool test rules` on the generated tests,
each run `--repeat` times alternating the two sizes. Prints each figure for both sizes and the 32/4 ratio (min,
median and max of the times), and one spec of `--big` models x 10 classes once (generate and its tests).

Every run goes to bench/results/fleet.json (figures: sizes, and min/median/max of times and 32/4 ratios).

Run: .venv/bin/python bench/fleet.py [--repeat 3] [--big 100]
     .venv/bin/python bench/fleet.py --quick    # 2 runs, no large spec, generated tests not run
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from slokit.fleet import fleet_spec_yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/results.py
from results import RESULTS_DIR, Recorder, span

ROOT = Path(__file__).resolve().parent.parent
SLOKIT = str(Path(sys.executable).parent / "slokit")  # the console script of the running environment


def _generate(spec: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([SLOKIT, "generate", str(spec), "-o", str(out)], check=True, capture_output=True)
    return time.perf_counter() - start


def _promtool(out: Path) -> float:
    start = time.perf_counter()
    for test in sorted((out / "rules").glob("*.test.yaml")):
        done = subprocess.run(["promtool", "test", "rules", test.name], cwd=out / "rules", capture_output=True,
                              text=True)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"promtool test rules {test} failed:\n{done.stdout[-2000:]}")
    return time.perf_counter() - start


def _sizes(out: Path) -> dict[str, float]:
    rules = next((out / "rules").glob("*.rules.yaml"))
    data = yaml.safe_load(rules.read_text())
    return {
        "alert rules": sum(1 for g in data["groups"] for r in g["rules"] if "alert" in r),
        "rules bytes": rules.stat().st_size,
        "runbook lines": len(next((out / "runbooks").glob("*.md")).read_text().splitlines()),
        "test bytes": sum(p.stat().st_size for p in (out / "rules").glob("*.test.yaml")),
    }


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each size, alternating (default 3)")
    parser.add_argument("--big", type=int, default=100, help="models of the one large spec, 10 classes (0: none)")
    parser.add_argument("--quick", action="store_true", help="CI-sized: 2 runs of each size, no large spec, the "
                        "generated tests not timed (promtool takes minutes on them)")  # fmt: skip
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where fleet.json goes")
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.big = 2, 0
    if not 1 <= args.repeat <= 100 or not 0 <= args.big <= 10_000:
        parser.error("--repeat must be 1 to 100 and --big 0 to 10000")
    recorder = Recorder("fleet", {"repeat": args.repeat, "big": args.big, "quick": args.quick})
    figures: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for source in ("slokit", "vllm"):
            specs = {n: root / f"{source}-{n}.yaml" for n in (4, 32)}
            for n, path in specs.items():
                path.write_text(fleet_spec_yaml(n, source))
            times: dict[int, dict[str, list[float]]] = {n: {"generate": [], "promtool": []} for n in specs}
            sizes: dict[int, dict[str, float]] = {}
            for run in range(args.repeat):
                for n, path in specs.items():
                    out = root / f"out-{source}-{n}-{run}"
                    times[n]["generate"].append(_generate(path, out))
                    times[n]["promtool"].append(math.nan if args.quick else _promtool(out))
                    sizes[n] = _sizes(out)
                    runs.append({"source": source, "models": n, "run": run, "generate_s": times[n]["generate"][-1],
                                 "promtool_s": times[n]["promtool"][-1], **sizes[n]})  # fmt: skip
            figures[source] = {f"models_{n}": dict(sizes[n]) for n in specs}
            print(f"source {source}: 4 models | 32 models | 32/4")
            for key in sizes[4]:
                ratio = sizes[32][key] / sizes[4][key]
                print(f"  {key:14} {sizes[4][key]:>12,.0f} | {sizes[32][key]:>12,.0f} | {ratio:.2f}x")
            for key in ("generate",) if args.quick else ("generate", "promtool"):
                ratios = [b / a for a, b in zip(times[4][key], times[32][key], strict=True)]
                for n in specs:
                    figures[source][f"models_{n}"][f"{key}_s"] = span(times[n][key])
                figures[source][f"{key}_ratio_32_4"] = span(ratios)
                spread = f"{_spread(times[4][key]):>12} | {_spread(times[32][key]):>12}"
                print(f"  {key + ' s':14} {spread} | {min(ratios):.2f}x to {max(ratios):.2f}x "
                      f"(min / median / max s over {args.repeat} runs)")  # fmt: skip
        if args.big:
            path = root / "big.yaml"
            path.write_text(fleet_spec_yaml(args.big, "slokit", classes=10))
            out = root / "out-big"
            generate_s = _generate(path, out)
            promtool_s = _promtool(out)
            big = _sizes(out)
            figures["big"] = {"models": args.big, "classes": 10, "generate_s": generate_s, "promtool_s": promtool_s,
                              **big}  # fmt: skip
            print(f"{args.big} models x 10 classes (slokit): generate {generate_s:.1f}s (promtool check included), "
                  f"generated tests {promtool_s:.1f}s; {big['alert rules']:.0f} alert rules, "
                  f"{big['rules bytes']:,.0f} rules bytes, {big['runbook lines']:,.0f} runbook lines, "
                  f"{big['test bytes']:,.0f} test bytes")  # fmt: skip
    recorder.save(figures, runs, args.results_dir, notes="Times from a machine shared with other work.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
