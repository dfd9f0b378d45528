"""Write the report: report.json, report.md, a self-contained report.html and the CSV behind every plot.

The HTML embeds its plots as PNG data URIs and its CSS inline: it opens from a mail attachment or a phone with no
network. Tables scroll sideways on a narrow screen instead of squeezing; images scale to the width.
Numbers the analysis could not compute (None) print as "n/a" with the reason in the notes, never as NaN.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slokit.units import format_duration


@dataclass(frozen=True)
class Plot:
    """One figure: its file stem, title, PNG bytes and the CSV of the series drawn."""

    name: str
    title: str
    png: bytes
    csv: str


def pct(value: float | None, digits: int = 3) -> str:
    """0.99123 -> `99.123%`; None -> `n/a`."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value * 100:.{digits}f}%"


def num(value: float | None, fmt: str = "{:,.0f}") -> str:
    """A number or `n/a`."""
    return "n/a" if value is None or not math.isfinite(value) else fmt.format(value)


def seconds(value: float | None) -> str:
    """A latency (`250ms`, `1.5s`) or `n/a`."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.3g}s"


def days(value: float) -> str:
    """An SLO window as people say it: `28d`, `7d`, `12h`."""
    return f"{value / 86400:g}d" if value >= 86400 else format_duration(value)


STATUS_TEXT = {"met": "met", "missed": "MISSED", "no traffic": "no traffic", "n/a": "n/a"}


def status_text(row: dict[str, Any]) -> str:
    """An objective's status as printed: met, MISSED, no traffic, or n/a (cannot be judged; the notes say why)."""
    return STATUS_TEXT.get(str(row.get("status")), "n/a")


def headline_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row per objective: model, class, SLO, objective, attainment, status, budget left, SLO-window figures."""
    rows = []
    for o in document["objectives"]:
        window = o["slo_window"] or {}
        rows.append(
            [
                o["model"],
                o["class"],
                f"{o['slo']} <= {seconds(o['threshold_seconds'])}",
                status_text(o),
                pct(o["attainment"]),
                pct(o["objective"], 2),
                pct(o["budget_remaining"], 1),
                num(o["events_total"]),
                pct(window.get("attainment")),
                pct(window.get("budget_remaining"), 1),
            ]
        )
    return rows


HEADLINE = [
    "model", "class", "SLO", "status", "attainment (period)", "objective", "budget left (period)", "events",
    "attainment (SLO window)", "budget left (SLO window)",
]  # fmt: skip


# ==============================================================================================================
# Plots (matplotlib) and their CSV (pandas)
# ==============================================================================================================
def _figure() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(9, 3.2))
    return plt, figure, ax


def _times(document: dict[str, Any], starts: Sequence[float]) -> list[Any]:
    if document["source"] == "probe":
        return [t - document["period"]["from_unix"] for t in starts]
    from datetime import UTC, datetime

    return [datetime.fromtimestamp(t, UTC) for t in starts]


def _finish(plt: Any, figure: Any, ax: Any, title: str, ylabel: str, document: dict[str, Any]) -> bytes:
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("seconds from the probe's start" if document["source"] == "probe" else "time (UTC)")
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="upper right")
    figure.autofmt_xdate()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return buffer.getvalue()


def _csv(columns: dict[str, Sequence[Any]]) -> str:
    import pandas as pd

    frame: Any = pd.DataFrame(columns)
    text: str = frame.to_csv(index=False)
    return text


def _slug(*parts: str) -> str:
    return "-".join("".join(ch if ch.isalnum() else "_" for ch in p) for p in parts)


def plots(document: dict[str, Any]) -> list[Plot]:
    """Every figure of the report, in reading order."""
    out: list[Plot] = []
    for o in document["objectives"]:
        timeline = o["burn_rate_timeline"]
        if not timeline["burn_rate"]:
            continue
        plt, figure, ax = _figure()
        xs = _times(document, timeline["bin_starts"])
        ys = [math.nan if v is None else v for v in timeline["burn_rate"]]
        ax.plot(xs, ys, drawstyle="steps-post", label="burn rate", color="tab:red")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1x: spending exactly the budget")
        step = format_duration(document["period"]["step_seconds"])
        title = f"Burn rate: {o['class']}/{o['slo']} on {o['model']} (per {step})"
        png = _finish(plt, figure, ax, title, "x budget", document)
        csv = _csv({"bin_start": timeline["bin_starts"], "burn_rate": timeline["burn_rate"]})
        out.append(Plot(_slug("burn", o["model"], o["class"], o["slo"]), title, png, csv))
    for ind in document["indicators"]:
        if not ind["bin_starts"] or not ind["percentiles"]:
            continue
        plt, figure, ax = _figure()
        xs = _times(document, ind["bin_starts"])
        columns: dict[str, Sequence[Any]] = {"bin_start": ind["bin_starts"]}
        for p, values in ind["percentiles"].items():
            ax.plot(xs, [math.nan if v is None else v for v in values], drawstyle="steps-post", label=p)
            columns[f"{p}_seconds"] = values
        title = f"Percentiles: {ind['class']}/{ind['slo']} on {ind['model']} (interpolated from buckets)"
        png = _finish(plt, figure, ax, title, "seconds", document)
        out.append(Plot(_slug("percentiles", ind["model"], ind["class"], ind["slo"]), title, png, _csv(columns)))
    traffic = [t for t in document["traffic"] if t["timeline"]["events"]]
    if traffic:
        plt, figure, ax = _figure()
        starts = traffic[0]["timeline"]["bin_starts"]
        columns = {"bin_start": starts}
        units = {t["unit"] for t in traffic}
        for t in traffic:
            name = f"{t['class']} on {t['model']}" + (" (tokens)" if t["unit"] == "tokens" and len(units) > 1 else "")
            ax.plot(_times(document, starts), t["timeline"]["events"], drawstyle="steps-post", label=name)
            columns[f"{t['class']} on {t['model']} {t['unit']}"] = t["timeline"]["events"]
        step = format_duration(document["period"]["step_seconds"])
        if units == {"requests"}:
            title, ylabel = f"Traffic: requests per {step}", "requests"
        elif units == {"tokens"}:
            title, ylabel = f"Traffic: output tokens (ITL events) per {step}", "tokens"
        else:
            title, ylabel = f"Traffic: requests per {step}; (tokens): output tokens of ITL-only classes", "events"
        png = _finish(plt, figure, ax, title, ylabel, document)
        out.append(Plot("traffic", title, png, _csv(columns)))
    return out


# ==============================================================================================================
# Markdown and HTML
# ==============================================================================================================
def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _sections(document: dict[str, Any]) -> list[tuple[str, Sequence[str], list[list[str]]]]:
    """The tables after the headline: (title, header, rows)."""
    out: list[tuple[str, Sequence[str], list[list[str]]]] = []
    worst = []
    for o in document["objectives"]:
        for w in o["worst_windows"]:
            s = w["signals"]
            worst.append(
                [
                    f"{o['class']}/{o['slo']} on {o['model']}", w["start"],
                    format_duration(w["end_unix"] - w["start_unix"]), pct(w["error_ratio"], 2),
                    num(w["burn_rate"], "{:.1f}x"), num(w["events_total"]), num(s["queue_waiting_max"], "{:.0f}"),
                    pct(s["kv_cache_usage_max"], 0), num(s["requests_running_mean"], "{:.1f}"),
                    num(s["decode_tokens_per_second"], "{:,.0f}"),
                    num(s["expected_decode_tokens_per_second"], "{:,.0f}"), pct(s["decode_vs_expected"], 0),
                ]
            )  # fmt: skip
    out.append(
        (
            "Worst windows",
            ["objective", "start", "length", "slow share", "burn", "events", "queue max", "KV cache max",
             "running per engine", "decode tok/s per engine", "planner tok/s at that batch", "decode vs planner"],
            worst,
        )
    )  # fmt: skip
    tiers = []
    for ind in document["indicators"]:
        for p, shares in ind["tiers"].items():
            tiers.append(
                [f"{ind['class']}/{ind['slo']} on {ind['model']}", p]
                + [pct(shares[name], 1) for name in ("target", "acceptable", "critical", "beyond_critical")]
            )
    out.append(
        (
            "Share of time per tier",
            ["indicator", "percentile", "target", "acceptable", "critical", "beyond critical"],
            tiers,
        )
    )
    consistency = []
    for ind in document["indicators"]:
        c = ind["consistency"]
        if c is None:
            continue
        met = "n/a" if c["met"] is None else ("met" if c["met"] else "MISSED")
        consistency.append(
            [f"{ind['class']}/{ind['slo']} on {ind['model']}", num(c["max_p99_over_p50"], "{:.2f}"),
             num(c["period_p99_over_p50"], "{:.2f}"), met, pct(c["share_of_time_over_limit"], 1)]
        )  # fmt: skip
    if consistency:
        out.append(
            (
                "Consistency (p99/p50)",
                ["indicator", "limit", "period p99/p50", "status", "time over limit"],
                consistency,
            )
        )
    alerts = [
        [a["alertname"], a["severity"], a["model"], a["class"], a["slo"], a["start"], a["end"],
         format_duration(a["duration_seconds"]) if a["duration_seconds"] > 0 else "one evaluation"]
        for a in document["alerts"]
    ]  # fmt: skip
    out.append(("Alerts fired", ["alert", "severity", "model", "class", "slo", "from", "last seen", "for"], alerts))
    traffic = [
        [t["model"], t["class"], f"{t['unit']} ({t['counted_from']} events)", num(t["events"]),
         num(t["events_per_second"], "{:.3f}")]
        for t in document["traffic"]
    ]  # fmt: skip
    out.append(("Traffic", ["model", "class", "counted in", "count", "per second"], traffic))
    return out


def _title(document: dict[str, Any]) -> str:
    return f"SLO report: {document['service']}"


def _period_line(document: dict[str, Any]) -> str:
    p = document["period"]
    return (
        f"Period {p['from']} to {p['to']} ({format_duration(p['seconds'])}), from {document['source']} "
        f"{document['origin']}; SLO window {days(p['slo_window_seconds'])}."
    )


def render_markdown(document: dict[str, Any], plot_files: Sequence[tuple[Plot, str]]) -> str:
    """report.md: the headline table, notes, then every section and links to the plots' CSV."""
    parts = [f"# {_title(document)}", "", _period_line(document), "", "## Objectives", ""]
    parts.append(
        _md_table(HEADLINE, headline_rows(document)) if document["objectives"] else "No objectives in the spec."
    )
    if document["notes"]:
        parts += ["", "## Notes", ""] + [f"- {n}" for n in document["notes"]]
    for title, header, rows in _sections(document):
        parts += ["", f"## {title}", ""]
        parts.append(_md_table(header, rows) if rows else "None in the period.")
    if plot_files:
        parts += ["", "## Plots", ""] + [f"- {p.title}: `{png}` (data: `{p.name}.csv`)" for p, png in plot_files]
    return "\n".join(parts) + "\n"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:12px;
color:#1b1b1b;line-height:1.4}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.85em;min-width:100%}
th,td{border:1px solid #ccc;padding:4px 6px;text-align:left;white-space:nowrap}
th{background:#f2f2f2}
td.MISSED{background:#fdd;font-weight:bold}td.met{background:#dfd}
img{max-width:100%;height:auto;display:block;margin:8px 0}
figure{margin:0 0 16px 0}figcaption{font-size:.85em;color:#555}
@media (max-width:600px){body{padding:6px}table{font-size:.75em}}
"""


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], table_id: str = "") -> str:
    ident = f' id="{table_id}"' if table_id else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="{html.escape(c)}">{html.escape(c)}</td>'
            if c in ("met", "MISSED")
            else f"<td>{html.escape(c)}</td>"
            for c in row
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="scroll"><table{ident}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def render_html(document: dict[str, Any], figures: Sequence[Plot]) -> str:
    """report.html: one file, inline CSS, plots as data URIs, no script and no network."""
    title = html.escape(_title(document))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        f"<p>{html.escape(_period_line(document))}</p>",
        "<h2>Objectives</h2>",
        _html_table(HEADLINE, headline_rows(document), "headline")
        if document["objectives"]
        else "<p>No objectives.</p>",
    ]
    if document["notes"]:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in document["notes"]) + "</ul>")
    for section, header, rows in _sections(document):
        parts.append(f"<h2>{html.escape(section)}</h2>")
        parts.append(_html_table(header, rows) if rows else "<p>None in the period.</p>")
    if figures:
        parts.append("<h2>Plots</h2>")
    for plot in figures:
        data = base64.b64encode(plot.png).decode()
        parts.append(
            f'<figure><img class="plot" alt="{html.escape(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(plot.title)} (data: {html.escape(plot.name)}.csv)</figcaption></figure>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def public(document: dict[str, Any]) -> dict[str, Any]:
    """The document without internal fields (names starting with `_`)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.startswith("_")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    result: dict[str, Any] = strip(document)
    return result


def write_report(document: dict[str, Any], directory: Path) -> list[Path]:
    """Write every file of the report into `directory`; returns the paths, report.html first."""
    directory.mkdir(parents=True, exist_ok=True)
    figures = plots(document)
    written: list[Path] = []
    html_path = directory / "report.html"
    html_path.write_text(render_html(document, figures), encoding="utf-8")
    written.append(html_path)
    plot_files: list[tuple[Plot, str]] = []
    for plot in figures:
        (directory / f"{plot.name}.png").write_bytes(plot.png)
        (directory / f"{plot.name}.csv").write_text(plot.csv, encoding="utf-8")
        written += [directory / f"{plot.name}.png", directory / f"{plot.name}.csv"]
        plot_files.append((plot, f"{plot.name}.png"))
    md_path = directory / "report.md"
    md_path.write_text(render_markdown(document, plot_files), encoding="utf-8")
    json_path = directory / "report.json"
    json_path.write_text(json.dumps(public(document), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written += [md_path, json_path]
    return written
