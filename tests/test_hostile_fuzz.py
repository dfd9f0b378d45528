"""Fuzzing the class header path and the web-config loader: every input gets the documented answer.

Header path: whatever bytes a client puts in `x-slokit-class` (any size, any encoding, repeated, any key case),
`header_from_scope` yields None or a short ASCII string and the class is always one the spec declares or `other`.
Web-config: mutations of a valid file (with real certificates made here) either load or raise WebConfigError,
never anything else; `BasicAuth.check` answers True/False to any header. bench/fuzz.py runs the same targets at scale.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slokit import schema
from slokit.exporters.classes import MAX_HEADER_BYTES, ClassMap, header_from_scope
from slokit.exporters.webconfig import BasicAuth, WebConfig, WebConfigError, hash_password, load_web_config
from slokit.spec import load_spec
from tests.test_spec_fuzz import WEIRD_VALUES, _parent, _paths
from tests.tls_certs import make_pki

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "tests" / "data" / "engine-spec.yaml")
CLASSES = ClassMap.from_spec(SPEC)
KEY = schema.CLASS_HEADER.encode("latin-1")

HEADER_VALUES = st.one_of(
    st.binary(max_size=200),
    st.binary(min_size=MAX_HEADER_BYTES - 2, max_size=MAX_HEADER_BYTES + 2),
    st.binary(min_size=4000, max_size=20000),
    st.text(max_size=80).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.text(max_size=80).map(lambda t: t.encode("utf-16")),
    st.sampled_from([b"chat", b" chat ", b"CHAT", b"batch\x00", b"chat\r\n", b"\xffchat", b"other", b"", b"\t"]),
)
KEYS = st.sampled_from([KEY, KEY.upper(), b"X-Slokit-Class", b"x-slokit-clas", b"x-slokit-class ", b"", b"\xff" * 14])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(KEYS, HEADER_VALUES), max_size=6), st.none() | st.integers(-(2**70), 2**70),
       st.none() | st.integers(-(2**70), 2**70))  # fmt: skip
def test_hostile_class_headers_always_map_to_a_declared_class_or_other(
    headers: list[tuple[bytes, bytes]], priority: int | None, prompt_tokens: int | None
) -> None:
    value = header_from_scope({"type": "http", "headers": headers})
    assert value is None or (isinstance(value, str) and value.isascii() and len(value) <= MAX_HEADER_BYTES)
    index = CLASSES.classify(value, priority, prompt_tokens)
    assert 0 <= index < len(CLASSES.names)
    assert CLASSES.names[index] in {"chat", "batch", schema.OTHER_CLASS}


def test_the_header_path_is_what_the_docs_say() -> None:
    """Known answers, so the fuzz above is anchored: declared values map, everything else is `other`."""

    def cls(value: bytes) -> str:
        return CLASSES.names[CLASSES.classify(header_from_scope({"headers": [(KEY, value)]}), None, 20)]

    assert cls(b"chat") == "chat" and cls(b"batch") == "batch"
    assert cls(b"CHAT") == cls(b"\xffchat") == cls(b"chat" * 20) == cls(b"nope") == schema.OTHER_CLASS


# -- web-config ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_config(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    pki = make_pki(tmp_path_factory.mktemp("fuzz-pki"))
    doc = {
        "tls_server_config": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca),
            "client_auth_type": "RequireAndVerifyClientCert",
            "min_version": "TLS12",
            "max_version": "TLS13",
            "client_allowed_sans": ["prometheus"],
        },
        "basic_auth_users": {"prometheus": hash_password("pw", rounds=4), "other": hash_password("x", rounds=4)},
        "http_server_config": {"headers": {"X-Frame-Options": "deny", "Strict-Transport-Security": "max-age=1"}},
    }
    return pki.folder, doc


CONFIG_VALUES = st.one_of(
    WEIRD_VALUES,
    st.sampled_from(["TLS13", "TLS10", "NoClientCert", "RequestClientCert", "/dev/null", "/proc/self/status", ".",
                     "$2b$04$" + "a" * 53, "$2b$99$" + "a" * 53, "$2y$10$short", "tls.key", "ca.crt", "a\x00b"]),
)  # fmt: skip


@st.composite
def mutated_config(draw: st.DrawFn, doc: dict[str, Any]) -> str:
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "delete", "extra"]))
        if action == "replace":
            parent[path[-1]] = draw(CONFIG_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(CONFIG_VALUES)
    text = yaml.safe_dump(doc, sort_keys=False)
    if draw(st.booleans()):
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:cut] + draw(st.sampled_from(["", ": :", "[", "\t", "&a *b", "!!python/object:os.system x"]))
    return text


def check_config(folder: Path, text: str | bytes) -> WebConfig | None:
    path = folder / "fuzz-web.yml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        return load_web_config(path)
    except WebConfigError as error:
        message = str(error)
        assert message.startswith(str(path)), message  # every error names the file
        assert "Traceback" not in message
        return None


def test_mutated_web_configs_load_or_raise_web_config_error(base_config: tuple[Path, dict[str, Any]]) -> None:
    folder, doc = base_config
    assert check_config(folder, yaml.safe_dump(doc)) is not None  # the base is valid

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutated_config(doc))
    def run(text: str) -> None:
        config = check_config(folder, text)
        if config is not None:
            for hashed in config.users.values():
                assert hashed.startswith(b"$2")

    run()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_web_config(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    check_config(tmp_path_factory.getbasetemp(), raw)


AUTH = BasicAuth({"prometheus": hash_password("pw", rounds=4).encode()})


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.none(),
    st.text(max_size=200),
    st.binary(max_size=100).map(lambda b: "Basic " + base64.b64encode(b).decode()),
    st.tuples(st.text(max_size=20), st.text(max_size=20)).map(
        lambda up: "Basic " + base64.b64encode(f"{up[0]}:{up[1]}".encode("utf-8", "surrogatepass")).decode()),
    st.sampled_from(["Basic", "Basic ", "Bearer x", "basic cHJvbWV0aGV1czpwdw==", "Basic cHJvbWV0aGV1czpwdw"]),
))  # fmt: skip
def test_basic_auth_answers_any_header_with_a_boolean(header: str | None) -> None:
    result = AUTH.check(header)
    assert isinstance(result, bool)
    good = "Basic " + base64.b64encode(b"prometheus:pw").decode()
    assert result == (header is not None and header.strip() in (good, "basic cHJvbWV0aGV1czpwdw=="))
