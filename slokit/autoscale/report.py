"""Score each policy's replay and write autoscale.json, autoscale.md and autoscale.svg.

Per policy (summed over the replayed models): `attainment`, the share of requests within every objective of
their class (0-1); `gpu_hours`, GPU time of every pod asked for, starting ones included; `scale_events`, changes
of the replica count; per class and objective the share within; `budget_spent`, the worst objective's bad share
over its error budget (1 = exactly what the objective allows over the replay); `worst_5m_burn`, the highest burn
rate over any 5 minutes; `time_to_recover_s`, the longest stretch the 5-minute burn rate stayed over 1.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from slokit.autoscale.compare import ModelRun
from slokit.autoscale.replay import Timeline

WINDOW: Final = 300.0
FILES: Final = ("autoscale.json", "autoscale.md", "autoscale.svg")
COLOURS: Final = {"static": "#777777", "reactive": "#d62728", "queue": "#ff7f0e", "llm-d": "#1f77b4",
                  "slokit": "#2ca02c"}  # fmt: skip


def _burn_series(run: ModelRun, line: Timeline, first: int) -> list[float]:
    """Per tick, the worst objective's burn rate over the 5 minutes ending there."""
    ticks = len(line.ready)
    width = max(1, round(WINDOW / line.tick))
    worst = [0.0] * ticks
    for load in run.loads:
        total = line.total[load.name]
        for sli, target in load.goals.targets.items():
            good = line.within[load.name][sli]
            budget = 1 - target
            t_sum = g_sum = 0.0
            for i in range(ticks):
                t_sum += total[i]
                g_sum += good[i]
                if i >= width:
                    t_sum -= total[i - width]
                    g_sum -= good[i - width]
                if i >= first and t_sum > 0:
                    worst[i] = max(worst[i], (1 - g_sum / t_sum) / budget)
    return worst


def score(run: ModelRun, name: str, first: int) -> dict[str, Any]:
    """One model's figures under one policy, from tick `first` on (earlier ticks warm the history up)."""
    line = run.timelines[name]
    classes: dict[str, Any] = {}
    requests = within = 0.0
    budget = 0.0
    for load in run.loads:
        total = sum(line.total[load.name][first:])
        good = sum(line.within_all[load.name][first:])
        requests += total
        within += good
        per_sli = {}
        for sli, target in load.goals.targets.items():
            share = sum(line.within[load.name][sli][first:]) / total if total else 1.0
            spent = (1 - share) / (1 - target)
            budget = max(budget, spent)
            per_sli[sli.value] = {"within": round(share, 6), "objective": target, "budget_spent": round(spent, 4)}
        classes[load.name] = {"requests": round(total), "attainment": round(good / total if total else 1.0, 6),
                              "objectives": per_sli}  # fmt: skip
    burn = _burn_series(run, line, first)
    longest = current = 0
    for value in burn[first:]:
        current = current + 1 if value > 1 else 0
        longest = max(longest, current)
    provisioned = line.provisioned[first:]
    events = sum(1 for a, b in itertools.pairwise(provisioned) if a != b)
    seconds = len(provisioned) * line.tick
    return {
        "requests": round(requests),
        "within": within,
        "gpu_hours": sum(provisioned) * run.engine.gpus * line.tick / 3600,
        "replica_hours": sum(provisioned) * line.tick / 3600,
        "hours": seconds / 3600,
        "scale_events": events,
        "peak_replicas": max(provisioned, default=0),
        "budget_spent": round(budget, 4),
        "worst_5m_burn": round(max(burn[first:], default=0.0), 3),
        "time_to_recover_s": longest * line.tick,
        "classes": classes,
    }


def document(runs: Sequence[ModelRun], names: Sequence[str], meta: Mapping[str, Any], first: int) -> dict[str, Any]:
    """autoscale.json: per policy the fleet's figures, with each model's beside them."""
    policies: dict[str, Any] = {}
    for name in names:
        per_model = {run.model.name: score(run, name, first) for run in runs}
        requests = sum(m["requests"] for m in per_model.values())
        within = sum(m.pop("within") for m in per_model.values())
        gpu = sum(m["gpu_hours"] for m in per_model.values())
        policies[name] = {
            "attainment": round(within / requests, 6) if requests else 1.0,
            "gpu_hours": round(gpu, 3),
            "scale_events": sum(m["scale_events"] for m in per_model.values()),
            "budget_spent": max(m["budget_spent"] for m in per_model.values()),
            "worst_5m_burn": max(m["worst_5m_burn"] for m in per_model.values()),
            "time_to_recover_s": max(m["time_to_recover_s"] for m in per_model.values()),
            "models": per_model,
        }
        for m in per_model.values():
            m["gpu_hours"] = round(m["gpu_hours"], 3)
            m["replica_hours"] = round(m["replica_hours"], 3)
    static = policies.get("static", {}).get("gpu_hours")
    if static:
        for figures in policies.values():
            figures["gpu_hours_vs_static"] = round(figures["gpu_hours"] / static, 4)
    models = {
        run.model.name: {
            "engine": run.engine.as_dict(),
            "capacity_rps_per_engine": round(run.capacity, 4),
            "peak_rps": round(run.peak_rate, 3),
            "static_replicas": run.static_replicas,
        }
        for run in runs
    }
    return {**meta, "models": models, "policies": policies}


def markdown(doc: Mapping[str, Any]) -> str:
    """The comparison as a table."""
    lines = [
        f"# Autoscaling replay: {doc['spec']}",
        "",
        f"Traffic: `{doc['traffic']}`, {doc['hours']:.1f} h scored; pod start {doc['config']['pod_start_s']:g} s.",
        "",
        "| policy | attainment | GPU-hours | vs static | scale events | budget spent | worst 5m burn "
        "| time to recover |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in doc["policies"].items():
        vs = f"{p['gpu_hours_vs_static']:.0%}" if "gpu_hours_vs_static" in p else "n/a"
        recover = f"{p['time_to_recover_s'] / 60:.0f} min"
        cells = [f"{p['attainment']:.2%}", f"{p['gpu_hours']:.1f}", vs, str(p["scale_events"]),
                 f"{p['budget_spent']:.2f}", f"{p['worst_5m_burn']:.1f}", recover]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def svg(runs: Sequence[ModelRun], names: Sequence[str], first: int) -> str:
    """Load, replicas and typical TTFT over time for each model, one colour per policy (plain SVG, no scripts)."""
    width, panel, pad = 960, 150, 40
    parts: list[str] = []
    y0 = 10
    for run in runs:
        any_line = next(iter(run.timelines.values()))
        ticks = len(any_line.arrivals) - first
        if ticks <= 0:
            continue
        stride = max(1, ticks // 600)
        xs = [pad + (width - 2 * pad) * k / max(1, ticks - 1) for k in range(0, ticks, stride)]
        rate = [a / any_line.tick for a in any_line.arrivals[first:]]
        panels: list[tuple[str, list[tuple[str, list[float]]]]] = [
            (f"{run.model.name}: load (req/s)", [("load", rate)]),
            ("replicas (serving + starting)", [(n, _floats(run.timelines[n].provisioned[first:])) for n in names]),
            ("typical TTFT, busiest engines (s, log)", [(n, run.timelines[n].ttft_typical[first:]) for n in names]),
        ]  # fmt: skip
        for title, series in panels:
            log = "log" in title
            values = [v for _, s in series for v in s if v > 0] or [1.0]
            low = min(values) if log else 0.0
            high = max(values) if max(values) > low else low + 1
            parts.append(f'<text x="{pad}" y="{y0 + 12}" font-size="12">{title}</text>')
            parts.append(f'<rect x="{pad}" y="{y0 + 16}" width="{width - 2 * pad}" height="{panel - 30}" '
                         'fill="none" stroke="#ccc"/>')  # fmt: skip
            for label, s in series:
                pts = []
                for x, k in zip(xs, range(0, ticks, stride), strict=False):
                    v = max(s[k], low) if log else s[k]
                    frac = (_log(v) - _log(low)) / (_log(high) - _log(low)) if log else (v - low) / (high - low)
                    pts.append(f"{x:.1f},{y0 + panel - 14 - frac * (panel - 30):.1f}")
                colour = COLOURS.get(label, "#000")
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1" points="{" ".join(pts)}"/>')
            parts.append(
                f'<text x="{width - pad}" y="{y0 + 12}" font-size="10" text-anchor="end">max {high:.3g}</text>'
            )
            y0 += panel
    legend = " ".join(f'<tspan fill="{COLOURS.get(n, "#000")}">{n}</tspan>' for n in names)
    parts.append(f'<text x="{pad}" y="{y0 + 14}" font-size="12">{legend}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y0 + 24}" font-family="sans-serif">'
            + "".join(parts) + "</svg>\n")  # fmt: skip


def _floats(values: Sequence[int]) -> list[float]:
    return [float(v) for v in values]


def _log(value: float) -> float:
    import math

    return math.log10(max(value, 1e-6))


def write(directory: Path, doc: Mapping[str, Any], runs: Sequence[ModelRun], names: Sequence[str], first: int) -> None:
    """The three files into `directory` (created if missing; its parent must exist)."""
    directory.mkdir(exist_ok=True)
    (directory / "autoscale.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (directory / "autoscale.md").write_text(markdown(doc), encoding="utf-8")
    (directory / "autoscale.svg").write_text(svg(runs, names, first), encoding="utf-8")
