"""The rule groups as Kubernetes objects: a PrometheusRule for Prometheus, Thanos and Mimir that passes the upstream
CRD schema with unknown keys forbidden, and for `--engine victoriametrics` a VMRule holding only fields the VMRule
type defines (with the `params` a PrometheusRule cannot hold), never a PrometheusRule.

The VMRule schema below is written from the VictoriaMetrics operator's Go type (repository
VictoriaMetrics/operator, api/operator/v1beta1/vmrule_types.go at commit d0d258c86b5aed0df47dd2b3c52c5a97e40e6b48:
VMRuleSpec, RuleGroup and Rule with their json tags; the CRD generated from it has the same fields), with every
object closed to other keys as `kubectl apply --validate=strict` would.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from slokit.generate import generate_all
from slokit.generate.engines import Engine
from slokit.spec import Spec, load_spec
from tests.test_k8s import strict_crd_schema, validate_custom

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
VMRULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "operator.victoriametrics.com/v1beta1"},
        "kind": {"const": "VMRule"},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
                "namespace": {"type": "string"},
                "labels": _STRINGS,
                "annotations": _STRINGS,
            },
        },
        "spec": {  # VMRuleSpec
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {  # RuleGroup
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {  # Rule
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "properties": {
                                        "record": {"type": "string"},
                                        "alert": {"type": "string"},
                                        "expr": {"type": "string"},
                                        "debug": {"type": "boolean"},
                                        "for": {"type": "string"},
                                        "keep_firing_for": {"type": "string"},
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                        "update_entries_limit": {"type": "integer"},
                                    },
                                },
                            },
                            "limit": {"type": "integer"},
                            "eval_offset": {"type": "string"},
                            "eval_delay": {"type": "string"},
                            "eval_alignment": {"type": "boolean"},
                            "concurrency": {"type": "integer"},
                            "labels": _STRINGS,
                            "tenant": {"type": "string"},
                            "params": {  # url.Values
                                "type": "object",
                                "additionalProperties": {"type": "array", "items": {"type": "string"}},
                            },
                            "type": {"type": "string"},
                            "headers": {"type": "array", "items": {"type": "string"}},
                            "notifier_headers": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                }
            },
        },
    },
}


def _go_patterns(node: Any) -> Any:
    """The schema with RE2 patterns Python's re reads differently rewritten: `^(?i)x` (flags after the anchor,
    as the PrometheusRule CRD writes partial_response_strategy) is `(?i)^x` in Python."""
    if isinstance(node, dict):
        out = {k: _go_patterns(v) for k, v in node.items()}
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)") :]
        return out
    if isinstance(node, list):
        return [_go_patterns(item) for item in node]
    return node


def prometheus_rule_errors(data: Any) -> list[str]:
    """The PrometheusRule against the upstream CRD's openAPIV3Schema with unknown keys forbidden."""
    schema = _go_patterns(strict_crd_schema("PrometheusRule", "v1"))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(data), key=str)
    return [f"{e.message} at {list(e.absolute_path)}" for e in errors]


def _objects(spec: Spec, engine: Engine) -> dict[str, Any]:
    return {p: yaml.safe_load(t) for p, t in generate_all([spec], engine).items() if p.startswith("exporters/")}


def _vmrule_errors(data: Any) -> list[str]:
    errors = list(jsonschema.Draft7Validator(VMRULE_SCHEMA).iter_errors(data))
    problems = [f"{e.message} at {list(e.absolute_path)}" for e in errors]
    # What the operator's webhook checks beyond the schema (VMRule.Validate): unique group names, and each rule a
    # record or an alert, not both.
    groups = data.get("spec", {}).get("groups", [])
    names = [g.get("name") for g in groups]
    if len(names) != len(set(names)):
        problems.append("duplicate group name")
    for group in groups:
        for rule in group.get("rules", []):
            if bool(rule.get("record")) == bool(rule.get("alert")):
                problems.append(f"rule in {group.get('name')} is not exactly one of record and alert")
    return problems


@pytest.fixture(scope="module")
def specs() -> list[Spec]:
    return [load_spec(path) for path in EXAMPLES]


def test_victoriametrics_writes_a_vmrule_and_no_prometheusrule(specs: list[Spec]) -> None:
    for spec in specs:
        objects = _objects(spec, Engine.VICTORIAMETRICS)
        assert f"exporters/{spec.service}.prometheusrule.yaml" not in objects
        assert not [d for d in objects.values() if d["kind"] == "PrometheusRule"]
        vmrule = objects[f"exporters/{spec.service}.vmrule.yaml"]
        assert _vmrule_errors(vmrule) == [], spec.service
        rule_file = yaml.safe_load(generate_all([spec], Engine.VICTORIAMETRICS)[f"rules/{spec.service}.rules.yaml"])
        assert vmrule["spec"]["groups"] == rule_file["groups"]  # exactly what vmalert -dryRun checked
        assert all(g["params"] == {"nocache": ["1"]} and g["interval"] for g in vmrule["spec"]["groups"])


def test_the_vmrule_schema_rejects_unknown_and_misplaced_keys(specs: list[Spec]) -> None:
    vmrule = _objects(specs[0], Engine.VICTORIAMETRICS)[f"exporters/{specs[0].service}.vmrule.yaml"]
    for where, key in [((), "status2"), (("spec",), "group"), (("spec", "groups", 0), "partial_response_strategy"),
                       (("spec", "groups", 0, "rules", 0), "keepFiringFor"), (("metadata",), "label")]:  # fmt: skip
        broken = copy.deepcopy(vmrule)
        node: Any = broken
        for part in where:
            node = node[part]
        node[key] = "x"
        assert _vmrule_errors(broken), (where, key)
    broken = copy.deepcopy(vmrule)
    broken["spec"]["groups"][0]["params"] = {"nocache": "1"}  # url.Values: lists of strings
    assert _vmrule_errors(broken)


@pytest.mark.parametrize("engine", [Engine.PROMETHEUS, Engine.THANOS, Engine.MIMIR])
def test_other_engines_write_a_prometheusrule_the_crd_accepts_strictly(specs: list[Spec], engine: Engine) -> None:
    for spec in specs:
        objects = _objects(spec, engine)
        assert f"exporters/{spec.service}.vmrule.yaml" not in objects
        rule = objects[f"exporters/{spec.service}.prometheusrule.yaml"]
        assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
        assert prometheus_rule_errors(rule) == [], spec.service
        assert validate_custom(rule) == []


def test_the_prometheusrule_crd_has_no_params_which_is_why_vmalert_gets_a_vmrule(specs: list[Spec]) -> None:
    """What --engine victoriametrics wrote before: its groups in a PrometheusRule, refused by the strict CRD."""
    vmrule = _objects(specs[0], Engine.VICTORIAMETRICS)[f"exporters/{specs[0].service}.vmrule.yaml"]
    as_prometheus_rule = {**vmrule, "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule"}
    assert any("'params' was unexpected" in error for error in prometheus_rule_errors(as_prometheus_rule))
