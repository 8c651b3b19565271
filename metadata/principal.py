"""Who sent a request: Kafka's principals (``User:<name>``) from TLS client certificates.

A connection with a client certificate is ``User:`` plus the certificate's subject mapped by
``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper): the rules are tried in order,
``DEFAULT`` gives the RFC 2253 distinguished name (``CN=alice,OU=ops,O=example``) and
``RULE:pattern/replacement/[L|U]`` gives the replacement when the pattern matches the whole
name (``$1`` and so on are its groups; ``L``/``U`` lower or upper the result). A certificate
no rule maps is refused with one line. A connection without TLS, or without a client
certificate, is ``User:ANONYMOUS`` (Kafka's KafkaPrincipal.ANONYMOUS).

Both kinds of listener use these: a gRPC call (``grpc_session``: its ``auth_context()`` and
peer) and an asyncio stream (``stream_session``: its ``ssl_object``).
"""
from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

import grpc
from cryptography import x509

from common.config_def import ConfigError

ANONYMOUS = "User:ANONYMOUS"
USER = "User:"
#: The property and its default (Kafka's BrokerSecurityConfigs.SSL_PRINCIPAL_MAPPING_RULES_CONFIG).
MAPPING_RULES = "ssl.principal.mapping.rules"
DEFAULT_RULES = "DEFAULT"
#: gRPC metadata of a request a broker forwards for a client (Kafka's EnvelopeRequest, KIP-590):
#: the client's principal and address (UTF-8 bytes: ``-bin`` keys, since a certificate's
#: subject may hold any Unicode and ASCII metadata may not), trusted only from a caller allowed
#: CLUSTER_ACTION by super.users or an ACL.
FORWARDED_PRINCIPAL = "kraft-forwarded-principal-bin"
FORWARDED_HOST = "kraft-forwarded-host-bin"

# Kafka's rule grammar: DEFAULT | RULE:pattern/replacement/[LU], with \\ and \/ escaped in
# pattern and replacement, rules separated by commas.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class PrincipalError(ValueError):
    """Bad mapping rules, or a certificate no rule maps; the message is one line."""


@dataclass(frozen=True, slots=True)
class Session:
    """Who a request comes from and where (Kafka's RequestContext: principal and client address)."""

    principal: str
    host: str


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        template = _python_template(self.replacement, self.pattern.groups)
        result = self.pattern.sub(lambda found: found.expand(template), dn)  # Java's replaceAll
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


def _python_template(replacement: str, groups: int) -> str:
    """A Java replacement string (``$1``, ``\\$``) as a ``Match.expand`` template. A reference
    to a group the pattern lacks drops trailing digits until one exists (``$12`` with one group
    is ``$1`` then ``2``), else stays literal, as Kafka's mapper does."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACK_REFERENCE.match(replacement, i)
        if c == "$" and m is not None:
            digits = m.group(1)
            while len(digits) > 1 and int(digits) > groups:
                digits = digits[:-1]
            if int(digits) <= groups:
                out.append(f"\\g<{int(digits)}>")
                i += 1 + len(digits)
                continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once (Kafka's SslPrincipalMapper)."""

    def __init__(self, rules: str | None = None) -> None:
        self.text = DEFAULT_RULES if rules is None else rules
        self.rules = [self._parse(r) for m in _SPLITTER.finditer(self.text.strip()) if (r := m.group(1))]
        self.principal_of_certificate = functools.lru_cache(maxsize=1024)(self._principal_of_certificate)

    @staticmethod
    def _parse(rule: str) -> _Rule:
        m = _PARSER.match(rule)
        if m is None or m.end() != len(rule):
            raise PrincipalError(f"{MAPPING_RULES}: invalid rule {rule!r}: expected DEFAULT or "
                                 "RULE:pattern/replacement/[L|U]")
        if m.group(1) is not None:
            return _Rule(None)
        try:
            pattern = re.compile(m.group(2))
        except re.error as e:
            raise PrincipalError(f"{MAPPING_RULES}: rule {rule!r}: bad pattern: {e}") from None
        return _Rule(pattern, m.group(3), m.group(4))

    def name(self, dn: str) -> str:
        """The principal name of a distinguished name: the first rule that applies."""
        for rule in self.rules:
            found = rule.apply(dn)
            if found is not None:
                return found
        raise PrincipalError(f"no rule of {MAPPING_RULES} ({', '.join(map(str, self.rules)) or 'none'}) "
                             f"applies to the client certificate {dn!r}")

    def _principal_of_certificate(self, data: bytes, pem: bool = False) -> str:
        """``User:<name>`` of a client certificate, DER or PEM (cached: a connection's calls
        share it)."""
        try:
            subject = (x509.load_pem_x509_certificate(data) if pem else x509.load_der_x509_certificate(data)).subject
        except ValueError as e:
            raise PrincipalError(f"unreadable client certificate: {e}") from None
        return USER + self.name(distinguished_name(subject))


def mapper_from_config(props: Mapping[str, str]) -> PrincipalMapper:
    """The server's ``ssl.principal.mapping.rules``; ConfigError (one line) when bad."""
    try:
        return PrincipalMapper(props.get(MAPPING_RULES))
    except PrincipalError as e:
        raise ConfigError(str(e)) from None


def distinguished_name(subject: x509.Name) -> str:
    """RFC 2253 (as RFC 4514 updates it): most specific attribute first, as Java's
    X500Principal.getName() gives Kafka's rules."""
    return subject.rfc4514_string()


def normalized_host(host: str) -> str:
    """An IP address as ACL hosts hold it (``::0001`` -> ``::1``); other text as it is."""
    try:
        return str(ipaddress.ip_address(host.split("%")[0]))
    except ValueError:
        return host


def client_address(peer: str) -> str:
    """The client's IP address from gRPC's peer string (``ipv4:10.0.0.1:5000``,
    ``ipv6:[::1]:5000``, percent-encoded by some gRPC versions)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind == "ipv6":
        return normalized_host(rest.rpartition("]")[0].lstrip("["))
    if kind == "ipv4":
        return normalized_host(rest.rpartition(":")[0])
    return rest  # a unix socket: no address


def grpc_session(context: Any, mapper: PrincipalMapper) -> Session:
    """The session of a gRPC call: its client certificate when the channel is TLS with one,
    else ANONYMOUS. PrincipalError when no rule maps the certificate."""
    pem = (context.auth_context() or {}).get("x509_pem_cert")
    host = client_address(context.peer() or "")
    if not pem:
        return Session(ANONYMOUS, host)
    return Session(mapper.principal_of_certificate(pem[0], True), host)


async def caller(context: Any, mapper: PrincipalMapper) -> Session:
    """The session of a gRPC call, or the call ended UNAUTHENTICATED with one line when no rule
    maps its certificate (Kafka refuses such a connection)."""
    try:
        return grpc_session(context, mapper)
    except PrincipalError as e:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        raise  # abort raises; a context that did not still gets no session


class Connection(Protocol):
    """What a session is read from: an asyncio StreamWriter, transport or protocol."""

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


def stream_session(writer: Connection, mapper: PrincipalMapper) -> Session:
    """The session of a connection served by asyncio: its TLS client certificate, if any."""
    peer = writer.get_extra_info("peername")
    host = normalized_host(peer[0]) if isinstance(peer, tuple) else ""
    ssl_object = writer.get_extra_info("ssl_object")
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return Session(ANONYMOUS, host)
    return Session(mapper.principal_of_certificate(der), host)
