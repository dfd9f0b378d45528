"""PromQL for the dashboards: selectors over the dashboard variables (`$model`, `$class`, `$engine`, `$service`).

The deployment scope comes from `slokit.generate.queries` and quoting from `slokit.promql`, so a panel's selector
differs from a rule's only in the Grafana variables. The traffic guard (`requests_5m`, `enough`, `too_little`) is
here because the overview's tier and consistency panels and the debugging board's scale-out panel all show the same
"too little traffic" reading the alerts stay quiet on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from slokit import promql, schema
from slokit.generate.queries import Queries
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec

LOW_TRAFFIC_VALUE: Final = -1


LOW_TRAFFIC_TEXT: Final = "too little traffic"


def quote(value: str) -> str:
    """A PromQL string literal (promql.py's quoting)."""
    return promql.quote(value)


def scope(spec: Spec) -> list[str]:
    """The spec's deployment scope (`selector:` labels every model shares, from queries.py) as matchers."""
    return [f"{label}{op}{quote(value)}" for label, op, value in Queries(spec).common_selector()]


def selector(metric: str, matchers: Sequence[str]) -> str:
    inner = ", ".join(matchers)
    return f"{metric}{{{inner}}}" if inner else metric


def eq(label: str, value: str) -> str:
    return f"{label}={quote(value)}"


def var(label: str, variable: str) -> str:
    """A regex matcher on a Grafana multi-value variable (Grafana regex-escapes the values it substitutes)."""
    return f'{label}=~"${variable}"'


def model_var(label: str | None) -> list[str]:
    """The `$model` matcher on a raw metric; none when its series carry no model label (TGI: one model)."""
    return [] if label is None else [var(label, "model")]


def constant_series(value: float, labels: Mapping[str, str]) -> str:
    """A constant series carrying `labels` (for engine maxima and thresholds drawn as lines)."""
    expr = f"vector({value:g})"
    for name, label_value in labels.items():
        expr = f'label_replace({expr}, {quote(name)}, {quote(label_value)}, "", "")'
    return expr


def legend_format(*labels: str | None) -> str:
    """`{{a}} {{b}}` for the labels a series carries (None: a label the source lacks)."""
    return " ".join("{{" + label + "}}" for label in labels if label is not None)


@dataclass(frozen=True)
class RawVars:
    """Label names and matchers for one spec's raw metrics."""

    spec: Spec

    @property
    def m(self) -> schema.SourceMetrics:
        return self.spec.metrics

    @property
    def model(self) -> str | None:
        return self.m.model_label

    @property
    def by(self) -> str:
        """Grouping labels for per-series panels: model, class (where the source has it), replica, engine."""
        labels = [self.model] if self.model is not None else []
        if self.m.class_label is not None:
            labels.append(self.m.class_label)
        labels.extend(self.spec.alerting.replica_labels)
        labels.append(self.m.engine_label)
        return ", ".join(labels)

    @property
    def by_labels(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.by.split(","))

    def raw(self, *, with_class: bool = True, with_engine: bool = True) -> list[str]:
        """Matchers on raw (exporter) metrics for the dashboard variables."""
        matchers = [*scope(self.spec), *model_var(self.model)]
        if with_class and self.m.class_label is not None:
            matchers.append(var(self.m.class_label, "class"))
        if with_engine:
            matchers.append(var(self.m.engine_label, "engine"))
        return matchers

    def engine_only(self) -> list[str]:
        """Matchers for engine-level gauges (no class label even on the slokit source)."""
        return [*scope(self.spec), *model_var(self.model), var(self.m.engine_label, "engine")]


def recorded(service_var: bool = True, *, model: bool = True, request_class: bool = True) -> list[str]:
    """Matchers on slokit's recorded series (labels service, model, class, slo)."""
    matchers = []
    if service_var:
        matchers.append(var(schema.RULE_LABEL_SERVICE, "service"))
    if model:
        matchers.append(var(schema.RULE_LABEL_MODEL, "model"))
    if request_class:
        matchers.append(var(schema.RULE_LABEL_CLASS, "class"))
    return matchers


def histogram_quantile(q: float, bucket_rate: str, by: str) -> str:
    return f"histogram_quantile({q:g}, sum by (le, {by}) ({bucket_rate}))"


def rate(metric: str, matchers: Sequence[str]) -> str:
    return f"rate({selector(metric, matchers)}[$__rate_interval])"


SLO_KEYS: Final = (schema.RULE_LABEL_SERVICE, schema.RULE_LABEL_MODEL, schema.RULE_LABEL_CLASS, schema.RULE_LABEL_SLO)


def slo_filter(rc: RequestClass, sli: Sli) -> list[str]:
    return [
        var(schema.RULE_LABEL_SERVICE, "service"),
        eq(schema.RULE_LABEL_CLASS, rc.name),
        eq(schema.RULE_LABEL_SLO, sli.value),
        var(schema.RULE_LABEL_MODEL, "model"),
    ]


def requests_5m(matchers: Sequence[str]) -> str:
    """Requests in the last 5m per SLO (model, class, indicator), from the recorded bucket rates: what the traffic
    guard of the tier, baseline, consistency and scale-out alerts counts (alerts.traffic_guard)."""
    inf = f"{promql.INF_MATCHER[0]}={quote(promql.INF_MATCHER[2])}"
    total = selector(schema.RECORD_LATENCY_BUCKET_RATE, [*matchers, inf])
    return f"sum by ({', '.join(SLO_KEYS)}) ({total}) * 300"


def enough(spec: Spec, requests: str) -> str:
    return f"({requests} >= {spec.alerting.min_requests})"


def too_little(spec: Spec, requests: str, value: int = LOW_TRAFFIC_VALUE) -> str:
    """`value` per SLO while it has fewer than alerting.min_requests requests in the 5m window."""
    shift = f" - {-value}" if value < 0 else f" + {value}" if value > 0 else ""
    return f"(({requests} < {spec.alerting.min_requests}) * 0{shift})"
