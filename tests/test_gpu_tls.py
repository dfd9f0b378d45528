"""TLS, basic auth and the request limits of the GPU sidecar, over real sockets with a CA made in the test."""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slokit import schema as S
from slokit.cli import app
from slokit.exporters.gpu import server as gpu_server
from slokit.exporters.gpu.poller import GpuPoller
from slokit.exporters.gpu.server import GpuServer
from slokit.exporters.webconfig import WebConfigError, hash_password, load_web_config
from slokit.local.procs import LOOPBACK, ManagedProcess, free_port
from tests.test_gpu_server import A, _slokit
from tests.test_nvml_fake import FakeGpu, FakeNvml
from tests.tls_certs import Pki, make_pki

PASSWORD = "s3cret-scrape"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def write_config(pki: Pki, *, client_auth: str = "RequireAndVerifyClientCert", users: bool = True) -> Path:
    lines = [
        "tls_server_config:",
        "  cert_file: tls.crt",  # relative to the config's folder, as in the exporter toolkit
        "  key_file: tls.key",
        "  client_ca_file: ca.crt",
        f"  client_auth_type: {client_auth}",
        "  min_version: TLS12",
        "http_server_config:",
        "  headers:",
        "    Strict-Transport-Security: max-age=31536000",
    ]
    if users:
        lines += ["basic_auth_users:", f"  prometheus: {hash_password(PASSWORD, rounds=4)}"]
    path = pki.folder / f"web-{client_auth}-{users}.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def client_context(pki: Pki, *, cert: bool = True, other: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        if other:
            ctx.load_cert_chain(pki.other_client_cert, pki.other_client_key)
        else:
            ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return ctx


def fetch(
    port: int, path: str, ctx: ssl.SSLContext, password: str | None = PASSWORD, user: str = "prometheus"
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPSConnection(LOOPBACK, port, context=ctx, timeout=30)
    try:
        headers = {}
        if password is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[GpuServer]:
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0)
    poller.poll_once()
    server = GpuServer(poller, LOOPBACK, 0, load_web_config(write_config(pki)))
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_right_client_cert_and_password_get_metrics(tls_server: GpuServer, pki: Pki) -> None:
    status, headers, body = fetch(tls_server.port, "/metrics", client_context(pki))
    assert status == 200
    assert f'{S.GPU_UP}{{UUID="{A}"}} 1.0' in body
    assert f"{S.GPU_SNAPSHOT_AGE} " in body
    assert headers["Strict-Transport-Security"] == "max-age=31536000"


def test_wrong_or_missing_password_is_401(tls_server: GpuServer, pki: Pki) -> None:
    ctx = client_context(pki)
    for user, password in (("prometheus", "wrong"), ("prometheus", None), ("nobody", PASSWORD), ("prometheus", "")):
        status, headers, body = fetch(tls_server.port, "/metrics", ctx, password=password, user=user)
        assert status == 401, (user, password)
        assert headers["WWW-Authenticate"].startswith("Basic ")
        assert S.GPU_UP not in body
    # The right password still works after failures (and after being cached).
    assert fetch(tls_server.port, "/metrics", ctx)[0] == 200
    assert fetch(tls_server.port, "/metrics", ctx)[0] == 200


def test_healthz_needs_tls_but_no_password(tls_server: GpuServer, pki: Pki) -> None:
    status, _, body = fetch(tls_server.port, "/healthz", client_context(pki), password=None)
    assert (status, body) == (200, "ok\n")
    assert fetch(tls_server.port, "/", client_context(pki), password=None)[0] == 401


def test_plain_http_is_refused(tls_server: GpuServer) -> None:
    conn = http.client.HTTPConnection(LOOPBACK, tls_server.port, timeout=30)
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/metrics")
        conn.getresponse().read()
    conn.close()


def test_no_client_cert_or_an_untrusted_one_fails_the_handshake(tls_server: GpuServer, pki: Pki) -> None:
    for ctx in (client_context(pki, cert=False), client_context(pki, other=True)):
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            fetch(tls_server.port, "/metrics", ctx)
    # A client that does not trust the server's CA refuses it too.
    with pytest.raises(ssl.SSLCertVerificationError):
        fetch(tls_server.port, "/metrics", ssl.create_default_context())


def test_verify_if_given_lets_a_certless_client_in_with_a_password(pki: Pki) -> None:
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0)
    server = GpuServer(poller, LOOPBACK, 0, load_web_config(write_config(pki, client_auth="VerifyClientCertIfGiven")))
    server.start()
    try:
        assert fetch(server.port, "/metrics", client_context(pki, cert=False))[0] == 200
        assert fetch(server.port, "/metrics", client_context(pki, cert=False), password="x")[0] == 401
    finally:
        server.close()


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.fixture
def plain_server() -> Iterator[GpuServer]:
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0)
    server = GpuServer(poller, LOOPBACK, 0)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_request_limits(plain_server: GpuServer) -> None:
    port = plain_server.port
    long_line = b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert raw_exchange(port, long_line).startswith(b"HTTP/1.1 414")
    big_headers = b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(30))
    assert raw_exchange(port, big_headers + b"\r\n").startswith(b"HTTP/1.1 431")
    post = b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert raw_exchange(port, post).startswith(b"HTTP/1.1 405")
    with_body = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    assert raw_exchange(port, with_body).startswith(b"HTTP/1.1 413")
    garbage = b"\x16\x03\x01\x00\xff" + os.urandom(200) + b"\r\n\r\n"
    assert raw_exchange(port, garbage).startswith(b"HTTP/1.1 400")
    # After all that the server still answers.
    ok = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200") and S.GPU_UP.encode() in ok


def test_a_silent_client_is_cut_off_and_connections_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_server, "CLIENT_TIMEOUT", 0.5)
    monkeypatch.setattr(gpu_server, "MAX_CONNECTIONS", 2)
    poller = GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0)
    server = GpuServer(poller, LOOPBACK, 0)
    server.start()
    try:
        idle = [socket.create_connection((LOOPBACK, server.port), timeout=30) for _ in range(2)]
        # Both slots are held by clients that say nothing: a third connection is closed without an answer...
        assert raw_exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == b""
        # ...and the silent ones are closed by the server after the client timeout, without sending anything.
        for sock in idle:
            assert sock.recv(1024) == b""
            sock.close()
        for _ in range(200):  # the slots come back once the handler threads have ended
            reply = raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if reply:
                break
        assert reply.startswith(b"HTTP/1.1 200")
    finally:
        server.close()


def trickle(port: int, request: bytes, pause: float, ctx: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """Send `request` a byte at a time, `pause` seconds apart, until the server closes the connection.

    Returns how many bytes were sent before the server closed it, and what it sent back."""
    import time

    raw = socket.create_connection((LOOPBACK, port), timeout=30)
    sock = ctx.wrap_socket(raw, server_hostname="localhost") if ctx is not None else raw
    received = b""
    try:
        for sent in range(len(request)):
            # Has the server closed (or answered)? Without blocking: a TLS session ticket makes the socket readable
            # with no application data behind it.
            sock.settimeout(0.0)
            try:
                chunk = sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                chunk = None
            except OSError:
                return sent, received
            finally:
                sock.settimeout(30)
            if chunk == b"":
                return sent, received
            received += chunk or b""
            try:
                sock.sendall(request[sent : sent + 1])
            except OSError:
                return sent, received
            time.sleep(pause)
        sock.settimeout(30)
        while chunk := sock.recv(65536):
            received += chunk
        return len(request), received
    finally:
        sock.close()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_trickling_client_is_cut_off_at_the_request_deadline(
    tls: bool, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each byte arrives well within the per-read timeout; the whole request would take far longer than the deadline.
    monkeypatch.setattr(gpu_server, "CLIENT_TIMEOUT", 0.5)
    config = load_web_config(write_config(pki, client_auth="VerifyClientCertIfGiven", users=False)) if tls else None
    server = GpuServer(GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0), LOOPBACK, 0, config)
    server.start()
    try:
        request = (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: trickle-trickle-trickle\r\nConnection: close\r\n\r\n"
        )
        sent, answer = trickle(server.port, request, 0.1, client_context(pki, cert=False) if tls else None)
        assert sent < len(request), answer  # closed before the whole request was sent...
        assert answer == b""  # ...and without serving it
        # The server still answers a client that sends its request at once.
        if tls:
            assert fetch(server.port, "/healthz", client_context(pki, cert=False), password=None)[0] == 200
        else:
            ok = raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200")
    finally:
        server.close()


def test_a_tls_client_that_never_handshakes_is_cut_off(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_server, "CLIENT_TIMEOUT", 0.5)
    server = GpuServer(GpuPoller(FakeNvml(), interval=1.0), LOOPBACK, 0, load_web_config(write_config(pki)))
    server.start()
    try:
        with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
            assert sock.recv(1024) == b""
        assert fetch(server.port, "/healthz", client_context(pki), password=None)[0] == 200
    finally:
        server.close()


# -- bad configs fail at start, with exit 2 and a message that names the field ---------------------------------------
def _bad_configs(pki: Pki, tmp: Path) -> list[tuple[str, str, str]]:
    good_hash = hash_password(PASSWORD, rounds=4)
    tls = f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
    garbage = tmp / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    return [
        ("plain-text password", f"basic_auth_users:\n  prometheus: {PASSWORD}\n", "plain-text password is refused"),
        ("missing cert", f"tls_server_config:\n  cert_file: nope.crt\n  key_file: {pki.server_key}\n", "no such file"),
        ("key of another cert", f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.client_key}\n",
         "key matches"),
        ("garbage cert", f"tls_server_config:\n  cert_file: {garbage}\n  key_file: {pki.server_key}\n", "PEM"),
        ("bad client CA", tls + f"  client_ca_file: {garbage}\n", "client_ca_file"),
        ("no key_file", f"tls_server_config:\n  cert_file: {pki.server_cert}\n", "key_file is missing"),
        ("unknown key", tls + "  client_auth: RequireAndVerifyClientCert\n", "unknown key 'client_auth'"),
        ("unverified auth", tls + f"  client_ca_file: {pki.ca}\n  client_auth_type: RequireAnyClientCert\n",
         "does not support"),
        ("verify without CA", tls + "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
        ("bad version", tls + "  min_version: TLS14\n", "min_version 'TLS14'"),
        ("bad header", f"basic_auth_users:\n  p: {good_hash}\nhttp_server_config:\n  headers:\n    Set-Cookie: a\n",
         "cannot be set"),
        ("not a mapping", "- a\n- b\n", "must be a mapping"),
        ("bad yaml", "tls_server_config: [\n", "not valid YAML"),
    ]  # fmt: skip


def test_bad_web_configs_fail_at_start_with_exit_2(pki: Pki, tmp_path: Path) -> None:
    runner = CliRunner()
    for what, text, message in _bad_configs(pki, tmp_path):
        path = tmp_path / "web.yml"
        path.write_text(text)
        with pytest.raises(WebConfigError, match=message):
            load_web_config(path)
        result = runner.invoke(app, ["exporter", "gpu", "--port", "0", "--web.config.file", str(path)])
        assert result.exit_code == 2, (what, result.output)
        assert message in result.output and str(path) in result.output, (what, result.output)
        assert "Traceback" not in result.output
    for path, message in ((tmp_path / "absent.yml", "no such file"), (tmp_path, "is a folder")):
        result = runner.invoke(app, ["exporter", "gpu", "--port", "0", "--web.config.file", str(path)])
        assert result.exit_code == 2 and message in result.output, result.output


def test_the_real_process_serves_https_with_basic_auth(pki: Pki, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(pki)
    proc = ManagedProcess(
        "slokit exporter gpu (TLS)",
        [*_slokit(), "exporter", "gpu", "--address", LOOPBACK, "--port", str(port), "--web.config.file", str(config)],
        tmp_path / "gpu.log",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ).start()
    try:
        ctx = client_context(pki)
        for _ in range(600):  # bounded wait for the process to listen
            try:
                status = fetch(port, "/healthz", ctx, password=None)[0]
                break
            except OSError:
                assert proc.process is not None and proc.process.poll() is None, proc.log_tail()
                import time

                time.sleep(0.1)
        assert status == 200
        assert fetch(port, "/metrics", ctx)[0] == 200
        assert fetch(port, "/metrics", ctx, password="nope")[0] == 401
        assert f"serving https://{LOOPBACK}:{port}/metrics, basic auth" in proc.log_tail()
    finally:
        proc.stop()


def test_unreadable_web_config_fails_at_start_with_a_clear_message(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests run as root, where chmod 000 still reads: make the read itself fail as it does for another user.
    config = write_config(pki)
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == config:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(WebConfigError, match="cannot read it: Permission denied"):
        load_web_config(config)
    result = CliRunner().invoke(app, ["exporter", "gpu", "--port", "0", "--web.config.file", str(config)])
    assert result.exit_code == 2, result.output
    assert f"--web.config.file: {config}: cannot read it: Permission denied" in result.output
    assert "Traceback" not in result.output


def test_client_allowed_sans_refuses_other_certificate_names_with_403(pki: Pki) -> None:
    def serve(sans: list[str]) -> GpuServer:
        # client_allowed_sans belongs under tls_server_config: put it right after min_version.
        text = (
            write_config(pki, users=False)
            .read_text()
            .replace("  min_version: TLS12\n", f"  min_version: TLS12\n  client_allowed_sans: [{', '.join(sans)}]\n")
        )
        path = pki.folder / f"web-sans-{'-'.join(sans)}.yml"
        path.write_text(text)
        config = load_web_config(path)
        assert config.tls is not None and config.tls.client_allowed_sans == tuple(sans)
        server = GpuServer(GpuPoller(FakeNvml([FakeGpu(A)]), interval=1.0), LOOPBACK, 0, config)
        server.start()
        return server

    refused = serve(["someone-else", "10.0.0.9"])
    try:
        status, _, body = fetch(refused.port, "/metrics", client_context(pki), password=None)
        assert (status, body) == (403, "client certificate name not allowed\n")
        assert fetch(refused.port, "/healthz", client_context(pki), password=None)[0] == 200  # probes still work
    finally:
        refused.close()
    allowed = serve(["someone-else", "prometheus"])  # the test client certificate's DNS name
    try:
        assert fetch(allowed.port, "/metrics", client_context(pki), password=None)[0] == 200
    finally:
        allowed.close()


def test_http2_and_cipher_settings_are_accepted_and_reported_as_ignored(pki: Pki) -> None:
    text = write_config(pki).read_text()
    text = text.replace("http_server_config:\n", "http_server_config:\n  http2: true\n")
    text = text.replace("  min_version: TLS12\n", "  min_version: TLS12\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")
    path = pki.folder / "web-http2.yml"
    path.write_text(text)
    assert load_web_config(path).ignored == ("tls_server_config.cipher_suites", "http_server_config.http2")
    assert load_web_config(write_config(pki)).ignored == ()


def test_the_sidecar_listens_on_loopback_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    assert inspect.signature(GpuServer).parameters["address"].default == LOOPBACK
    server = GpuServer(GpuPoller(FakeNvml(), interval=1.0), port=0)
    try:
        assert server._httpd.server_address[0] == LOOPBACK
    finally:
        server.close()
    seen: list[str] = []

    def no_server(poller: GpuPoller, address: str, port: int, web_config: object) -> GpuServer:
        seen.append(address)
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(gpu_server, "GpuServer", no_server)
    result = CliRunner().invoke(app, ["exporter", "gpu", "--port", "0"])
    assert seen == [LOOPBACK], result.output
    assert result.exit_code == 1 and f"cannot listen on {LOOPBACK}:0" in result.output
