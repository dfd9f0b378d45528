"""Loading and checking a spec: YAML with locations -> the typed `Spec`, so that a user can act on every error.

Validation collects every problem in one pass and raises one `SpecError` listing them all, each with file, line,
column and field path, what is wrong and what would be right.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path as FsPath
from types import MappingProxyType
from typing import Any, Final, TypeVar

from slokit import schema, sources
from slokit.catalog import GPU_NAMES, MODEL_NAMES
from slokit.distributions import Distribution, DistributionError, parse_distribution
from slokit.schema import MeasuredAt, Sli
from slokit.sources import vllm_releases
from slokit.sources.base import Draft, SignalSource, bound_problems
from slokit.spec.model import (
    DEFAULT_MIN_REQUESTS,
    DEFAULT_PAGE_TIERS,
    DEFAULT_TICKET_TIERS,
    PERCENTILES,
    SPEC_VERSION,
    TIER_NAMES,
    Alerting,
    Baseline,
    BurnRateWindow,
    Consistency,
    GpuExporterSettings,
    Match,
    Model,
    Objective,
    Receivers,
    RequestClass,
    ScaleOut,
    Severity,
    SloSpec,
    Spec,
    TierCell,
    Tiers,
    TokenRange,
    VllmSettings,
    Workload,
)
from slokit.units import DurationError, format_duration, parse_duration
from slokit.yamlloc import LoadedYaml, Location, Path, YamlLocationError, load_yaml

METRIC_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME_RE: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
NAME_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
SECRET_NAME_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # also a certificate DNS name
HEADER_VALUE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
RUNBOOK_PLACEHOLDERS: Final = frozenset({"service", "alert"})
# Labels a `selector:` may not pin: slokit matches them itself per model, class and bucket.
SELECTOR_RESERVED: Final = frozenset({"model", "model_name", "class", "le", "engine"})


def _control_character(text: str, allowed: str = "") -> str | None:
    """The first control, format or unassigned-surrogate character of `text` outside `allowed`, or None."""
    for char in text:
        if char not in allowed and unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return char
    return None


# ==============================================================================================================
# Errors
# ==============================================================================================================
@dataclass(frozen=True)
class SpecIssue:
    """One problem in one spec: where, which field, what is wrong and what would be right."""

    location: Location
    field: str  # dotted path such as classes[0].slos.ttft.objective.threshold; "" for the document
    message: str

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.location}: {where}{self.message}"


class SpecError(Exception):
    """A spec that cannot be used. `issues` lists every problem found, in file order."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues = tuple(sorted(issues, key=lambda i: (i.location.file, i.location.line, i.location.column)))
        super().__init__("\n".join(str(issue) for issue in self.issues))


def format_path(path: Path) -> str:
    """`("classes", 0, "slos")` -> `classes[0].slos`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# ==============================================================================================================
# Loading
# ==============================================================================================================
T = TypeVar("T")

DEFAULT_BURN_RATES: Final[tuple[BurnRateWindow, ...]] = (
    BurnRateWindow("page", long=3600, short=300, budget_percent=2, for_=120),
    BurnRateWindow("page", long=6 * 3600, short=1800, budget_percent=5, for_=900),
    BurnRateWindow("ticket", long=86400, short=7200, budget_percent=10, for_=3600),
    BurnRateWindow("ticket", long=3 * 86400, short=6 * 3600, budget_percent=10, for_=3 * 3600),
)


class _Checker:
    """Reads plain YAML data into the typed spec, collecting every problem instead of stopping at the first."""

    def __init__(self, loaded: LoadedYaml, file: str) -> None:
        self.loaded = loaded
        self.file = file
        self.issues: list[SpecIssue] = []
        self.source: SignalSource = sources.default()

    # -- reporting ------------------------------------------------------------------------------------------
    def error(self, path: Path, message: str, *, at_key: bool = False) -> None:
        location = self.loaded.locate_key(path) if at_key else self.loaded.locate(path)
        self.issues.append(SpecIssue(location, format_path(path), message))

    # -- generic field readers --------------------------------------------------------------------------------
    def mapping(self, value: Any, path: Path, allowed: Iterable[str], required: Iterable[str] = ()) -> dict[str, Any]:
        """Check that `value` is a mapping with only `allowed` keys and all `required` keys."""
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping (key: value), not {_kind(value)}")
            return {}
        allowed_list = list(allowed)
        for key in value:
            if key not in allowed_list:
                close = difflib.get_close_matches(key, allowed_list, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of: {', '.join(allowed_list)}"
                self.error((*path, key), f"unknown key {key!r}{hint}", at_key=True)
        for key in required:
            if key not in value:
                self.error(path, f"missing required key {key!r}")
        return {k: v for k, v in value.items() if k in allowed_list}

    def string(self, value: Any, path: Path, pattern: re.Pattern[str] | None = None, what: str = "") -> str | None:
        if not isinstance(value, str) or not value.strip():
            self.error(path, f"must be a non-empty string, not {_kind(value)}")
            return None
        bad = _control_character(value, allowed="\n\t")
        if bad is not None:
            self.error(path, f"{value!r} holds the control character {bad!r}; write plain text")
            return None
        if pattern is not None and not pattern.match(value):
            self.error(path, f"{value!r} is not a valid {what or 'name'}")
            return None
        return value

    def name(self, value: Any, path: Path) -> str | None:
        if not isinstance(value, str) or not value:
            self.error(path, f"must be a name (lower-case letters, digits, '-' or '_'), not {_kind(value)}")
            return None
        if not NAME_RE.match(value):
            self.error(
                path,
                f"{value!r} is not a valid name: use 1-63 lower-case letters, digits, '-' or '_', "
                "starting and ending with a letter or digit",
            )
            return None
        return value

    def duration(self, value: Any, path: Path, minimum: float = 0.0) -> float | None:
        try:
            seconds = parse_duration(value)
        except DurationError as exc:
            self.error(path, str(exc))
            return None
        if seconds <= minimum:
            self.error(path, f"{value!r} must be longer than {format_duration(minimum) if minimum else '0'}")
            return None
        return seconds

    def number(
        self,
        value: Any,
        path: Path,
        *,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        high_open: bool = False,
        integer: bool = False,
    ) -> float | None:
        kind_ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not kind_ok or (isinstance(value, float) and not math.isfinite(value)):
            self.error(path, f"must be {'an integer' if integer else 'a number'}, not {_kind(value)}")
            return None
        number = float(value)
        if low is not None and (number < low or (low_open and number == low)):
            self.error(path, f"{value!r} is out of range: must be {_range_text(low, high, low_open, high_open)}")
            return None
        if high is not None and (number > high or (high_open and number == high)):
            self.error(path, f"{value!r} is out of range: must be {_range_text(low, high, low_open, high_open)}")
            return None
        return number

    def get(self, data: dict[str, Any], key: str, path: Path, read: Callable[[Any, Path], T | None], default: T) -> T:
        """Read an optional key with a default; a present but invalid value reports and falls back."""
        if key not in data:
            return default
        value = read(data[key], (*path, key))
        return default if value is None else value

    def items(self, value: Any, path: Path) -> list[Any]:
        if not isinstance(value, list):
            self.error(path, f"must be a list, not {_kind(value)}")
            return []
        if not value:
            self.error(path, "must not be empty")
        return value

    # -- the spec ---------------------------------------------------------------------------------------------
    def spec(self) -> Spec | None:
        root = self.loaded.data
        if root is None:
            self.error((), f"the file is empty; start from `slokit init` (version: {SPEC_VERSION})")
            return None
        top = self.mapping(
            root,
            (),
            ("version", "service", "description", "source", "window", "demo", "vllm", "selector", "models",
             "classes", "alerting", "gpu_exporter"),
            ("version", "service", "models", "classes"),
        )  # fmt: skip
        if not top and not isinstance(root, dict):
            return None
        version = top.get("version")
        if "version" in top and version != SPEC_VERSION:
            self.error(("version",), f"unsupported version {version!r}; this slokit reads {SPEC_VERSION!r}")
        service = self.name(top["service"], ("service",)) if "service" in top else None
        description = self.get(top, "description", (), self.string, "")
        source = self._source(top)
        self.source = source  # SLOs read it for their measured_at default
        window = self.get(top, "window", (), self.duration, 28 * 86400.0)
        demo = self.get(top, "demo", (), self._bool, False)
        vllm = self._vllm(top.get("vllm", {}), ("vllm",))
        selector = self._selector(top["selector"], ("selector",)) if "selector" in top else {}
        models = self._models(top.get("models"), ("models",), selector) if "models" in top else ()
        model_names = tuple(dict.fromkeys(m.name for m in models))
        classes = self._classes(top.get("classes"), ("classes",), model_names) if "classes" in top else ()
        alerting = self._alerting(top.get("alerting", {}), ("alerting",))
        gpu_exporter = self._gpu_exporter(top.get("gpu_exporter", {}), ("gpu_exporter",))
        self._cross_checks(source, window, vllm, classes, alerting, top)
        self._replicas_told_apart(models, selector, alerting, top)
        if self.issues or service is None:
            return None
        return Spec(
            version=SPEC_VERSION,
            service=service,
            description=description,
            source=source,
            window=window,
            demo=demo,
            vllm=vllm,
            models=models,
            classes=classes,
            alerting=alerting,
            selector=MappingProxyType(selector),
            gpu_exporter=gpu_exporter,
            path=self.file,
        )

    def _replicas_told_apart(
        self, models: Sequence[Model], selector: Mapping[str, str], alerting: Alerting, top: dict[str, Any]
    ) -> None:
        """Replicas of one model must differ in some replica label: one the selector pins (`namespace: prod` with
        `replica_labels: [namespace]`) is the same for every replica, and per-replica signals would sum them."""
        scopes = [dict(m.selector) for m in models] or [dict(selector)]
        for scope in scopes:
            free = [label for label in alerting.replica_labels if label not in scope]
            if free:
                continue
            pinned = ", ".join(f"{label}: {scope[label]}" for label in alerting.replica_labels)
            where = ("alerting", "replica_labels") if "replica_labels" in top.get("alerting", {}) else ("alerting",)
            self.error(
                where,
                f"every replica label is fixed by the selector ({pinned}), so the replicas of a model cannot be told "
                "apart; add a label that differs per replica, e.g. [namespace, pod] or [instance]",
            )
            return

    def _bool(self, value: Any, path: Path) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, f"must be true or false, not {_kind(value)}")
            return None
        return value

    def _source(self, top: dict[str, Any]) -> SignalSource:
        value = top.get("source", sources.DEFAULT)
        found = sources.get(value) if isinstance(value, str) else None
        if found is not None:
            return found
        names = ", ".join(f"'{s.name}' ({s.title})" for s in sources.all_sources())
        self.error(
            ("source",),
            f"{value!r} is not a source; use one of {names}, or name a histogram per SLO with "
            "metric: {histogram: ...}",
        )
        return sources.default()

    def _vllm(self, value: Any, path: Path) -> VllmSettings:
        data = self.mapping(value, path, ("version", "custom_histogram_buckets"))
        version = str(data.get("version", vllm_releases.DEFAULT_VERSION))
        if version not in vllm_releases.RELEASES:
            known = ", ".join(vllm_releases.RELEASES)
            self.error((*path, "version"), f"vLLM {version!r} has no bucket table here; known versions: {known}")
            version = vllm_releases.DEFAULT_VERSION
        custom: dict[str, tuple[float, ...]] = {}
        if "custom_histogram_buckets" in data:
            cpath = (*path, "custom_histogram_buckets")
            families = self.mapping(data["custom_histogram_buckets"], cpath, vllm_releases.SLI_FAMILY.values())
            for family, bounds in families.items():
                parsed = self._bucket_list(bounds, (*cpath, family))
                if parsed:
                    custom[family] = parsed
            if custom and not vllm_releases.RELEASES[version].custom_histogram_buckets:
                self.error(
                    cpath,
                    f"vLLM {version} has no --custom-histogram-buckets; it arrived in "
                    f"{vllm_releases.CUSTOM_BUCKETS_SINCE} (or subclass PrometheusStatLogger to change buckets)",
                )
        return VllmSettings(version, MappingProxyType(custom))

    def _bucket_list(self, value: Any, path: Path) -> tuple[float, ...]:
        if not isinstance(value, list) or not value:
            self.error(path, "must be a non-empty list of bucket boundaries in seconds, such as [0.1, 0.25, 0.5]")
            return ()
        numbers: list[float] = []
        for index, item in enumerate(value):
            number = self.number(item, (*path, index), low=0, low_open=True)
            if number is None:
                return ()
            numbers.append(number)
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            self.error(path, "boundaries must be strictly increasing (vLLM rejects anything else)")
            return ()
        return tuple(numbers)

    def _selector(self, value: Any, path: Path) -> dict[str, str]:
        """A `selector:` map of label names to values, checked as Prometheus label names and values."""
        if not isinstance(value, dict):
            self.error(path, f"must map label names to values (e.g. {{namespace: prod}}), not {_kind(value)}")
            return {}
        out: dict[str, str] = {}
        for key, label_value in value.items():
            if not isinstance(key, str) or not LABEL_NAME_RE.match(key) or key.startswith("__"):
                self.error(
                    (*path, key), f"{key!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)",
                    at_key=True,
                )  # fmt: skip
            elif key in SELECTOR_RESERVED:
                self.error((*path, key), f"{key!r} is chosen by slokit per model and class; leave it out", at_key=True)
            else:
                text = self._label_value(label_value, (*path, key))
                if text is not None:
                    out[key] = text
        return out

    def _models(self, value: Any, path: Path, selector: Mapping[str, str] | None = None) -> tuple[Model, ...]:
        models: list[Model] = []
        seen: dict[str, int] = {}
        for index, item in enumerate(self.items(value, path)):
            ipath = (*path, index)
            data = self.mapping(
                item, ipath, ("name", "preset", "gpu", "tensor_parallel", "max_num_seqs", "selector"), ("name",)
            )
            merged = dict(selector or {})
            if "selector" in data:
                merged.update(self._selector(data["selector"], (*ipath, "selector")))
            name = self.string(data["name"], (*ipath, "name")) if "name" in data else None
            name = self._plain(name, (*ipath, "name"), "a model name") if name is not None else None
            if name is not None and name in seen:
                self.error((*ipath, "name"), f"duplicate model {name!r} (also models[{seen[name]}])")
            elif name is not None:
                seen[name] = index
            preset = self.get(data, "preset", ipath, self._preset, None)
            if preset is None and name in MODEL_NAMES:
                preset = name
            gpu = self.get(data, "gpu", ipath, self._gpu, None)
            tp = self.get(data, "tensor_parallel", ipath, self._positive_int, 1)
            max_num_seqs = self.get(data, "max_num_seqs", ipath, self._positive_int, 256)
            if name is not None:
                models.append(Model(name, preset, gpu, tp, max_num_seqs, MappingProxyType(merged)))
        return tuple(models)

    def _positive_int(self, value: Any, path: Path) -> int | None:
        number = self.number(value, path, low=1, integer=True)
        return None if number is None else int(number)

    def _preset(self, value: Any, path: Path) -> str | None:
        return self._choice(value, path, MODEL_NAMES, "model preset")

    def _gpu(self, value: Any, path: Path) -> str | None:
        return self._choice(value, path, GPU_NAMES, "GPU")

    def _choice(self, value: Any, path: Path, choices: Iterable[str], what: str) -> str | None:
        options = sorted(choices)
        if isinstance(value, str) and value in options:
            return value
        close = _family_matches(str(value), options) or difflib.get_close_matches(str(value), options, n=1, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        self.error(path, f"unknown {what} {value!r}; {hint}known: {', '.join(options)}")
        return None

    # -- classes ----------------------------------------------------------------------------------------------
    def _classes(self, value: Any, path: Path, model_names: tuple[str, ...]) -> tuple[RequestClass, ...]:
        classes: list[RequestClass] = []
        seen_names: dict[str, int] = {}
        seen_headers: dict[str, int] = {}
        for index, item in enumerate(self.items(value, path)):
            ipath = (*path, index)
            data = self.mapping(
                item, ipath, ("name", "description", "match", "models", "slos", "workload"), ("name", "slos")
            )
            name = self.name(data["name"], (*ipath, "name")) if "name" in data else None
            duplicate = name is not None and name in seen_names
            if name == schema.OTHER_CLASS:
                self.error((*ipath, "name"), f"{name!r} is reserved for requests no class takes; pick another name")
                name = None
            if name is not None and name in seen_names:
                self.error((*ipath, "name"), f"duplicate class {name!r} (also classes[{seen_names[name]}])")
            elif name is not None:
                seen_names[name] = index
            description = self.get(data, "description", ipath, self.string, "")
            match = self._match(data.get("match", {}), (*ipath, "match"), name or "")
            if match.header in seen_headers and name is not None and not duplicate:
                self.error(
                    (*ipath, "match", "header"),
                    f"header value {match.header!r} already selects classes[{seen_headers[match.header]}]",
                )
            else:
                seen_headers.setdefault(match.header, index)
            models = self._class_models(data.get("models"), (*ipath, "models"), model_names)
            slos = self._slos(data["slos"], (*ipath, "slos")) if "slos" in data else {}
            workload = self._workload(data["workload"], (*ipath, "workload")) if "workload" in data else None
            if name is not None:
                classes.append(RequestClass(name, description, match, models, MappingProxyType(slos), workload))
        return tuple(classes)

    def _match(self, value: Any, path: Path, class_name: str) -> Match:
        data = self.mapping(value, path, ("header", "priority", "prompt_tokens"))
        header = class_name
        if "header" in data:
            header = self.string(data["header"], (*path, "header"), HEADER_VALUE_RE, "header value") or class_name
        priority: tuple[int, ...] = ()
        if "priority" in data:
            raw = data["priority"]
            values = raw if isinstance(raw, list) else [raw]
            parsed = [self.number(v, (*path, "priority"), integer=True) for v in values]
            if not values:
                self.error((*path, "priority"), "must be an integer or a non-empty list of integers")
            priority = tuple(int(v) for v in parsed if v is not None)
        prompt_tokens = None
        if "prompt_tokens" in data:
            ppath = (*path, "prompt_tokens")
            rng = self.mapping(data["prompt_tokens"], ppath, ("min", "max"))
            if isinstance(data["prompt_tokens"], dict) and not rng:
                self.error(ppath, "give min, max or both, e.g. {min: 0, max: 2048}")
            low = self.get(rng, "min", ppath, lambda v, p: self.number(v, p, low=0, integer=True), 0.0)
            high = self.get(rng, "max", ppath, lambda v, p: self.number(v, p, low=1, integer=True), None)
            if high is not None and high <= low:
                self.error((*ppath, "max"), f"max ({int(high)}) must be larger than min ({int(low)})")
            prompt_tokens = TokenRange(int(low), None if high is None else int(high))
        return Match(header, priority, prompt_tokens)

    def _class_models(self, value: Any, path: Path, model_names: tuple[str, ...]) -> tuple[str, ...]:
        if value is None:
            return model_names
        names = value if isinstance(value, list) else [value]
        if not names:
            self.error(path, "must name at least one model, or be left out to mean every model")
        result: list[str] = []
        for index, item in enumerate(names):
            ipath = (*path, index) if isinstance(value, list) else path
            if item in model_names:
                result.append(item)
            else:
                self.error(ipath, f"{item!r} is not a model of this spec; models: {', '.join(model_names) or 'none'}")
        return tuple(result)

    def _workload(self, value: Any, path: Path) -> Workload | None:
        data = self.mapping(value, path, ("prompt_tokens", "output_tokens"), ("prompt_tokens", "output_tokens"))
        prompt = self._distribution(data.get("prompt_tokens"), (*path, "prompt_tokens"))
        output = self._distribution(data.get("output_tokens"), (*path, "output_tokens"))
        if prompt is None or output is None:
            return None
        return Workload(prompt, output)

    def _distribution(self, value: Any, path: Path) -> Distribution | None:
        if value is None:
            return None
        try:
            return parse_distribution(value)
        except DistributionError as exc:
            self.error(path, str(exc))
            return None

    def _slos(self, value: Any, path: Path) -> dict[Sli, SloSpec]:
        data = self.mapping(value, path, [s.value for s in Sli])
        if isinstance(value, dict) and not value:
            self.error(path, f"give at least one SLO: {', '.join(s.value for s in Sli)}")
        slos: dict[Sli, SloSpec] = {}
        for key, item in data.items():
            sli = Sli(key)
            slo = self._slo(sli, item, (*path, key))
            if slo is not None:
                slos[sli] = slo
        return slos

    def _slo(self, sli: Sli, value: Any, path: Path) -> SloSpec | None:
        data = self.mapping(value, path, ("objective", "tiers", "consistency", "measured_at", "metric"))
        if isinstance(value, dict) and not ({"objective", "tiers", "consistency"} & value.keys()):
            self.error(path, "give an objective, tiers or a consistency objective; otherwise nothing can alert")
        objective = None
        if "objective" in data:
            opath = (*path, "objective")
            odata = self.mapping(data["objective"], opath, ("percentile", "threshold"), ("percentile", "threshold"))
            percentile = (
                self.number(odata["percentile"], (*opath, "percentile"), low=0, high=100, low_open=True,
                            high_open=True)
                if "percentile" in odata else None
            )  # fmt: skip
            threshold = self.duration(odata["threshold"], (*opath, "threshold")) if "threshold" in odata else None
            if percentile is not None and threshold is not None:
                objective = Objective(percentile, threshold)
        tiers = self._tiers(data.get("tiers", {}), (*path, "tiers"))
        consistency = None
        if "consistency" in data:
            cpath = (*path, "consistency")
            cdata = self.mapping(data["consistency"], cpath, ("max_p99_over_p50",), ("max_p99_over_p50",))
            if "max_p99_over_p50" in cdata:
                ratio = self.number(cdata["max_p99_over_p50"], (*cpath, "max_p99_over_p50"), low=1, low_open=True)
                if ratio is not None:
                    consistency = Consistency(ratio)
        measured_at = self._measured_at(sli, data, path)
        metric = self._metric(data["metric"], (*path, "metric")) if "metric" in data else None
        if metric is not None and "measured_at" in data:
            self.error(
                (*path, "measured_at"),
                "a custom histogram (metric:) is measured wherever its exporter measures it; drop measured_at",
            )
        if metric is not None:
            measured_at = MeasuredAt.ENGINE  # not the source's frontend histogram; its labels are metric:'s
        return SloSpec(sli, objective, tiers, consistency, measured_at, metric)

    def _measured_at(self, sli: Sli, data: dict[str, Any], path: Path) -> MeasuredAt:
        """`measured_at`: frontend (default for TTFT and E2E with source slokit) or engine."""
        frontend = self.source.METRICS.frontend_latency
        frontend_ok = sli in frontend
        default = MeasuredAt.FRONTEND if frontend_ok else MeasuredAt.ENGINE
        if "measured_at" not in data:
            return default
        value = data["measured_at"]
        choices = [m.value for m in MeasuredAt]
        if value not in choices:
            self.error((*path, "measured_at"), f"{value!r} is not a place; use {' or '.join(choices)}")
            return default
        where = MeasuredAt(value)
        if where is MeasuredAt.FRONTEND and not frontend_ok:
            why = (
                f"the frontend measures only {' and '.join(sorted(s.value for s in frontend))}"
                if frontend
                else f"source: {self.source.name} has no frontend histograms"
            )
            self.error((*path, "measured_at"), f"{sli.value} cannot be measured at the frontend ({why}); use engine")
            return MeasuredAt.ENGINE
        return where

    def _metric(self, value: Any, path: Path) -> schema.CustomHistogram | None:
        data = self.mapping(
            value, path, ("histogram", "model_label", "selector", "unit", "buckets", "engine_label"), ("histogram",)
        )
        name = (
            self.string(data["histogram"], (*path, "histogram"), METRIC_NAME_RE, "metric name")
            if ("histogram" in data)
            else None
        )
        if name is not None and name.endswith(("_bucket", "_count", "_sum")):
            self.error((*path, "histogram"), f"{name!r}: give the base name, without _bucket, _count or _sum")
            name = None
        model_label = self.get(data, "model_label", path, self._label_name, None)
        engine_label = self.get(data, "engine_label", path, self._label_name, "instance")
        matchers: list[tuple[str, str, str]] = []
        if "selector" in data:
            spath = (*path, "selector")
            raw = data["selector"]
            if not isinstance(raw, dict):
                self.error(spath, f"must be a mapping of label to value (prefix =~, != or !~ for other matchers), "
                                  f"not {_kind(raw)}")  # fmt: skip
            else:
                for key, item in raw.items():
                    matcher = self._matcher(key, item, (*spath, key))
                    if matcher is not None:
                        matchers.append(matcher)
        unit = data.get("unit", "s")
        if unit not in ("s", "ms"):
            self.error((*path, "unit"), f"{unit!r} is not a histogram unit; use s (seconds) or ms (milliseconds)")
            unit = "s"
        buckets = self._bucket_list(data["buckets"], (*path, "buckets")) if "buckets" in data else None
        if name is None:
            return None
        scale = 0.001 if unit == "ms" else 1.0
        seconds = tuple(b * scale for b in buckets) if buckets else None
        if seconds is None:
            seconds = sources.known_buckets(name)  # a source's own histogram (TGI's *_duration share one ladder)
        return schema.CustomHistogram(name, model_label, tuple(matchers), scale, seconds, engine_label)

    def _label_name(self, value: Any, path: Path) -> str | None:
        text = self.string(value, path, LABEL_NAME_RE, "Prometheus label name")
        if text is not None and (text.startswith("__") or text == "le"):
            self.error(path, f"{text!r} cannot be used here (reserved label)")
            return None
        return text

    def _matcher(self, key: Any, value: Any, path: Path) -> tuple[str, str, str] | None:
        label = self._label_name(key, path)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.error(path, f"must be a label value (string), not {_kind(value)}")
            return None
        text = str(value)
        op = "="
        for prefix in ("=~", "!~", "!="):
            if text.startswith(prefix):
                op, text = prefix, text[len(prefix) :]
                break
        if label == "le":
            return None
        if op in ("=~", "!~"):
            try:
                re.compile(text)
            except re.error as exc:
                self.error(path, f"{text!r} is not a valid regular expression ({exc})")
                return None
        return None if label is None else (label, op, text)

    def _tiers(self, value: Any, path: Path) -> Tiers:
        data = self.mapping(value, path, TIER_NAMES)
        parsed: dict[str, dict[str, float]] = {}
        for tier in TIER_NAMES:
            tpath = (*path, tier)
            values: dict[str, float] = {}
            if tier in data:
                tdata = self.mapping(data[tier], tpath, PERCENTILES)
                for pct, raw in tdata.items():
                    seconds = self.duration(raw, (*tpath, pct))
                    if seconds is not None:
                        values[pct] = seconds
            parsed[tier] = values
        for pct in PERCENTILES:
            present = [(tier, parsed[tier][pct]) for tier in TIER_NAMES if pct in parsed[tier]]
            for (low_tier, low), (high_tier, high) in itertools.pairwise(present):
                if low > high:
                    self.error(
                        (*path, high_tier, pct),
                        f"tiers out of order: {high_tier} {pct} {format_duration(high)} is faster than "
                        f"{low_tier} {format_duration(low)}; need target <= acceptable <= critical",
                    )
        for tier in TIER_NAMES:
            ordered = [(pct, parsed[tier][pct]) for pct in PERCENTILES if pct in parsed[tier]]
            for (low_pct, low), (high_pct, high) in itertools.pairwise(ordered):
                if low > high:
                    self.error(
                        (*path, tier, high_pct),
                        f"{high_pct} {format_duration(high)} is below {low_pct} {format_duration(low)}; a higher "
                        "percentile cannot be faster",
                    )
        return Tiers(*(MappingProxyType(parsed[tier]) for tier in TIER_NAMES))

    # -- alerting ---------------------------------------------------------------------------------------------
    def _gpu_exporter(self, value: Any, path: Path) -> GpuExporterSettings:
        keys = ("web_config_secret", "scheme", "server_name", "client_cert_secret", "basic_auth_secret")
        data = self.mapping(value, path, keys)
        read: dict[str, str] = {}
        for key in keys:
            if key not in data:
                continue
            text = self.string(
                data[key], (*path, key), SECRET_NAME_RE, "Kubernetes name (RFC 1123: a-z, 0-9, '-', '.')"
            )
            if text is not None:
                read[key] = text
        scheme = read.pop("scheme", "https")
        if scheme not in ("https", "http"):
            self.error((*path, "scheme"), f"{scheme!r} is not a scheme; use https (default) or http")
            scheme = "https"
        if data and "web_config_secret" not in data:
            self.error(path, "missing required key 'web_config_secret': the Secret holding web-config.yml")
        if "client_cert_secret" in read and scheme != "https":
            self.error((*path, "client_cert_secret"), "a client certificate needs scheme: https")
        return GpuExporterSettings(scheme=scheme, **read)

    def _alerting(self, value: Any, path: Path) -> Alerting:
        data = self.mapping(
            value,
            path,
            ("burn_rates", "baseline", "scale_out", "severity", "runbook_url", "tier_for", "kv_cache_usage_max",
             "labels", "grafana_url", "replica_labels", "tiers", "min_requests", "receivers"),
        )  # fmt: skip
        burn_rates = DEFAULT_BURN_RATES
        if "burn_rates" in data:
            burn_rates = self._burn_rates(data["burn_rates"], (*path, "burn_rates"))
        baseline = self._baseline(data.get("baseline", {}), (*path, "baseline"))
        scale_out = self._scale_out(data.get("scale_out", {}), (*path, "scale_out"))
        severity = self._severity(data.get("severity", {}), (*path, "severity"))
        runbook_url = self.get(data, "runbook_url", path, self._runbook_url, "runbooks/{service}.md#{alert}")
        grafana_url = self.get(data, "grafana_url", path, self._grafana_url, "")
        tier_for = self.get(data, "tier_for", path, self._for, 300.0)
        kv_max = self.get(
            data,
            "kv_cache_usage_max",
            path,
            lambda v, p: self.number(v, p, low=0, high=1, low_open=True),
            0.95,
        )
        page_tiers, ticket_tiers = self._alert_tiers(data.get("tiers", {}), (*path, "tiers"))
        min_requests = int(
            self.get(
                data, "min_requests", path, lambda v, p: self.number(v, p, low=1, integer=True),
                float(DEFAULT_MIN_REQUESTS),
            )
        )  # fmt: skip
        receivers = self._receivers(data.get("receivers", {}), (*path, "receivers"))
        labels = self._alert_labels(data["labels"], (*path, "labels")) if "labels" in data else {}
        default_replica: tuple[str, ...] = ("instance",)
        replica_labels = self.get(data, "replica_labels", path, self._replica_labels, default_replica)
        return Alerting(
            replica_labels=replica_labels,
            burn_rates=burn_rates,
            baseline=baseline,
            scale_out=scale_out,
            severity=severity,
            runbook_url=runbook_url,
            grafana_url=grafana_url,
            tier_for=tier_for,
            kv_cache_usage_max=kv_max,
            labels=MappingProxyType(labels),
            page_tiers=page_tiers,
            ticket_tiers=ticket_tiers,
            min_requests=min_requests,
            receivers=receivers,
        )

    def _baseline(self, value: Any, path: Path) -> Baseline:
        bdata = self.mapping(value, path, ("ratio", "offset", "min_rps", "median_days", "for"))
        return Baseline(
            ratio=self.get(bdata, "ratio", path, lambda v, p: self.number(v, p, low=1, low_open=True), 1.5),
            offset=self.get(bdata, "offset", path, self.duration, 86400.0),
            min_rps=self.get(bdata, "min_rps", path, lambda v, p: self.number(v, p, low=0), 0.05),
            median_days=int(self.get(bdata, "median_days", path, lambda v, p: self._median_days(v, p), 0.0)),
            for_=self.get(bdata, "for", path, self._for, 600.0),
        )

    def _scale_out(self, value: Any, path: Path) -> ScaleOut:
        sdata = self.mapping(value, path, ("fraction_of_slo", "for"))
        return ScaleOut(
            fraction_of_slo=self.get(
                sdata,
                "fraction_of_slo",
                path,
                lambda v, p: self.number(v, p, low=0, high=1, low_open=True),
                0.8,
            ),
            for_=self.get(sdata, "for", path, self._for, 300.0),
        )

    def _severity(self, value: Any, path: Path) -> Severity:
        vdata = self.mapping(value, path, ("page", "ticket"))
        return Severity(
            page=self.get(vdata, "page", path, self._label_value, "critical"),
            ticket=self.get(vdata, "ticket", path, self._label_value, "warning"),
        )

    def _receivers(self, value: Any, path: Path) -> Receivers:
        rdata = self.mapping(value, path, ("page", "ticket"))
        receivers = Receivers(
            page=self.get(rdata, "page", path, self._receiver_name, "page"),
            ticket=self.get(rdata, "ticket", path, self._receiver_name, "ticket"),
        )
        if receivers.page == receivers.ticket:
            self.error((*path, "ticket"), f"pages and tickets need different receivers; both are {receivers.page!r}")
        return receivers

    def _alert_labels(self, value: Any, path: Path) -> dict[str, str]:
        """The spec's extra labels on every alert (never one slokit sets itself)."""
        labels: dict[str, str] = {}
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping of label names to values, not {_kind(value)}")
            return labels
        for key, label_value in value.items():
            if not LABEL_NAME_RE.match(key) or key.startswith("__"):
                self.error((*path, key), f"{key!r} is not a Prometheus label name", at_key=True)
            elif key in schema.RESERVED_ALERT_LABELS:
                self.error((*path, key), f"{key!r} is set by slokit on every alert", at_key=True)
            else:
                text = self._label_value(label_value, (*path, key))
                if text is not None:
                    labels[key] = text
        return labels

    def _replica_labels(self, value: Any, path: Path) -> tuple[str, ...] | None:
        if not isinstance(value, list) or not value:
            self.error(path, f"must be a non-empty list of label names (e.g. [namespace, pod]), not {_kind(value)}")
            return None
        out: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not LABEL_NAME_RE.match(item) or item.startswith("__"):
                self.error((*path, index), f"{item!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
                return None
            if item in SELECTOR_RESERVED or item in {"le", "engine"}:
                self.error((*path, index), f"{item!r} cannot tell replicas apart; use e.g. instance or pod")
                return None
            if item in out:
                self.error((*path, index), f"{item!r} is listed twice")
                return None
            out.append(item)
        return tuple(out)

    def _alert_tiers(self, value: Any, path: Path) -> tuple[tuple[TierCell, ...], tuple[TierCell, ...]]:
        """`tiers: {page: [critical.p50], ticket: [acceptable.p95, acceptable.p99]}`: which cells alert."""
        data = self.mapping(value, path, ("page", "ticket"))
        out: dict[str, tuple[TierCell, ...]] = {"page": DEFAULT_PAGE_TIERS, "ticket": DEFAULT_TICKET_TIERS}
        for kind in ("page", "ticket"):
            if kind not in data:
                continue
            cells: list[TierCell] = []
            for index, item in enumerate(self.items(data[kind], (*path, kind))):
                ipath = (*path, kind, index)
                text = item if isinstance(item, str) else ""
                tier, _, pct = text.partition(".")
                if tier not in TIER_NAMES or pct not in PERCENTILES:
                    self.error(
                        ipath,
                        f"{item!r} is not a tier cell; write <tier>.<percentile> with tier one of "
                        f"{', '.join(TIER_NAMES)} and percentile one of {', '.join(PERCENTILES)} (e.g. critical.p50)",
                    )
                    continue
                cell = TierCell(tier, pct)
                if cell in cells:
                    self.error(ipath, f"{cell} is listed twice")
                    continue
                cells.append(cell)
            out[kind] = tuple(cells)
        return out["page"], out["ticket"]

    def _receiver_name(self, value: Any, path: Path) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if not text.strip():
            self.error(path, "a receiver name cannot be empty")
            return None
        return text

    def _for(self, value: Any, path: Path) -> float | None:
        try:
            seconds = parse_duration(value)
        except DurationError as exc:
            self.error(path, str(exc))
            return None
        return seconds

    def _median_days(self, value: Any, path: Path) -> float | None:
        number = self.number(value, path, low=0, high=28, integer=True)
        if number is not None and number == 1:
            self.error(path, "a median needs at least 2 days; use 0 for the single offset baseline")
            return None
        return number

    def _label_value(self, value: Any, path: Path) -> str | None:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.error(path, f"must be a string, not {_kind(value)}")
            return None
        return self._plain(str(value), path, "a label value")

    def _plain(self, text: str, path: Path, what: str) -> str | None:
        """Text that reaches alert labels, annotations or PromQL as a value: no control characters (a newline in a
        model name breaks the rule file) and no Go template delimiters (Prometheus expands `{{ ... }}` in alert
        labels and annotations at every evaluation, so a label that holds one changes, and the alert with it)."""
        bad = _control_character(text)
        if bad is not None:
            self.error(path, f"{text!r} holds the control character {bad!r}; {what} is one line of plain text")
            return None
        if "{{" in text or "}}" in text:
            self.error(
                path,
                f"{text!r} holds a template delimiter ({{{{ or }}}}), which Prometheus would expand in alert labels "
                f"and annotations; {what} must be plain text",
            )
            return None
        return text

    def _grafana_url(self, value: Any, path: Path) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        if not re.match(r"^https?://[^\s/?#]+[^\s?#]*$", text):
            self.error(path, f"{text!r} is not a Grafana base URL; write it like https://grafana.example.com")
            return None
        return text.rstrip("/")

    def _runbook_url(self, value: Any, path: Path) -> str | None:
        text = self.string(value, path)
        text = self._plain(text, path, "a runbook URL") if text is not None else None
        if text is None:
            return None
        placeholders = set(re.findall(r"\{([^{}]*)\}", text))
        unknown = placeholders - RUNBOOK_PLACEHOLDERS
        if unknown:
            self.error(path, f"unknown placeholder {{{sorted(unknown)[0]}}}; use {{service}} and {{alert}}")
            return None
        if "{alert}" not in text:
            self.error(path, "must contain {alert}, so each alert links to its own runbook section")
            return None
        return text

    def _burn_rates(self, value: Any, path: Path) -> tuple[BurnRateWindow, ...]:
        windows: list[BurnRateWindow] = []
        for index, item in enumerate(self.items(value, path)):
            ipath = (*path, index)
            data = self.mapping(
                item, ipath, ("severity", "long", "short", "budget_percent", "for"),
                ("severity", "long", "short", "budget_percent"),
            )  # fmt: skip
            severity = data.get("severity")
            if "severity" in data and severity not in ("page", "ticket"):
                self.error((*ipath, "severity"), f"{severity!r} must be 'page' or 'ticket'")
            long = self.duration(data["long"], (*ipath, "long")) if "long" in data else None
            short = self.duration(data["short"], (*ipath, "short")) if "short" in data else None
            budget = (
                self.number(data["budget_percent"], (*ipath, "budget_percent"), low=0, high=100, low_open=True)
                if "budget_percent" in data else None
            )  # fmt: skip
            for_ = self.get(data, "for", ipath, self._for, 0.0)
            if long is not None and short is not None and short >= long:
                self.error(
                    (*ipath, "short"),
                    f"short window {format_duration(short)} must be shorter than long "
                    f"{format_duration(long)} (about 1/12 of it is usual)",
                )
            if long is not None and long < 300:
                self.error((*ipath, "long"), "a long window under 5m cannot hold a 5m rate")
            if short is not None and short < 300 and short % 300 != 0:
                self.error((*ipath, "short"), "the shortest window slokit records is 5m")
            if severity in ("page", "ticket") and long and short and budget:
                windows.append(BurnRateWindow(str(severity), long, short, budget, for_))
        return tuple(windows)

    # -- checks across fields ---------------------------------------------------------------------------------
    def _cross_checks(
        self,
        source: SignalSource,
        window: float,
        vllm: VllmSettings,
        classes: tuple[RequestClass, ...],
        alerting: Alerting,
        top: dict[str, Any],
    ) -> None:
        longest = max((w.long for w in alerting.burn_rates), default=0.0)
        if longest > window:
            self.error(
                ("window",),
                f"window {format_duration(window)} is shorter than the longest alert window "
                f"{format_duration(longest)}; make it at least that long",
            )
        if alerting.baseline.offset + 3600 > window * 10:
            self.error(("alerting", "baseline", "offset"), "baseline offset is far longer than the SLO window")
        self._histogram_checks(classes)
        for problem in source.check(Draft(top, classes, vllm)):
            self.error(problem.path, problem.message, at_key=problem.at_key)

    def _histogram_checks(self, classes: tuple[RequestClass, ...]) -> None:
        """Custom histograms: one model when they carry no model label; declared buckets hold the thresholds.
        (What an SLO reading the source's own histograms needs is the source's `check`.)"""
        for index, request_class in enumerate(classes):
            for sli, slo in request_class.slos.items():
                path: Path = ("classes", index, "slos", sli.value)
                if slo.metric is None:
                    continue
                if slo.metric.model_label is None and len(request_class.models) != 1:
                    self.error(
                        (*path, "metric"),
                        f"a histogram without model_label can serve only one model, but classes[{index}] runs "
                        f"on {len(request_class.models)}; set model_label or give the class one model",
                    )
                if slo.metric.buckets is not None:
                    for problem in bound_problems(
                        slo, path, slo.metric.buckets, f"the declared buckets of {slo.metric.name}",
                        "or add the threshold to the histogram's buckets (and to metric.buckets)",
                    ):  # fmt: skip
                        self.error(problem.path, problem.message)


def _family_matches(value: str, options: list[str]) -> list[str]:
    """Presets of the family a name spells (`h100` -> h100-pcie, h100-sxm; `a100` -> both A100 sizes).

    Edit distance alone suggests `h200` for `h100` (one letter apart) although an H200 is another GPU; a name that
    is a whole prefix of some presets means one of those variants.
    """
    key = value.strip().lower()
    if not key:
        return []
    return [o for o in options if o.startswith(key + "-")]


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    return " and ".join(parts)


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    return type(value).__name__


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_spec_text(text: str, file: str = "<spec>") -> Spec:
    """Parse and validate spec text; raises `SpecError` with every problem found."""
    try:
        loaded = load_yaml(text, file)
    except YamlLocationError as exc:
        raise SpecError([SpecIssue(exc.location, "", exc.message)]) from None
    checker = _Checker(loaded, file)
    spec = checker.spec()
    if spec is None or checker.issues:
        if not checker.issues:
            checker.error((), "the spec could not be read")
        raise SpecError(checker.issues)
    return _with_digest(spec, text)


def _with_digest(spec: Spec, text: str) -> Spec:
    return replace(spec, digest=_digest(text), text=text)


def load_spec(path: str | FsPath) -> Spec:
    """Read and validate one spec file."""
    file = str(path)
    try:
        text = FsPath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([SpecIssue(Location(file, 1, 1), "", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([SpecIssue(Location(file, 1, 1), "", "is a directory, not a spec file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError([SpecIssue(Location(file, 1, 1), "", f"not UTF-8 text ({exc.reason})")]) from None
    except OSError as exc:
        raise SpecError([SpecIssue(Location(file, 1, 1), "", f"cannot be read: {exc.strerror}")]) from None
    return load_spec_text(text, file)


def default_spec_path() -> FsPath:
    """The bundled default spec (used when a command is given none)."""
    return FsPath(__file__).parent.parent / "data" / "default.yaml"
