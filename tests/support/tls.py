"""A throwaway certificate authority, made in the test: a CA, server and client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class TestCA:
    ca: Path
    server: Pair
    client: Pair


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, cert: x509.Certificate, key) -> Pair:
    cert_path, key_path = path.with_suffix(".pem"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return Pair(cert_path, key_path)


def _issue(name: str, issuer: x509.Name, issuer_key, key, *, ca: bool = False, server: bool = False):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_test_ca(directory: Path, name: str = "paddleray-test-ca") -> TestCA:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca_cert = _issue(name, ca_name, ca_key, ca_key, ca=True)
    ca = _write(directory / name, ca_cert, ca_key)
    server_key, client_key = _key(), _key()
    server = _write(directory / "server", _issue("localhost", ca_name, ca_key, server_key, server=True), server_key)
    client = _write(directory / "client", _issue("scheduler", ca_name, ca_key, client_key), client_key)
    return TestCA(ca.cert, server, client)
