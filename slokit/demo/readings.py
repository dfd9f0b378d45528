"""What the demo reads from its Prometheus: queue, running batch and TTFT of the demo class, and firing alerts."""

from __future__ import annotations

import contextlib
import math

from slokit import promql
from slokit.demo.contract import alert_name
from slokit.demo.output import fmt_seconds
from slokit.demo.traffic import LoadTally
from slokit.generate.queries import Queries
from slokit.local.prometheus import LocalPrometheus, PrometheusError, QueryResult
from slokit.schema import Sli
from slokit.spec import RequestClass, Spec


def scalar(result: QueryResult) -> float | None:
    """The largest non-NaN value of a query result (None when it has none)."""
    values = [s.value for s in result.samples if not math.isnan(s.value)]
    return max(values) if values else None


class Readings:
    """The demo class's queries over the demo's Prometheus (metric names from the schema, label names and quoting
    from queries.py), and the status line they make."""

    def __init__(self, spec: Spec, request_class: RequestClass, prometheus: LocalPrometheus) -> None:
        self.spec = spec
        self.request_class = request_class
        self.model = spec.models[0]
        self.metrics = spec.metrics
        self.prometheus = prometheus

    def selector(self, with_class: bool) -> str:
        """`{model="...", class="..."}` with the spec's scope, quoted by queries.py."""
        rc = self.request_class.name if with_class else None
        return promql.selector("", Queries(self.spec).raw_matchers(self.model.name, rc))

    def q_waiting(self) -> str:
        """Requests waiting in the engine's queue."""
        return f"sum({self.metrics.requests_waiting}{self.selector(False)})"

    def q_running(self) -> str:
        """Requests in the engine's running batch."""
        return f"sum({self.metrics.requests_running}{self.selector(False)})"

    def q_ttft(self, quantile: float, window: str = "1m") -> str:
        """The TTFT quantile from the histogram the class's SLO reads (the frontend's by default)."""
        terms = Queries(self.spec).histogram_terms(self.request_class, Sli.TTFT, "_bucket", models=[self.model.name])
        rates = " or ".join(f"rate({term.selector}[{window}])" for term in terms)
        return f"histogram_quantile({quantile}, sum by (le) ({rates}))"

    def value(self, expr: str) -> float | None:
        """The query's largest value now; None when it has none or Prometheus did not answer."""
        try:
            return scalar(self.prometheus.query(expr))
        except PrometheusError:
            return None

    def firing_names(self) -> set[str]:
        """The names of the alerts firing now (none when Prometheus did not answer)."""
        try:
            alerts = self.prometheus.alerts()
        except PrometheusError:
            return set()
        return {alert_name(a) for a in alerts if a.get("state") == "firing"}

    def status(self, phase: str, tally: LoadTally) -> str:
        """The live status line: requests done, queue, running batch, TTFT, pending and firing alerts."""
        waiting = self.value(self.q_waiting())
        running = self.value(self.q_running())
        p50 = self.value(self.q_ttft(0.5))
        p95 = self.value(self.q_ttft(0.95))
        pending: list[str] = []
        firing: list[str] = []
        with contextlib.suppress(PrometheusError):
            for alert in self.prometheus.alerts():
                name = str(alert.get("labels", {}).get("alertname", "?"))
                (firing if alert.get("state") == "firing" else pending).append(name)
        text = (
            f"{phase}: {tally.sent} done, {tally.failed} failed | "
            f"waiting {'-' if waiting is None else f'{waiting:g}'}, "
            f"running {'-' if running is None else f'{running:g}'}/{self.model.max_num_seqs} | "
            f"TTFT p50 {fmt_seconds(p50)}, p95 {fmt_seconds(p95)} (1m)"
        )
        if pending:
            text += f" | pending: {', '.join(sorted(set(pending)))}"
        if firing:
            text += f" | firing: {', '.join(sorted(set(firing)))}"
        return text
