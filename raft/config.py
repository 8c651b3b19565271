"""How a node is configured: its peers in Kafka's ``controller.quorum.voters`` form and the
options of the runtime, with defaults documented in docs/raft.md."""
from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass

from common.config_def import ConfigError
from common.tls import TLSConfig

from .core import CoreConfig

_VOTER = re.compile(r"^(\d+)@(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


#: A data directory id: Kafka's form is 22 characters of URL-safe base64 (``new_directory_id``);
#: older directories hold a dashed UUID, which is accepted too.
_DIRECTORY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Kafka's zero Uuid, which it prints for a voter whose directory is unknown (a static voter).
UNKNOWN_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"


def new_directory_id() -> str:
    """A random directory id in Kafka's form (a Uuid as 22 characters of URL-safe base64); like
    Kafka's ``Uuid.randomUuid`` never one that starts with '-', which reads as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def check_directory_id(text: str, what: str = "directory id") -> str:
    if not _DIRECTORY_ID.match(text or "") or text == UNKNOWN_DIRECTORY:
        raise ConfigError(f"bad {what} {text!r}: expected a directory id such as MvDxzVmcRsaTz33bUuRU6A "
                          f"(the directory.id in meta.properties)")
    return text


@dataclass(frozen=True, slots=True)
class Voter:
    """A voter as KIP-853 names it: node id and data directory id ("" when unknown: a voter
    of ``controller.quorum.voters``), and where it listens."""

    node_id: int
    address: str
    directory_id: str = ""

    def __str__(self) -> str:
        return f"{self.node_id}@{self.address}" + (f":{self.directory_id}" if self.directory_id else "")


def parse_voter_set(text: str) -> list[Voter]:
    """Kafka's ``--initial-controllers``: ``1@host:9093:DIRID,2@host:9094:DIRID``, every voter
    with the directory id its data directory is (or will be) formatted with."""
    voters: list[Voter] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        address, _, directory = part.rpartition(":")
        if not address or ":" not in address:
            raise ConfigError(f"bad voter {part!r}: expected ID@HOST:PORT:DIRECTORY_ID, e.g. "
                              "1@localhost:9093:MvDxzVmcRsaTz33bUuRU6A")
        (nid, addr), = parse_voters(address).items()
        if any(v.node_id == nid for v in voters):
            raise ConfigError(f"node id {nid} appears twice in {text!r}")
        voters.append(Voter(nid, addr, check_directory_id(directory, f"directory id of voter {nid}")))
    if not voters:
        raise ConfigError("no voters given: expected ID@HOST:PORT:DIRECTORY_ID[,...]")
    return voters


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
    prepare_in_thread_bytes: int = 64 << 10  # entries this large go through StateMachine.prepare in a thread
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
