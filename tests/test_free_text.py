"""Hostile text in every free-text field of a spec: `validate` refuses it with file:line and the field, or
`generate` writes rules that promtool accepts and whose alert labels are constant strings.

Every string of the example specs (names, descriptions, selector and label values, URLs, headers), plus an
`alerting.labels` value and a selector value, is replaced in turn by text with quotes, backslashes, newlines,
control and format characters, unicode, Go template delimiters and PromQL fragments. Prometheus expands
`{{ ... }}` in alert labels and annotations at every evaluation: a label holding one would change while the alert
fires, and so would its identity.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slokit.generate import rules
from slokit.spec import SpecError, load_spec_text

ROOT = Path(__file__).resolve().parent.parent
BASES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]
for base in BASES:  # fields the examples leave out but a team writes
    base.setdefault("alerting", {}).setdefault("labels", {"team": "serving"})
    base.setdefault("selector", {}).setdefault("cluster", "eu-1")

HOSTILE = [
    'a"b',
    "a\\b",
    "a\nb",
    "a\tb",
    "a\x00b",
    "a\u200bb",
    "a\u2028b",
    "ünïcødé-模型",
    "{{ $value }}",
    '{{ printf "%s" "x" }}',
    "x}}",
    "{{x",
    "rate(x[5m]) or vector(1)",
    '"} or vector(1) or {a="',
    "`x`",
    "<script>alert(1)</script>",
    "a b",
]

# slokit's own annotation templates: the only `{{ ... }}` an alert may carry, and never in a label.
OWN_TEMPLATE = re.compile(
    r"\{\{ (\$value( \| (printf \"%\.2f\"|humanizePercentage|humanizeDuration))?|\$labels\.\w+) \}\}"
)


def _string_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_string_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_string_paths(value, (*prefix, index)))
    elif isinstance(node, str) and prefix[0] not in ("version", "source", "window"):
        out.append(prefix)
    return out


CASES = [(i, path) for i, base in enumerate(BASES) for path in _string_paths(base)]


def _with(doc: dict[str, Any], path: tuple[Any, ...], text: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = text
    return doc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), text=st.sampled_from(HOSTILE), where=st.sampled_from(["whole", "inside"]))
def test_hostile_text_is_refused_with_its_place_or_stays_constant(
    case: tuple[int, tuple[Any, ...]], text: str, where: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    index, path = case
    base = BASES[index]
    original: Any = base
    for part in path:
        original = original[part]
    value = text if where == "whole" else f"{original}{text}"
    doc = _with(base, path, value)
    source = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    try:
        spec = load_spec_text(source, "hostile.yaml")
    except SpecError as error:
        for issue in error.issues:
            assert issue.location.line >= 1 and str(issue).startswith("hostile.yaml:"), str(issue)
        return
    groups = [g.to_data() for g in rules.rule_groups(spec)]
    for group in groups:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            for label, label_value in rule["labels"].items():
                assert "{{" not in label_value and "}}" not in label_value, (path, label, label_value)
            for name, annotation in rule["annotations"].items():
                rest = OWN_TEMPLATE.sub("", annotation)
                assert "{{" not in rest and "}}" not in rest, (path, name, annotation)
    out = tmp_path_factory.mktemp("hostile")
    (out / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, allow_unicode=True))
    checked = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=out, capture_output=True, text=True)
    assert checked.returncode == 0, (path, value, checked.stdout[-2000:], checked.stderr[-2000:])


def test_a_template_in_an_alert_label_is_refused_where_it_is_written() -> None:
    doc = _with(BASES[0], ("alerting", "labels", "team"), "{{ $value }}")
    with pytest.raises(SpecError) as caught:
        load_spec_text(yaml.safe_dump(doc, sort_keys=False), "spec.yaml")
    (issue,) = caught.value.issues
    assert issue.field == "alerting.labels.team" and "template delimiter" in issue.message


def test_a_newline_in_a_model_name_is_refused() -> None:
    doc = copy.deepcopy(BASES[0])
    doc["models"][0]["name"] = "llama\n3"
    for rc in doc["classes"]:
        if "models" in rc:
            rc["models"] = ["llama\n3"]
    with pytest.raises(SpecError) as caught:
        load_spec_text(yaml.safe_dump(doc, sort_keys=False), "spec.yaml")
    assert any(i.field == "models[0].name" and "control character" in i.message for i in caught.value.issues)
