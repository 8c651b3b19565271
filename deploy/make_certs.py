"""A test certificate authority and certificates signed by it, for TLS on every listener
(docs/operations.md, "Security").

    python deploy/make_certs.py --out certs controller-1 controller-2 broker-4 admin alice

makes, in ``certs/``:
- ``ca.crt`` (the trust store: ``ssl.truststore.location``) and ``ca.key`` (kept to sign more
  names later: run the script again with the same ``--out``, or ``--ca-dir`` to put new names
  elsewhere; never give ``ca.key`` to a node: whoever has it can make any principal);
- for each NAME: ``NAME.crt`` and ``NAME.key`` (librdkafka's ``ssl.certificate.location`` and
  ``ssl.key.location``) and ``NAME.keystore.pem``, the key and the certificate in one file
  (Kafka's ``ssl.keystore.type=PEM`` with ``ssl.keystore.location``).

A certificate's subject is ``CN=NAME``; its subject alternative names are NAME, ``localhost``,
``127.0.0.1`` and ``::1`` and whatever ``NAME=SAN,SAN`` adds, so it serves as a node's server
certificate under those names and as a client certificate (principal ``User:NAME`` with the
mapping rule the docs give). ``--days -1`` makes certificates that have already expired
(for tests). This is a tool for tests and trials; production certificates come from the
operator's own CA.
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_SANS = ("localhost", "127.0.0.1", "::1")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """A key is created 0600, never readable by others even for a moment."""
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    if days < 0:  # expired: valid for one day that ended |days| days ago
        end = now + datetime.timedelta(days=days)
        return end - datetime.timedelta(days=1), end
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def load_or_make_ca(ca_dir: Path, ca_name: str, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    crt, key = ca_dir / "ca.crt", ca_dir / "ca.key"
    if crt.exists() and key.exists():
        ca_key = serialization.load_pem_private_key(key.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(crt.read_bytes()), ca_key
    ca_key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(max(days, 1))
    cert = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(ca_key, hashes.SHA256()))
    _write(crt, cert.public_bytes(serialization.Encoding.PEM))
    _write(key, _pem_key(ca_key), private=True)
    return cert, ca_key


def _san(entry: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(entry))
    except ValueError:
        return x509.DNSName(entry)


def make_cert(out: Path, spec: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, days: int) -> None:
    name, _, extra = spec.partition("=")
    sans = list(dict.fromkeys([name, *DEFAULT_SANS, *(s.strip() for s in extra.split(",") if s.strip())]))
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    _write(out / f"{name}.crt", cert_pem)
    _write(out / f"{name}.key", _pem_key(key), private=True)
    _write(out / f"{name}.keystore.pem", _pem_key(key) + cert_pem, private=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the files; an existing CA there signs the new names")
    p.add_argument("--ca-dir", help="where the CA is (ca.crt, ca.key), made if missing; default: --out")
    p.add_argument("--ca-name", default="pykraft test CA", help="the CA's common name, when it is made")
    p.add_argument("--days", type=int, default=365, help="validity of the new certificates; negative: already expired")
    p.add_argument("names", nargs="+", metavar="NAME[=SAN,...]")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ca_dir = Path(args.ca_dir or out)
    ca_dir.mkdir(parents=True, exist_ok=True)
    ca, ca_key = load_or_make_ca(ca_dir, args.ca_name, args.days)
    for spec in args.names:
        if not spec.partition("=")[0] or "/" in spec.partition("=")[0]:
            print(f"make_certs: bad name {spec!r}: expected NAME[=SAN,...]", file=sys.stderr)
            return 2
        make_cert(out, spec, ca, ca_key, args.days)
    print(f"CA and {len(args.names)} certificate(s) in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
