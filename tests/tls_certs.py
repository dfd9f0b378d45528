"""A throw-away certificate authority for tests: a CA, a server certificate for 127.0.0.1/localhost, a client one.

Made with the `cryptography` package at test time, so no key material is committed and every run has fresh keys.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files written into one folder."""

    folder: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a second CA that signed nothing the server trusts
    other_client_cert: Path
    other_client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], cn: str, sans: list[x509.GeneralName], server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca[1], hashes.SHA256())
    )
    return cert, key


def make_pki(folder: Path) -> Pki:
    """Write ca.crt, tls.crt/tls.key (server), client.crt/client.key, and an untrusted CA with its own client."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca("slokit test CA")
    server = _leaf(
        ca,
        "slokit-gpu-exporter",
        [
            x509.DNSName("localhost"),
            x509.DNSName("slokit-gpu-exporter"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
        server=True,
    )
    client = _leaf(ca, "prometheus", [x509.DNSName("prometheus")], server=False)
    other = _ca("someone else's CA")
    stranger = _leaf(other, "prometheus", [x509.DNSName("prometheus")], server=False)
    return Pki(
        folder=folder,
        ca=_write_cert(ca[0], folder / "ca.crt"),
        server_cert=_write_cert(server[0], folder / "tls.crt"),
        server_key=_write_key(server[1], folder / "tls.key"),
        client_cert=_write_cert(client[0], folder / "client.crt"),
        client_key=_write_key(client[1], folder / "client.key"),
        other_ca=_write_cert(other[0], folder / "other-ca.crt"),
        other_client_cert=_write_cert(stranger[0], folder / "other-client.crt"),
        other_client_key=_write_key(stranger[1], folder / "other-client.key"),
    )
