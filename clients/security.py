"""TLS by Kafka's configuration keys, for every connection this project opens or serves, and
the settings of SASL listeners (``SaslSettings``).

A client (producer, consumer, the ``kraft`` tools' ``--command-config``, a broker calling a
controller or another broker) reads ``security.protocol`` and the ``ssl.*`` keys; a listener
reads ``listener.security.protocol.map`` and the ``ssl.*`` keys, each of which may be given for
one listener as ``listener.name.<name>.ssl.*`` (Kafka's per-listener prefix).

Only Kafka's PEM stores are read (``ssl.keystore.type=PEM``): the key and its certificate chain
from one file (``ssl.keystore.location``) or inline (``ssl.keystore.key`` and
``ssl.keystore.certificate.chain``), the trusted CAs from ``ssl.truststore.location`` or inline
``ssl.truststore.certificates``; an encrypted key is opened with ``ssl.key.password``. The
material is read and checked once, when the configuration is loaded, so that a missing file,
a key that does not belong to its certificate or an expired certificate is one line at start
instead of a failed handshake later. gRPC takes the PEM text as it is (``common.tls.TLSConfig``),
and so does ``common.tls.ssl_context`` for Python's ``ssl`` (the Kafka-protocol listener and tools).
"""
from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from common.config_def import ConfigError
from common.server_keys import SERVER_KEYS
from common.tls import TLSConfig

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
#: Kafka's protocols: the SASL ones are served on Kafka listeners; this project's own clients
#: (gRPC) refuse them clearly, not as typos.
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
#: The SASL mechanisms a Kafka listener can serve (``sasl.enabled.mechanisms``).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_USER = re.compile(r'user_([^\s=]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
CLIENT_AUTH = ("required", "requested", "none")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """A SASL listener's settings (Kafka's keys, each also ``listener.name.<l>.``-prefixed):
    ``sasl.enabled.mechanisms``; PLAIN's users from ``plain.sasl.jaas.config``
    (``user_<name>="<password>"``, Kafka's PlainLoginModule); how long a failed login waits
    before its connection is closed (``connection.failed.authentication.delay.ms``); the
    session lifetime a client is told to re-authenticate within (``connections.max.reauth.ms``,
    KIP-368; 0: none). SCRAM's credentials are in the metadata log, not here."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    failed_authentication_delay_ms: int = 100
    max_reauth_ms: int = 0


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How one listener is served: its protocol; for SSL and SASL_SSL, its TLS material and
    whether it asks for client certificates (``ssl.client.auth``); for SASL, its settings."""

    protocol: str = PLAINTEXT
    tls: TLSConfig | None = None
    client_auth: str = "none"
    sasl: SaslSettings | None = None

    @property
    def is_tls(self) -> bool:
        return self.tls is not None

    def check_grpc(self, listener: str) -> None:
        """A gRPC server asks for a client certificate only when it requires one, and speaks no SASL."""
        if self.sasl is not None:
            raise ConfigError(f"{self.protocol} (listener {listener}): SASL is not supported on gRPC listeners; it is "
                              f"served on Kafka listeners (kafka.listener.names); use PLAINTEXT or SSL here")
        if self.client_auth == "requested":
            raise ConfigError(f"ssl.client.auth=requested (listener {listener}): gRPC listeners take required or "
                              f"none; requested is for Kafka listeners (kafka.listener.names)")


def is_security_key(key: str) -> bool:
    """The keys this module reads from a client's configuration."""
    return key == "security.protocol" or key.startswith("ssl.")


def protocol_of(value: str, key: str = "security.protocol", *, sasl: bool = False) -> str:
    """A protocol name; ``sasl``: the SASL ones are allowed (a listener's, not our clients')."""
    protocol = value.strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"Invalid value {value} for configuration {key}: use "
                          f"{', '.join(PROTOCOLS) if sasl else 'PLAINTEXT or SSL'}")
    if not sasl and protocol not in (PLAINTEXT, SSL):
        raise ConfigError(f"{key}={protocol}: SASL is not supported by this project's clients (the kraft tools, "
                          f"clients/); use SSL with client certificates")
    return protocol


def client_tls(props: Mapping[str, str]) -> TLSConfig | None:
    """A client's TLS from ``security.protocol`` and ``ssl.*`` (None for PLAINTEXT). A client
    needs a trust store unless the server's CA is among the system's; it shows a certificate
    (mutual TLS) when it has a key store."""
    if protocol_of(props.get("security.protocol", PLAINTEXT)) == PLAINTEXT:
        return None
    return _material(props, server=False)


def check_hostname(props: Mapping[str, str]) -> bool:
    """``ssl.endpoint.identification.algorithm``: ``https`` (Kafka's default) checks that the
    server's certificate names the host dialled; empty turns that off for the Kafka-protocol
    tools (gRPC always checks)."""
    value = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if value not in ("https", ""):
        raise ConfigError(f"Invalid value {value} for configuration ssl.endpoint.identification.algorithm: "
                          f"use https or leave it empty")
    return value == "https"


def listener_props(props: Mapping[str, str], listener: str) -> dict[str, str]:
    """``props`` with ``listener.name.<listener>.`` keys in place of the plain ones."""
    prefix = f"listener.name.{listener.lower()}."
    out = {k: v for k, v in props.items() if not k.startswith("listener.name.")}
    out.update({k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)})
    return out


def security_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``)."""
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or protocol.strip().upper() not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:{'|'.join(PROTOCOLS)}")
        out[name.strip().upper()] = protocol_of(protocol, f"listener.security.protocol.map ({name.strip()})",
                                                sasl=True)
    return out


def listener_protocol(props: Mapping[str, str], listener: str) -> str:
    """A listener the map leaves out is PLAINTEXT unless it is named after a protocol (Kafka's
    default map names each protocol after itself)."""
    protocols = security_protocol_map(props.get("listener.security.protocol.map", ""))
    return protocols.get(listener, listener if listener in PROTOCOLS else PLAINTEXT)


def listener_security(props: Mapping[str, str], listener: str) -> ListenerSecurity:
    """How ``listener`` is served."""
    protocol = listener_protocol(props, listener)
    own = listener_props(props, listener)
    sasl = sasl_settings(own, listener) if protocol in (SASL_PLAINTEXT, SASL_SSL) else None
    if protocol in (PLAINTEXT, SASL_PLAINTEXT):
        return ListenerSecurity(protocol, sasl=sasl)
    client_auth = own.get("ssl.client.auth", "none").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(f"Invalid value {client_auth} for configuration ssl.client.auth (listener {listener}): "
                          f"use required, requested or none")
    tls = _material(own, server=True)
    if client_auth != "none" and not tls.ca:
        raise ConfigError(f"ssl.client.auth={client_auth} (listener {listener}) needs a trust store to verify client "
                          f"certificates: ssl.truststore.location or ssl.truststore.certificates")
    # The trust store stays for dialling peers with it; gRPC asks for no client certificate
    # unless require_client_auth is set.
    tls = TLSConfig(tls.cert, tls.key, tls.ca, require_client_auth=client_auth == "required")
    return ListenerSecurity(protocol, tls, client_auth, sasl)


def sasl_settings(own: Mapping[str, str], listener: str) -> SaslSettings:
    """A SASL listener's settings from its keys (``listener_props``: prefixed ones win)."""
    mechanisms = tuple(m.strip().upper() for m in own.get("sasl.enabled.mechanisms",
                                                          SERVER_KEYS["sasl.enabled.mechanisms"].default or "")
                       .split(",") if m.strip())
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown or not mechanisms:
        raise ConfigError(f"sasl.enabled.mechanisms={','.join(mechanisms)} (listener {listener}): "
                          f"{'unsupported mechanism ' + unknown[0] if unknown else 'none given'}; use "
                          f"{', '.join(SASL_MECHANISMS)}")
    jaas = own.get("plain.sasl.jaas.config") or own.get("sasl.jaas.config") or ""
    users = {name: password.replace('\\"', '"') for name, password in _JAAS_USER.findall(jaas)}
    if "PLAIN" in mechanisms and not users:
        raise ConfigError(f"PLAIN (listener {listener}) needs its users: listener.name.{listener.lower()}.plain."
                          f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                          f'user_alice="alice-secret";')
    return SaslSettings(mechanisms, users, SERVER_KEYS.value(own, "connection.failed.authentication.delay.ms"),
                        SERVER_KEYS.value(own, "connections.max.reauth.ms"))


def connecting_tls(props: Mapping[str, str], listener: str) -> TLSConfig | None:
    """What a server uses to connect to another server's ``listener`` (a broker to the
    controllers, a controller to its peers, a broker to the leader it replicates from): that
    listener's protocol, and this server's own key store and trust store for it."""
    if listener_protocol(props, listener) in (PLAINTEXT, SASL_PLAINTEXT):
        return None
    return _material(listener_props(props, listener), server=False)


# -- the PEM material ---------------------------------------------------------------------------

def _blocks(text: str, what: str) -> list[tuple[str, str]]:
    """The PEM blocks of ``text`` as (kind, normalised PEM): inline values written over several
    properties lines arrive joined by spaces, so the base64 is re-wrapped."""
    found = []
    for m in _PEM.finditer(text):
        body = "".join(m.group(2).split())
        lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
        found.append((m.group(1), f"-----BEGIN {m.group(1)}-----\n{lines}\n-----END {m.group(1)}-----\n"))
    if not found:
        raise ConfigError(f"{what}: no PEM block found (expected -----BEGIN ...-----)")
    return found


def _read(path: str, key: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {key}={path}: {getattr(e, 'strerror', None) or e}") from None


def _store_type(props: Mapping[str, str], key: str) -> None:
    kind = props.get(key, "PEM").strip().upper()
    if kind != "PEM":
        raise ConfigError(f"{key}={kind} is not supported: use PEM (ssl.keystore.type=PEM, see docs/operations.md)")


def _material(props: Mapping[str, str], *, server: bool) -> TLSConfig:
    _store_type(props, "ssl.keystore.type")
    _store_type(props, "ssl.truststore.type")
    cert = key = None
    if props.get("ssl.keystore.location"):
        where = "ssl.keystore.location=" + props["ssl.keystore.location"]
        blocks = _blocks(_read(props["ssl.keystore.location"], "ssl.keystore.location"), where)
    elif props.get("ssl.keystore.certificate.chain") or props.get("ssl.keystore.key"):
        where = "ssl.keystore.certificate.chain"
        blocks = (_blocks(props.get("ssl.keystore.certificate.chain", ""), "ssl.keystore.certificate.chain")
                  + _blocks(props.get("ssl.keystore.key", ""), "ssl.keystore.key"))
    else:
        where, blocks = "", []
    if blocks:
        certs = [block for kind, block in blocks if kind == "CERTIFICATE"]
        keys = [block for kind, block in blocks if kind.endswith("PRIVATE KEY")]
        if not certs or len(keys) != 1:
            raise ConfigError(f"{where}: expected one private key and its certificate chain, found "
                              f"{len(keys)} key(s) and {len(certs)} certificate(s)")
        key = _open_key(keys[0], props.get("ssl.key.password"), where)
        _check_pair(certs[0], key, where)
        cert = "".join(certs)
    elif server:
        raise ConfigError("an SSL listener needs a key store: ssl.keystore.location, or ssl.keystore.key and "
                          "ssl.keystore.certificate.chain")
    ca = None
    if props.get("ssl.truststore.location"):
        ca = _trusted(_read(props["ssl.truststore.location"], "ssl.truststore.location"),
                      "ssl.truststore.location=" + props["ssl.truststore.location"])
    elif props.get("ssl.truststore.certificates"):
        ca = _trusted(props["ssl.truststore.certificates"], "ssl.truststore.certificates")
    return TLSConfig(cert, key, ca)


def _open_key(text: str, password: str | None, where: str) -> str:
    """The key as unencrypted PKCS#8 PEM (what gRPC reads), opened with ``ssl.key.password``."""
    try:
        key = serialization.load_pem_private_key(text.encode(), password.encode() if password else None)
    except TypeError:
        raise ConfigError(f"{where}: the private key is encrypted; set ssl.key.password") from None
    except ValueError:
        raise ConfigError(f"{where}: the private key cannot be read (a wrong ssl.key.password, or not a key)") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _check_pair(cert_pem: str, key_pem: str, where: str) -> None:
    cert = _certificate(cert_pem, where)
    key = serialization.load_pem_private_key(key_pem.encode(), None)
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*raw) != key.public_key().public_bytes(*raw):
        raise ConfigError(f"{where}: the private key does not belong to the certificate {cert.subject.rfc4514_string()}")
    now = datetime.datetime.now(datetime.timezone.utc)
    if cert.not_valid_after_utc < now:
        raise ConfigError(f"{where}: the certificate {cert.subject.rfc4514_string()} expired on "
                          f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")


def _certificate(text: str, where: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(text.encode())
    except ValueError:
        raise ConfigError(f"{where}: a certificate cannot be read") from None


def _trusted(text: str, where: str) -> str:
    certs = [block for kind, block in _blocks(text, where) if kind == "CERTIFICATE"]
    if not certs:
        raise ConfigError(f"{where}: no certificate found")
    for block in certs:
        _certificate(block, where)
    return "".join(certs)
