"""The values the Raft core consumes and produces.

Plain slotted classes rather than protobuf messages: the core is pure Python with no
dependencies, and attribute access on slotted objects is what keeps it fast. The gRPC
transport (``raft.transport``) maps these to ``raft/proto/raft.proto`` at the edge.
"""
from __future__ import annotations

import io
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import BinaryIO, NamedTuple, Protocol


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


class EntryType(IntEnum):
    NORMAL = 0
    CONF_CHANGE = 1
    NOOP = 2  # appended by every new leader (Raft §8) so it can commit in its own term


class MessageType(IntEnum):
    VOTE = 1
    VOTE_RESP = 2
    PRE_VOTE = 3
    PRE_VOTE_RESP = 4
    APPEND = 5
    APPEND_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAPSHOT = 9
    SNAPSHOT_RESP = 10
    TIMEOUT_NOW = 11


# Messages a leader may send while the entries of the same batch are still being written to
# its own disk (Raft thesis §10.2.1): the leader only counts itself once they are durable.
# Everything else (votes, acknowledgements) waits for the fsync.
EARLY_TYPES = frozenset({MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT,
                         MessageType.TIMEOUT_NOW})

ENTRY_OVERHEAD = 24  # bytes counted per entry on top of its data, for message size limits


class Entry:
    """One log entry. ``data`` is opaque to Raft."""

    __slots__ = ("index", "term", "type", "data")

    def __init__(self, index: int, term: int, data: bytes = b"",
                 type: EntryType = EntryType.NORMAL) -> None:
        self.index = index
        self.term = term
        self.type = type
        self.data = data

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Entry) and self.index == other.index
                and self.term == other.term and self.type == other.type
                and self.data == other.data)

    def __hash__(self) -> int:
        return hash((self.index, self.term))

    def __repr__(self) -> str:
        return f"Entry(i={self.index}, t={self.term}, {self.type.name}, {len(self.data)}B)"


@dataclass(frozen=True, slots=True)
class Membership:
    """The cluster configuration: voters elect and count towards commit; learners only
    receive the log (brokers follow the metadata log this way).

    ``directories`` names the data directory of members where it is known, as KIP-853 names a
    voter by (node id, directory id): a node whose disk was wiped and formatted again has a new
    directory id, forgot its votes and acknowledged entries, and so is not the voter it was
    (Raft's safety rests on both staying on disk). A member without one (voters configured
    statically) matches any directory. Given as pairs or a mapping; kept as sorted pairs."""

    voters: frozenset[int] = frozenset()
    learners: frozenset[int] = frozenset()
    directories: tuple[tuple[int, str], ...] = ()
    members: frozenset[int] = field(init=False, compare=False, repr=False)
    quorum_size: int = field(init=False, compare=False, repr=False)
    _dirs: dict[int, str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        members = self.voters | self.learners
        dirs = {n: d for n, d in dict(self.directories).items() if d and n in members}
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "quorum_size", len(self.voters) // 2 + 1)
        object.__setattr__(self, "_dirs", dirs)
        object.__setattr__(self, "directories", tuple(sorted(dirs.items())))

    def quorum(self) -> int:
        return self.quorum_size

    def directory(self, node_id: int) -> str:
        """The member's directory id, "" when unknown."""
        return self._dirs.get(node_id, "")

    def matches(self, node_id: int, directory: str) -> bool:
        """Whether a replica of ``node_id`` with ``directory`` is that member's replica."""
        known = self._dirs.get(node_id, "")
        return not known or known == directory

    def is_voter(self, node_id: int, directory: str) -> bool:
        return node_id in self.voters and self.matches(node_id, directory)

    def encode(self) -> bytes:
        v, lr = sorted(self.voters), sorted(self.learners)
        out = struct.pack(f">HH{len(v)}Q{len(lr)}Q", len(v), len(lr), *v, *lr)
        if self.directories:  # a trailer older readers skip
            out += struct.pack(">H", len(self.directories))
            for nid, d in self.directories:
                raw = d.encode()
                out += struct.pack(">QH", nid, len(raw)) + raw
        return out

    @classmethod
    def decode(cls, raw: bytes) -> "Membership":
        nv, nl = struct.unpack_from(">HH", raw)
        ids = struct.unpack_from(f">{nv + nl}Q", raw, 4)
        pos = 4 + 8 * (nv + nl)
        dirs: dict[int, str] = {}
        if len(raw) >= pos + 2:
            (count,), pos = struct.unpack_from(">H", raw, pos), pos + 2
            for _ in range(count):
                nid, n = struct.unpack_from(">QH", raw, pos)
                dirs[nid] = raw[pos + 10:pos + 10 + n].decode()
                pos += 10 + n
        return cls(frozenset(ids[:nv]), frozenset(ids[nv:]), tuple(dirs.items()))


class ConfChangeType(IntEnum):
    ADD_VOTER = 1  # also promotes an existing learner
    ADD_LEARNER = 2
    REMOVE = 3
    # The voter set storage was formatted with, written by the first leader so that the log
    # names it for nodes formatted without one (KIP-853's bootstrap VotersRecord). Changes nothing.
    BOOTSTRAP = 4


@dataclass(frozen=True, slots=True)
class ConfChange:
    """A single-server membership change. The entry carries the resulting membership in full,
    so a node that joins later learns the whole configuration from the log alone."""

    type: ConfChangeType
    node_id: int
    result: Membership = field(default_factory=Membership)
    context: bytes = b""  # opaque to Raft; the runtime carries the node's address here

    def encode(self) -> bytes:
        m = self.result.encode()
        return struct.pack(">BQI", self.type, self.node_id, len(m)) + m + self.context

    @classmethod
    def decode(cls, raw: bytes) -> "ConfChange":
        t, node, n = struct.unpack_from(">BQI", raw)
        return cls(ConfChangeType(t), node, Membership.decode(raw[13:13 + n]), raw[13 + n:])


class HardState(NamedTuple):
    """What must be on disk before a vote or acknowledgement leaves the node."""

    term: int = 0
    vote: int = 0  # 0: no vote in this term (node ids are positive)
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    membership: Membership = field(default_factory=Membership)
    size: int = 0  # bytes of the state machine's data
    crc: int = 0  # zlib.crc32 of that data
    context: bytes = b""  # opaque to Raft; the runtime keeps the members' addresses here


class Message:
    """One Raft message. A flat record like etcd's ``raftpb.Message``: each type uses the
    fields it needs. ``index``/``log_term`` are the entry preceding ``entries`` for APPEND,
    the candidate's last entry for votes, and the acknowledged index for responses."""

    __slots__ = ("type", "to", "frm", "term", "log_term", "index", "entries", "commit",
                 "reject", "hint_index", "hint_term", "context", "snapshot", "offset",
                 "data", "done", "force", "directory")

    def __init__(self, type: MessageType, to: int, frm: int, term: int, *, log_term: int = 0,
                 index: int = 0, entries: list[Entry] | None = None, commit: int = 0,
                 reject: bool = False, hint_index: int = 0, hint_term: int = 0,
                 context: bytes = b"", snapshot: SnapshotMeta | None = None, offset: int = 0,
                 data: bytes = b"", done: bool = False, force: bool = False) -> None:
        self.type = type
        self.to = to
        self.frm = frm
        self.term = term
        self.log_term = log_term
        self.index = index
        self.entries = entries if entries is not None else []
        self.commit = commit
        self.reject = reject
        self.hint_index = hint_index
        self.hint_term = hint_term
        self.context = context
        self.snapshot = snapshot
        self.offset = offset
        self.data = data
        self.done = done
        self.force = force
        # The sender's data directory (KIP-853): stamped by the sending core, carried per
        # batch on the wire, so a leader or candidate counts only the replica it knows.
        self.directory = ""

    def __repr__(self) -> str:
        extra = f" n={len(self.entries)}" if self.entries else ""
        if self.reject:
            extra += f" reject hint=({self.hint_index},{self.hint_term})"
        return (f"{self.type.name}({self.frm}->{self.to} t={self.term} i={self.index} "
                f"lt={self.log_term} c={self.commit}{extra})")


class SnapshotSource(ABC):
    """Read access to a snapshot's payload, chunk by chunk, without loading it whole: for a
    leader streaming it to a follower and for restoring the state machine. The durable
    storage supplies a file-backed one; :class:`BytesSnapshotSource` holds bytes."""

    meta: SnapshotMeta

    @abstractmethod
    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of the payload from ``offset``."""

    @abstractmethod
    def open_payload(self) -> BinaryIO:
        """The payload as a file object, for ``StateMachine.restore``."""


class BytesSnapshotSource(SnapshotSource):
    def __init__(self, meta: SnapshotMeta, data: bytes) -> None:
        self.meta = meta
        self._data = data

    def read(self, offset: int, size: int) -> bytes:
        return self._data[offset:offset + size]

    def open_payload(self) -> BinaryIO:
        return io.BytesIO(self._data)


class SnapshotReceiver(Protocol):
    """Where a follower writes a snapshot that arrives from the leader in chunks (Kafka's
    FetchSnapshot into a RawSnapshotWriter), so it is never held whole in memory. The core
    checks sizes and the checksum; storage makes the result durable when the Ready holding
    it is saved."""

    def write(self, data: bytes) -> None:
        """Append the next chunk."""

    def finish(self) -> SnapshotSource:
        """Every byte has arrived: a source that reads them back."""

    def abort(self) -> None:
        """The transfer was abandoned: discard what was written."""


class BytesReceiver:
    """A :class:`SnapshotReceiver` in memory (the core's default, and MemoryStorage's)."""

    def __init__(self, meta: SnapshotMeta) -> None:
        self.meta = meta
        self._buf = bytearray()

    def write(self, data: bytes) -> None:
        self._buf += data

    def finish(self) -> SnapshotSource:
        return BytesSnapshotSource(self.meta, bytes(self._buf))

    def abort(self) -> None:
        self._buf = bytearray()


@dataclass(slots=True)
class Snapshot:
    """A snapshot received from the leader, for storage to make durable and the state machine
    to restore: its Raft metadata and a source of its payload."""

    meta: SnapshotMeta
    source: SnapshotSource


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the state machine has applied ``index``. (Not a
    NamedTuple: its ``index`` field would shadow the tuple's ``index`` method.)"""

    context: bytes
    index: int


class SoftState(NamedTuple):
    role: Role
    leader: int  # 0: unknown
    term: int


class Ready:
    """What the caller must do next, in this order: persist ``hard_state``, ``snapshot`` and
    ``entries`` (one fsync; appending an entry replaces any entry at or after its index),
    send ``messages`` (those in :data:`EARLY_TYPES` may go before the fsync completes), apply
    ``committed`` entries, serve ``read_states`` once applied, fail ``dropped_reads``, then
    call ``advance``. Empty fields share one immutable tuple: a Ready is made per cycle."""

    __slots__ = ("hard_state", "soft_state", "snapshot", "entries", "committed", "messages",
                 "read_states", "dropped_reads", "sync")

    def __init__(self, messages: list[Message] | None = None) -> None:
        self.hard_state: HardState | None = None
        self.soft_state: SoftState | None = None
        self.snapshot: Snapshot | None = None
        self.entries: Sequence[Entry] = ()
        self.committed: Sequence[Entry] = ()
        self.messages: list[Message] = messages if messages is not None else []
        self.read_states: list[ReadState] | tuple = ()
        self.dropped_reads: list[bytes] | tuple = ()
        self.sync = False  # True: entries, a snapshot or a new term/vote to fsync

    def must_sync(self) -> bool:
        """Whether persisting this Ready needs an fsync; a commit index alone does not (it
        is recovered from the leader), so it may be written lazily."""
        return self.sync
