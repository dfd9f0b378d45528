"""Mutated specs: loading either succeeds or raises SpecError with a usable location, and never anything else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slokit.spec import Spec, SpecError, load_spec, load_spec_text

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


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


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
    paths = [p for p in _paths(doc) if p]
    alias = draw(st.sampled_from(["none", "alias", "alias-nest"])) if paths else "none"
    if alias == "alias":
        # The same object at two places (or inside itself): the dump writes an anchor (&id001) and aliases (*id001).
        path = draw(st.sampled_from(paths))
        _parent(doc, path)[path[-1]] = _get(doc, draw(st.sampled_from([(), *paths])))
    elif alias == "alias-nest":
        # Lists of aliases of lists of aliases: a few levels load, deeper ones are an alias bomb.
        path = draw(st.sampled_from(paths))
        nested: Any = [draw(WEIRD_VALUES)] * draw(st.integers(min_value=1, max_value=10))
        for _ in range(draw(st.integers(min_value=1, max_value=8))):
            nested = [nested] * draw(st.integers(min_value=2, max_value=10))
        _parent(doc, path)[path[-1]] = nested
    try:
        text = yaml.safe_dump(doc, sort_keys=False)
    except RecursionError:  # an alias mutation made a value contain itself; PyYAML cannot write that
        text = yaml.safe_dump(draw(st.sampled_from(BASES)), sort_keys=False)
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


def alias_bomb(depth: int, fan_out: int = 10) -> str:
    """A "billion laughs" document: each level is `fan_out` aliases of the level before (fan_out**depth values)."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, depth + 1):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * fan_out)}]")
    return "\n".join(lines) + "\n"


def test_a_nested_alias_bomb_is_refused_at_its_line() -> None:
    # Expanding depth 5 in full took seconds and depth 9 never finished; the bound refuses both at once.
    for depth in (5, 9):
        text = alias_bomb(depth)
        with pytest.raises(SpecError) as caught:
            load_spec_text(text, "bomb.yaml")
        (issue,) = caught.value.issues
        assert issue.location.file == "bomb.yaml"
        assert 1 <= issue.location.line <= depth + 1
        assert "aliases expand this document to more than" in issue.message
        assert "write the repeated part out" in issue.message  # what would be right
    # Aliases as people use them (one list written once, referred to twice) still load as the values they stand for.
    base = EXAMPLES[0].read_text()
    first, other = "objective: {percentile: 95, threshold: 500ms}", "objective: {percentile: 95, threshold: 25ms}"
    assert base.count(first) == 1 and base.count(other) == 1
    anchored = base.replace(first, first.replace(": {", ": &obj {")).replace(other, "objective: *obj")
    spec = load_spec_text(anchored, "anchored.yaml")
    assert spec != load_spec_text(base, "anchored.yaml")  # the alias stood for the anchored objective


def test_a_self_referencing_alias_is_refused() -> None:
    with pytest.raises(SpecError, match="aliases expand"):
        load_spec_text("service: a\nloop: &a [*a]\n", "loop.yaml")


def test_every_yaml_reader_refuses_an_alias_bomb(tmp_path: Path) -> None:
    from slokit.backtest.incidents import InputError, load_incidents
    from slokit.exporters.webconfig import WebConfigError, load_web_config
    from slokit.interop.importing import ImportFileError, read_files

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(5))
    spec = load_spec(EXAMPLES[0])
    readers: list[tuple[type[Exception], Any]] = [
        (WebConfigError, lambda: load_web_config(bomb)),
        (ImportFileError, lambda: read_files([bomb])),
        (InputError, lambda: load_incidents(bomb, spec)),
    ]
    for error, read in readers:
        with pytest.raises(error, match=r"bomb\.yaml:\d+:\d+: YAML aliases expand"):
            read()
