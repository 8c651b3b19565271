"""``kraft configs --entity-type users`` (kafka-configs.sh's SCRAM credentials, KIP-554) and
``kraft storage format --add-scram`` (KIP-900): the syntax of those options turned into the
controller's requests and records. The password is salted and hashed here, on the operator's
side: what travels and what the metadata log keeps are the salted hashes."""
from __future__ import annotations

from collections.abc import Sequence

from metadata.records import MetadataRecord
from metadata.scram import ScramMechanism, alter_credentials, iterations_of, parse_scram_config, upsertion
from protos import controller_pb2 as pb


def _entries(text: str) -> list[str]:
    """``SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]``: split between the bracketed entries."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [e for e in out if e.strip()]


def alter_request(user: str, add: str | None, delete: str | None) -> pb.AlterUserScramCredentialsRequest:
    """``--add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'`` and ``--delete-config
    SCRAM-SHA-512``; ValueError (or KafkaError for a mechanism) naming what is wrong."""
    req = pb.AlterUserScramCredentialsRequest()
    for entry in _entries(add or ""):
        mechanism, fields = parse_scram_config(entry)
        if "password" not in fields:
            raise ValueError(f"{mechanism.mechanism_name}=[...] needs password=...")
        unknown = set(fields) - {"password", "iterations"}
        if unknown:
            raise ValueError(f"{mechanism.mechanism_name}=[...]: unknown key(s) {', '.join(sorted(unknown))}; "
                             f"use iterations and password")
        u = upsertion(user, mechanism, fields["password"], iterations_of(fields))
        req.upsertions.add(name=user, mechanism=u.mechanism, iterations=u.iterations, salt=u.salt,
                           salted_password=u.salted_password)
    for name in filter(None, (n.strip() for n in (delete or "").split(","))):
        req.deletions.add(name=user, mechanism=int(ScramMechanism.named(name)))
    if not req.upsertions and not req.deletions:
        raise ValueError("--alter needs --add-config 'SCRAM-SHA-512=[password=...]' and/or --delete-config "
                         "SCRAM-SHA-512")
    return req


def describe_lines(resp: pb.DescribeUserScramCredentialsResponse) -> list[str]:
    """As kafka-configs.sh prints them: ``SCRAM credential configs for user-principal 'alice' are
    SCRAM-SHA-512=iterations=8192``."""
    return [f"SCRAM credential configs for user-principal '{r.user}' are " + ", ".join(
        f"{ScramMechanism(c.mechanism).mechanism_name}=iterations={c.iterations}" for c in r.credentials)
        for r in resp.results]


def bootstrap_credentials(options: Sequence[str]) -> list[MetadataRecord]:
    """``--add-scram 'SCRAM-SHA-512=[name=admin,password=...]'`` (repeatable) as the records a new
    cluster starts with; checked by the controller's own rules (iterations, one per user and
    mechanism). ValueError naming what is wrong."""
    upserts = []
    for option in options:
        mechanism, fields = parse_scram_config(option)
        if not fields.get("name") or "password" not in fields:
            raise ValueError(f"--add-scram {mechanism.mechanism_name}=[...] needs name=USER and password=...")
        upserts.append(upsertion(fields["name"], mechanism, fields["password"], iterations_of(fields)))
    records, results = alter_credentials({}, [], upserts)
    for r in results:
        if r.error is not None:
            raise ValueError(f"--add-scram for {r.user!r}: {r.error.message}")
    return records
