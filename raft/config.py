"""How a node is configured: its peers in Kafka's ``controller.quorum.voters`` form and the
options of the runtime, with defaults documented in docs/raft.md."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .core import CoreConfig

_VOTER = re.compile(r"^(\d+)@(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which and what is expected."""


def read_properties(path: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line
    continuations. The one parser of properties files (server configs, ``meta.properties``)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    buf = ""
    for raw in lines:
        line = raw.strip()
        if not buf and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1]
            continue
        line, buf = buf + line, ""
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}: cannot parse line {raw!r}: expected key=value")
        props[m.group(1)] = m.group(2).strip()
    return props


def bounded_int(text: str, least: int, most: int | None = None) -> int:
    """The one parser of integer options: ``text`` as an int within [least, most], or a
    ValueError whose message callers prefix with the option's name."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not an integer") from None
    if most is not None and not least <= value <= most:
        raise ValueError(f"{value} must be between {least} and {most}")
    if value < least:
        raise ValueError(f"{value} must be at least {least}")
    return value


def parse_voters(text: str) -> dict[int, str]:
    """``1@host:9093,2@host:9094`` -> {1: "host:9093", 2: "host:9094"}."""
    voters: dict[int, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _VOTER.match(part)
        if not m or not 0 < int(m.group(3)) < 65536 or int(m.group(1)) <= 0:
            raise ConfigError(f"bad voter {part!r}: expected ID@HOST:PORT with a positive id, "
                              f"e.g. 1@localhost:9093")
        nid = int(m.group(1))
        if nid in voters:
            raise ConfigError(f"node id {nid} appears twice in the voters {text!r}")
        voters[nid] = f"{m.group(2)}:{m.group(3)}"
    if not voters:
        raise ConfigError("no voters given: expected ID@HOST:PORT[,ID@HOST:PORT...]")
    return voters


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """PEM material, each item a file's path or the PEM text itself (files are read when a
    channel or port opens, so a renewed certificate is picked up by the next connection).
    ``cert``/``key`` are this side's identity: required to serve, and what a client shows for
    mutual TLS. With ``ca`` set, peers are verified against it (else the system's roots); with
    ``require_client_auth`` the server also demands a client certificate (mutual TLS)."""

    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    require_client_auth: bool = False
    server_name: str | None = None  # override for the name checked in peers' certificates


@dataclass(frozen=True, slots=True)
class NodeOptions:
    tick_ms: int = 50
    heartbeat_interval_ms: int = 100
    election_timeout_ms: int = 500  # followers campaign after a random 1-2x this without a leader
    max_entries_per_append: int = 4096
    max_bytes_per_append: int = 1 << 20
    max_inflight_appends: int = 256
    max_uncommitted_entries: int = 65536  # proposals beyond this fail fast (backpressure)
    snapshot_entries: int = 100_000  # snapshot after this many entries applied since the last
    snapshot_bytes: int = 256 << 20  # ... or this many bytes of entry data
    snapshot_trailing_entries: int = 10_000  # kept in memory after a snapshot for slow followers
    snapshot_chunk_bytes: int = 1 << 20
    prepare_in_thread_bytes: int = 64 << 10  # entries this large use StateMachine.prepare, if defined
    max_message_bytes: int = 32 << 20  # peer batches above this are refused
    pre_vote: bool = True
    check_quorum: bool = True
    fsync: bool = True
    transfer_leadership_on_stop: bool = True
    tls: TLSConfig | None = None
    listen: str | None = None  # bind address when it differs from the advertised one

    def core_config(self) -> CoreConfig:
        if self.tick_ms <= 0 or self.heartbeat_interval_ms < self.tick_ms:
            raise ConfigError("tick_ms must be positive and no larger than heartbeat_interval_ms")
        if self.election_timeout_ms <= self.heartbeat_interval_ms:
            raise ConfigError("election_timeout_ms must exceed heartbeat_interval_ms")
        return CoreConfig(
            election_ticks=max(2, self.election_timeout_ms // self.tick_ms),
            heartbeat_ticks=max(1, self.heartbeat_interval_ms // self.tick_ms),
            max_inflight=self.max_inflight_appends,
            max_entries_per_msg=self.max_entries_per_append,
            max_bytes_per_msg=self.max_bytes_per_append,
            max_uncommitted_entries=self.max_uncommitted_entries,
            pre_vote=self.pre_vote, check_quorum=self.check_quorum,
            snapshot_chunk_bytes=self.snapshot_chunk_bytes)
