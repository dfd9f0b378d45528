"""Labelled incidents: the YAML list `{name, start, end, model, class}` that backtest scores alerts against.

Times are RFC 3339 (`2026-12-01T14:00:00Z`) or unix seconds; `class` is optional (the whole model). `simulate`
writes this file for the incidents it injects (with an extra `kind`), and backtest reads it; errors name the file,
the item and the field, and what would be right.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slokit.spec import Spec
from slokit.yamlloc import YamlLocationError, load_yaml


class InputError(Exception):
    """Unusable input for simulate or backtest (exit 2): the message says where, what is wrong and what is right."""


@dataclass(frozen=True)
class Incident:
    """One labelled incident: when, on which model (and class), and optionally what kind."""

    name: str
    start: float
    end: float
    model: str
    request_class: str | None = None
    kind: str | None = None

    def to_data(self) -> dict[str, Any]:
        """The incidents-file form (RFC 3339 times, so people can read it)."""
        data: dict[str, Any] = {"name": self.name, "start": rfc3339(self.start), "end": rfc3339(self.end)}
        data["model"] = self.model
        if self.request_class is not None:
            data["class"] = self.request_class
        if self.kind is not None:
            data["kind"] = self.kind
        return data


def rfc3339(t: float) -> str:
    """Unix seconds as `2026-12-01T14:00:00Z`."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> float:
    """RFC 3339 text or unix seconds (int, float or numeric text) -> unix seconds; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("an RFC 3339 time needs a zone (Z or +hh:mm)")
        return parsed.timestamp()
    raise ValueError(f"{type(value).__name__} is not a time")


def load_incidents(path: Path, spec: Spec, warnings: list[str] | None = None) -> list[Incident]:
    """Read and check an incidents file against the spec (models and classes must exist).

    Missing or invalid required fields (start, end, model) and unknown models or classes raise InputError (exit 2);
    fields it does not know are ignored with a warning, appended to `warnings` when given."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the incidents file: {exc.strerror or exc}") from None
    try:
        loaded = load_yaml(text, str(path))
    except YamlLocationError as exc:
        raise InputError(f"{exc.location}: {exc.message}") from None
    data = loaded.data
    if data is None:
        return []
    if isinstance(data, dict) and "incidents" in data:
        data = data["incidents"]
        prefix: tuple[str | int, ...] = ("incidents",)
    else:
        prefix = ()
    if not isinstance(data, list):
        raise InputError(
            f"{path}: expected a YAML list of {{name, start, end, model, class}}, got {type(data).__name__}"
        )
    models = [m.name for m in spec.models]
    classes = {c.name: c for c in spec.classes}
    out: list[Incident] = []
    problems: list[str] = []
    for index, item in enumerate(data):
        where = f"{loaded.locate((*prefix, index))}: incidents[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: expected a mapping with name, start, end, model (and optional class)")
            continue
        unknown = sorted(str(k) for k in set(item) - {"name", "start", "end", "model", "class", "kind"})
        if unknown and warnings is not None:
            warnings.append(f"{where}: ignoring unknown field(s) {', '.join(unknown)}; known: name, start, end, "
                            "model, class, kind")  # fmt: skip
        missing = [k for k in ("start", "end", "model") if k not in item]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
            continue
        times: list[float] = []
        for key in ("start", "end"):
            try:
                times.append(parse_time(item[key]))
            except ValueError as exc:
                loc = loaded.locate((*prefix, index, key))
                problems.append(
                    f"{loc}: incidents[{index}].{key}: {item[key]!r} is not RFC 3339 or unix seconds ({exc})"
                )
        model = str(item["model"])
        if model not in models:
            loc = loaded.locate((*prefix, index, "model"))
            problems.append(
                f"{loc}: incidents[{index}].model: {model!r} is not a model of the spec; one of: {', '.join(models)}"
            )
        rc = item.get("class")
        if rc is not None:
            rc = str(rc)
            if rc not in classes:
                loc = loaded.locate((*prefix, index, "class"))
                problems.append(
                    f"{loc}: incidents[{index}].class: {rc!r} is not a class of the spec; one of: {', '.join(classes)}"
                )
            elif model in models and model not in classes[rc].models:
                loc = loaded.locate((*prefix, index, "class"))
                problems.append(f"{loc}: incidents[{index}].class: class {rc!r} does not run on model {model!r}")
        if len(times) == 2 and times[1] <= times[0]:
            problems.append(f"{where}: end must be after start")
        if len(times) == 2:
            name = str(item.get("name") or f"incident-{index + 1}")
            kind = str(item["kind"]) if item.get("kind") is not None else None
            out.append(Incident(name, times[0], times[1], model, rc, kind))
    if problems:
        raise InputError("\n".join(problems))
    return sorted(out, key=lambda i: i.start)


def range_warnings(incidents: Sequence[Incident], start: float, end: float) -> list[str]:
    """Warnings for incidents the evaluated range [start, end] does not cover (in full or at all)."""
    out = []
    span = f"{rfc3339(start)} to {rfc3339(end)}"
    for i in incidents:
        if i.end <= start or i.start >= end:
            out.append(f"incident {i.name} ({rfc3339(i.start)} to {rfc3339(i.end)}) is outside the evaluated "
                       f"history ({span}): nothing can detect it")  # fmt: skip
        elif i.start < start or i.end > end:
            out.append(f"incident {i.name} ({rfc3339(i.start)} to {rfc3339(i.end)}) is only partly inside the "
                       f"evaluated history ({span})")  # fmt: skip
    return out


def dump_incidents(incidents: Iterable[Incident]) -> str:
    """The incidents file text."""
    return yaml.safe_dump([i.to_data() for i in incidents], sort_keys=False)


def model_incidents(incidents: Sequence[Incident], model: str) -> list[Incident]:
    """The incidents on one model."""
    return [i for i in incidents if i.model == model]
