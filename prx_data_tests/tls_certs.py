"""A throwaway CA and a server certificate it signed, for HTTPS servers in tests and benchmarks
(``cryptography``, a dev dependency): no certificate file in the repository, none that expires."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_CA_NAME = "prx-data test CA"


@dataclass(frozen=True)
class Chain:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # load_cert_chain reads files only.
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "cert.pem").write_bytes(self.cert_pem)
            Path(folder, "key.pem").write_bytes(self.key_pem)
            context.load_cert_chain(Path(folder, "cert.pem"), Path(folder, "key.pem"))
        return context

    def trusting(self) -> ssl.SSLContext:
        """A client context that trusts this CA alone."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def chain(names: Iterable[str]) -> Chain:
    """A new CA and a certificate it signed for ``names`` (host names or IP addresses)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_CA_NAME, ca_key, ca_key, ca=True, names=[])
    cert = _cert("server", key, ca_key, ca=False, names=[_san(n) for n in names])
    pem = serialization.Encoding.PEM
    return Chain(
        ca.public_bytes(pem),
        cert.public_bytes(pem),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _cert(subject: str, key, issuer_key, *, ca: bool, names: list[x509.GeneralName]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _CA_NAME)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())
