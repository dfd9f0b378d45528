"""The web-config file of `--web.config.file`: TLS, basic auth and response headers, as Go exporters read it.

The format is the Prometheus exporter toolkit's (github.com/prometheus/exporter-toolkit, docs/web-configuration.md), so
one file, one Secret and one habit serve node-exporter, dcgm-exporter and slokit's GPU sidecar alike:

    tls_server_config:
      cert_file: tls.crt            # relative paths are relative to this file's folder, as in the toolkit
      key_file: tls.key
      client_ca_file: ca.crt        # optional: verify client certificates against this CA
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12
    basic_auth_users:
      prometheus: $2b$12$...        # bcrypt hashes only
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000

Everything is checked when the sidecar starts: a missing or unreadable file, a certificate that does not load, a key
that does not match it, a plain-text password, an unknown key. Each fails with `WebConfigError` naming the file,
the field and what would be right, so a bad Secret stops the rollout instead of serving plain HTTP by surprise.
bcrypt is imported only here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import bcrypt
import yaml

from slokit.yamlloc import YamlLocationError, safe_load_all_bounded

# The toolkit's names for Go's tls.ClientAuthType. Python's ssl module verifies every client certificate it asks for,
# so the two "accept any certificate" modes cannot be honoured and are refused rather than silently tightened.
CLIENT_AUTH_TYPES: Final = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH: Final = ("RequestClientCert", "RequireAnyClientCert")
TLS_VERSIONS: Final = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# The response headers the toolkit lets a web-config set (anything else is refused there too).
ALLOWED_HEADERS: Final = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
)
TOP_KEYS: Final = ("tls_server_config", "basic_auth_users", "http_server_config")
TLS_KEYS: Final = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
)
# Keys the toolkit knows that slokit reads but does not act on; accepted so a shared file still loads.
TLS_IGNORED: Final = ("cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
HTTP_KEYS: Final = ("headers", "http2")
BCRYPT_RE: Final = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
MAX_FILE_BYTES: Final = 1 << 20  # a web-config is a few hundred bytes; refuse to parse a huge file
HASH_HINT: Final = (
    "store a bcrypt hash, e.g. from `htpasswd -nBC 12 '' | tr -d ':\\n'` or "
    "`python -c 'import bcrypt,getpass; print(bcrypt.hashpw(getpass.getpass().encode(), bcrypt.gensalt()).decode())'`"
)


class WebConfigError(Exception):
    """A web-config that cannot be served: the message names the file, the field and the fix."""


@dataclass(frozen=True)
class TlsSettings:
    """The server side of TLS, with paths already resolved against the config file's folder."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None
    client_auth_type: str
    min_version: str
    max_version: str | None
    client_allowed_sans: tuple[str, ...]


@dataclass(frozen=True)
class WebConfig:
    """A validated web-config. `tls` None means plain HTTP; no users means no authentication."""

    path: str = ""
    tls: TlsSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # settings the toolkit knows that were given but have no effect here

    def ssl_context(self) -> ssl.SSLContext | None:
        """A server-side TLS context, or None for plain HTTP. Raises WebConfigError when files do not load."""
        if self.tls is None:
            return None
        return _context(self.tls, self.path)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
    return kinds.get(type(value), type(value).__name__)


def _mapping(value: Any, where: str, allowed: tuple[str, ...], file: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{file}: {where} must be a mapping (key: value), not {_kind(value)}")
    for key in value:
        if not isinstance(key, str) or key not in allowed:
            raise WebConfigError(f"{file}: {where}: unknown key {key!r}; expected one of: {', '.join(allowed)}")
    return value


def _text(value: Any, where: str, file: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WebConfigError(f"{file}: {where} must be a non-empty string, not {_kind(value)}")
    if "\x00" in value:
        raise WebConfigError(f"{file}: {where} contains a NUL character")
    return value


def load_web_config(path: Path | str) -> WebConfig:
    """Read and check a web-config file, including that its certificates and key load together."""
    file = str(path)
    try:
        raw = Path(path).read_bytes()[: MAX_FILE_BYTES + 1]
    except FileNotFoundError:
        raise WebConfigError(f"{file}: no such file (--web.config.file)") from None
    except IsADirectoryError:
        raise WebConfigError(f"{file}: is a folder; --web.config.file wants the YAML file inside it") from None
    except OSError as error:
        raise WebConfigError(f"{file}: cannot read it: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"{file}: larger than {MAX_FILE_BYTES} bytes; a web-config is a short YAML file")
    config = parse_web_config(raw, file, base=Path(path).parent)
    config.ssl_context()  # load the certificates now: a bad Secret fails the start, not the first scrape
    return config


def parse_web_config(raw: bytes | str, file: str = "web-config", base: Path | None = None) -> WebConfig:
    """Check the structure of a web-config text; certificate files are resolved against `base` but not loaded."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as error:
        raise WebConfigError(f"{file}: not UTF-8 text (byte {error.start}); a web-config is YAML") from None
    try:
        documents = safe_load_all_bounded(text, file)
    except YamlLocationError as error:
        raise WebConfigError(f"{error.location}: {error.message}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise WebConfigError(f"{file}: not valid YAML{where}: {problem}") from None
    except (RecursionError, ValueError) as error:  # deeply nested or otherwise pathological input
        raise WebConfigError(f"{file}: not a usable YAML document: {type(error).__name__}") from None
    if len(documents) > 1:
        raise WebConfigError(f"{file}: holds {len(documents)} YAML documents; a web-config is one")
    data = documents[0] if documents else None
    top = _mapping(data, "the file", TOP_KEYS, file)
    folder = base if base is not None else Path(".")
    tls = _tls(top.get("tls_server_config"), file, folder)
    users = _users(top.get("basic_auth_users"), file)
    http = _mapping(top.get("http_server_config"), "http_server_config", HTTP_KEYS, file)
    headers = _headers(http, file)
    tls_given = top.get("tls_server_config") or {}
    ignored = tuple(f"tls_server_config.{key}" for key in TLS_IGNORED if key in tls_given)
    if "http2" in http:
        ignored += ("http_server_config.http2",)  # the sidecar speaks HTTP/1.1 only, whatever it says
    return WebConfig(path=file, tls=tls, users=users, headers=headers, ignored=ignored)


def _tls(value: Any, file: str, folder: Path) -> TlsSettings | None:
    data = _mapping(value, "tls_server_config", TLS_KEYS, file)
    if not data:
        return None
    where = "tls_server_config"
    for key in ("cert_file", "key_file"):
        if key not in data:
            raise WebConfigError(f"{file}: {where}.{key} is missing; TLS needs both cert_file and key_file")

    def resolve(key: str) -> Path:
        given = Path(_text(data[key], f"{where}.{key}", file))
        return given if given.is_absolute() else folder / given

    ca = resolve("client_ca_file") if data.get("client_ca_file") is not None else None
    auth = data.get("client_auth_type")
    if auth is None:
        auth = "RequireAndVerifyClientCert" if ca is not None else "NoClientCert"  # the toolkit's default
    auth = _text(auth, f"{where}.client_auth_type", file)
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError(
            f"{file}: {where}.client_auth_type {auth!r} accepts client certificates without verifying them, which "
            "slokit does not support; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
        )
    if auth not in CLIENT_AUTH_TYPES:
        raise WebConfigError(f"{file}: {where}.client_auth_type {auth!r} is not one of: {', '.join(CLIENT_AUTH_TYPES)}")
    if auth != "NoClientCert" and ca is None:
        raise WebConfigError(f"{file}: {where}.client_auth_type {auth} needs client_ca_file to verify clients against")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", None)):
        chosen = data.get(key, default)
        if chosen is not None:
            chosen = _text(chosen, f"{where}.{key}", file)
            if chosen not in TLS_VERSIONS:
                raise WebConfigError(f"{file}: {where}.{key} {chosen!r} is not one of: {', '.join(TLS_VERSIONS)}")
        versions[key] = chosen
    low, high = versions["min_version"], versions["max_version"]
    if low is not None and high is not None and TLS_VERSIONS[low] > TLS_VERSIONS[high]:
        raise WebConfigError(f"{file}: {where}.min_version {low} is above max_version {high}")
    sans_raw = data.get("client_allowed_sans") or []
    if not isinstance(sans_raw, list):
        raise WebConfigError(f"{file}: {where}.client_allowed_sans must be a list of names, not {_kind(sans_raw)}")
    sans = tuple(_text(s, f"{where}.client_allowed_sans[{i}]", file) for i, s in enumerate(sans_raw))
    if sans and ca is None:
        raise WebConfigError(f"{file}: {where}.client_allowed_sans needs client_ca_file (and verified client certs)")
    return TlsSettings(resolve("cert_file"), resolve("key_file"), ca, auth, low or "TLS12", high, sans)


def _users(value: Any, file: str) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{file}: basic_auth_users must be a mapping of user: bcrypt-hash, not {_kind(value)}")
    users: dict[str, bytes] = {}
    for user, hashed in value.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(f"{file}: basic_auth_users: {user!r} is not a user name (non-empty, no ':')")
        where = f"basic_auth_users.{user}"
        if not isinstance(hashed, str) or not hashed:
            raise WebConfigError(f"{file}: {where} must be a bcrypt hash string, not {_kind(hashed)}; {HASH_HINT}")
        if not BCRYPT_RE.match(hashed):
            raise WebConfigError(
                f"{file}: {where} is not a bcrypt hash (expected $2b$<cost>$ and 53 more characters); a plain-text "
                f"password is refused: {HASH_HINT}"
            )
        users[user] = hashed.encode("ascii")
    return users


def _headers(data: dict[str, Any], file: str) -> dict[str, str]:
    raw = data.get("headers")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"{file}: http_server_config.headers must be a mapping, not {_kind(raw)}")
    allowed = {h.lower(): h for h in ALLOWED_HEADERS}
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or name.lower() not in allowed:
            raise WebConfigError(
                f"{file}: http_server_config.headers: {name!r} cannot be set; allowed: {', '.join(ALLOWED_HEADERS)}"
            )
        text = _text(value, f"http_server_config.headers.{name}", file)
        if any(c in text for c in "\r\n") or not text.isprintable():
            raise WebConfigError(f"{file}: http_server_config.headers.{name} has control characters")
        out[allowed[name.lower()]] = text
    return out


def _context(tls: TlsSettings, file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.minimum_version = TLS_VERSIONS[tls.min_version]
        if tls.max_version is not None:
            context.maximum_version = TLS_VERSIONS[tls.max_version]
    except (ValueError, ssl.SSLError) as error:
        raise WebConfigError(f"{file}: tls_server_config: this OpenSSL cannot use that TLS version: {error}") from None
    files = (("cert_file", tls.cert_file), ("key_file", tls.key_file), ("client_ca_file", tls.client_ca_file))
    for label, path in files:
        if path is None:
            continue
        try:
            with path.open("rb"):
                pass
        except FileNotFoundError:
            raise WebConfigError(f"{file}: tls_server_config.{label}: {path}: no such file") from None
        except OSError as error:
            raise WebConfigError(
                f"{file}: tls_server_config.{label}: {path}: cannot read it: {error.strerror or error}"
            ) from None
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as error:
        raise WebConfigError(
            f"{file}: tls_server_config: {tls.cert_file} and {tls.key_file} do not load as a PEM certificate and "
            f"its private key ({error.reason or error}); check both are PEM and that the key matches the certificate"
        ) from None
    except (OSError, ValueError) as error:
        raise WebConfigError(f"{file}: tls_server_config: cannot load {tls.cert_file}: {error}") from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(tls.client_ca_file))
        except (ssl.SSLError, OSError, ValueError) as error:
            raise WebConfigError(
                f"{file}: tls_server_config.client_ca_file: {tls.client_ca_file} does not load as PEM CA "
                f"certificates ({getattr(error, 'reason', None) or error})"
            ) from None
    context.verify_mode = CLIENT_AUTH_TYPES[tls.client_auth_type]
    return context


def client_sans(cert: dict[str, Any] | None) -> set[str]:
    """DNS names, IP addresses, emails and URIs of a verified peer certificate (`SSLSocket.getpeercert()`)."""
    if not cert:
        return set()
    return {str(value) for _, value in cert.get("subjectAltName", ())}


class BasicAuth:
    """Checks `Authorization: Basic` headers against the config's bcrypt hashes.

    bcrypt costs tens of milliseconds on purpose; Prometheus sends the same credentials every scrape, so a verified
    (user, password) pair is remembered under a keyed digest (never the password itself), bounded in count. Failures
    are not remembered, so a wrong password always pays the full bcrypt cost.
    """

    CACHE_SIZE: Final = 64

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = users
        self._key = os.urandom(32)  # per process: the cache keys mean nothing outside it
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether any user is configured (no users: every request is let in)."""
        return bool(self._users)

    def check(self, header: str | None) -> bool:
        """Whether the header carries a configured user's right password. Never raises on hostile input."""
        if not self._users:
            return True
        if not header or len(header) > 4096:
            return False
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(":")
        hashed = self._users.get(user)
        if not sep or hashed is None:
            return False
        digest = hmac.new(self._key, decoded.encode("utf-8"), hashlib.sha256).digest()
        with self._lock:
            if digest in self._ok:
                self._ok.move_to_end(digest)
                return True
        try:
            good = bcrypt.checkpw(password.encode("utf-8"), hashed)
        except ValueError:
            return False
        if good:
            with self._lock:
                self._ok[digest] = None
                while len(self._ok) > self.CACHE_SIZE:
                    self._ok.popitem(last=False)
        return good


def hash_password(password: str, rounds: int = 12) -> str:
    """A bcrypt hash for basic_auth_users (used by tests and by people writing a web-config)."""
    return bcrypt.hashpw(password.encode("utf-8"), bcrypt.gensalt(rounds)).decode("ascii")
