"""Mutated specs: loading either succeeds or raises SpecError with a usable location, and never anything else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slokit.spec import Spec, SpecError, load_spec_text

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
# One base also carries every optional block the examples leave out, so mutations reach those readers too.
BASES.append({
    **BASES[0],
    "gpu_exporter": {"web_config_secret": "slokit-gpu-web", "server_name": "gpu.example", "scheme": "https",
                     "client_cert_secret": "prom-client", "basic_auth_secret": "prom-basic"},
})  # fmt: skip

WEIRD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["500ms", "1.5s", "2m", "28d", "-1s", "1e400s", "p99", "vllm", "slokit", "", "0", "nan"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_paths(value, (*prefix, index)))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "delete", "extra", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(WEIRD_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "extra" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(WEIRD_VALUES)
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
    text = yaml.safe_dump(doc, sort_keys=False)
    if draw(st.booleans()):
        # Break the text itself: cut it, or splice in YAML syntax.
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        junk = draw(st.sampled_from(["", ": :", "[", "{a: 1", "\t", "&a *b", "!!binary x", "- - -", "'", "? x"]))
        text = text[:cut] + junk + text[cut:]
    return text


def _check(text: str) -> bool:
    """Load a fuzzed spec; True if it loaded, False if it raised a well-formed SpecError; anything else fails."""
    try:
        spec = load_spec_text(text, "fuzz.yaml")
    except SpecError as error:
        assert error.issues, "SpecError without issues"
        lines = text.count("\n") + 2
        for issue in error.issues:
            assert issue.location.file == "fuzz.yaml"
            assert 1 <= issue.location.line <= lines, issue
            assert issue.location.column >= 1
            assert issue.message
        return False
    assert isinstance(spec, Spec)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_specs_raise_only_spec_errors(text: str) -> None:
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_spec_errors(text: str) -> None:
    _check(text)
