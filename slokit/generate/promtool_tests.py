"""promtool unit tests for every generated alert: it fires at the right moment, stays silent when healthy and at
zero traffic.

The tests feed raw series (the source's own metric names and labels, every bucket of the spec's histogram) through
the whole rule chain, so they test the recording rules as much as the alerts. Time model (checked by promtool):
input samples every minute from t=0; rates exist from t=1m (two samples), gauges and `absent()` from t=0; an alert
whose expression turns true at `t0` is pending until the first evaluation at or after `t0 + for`, where it fires.
Each alert is checked one evaluation before that moment (not firing) and at it (firing), with every label and the
expanded annotations (summary, description with the measured value, runbook_url).

Expected annotation text is expanded here with the same formatting Prometheus's template functions use
(`printf`, `humanizeDuration`, `humanizePercentage`), from values the inputs make exact.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from slokit import schema
from slokit.generate import alerts as alerts_mod
from slokit.generate import queries
from slokit.generate.model import AlertKind, AlertRule, RecordingRule
from slokit.generate.rules import (
    BASE_WINDOW,
    BASELINE_QUANTILE,
    TILE_SEEN,
    failure_terms,
    model_facts,
    parameter_rules,
    rule_groups,
    rules_path,
)
from slokit.promql import histogram_quantile, le_spellings, number, selector
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec
from slokit.units import format_duration, parse_duration, prom_duration

# Seconds between evaluations in the tests. Production specs wait hours (`for: 3h` on the slow ticket tier), so
# their tests step every 5m: a `for` is then checked as "pending at activation, firing at the first 5m step after
# it", five times fewer evaluations than 1m steps. Specs with sub-minute `for` (the demo) step every minute.
FINE_STEP: Final = 60
COARSE_STEP: Final = 300
_STEP: ContextVar[int] = ContextVar("promtool_test_step", default=FINE_STEP)
RPM: Final = 60  # requests per minute in every input
ENGINE: Final = "0"  # vLLM's data-parallel rank: the same in every pod
REPLICA: Final = "a"


# ==============================================================================================================
# Prometheus template formatting (the subset the generated annotations use)
# ==============================================================================================================
def _go_g4(value: float) -> str:
    """Go's `%.4g`."""
    text = f"{value:.4g}"
    return text


def humanize_duration(value: float) -> str:
    """Prometheus's `humanizeDuration`."""
    if math.isnan(value) or math.isinf(value):
        return _go_g4(value)
    if value == 0:
        return f"{_go_g4(value)}s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        v = abs(value)
        duration = int(v)
        seconds, minutes = duration % 60, (duration // 60) % 60
        hours, days = (duration // 3600) % 24, duration // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_go_g4(v)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return f"{_go_g4(value)}{prefix}s"


def humanize_percentage(value: float) -> str:
    """Prometheus's `humanizePercentage`."""
    return f"{_go_g4(value * 100)}%"


def _go_value(value: float) -> str:
    """`{{ $value }}`: Go prints a float64 in its shortest form."""
    if float(value).is_integer():
        return str(int(value))
    return repr(value)


_TEMPLATE = re.compile(r"\{\{\s*(\$value|\$labels\.(\w+))\s*(?:\|\s*([^}]*?))?\s*\}\}")


def expand(template: str, value: float, labels: Mapping[str, str]) -> str:
    """Expand the template subset used by slokit's annotations."""

    def one(match: re.Match[str]) -> str:
        if match.group(2):
            return labels.get(match.group(2), "")
        pipe = (match.group(3) or "").strip()
        if not pipe:
            return _go_value(value)
        if pipe == "humanizeDuration":
            return humanize_duration(value)
        if pipe == "humanizePercentage":
            return humanize_percentage(value)
        printf = re.fullmatch(r'printf\s+"(%[^"]+)"', pipe)
        if printf:
            return printf.group(1) % value
        raise ValueError(f"template function {pipe!r} has no expansion in promtool_tests")

    return _TEMPLATE.sub(one, template)


# ==============================================================================================================
# Inputs
# ==============================================================================================================
@dataclass(frozen=True)
class Scenario:
    """How requests of one (model, class, SLI) are spread over the buckets: share per finite bucket, rest slow."""

    shares: Mapping[int, float]  # finite bucket index -> share of requests observed in that bucket
    rpm: int = RPM


def _series_values(per_minute: float, minutes: int) -> str:
    return f"0+{number(per_minute)}x{minutes}"


def _raw_labels(spec: Spec, model: str, rc: RequestClass | None, replica: str = REPLICA) -> dict[str, str]:
    """Labels of one replica's raw series: the model's deployment scope, model, class, replica labels, engine."""
    metrics = spec.metrics
    labels = dict(spec.model(model).selector) if model in {m.name for m in spec.models} else {}
    if metrics.model_label is not None:  # None (TGI): the series name no model
        labels[metrics.model_label] = model
    if metrics.class_label is not None and rc is not None:
        labels[metrics.class_label] = rc.name
    labels.update(_replica(spec, replica, model))
    labels.setdefault(metrics.engine_label, ENGINE)
    return labels


def _replica(spec: Spec, replica: str, model: str | None = None) -> dict[str, str]:
    """The replica labels of one replica, e.g. {instance: "instance-a"}; a label the model's selector pins keeps
    the selector's value (`replica_labels: [namespace, pod]` in `namespace: prod`: every replica is in prod and
    only `pod` tells them apart; the spec checker refuses labels that are all pinned)."""
    pinned = queries.Queries(spec).model_selector(model) if model is not None else spec.selector
    return {label: pinned.get(label, f"{label}-{replica}") for label in spec.alerting.replica_labels}


def _engine(spec: Spec, replica: str = REPLICA) -> str:
    """The `engine` value of one replica's engine series: vLLM's rank, or the replica label the source's engine
    label is (SGLang's `instance`), which the rules copy to `engine`."""
    label = spec.metrics.engine_label
    return f"{label}-{replica}" if label in spec.alerting.replica_labels else ENGINE


def satisfying_labels(matchers: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """Label values a synthetic series needs to pass a selector: `=` as written, `=~` its first alternative (or
    "" when the regex allows it), `!=` and `!~` left out unless an absent label would fail them."""
    labels: dict[str, str] = {}
    for label, op, value in matchers:
        if op == "=":
            labels[label] = value
        elif op == "=~":
            first = value.split("|")[0].strip("()")
            for candidate in (first, value, ""):
                if re.fullmatch(value, candidate):
                    if candidate:
                        labels[label] = candidate
                    break
            else:
                raise ValueError(f"cannot build a label value matching {label}=~{value!r} for the promtool tests")
        elif (op == "!=" and value == "") or (op == "!~" and re.fullmatch(value, "")):
            labels[label] = "x" if not (op == "!~" and re.fullmatch(value, "x")) else "slokit-test"
    return labels


def _histogram_labels(spec: Spec, model: str, rc: RequestClass, sli: Sli, replica: str = REPLICA) -> dict[str, str]:
    """Labels of one replica's series of one class's SLI histogram (Spec.histogram): the model's deployment scope,
    the histogram's model label and own matchers (or class), replica labels, and its engine label where it has one
    (frontend histograms have none; an engine label that is a replica label keeps the replica's value)."""
    hist = spec.histogram(rc, sli)
    labels = dict(spec.model(model).selector) if model in {m.name for m in spec.models} else {}
    if hist.model_label is not None:
        labels[hist.model_label] = model
    labels.update(satisfying_labels(hist.matchers))
    labels.update(_replica(spec, replica, model))
    if hist.engine_label is not None:
        labels.setdefault(hist.engine_label, ENGINE)
    return labels


def _histogram_inputs(
    spec: Spec, model: str, rc: RequestClass, sli: Sli, scenario: Scenario | None, minutes: int,
    values: Callable[[float, int], str] | None = None, bounds: Sequence[float] | None = None,
    relabel: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, str]], list[float]]:  # fmt: skip
    """Input series of one histogram; returns them and the cumulative per-minute counts (+Inf last).

    `values(per_minute, minutes)` writes each series' promtool values (default: a steady counter from zero);
    `bounds` its finite boundaries (default: the class's SLI histogram's); `relabel` labels set over its own."""
    series_values = values or _series_values
    bounds = spec.histogram_buckets(rc, sli) if bounds is None else bounds
    name = spec.histogram(rc, sli).name
    base = {**_histogram_labels(spec, model, rc, sli), **(relabel or {})}
    write = _le_writer(spec, rc, sli, model)
    if scenario is None:
        per_bucket = [0.0] * (len(bounds) + 1)
    else:
        per_bucket = [scenario.rpm * scenario.shares.get(i, 0.0) for i in range(len(bounds))]
        per_bucket.append(scenario.rpm - sum(per_bucket))
    cumulative = [sum(per_bucket[: i + 1]) for i in range(len(per_bucket))]
    out = []
    for i, bound in enumerate([*bounds, math.inf]):
        le = "+Inf" if math.isinf(bound) else write(bound)
        out.append({"series": selector(f"{name}_bucket", [(k, "=", v) for k, v in {**base, "le": le}.items()]),
                    "values": series_values(cumulative[i], minutes)})  # fmt: skip
    out.append({"series": selector(f"{name}_count", [(k, "=", v) for k, v in base.items()]),
                "values": series_values(cumulative[-1], minutes)})  # fmt: skip
    return out, cumulative


def _requests_input_labels(spec: Spec, model: str, rc: RequestClass) -> dict[str, str]:
    labels = _raw_labels(spec, model, rc)
    if spec.metrics.finish_reason_label:
        labels[spec.metrics.finish_reason_label] = "stop"
    return labels


def _requests_input(
    spec: Spec, model: str, rc: RequestClass, per_minute: float, minutes: int, relabel: Mapping[str, str] | None = None
) -> dict[str, str]:  # fmt: skip
    labels = {**_requests_input_labels(spec, model, rc), **(relabel or {})}
    return {
        "series": selector(spec.metrics.requests_finished, [(k, "=", v) for k, v in labels.items()]),
        "values": _series_values(per_minute, minutes),
    }


def _alerting_thresholds(spec: Spec, rc: RequestClass, sli: Sli) -> list[float]:
    slo = rc.slos[sli]
    values = [v for tier in ("acceptable", "critical") for v in slo.tiers.tier(tier).values()]
    if slo.objective is not None:
        values.append(slo.objective.threshold)
        if sli is Sli.TTFT:
            values.append(slo.objective.threshold * spec.alerting.scale_out.fraction_of_slo)
    return values


def _healthy_bucket(
    spec: Spec, rc: RequestClass, sli: Sli, readers: Sequence[tuple[RequestClass, Sli]] = (),
    bounds: Sequence[float] | None = None,
) -> int:  # fmt: skip
    """The highest bucket (of `bounds`, default the SLI histogram's) whose upper bound is at or under every
    alerting threshold of the SLI and of the other SLOs (`readers`) whose selectors also read its series."""
    thresholds = [t for r_rc, r_sli in [(rc, sli), *readers] for t in _alerting_thresholds(spec, r_rc, r_sli)]
    limit = min(thresholds, default=math.inf)
    bounds = spec.histogram_buckets(rc, sli) if bounds is None else bounds
    fitting = [i for i, b in enumerate(bounds) if b <= limit + 1e-12]
    return fitting[-1] if fitting else 0


# ==============================================================================================================
# Expected alerts
# ==============================================================================================================
def _start(rule: AlertRule) -> int:
    """First evaluation (seconds) at which the rule's expression can be true: rates need two samples."""
    if rule.kind in (AlertKind.ABSENT, AlertKind.QUEUE_OVERLOAD) or rule.name == alerts_mod.NAME_KV_FULL:
        return 0
    return 60


def _for_seconds(rule: AlertRule) -> int:
    if rule.for_ in ("", "0s"):
        return 0
    return int(parse_duration(rule.for_))


def fires_at(rule: AlertRule) -> int:
    """The first evaluation time (seconds from the start) at which the alert fires when its condition holds:
    it turns pending at the first evaluation where its inputs exist, and fires at the first one `for` later."""
    step = _STEP.get()
    active = math.ceil(_start(rule) / step) * step
    return active + math.ceil(_for_seconds(rule) / step) * step


def _dur(seconds: int) -> str:
    return prom_duration(seconds) if seconds > 0 else "0s"


def _expected(rule: AlertRule, value: float, series_labels: Mapping[str, str]) -> dict[str, Any]:
    labels = {**series_labels, **rule.labels}
    annotations = {k: expand(v, value, labels) for k, v in rule.annotations.items()}
    return {"exp_labels": dict(sorted(labels.items())), "exp_annotations": annotations}


ValueOf = Callable[..., tuple[float, dict[str, str]]]


def _checks(
    rules: Sequence[AlertRule], firing: Sequence[AlertRule], value_of: ValueOf, *, timed: bool = False
) -> list[dict[str, Any]]:
    """alert_rule_test entries: for each rule in `firing`, just before and at its firing moment; the expected set
    at each time holds every rule of the same alertname (in `rules`) that fires by then."""
    tests = []
    times = sorted({t for r in firing for t in (fires_at(r) - _STEP.get(), fires_at(r)) if t >= 0})
    names = sorted({r.name for r in rules})
    for t in times:
        for name in names:
            expected = [
                _expected(r, *(value_of(r, t) if timed else value_of(r)))
                for r in firing if r.name == name and fires_at(r) <= t
            ]  # fmt: skip
            entry: dict[str, Any] = {"eval_time": _dur(t), "alertname": name}
            if expected:
                entry["exp_alerts"] = expected
            tests.append(entry)
    return tests


def _silent(rules: Sequence[AlertRule], at: int) -> list[dict[str, Any]]:
    return [{"eval_time": _dur(at), "alertname": name} for name in sorted({r.name for r in rules})]


def _minutes_for(rules: Sequence[AlertRule]) -> int:
    latest = max((fires_at(r) for r in rules), default=0)
    return latest // 60 + 5


# ==============================================================================================================
# Test groups
# ==============================================================================================================
def tested_models(spec: Spec) -> list[str]:
    """The models the tests write series for: the first of each class, a second one for the first two classes that
    have one, and the first of each deployment scope.

    Every rule is written once for the fleet, so two models of one class and several classes in one scenario are
    what catches a term that mixes them up; more models would test nothing new and grow the tests with the fleet.
    """
    q = queries.Queries(spec)
    wanted: set[str] = set()
    seconds = 0
    for rc in spec.classes:
        wanted.update(rc.models[:1])
        if seconds < 2 and len(rc.models) > 1:
            wanted.add(rc.models[1])
            seconds += 1
    scopes: set[tuple[tuple[str, str], ...]] = set()
    for model in spec.models:
        key = tuple(sorted(q.model_selector(model.name).items()))
        if key not in scopes:
            scopes.add(key)
            wanted.add(model.name)
    return [m.name for m in spec.models if m.name in wanted]


def tested_of(spec: Spec, rc: RequestClass) -> list[str]:
    """A class's models that the tests write series for (see tested_models)."""
    tested = set(tested_models(spec))
    return [m for m in rc.models if m in tested]


# Scenarios longer than this cover two classes per SLI (see representative), not every class.
LONG_SCENARIO_MINUTES: Final = 60


def representative(slos: Sequence[tuple[RequestClass, Sli, str]]) -> list[tuple[RequestClass, Sli, str]]:
    """The SLOs a long scenario writes series for: per SLI, its first two classes (with every tested model of them).

    Only the 5m records (tiles, bucket rates) hold a term per class and threshold; every longer window, ratio, burn
    rate and alert is one term over all classes, joined with per-class parameters. A long scenario therefore tests
    the same terms with two classes as with all of them, and the short scenarios (5m windows, the outage, the fast
    pages) still write every class. Two classes, and two models in the first classes, keep a term that mixes classes
    or models failing; the time of the long scenarios no longer grows with the classes."""
    chosen: dict[Sli, list[str]] = {}
    for rc, sli, _ in slos:
        names = chosen.setdefault(sli, [])
        if rc.name not in names and len(names) < 2:
            names.append(rc.name)
    return [(rc, sli, m) for rc, sli, m in slos if rc.name in chosen[sli]]


def _tested_specs(spec: Spec) -> list[Any]:
    tested = set(tested_models(spec))
    return [m for m in spec.models if m.name in tested]


def record_windows(spec: Spec, record: Callable[[str], str]) -> list[str]:
    """The windows the spec's rules record `record(window)` for, shortest first (e.g. 5m, 10m, ..., 4w)."""
    prefix = record("")
    found = {r.record.removeprefix(prefix) for g in rule_groups(spec) for r in g.rules
             if isinstance(r, RecordingRule) and r.record.startswith(prefix)}  # fmt: skip
    return sorted(found, key=parse_duration)


def _slo_series_labels(spec: Spec, model: str, rc: RequestClass, sli: Sli) -> dict[str, str]:
    return {"service": spec.service, "model": model, "class": rc.name, "slo": sli.value}


def _matches(labels: Mapping[str, str], matchers: Sequence[tuple[str, str, str]]) -> bool:
    """Whether a series with `labels` passes every matcher (an absent label reads as "", regexes anchored)."""
    for label, op, value in matchers:
        have = labels.get(label, "")
        ok = {"=": have == value, "!=": have != value}.get(op)
        if ok is None:
            ok = bool(re.fullmatch(value, have)) == (op == "=~")
        if not ok:
            return False
    return True


SloKey = tuple[RequestClass, Sli, str]  # (class, SLI, model)


def _readers(spec: Spec, slos: Sequence[SloKey]) -> dict[int, list[SloKey]]:
    """For each SLO (by position), the other SLOs whose histogram selector also matches its synthetic series:
    SLOs that read one histogram with overlapping selectors (e.g. imported `verb=~"LIST|GET"` beside
    `verb=~"LIST|GET",scope="cluster"`). Classes told apart by a class label read nothing of each other."""
    q = queries.Queries(spec)
    out: dict[int, list[SloKey]] = {}
    for i, (rc, sli, model) in enumerate(slos):
        name = spec.histogram(rc, sli).name
        labels = _histogram_labels(spec, model, rc, sli)
        out[i] = [
            (o_rc, o_sli, o_model)
            for j, (o_rc, o_sli, o_model) in enumerate(slos)
            if j != i and spec.histogram(o_rc, o_sli).name == name
            and _matches(labels, q.histogram_matchers(o_rc, o_sli, [o_model]))
        ]  # fmt: skip
    return out


NEIGHBOUR: Final = "neighbour"  # appended to a label value: a series of someone else's
# A neighbour service's records carry the SLO labels of this many tested SLOs: a rule that leaks reads them all
# the same, and a copy per SLO would grow the healthy scenario with the fleet's classes.
NEIGHBOUR_SLOS: Final = 2


def _neighbour_series(spec: Spec, slos: Sequence[SloKey], minutes: int) -> tuple[list[dict[str, str]], dict[str, int]]:
    """What shares a Prometheus with the service and must count for nothing in its rules, every request of it
    slower than every bound: for each SLO's histogram, one copy per label its selector pins with `=` (the
    deployment scope, the model, the class, the histogram's own matchers), that label's value not the one pinned
    (the same model in another namespace, another model in the same namespace, ...); and a neighbour service's
    recorded series, every record this file writes, under the neighbour's `service`, with the SLO labels of the
    first NEIGHBOUR_SLOS tested SLOs (another rule file writes them under the same names) and a label of their own
    (schema.TEST_LABEL_NEIGHBOUR_INPUT): a series a broken rule derives from one of them never has the labels of
    another input, which would hide it (Prometheus keeps the first sample of a timestamp).

    In a scenario where the service is healthy, a rule that drops one of those matchers (or reads a record
    without its `service`) reads a neighbour's slow requests or records and fires. The recorded series are the
    one input of the tests that is not raw: the neighbour's, never the records under test.

    Returns the series and, per label, how many of them carry a neighbour's value of it."""
    q = queries.Queries(spec)
    out: list[dict[str, str]] = []
    written: set[str] = set()
    per_label: dict[str, int] = {}
    shapes: set[tuple[str, str]] = set()
    for rc, sli, model in slos:
        base = _histogram_labels(spec, model, rc, sli)
        hist = spec.histogram(rc, sli).name
        if (hist, rc.name) in shapes:
            continue  # one tested model's copies per class and histogram: the rules read every model alike
        shapes.add((hist, rc.name))
        # the model's other SLOs on the same histogram (another model's selector names another model)
        siblings = [q.histogram_matchers(o_rc, o_sli, [model]) for o_rc in spec.classes if model in o_rc.models
                    for o_sli in o_rc.slos if spec.histogram(o_rc, o_sli).name == hist]  # fmt: skip
        for label, op, value in q.histogram_matchers(rc, sli, [model]):
            if op != "=" or label == "le" or base.get(label) != value:
                continue
            moved = {**base, label: f"{value}-{NEIGHBOUR}"}
            if any(_matches(moved, matchers) for matchers in siblings):
                continue  # another SLO of the spec reads it (a selector broader than this one's): not a neighbour's
            series, _ = _histogram_inputs(spec, model, rc, sli, Scenario({}), minutes,
                                          relabel={label: f"{value}-{NEIGHBOUR}"})  # fmt: skip
            new = [s for s in series if s["series"] not in written]
            out += new
            written.update(s["series"] for s in new)
            per_label[label] = per_label.get(label, 0) + len(new)
        for relabel in _neighbour_scopes(spec, model, rc):
            request = _requests_input(spec, model, rc, RPM, minutes, relabel)
            if request["series"] not in written:
                written.add(request["series"])
                out.append(request)
                for label in relabel:
                    per_label[label] = per_label.get(label, 0) + 1
    service = f"{spec.service}-{NEIGHBOUR}"
    parameters = {(rule.record, tuple(sorted(rule.labels.items()))) for rule in parameter_rules(spec)}
    for group in rule_groups(spec):
        for rule in group.rules:
            if not isinstance(rule, RecordingRule):
                continue
            # the neighbour's parameters (thresholds, factors, limits) low, its measurements high: every alert
            # of the neighbour's that a broken rule of ours evaluates is over its threshold
            parameter = (rule.record, tuple(sorted(rule.labels.items()))) in parameters
            value = "0.001" if parameter else "1000"
            for rc, sli, model in slos[:NEIGHBOUR_SLOS]:
                labels = {**({} if parameter else _slo_series_labels(spec, model, rc, sli)), **rule.labels}
                theirs = [k for k, v in labels.items() if v == spec.service]
                labels.update(dict.fromkeys(theirs, service))
                # which input it is: a series a rule derives from it (even under the same name) is a new one
                labels[schema.TEST_LABEL_NEIGHBOUR_INPUT] = rule.record
                text = selector(rule.record, [(k, "=", v) for k, v in sorted(labels.items())])
                if text not in written:
                    written.add(text)
                    out.append({"series": text, "values": f"{value}x{minutes}"})
                    for label in theirs:
                        per_label[label] = per_label.get(label, 0) + 1
    return out, per_label


def _neighbour_scopes(spec: Spec, model: str, rc: RequestClass | None) -> list[dict[str, str]]:
    """One relabelling per label a model's raw selector pins with `=` (its deployment scope, model, class): that
    label's value made a neighbour's, where no raw selector of the spec's reads the result."""
    q = queries.Queries(spec)
    base = _raw_labels(spec, model, rc)
    siblings = [q.raw_matchers(model, o_rc.name if rc is not None else None) for o_rc in spec.classes]
    out = []
    for label, op, value in q.raw_matchers(model, rc.name if rc else None):
        theirs = {**base, label: f"{value}-{NEIGHBOUR}"}
        if op == "=" and base.get(label) == value and not any(_matches(theirs, m) for m in siblings):
            out.append({label: f"{value}-{NEIGHBOUR}"})
    return out


def _nothing_written_for_neighbours(per_label: Mapping[str, int], at: int) -> list[dict[str, Any]]:
    """A check that the rules write no series of a neighbour's: as many series carry a neighbour's label value
    as were put in (`per_label`: label -> how many). A rule that reads a neighbour's series and passes its labels
    on (a window record of the neighbour's service, the counter record of another model) adds some; no alert
    need fire for that. (A series with two labels of a neighbour's would count twice; the neighbours have one.)"""
    if not per_label:
        return []
    terms = [f'(count({{{label}=~".+-{NEIGHBOUR}"}}) or vector(0))' for label in sorted(per_label)]
    return [{"expr": " + ".join(terms), "eval_time": _dur(at), "exp_samples": [{"value": sum(per_label.values())}]}]


def _slo_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Four scenarios, each over every SLO of the spec at once: all slow, healthy, zero traffic, inconsistent.

    No scenario has a day of history, so no baseline exists and the baseline alerts stay silent here: they are
    tested from raw history in `_baseline_groups`. Where another SLO's selector also matches an SLO's series
    (`_readers`), those series carry every boundary of both histograms, as one real histogram would, and the
    healthy scenario puts them under the thresholds of both."""
    firing_kinds = (AlertKind.BURN_RATE, AlertKind.TIER, AlertKind.SCALE_OUT)
    slos = [(rc, sli, slo, m) for rc in spec.classes for sli, slo in rc.slos.items() for m in tested_of(spec, rc)]
    slo_rules = [r for r in all_rules if r.kind in (*firing_kinds, AlertKind.CONSISTENCY)]
    if not slo_rules:
        return []
    firing = [r for r in slo_rules if r.kind in firing_kinds]
    consistency = [r for r in slo_rules if r.kind is AlertKind.CONSISTENCY]
    minutes = _minutes_for(slo_rules)
    end = (minutes - 2) * 60
    values: dict[int, tuple[float, dict[str, str]]] = {}
    ratios: dict[int, tuple[float, dict[str, str]]] = {}
    slow: list[dict[str, str]] = []
    healthy: list[dict[str, str]] = []
    idle: list[dict[str, str]] = []
    mixed: list[dict[str, str]] = []
    requests_seen: set[tuple[str, str]] = set()
    quiet_consistency = list(consistency)
    readers = _readers(spec, [(rc, sli, model) for rc, sli, _, model in slos])
    for index, (rc, sli, slo, model) in enumerate(slos):
        others = [(o_rc, o_sli) for o_rc, o_sli, _ in readers[index]]
        bounds = spec.histogram_buckets(rc, sli)
        if others:
            bounds = tuple(sorted({*bounds, *(b for o in others for b in spec.histogram_buckets(*o))}))
        labels = _slo_series_labels(spec, model, rc, sli)
        for rule in all_rules:
            if rule.model != model or rule.request_class != rc.name or rule.sli is not sli:
                continue
            if rule.kind is AlertKind.BURN_RATE and slo.objective is not None:
                values[id(rule)] = (1.0 / (1.0 - slo.objective.target_ratio), labels)
            elif rule.kind is AlertKind.TIER:
                values[id(rule)] = (0.0, labels)  # the share of requests within the tier: none
            elif rule.kind is AlertKind.SCALE_OUT and slo.objective is not None:
                # every request above the scale-out boundary: the whole share, over the share the objective allows
                fraction = spec.alerting.scale_out.fraction_of_slo
                values[id(rule)] = (round(fraction / slo.objective.error_budget, 9), labels)
        k = _healthy_bucket(spec, rc, sli, others, bounds)
        cumulative_share = [0.0] * k + [1.0] * (len(bounds) - k)
        p50 = histogram_quantile(0.5, bounds, [*cumulative_share, 1.0])
        p99 = histogram_quantile(0.99, bounds, [*cumulative_share, 1.0])
        if (slo.consistency is not None and p50 is not None and p99 is not None
                and p99 / p50 > slo.consistency.max_p99_over_p50):  # fmt: skip
            quiet_consistency = [r for r in quiet_consistency if not (r.model == model and r.request_class == rc.name
                                                                      and r.sli is sli)]  # fmt: skip
        slow += _histogram_inputs(spec, model, rc, sli, Scenario({}), minutes, bounds=bounds)[0]
        healthy += _histogram_inputs(spec, model, rc, sli, Scenario({k: 1.0}), minutes, bounds=bounds)[0]
        idle += _histogram_inputs(spec, model, rc, sli, None, minutes, bounds=bounds)[0]
        if slo.consistency is not None:
            series, _ = _histogram_inputs(spec, model, rc, sli, Scenario({0: 0.6}), minutes, bounds=bounds)
            mixed += series
            # p99 is in +Inf (lower edge: the top boundary), p50 in the first bucket (upper edge: its boundary)
            ratio = bounds[-1] / bounds[0]
            for rule in consistency:
                if rule.model == model and rule.request_class == rc.name and rule.sli is sli:
                    ratios[id(rule)] = (ratio, labels)
        if (model, rc.name) not in requests_seen:
            requests_seen.add((model, rc.name))
            slow.append(_requests_input(spec, model, rc, RPM, minutes))
            healthy.append(_requests_input(spec, model, rc, RPM, minutes))
            idle.append(_requests_input(spec, model, rc, 0, minutes))
            mixed.append(_requests_input(spec, model, rc, RPM, minutes))
    notes = [s.reason() for s in alerts_mod.all_burn_tiers(spec) if s.skipped or s.adapted]
    name = "every request slower than every threshold: burn-rate, tier, scale-out and baseline alerts fire"
    if notes:
        name += " (" + "; ".join(notes) + ")"
    zero: dict[str, Any] = {
        "name": "zero traffic: series exist and stand still; nothing fires, error ratios and burn rates are 0",
        "interval": "1m", "input_series": idle,
        "alert_rule_test": _silent([*firing, *consistency], end),
    }  # fmt: skip
    exprs = []
    for rc, sli, slo, model in slos:
        if slo.objective is None:
            continue
        labels = _slo_series_labels(spec, model, rc, sli)
        # every window: each ratio's fallback to 0 where nothing was requested (a ratio absent there leaves a
        # dashboard blank and the budget unknown)
        for window in record_windows(spec, schema.record_error_ratio):
            for record in (schema.record_error_ratio(window), schema.record_burn_rate(window)):
                matchers = sorted((k2, "=", v) for k2, v in labels.items())
                exprs.append({"expr": selector(record, matchers), "eval_time": "10m",
                              "exp_samples": [{"labels": selector(record, matchers), "value": 0}]})  # fmt: skip
    # no latency without requests: the quantile records are absent, not NaN (a dashboard shows a gap)
    exprs.append({"expr": selector(schema.RECORD_LATENCY_QUANTILE, [(schema.RULE_LABEL_SERVICE, "=", spec.service)]),
                  "eval_time": "10m", "exp_samples": []})  # fmt: skip
    zero["promql_expr_test"] = exprs
    # healthy: every window's error ratio 0 (not a floor of one bad request), read at the end
    windows = record_windows(spec, schema.record_error_ratio)
    calm = []
    for rc, sli, slo, model in slos:
        if slo.objective is None:
            continue
        matchers = sorted((k2, "=", v) for k2, v in _slo_series_labels(spec, model, rc, sli).items())
        calm += [{"expr": selector(schema.record_error_ratio(w), matchers), "eval_time": _dur(end),
                  "exp_samples": [{"labels": selector(schema.record_error_ratio(w), matchers), "value": 0}]}
                 for w in windows]  # fmt: skip
    neighbours, per_label = _neighbour_series(spec, [(rc, sli, model) for rc, sli, _, model in slos], minutes)
    healthy += neighbours
    calm += _nothing_written_for_neighbours(per_label, end)
    # the request rate is the service's own (the neighbours' requests, of another namespace, model or class, add
    # no label a check above would see: they would add to its value): each class's requests, and those of the
    # other classes its raw selector reads too (a source without a class label); not where a class counts its
    # requests in its SLOs' own histograms (`metric:`), which other classes' selectors may share
    q = queries.Queries(spec)
    counted = {rc.name for rc in spec.classes if not rc.slos or any(slo.metric is None for slo in rc.slos.values())}
    for model, class_name in sorted(requests_seen):
        if len(counted) < len(spec.classes):
            break
        written_labels = {
            tuple(sorted(_requests_input_labels(spec, m, spec.request_class(c)).items())) for m, c in requests_seen
        }  # fmt: skip  (one series where two classes write the same)
        own = sum(_matches(dict(labels), q.raw_matchers(model, class_name)) for labels in written_labels)
        rate = selector(schema.RECORD_REQUEST_RATE, [(schema.RULE_LABEL_CLASS, "=", class_name),
                                                     (schema.RULE_LABEL_MODEL, "=", model),
                                                     (schema.RULE_LABEL_SERVICE, "=", spec.service)])  # fmt: skip
        calm.append({"expr": rate, "eval_time": _dur(end), "exp_samples": [{"labels": rate, "value": own * RPM / 60}]})
    healthy_group: dict[str, Any] = {
        "name": "healthy: every request in the highest bucket under every alerting threshold; error ratios 0; "
        "beside it, neighbours every request of which is slow (another namespace, model or class, another "
        "service's records)",
        "interval": "1m", "input_series": healthy, "alert_rule_test": _silent([*firing, *quiet_consistency], end),
    }  # fmt: skip
    if calm:
        healthy_group["promql_expr_test"] = calm
    groups: list[dict[str, Any]] = [
        {"name": name, "interval": "1m", "input_series": slow,
         "alert_rule_test": _checks(firing, firing, lambda r: values[id(r)])},
        healthy_group,
        zero,
    ]  # fmt: skip
    if consistency:
        groups.append({"name": "inconsistent: 60% of requests fast, 40% slow", "interval": "1m",
                       "input_series": mixed, "alert_rule_test": _checks(consistency, consistency,
                                                                         lambda r: ratios[id(r)])})  # fmt: skip
    return groups


def prom_rate(at: int, per_minute: float, window: int = 300) -> float:
    """`rate(x[5m])` at `at` seconds for a counter sampled every minute from t=0 at `per_minute` per minute, with
    Prometheus 2's extrapolation (inclusive range, extrapolation towards the counter's zero)."""
    times = [t for t in range(0, at + 1, 60) if t >= at - window]
    if len(times) < 2:
        return math.nan
    first, last = times[0], times[-1]
    result = per_minute * (last - first) / 60
    sampled = last - first
    average = sampled / (len(times) - 1)
    to_start: float = first - (at - window)
    to_end: float = at - last
    first_value = per_minute * first / 60
    if result > 0 and first_value >= 0:
        to_start = min(to_start, sampled * (first_value / result))
    threshold = average * 1.1
    interval = sampled + (to_start if to_start < threshold else average / 2)
    interval += to_end if to_end < threshold else average / 2
    return result * (interval / sampled) / window


def _optional(metric: str | None, matchers: Sequence[tuple[str, str, str]], values: str) -> list[dict[str, str]]:
    """One input series of an engine signal, none when the source does not export it (TGI's KV cache)."""
    return [] if metric is None else [{"series": selector(metric, matchers), "values": values}]


def _engine_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Every model's engine at once: full and preempting, healthy, idle."""
    metrics = spec.metrics
    # The page-severity copies (cause: engine) exist only while an SLO page fires; these inputs have none.
    rules = [
        r
        for r in all_rules
        if r.kind in (AlertKind.QUEUE_OVERLOAD, AlertKind.KV_CACHE) and schema.RULE_LABEL_CAUSE not in r.labels
    ]
    if not rules:
        return []
    minutes = _minutes_for(rules)
    end = (minutes - 2) * 60

    def inputs(full: bool, busy: bool) -> list[dict[str, str]]:
        return [s for model in _tested_specs(spec) for s in engine(model, full, busy)]

    def engine(model: Any, full: bool, busy: bool, relabel: Mapping[str, str] | None = None) -> list[dict[str, str]]:
        m = [(k, "=", v) for k, v in {**_raw_labels(spec, model.name, None), **(relabel or {})}.items()]
        running = model.max_num_seqs if full else (max(1, model.max_num_seqs // 2) if busy else 0)
        return [
            *_optional(metrics.requests_waiting, m, f"{5 if full else 0}x{minutes}"),
            {"series": selector(metrics.requests_running, m), "values": f"{running}x{minutes}"},
            *_optional(metrics.kv_cache_usage, m, f"{number(0.99 if full else 0.5 if busy else 0)}x{minutes}"),
            *_optional(metrics.preemptions, m, _series_values(60 if full else 0, minutes)),
            {"series": selector(metrics.generation_tokens, m), "values": _series_values(600 if busy else 0, minutes)},
        ]

    def neighbours(names: Sequence[str]) -> tuple[list[dict[str, str]], dict[str, int]]:
        """Each tested model's engine full and queueing under a neighbour's scope (_neighbour_scopes), one per
        replica name: a rule that reads one of them as one of ours sees a full engine or a queue where ours has
        none (waiting requests beside the full replica, a full engine beside the one with a queue)."""
        out: list[dict[str, str]] = []
        per_label: dict[str, int] = {}
        for model in _tested_specs(spec):
            for relabel in _neighbour_scopes(spec, model.name, None):
                for replica in names:
                    series = engine(model, True, True, {**_replica(spec, replica, model.name), **relabel})
                    out += series
                    for label in relabel:
                        per_label[label] = per_label.get(label, 0) + len(series)
        return out, per_label

    def replicas() -> list[dict[str, str]]:
        out = []
        for model in _tested_specs(spec):
            for replica, running, waiting in (("a", model.max_num_seqs, 0), ("b", max(1, model.max_num_seqs // 2), 5)):
                m = [(k, "=", v) for k, v in _raw_labels(spec, model.name, None, replica).items()]
                out += [
                    *_optional(metrics.requests_waiting, m, f"{waiting}x{minutes}"),
                    {"series": selector(metrics.requests_running, m), "values": f"{running}x{minutes}"},
                ]
        return out

    nearby, nearby_labels = neighbours([REPLICA])
    crowded, crowded_labels = neighbours(["a", "b"])

    def value(rule: AlertRule, at: int) -> tuple[float, dict[str, str]]:
        labels = {
            "service": spec.service,
            "model": rule.model or "",
            **_replica(spec, REPLICA, rule.model),
            "engine": _engine(spec),
        }
        if rule.kind is AlertKind.QUEUE_OVERLOAD:
            return 5.0, labels
        if rule.name == alerts_mod.NAME_KV_FULL:
            return 0.99, labels
        return prom_rate(at, 60), labels

    return [
        {"name": "engines full and queueing" + (", KV cache at 99%, preempting 1/s" if metrics.kv_cache_usage else ""),
         "interval": "1m",
         "input_series": inputs(True, True), "alert_rule_test": _checks(rules, rules, value, timed=True)},
        {"name": "engines healthy: half full, nothing waiting; beside them, neighbours' engines full and queueing "
                 "(another namespace or model)", "interval": "1m",
         "input_series": inputs(False, True) + nearby, "alert_rule_test": _silent(rules, end),
         "promql_expr_test": _nothing_written_for_neighbours(nearby_labels, end)},
        {"name": "two replicas, both engine=\"0\": one full with an empty queue, one half full with requests waiting; "
                 "no queue alert (each replica on its own); beside them, neighbours' replicas of the same names full "
                 "and queueing (another namespace or model)", "interval": "1m",
         "input_series": replicas() + crowded, "alert_rule_test": _silent([r for r in rules
                                                                          if r.name == alerts_mod.NAME_QUEUE], end),
         "promql_expr_test": _nothing_written_for_neighbours(crowded_labels, end)},
        {"name": "engines idle: zero traffic", "interval": "1m",
         "input_series": inputs(False, False), "alert_rule_test": _silent(rules, end)},
    ]  # fmt: skip


def _absent_labels(spec: Spec, model: str) -> dict[str, str]:
    """The absent and exporter-gone alerts name the service and the model (from slokit:max_num_seqs or the SLI
    records), nothing of the raw series they miss."""
    return {schema.RULE_LABEL_SERVICE: spec.service, schema.RULE_LABEL_MODEL: model}


def _presence_series(spec: Spec, model: str) -> str:
    """One replica's series of the kind the absent alert looks for (alerts.absent_series), for `model`."""
    metric, matchers = alerts_mod.absent_series(spec, model)
    labels = {**satisfying_labels(matchers), **_replica(spec, REPLICA, model), "engine": ENGINE}
    return selector(metric, [(k, "=", v) for k, v in labels.items()])


def _absent_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Every served model's latency series missing, present, present at zero traffic. The absent rule asks about
    every model the spec names (slokit:max_num_seqs), so these scenarios hold one `_count` series per model, not
    only the tested models: a model left out would be reported absent."""
    if not any(r.kind is AlertKind.ABSENT for r in all_rules):
        return []
    rules = [i for r in alerts_mod.alert_rules(spec) if r.kind is AlertKind.ABSENT for i in r.instances()]
    if not rules:
        return []
    minutes = _minutes_for(rules)

    def value(rule: AlertRule) -> tuple[float, dict[str, str]]:
        return 1.0, _absent_labels(spec, rule.model or "")

    present = []
    idle = []
    for rule in rules:
        series = _presence_series(spec, rule.model or "")
        present.append({"series": series, "values": _series_values(RPM, minutes)})
        idle.append({"series": series, "values": _series_values(0, minutes)})
    end = minutes * 60 - 120
    return [
        {"name": "no latency metrics for any model", "interval": "1m",
         "input_series": [{"series": 'up{job="elsewhere"}', "values": f"1x{minutes}"}],
         "alert_rule_test": _checks(rules, rules, value)},
        {"name": "latency metrics present for every model", "interval": "1m", "input_series": present,
         "alert_rule_test": _silent(rules, end)},
        {"name": "latency metrics present, zero traffic", "interval": "1m", "input_series": idle,
         "alert_rule_test": _silent(rules, end)},
    ]  # fmt: skip


RESTART_GAP_MINUTES: Final = 7  # a pod restart: no sample for 7 minutes, then every counter from zero


# A replica scraped for GAP_SERVED minutes, then gone for longer than the new-series lookup reaches (TILE_SEEN)
GAP_SERVED: Final = 5


def _long_gap_groups(spec: Spec) -> list[dict[str, Any]]:
    """A replica that comes back under the same labels after more than an hour unseen is a new series: its 5m
    tiles count its requests since the restart from zero, the same as a replica never seen before. (One back
    within the hour loses the requests of its gap instead: the counters tests.)

    Every objective SLO on the source's histograms, its class's first tested model (every term of the tiles): each
    series scraped for GAP_SERVED minutes, then restarted unseen and scraped again from three minutes before an
    evaluation at which its samples before the gap lie a tile past the new-series lookup (it reaches back TILE_SEEN
    from 5m ago at 5m steps, each step seeing 5m back) and within twice it, so a lookup of half or twice the hour
    counts otherwise. Every request is in the lowest bucket (each bucket is the same count, so SLOs of different
    thresholds on one histogram agree); where an SLO counts failures, a tenth as many fail."""
    counted = [(rc, sli, slo) for rc in spec.classes for sli, slo in rc.slos.items()
               if slo.objective is not None and slo.metric is None]  # fmt: skip
    if not counted:
        return []
    tile, seen = int(BASE_WINDOW // 60), int(TILE_SEEN // 60)
    check = math.ceil((GAP_SERVED + seen + 2 * tile) / tile) * tile + tile
    assert check - tile - 2 * seen < GAP_SERVED  # twice the lookup still reaches the samples before the gap
    back, restarted = check - 3, check - 4

    def values(per_minute: int) -> str:
        before = [per_minute * m for m in range(GAP_SERVED + 1)]
        after = [per_minute * (m - restarted) for m in range(back, check + 1)]
        return _gapped([*before, *[None] * (back - GAP_SERVED - 1), *after])

    failing = RPM // 10
    inputs: dict[str, dict[str, str]] = {}
    exprs: list[dict[str, Any]] = []
    for rc, sli, slo in counted:
        assert slo.objective is not None
        model = tested_of(spec, rc)[0]
        hist = spec.histogram(rc, sli)
        write = _le_writer(spec, rc, sli, model)
        for le in ("+Inf", write(hist.le_for(slo.objective.threshold))):
            labels = {**_histogram_labels(spec, model, rc, sli), "le": le}
            series = selector(f"{hist.name}_bucket", [(k, "=", v) for k, v in labels.items()])
            inputs[series] = {"series": series, "values": values(RPM)}
        found = _failure_series(spec, model, rc, sli) if failure_terms(spec, rc, sli, str) else None
        if found is not None:
            series = selector(found[0], [(k, "=", v) for k, v in found[1].items()])
            inputs[series] = {"series": series, "values": values(failing)}
        matchers = sorted((k, "=", v) for k, v in _slo_series_labels(spec, model, rc, sli).items())
        since = check - restarted
        for record, value in ((schema.record_sli_total("5m"), (RPM + (failing if found else 0)) * since),
                              (schema.record_sli_good("5m"), RPM * since)):  # fmt: skip
            exprs.append({"expr": selector(record, matchers), "eval_time": _dur(check * 60),
                          "exp_samples": [{"labels": selector(record, matchers), "value": value}]})  # fmt: skip
    return [{"name": f"replicas gone from minute {GAP_SERVED + 1} to {back - 1}, restarted: unseen for over an "
                     f"hour, they count from zero again at minute {check}", "interval": "1m",
             "input_series": list(inputs.values()), "promql_expr_test": exprs}]  # fmt: skip


def _restart_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Pages stay firing through a restart in the middle of an outage (keep_firing_for), for every SLO at once.

    Every request is slow; once the pages fire, every engine restarts: no sample for 7 minutes, then the
    counters start again from zero. While the data is missing the 5m window reads no events and the page
    condition is false; the page must stay firing with the same value, and still fire after the restart."""
    burn = [r for r in all_rules if r.kind is AlertKind.BURN_RATE]
    pages = [r for r in burn if r.labels.get("severity") == spec.alerting.severity.page]
    if not pages:
        return []
    step = _STEP.get()
    fired = max(fires_at(r) for r in pages)
    gap_from = math.ceil((fired + 120) / step) * step // 60  # the last sample before the crash (minute)
    minutes = gap_from + RESTART_GAP_MINUTES + 30

    def restart(per_minute: float, _: int) -> str:
        before = f"0+{number(per_minute)}x{gap_from}"
        return f"{before} _x{RESTART_GAP_MINUTES} 0+{number(per_minute)}x{minutes - gap_from - RESTART_GAP_MINUTES}"

    inputs: list[dict[str, str]] = []
    values: dict[int, tuple[float, dict[str, str]]] = {}
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            for model in tested_of(spec, rc):
                inputs += _histogram_inputs(spec, model, rc, sli, Scenario({}), minutes, restart)[0]
                for rule in burn:
                    if rule.model == model and rule.request_class == rc.name and rule.sli is sli:
                        labels = _slo_series_labels(spec, model, rc, sli)
                        values[id(rule)] = (1.0 / (1.0 - slo.objective.target_ratio), labels)
    checks = []
    for t in (gap_from * 60 + 300, (gap_from + RESTART_GAP_MINUTES + 3) * 60):
        at = math.ceil(t / step) * step
        expected = [_expected(r, *values[id(r)]) for r in burn if fires_at(r) <= at]
        checks.append({"eval_time": _dur(at), "alertname": alerts_mod.NAME_BURN, "exp_alerts": expected})
    name = (
        f"restart in the middle of an outage: no sample for {RESTART_GAP_MINUTES}m from minute {gap_from}, then "
        "counters from zero; the pages stay firing"
    )
    return [{"name": name, "interval": "1m", "input_series": inputs, "alert_rule_test": checks}]


def _failure_series(spec: Spec, model: str, rc: RequestClass, sli: Sli) -> tuple[str, dict[str, str]] | None:
    """The failure counter one SLO reads and the labels of one replica's series of it (None: it reads none)."""
    slo = rc.slos[sli]
    metrics = spec.metrics
    metric = None if slo.metric is not None else metrics.failed_metric(sli, slo.measured_at)
    if metric is None:
        return None
    labels = _raw_labels(spec, model, rc)
    labels[schema.FAIL_REASON_LABEL] = spec.source.failure_reason_example
    if metric == metrics.frontend_failed:
        labels[schema.FAIL_REASON_LABEL] = schema.FailReason.CLIENT_GONE.value
        labels[schema.FRONTEND_STREAM_LABEL] = "true"
    return metric, labels


def _failure_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Every request fails before its first token (no latency observation, no histogram series at all): the
    failures are the SLIs' total events, the 5m error ratio is 1 and the burn-rate alerts of TTFT and E2E fire."""
    slos = [
        (rc, sli, slo, model)
        for rc in spec.classes
        for sli, slo in rc.slos.items()
        for model in tested_of(spec, rc)
        if slo.objective is not None and failure_terms(spec, rc, sli, str)
    ]
    burn = [r for r in all_rules if r.kind is AlertKind.BURN_RATE]
    firing = [r for r in burn if any(r.model == m and r.request_class == rc.name and r.sli is sli
                                     for rc, sli, _, m in slos)]  # fmt: skip
    if not firing:
        return []
    minutes = max(_minutes_for(firing), 12)  # the 5m checks at 10m read a full window
    inputs: dict[str, dict[str, str]] = {}
    values: dict[int, tuple[float, dict[str, str]]] = {}
    exprs = []
    for rc, sli, slo, model in slos:
        assert slo.objective is not None
        found = _failure_series(spec, model, rc, sli)
        assert found is not None
        metric, labels = found
        series = selector(metric, [(k, "=", v) for k, v in labels.items()])
        inputs[series] = {"series": series, "values": _series_values(RPM, minutes)}
        slo_labels = _slo_series_labels(spec, model, rc, sli)
        for rule in firing:
            if rule.model == model and rule.request_class == rc.name and rule.sli is sli:
                values[id(rule)] = (1.0 / (1.0 - slo.objective.target_ratio), slo_labels)
        matchers = sorted((k, "=", v) for k, v in slo_labels.items())
        for record, value in ((schema.record_sli_total("5m"), 5 * RPM), (schema.record_error_ratio("5m"), 1)):
            exprs.append({"expr": selector(record, matchers), "eval_time": "10m",
                          "exp_samples": [{"labels": selector(record, matchers), "value": value}]})  # fmt: skip
    return [
        {"name": "every request fails before its first token (no latency observed): TTFT and E2E burn-rate alerts "
                 "fire on the failures alone", "interval": "1m", "input_series": list(inputs.values()),
         "alert_rule_test": _checks(burn, firing, lambda r: values[id(r)]), "promql_expr_test": exprs},
    ]  # fmt: skip


def _gone_times(step: int) -> tuple[int, int, int]:
    """(minutes of traffic, a quiet check, a firing check in seconds) of the exporter-gone scenario: the series
    stop after the first, the quiet check is an evaluation between 0.6 and 1 window (ABSENT_FOR) after the last
    sample, the firing check one between 1 and 1.25 windows after it, neither within 30s of either edge (where
    Prometheus 2 and 3 differ). A window halved or cut by a quarter fires at the first; one a quarter longer or
    doubled stays quiet at the second."""
    window, margin = alerts_mod.ABSENT_FOR, 30.0
    for served_for in range(30, 30 + 2 * step // 60 + 2):
        last = served_for * 60.0
        quiet = [t for t in range(0, int(last + 2 * window), step) if last + 0.6 * window + margin <= t
                 <= last + window - margin]  # fmt: skip
        firing = [t for t in range(0, int(last + 2 * window), step) if last + window + margin <= t
                  <= last + 1.25 * window - margin]  # fmt: skip
        if quiet and firing:
            return served_for, quiet[-1], firing[0]
    raise AssertionError(f"no exporter-gone check times at a {step}s step")


def _exporter_gone_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Exporter gone: a model that served traffic loses every series and pages; one that never had traffic not."""
    rules = [r for r in all_rules if r.kind is AlertKind.EXPORTER_GONE]
    if not rules:
        return []
    served_for, quiet_at, at = _gone_times(_STEP.get())
    # the last 5m tile with traffic is the last evaluation before served_for + 5m; the page holds while that is
    # within SERVED_WITHIN, and is checked resolved a tile after it is not (an hour doubled still pages there)
    within = int(alerts_mod.SERVED_WITHIN // 60)
    over = math.ceil((served_for + 2 * BASE_WINDOW // 60 + within) * 60 / _STEP.get()) * _STEP.get()
    missing_for = max(50, over // 60 - served_for + 1)
    minutes = served_for + missing_for

    def vanish(per_minute: float, _: int) -> str:
        return f"0+{number(per_minute)}x{served_for} _x{missing_for}"

    served: list[dict[str, str]] = []
    idle: list[dict[str, str]] = []
    done: set[str] = set()
    for rc in spec.classes:
        for slo in rc.slos.values():
            if slo.objective is None:
                continue
            for model in tested_of(spec, rc):
                if model in done:
                    continue
                done.add(model)
                _, first = alerts_mod.absent_metric(spec, model)
                rc_first = next(c for c in spec.classes if model in c.models and first in c.slos)
                served += _histogram_inputs(spec, model, rc_first, first, Scenario({}), minutes, vanish)[0]
                idle += _histogram_inputs(spec, model, rc_first, first, None, minutes, vanish)[0]

    def value(rule: AlertRule) -> tuple[float, dict[str, str]]:
        return 1.0, _absent_labels(spec, rule.model or "")

    firing = [{"eval_time": _dur(at), "alertname": alerts_mod.NAME_EXPORTER_GONE,
               "exp_alerts": [_expected(r, *value(r)) for r in rules]}]  # fmt: skip
    still = [{"eval_time": _dur(quiet_at), "alertname": alerts_mod.NAME_EXPORTER_GONE}]
    # 45m after the last sample the model still served traffic within the last hour: still paging
    later = math.floor((served_for + 45) * 60 / _STEP.get()) * _STEP.get()
    firing.append({**firing[0], "eval_time": _dur(later)})
    still.append({"eval_time": _dur(over), "alertname": alerts_mod.NAME_EXPORTER_GONE})
    return [
        {"name": f"exporters gone: every series stops after {served_for}m of traffic; the model pages until its "
                 f"last traffic is {format_duration(alerts_mod.SERVED_WITHIN)} old",
         "interval": "1m", "input_series": served, "alert_rule_test": still + firing},
        {"name": "exporters gone from a model that never had traffic: no page", "interval": "1m",
         "input_series": idle, "alert_rule_test": _silent(rules, at)},
    ]  # fmt: skip


LONG_HOURS: Final = 26  # past a day, so the 1d window's oldest tile holds data and longer windows all of it


def _long_window_groups(
    spec: Spec, all_rules: Sequence[AlertRule], apart_from: Sequence[SloKey] = ()
) -> list[dict[str, Any]]:  # fmt: skip
    """Every window filled past its newest tile: 26 hours of one SLO's requests, each hour at its own rate and
    share of slow requests, so every tile of every window holds different counts; at the end each window's total
    and good events equal what the raw counters add up to over it (the whole history for windows longer than it).
    A tile read at the wrong offset, or one dropped, counts another hour. One SLO stands for all: the tiles are
    one rule per window for every SLO. Specs whose tests step every minute (the demo's) leave it out: 26 hours of
    minutes would take long, and their windows are the same rules.

    Where it can, it takes an SLO of a class none of `apart_from` (another long scenario's SLOs) has, whose
    series no selector of theirs reads and whose selector reads none of theirs: the two then run side by side
    (`side_by_side`); the group is marked with whether it could (`_APART`)."""
    del all_rules
    step = _STEP.get()
    slos = [(rc, sli) for rc in spec.classes for sli, slo in rc.slos.items()
            if slo.objective is not None and slo.metric is None and tested_of(spec, rc)]  # fmt: skip
    if step < COARSE_STEP or not slos:
        return []
    apart = [(rc, sli) for rc, sli in slos if _apart(spec, (rc, sli, tested_of(spec, rc)[0]), apart_from)]
    rc, sli = (apart or slos)[0]
    objective = rc.slos[sli].objective
    assert objective is not None
    model = tested_of(spec, rc)[0]
    bounds = spec.histogram_buckets(rc, sli)
    within = [i for i, b in enumerate(bounds) if b <= objective.threshold * (1 + 1e-9)]
    good = within[-1] if within else 0
    segments: list[Segment] = []
    for hour in range(LONG_HOURS):
        slow = ((hour * 7) % 10) / 20  # 0 to 45% slow, a different share in every hour of a 10-hour cycle
        rpm = 20.0 * (hour % 3 + 1) + 20.0 * (hour % 5 == 0)  # multiples of 20: whole requests in every bucket
        segments.append((60, {good: 1 - slow}, rpm))
    line = _Timeline(bounds, segments)
    end = LONG_HOURS * 60

    def events(minute: int, upto: int | None) -> float:
        row = line.cum[max(0, min(minute, line.minutes))]
        return sum(row if upto is None else row[: upto + 1])

    labels = sorted((k, "=", v) for k, v in _slo_series_labels(spec, model, rc, sli).items())
    tests = []
    for window in record_windows(spec, schema.record_sli_total):
        start = max(0, end - int(parse_duration(window) // 60))
        for record, upto in ((schema.record_sli_total(window), None), (schema.record_sli_good(window), good)):
            value = round(events(end, upto) - events(start, upto), 6)
            tests.append({"expr": selector(record, labels), "eval_time": _dur(end * 60),
                          "exp_samples": [{"labels": selector(record, labels), "value": value}]})  # fmt: skip
    inputs = line.series(spec.histogram(rc, sli).name, _histogram_labels(spec, model, rc, sli),
                         _le_writer(spec, rc, sli, model))  # fmt: skip
    name = (f"long windows filled: {LONG_HOURS}h of {rc.name} {sli.value} on {model}, each hour at its own rate and "
            "share of slow requests; every window's events equal the raw counts at the end")  # fmt: skip
    group = {"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": tests}
    return [{**group, _APART: bool(apart_from) and bool(apart)}]


_APART: Final = "__apart__"  # a scenario key side_by_side reads and removes: written apart from the other's SLOs


def _apart(spec: Spec, key: SloKey, others: Sequence[SloKey]) -> bool:
    """Whether an SLO shares no class with `others` and no histogram selector of either reads the other's series."""
    if any(key[0].name == other[0].name for other in others):
        return False
    readers = _readers(spec, [key, *others])  # position 0 is `key`
    return not readers[0] and not any(key in read for position, read in readers.items() if position)


def side_by_side(
    first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """Two one-scenario lists as one scenario where `second` was written apart from `first`'s SLOs (`_APART`):
    promtool evaluates every rule at every step of a scenario, so two long scenarios that cannot see each other's
    series cost the steps of the longer one only. Their checks select their own SLOs' series and alerts by every
    label, so each sees what it saw alone. Returns (`first`, or the two as one; what is left of `second`)."""
    apart = [group.pop(_APART, False) for group in second]
    if apart == [True] and len(first) == 1 and first[0]["interval"] == second[0]["interval"]:
        one, other = first[0], second[0]
        together = {
            "name": f"{one['name']}; beside it, {other['name']}",
            "interval": one["interval"],
            "input_series": [*one["input_series"], *other["input_series"]],
            "promql_expr_test": [*one.get("promql_expr_test", []), *other.get("promql_expr_test", [])],
        }
        return [together], []
    return first, second


def _parameter_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """The parameter series the alerts join with hold the numbers the alerts carry as values (each member's burn
    factor, consistency limit, objective and max_num_seqs): a renderer that writes another number fails here."""
    samples: dict[str, float] = {}
    facts = {labels[schema.RULE_LABEL_MODEL]: labels for labels, _ in model_facts(spec)}
    for r in all_rules:
        labels = {schema.RULE_LABEL_SERVICE: spec.service, **r.series_labels()}
        model = labels.pop(schema.RULE_LABEL_MODEL, "")
        if r.kind is AlertKind.BURN_RATE:
            factor = {**labels, schema.RULE_LABEL_LONG: r.labels[schema.RULE_LABEL_LONG],
                      schema.RULE_LABEL_SHORT: r.labels[schema.RULE_LABEL_SHORT],
                      schema.ALERT_LABEL_SEVERITY: r.labels[schema.ALERT_LABEL_SEVERITY]}  # fmt: skip
            samples[selector(schema.RECORD_BURN_THRESHOLD, sorted((k, "=", v) for k, v in factor.items()))] = r.params[
                "factor"
            ]
            objective = sorted((k, "=", v) for k, v in labels.items())
            samples[selector(schema.RECORD_OBJECTIVE, objective)] = r.params["objective"]
        elif r.kind is AlertKind.CONSISTENCY:
            limit = sorted((k, "=", v) for k, v in labels.items())
            samples[selector(schema.RECORD_CONSISTENCY_LIMIT, limit)] = r.params["limit"]
        elif r.kind is AlertKind.QUEUE_OVERLOAD and schema.RULE_LABEL_CAUSE not in r.labels:
            seqs = sorted((k, "=", v) for k, v in facts[model].items())
            samples[selector(schema.RECORD_MAX_NUM_SEQS, seqs)] = r.params["max_num_seqs"]
    if not samples:
        return []
    tests = [{"expr": series, "eval_time": "1m", "exp_samples": [{"labels": series, "value": value}]}
             for series, value in sorted(samples.items())]  # fmt: skip
    name = "parameters: the series the alerts join with hold each alert's own values"
    inputs = [{"series": 'up{job="elsewhere"}', "values": "1x2"}]
    return [{"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": tests}]


TIMED_FOR_S: Final = 300  # alerts whose `for` is this long or shorter get the fine-step timing check


def timing_groups(spec: Spec, step: int) -> list[dict[str, Any]]:
    """Every request slow, evaluated every `step` seconds (the counters file's 30s, the short group's interval):
    each burn-rate, tier and scale-out alert whose `for` is at most 5m is pending one step before `for` has passed
    and fires at it; and every engine full and queueing, the same for the engine warnings. The main file steps
    every 5m, where a 5m `for` and a 2m30s one fire at the same evaluation."""
    token = _STEP.set(step)
    try:
        instances = [r for r in alerts_mod.alert_instances(spec, tested_models(spec)) if _for_seconds(r) <= TIMED_FOR_S]
        timed = [r for r in instances if r.kind in (AlertKind.BURN_RATE, AlertKind.TIER, AlertKind.SCALE_OUT)]
        slow = _slo_groups(spec, timed)[:1] if timed else []
        full = _engine_groups(spec, instances)[:1]
    finally:
        _STEP.reset(token)
    for group in slow:
        group["name"] = (
            f"alert timing every {step}s: every request slow; each alert with a `for` of at most "
            f"{prom_duration(TIMED_FOR_S)} is pending one evaluation before `for` has passed and fires at it"
        )
    for group in full:
        group["name"] = f"alert timing every {step}s: {group['name']}; each engine warning pending, then firing"
    return [*slow, *full]


def _eval_seconds(group: Mapping[str, Any]) -> int:
    """The latest evaluation a scenario checks, in seconds."""
    checks = [*group.get("alert_rule_test", []), *group.get("promql_expr_test", [])]
    return max((int(parse_duration(c["eval_time"])) for c in checks), default=0)


def rest_of_fleet(spec: Spec) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Scenarios with the rest of the fleet present: every served model the tests write no series for gets its
    `_count` series (the absent alert's), standing still, for as long as the scenario is evaluated.

    The scenarios write series for the tested models only. Without these, the absent alert would hold a pending,
    then firing, alert for every other model of the fleet at every evaluation of every scenario, and promtool
    expands each one's annotations at each step: the one cost of the tests that grew with the number of models
    (a third of the time on a 100-model spec). The absent and exporter-gone scenarios, which are about presence,
    are left as they are."""
    tested = set(tested_models(spec))
    series = [_presence_series(spec, model) for model in alerts_mod.served_models(spec) if model not in tested]

    def add(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not series:
            return groups
        for group in groups:
            values = _series_values(0, _eval_seconds(group) // int(parse_duration(group["interval"])) + 1)
            written = {s["series"] for s in group["input_series"]}
            group["input_series"] += [{"series": s, "values": values} for s in series if s not in written]
        return groups

    return add


def unit_tests(spec: Spec) -> dict[str, Any]:
    """The promtool test file for one spec's rule file (which sits beside it in rules/)."""
    all_rules = alerts_mod.alert_instances(spec, tested_models(spec))
    shortest = min((_for_seconds(r) for r in all_rules if _for_seconds(r) > 0), default=COARSE_STEP)
    step = COARSE_STEP if shortest >= FINE_STEP else FINE_STEP
    token = _STEP.set(step)
    try:
        rest = rest_of_fleet(spec)
        # The two longest scenarios run as one where the long windows can take an SLO the baseline does not write.
        long_windows = _long_window_groups(spec, all_rules, _baseline_slos(spec, all_rules))
        baseline, long_windows = side_by_side(_baseline_groups(spec, all_rules), long_windows)
        tests = [
            *rest(_slo_groups(spec, all_rules)), *rest(_boundary_groups(spec, all_rules)),
            *rest(baseline), *rest(_restart_groups(spec, all_rules)), *rest(_long_gap_groups(spec)),
            *rest(_engine_groups(spec, all_rules)), *rest(_engine_boundary_groups(spec, all_rules)),
            *rest(_queue_window_groups(spec)),
            *rest(_consistency_groups(spec, all_rules)),
            *_absent_groups(spec, all_rules), *_exporter_gone_groups(spec, all_rules),
            *rest(_failure_groups(spec, all_rules)), *_parameter_groups(spec, all_rules), *rest(long_windows),
        ]  # fmt: skip
    finally:
        _STEP.reset(token)
    return {
        "rule_files": [rules_path(spec).removeprefix("rules/")],
        "evaluation_interval": f"{step}s",
        # Groups in file order, as dependencies run (promtool's default order is by name).
        "group_eval_order": [g.name for g in rule_groups(spec)],
        "tests": tests,
    }


def files(spec: Spec) -> dict[str, Any]:
    """`rules/<service>.rules.test.yaml`."""
    return {f"rules/{spec.service}.rules.test.yaml": unit_tests(spec)}


__all__ = [
    "expand", "files", "fires_at", "humanize_duration", "record_windows", "rest_of_fleet", "unit_tests",
]  # fmt: skip


# ==============================================================================================================
# Boundary scenarios: inputs just under and just over every threshold and bucket boundary, checked against a
# model of the rules (window ratios from raw counters, `for`, `keep_firing_for`) where the model is clear of the
# threshold by MARGIN at every evaluation that decides the state.
# ==============================================================================================================
UNEVEN_SPAN: Final = 1.5  # an uneven profile lasts this many times its last span (short window and margin)
NEAR: Final = 0.1  # inputs sit 10% (relative) under or over a threshold
MARGIN: Final = 0.03  # a check is written only where every deciding ratio is 3% clear of its threshold
LIMIT_NEAR: Final = 0.25  # bound pairs for the consistency limit: within 25% of it
# Bucket shares of the consistency scenario's overflow segment, the rest (40%) past the largest bound: p50 is in
# the third bucket, or in the first if the finite buckets alone were counted (0.35 / 0.6 = 0.58)
OVERFLOW_SHARES: Final = ((0, 0.35), (2, 0.25))
SEGMENT_MINUTES: Final = 30  # each under/over segment of a 5m-window rule


@dataclass(frozen=True)
class _Condition:
    """One window comparison of an alert: share of requests in `buckets` over `window` minutes `op` threshold."""

    window: int  # minutes
    above: float | None  # share of requests slower than this bound (None: faster than or at `at_most`)
    at_most: float | None
    op: str  # ">" or "<"
    threshold: float


@dataclass(frozen=True)
class _Model:
    rule: AlertRule
    conditions: tuple[_Condition, ...]
    guard: int  # requests in the last 5m needed (0: none)


def _models(spec: Spec, rules: Sequence[AlertRule]) -> list[_Model]:
    """Each rule instance's condition as windows, bounds and thresholds, from the values the alert carries (its
    condition and its member's parameters), never from its PromQL."""
    out = []
    for r in rules:
        if r.request_class is None or r.sli is None:
            continue
        rc = next(c for c in spec.classes if c.name == r.request_class)
        hist = spec.histogram(rc, r.sli)
        if r.kind is AlertKind.BURN_RATE:
            bound = hist.le_for(r.params["threshold"])
            windows = [int(float(r.condition[k]) // 60) for k in ("long", "short")]
            conds = tuple(_Condition(w, bound, None, ">", r.params["error_ratio"]) for w in windows)
            out.append(_Model(r, conds, int(r.condition.get("min_requests", 0))))
        elif r.kind is AlertKind.TIER:
            le = hist.le_for(r.params["seconds"])
            cond = _Condition(int(float(r.condition["window"]) // 60), None, le, "<", r.params["quantile"])
            out.append(_Model(r, (cond,), int(r.condition["min_requests"])))
        elif r.kind is AlertKind.SCALE_OUT:
            bound = hist.le_for(r.params["boundary"])
            cond = _Condition(5, bound, None, ">", r.params["allowed"])
            out.append(_Model(r, (cond,), spec.alerting.min_requests))
    return out


Segment = tuple[int, Mapping[int, float], float]  # minutes, finite bucket index -> share (rest slow), requests/min


class _Timeline:
    """Cumulative per-bucket counts of one SLO's requests, minute by minute."""

    def __init__(self, bounds: Sequence[float], segments: Sequence[Segment]) -> None:
        self.bounds = list(bounds)
        self.segments = list(segments)
        per: list[list[float]] = []
        for minutes, shares, rpm in segments:
            row = [rpm * shares.get(i, 0.0) for i in range(len(bounds))]
            row.append(rpm - sum(row))
            per += [row] * minutes
        self.cum = [[0.0] * (len(bounds) + 1)]
        for row in per:
            self.cum.append([a + b for a, b in zip(self.cum[-1], row, strict=True)])

    @property
    def minutes(self) -> int:
        return len(self.cum) - 1

    def _count(self, minute: int, cond: _Condition | None) -> float:
        row = self.cum[min(minute, self.minutes)]
        if cond is None:
            return sum(row)
        if cond.above is not None:
            return sum(c for c, b in zip(row, [*self.bounds, math.inf], strict=True) if b > cond.above + 1e-12)
        assert cond.at_most is not None
        return sum(c for c, b in zip(row, [*self.bounds, math.inf], strict=True) if b <= cond.at_most + 1e-12)

    def share(self, minute: int, cond: _Condition) -> float | None:
        start = max(0, minute - cond.window)
        total = self._count(minute, None) - self._count(start, None)
        if total <= 0:
            return None
        return (self._count(minute, cond) - self._count(start, cond)) / total

    def requests(self, minute: int, window: int = 5) -> float:
        return self._count(minute, None) - self._count(max(0, minute - window), None)

    def counts(self, start: int, end: int) -> list[float]:
        """Requests per bucket (+Inf last, not cumulative) between the samples at minutes `start` and `end`."""
        return [b - a for a, b in zip(self.cum[max(0, start)], self.cum[min(end, self.minutes)], strict=True)]

    def quantile(self, q: float, start: int, end: int) -> float | None:
        """histogram_quantile(q) of the requests between two samples; None without requests."""
        return histogram_quantile(q, self.bounds, list(itertools.accumulate(self.counts(start, end))))

    def series(
        self, name: str, base: Mapping[str, str], le_text: Callable[[float], str],
        spelled_at: Callable[[float, int], str] | None = None,
    ) -> list[dict[str, str]]:  # fmt: skip
        """The bucket and count series. `spelled_at(bound, minute)`, where given, is each bound's `le` at each
        sample: a bound whose spelling changes is one series per spelling, each without samples where the other
        is written (an exporter replaced by one that spells bounds the other way)."""
        out = []
        for i, bound in enumerate([*self.bounds, math.inf]):
            counts = [sum(self.cum[m][: i + 1]) for m in range(self.minutes + 1)]
            if math.isinf(bound) or spelled_at is None:
                texts = ["+Inf" if math.isinf(bound) else le_text(bound)] * len(counts)
            else:
                texts = [spelled_at(bound, m) for m in range(len(counts))]
            for le in dict.fromkeys(texts):
                values = _gapped([c if text == le else None for c, text in zip(counts, texts, strict=True)])
                labels = [(k, "=", v) for k, v in {**base, "le": le}.items()]
                out.append({"series": selector(f"{name}_bucket", labels), "values": values})
        out.append({"series": selector(f"{name}_count", [(k, "=", v) for k, v in base.items()]),
                    "values": _piecewise([sum(row) for row in self.cum])})  # fmt: skip
        return out


def _le_text(spec: Spec, rc: RequestClass, sli: Sli, seconds: float) -> str:
    """client_python's spelling of a bound (`1.0`)."""
    return le_spellings(spec.histogram(rc, sli).le_for(seconds))[0]


def _le_writer(spec: Spec, rc: RequestClass, sli: Sli, model: str) -> Callable[[float], str]:
    """The `le` label text of a bound of one class's SLI histogram as `model`'s exporter writes it: client_python's
    `1.0` for the first tested model of the class, Go's `1` (where the bound is an integer) for the second, so that
    a rule reading one spelling only, or a bucket-boundary series of one spelling lost, fails on the other model.
    (The consistency scenario changes spelling from segment to segment instead: `_consistency_groups`.)"""
    hist = spec.histogram(rc, sli)
    go = tested_of(spec, rc)[1:2] == [model]

    def write(bound: float) -> str:
        spellings = le_spellings(hist.le_for(bound))
        return spellings[-1] if go else spellings[0]

    return write


def _gapped(values: Sequence[float | None]) -> str:
    """promtool values with `_` where a value is None (no sample); a counter's drop (a restart) starts a new run."""
    parts: list[str] = []
    run: list[float] = []
    for value in [*values, None]:
        if value is not None:
            if run and value < run[-1]:
                parts.append(_piecewise(run))
                run = []
            run.append(value)
            continue
        if run:
            parts.append(_piecewise(run))
            run = []
        parts.append("_")
    return " ".join(parts[:-1])


def _piecewise(values: Sequence[float]) -> str:
    """promtool expanding notation for a series of values, one run per constant increment."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        step = values[i + 1] - values[i] if i + 1 < len(values) else 0.0
        while j + 1 < len(values) and abs((values[j + 1] - values[j]) - step) < 1e-9:
            j += 1
        parts.append(f"{number(round(values[i], 6))}+{number(round(step, 6))}x{j - i}")
        i = j + 1
    return " ".join(parts)


def _predict(model: _Model, line: _Timeline, step: int) -> list[tuple[int, bool, bool]]:
    """(time s, firing, decided) at every evaluation: the rules' state as the model computes it, and whether that
    state is the same whichever way each undecided evaluation went.

    An evaluation's condition is undecided in the first 10 minutes and wherever a deciding ratio (or the request
    count of the guard) is within MARGIN of its threshold; the model follows both outcomes of each such evaluation
    (the set of possible `for`/`keep_firing_for` states), so a check is written wherever every path agrees: e.g.
    still firing `keep_firing_for` minus a step after the last evaluation that could be true, resolved from the
    first at or after `keep_firing_for` past the first one that is surely false."""
    evaluations = []
    for t in range(0, line.minutes * 60 + 1, step):
        minute = t // 60
        decided = minute >= 10
        cond = True
        for c in model.conditions:
            s = line.share(minute, c)
            if s is None:
                cond = False
                continue
            if abs(s - c.threshold) <= MARGIN * c.threshold:
                decided = False
            cond = cond and (s > c.threshold if c.op == ">" else s < c.threshold)
        if model.guard:
            n = line.requests(minute)
            if abs(n - model.guard) <= 0.05 * model.guard:
                decided = False
            cond = cond and n >= model.guard
        evaluations.append((t, cond, decided))
    return _follow(model.rule, evaluations)


def _follow(rule: AlertRule, evaluations: Iterable[tuple[int, bool, bool]]) -> list[tuple[int, bool, bool]]:
    """(time s, firing, decided) of `rule` from each evaluation's (time s, condition, decided): every path the
    undecided evaluations allow through `for` and `keep_firing_for`, and whether they all agree."""
    hold = _for_seconds(rule)
    keep = _keep_seconds(rule)
    out = []
    # (pending since, firing, false since) of every path the undecided evaluations allow
    states: set[tuple[int | None, bool, int | None]] = {(None, False, None)}

    def advance(state: tuple[int | None, bool, int | None], t: int, cond: bool) -> tuple[int | None, bool, int | None]:
        since, firing, false_since = state
        if cond:
            since = t if since is None else since
            return since, firing or t - since >= hold, None
        if not firing:
            return None, False, None
        false_since = t if false_since is None else false_since
        if t - false_since >= keep:
            return None, False, None
        return None, True, false_since

    for t, cond, decided in evaluations:
        outcomes = (cond,) if decided else (True, False)
        states = {advance(state, t, o) for state in states for o in outcomes}
        firing = {f for _, f, _ in states}
        out.append((t, True in firing, len(firing) == 1))
    return out


def _checks_of(
    rule: AlertRule, predicted: Sequence[tuple[int, bool, bool]], also: Iterable[int] = ()
) -> list[dict[str, Any]]:
    """Checks of `rule` through ALERTS at the last decided evaluation, around every change of the decided state
    (the last evaluation before it and the first after) and at the times in `also` where the state is decided."""
    decided = [(t, f) for t, f, ok in predicted if ok and t > 0]
    by_time = dict(decided)
    times = {decided[-1][0]} if decided else set()
    for (t0, f0), (t1, f1) in itertools.pairwise(decided):
        if f0 != f1:
            times |= {t0, t1}
    times |= {t for t in also if t in by_time}
    return [_alert_check(rule, t, by_time[t]) for t in sorted(times)]


def _alert_count(rule: AlertRule) -> str:
    labels = {"alertname": rule.name, "alertstate": "firing", **rule.labels}
    return f"count({selector('ALERTS', [(k, '=', v) for k, v in sorted(labels.items())])})"


def _alert_check(rule: AlertRule, seconds: int, firing: bool) -> dict[str, Any]:
    """A promtool check that `rule` is firing (or not) `seconds` into the test."""
    return {"expr": _alert_count(rule), "eval_time": _dur(seconds),
            "exp_samples": [{"labels": "{}", "value": 1}] if firing else []}  # fmt: skip


def _state_checks(models: Sequence[_Model], lines: Mapping[tuple[str, str, Sli], _Timeline]) -> list[dict[str, Any]]:
    step = _STEP.get()
    tests = []
    for model in models:
        r = model.rule
        line = lines.get((r.model or "", r.request_class or "", r.sli or Sli.TTFT))
        if line is None:
            continue
        tests += _checks_of(r, _predict(model, line, step))
    return tests


def _bucket_index(bounds: Sequence[float], bound: float) -> int:
    return min(range(len(bounds)), key=lambda i: abs(bounds[i] - bound))


def _split(bounds: Sequence[float], bound: float, slow: float) -> dict[int, float]:
    """Requests in the bucket that ends at `bound` and, a share `slow` of them, half in the next bucket and half
    slower than every bucket (+Inf), so that moving either `le` bound changes the share."""
    i = _bucket_index(bounds, bound)
    shares = {i: 1.0 - slow}
    if i + 1 < len(bounds):
        shares[i + 1] = slow / 2
    return shares


def _boundary_segments(spec: Spec, model: _Model, bounds: Sequence[float], minutes: int) -> list[list[Segment]]:
    """Under, then over (two profiles when the rule reads a long window; one under-then-over timeline otherwise)."""
    c = model.conditions[0]
    out: list[list[Segment]] = []
    for near in (1 - NEAR, 1 + NEAR):
        target = c.threshold * near
        if c.op == ">":  # share slower than `above`
            if target >= 1:
                continue
            out.append([(minutes, _split(bounds, c.above or 0.0, target), RPM)])
        else:  # share at or under `at_most`: under the threshold fires
            # over a threshold near 1 (a p95 tier): 3/4 of the way to 1, MARGIN clear of it for thresholds to 0.96
            good = min(target, c.threshold + (1 - c.threshold) * 0.75) if near > 1 else target
            out.append([(minutes, _split(bounds, c.at_most or 0.0, 1 - good), RPM)])
    return out


def _uneven_profiles(model: _Model, bounds: Sequence[float], minutes: int) -> dict[str, list[Segment]]:
    """A long/short pair's two one-sided cases, each with its bad requests unevenly spread in time so that a
    window reading the wrong span (a tile at the wrong offset, a range cut short) reads another share.

    "long under": no slow requests, then the last short window and a margin (5m at most) slow at the share that
    puts the long window NEAR under the threshold at the end (the short window far over it). "short under": slow
    at the share that puts the long window NEAR over at the end, then that last span NEAR under (it fires first,
    then resolves as the short window clears). Empty when the pair's shape (two `>` windows, long over short) or a
    share over 1 does not allow them."""
    if len(model.conditions) != 2 or any(c.op != ">" for c in model.conditions):
        return {}
    long, short = model.conditions
    if long.window <= short.window or long.threshold != short.threshold or long.above is None:
        return {}
    thr = long.threshold
    # the short window's span and a margin for the lookups of its tiles (half the gap to the long window at most)
    recent = short.window + min(int(BASE_WINDOW // 60), (long.window - short.window) // 2)
    if recent <= short.window:
        return {}
    total = max(minutes, math.ceil(recent * UNEVEN_SPAN))
    seen = min(long.window, total)  # what the long window reads at the end
    far_over = (1 - NEAR) * thr * seen / recent
    old_over = ((1 + NEAR) * seen - (1 - NEAR) * recent) * thr / (seen - recent)
    if max(far_over, old_over) >= 1:
        return {}
    return {
        "long under": [(total - recent, _split(bounds, long.above, 0.0), RPM),
                       (recent, _split(bounds, long.above, far_over), RPM)],
        "short under": [(total - recent, _split(bounds, long.above, old_over), RPM),
                        (recent, _split(bounds, long.above, (1 - NEAR) * thr), RPM)],
    }  # fmt: skip


def _profiles_for_slo(spec: Spec, models: Sequence[_Model], bounds: Sequence[float]) -> dict[str, list[Segment]]:
    """Named timelines of one SLO: one per burn-rate tier side, one chaining every 5m-window rule's sides, and
    the traffic guard just under and just over min_requests with every request slow."""
    profiles: dict[str, list[Segment]] = {}
    short_chain: list[Segment] = []
    for model in models:
        if all(c.window <= 5 for c in model.conditions):
            for segs in _boundary_segments(spec, model, bounds, SEGMENT_MINUTES):
                short_chain += segs
            continue
        minutes = math.ceil((fires_at(model.rule) + 3 * _STEP.get()) / 60)
        pair = f"{model.rule.labels.get('long', '')}/{model.rule.labels.get('short', '')}"
        uneven = _uneven_profiles(model, bounds, minutes)
        for side, segs in zip(("under", "over"), _boundary_segments(spec, model, bounds, minutes), strict=False):
            if side == "under" and uneven:
                continue  # each window just under while the other is over tells more than both under
            profiles[f"{pair} {side}"] = segs
        for side, segs in uneven.items():
            profiles[f"{pair} {side}"] = segs
    if short_chain:
        profiles["5m windows"] = short_chain
    guard = spec.alerting.min_requests
    for side, near in (("under", 1 - NEAR * 2), ("over", 1 + NEAR * 2)):
        profiles[f"min_requests {side}"] = [(40, {}, guard * near / 5)]
    return profiles


def _boundary_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Groups of every SLO at once, each on its own timeline: a burn-rate tier's error share 10% under or over
    factor x budget; the 5m-window rules (tiers, scale-out) under then over, one after the other; traffic just
    under and over min_requests. Alerts are checked through ALERTS where the model of the rules is clear."""
    models = _models(spec, [r for r in all_rules if r.kind in (AlertKind.BURN_RATE, AlertKind.TIER,
                                                               AlertKind.SCALE_OUT)])  # fmt: skip
    # SLOs on histograms of the spec's own (`metric:`) keep the scenarios above only: the boundary model assumes the
    # source's own series and labels.
    slos = [(rc, sli, m) for rc in spec.classes for sli, slo in rc.slos.items() if slo.metric is None
            for m in tested_of(spec, rc)]  # fmt: skip
    per_slo: dict[tuple[str, str, Sli], dict[str, list[Segment]]] = {}
    for rc, sli, model in slos:
        mine = [x for x in models if x.rule.model == model and x.rule.request_class == rc.name and x.rule.sli is sli]
        per_slo[(model, rc.name, sli)] = _profiles_for_slo(spec, mine, spec.histogram_buckets(rc, sli))
    names = sorted({n for p in per_slo.values() for n in p}, key=lambda n: (n.startswith("min"), n))
    families: dict[str, list[str]] = {}
    for name in names:  # "3d/6h long under", "3d/6h over", ...: one family per window pair (or guard)
        families.setdefault(name.split(" ", 1)[0], []).append(name)
    groups = []
    for family, profiles in families.items():
        having = [(rc, sli, m) for rc, sli, m in slos if any(n in per_slo[(m, rc.name, sli)] for n in profiles)]
        longest = max(sum(s[0] for s in p[n]) for p in per_slo.values() for n in profiles if n in p)
        keys = representative(having) if longest > LONG_SCENARIO_MINUTES else having
        for chosen in _profile_rounds(keys, profiles, per_slo):
            group = _boundary_group(spec, models, family, chosen, per_slo)
            if group is not None:
                groups.append(group)
    return groups


def _profile_rounds(
    keys: Sequence[SloKey], profiles: Sequence[str], per_slo: Mapping[tuple[str, str, Sli], Mapping[str, Any]]
) -> list[list[tuple[SloKey, str]]]:
    """The scenarios of one family of profiles (a window pair's "long under", "over" and "short under"): its
    profiles run side by side on different SLOs instead of one scenario each.

    Each class and SLI sees the "over" profile (a factor or bucket raised fails it) and one of the others (a factor
    lowered fails those): with two tested models, one takes each in one scenario; with one, a second scenario
    gives it the other. The other profiles rotate over the classes, and more scenarios follow only until every
    profile has run somewhere. The rules are written once for the fleet and every scenario still holds two models
    and two classes, so a term that mixes SLOs mixes different profiles and fails; each scenario costs its length in
    evaluations of every rule, which is most of the tests' time."""
    by_slo: dict[tuple[str, Sli], list[SloKey]] = {}
    for key in keys:
        by_slo.setdefault((key[0].name, key[1]), []).append(key)
    orders = []
    for g, members in enumerate(by_slo.values()):
        rc, sli, model = members[0]
        options = [n for n in profiles if n in per_slo[(model, rc.name, sli)]]
        over = [n for n in options if n.endswith(" over")][:1]
        rest = [n for n in options if n not in over]
        orders.append((members, over + (rest[g % len(rest) :] + rest[: g % len(rest)] if rest else [])))
    rounds: list[list[tuple[SloKey, str]]] = []
    covered: set[str] = set()
    for turn in range(max((len(order) for _, order in orders), default=0)):
        wanted = any(turn * len(members) < min(2, len(order)) for members, order in orders)
        if not wanted and covered >= set(profiles):
            break
        chosen = []
        for members, order in orders:
            for j, (rc, sli, model) in enumerate(members):
                name = order[(turn * len(members) + j) % len(order)] if order else None
                if name is not None and name in per_slo[(model, rc.name, sli)]:
                    chosen.append(((rc, sli, model), name))
        if chosen:
            covered |= {n for _, n in chosen}
            rounds.append(chosen)
    return rounds


def _boundary_group(
    spec: Spec, models: Sequence[_Model], family: str, chosen: Sequence[tuple[SloKey, str]],
    per_slo: Mapping[tuple[str, str, Sli], Mapping[str, list[Segment]]],
) -> dict[str, Any] | None:  # fmt: skip
    """One scenario: each chosen SLO on its own profile, the shorter ones held at their last segment to the end."""
    length = max(sum(s[0] for s in per_slo[(m, rc.name, sli)][n]) for (rc, sli, m), n in chosen)
    lines: dict[tuple[str, str, Sli], _Timeline] = {}
    inputs: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for (rc, sli, model), name in chosen:
        segs = list(per_slo[(model, rc.name, sli)][name])
        if not segs:
            continue
        pad = length - sum(s[0] for s in segs)
        if pad > 0:
            segs.append((pad, segs[-1][1], segs[-1][2]))
        bounds = spec.histogram_buckets(rc, sli)
        line = _Timeline(bounds, segs)
        lines[(model, rc.name, sli)] = line
        inputs += line.series(spec.histogram(rc, sli).name, _histogram_labels(spec, model, rc, sli),
                              _le_writer(spec, rc, sli, model))  # fmt: skip
        if (model, rc.name) not in seen:
            seen.add((model, rc.name))
            inputs.append(_requests_input(spec, model, rc, segs[0][2], length))
    checks = _state_checks(models, lines)
    if not checks:
        return None
    sides = [n.removeprefix(family).strip() for n in dict.fromkeys(n for _, n in chosen)]
    name = f"boundaries: {family} {', '.join(sides)}"
    if len(sides) > 1:
        name += " (one per SLO, in turn)"
    return {"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": checks}


def _keep_seconds(rule: AlertRule) -> int:
    return int(parse_duration(rule.keep_firing_for)) if rule.keep_firing_for not in ("", "0s") else 0


def _keep_times(rule: AlertRule, true_until: int, false_from: int) -> tuple[int, int, int]:
    """(last evaluation the condition is surely true at, one `keep_firing_for` later, where the alert surely still
    fires, and `keep_firing_for` after the first evaluation the condition is surely false at, where it is surely
    resolved) for a condition surely true up to minute `true_until` and surely false from minute `false_from`.
    Halving keep_firing_for resolves it by the second time where the two evaluations are one step apart;
    doubling keeps it firing at the third."""
    step = _STEP.get()
    last_true = math.floor(true_until * 60 / step) * step
    first_false = math.ceil(false_from * 60 / step) * step
    return last_true, last_true + _keep_seconds(rule), first_false + _keep_seconds(rule)


def _engine_keep_times(rule: AlertRule, flip: int) -> tuple[int, int, int]:
    """`_keep_times` of an engine alert whose inputs go from just over to just under its threshold at sample
    `flip`: an instant gauge (KV cache) is surely false from `flip`; max_over_time(...[1m]) (the queue) one sample
    later; rate(...[5m]) (preemptions) of the last increase, between samples `flip - 1` and `flip`, while the
    window (inclusive in Prometheus 2, left-open in 3) surely holds both samples."""
    if rule.name == alerts_mod.NAME_KV_FULL:
        return _keep_times(rule, flip - 1, flip)
    if rule.kind is AlertKind.QUEUE_OVERLOAD:
        return _keep_times(rule, flip - 1, flip + 1)
    return _keep_times(rule, flip + 3, flip + 5)


def _queue_under(k: int, full: int) -> tuple[int, int]:
    """(waiting, running) of the `k`-th tested model once its queue alert's condition is just false: five waiting
    on an engine one slot short of full for the first, nothing waiting on a full engine for the second (and so on,
    alternately), so that each half of the condition is the one that fails on some model. The page-cause scenario
    starts from the second state (`k + 1`), so a spec with one tested model sees both halves too."""
    return (5, full - 1) if k % 2 == 0 else (0, full)


def _engine_boundary_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Each engine signal just over its threshold for 22m, then just under: one request waiting on a full engine,
    then five waiting on an engine one slot short of full or none on a full one (`_queue_under`); KV cache just
    over then just under its threshold; preempting 0.1/s, then not at all. The warnings fire during the first part
    and are resolved after it."""
    metrics = spec.metrics
    rules = [r for r in all_rules if r.kind in (AlertKind.QUEUE_OVERLOAD, AlertKind.KV_CACHE)
             and schema.RULE_LABEL_CAUSE not in r.labels]  # fmt: skip
    if not rules:
        return []
    # the first sample under two minutes after an evaluation at the 5m step: each signal's last evaluation over
    # and first under are one step apart (see `_engine_keep_times`)
    over, under = 22, 25
    minutes = over + under
    inputs: list[dict[str, str]] = []
    for index, model in enumerate(_tested_specs(spec)):
        m = [(k, "=", v) for k, v in _raw_labels(spec, model.name, None).items()]
        kv = next((r for r in rules if r.model == model.name and r.name == alerts_mod.NAME_KV_FULL), None)
        limit = float(kv.condition["kv_cache_usage_max"]) if kv is not None else None
        kv_over = (limit + (1 - limit) / 2) if limit is not None else 0.5
        kv_under = limit * (1 - NEAR) if limit is not None else 0.5
        full = model.max_num_seqs
        waiting, running = _queue_under(index, full)
        inputs += [
            *_optional(metrics.requests_waiting, m, f"1x{over - 1} {waiting}x{under}"),
            {"series": selector(metrics.requests_running, m), "values": f"{full}x{over - 1} {running}x{under}"},
            *_optional(metrics.kv_cache_usage, m, f"{number(kv_over)}x{over - 1} {number(kv_under)}x{under}"),
            *_optional(metrics.preemptions, m, _piecewise([6.0 * min(i, over) for i in range(minutes + 1)])),
            {"series": selector(metrics.generation_tokens, m), "values": _series_values(600, minutes)},
        ]  # fmt: skip
    step = _STEP.get()
    fire_at = math.ceil((over - 5) * 60 / step) * step
    quiet_at = math.floor(minutes * 60 / step) * step
    tests = []
    for r in rules:
        if fires_at(r) + step <= fire_at:
            tests.append(_alert_check(r, fire_at, True))
            # keep_firing_for: still firing one keep_firing_for after the last evaluation over, resolved one after
            # the first under
            _, still, resolved = _engine_keep_times(r, over)
            if still > fire_at and resolved <= quiet_at:
                tests += [_alert_check(r, still, True), _alert_check(r, resolved, False)]
        tests.append(_alert_check(r, quiet_at, False))
    groups = [{"name": "engines just over every threshold for 22m, then just under", "interval": "1m",
               "input_series": inputs, "promql_expr_test": tests}]  # fmt: skip
    return groups + _engine_cause_groups(spec, all_rules)


# The queue maxima's window, checked at an evaluation `QUEUE_PEAK_AGO` seconds after a peak and `QUEUE_OLD_AGO`
# after a higher one, from gauges sampled every `QUEUE_SAMPLE` seconds: only a one-minute window holds the peak and
# not the older one. Neither peak sits on the window's edge, where Prometheus 2 (closed) and 3 (left-open) differ.
QUEUE_SAMPLE, QUEUE_PEAK_AGO, QUEUE_OLD_AGO = 15, 45, 90


def _queue_window_groups(spec: Spec) -> list[dict[str, Any]]:
    """The engine queue records are the maxima of the last minute, per model: each gauge sampled every 15s at a
    base level, with a peak 45s before an evaluation and a higher one 90s before it; at that evaluation the record
    is the peak (a 30s window would miss it, a 2m window would read the older one, a minimum the base level). Each
    tested model's levels are its own, so a record that mixed models reads another's."""
    metrics = spec.metrics
    signals = [(record, metric) for record, metric in ((schema.RECORD_QUEUE_WAITING, metrics.requests_waiting),
                                                        (schema.RECORD_QUEUE_RUNNING, metrics.requests_running))
               if metric is not None]  # fmt: skip
    if not signals:
        return []
    step = _STEP.get()
    at = math.ceil(2 * QUEUE_OLD_AGO / step) * step  # an evaluation with the older peak well inside the history
    samples = at // QUEUE_SAMPLE + 4
    inputs: list[dict[str, str]] = []
    tests: list[dict[str, Any]] = []
    for k, model in enumerate(_tested_specs(spec), 1):
        base, peak, older = k, 3 * k, 5 * k
        levels = [float(base)] * samples
        levels[(at - QUEUE_PEAK_AGO) // QUEUE_SAMPLE] = float(peak)
        levels[(at - QUEUE_OLD_AGO) // QUEUE_SAMPLE] = float(older)
        m = [(key, "=", value) for key, value in _raw_labels(spec, model.name, None).items()]
        for record, metric in signals:
            inputs.append({"series": selector(metric, m), "values": " ".join(number(v) for v in levels)})
            where = [(schema.RULE_LABEL_SERVICE, "=", spec.service), (schema.RULE_LABEL_MODEL, "=", model.name)]
            tests.append({"expr": f"max({selector(record, where)})", "eval_time": f"{at}s",
                          "exp_samples": [{"value": peak}]})  # fmt: skip
    return [{"name": f"engine queue gauges every {QUEUE_SAMPLE}s: the 1m maxima hold the peak {QUEUE_PEAK_AGO}s "
                     f"ago, not the higher one {QUEUE_OLD_AGO}s ago", "interval": f"{QUEUE_SAMPLE}s",
             "input_series": inputs, "promql_expr_test": tests}]  # fmt: skip


def _engine_cause_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """Every request slow (the SLO pages fire) while every engine is just over each threshold (one request waiting
    on a full engine, KV cache just over its limit, preempting 0.1/s), then from minute `flip` just under (five
    waiting on an engine one slot short of full or none on a full one, `_queue_under`; KV cache 10% under its
    limit, no more preemptions): the engine alerts fire as causes inside the page (severity of the page, cause:
    engine) and their warning copies stay silent; each cause stays firing `keep_firing_for` after the last
    evaluation its condition is surely true at and is resolved `keep_firing_for` after the first one it is surely
    false at."""
    metrics = spec.metrics
    causes = [r for r in all_rules if r.kind in (AlertKind.QUEUE_OVERLOAD, AlertKind.KV_CACHE)
              and schema.RULE_LABEL_CAUSE in r.labels]  # fmt: skip
    warnings = [r for r in all_rules if r.kind in (AlertKind.QUEUE_OVERLOAD, AlertKind.KV_CACHE)
                and schema.RULE_LABEL_CAUSE not in r.labels]  # fmt: skip
    pages = [r for r in all_rules if r.kind is AlertKind.BURN_RATE
             and r.labels.get("severity") == spec.alerting.severity.page]  # fmt: skip
    if not causes or not pages:
        return []
    step = _STEP.get()
    at = math.ceil((min(fires_at(r) for r in pages) + 30 * 60) / step) * step
    flip = at // 60 + 2  # the first sample under: two minutes after an evaluation at the 5m step

    plans = [(r, *_engine_keep_times(r, flip)) for r in causes]
    minutes = max(p[3] for p in plans) // 60 + 2
    inputs: list[dict[str, str]] = []
    for rc in spec.classes:
        for sli, slo in rc.slos.items():
            if slo.objective is None:
                continue
            for model_name in tested_of(spec, rc):
                inputs += _histogram_inputs(spec, model_name, rc, sli, Scenario({}), minutes)[0]
    for index, model in enumerate(_tested_specs(spec)):
        m = [(k, "=", v) for k, v in _raw_labels(spec, model.name, None).items()]
        kv = next((r for r in causes if r.model == model.name and r.name == alerts_mod.NAME_KV_FULL), None)
        limit = float(kv.condition["kv_cache_usage_max"]) if kv is not None else None
        kv_over = (limit + (1 - limit) / 2) if limit is not None else 0.5
        kv_under = limit * (1 - NEAR) if limit is not None else 0.5
        full = model.max_num_seqs
        after = minutes - flip + 1
        # the other half of the condition than the model's warning scenario: with one tested model, each half
        # is the one that fails in one of the two scenarios
        waiting, running = _queue_under(index + 1, full)
        inputs += [
            *_optional(metrics.requests_waiting, m, f"1x{flip - 1} {waiting}x{after - 1}"),
            {"series": selector(metrics.requests_running, m), "values": f"{full}x{flip - 1} {running}x{after - 1}"},
            *_optional(metrics.kv_cache_usage, m, f"{number(kv_over)}x{flip - 1} {number(kv_under)}x{after - 1}"),
            *_optional(metrics.preemptions, m, _piecewise([6.0 * min(i, flip) for i in range(minutes + 1)])),
            {"series": selector(metrics.generation_tokens, m), "values": _series_values(600, minutes)},
        ]  # fmt: skip
    tests = []
    for r, last_true, still, resolved in plans:
        tests += [_alert_check(r, last_true, True), _alert_check(r, still, True), _alert_check(r, resolved, False)]
    end = max(p[3] for p in plans)
    tests += [_alert_check(r, t, False) for r in warnings for t in (at, end)]
    return [{"name": "pages firing while every engine is just over each threshold, then just under from minute "
                     f"{flip}: the engine alerts fire inside the page, not as warnings, and resolve keep_firing_for "
                     "after", "interval": "1m", "input_series": inputs, "promql_expr_test": tests}]  # fmt: skip


def _p99_shares(bounds: Sequence[float], target: float) -> dict[int, float] | None:
    """Bucket shares whose p99 (histogram_quantile's interpolation) is `target`: a share in the lowest bucket,
    the rest in the bucket holding `target`; None when no finite bucket can."""
    for k, hi in enumerate(bounds):
        lo = bounds[k - 1] if k else 0.0
        if lo < target <= hi and k > 0:
            x = (target - lo) / (hi - lo)
            if x > 0.98:
                return None
            f = (0.99 - x) / (1 - x)
            return {0: f, k: 1 - f}
    return None


def _baseline_evaluations(
    line: _Timeline, spec: Spec, history: int, step: int
) -> list[tuple[int, bool, bool]]:  # fmt: skip
    """(time s, condition, decided) of a baseline alert at every evaluation of `line`: p99 of the last 5m over
    `ratio` x p99 of the same 5m `history` minutes earlier, where that 5m had `min_rps` and the last 5m has
    `min_rps` and the alert's `min_requests`. A 5m window reads the samples of its last 4 minutes (left-open,
    Prometheus 3) or 5 (closed, Prometheus 2): decided where both agree, every comparison is MARGIN clear, and the
    earlier window is whole."""
    base = spec.alerting.baseline
    out = []
    for t in range(0, line.minutes * 60 + 1, step):
        m = t // 60
        conds: set[bool] = set()
        decided = not history <= m < history + 6
        for back in (4, 5):
            now, then = (m - back, m), (m - history - back, m - history)
            q_now, q_then = line.quantile(BASELINE_QUANTILE, *now), line.quantile(BASELINE_QUANTILE, *then)
            if then[0] < 0 or q_now is None or q_then is None:
                conds.add(False)
                continue
            rate_now, rate_then = sum(line.counts(*now)) / (back * 60), sum(line.counts(*then)) / (back * 60)
            pairs = [(q_now, base.ratio * q_then), (rate_then, base.min_rps), (rate_now, base.min_rps),
                     (rate_now * BASE_WINDOW, float(spec.alerting.min_requests))]  # fmt: skip
            if any(abs(a - b) <= MARGIN * b for a, b in pairs):
                decided = False
            conds.add(q_now > base.ratio * q_then and all(a >= b for a, b in pairs[1:]))
        out.append((t, True in conds, decided and len(conds) == 1))
    return out


def _baseline_slos(spec: Spec, all_rules: Sequence[AlertRule]) -> list[SloKey]:
    """The SLOs the baseline scenario writes: a day of history and more, so two classes per SLI (representative)."""
    classes = {rc.name: rc for rc in spec.classes}
    return representative([(classes[r.request_class], r.sli, r.model) for r in all_rules
                           if r.kind is AlertKind.BASELINE and r.request_class is not None and r.sli is not None
                           and r.model is not None])  # fmt: skip


def _baseline_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """The baseline from raw history: `offset` of latency, then parts of p99 NEAR over or under ratio x that p99:

    1. over: fires; 2. under: resolved; 3. over, where the same part a day before had NEAR under `min_rps`:
    silent (no baseline); 4. over, the day before NEAR over `min_rps`: fires; 5. over with the requests of the
    last 5m NEAR under the alert's traffic guard (the larger of `min_rps` x 5m and `min_requests`): silent;
    6. NEAR over it, a fifth of them slower than every bucket (their p99 is the highest bound): fires, so the guard
    must count them. The history has p99 in the first bucket where the parts read it (the same minutes a day
    earlier) and over elsewhere, so a baseline read at another offset differs. Parts 3 to 6 need the history to
    hold their day before; parts 4 to 6 are left out where one SLO's selector also reads another's series
    (imported SLOs): the requests each selector counts are then not the ones written for it, so part 3 writes half
    of `min_rps` spread over every alert's series instead. The alert is checked at each part's end and around
    every change of its state, as `_baseline_evaluations` models it. A median-of-days baseline reads the one day
    that exists (the median of one value): a week of history at the tests' step would take minutes."""
    kept = {(rc.name, sli, m) for rc, sli, m in _baseline_slos(spec, all_rules)}
    rules = [r for r in all_rules if r.kind is AlertKind.BASELINE and (r.request_class, r.sli, r.model) in kept]
    if not rules:
        return []
    base = spec.alerting.baseline
    history = int(base.offset // 60)
    step = _STEP.get()
    longest = max(max(_for_seconds(r), _keep_seconds(r)) for r in rules)
    # 5m for the rates to settle, `for` or `keep_firing_for`, slack; not a multiple of 5, so that parts start
    # between 5m evaluations, some of which then read a window across two parts
    part = max(27, math.ceil(longest / 60) + 12)
    every_slo = [(rc, sli, m) for rc in spec.classes for sli in rc.slos for m in tested_of(spec, rc)]
    overlap = any(_readers(spec, every_slo).values())
    guard = max(base.min_rps * BASE_WINDOW, float(spec.alerting.min_requests))  # requests in 5m the alert needs now
    # (latency, requests a minute now, requests a minute a day before)
    plan: list[tuple[str, float, float]] = [("over", RPM, RPM), ("under", RPM, RPM)]
    if base.min_rps > 0 and history >= 3 * part:
        quiet = base.min_rps * 60 / (2 * len(rules)) if overlap else (1 - NEAR) * base.min_rps * 60
        plan.append(("over", RPM, quiet))
        if not overlap and history >= 4 * part:
            plan.append(("over", RPM, (1 + NEAR) * base.min_rps * 60))
    if not overlap and history >= (len(plan) + 2) * part:
        plan += [("over", (1 - NEAR) * guard / 5, RPM), ("slow", (1 + NEAR) * guard / 5, RPM)]
    read = len(plan) * part  # the history's minutes the parts read
    day_before = [plan[m // part][2] if m < read else float(RPM) for m in range(history)]
    per_minute = [*day_before, *(rpm for _, rpm, _ in plan for _ in range(part))]
    minutes = len(per_minute)
    finished = _piecewise([sum(per_minute[:m]) for m in range(minutes + 1)])
    ends = [math.floor((history + (i + 1) * part) * 60 / step) * step for i in range(len(plan))]
    inputs: list[dict[str, str]] = []
    tests: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for r in rules:
        rc = next(c for c in spec.classes if c.name == r.request_class)
        sli = r.sli
        if sli is None or r.model is None:
            continue
        bounds = spec.histogram_buckets(rc, sli)
        if len(bounds) < 3:
            continue
        p99_0 = bounds[0] * 0.99
        over = _p99_shares(bounds, base.ratio * p99_0 * (1 + NEAR))
        under = _p99_shares(bounds, base.ratio * p99_0 * (1 - NEAR))
        if over is None or under is None:
            continue
        # a fifth slower than every bucket: p99 reads the highest bound, over the baseline where that bound is
        slow = {0: 0.8} if bounds[-1] > base.ratio * p99_0 * (1 + NEAR) else over
        shapes = {"over": over, "under": under, "slow": slow}
        past: list[Segment] = [(1, {0: 1.0}, rpm) if m < read else (1, over, rpm) for m, rpm in enumerate(day_before)]
        line = _Timeline(bounds, [*past, *((part, shapes[shape], rpm) for shape, rpm, _ in plan)])
        inputs += line.series(spec.histogram(rc, sli).name, _histogram_labels(spec, r.model, rc, sli),
                              _le_writer(spec, rc, sli, r.model))  # fmt: skip
        if (r.model, rc.name) not in seen:
            seen.add((r.model, rc.name))
            inputs.append({**_requests_input(spec, r.model, rc, RPM, minutes), "values": finished})
        predicted = _follow(r, _baseline_evaluations(line, spec, history, step))
        tests += _checks_of(r, predicted, also=ends)
    if not tests:
        return []
    name = (
        f"baseline from raw history: {prom_duration(history * 60)}, then {part}m parts of p99 {NEAR:.0%} over "
        f"or under {number(base.ratio)}x the same minutes a day earlier: over (fires), under (resolved)"
    )
    labels = ["over where the day before had under min_rps (silent)", "over, the day before just over min_rps "
              "(fires)", "over with traffic just under the guard (silent)", "just over it, a fifth slower than every "
              "bucket (fires)"]  # fmt: skip
    for text in labels[: len(plan) - 2]:
        name += f", {text}"
    return [{"name": name, "interval": "1m", "input_series": inputs, "promql_expr_test": tests}]


def _consistency_groups(spec: Spec, all_rules: Sequence[AlertRule]) -> list[dict[str, Any]]:
    """p99/p50 from bucket edges, bucket by bucket: 60% of requests in one bucket and 40% in the next but one, so
    that p50's upper edge and p99's lower edge step through every bound (the record's value is checked at the end of
    each 10m step; p99's lower edge in one step is p50's upper edge in the next, and each step spells the integer
    bounds the other way from the one before, client_python's `1.0` then Go's `1`, so every bound's boundary
    series of either spelling is read, with one tested model too); then 40% of the requests past the largest
    bound at a quarter of the traffic guard a minute (its 5m count 1.25 times the guard, the finite buckets' 0.75
    times); then a pair of bounds just over the limit and one just under it (the alert fires, then resolves)."""
    rules = [r for r in all_rules if r.kind is AlertKind.CONSISTENCY]
    if not rules:
        return []
    step = _STEP.get()
    part, near_part = 10, 25
    plans: list[tuple[AlertRule, RequestClass, Sli, list[Segment], list[tuple[int, float | None, bool | None]]]] = []
    for r in rules:
        rc = next(c for c in spec.classes if c.name == r.request_class)
        if r.sli is None or r.model is None:
            continue
        slo = rc.slos[r.sli]
        if slo.consistency is None:
            continue
        limit = slo.consistency.max_p99_over_p50
        bounds = spec.histogram_buckets(rc, r.sli)
        n = len(bounds)
        # Neighbours two buckets apart: every bound is once p50's upper edge and once p99's lower edge, in n + 1
        # steps (a dense ladder has dozens of bounds), and the ratios stay near the limits that matter.
        pairs = [(0, 1), *((j, j + 2) for j in range(n - 1)), (n - 1, n)]
        segments: list[Segment] = []
        checks: list[tuple[int, float | None, bool | None]] = []
        for j, k in pairs:
            shares = {j: 0.6, **({k: 0.4} if k < n else {})}
            segments.append((part, shares, RPM))
            checks.append((sum(s[0] for s in segments), bounds[k - 1] / bounds[j], None))
        if n > OVERFLOW_SHARES[-1][0] + 1:
            # 40% past the largest bound, at a rate whose 5m count is over the traffic guard and its finite part
            # under it: p99's lower edge, p50's upper edge and the guard divide or count by the `+Inf` bucket, not
            # the largest finite one (p99's lower edge is then the largest bound, p50's upper edge the third)
            guard = spec.alerting.min_requests
            segments.append((part, dict(OVERFLOW_SHARES), guard / 4 if guard else RPM))
            checks.append((sum(s[0] for s in segments), bounds[n - 1] / bounds[OVERFLOW_SHARES[-1][0]], None))
        ratios = [(bounds[k - 1] / bounds[j], j, k) for j in range(n) for k in range(j + 2, n + 1)]
        hi, lo = limit * (1 + LIMIT_NEAR), limit * (1 - LIMIT_NEAR)
        over = [(j, k) for x, j, k in ratios if limit * (1 + MARGIN) < x < hi * (1 - MARGIN)]
        under = [(j, k) for x, j, k in ratios if lo * (1 + MARGIN) < x < limit * (1 - MARGIN)]
        for side, fires in ((over, True), (under, False)):
            if side:
                j, k = side[0]
                segments.append((near_part, {j: 0.6, **({k: 0.4} if k < n else {})}, RPM))
                checks.append((sum(s[0] for s in segments), bounds[k - 1] / bounds[j], fires))
        plans.append((r, rc, r.sli, segments, checks))
    if not plans:
        return []
    length = max(sum(s[0] for s in p[3]) for p in plans)
    inputs: list[dict[str, str]] = []
    tests: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for r, rc, sli, segments, checks in plans:
        model = r.model or ""
        pad = length - sum(s[0] for s in segments)
        whole = [*segments, *([(pad, segments[-1][1], RPM)] if pad else [])]
        ends = list(itertools.accumulate(minutes for minutes, _, _ in whole))
        hist = spec.histogram(rc, sli)
        turn = tested_of(spec, rc).index(model)

        def spelled_at(
            bound: float, minute: int, hist: schema.CustomHistogram = hist, ends: list[int] = ends, turn: int = turn
        ) -> str:  # fmt: skip
            spellings = le_spellings(hist.le_for(bound))
            return spellings[(bisect.bisect_left(ends, minute) + turn) % len(spellings)]

        inputs += _Timeline(spec.histogram_buckets(rc, sli), whole).series(
            hist.name, _histogram_labels(spec, model, rc, sli), _le_writer(spec, rc, sli, model), spelled_at
        )
        if (model, rc.name) not in seen:
            seen.add((model, rc.name))
            inputs.append(_requests_input(spec, model, rc, RPM, length))
        labels = sorted(_slo_series_labels(spec, model, rc, sli).items())
        record = selector(schema.RECORD_CONSISTENCY_LOWER, [(k, "=", v) for k, v in labels])
        for minute, value, state in checks:
            at = math.floor(minute * 60 / step) * step
            if state is None and value is not None:
                tests.append({"expr": record, "eval_time": _dur(at),
                              "exp_samples": [{"labels": record, "value": value}]})  # fmt: skip
            elif state is not None:
                tests.append(_alert_check(r, at, state))
    return [{"name": "consistency bucket by bucket: 60% of requests in one bucket, 40% in another; 40% past the "
                     "largest bound; then p99/p50 just over and just under the limit", "interval": "1m",
             "input_series": inputs, "promql_expr_test": tests}]  # fmt: skip
