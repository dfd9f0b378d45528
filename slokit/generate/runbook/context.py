"""The state one runbook is built in: its spec and dashboards, selectors from `queries.py`, and the facts per model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from markupsafe import Markup

from slokit import promql, schema
from slokit.catalog import GPUS
from slokit.generate import dashboards, debug_steps
from slokit.generate.queries import Queries
from slokit.generate.runbook.markdown import link
from slokit.generate.runbook.model import RATE_WINDOW, Guide, ModelFacts
from slokit.plan import roofline
from slokit.schema import Sli
from slokit.spec import Model, Spec

# What the fleet's debugging guide writes for the model an alert names, when the spec has more than one: the reader
# replaces it with the alert's `model` label (a string PromQL parses, which matches no series until replaced).
MODEL_PLACEHOLDER: Final = "<model>"


@dataclass
class Context:
    """One runbook being built: the spec, its dashboards (for panel links), and what is computed once per model and
    per scope."""

    spec: Spec
    built: dashboards.Built
    facts: dict[str, ModelFacts] = field(default_factory=dict)
    guide: Guide | None = None  # the fleet's one debugging guide, built on first use

    @property
    def m(self) -> schema.SourceMetrics:
        return self.spec.metrics

    def raw(self, model: str | None, request_class: str | None = None) -> str:
        """Matchers on raw metrics for one model (its deployment scope, model and class), from queries.py.

        Without a model: the scope every model shares.
        """
        q = Queries(self.spec)
        matchers = q.raw_matchers(model, request_class) if model is not None else q.common_selector()
        return matchers_text(matchers)

    def series(self, model: str | None, request_class: str | None = None) -> debug_steps.Series:
        """`debug_steps`' queries over one model's (and class's) raw series and the runbook's rate window."""
        matchers = self.raw(model, request_class)
        return debug_steps.Series(lambda metric: f"{metric}{{{matchers}}}", RATE_WINDOW)

    @property
    def one_model(self) -> str:
        """The model the debugging guide's queries filter by: the spec's only model by name, else the placeholder
        the reader replaces with the alert's `model` label."""
        return self.spec.models[0].name if len(self.spec.models) == 1 else MODEL_PLACEHOLDER

    @property
    def placeholder(self) -> bool:
        """Whether the guide's queries carry `MODEL_PLACEHOLDER` (more than one model, and a model label)."""
        return self.one_model == MODEL_PLACEHOLDER and self.m.model_label is not None

    def raw_one(self) -> str:
        """Matchers on raw metrics for the model an alert names: the scope every model shares and the model label
        (`one_model`: the name, or the placeholder)."""
        if not self.placeholder:
            return self.raw(self.spec.models[0].name if self.spec.models else None)
        q = Queries(self.spec)
        assert self.m.model_label is not None
        return matchers_text([*q.common_selector(), promql.eq(self.m.model_label, MODEL_PLACEHOLDER)])

    def series_one(self) -> debug_steps.Series:
        """`debug_steps`' queries over the raw series of the model an alert names (see `raw_one`)."""
        matchers = self.raw_one()
        return debug_steps.Series(lambda metric: f"{metric}{{{matchers}}}", RATE_WINDOW)

    def rec_one(self) -> str:
        """Matchers on slokit's recorded series for the model an alert names."""
        model = self.spec.models[0].name if len(self.spec.models) == 1 else MODEL_PLACEHOLDER
        return self.rec(model)

    def rec(self, model: str | None, request_class: str | None = None, sli: Sli | None = None) -> str:
        return matchers_text(Queries(self.spec).recorded_matchers(model, request_class, sli))

    def by(self, *extra: str) -> str:
        """Grouping labels; per engine always means per replica (replica labels before `engine`)."""
        labels = [self.m.model_label] if self.m.model_label is not None else []  # None: one model (TGI)
        for label in extra:
            if label == self.m.engine_label:
                labels.extend(self.spec.alerting.replica_labels)
            labels.append(label)
        return ", ".join(labels)

    def model_facts(self, model: Model) -> ModelFacts:
        if model.name in self.facts:
            return self.facts[model.name]
        classes = self.spec.classes_on(model.name)
        try:
            plan = roofline.plan_for_model(self.spec, model)
        except roofline.PlanError:
            plan = None
        expected = plan.decode_tokens_per_second_per_engine if plan is not None else None
        itl = [
            slo.objective.threshold
            for rc in classes
            for sli, slo in rc.slos.items()
            if sli in (Sli.ITL, Sli.TPOT) and slo.objective is not None
        ]
        ttft = [
            slo.objective.threshold
            for rc in classes
            for sli, slo in rc.slos.items()
            if sli is Sli.TTFT and slo.objective is not None
        ]
        gpu = GPUS.get(model.gpu) if model.gpu is not None else None
        facts = ModelFacts(
            model=model,
            classes=classes,
            expected_decode=expected,
            max_batch=plan.max_batch if plan is not None else None,
            batch_cap=plan.batch_cap if plan is not None else None,
            fp8_kv_max_batch=plan.fp8_kv.max_batch if plan is not None and plan.fp8_kv is not None else None,
            hbm_bandwidth=gpu.hbm_bandwidth_bytes_per_second if gpu is not None else None,
            itl_target=min(itl) if itl else None,
            ttft_threshold=min(ttft) if ttft else None,
            decode_curve=roofline.expected_decode_curve(self.spec, model),
        )
        self.facts[model.name] = facts
        return facts

    def panel(self, key: tuple[str, ...], variables: Mapping[str, str]) -> Markup | None:
        ref = self.built.refs.get(key)
        if ref is None:
            return None
        base = self.spec.alerting.grafana_url.rstrip("/")
        return link(f"{ref.dashboard_title} › {ref.title}", base + ref.path(variables))

    def variables(self, model: str | None, request_class: str | None) -> dict[str, str]:
        out = {"service": self.spec.service}
        if model is not None:
            out["model"] = model
        if request_class is not None:
            out["class"] = request_class
        return out


def matchers_text(matchers: Sequence[promql.Matcher]) -> str:
    return ", ".join(f"{label}{op}{promql.quote(value)}" for label, op, value in matchers)
