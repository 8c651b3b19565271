"""TLS settings, in one home for every connection the project dials or serves: the
``TLSConfig`` that clients, brokers, controllers and the Raft library are given, the gRPC
credentials and the ``ssl`` context built from it, and what a failed handshake means in words."""
from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass, field

import grpc


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """PEM material, each item a file's path or the PEM text itself (files are read when a
    channel or port opens, so a renewed certificate is picked up by the next connection).
    ``cert``/``key`` are this side's identity: required to serve, and what a client shows for
    mutual TLS. With ``ca`` set, peers are verified against it (else the system's roots); with
    ``require_client_auth`` the server also demands a client certificate (mutual TLS)."""

    cert: str | None = None
    key: str | None = field(default=None, repr=False)  # a private key stays out of logs and reprs
    ca: str | None = None
    require_client_auth: bool = False
    server_name: str | None = None  # override for the name checked in peers' certificates


def pem(item: str) -> bytes:
    """A TLSConfig item: PEM text as it is, else the file it names."""
    if item.lstrip().startswith("-----BEGIN"):
        return item.encode()
    with open(item, "rb") as f:
        return f.read()


def channel_credentials(tls: TLSConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=pem(tls.ca) if tls.ca else None,
        private_key=pem(tls.key) if tls.key else None,
        certificate_chain=pem(tls.cert) if tls.cert else None)


def server_credentials(tls: TLSConfig) -> grpc.ServerCredentials:
    if not (tls.cert and tls.key):
        raise ValueError("a TLS server needs a certificate and its key")
    return grpc.ssl_server_credentials([(pem(tls.key), pem(tls.cert))],
                                       root_certificates=pem(tls.ca) if tls.ca else None,
                                       require_client_auth=tls.require_client_auth)


def ssl_context(tls: TLSConfig, *, server: bool, client_auth: str = "none",
                check_hostname: bool = True) -> ssl.SSLContext:
    """The same material for Python's ``ssl`` (the Kafka-protocol listener and tools). ``ssl``
    loads a key only from a file, so the key is written to a private temporary file only while
    it is loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.ca:
        ctx.load_verify_locations(cadata=pem(tls.ca).decode())
    elif not server:
        ctx.load_default_certs()
    if server:
        ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(client_auth, ssl.CERT_NONE)
    else:
        ctx.check_hostname = check_hostname
    if tls.cert and tls.key:
        with tempfile.TemporaryDirectory(prefix="kraft-tls-") as d:  # 0700: only we can read the key
            path = os.path.join(d, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write((pem(tls.key) + pem(tls.cert)).decode())
            ctx.load_cert_chain(path)
    return ctx


_TLS_REASONS = (
    ("WRONG_VERSION_NUMBER", "the server does not speak TLS on this port (a PLAINTEXT listener?)"),
    ("certificate has expired", "the server's certificate has expired"),
    ("BAD_SIGNATURE", "the server's certificate is not signed by a trusted CA (the trust store)"),
    ("unable to get local issuer", "the server's certificate is not signed by a trusted CA (the trust store)"),
    ("self signed", "the server's certificate is not signed by a trusted CA (the trust store)"),
    ("not in peer certificate", "the server's certificate does not name the host dialled"),
)


def tls_failure(details: str) -> str | None:
    """What a failed TLS handshake on this side means, from gRPC's connect error; None when
    ``details`` is not one. Trying again cannot fix any of these, so callers fail at once."""
    if "handshake failed" not in details.lower() and "not in peer certificate" not in details:
        return None
    if "SSL_ERROR_SYSCALL" in details:  # the connection broke mid-handshake (a server going away): transient
        return None
    for marker, reason in _TLS_REASONS:
        if marker in details:
            return f"TLS handshake failed: {reason}"
    tail = details.rsplit("OPENSSL_internal:", 1)[-1].removesuffix(": OK")
    return f"TLS handshake failed: {tail.strip()}"


def closed_hint(details: str) -> str:
    """What a server closing the connection while it was being set up most likely means."""
    if "socket closed" not in details.lower():
        return ""
    return ("; a TLS listener closes connections that do not speak TLS or whose client certificate it does "
            "not accept (check security.protocol and the ssl.* settings)")
