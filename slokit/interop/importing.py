"""`slokit import`: read foreign SLO files, keep what slokit can express, and write one slokit spec.

The spec gets one class per imported objective (named after the SLO), one model named after the service, and
each SLO reads the file's own histogram (`metric: {histogram, selector, unit}`), so the rules read exactly the
series the original SLO did. Every class carries a comment naming its source file and SLO.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from slokit.interop import importers
from slokit.interop.model import Notice, Objective, format_number
from slokit.spec import SPEC_VERSION
from slokit.units import format_duration
from slokit.yamlloc import YamlLocationError, safe_load_all_bounded

EXIT_ALL: Final = 0
EXIT_SOME_SKIPPED: Final = 3
EXIT_NOTHING: Final = 2


@dataclass(frozen=True)
class ImportResult:
    """The objectives found and the notices about everything else."""

    objectives: tuple[Objective, ...]
    notices: tuple[Notice, ...]

    @property
    def exit_code(self) -> int:
        """0 all converted (maybe with changes), 3 some skipped, 2 nothing usable."""
        if not self.objectives:
            return EXIT_NOTHING
        return EXIT_SOME_SKIPPED if any(n.skipped for n in self.notices) else EXIT_ALL


class ImportFileError(Exception):
    """A file that cannot be read at all (missing, not YAML)."""


def _documents(path: Path) -> Iterator[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        docs = safe_load_all_bounded(text, str(path))
    except YamlLocationError as exc:
        raise ImportFileError(f"{exc.location}: {exc.message}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ImportFileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    for doc in docs:
        if isinstance(doc, list):
            yield from doc
        elif isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            yield from doc["items"]
        elif doc is not None:
            yield doc


# Kinds whose apiVersion group is recognised from the document's shape when the group is missing or another one.
PYRRA_API: Final = "pyrra.dev/v1alpha1"
SLOTH_API: Final = "sloth.slok.dev/v1"
OPENSLO_VERSIONS: Final = ("v1", "v1alpha")
APIVERSION: Final = "apiVersion"


def _spec_of(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = doc.get("spec")
    return spec if isinstance(spec, dict) else {}


def recognise(doc: Any) -> tuple[str, str] | None:
    """(the apiVersion to read a document as, the shape that says so) when its own apiVersion is not that one.

    Pyrra's operator writes `apiVersion: v1alpha1` with no group into the objects it generates, and some OpenSLO
    operators serve v1 under `openslo.com/v1`: refusing those as "not an SLO" would reject the very files teams
    keep. The kind and the fields under `spec` tell the formats apart, so a missing or different group is read as
    the format they name, and the caller says which apiVersion it assumed. None when the apiVersion is already
    the canonical one, or when the shape does not say (a Kubernetes `v1` Service stays what it is).
    """
    if not isinstance(doc, dict):
        return None
    api, kind = str(doc.get(APIVERSION, "") or ""), str(doc.get("kind", "") or "")
    group, _, version = api.rpartition("/")
    spec = _spec_of(doc)
    if kind == "ServiceLevelObjective" and isinstance(spec.get("indicator"), dict):
        return None if api.startswith("pyrra.dev/") else (PYRRA_API, "kind ServiceLevelObjective with spec.indicator")
    if kind == "PrometheusServiceLevel" and isinstance(spec.get("slos"), list):
        return None if api.startswith("sloth.slok.dev/") else (SLOTH_API, "kind PrometheusServiceLevel with spec.slos")
    if api.startswith("openslo/") or version not in OPENSLO_VERSIONS:
        return None
    if "openslo" in group.lower():  # openslo.com/v1, openslo.io/v1: the group names the format
        return f"openslo/{version}", f"its group {group}"
    if kind == "SLO" and isinstance(spec.get("objectives"), list) and ("indicator" in spec or "indicatorRef" in spec):
        return f"openslo/{version}", "kind SLO with spec.objectives and an indicator"
    if kind == "SLI" and ("ratioMetric" in spec or "thresholdMetric" in spec):
        return f"openslo/{version}", "kind SLI with a ratioMetric or thresholdMetric"
    return None


def _normalised(file: str, doc: Any) -> tuple[Any, Notice | None]:
    """The document as its format's canonical apiVersion reads it, and a notice saying what was assumed."""
    found = recognise(doc)
    if found is None:
        return doc, None
    canonical, why = found
    api = doc.get(APIVERSION)
    kind = str(doc.get("kind", ""))
    notice = None
    if kind in ("ServiceLevelObjective", "PrometheusServiceLevel", "SLO"):  # one line per SLO, not per SLI/Service
        name = str((doc.get("metadata") or {}).get("name", "?"))
        written = repr(api) if api else "none given"
        notice = Notice(file, name, APIVERSION, f"{written} read as {canonical} (from {why})", skipped=False)
    return {**doc, APIVERSION: canonical}, notice


def read_files(paths: Iterable[Path]) -> ImportResult:
    """Every objective and notice from the files, in file order; raises ImportFileError on unreadable files."""
    loaded: list[tuple[str, Any]] = []
    assumed: dict[int, Notice] = {}
    for path in paths:
        for raw in _documents(path):
            doc, notice = _normalised(str(path), raw)
            if notice is not None:
                assumed[len(loaded)] = notice
            loaded.append((str(path), doc))
    slis = {
        str((doc.get("metadata") or {}).get("name")): doc
        for _, doc in loaded
        if isinstance(doc, dict) and doc.get("kind") == "SLI" and str(doc.get("apiVersion", "")).startswith("openslo/")
    }
    sources = {
        str((doc.get("metadata") or {}).get("name")): str((doc.get("spec") or {}).get("type", ""))
        for _, doc in loaded
        if isinstance(doc, dict) and doc.get("kind") == "DataSource"
    }
    objectives: list[Objective] = []
    notices: list[Notice] = []
    for index, (file, doc) in enumerate(loaded):
        if index in assumed:
            notices.append(assumed[index])
        for item in _dispatch(doc, file, slis, sources):
            if isinstance(item, Objective):
                objectives.append(item)
            else:
                notices.append(item)
    return ImportResult(tuple(objectives), tuple(notices))


def _dispatch(doc: Any, file: str, slis: Mapping[str, Any], sources: Mapping[str, str]) -> importers.Result:
    if not isinstance(doc, dict):
        yield Notice(file, "?", "document", f"a YAML {type(doc).__name__}, not an SLO object", skipped=True)
        return
    api, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    name = str((doc.get("metadata") or {}).get("name", doc.get("service", "?")))
    if api.startswith("pyrra.dev/") and kind == "ServiceLevelObjective":
        yield from importers.pyrra(doc, file)
    elif doc.get("version") == "prometheus/v1" or (
        api.startswith("sloth.slok.dev/") and kind == "PrometheusServiceLevel"
    ):
        yield from importers.sloth(doc, file)
    elif api.startswith("openslo/") and kind == "SLO":
        yield from importers.openslo(doc, file, slis, sources)
    elif api.startswith("openslo/") and kind in (
        "SLI",
        "Service",
        "DataSource",
        "AlertPolicy",
        "AlertCondition",
        "AlertNotificationTarget",
    ):
        return  # read through the SLOs that use them (or not needed for latency objectives)
    elif api.startswith("openslo/v2"):
        yield Notice(file, name, "OpenSLO version", f"{api} is not supported (v1alpha and v1 are)", skipped=True)
    else:
        what = f"{api or 'no apiVersion'} {kind or 'no kind'}"
        yield Notice(file, name, "document", f"{what} is not a Pyrra, Sloth or OpenSLO SLO", skipped=True)


# -- writing the spec ---------------------------------------------------------------------------------------------
def slug(text: str) -> str:
    """A slokit name (1-63 lower-case letters, digits, '-', '_') for any SLO name."""
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")[:63].strip("-_")
    return name or "slo"


def _quote(value: str) -> str:
    return yaml.safe_dump(value, default_style='"', width=10_000).strip()


def _selector_value(op: str, value: str) -> str:
    return value if op == "=" else f"{op}{value}"


def _window(objectives: tuple[Objective, ...]) -> float:
    counts = Counter(o.window for o in objectives)
    return max(counts, key=lambda w: (counts[w], w))


def render_spec(result: ImportResult, service: str | None = None) -> str:
    """The slokit spec text for the imported objectives (call only when there is at least one)."""
    objectives = result.objectives
    services = {o.service for o in objectives if o.service}
    name = slug(service or (services.pop() if len(services) == 1 else "imported"))
    window = _window(objectives)
    files = sorted({o.file for o in objectives})
    models = sorted({m for o in objectives for m in o.models}) or [name]
    lines = [
        f"# Imported by `slokit import` from {', '.join(files)}.",
        "# Each class below is one imported objective; its comment names the source file and SLO.",
        f"version: {SPEC_VERSION}",
        f"service: {name}",
        f"window: {format_duration(window)}",
        "models:",
        *(f"  - {{name: {_quote(m)}}}" for m in models),
        "classes:",
    ]
    used: set[str] = set()
    for group in _classes(objectives):
        first = group[0]
        base = slug(first.class_name or first.slo)
        cls = base
        number = 2
        while cls in used:
            suffix = f"-{number}"
            cls = base[: 63 - len(suffix)] + suffix
            number += 1
        used.add(cls)
        for objective in group:
            lines.append(f"  # {objective.file}: {objective.kind} {objective.slo!r}")
            if objective.grouping:
                lines.append(f"  # grouped by ({', '.join(objective.grouping)}) there; slokit aggregates over them")
            if objective.good_only:
                shown = ", ".join(f"{k}{op}{json.dumps(v)}" for k, op, v in objective.good_only)  # one line
                lines.append(f"  # good events also had to match {shown} there (the total did not); dropped here")
            if objective.window != window:
                lines.append(
                    f"  # window {format_duration(objective.window)} there; this spec's window is "
                    f"{format_duration(window)}"
                )
        lines.append(f"  - name: {cls}")
        if first.description:
            lines.append(f"    description: {_quote(first.description.strip())}")
        class_models = first.models or (models[0],)
        lines.append(f"    models: [{', '.join(_quote(m) for m in class_models)}]")
        lines.append("    slos:")
        for objective in group:
            lines.extend(_slo_lines(objective))
    return "\n".join(lines) + "\n"


def _classes(objectives: tuple[Objective, ...]) -> list[list[Objective]]:
    """One class per objective, except objectives slokit exported from one class (same class name and models,
    different SLIs), which go back together."""
    groups: list[list[Objective]] = []
    by_name: dict[tuple[str, tuple[str, ...]], list[Objective]] = {}
    for objective in objectives:
        key = (objective.class_name or "", objective.models)
        group = by_name.get(key) if objective.class_name else None
        if group is not None and all(o.sli is not objective.sli for o in group):
            group.append(objective)
            continue
        group = [objective]
        groups.append(group)
        if objective.class_name:
            by_name[key] = group
    return groups


def _label(key: str) -> str:
    return key if re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", key) else _quote(key)


def _slo_lines(objective: Objective) -> list[str]:
    lines = [f"      {objective.sli.value}:", "        metric:", f"          histogram: {_quote(objective.histogram)}"]
    if objective.model_label:
        lines.append(f"          model_label: {objective.model_label}")
    selector = {k: _selector_value(op, v) for k, op, v in objective.matchers if k != objective.model_label}
    if selector:
        lines.append("          selector:")
        lines.extend(f"            {_label(k)}: {_quote(v)}" for k, v in selector.items())
    if objective.scale != 1.0:
        lines.append("          unit: ms")
    if objective.buckets is not None:
        lines.append(f"          buckets: [{', '.join(format_number(b) for b in objective.buckets)}]")
    lines.append(
        f"        objective: {{percentile: {objective.percentile:g}, "
        f"threshold: {format_duration(objective.threshold)}}}"
    )
    return lines


def window_notices(result: ImportResult) -> list[Notice]:
    """A notice for every objective whose window differs from the one the spec gets."""
    if not result.objectives:
        return []
    window = _window(result.objectives)
    return [
        Notice(
            o.file,
            o.slo,
            "window",
            f"{format_duration(o.window)} differs from the spec's window "
            f"{format_duration(window)} (one window per slokit spec)",
            skipped=False,
        )
        for o in result.objectives
        if o.window != window
    ]
