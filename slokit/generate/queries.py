"""The one builder of PromQL selectors over raw and recorded series.

Every generator (rules, alerts, dashboards, runbook, Kubernetes objects, the demo) asks this module for the
selector of a raw metric or a recorded series, so the spec's deployment scope (`selector:`, top level and per model)
and the replica identity (`alerting.replica_labels` plus vLLM's `engine`) are decided here once. Quoting and
Prometheus-safe regex escaping come from `slokit.promql`.

Raw selectors come as a list of terms: models that share one effective `selector:` share one term, so a spec whose
models all run in one namespace reads each metric once, and a spec whose models live in different namespaces gets
one term per namespace (callers join them with `or`; their model labels differ, so nothing is dropped).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from slokit import promql, schema
from slokit.promql import Matcher, eq, one_of
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec

T = TypeVar("T")


@dataclass(frozen=True)
class RawTerm:
    """One raw selector and the models it covers."""

    models: tuple[str, ...]
    selector: str
    # The same series where something else already keeps exactly `selector`'s (the 5m tiles join every raw read
    # with the counter record): without the model-set matcher where the class label narrows the series anyway,
    # since a long alternation of model names is costly to match on every evaluation.
    lookup: str = ""
    # Where one matcher narrows the selector to a class (the source's class label): the metric, the matchers of
    # `selector` and of `lookup` in order, that one matcher, and the label names the series carry (model, engine,
    # class, unit). Terms equal but for that matcher can be read as one (`class=~"a|b"`, merge_classes).
    metric: str = ""
    matchers: tuple[Matcher, ...] = ()
    lookup_matchers: tuple[Matcher, ...] = ()
    narrowing: Matcher | None = None
    shape: tuple[object, ...] = ()


def merge_classes(terms: Iterable[tuple[T, RawTerm]]) -> list[tuple[T, RawTerm]]:
    """`terms` with those that differ only in their class matcher merged into one whose class label matches all
    their classes, in first-appearance order, each with the tag of its first term (the tag's class stands for the
    label names, which merged terms share). Each selector pays a query's fixed cost and a postings lookup per model
    of its model-set matcher, so a fleet whose models all serve the same classes reads each series set once, not
    once per class, and the records split the classes again by their label."""
    merged: dict[tuple[object, ...], tuple[T, RawTerm, list[str], list[str]]] = {}
    for tag, term in terms:
        narrowing = term.narrowing
        if narrowing is None or narrowing[1] != "=":
            # kept as it is, even where another term has the same selector: the class is then written on by
            # each term's own reader (a histogram without a class label that two classes read)
            merged[("as is", len(merged))] = (tag, term, [], [])
            continue
        hole: Matcher = (narrowing[0], "=", "")
        key = (
            term.metric,
            term.shape,
            tuple(hole if m == narrowing else m for m in term.matchers),
            tuple(hole if m == narrowing else m for m in term.lookup_matchers),
        )
        _, _, values, models = merged.setdefault(key, (tag, term, [], []))
        if narrowing[2] not in values:
            values.append(narrowing[2])
        models.extend(m for m in term.models if m not in models)
    out: list[tuple[T, RawTerm]] = []
    for tag, term, values, models in merged.values():
        if term.narrowing is None or len(values) < 2:
            out.append((tag, term))
            continue
        wide = one_of(term.narrowing[0], values)
        matchers = tuple(wide if m == term.narrowing else m for m in term.matchers)
        lookup = tuple(wide if m == term.narrowing else m for m in term.lookup_matchers)
        selector = promql.selector(term.metric, matchers)
        out.append((tag, RawTerm(tuple(models), selector, promql.selector(term.metric, lookup), term.metric,
                                 matchers, lookup, None, term.shape)))  # fmt: skip
    return out


class Queries:
    """Selectors for one spec."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.metrics = spec.metrics

    # -- scope and identity ---------------------------------------------------------------------------------------
    @property
    def replica_labels(self) -> tuple[str, ...]:
        """The labels that tell replicas apart (`instance` by default), without `engine`."""
        return self.spec.alerting.replica_labels

    @property
    def engine_keys(self) -> tuple[str, ...]:
        """Per-engine grouping in slokit's label names: model, then replica labels, then `engine`."""
        return (schema.RULE_LABEL_MODEL, *self.replica_labels, schema.RULE_LABEL_ENGINE)

    def model_selector(self, model: str) -> Mapping[str, str]:
        """The effective `selector:` of one model (top level with the model's own merged over it)."""
        try:
            return self.spec.model(model).selector
        except KeyError:
            return self.spec.selector

    def common_selector(self) -> list[Matcher]:
        """Matchers every model's selector shares: what a dashboard with a `$model` variable can always apply."""
        models = self.spec.models
        if not models:
            return promql.labels_matchers(self.spec.selector)
        first = dict(models[0].selector)
        common = {k: v for k, v in first.items() if all(m.selector.get(k) == v for m in models[1:])}
        return promql.labels_matchers(common)

    # -- raw series -----------------------------------------------------------------------------------------------
    def raw_terms(
        self,
        metric: str,
        models: Iterable[str] | None = None,
        request_class: RequestClass | None = None,
        extra: Sequence[Matcher] = (),
    ) -> list[RawTerm]:
        """Selectors of a raw metric for `models` (default: all), one per distinct effective selector."""
        names = list(dict.fromkeys(models if models is not None else (m.name for m in self.spec.models)))
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for name in names:
            key = tuple(sorted(self.model_selector(name).items()))
            groups.setdefault(key, []).append(name)
        terms = []
        for key, group in groups.items():
            scope: list[Matcher] = [*promql.labels_matchers(dict(key))]
            model: list[Matcher] = []
            if self.metrics.model_label is not None:  # None (TGI): the spec's one model, by its scope alone
                model.append(one_of(self.metrics.model_label, group))
            narrowed: list[Matcher] = []
            if request_class is not None and self.metrics.class_label is not None:
                narrowed.append(eq(self.metrics.class_label, request_class.name))
            selector = promql.selector(metric, [*scope, *model, *narrowed, *extra])
            lookup = promql.selector(metric, [*scope, *narrowed, *extra]) if narrowed and len(group) > 1 else selector
            full = (*scope, *model, *narrowed, *extra)
            look = (*scope, *narrowed, *extra) if narrowed and len(group) > 1 else full
            narrowing = narrowed[0] if narrowed else None
            terms.append(RawTerm(tuple(group), selector, lookup, metric, full, look, narrowing, ("raw",)))
        return terms

    def histogram_terms(
        self,
        request_class: RequestClass,
        sli: Sli,
        suffix: str,
        extra: Sequence[Matcher] = (),
        models: Iterable[str] | None = None,
        with_class: bool = True,
    ) -> list[RawTerm]:
        """Selectors of one class's SLI histogram series (`suffix`: `_bucket`, `_count`), one per distinct
        effective selector: the spec's scope, the histogram's model label over the class's models, the
        histogram's own matchers (a custom `metric:` selector or the source's class label), then `extra`.
        Which histogram and which labels come from `Spec.histogram` (custom `metric:` or `measured_at`).
        `with_class=False` leaves out the source's class label (any class), never a custom selector."""
        hist = self.spec.histogram(request_class, sli)
        terms = []
        for group in self.scope_groups(models if models is not None else request_class.models):
            matchers = self.histogram_matchers(request_class, sli, group, with_class)
            full = (*matchers, *extra)
            look = full
            if hist.model_label is not None and hist.class_label is not None and with_class and len(group) > 1:
                look = tuple(m for m in full if m[0] != hist.model_label)
            own = eq(hist.class_label, request_class.name) if hist.class_label is not None else None
            narrowing = own if own is not None and matchers.count(own) == 1 else None
            shape = (hist.model_label, hist.engine_label, hist.class_label, hist.scale)
            metric = hist.name + suffix
            selector = promql.selector(metric, full)
            terms.append(RawTerm(tuple(group), selector, promql.selector(metric, look), metric, full, look, narrowing,
                                 shape))  # fmt: skip
        return terms

    def scope_groups(self, models: Iterable[str]) -> list[list[str]]:
        """`models` grouped by their effective `selector:` (one raw term per deployment scope), in spec order."""
        groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
        for name in dict.fromkeys(models):
            groups.setdefault(tuple(sorted(self.model_selector(name).items())), []).append(name)
        return list(groups.values())

    def histogram_matchers(
        self, request_class: RequestClass, sli: Sli, models: Sequence[str], with_class: bool = True
    ) -> list[Matcher]:
        """Matchers of one class's SLI histogram for models that share one deployment scope."""
        hist = self.spec.histogram(request_class, sli)
        matchers: list[Matcher] = [*promql.labels_matchers(dict(sorted(self.model_selector(models[0]).items())))]
        if hist.model_label is not None:
            matchers.append(one_of(hist.model_label, list(models)))
        matchers.extend(m for m in hist.matchers if with_class or m[0] != hist.class_label)
        return matchers

    def raw(
        self, metric: str, model: str, request_class: RequestClass | None = None, extra: Sequence[Matcher] = ()
    ) -> str:
        """The selector of a raw metric for one model."""
        return self.raw_terms(metric, [model], request_class, extra)[0].selector

    def raw_matchers(self, model: str, request_class: str | None = None) -> list[Matcher]:
        """Matchers of one model's raw series (its scope, its model label, its class where the source has one)."""
        matchers = promql.labels_matchers(self.model_selector(model))
        if self.metrics.model_label is not None:
            matchers.append(eq(self.metrics.model_label, model))
        if request_class is not None and self.metrics.class_label is not None:
            matchers.append(eq(self.metrics.class_label, request_class))
        return matchers

    # -- recorded series ------------------------------------------------------------------------------------------
    def recorded_matchers(
        self,
        model: str | None = None,
        request_class: str | None = None,
        sli: Sli | None = None,
        extra: Sequence[Matcher] = (),
    ) -> list[Matcher]:
        """Matchers of slokit's recorded series: always the service, then model, class and SLI where given."""
        matchers = [eq(schema.RULE_LABEL_SERVICE, self.spec.service)]
        if model is not None:
            matchers.append(eq(schema.RULE_LABEL_MODEL, model))
        if request_class is not None:
            matchers.append(eq(schema.RULE_LABEL_CLASS, request_class))
        if sli is not None:
            matchers.append(eq(schema.RULE_LABEL_SLO, sli.value))
        matchers.extend(extra)
        return matchers

    def recorded(
        self,
        record: str,
        model: str | None = None,
        request_class: str | None = None,
        sli: Sli | None = None,
        extra: Sequence[Matcher] = (),
    ) -> str:
        """`record{service="...", model="...", ...}`."""
        return promql.selector(record, self.recorded_matchers(model, request_class, sli, extra))


def union(terms: Iterable[str]) -> str:
    """Expressions with disjoint label sets joined with `or` (nothing is dropped)."""
    return "\nor\n".join(terms)


def _literal(value: float) -> str:
    """A compact PromQL number (six significant digits: planner figures are estimates, not exact values)."""
    return f"{value:.6g}"


def piecewise_linear(x: str, points: Sequence[tuple[float, float]]) -> str:
    """PromQL for y(x) through `points` ((x, y), x ascending): linear between them, flat before the first and after
    the last, as `y0 + sum slope_i * clamp(x - x_i, 0, x_(i+1) - x_i)`. Labels of `x` are kept."""
    if not points:
        raise ValueError("piecewise_linear needs at least one point")
    if any(xb <= xa for (xa, _), (xb, _) in itertools.pairwise(points)):
        raise ValueError("piecewise_linear needs ascending x")
    # Segments with the same slope are one (a dense model's memory-bound step is linear in the batch).
    kept = [points[0]]
    for index in range(1, len(points) - 1):
        (xa, ya), (xb, yb), (xc, yc) = kept[-1], points[index], points[index + 1]
        before, after = (yb - ya) / (xb - xa), (yc - yb) / (xc - xb)
        if not math.isclose(before, after, rel_tol=1e-6, abs_tol=1e-15):
            kept.append(points[index])
    if len(points) > 1:
        kept.append(points[-1])
    y0 = kept[0][1]
    terms = [_literal(y0)]
    for (xa, ya), (xb, yb) in itertools.pairwise(kept):
        slope = (yb - ya) / (xb - xa)
        terms.append(f"{_literal(slope)} * clamp(({x}) - {_literal(xa)}, 0, {_literal(xb - xa)})")
    if len(terms) == 1:
        return f"(({x}) * 0 + {_literal(y0)})"
    return "(" + " + ".join(terms) + ")"


def expected_decode_at_batch(curve: Sequence[tuple[int, float]], running: str) -> str:
    """Expected decode tokens/s per engine at the batch it runs: `running / step(running)`, the step time (the
    planner's expected ITL at each tabulated batch, `curve` as (batch, seconds)) interpolated linearly between the
    batches the planner tabulated. `running` is the engine's mean running requests over the rate window, so an
    engine idle half the time expects half a batch of one's tokens/s."""
    return f"({running})\n/ {piecewise_linear(running, [(float(b), s) for b, s in curve])}"
