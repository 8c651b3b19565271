"""SCRAM credentials (RFC 5802, RFC 7677) as KRaft keeps them in the metadata log (KIP-554):
per user and mechanism, the salt, the iteration count, StoredKey and ServerKey, never the
password. A client that sets a credential sends the salt and SaltedPassword (the password
stays with it); the controller derives the keys and writes a ``UserScramCredentialRecord``.
A broker's SASL/SCRAM authenticator (``brokerd.kafka.sasl``) checks a login against these
keys alone, which is why a leaked metadata log does not hand out passwords.

The rules here are Kafka's (ControllerApis and ScramControlManager): mechanisms SCRAM-SHA-256
and SCRAM-SHA-512, 4096 to 16384 iterations, a user named twice in one request refused
(DUPLICATE_RESOURCE), deleting or describing a credential that does not exist refused
(RESOURCE_NOT_FOUND), each user's changes applied together or not at all.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from common.errors import ErrorCode, KafkaError
from .records import MetadataRecord, remove_user_scram_credential, user_scram_credential

#: Kafka's bounds on a credential's iteration count (ScramMechanism.minIterations/maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: What ``kraft configs`` uses when ``iterations=`` is not given (Kafka's default).
DEFAULT_ITERATIONS = 4096


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism ids (the same numbers on every wire and in the records)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """``SCRAM-SHA-256``: the name SASL negotiates and the tools take."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def named(cls, name: str) -> ScramMechanism:
        """The mechanism of ``SCRAM-SHA-512``; KafkaError UNSUPPORTED_SASL_MECHANISM otherwise."""
        try:
            return cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            raise KafkaError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {name!r}: use "
                           f"{' or '.join(m.mechanism_name for m in cls)}") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of a password (RFC 5802 section 3); its bytes stay out of reprs (logs)."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int = 0


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: int  # as sent: checked here


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A credential to set: the salt and SaltedPassword a client computed (``upsertion``)."""

    user: str
    mechanism: int  # as sent: checked here
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ScramUserResult:
    """The outcome for one user; ``credentials`` (mechanism, iterations) when described."""

    user: str
    error: KafkaError | None = None
    credentials: tuple[tuple[ScramMechanism, int], ...] = ()


# -- the cryptography (scramp, the RFC's library, where it has the function) ---------------------

def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword := Hi(Normalize(password), salt, i), with SASLprep."""
    from scramp.utils import hi, saslprep
    return hi(getattr(hashlib, mechanism.hash_name), saslprep(password).encode(), salt, iterations)


def credential(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """StoredKey := H(HMAC(SaltedPassword, "Client Key")), ServerKey := HMAC(SaltedPassword, "Server Key")."""
    h = getattr(hashlib, mechanism.hash_name)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return ScramCredential(salt, h(client_key).digest(), hmac.new(salted, b"Server Key", h).digest(), iterations)


def upsertion(user: str, mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS
              ) -> ScramUpsertion:
    """What a client sends to set ``user``'s password: a fresh salt and SaltedPassword."""
    salt = os.urandom(32)
    return ScramUpsertion(user, int(mechanism), iterations, salt,
                          salted_password(mechanism, password, salt, iterations))


# -- kafka-configs.sh's and kafka-storage.sh's syntax --------------------------------------------

_ENTRY = re.compile(r"\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[(.*)\]\s*$", re.I)


def parse_scram_config(text: str) -> tuple[ScramMechanism, dict[str, str]]:
    """``SCRAM-SHA-512=[iterations=8192,password=alice-secret]`` -> (mechanism, its fields).
    A password may hold '=' but not ','; ValueError with the reason otherwise."""
    m = _ENTRY.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not MECHANISM=[key=value,...] with MECHANISM SCRAM-SHA-256 or SCRAM-SHA-512, "
                         f"e.g. 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'")
    fields: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in m.group(2).split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ValueError(f"{item!r} in {m.group(1)}=[...] is not key=value")
        fields[key.strip().lower()] = value.strip().strip('"')
    return ScramMechanism.named(m.group(1)), fields


def iterations_of(fields: Mapping[str, str]) -> int:
    raw = fields.get("iterations", str(DEFAULT_ITERATIONS))
    if not raw.isdigit():
        raise ValueError(f"iterations={raw}: a whole number from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    return int(raw)


# -- the controller's rules ----------------------------------------------------------------------

Credentials = Mapping[str, Mapping[ScramMechanism, ScramCredential]]


def _check_mechanism(value: int) -> ScramMechanism:
    try:
        return ScramMechanism(value)
    except ValueError:
        raise KafkaError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {value}") from None


def _checked_upsertion(u: ScramUpsertion) -> tuple[ScramMechanism, ScramCredential]:
    mechanism = _check_mechanism(u.mechanism)
    if u.iterations < MIN_ITERATIONS:
        raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations ({u.iterations}): at least "
                       f"{MIN_ITERATIONS}")
    if u.iterations > MAX_ITERATIONS:
        raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations ({u.iterations}): at most "
                       f"{MAX_ITERATIONS}")
    if not u.salt or not u.salted_password:
        raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "A credential needs a salt and a salted password")
    return mechanism, credential(mechanism, u.salt, u.salted_password, u.iterations)


def alter_credentials(current: Credentials, deletions: Sequence[ScramDeletion],
                      upsertions: Sequence[ScramUpsertion]) -> tuple[list[MetadataRecord], list[ScramUserResult]]:
    """The records of AlterUserScramCredentials and one result per user, in the order users are
    first named; a user whose change is refused has none of its changes written."""
    users = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
    named: dict[tuple[str, int], int] = {}
    for key in [(d.user, d.mechanism) for d in deletions] + [(u.user, u.mechanism) for u in upsertions]:
        named[key] = named.get(key, 0) + 1
    twice = {user for (user, _), n in named.items() if n > 1}
    records: list[MetadataRecord] = []
    results = []
    for user in users:
        try:
            if not user:
                raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            if user in twice:
                raise KafkaError(ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the "
                                                             "same request")
            mine: list[MetadataRecord] = []
            for d in deletions:
                if d.user == user:
                    mechanism = _check_mechanism(d.mechanism)
                    if mechanism not in current.get(user, {}):
                        raise KafkaError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that "
                                                                     "does not exist")
                    mine.append(remove_user_scram_credential(user, mechanism))
            for u in upsertions:
                if u.user == user:
                    mechanism, cred = _checked_upsertion(u)
                    mine.append(user_scram_credential(user, mechanism, cred))
            records += mine
            results.append(ScramUserResult(user))
        except KafkaError as e:
            results.append(ScramUserResult(user, e))
    return records, results


def describe_credentials(current: Credentials, users: Sequence[str] | None) -> list[ScramUserResult]:
    """DescribeUserScramCredentials: ``users`` None (or empty) for every user with a credential."""
    if not users:
        return [ScramUserResult(u, credentials=_infos(current[u])) for u in sorted(current)]
    counts = {u: users.count(u) for u in users}
    out = []
    for user in dict.fromkeys(users):
        if counts[user] > 1:
            out.append(ScramUserResult(user, KafkaError(ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM "
                                                      "credentials for the same user twice in a single request")))
        elif user not in current:
            out.append(ScramUserResult(user, KafkaError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user "
                                                      "credential that does not exist")))
        else:
            out.append(ScramUserResult(user, credentials=_infos(current[user])))
    return out


def _infos(creds: Mapping[ScramMechanism, ScramCredential]) -> tuple[tuple[ScramMechanism, int], ...]:
    return tuple((m, c.iterations) for m, c in sorted(creds.items()))
