"""Certificates for tests, made with ``cryptography``: a CA, and certificates it signs for
servers (localhost, 127.0.0.1) and clients (any subject)."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_OIDS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}


def name(*attrs: tuple[str, str]) -> x509.Name:
    """A subject in X.509 order (most general first), e.g. ("O", "example"), ("CN", "alice"):
    RFC 2253 writes it the other way round, CN=alice,O=example."""
    return x509.Name([x509.NameAttribute(_OIDS[k], v) for k, v in attrs])


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class CertificateAuthority:
    def __init__(self, cn: str = "test ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = name(("CN", cn))
        self.cert = self._sign(self.name, self.key, ca=True)

    def _sign(self, subject: x509.Name, key: ec.EllipticCurvePrivateKey, ca: bool = False) -> bytes:
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    def issue(self, subject: x509.Name) -> tuple[bytes, bytes]:
        """(certificate, private key), both PEM."""
        key = ec.generate_private_key(ec.SECP256R1())
        return self._sign(subject, key), pem_key(key)

    def write(self, directory: Path, stem: str, subject: x509.Name) -> tuple[Path, Path]:
        """A certificate and key as ``stem.pem`` and ``stem.key`` (and the CA as ``ca.pem``)."""
        cert, key = self.issue(subject)
        (directory / "ca.pem").write_bytes(self.cert)
        (directory / f"{stem}.pem").write_bytes(cert)
        (directory / f"{stem}.key").write_bytes(key)
        return directory / f"{stem}.pem", directory / f"{stem}.key"
