"""Scoring and reports: pages per week, flaps, first page per incident, and the four output files.

* backtest.json: the machine-readable result (schema in docs/backtest.md), times in unix seconds.
* backtest.md: the summary tables.
* backtest.html: the same tables plus plots (per incident: p99, thresholds and what fired on one timeline; pages
  per day per variant), PNGs embedded as data URIs so the file stands alone.
* alerts.csv: one row per firing interval per variant.

Pages and tickets are notifications: the firing intervals replayed through the generated Alertmanager
configuration (routes, grouping, timers and inhibitions; slokit.backtest.notify), the same configuration for every
variant, so one incident's dozen page series count as the one or two notifications a person gets. The firing
series are counted apart (`page_series`, `ticket_series`). Rates are per week of evaluated history; below a week
they are extrapolated, and the reports say so.

An alert matches an incident when it names the incident's model (and class, when both name one) and fires between
the incident's start and GRACE after its end; a page matching no incident is a page outside incidents (for a
notification: none of the alerts it added matches one).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from slokit.backtest.evaluate import Evaluation, Firing, span_text
from slokit.backtest.incidents import Incident, rfc3339
from slokit.backtest.notify import AlertmanagerModel, Notification
from slokit.generate import alertmanager
from slokit.spec import PERCENTILES, Spec
from slokit.units import format_duration

GRACE: Final = 900.0  # an alert up to 15 minutes after an incident ends still belongs to it
FLAP_WINDOW: Final = 1800.0  # the same alert series firing again within 30 minutes of resolving is a flap
WEEK: Final = 7 * 86400.0
# Rates from a history shorter than this are called extrapolated: a week less the minutes the evaluation grid
# trims from a simulated week (its first sample rounded up to 10 minutes, its last down to 30 s).
EXTRAPOLATED_BELOW: Final = WEEK - 3600.0


@dataclass(frozen=True)
class Scored:
    """One variant's numbers: pages and tickets are notifications; `*_series` count firing alert series."""

    alerts: list[Firing]
    notifications: list[Notification]
    pages: int
    tickets: int
    pages_per_week: float
    tickets_per_week: float
    page_series: int
    ticket_series: int
    page_series_per_week: float
    ticket_series_per_week: float
    flaps: int
    pages_outside_incidents: int


def _names(labels: Mapping[str, str], incident: Incident) -> bool:
    if labels.get("model") != incident.model:
        return False
    cls = labels.get("class")
    return incident.request_class is None or cls is None or cls == incident.request_class


def _matches(firing: Firing, incident: Incident) -> bool:
    return _names(firing.labels, incident) and firing.start < incident.end + GRACE and firing.end > incident.start


def _notification_matches(notification: Notification, incident: Incident) -> bool:
    """A notification belongs to an incident when an alert it added (all it carries, for a repeat) names the
    incident's model (and class) and it was sent between the incident's start and GRACE after its end."""
    alerts = notification.new or notification.firing
    return incident.start <= notification.time < incident.end + GRACE and any(_names(a, incident) for a in alerts)


def routing(spec: Spec) -> AlertmanagerModel:
    """The generated Alertmanager configuration (`alertmanager/<service>.yaml`) as a routing model."""
    return AlertmanagerModel.from_config(alertmanager.config(spec))


def notifications(spec: Spec, result: Evaluation, variant: str) -> list[Notification]:
    """What the generated Alertmanager configuration sends for a variant's firing intervals."""
    alerts = [(f.labels, f.start, f.end, f.start - c.for_) for c in result.variants[variant]
              for f in result.alerts.get(c.key, [])]  # fmt: skip
    return routing(spec).notifications(alerts)


def _receiver_is_page(spec: Spec, notification: Notification) -> bool:
    receivers, page = spec.alerting.receivers, spec.alerting.severity.label("page")
    if receivers.page != receivers.ticket:
        return notification.receiver == receivers.page
    return any(a.get("severity") == page for a in notification.firing)


def weeks_of(result: Evaluation) -> float:
    """The evaluated history in weeks (rates per week divide by it)."""
    return max((result.end - result.start) / WEEK, 1e-9)


def variant_alerts(result: Evaluation, variant: str) -> list[Firing]:
    """Every firing interval of a variant's alerts, by start time."""
    out = [f for c in result.variants[variant] for f in result.alerts.get(c.key, [])]
    return sorted(out, key=lambda f: (f.start, f.alertname, json.dumps(dict(f.labels), sort_keys=True)))


def flaps(alerts: Sequence[Firing]) -> int:
    """Firings that start within FLAP_WINDOW of the same series' previous resolution."""
    last_end: dict[str, float] = {}
    count = 0
    for f in sorted(alerts, key=lambda a: a.start):
        key = json.dumps(dict(f.labels), sort_keys=True)
        if key in last_end and f.start - last_end[key] <= FLAP_WINDOW:
            count += 1
        last_end[key] = f.end
    return count


def score(spec: Spec, result: Evaluation, incidents: Sequence[Incident]) -> dict[str, Scored]:
    """Variant -> its numbers."""
    page, ticket = spec.alerting.severity.label("page"), spec.alerting.severity.label("ticket")
    weeks = weeks_of(result)
    out = {}
    for variant in result.variants:
        alerts = variant_alerts(result, variant)
        page_series = [f for f in alerts if f.severity == page]
        ticket_series = [f for f in alerts if f.severity == ticket]
        sent = [n for n in notifications(spec, result, variant) if n.wakes]
        pages = [n for n in sent if _receiver_is_page(spec, n)]
        tickets = [n for n in sent if not _receiver_is_page(spec, n)]
        outside = [n for n in pages if not any(_notification_matches(n, i) for i in incidents)]
        out[variant] = Scored(
            alerts, sent, len(pages), len(tickets), len(pages) / weeks, len(tickets) / weeks, len(page_series),
            len(ticket_series), len(page_series) / weeks, len(ticket_series) / weeks, flaps(alerts), len(outside),
        )  # fmt: skip
    return out


def first_alerts(spec: Spec, result: Evaluation, incident: Incident, severity: str | None) -> dict[str, float | None]:
    """Variant -> the first start of a matching alert (of `severity`, or any when None), or None."""
    out: dict[str, float | None] = {}
    for variant in result.variants:
        times = [f.start for f in variant_alerts(result, variant)
                 if _matches(f, incident) and (severity is None or f.severity == severity)]  # fmt: skip
        out[variant] = min(times) if times else None
    return out


def to_json(
    spec: Spec, result: Evaluation, incidents: Sequence[Incident], scored: Mapping[str, Scored]
) -> dict[str, Any]:
    """The backtest.json document."""
    page = spec.alerting.severity.label("page")
    span = result.end - result.start
    return {
        "spec": spec.path,
        "service": spec.service,
        "start": result.start,
        "end": result.end,
        "weeks": round(weeks_of(result), 4),
        "extrapolated": span < EXTRAPOLATED_BELOW,
        "routing": alertmanager.path(spec),
        "warnings": list(result.warnings),
        "variants": {
            name: {
                "alerts": [f.to_data() for f in s.alerts],
                "notifications": [{**n.to_data(), "page": _receiver_is_page(spec, n)} for n in s.notifications],
                "pages": s.pages,
                "tickets": s.tickets,
                "pages_per_week": round(s.pages_per_week, 3),
                "tickets_per_week": round(s.tickets_per_week, 3),
                "page_series": s.page_series,
                "ticket_series": s.ticket_series,
                "page_series_per_week": round(s.page_series_per_week, 3),
                "ticket_series_per_week": round(s.ticket_series_per_week, 3),
                "flaps": s.flaps,
                "pages_outside_incidents": s.pages_outside_incidents,
            }
            for name, s in scored.items()
        },
        "incidents": [
            {
                "name": i.name,
                "kind": i.kind,
                "start": i.start,
                "end": i.end,
                "model": i.model,
                "class": i.request_class,
                "first_page": first_alerts(spec, result, i, page),
                "first_alert": first_alerts(spec, result, i, None),
            }
            for i in incidents
        ],
    }


def counting_note(doc: Mapping[str, Any]) -> str:
    """What a page is in the tables."""
    return (
        f"Pages and tickets are the notifications {doc['routing']} sends (its routes, grouping, timers and "
        "inhibitions, the same for every variant); page and ticket series are the alert series that fired."
    )


def rate_note(doc: Mapping[str, Any]) -> str:
    """The extrapolation warning for a history shorter than a week ('' for a week or more)."""
    if not doc["extrapolated"]:
        return ""
    return (
        f"rates per week are extrapolated from {span_text(doc['end'] - doc['start'])} of history (less than a "
        f"week: counts x{1 / doc['weeks']:.1f}); one incident weighs that much more than in a week of history"
    )


def _after(t: float | None, start: float) -> str:
    if t is None:
        return "—"
    delta = t - start
    return f"+{span_text(delta)}" if delta >= 60 else ("+0m" if delta >= 0 else f"{span_text(-delta)} before")


def to_markdown(doc: Mapping[str, Any]) -> str:
    """backtest.md: the summary, incidents and warnings."""
    lines = [f"# Backtest: {doc['service']}", "",
             f"History evaluated from {rfc3339(doc['start'])} to {rfc3339(doc['end'])} "
             f"({span_text(doc['end'] - doc['start'])}).", ""]  # fmt: skip
    for warning in doc["warnings"]:
        lines.append(f"> warning: {warning}")
    lines += ["", counting_note(doc), ""]
    if doc["extrapolated"]:
        lines += [f"> {rate_note(doc)}", ""]
    lines += ["| variant | pages/week | tickets/week | page series/week | ticket series/week | flaps | "
              "pages outside incidents |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, v in doc["variants"].items():
        lines.append(f"| {name} | {v['pages_per_week']:.1f} | {v['tickets_per_week']:.1f} | "
                     f"{v['page_series_per_week']:.1f} | {v['ticket_series_per_week']:.1f} | {v['flaps']} | "
                     f"{v['pages_outside_incidents']} |")  # fmt: skip
    variants = list(doc["variants"])
    if doc["incidents"]:
        lines += ["", "## Incidents: first page after the start (first alert of any severity in brackets)", "",
                  "| incident | model | start | length | " + " | ".join(variants) + " |",
                  "|---|---|---|---|" + "---|" * len(variants)]  # fmt: skip
        for i in doc["incidents"]:
            cells = [f"{_after(i['first_page'][v], i['start'])} ({_after(i['first_alert'][v], i['start'])})"
                     for v in variants]  # fmt: skip
            lines.append(f"| {i['name']} | {i['model']} | {rfc3339(i['start'])} | "
                         f"{span_text(i['end'] - i['start'])} | " + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_csv(path: Path, doc: Mapping[str, Any]) -> None:
    """alerts.csv: variant, alertname, severity, start, end (unix and RFC 3339), labels."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["variant", "alertname", "severity", "start", "end", "start_utc", "end_utc", "kind", "labels"])
        for name, v in doc["variants"].items():
            for a in v["alerts"]:
                out.writerow([name, a["alertname"], a["severity"], a["start"], a["end"], rfc3339(a["start"]),
                              rfc3339(a["end"]), a["kind"], json.dumps(a["labels"], sort_keys=True)])  # fmt: skip


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _thresholds(spec: Spec, class_name: str, sli: str) -> list[tuple[str, float]]:
    rc = spec.request_class(class_name)
    for key, slo in rc.slos.items():
        if key.value == sli:
            out = []
            if slo.objective is not None:
                out.append((f"objective {slo.objective.percentile:g}% within", slo.objective.threshold))
            for pct, seconds in slo.tiers.critical.items():
                if PERCENTILES[pct] == 0.99:
                    out.append(("critical p99", seconds))
            return out
    return []


def plots(
    spec: Spec, result: Evaluation, doc: Mapping[str, Any], incidents: Sequence[Incident]
) -> list[tuple[str, str]]:
    """(title, data URI) per plot: pages per day per variant, then one timeline per incident."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    variants = list(doc["variants"])
    page = spec.alerting.severity.label("page")
    days = max(1, int((result.end - result.start) // 86400 + (1 if (result.end - result.start) % 86400 else 0)))
    fig, ax = plt.subplots(figsize=(10, 3.2))
    width = 0.8 / max(1, len(variants))
    for n, name in enumerate(variants):
        counts = [0] * days
        for sent in doc["variants"][name]["notifications"]:
            if sent["page"]:
                counts[min(days - 1, int((sent["time"] - result.start) // 86400))] += 1
        ax.bar([d + n * width for d in range(days)], counts, width, label=name)
    ax.set_xticks([d + 0.4 for d in range(days)], [rfc3339(result.start + d * 86400)[:10] for d in range(days)],
                  fontsize=7)  # fmt: skip
    ax.set_ylabel("pages (notifications)")
    ax.legend(fontsize=7)
    ax.set_title("Pages per day per variant")
    out.append(("Pages per day per variant", _png(fig)))
    plt.close(fig)
    for incident in incidents:
        lo, hi = incident.start - 3 * 3600, incident.end + 3 * 3600
        keys = [k for k in result.p99 if k.split("/")[0] == incident.model
                and (incident.request_class is None or k.split("/")[1] == incident.request_class)][:4]  # fmt: skip
        fig, axes = plt.subplots(len(keys) + 1, 1, figsize=(10, 2.2 * (len(keys) + 1)), sharex=True, squeeze=False)
        for ax, key in zip(axes[:, 0], keys, strict=False):
            points = [(t, v) for t, v in result.p99[key] if lo <= t <= hi]
            ax.plot([(t - incident.start) / 3600 for t, _ in points], [v for _, v in points], lw=1, label="p99 (5m)")
            _, cls, sli = key.split("/")
            for label, value in _thresholds(spec, cls, sli):
                ax.axhline(value, ls="--", lw=0.8, color="red" if "critical" in label else "black",
                           label=f"{label} {format_duration(value)}")  # fmt: skip
            ax.axvspan(0, (incident.end - incident.start) / 3600, color="orange", alpha=0.15)
            ax.set_yscale("log")
            ax.set_ylabel(f"{cls} {sli} s", fontsize=7)
            ax.legend(fontsize=6, loc="upper left")
        lanes = axes[-1, 0]
        for n, name in enumerate(variants):
            for a in doc["variants"][name]["alerts"]:
                if a["labels"].get("model") != incident.model or a["end"] < lo or a["start"] > hi:
                    continue
                color = "red" if a["severity"] == page else "orange"
                lanes.barh(n, (a["end"] - a["start"]) / 3600, left=(a["start"] - incident.start) / 3600,
                           color=color, alpha=0.6, height=0.6)  # fmt: skip
        lanes.axvspan(0, (incident.end - incident.start) / 3600, color="orange", alpha=0.15)
        lanes.set_yticks(range(len(variants)), variants, fontsize=7)
        lanes.set_xlabel("hours after the incident start (red: page, orange: ticket)")
        lanes.set_xlim((lo - incident.start) / 3600, (hi - incident.start) / 3600)
        fig.suptitle(f"{incident.name}: {incident.model} from {rfc3339(incident.start)}", fontsize=9)
        out.append((incident.name, _png(fig)))
        plt.close(fig)
    return out


def _md_table_html(markdown: str) -> str:
    """A tiny Markdown-to-HTML for the report's own tables, headings and warnings (nothing else)."""
    body: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            head, *rest = rows
            body.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rest)
                        + "</table>")  # fmt: skip
            rows.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip("|").split("|")])
            continue
        flush()
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("> "):
            body.append(f"<p class=warn>{html.escape(line[2:])}</p>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    return "\n".join(body)


def write_reports(spec: Spec, result: Evaluation, incidents: Sequence[Incident], out: Path) -> dict[str, Any]:
    """Write backtest.json, backtest.md, backtest.html and alerts.csv into `out`; returns the JSON document."""
    out.mkdir(parents=True, exist_ok=True)
    scored = score(spec, result, incidents)
    doc = to_json(spec, result, incidents, scored)
    (out / "backtest.json").write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    markdown = to_markdown(doc)
    (out / "backtest.md").write_text(markdown, encoding="utf-8")
    write_csv(out / "alerts.csv", doc)
    figures = "\n".join(f"<h3>{html.escape(t)}</h3><img alt=\"{html.escape(t)}\" src=\"{uri}\">"
                        for t, uri in plots(spec, result, doc, incidents))  # fmt: skip
    page = (
        "<!doctype html><html><head><meta charset=utf-8><title>slokit backtest</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}.warn{color:#a60}img{max-width:100%}</style></head><body>"
        f"{_md_table_html(markdown)}<h2>Plots</h2>{figures}</body></html>\n"
    )
    (out / "backtest.html").write_text(page, encoding="utf-8")
    return doc
