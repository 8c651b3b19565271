"""SASL on a Kafka listener (Kafka's SaslServerAuthenticator): one ``SaslAuthenticator`` per
connection takes its SaslHandshake (v1: the mechanism) and SaslAuthenticate requests (KIP-152)
until the client is ``User:<name>``, which the authorizer then checks as any other principal.

PLAIN checks the password against the listener's JAAS users; SCRAM-SHA-256/512 (RFC 5802,
RFC 7677, via ``scramp``) against the credential in the broker's metadata image, so a user
added or removed with ``kraft configs --entity-type users`` can (or can no longer) log in on a
new connection as soon as the broker has the record, without a restart. A failed login is
answered SASL_AUTHENTICATION_FAILED with Kafka's message, the same whatever was wrong (an
unknown user or a wrong password), so that a guesser learns nothing from it.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import ErrorCode, KafkaError
from clients.security import SaslSettings
from metadata.image import ScramImage
from metadata.scram import ScramMechanism

log = logging.getLogger("brokerd.kafka.sasl")


class AuthenticationFailed(KafkaError):
    """A login that failed: answered with its code and message, then the connection closes."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a SaslAuthenticate answers: the server's token, and the session lifetime (ms, 0:
    none) once ``done``."""

    token: bytes
    done: bool = False
    session_lifetime_ms: int = 0


def server_nonce() -> str:
    """Kafka's server nonce (ScramFormatter.secureRandomString: 130 random bits in base 36,
    about 26 characters). Older librdkafka (2.0, kcat's) refuses the 64-character nonce
    scramp makes by default ("Server nonce doesn't match")."""
    n, digits = secrets.randbits(130), string.digits + string.ascii_lowercase
    out = ""
    while n:
        n, d = divmod(n, 36)
        out = digits[d] + out
    return out or "0"


def _invalid(mechanism: str) -> AuthenticationFailed:
    """Kafka's message for a SCRAM login that failed, whatever failed."""
    return AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed during authentication "
                                f"due to invalid credentials with SASL mechanism {mechanism}")


class SaslAuthenticator:
    """One connection's SASL state: no mechanism yet, a mechanism chosen (handshake done),
    exchanging tokens, authenticated (``principal`` set). A client may authenticate again on the
    same connection (KIP-368 re-authentication) with a new handshake."""

    def __init__(self, settings: SaslSettings, credentials: Callable[[], ScramImage]) -> None:
        self.settings = settings
        self.credentials = credentials
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at: float | None = None  # monotonic seconds; None: never
        self._scram = None  # scramp's ScramServer, during a SCRAM exchange
        self._user = ""  # the SCRAM exchange's user, once its client-first message is read
        self._gs2 = ""  # and the GS2 header it began with (the client-final echoes it, base64)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def expired(self) -> bool:
        """KIP-368: a session past its lifetime serves nothing but re-authentication."""
        return self.expires_at is not None and time.monotonic() > self.expires_at

    def handshake(self, mechanism: str) -> tuple[ErrorCode, list[str]]:
        """SaslHandshake: NONE, or UNSUPPORTED_SASL_MECHANISM with the mechanisms served (the
        connection is then closed, as Kafka closes it)."""
        enabled = list(self.settings.mechanisms)
        if mechanism not in enabled:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self._scram = None
        return ErrorCode.NONE, enabled

    def authenticate(self, token: bytes) -> Step:
        """One SaslAuthenticate; AuthenticationFailed ends the exchange (and the connection)."""
        mechanism = self.mechanism
        if mechanism is None:
            raise AuthenticationFailed(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake: "
                                                                     "Request not valid in current SASL state")
        if mechanism == "PLAIN":
            return self._done(self._plain(token))
        return self._scram_step(mechanism, token)

    def _done(self, user: str) -> Step:
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:  # KIP-368: the same principal only
            raise AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, f"Cannot change principals during "
                                       f"re-authentication from {self.principal}: {principal}")
        self.principal = principal
        self.mechanism = None
        self._scram = None
        lifetime = self.settings.max_reauth_ms
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
        return Step(b"", True, lifetime)

    def _plain(self, token: bytes) -> str:
        """RFC 4616: ``[authzid] NUL authcid NUL passwd``."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: Invalid SASL/PLAIN "
                                                                             "response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: Client requested "
                                       "an authorization id that is different from username")
        expected = self.settings.plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                       "Authentication failed: Invalid username or password")
        return user

    def _scram_step(self, mechanism: str, token: bytes) -> Step:
        """RFC 5802's two rounds: scramp reads the client-first message and writes the
        server-first one; the client-final is checked here, by Kafka's rule (ScramSaslServer):
        its nonce must end with the server's, where scramp wants it equal, which librdkafka 2.0
        (kcat's) relies on, since it sends the client nonce twice."""
        from scramp import ScramException
        from scramp import ScramMechanism as Mechanism
        ours = ScramMechanism.named(mechanism)
        try:
            text = token.decode("utf-8")
            if self._scram is None:  # client-first
                def lookup(user: str) -> tuple[bytes, bytes, bytes, int] | None:
                    c = self.credentials().credential(user, ours)
                    return None if c is None else (c.salt, c.stored_key, c.server_key, c.iterations)
                server = Mechanism(mechanism).make_server(lookup, s_nonce=server_nonce())
                server.set_client_first(text)
                self._scram = server
                self._gs2 = text[:len(text) - len(server.client_first_bare)]
                self._user = server.client_first_bare.split(",")[0][2:].replace("=2C", ",").replace("=3D", "=")
                return Step(server.get_server_first().encode())
            server, self._scram = self._scram, None
            final = _client_final(ours, text, self._gs2, str(server.nonce), server.client_first_bare,
                                  server.server_first, server.stored_key, server.server_key)
        except (ScramException, UnicodeDecodeError, ValueError, binascii.Error) as e:
            log.debug("SCRAM exchange failed: %s", e)
            self._scram = None
            raise _invalid(mechanism) from None
        step = self._done(self._user)
        return Step(final, True, step.session_lifetime_ms)


def _client_final(mechanism: ScramMechanism, text: str, gs2_header: str, nonce: str, client_first_bare: str,
                  server_first: str, stored_key: bytes, server_key: bytes) -> bytes:
    """The server-final message (``v=ServerSignature``) for a client-final message whose proof
    holds (RFC 5802 section 3); ValueError otherwise."""
    without_proof, sep, proof = text.rpartition(",p=")
    fields = dict(item.split("=", 1) for item in without_proof.split(",") if "=" in item)
    if not sep or not fields.get("r", "").endswith(nonce):
        raise ValueError("the client-final nonce does not end with the server's")
    if fields.get("c") != base64.b64encode(gs2_header.encode()).decode():
        raise ValueError("the channel binding differs from the client-first message's header")
    h = getattr(hashlib, mechanism.hash_name)
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, h).digest()
    client_proof = base64.b64decode(proof, validate=True)
    if len(client_proof) != len(signature):
        raise ValueError("a proof of the wrong length")
    client_key = bytes(a ^ b for a, b in zip(signature, client_proof, strict=True))
    if not hmac.compare_digest(h(client_key).digest(), stored_key):
        raise ValueError("the proof does not match the stored key")
    return b"v=" + base64.b64encode(hmac.new(server_key, auth_message, h).digest())
