"""What a node needs from storage, as one interface (hashicorp/raft's LogStore, StableStore
and SnapshotStore together): :class:`~raft.storage.disk.DiskStorage` keeps it in a data
directory, :class:`~raft.storage.memory.MemoryStorage` nowhere."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Protocol

from ..config import Voter
from ..messages import (Entry, HardState, Membership, Ready, SnapshotMeta, SnapshotReceiver,
                        SnapshotSource)


@dataclass
class RecoveredState:
    """What a node restarts from."""

    hard_state: HardState = HardState()
    snapshot: SnapshotMeta | None = None
    snapshot_source: SnapshotSource | None = None
    entries: list[Entry] = field(default_factory=list)
    truncated_tail: str = ""  # set when a torn tail was cut off: what and where
    bootstrap: tuple[Voter, ...] = ()  # the voter set formatted into storage (KIP-853), if any


class Storage(Protocol):
    """Called by ``RaftNode``: ``recover`` once, then ``save`` for every Ready from one
    thread at a time; ``write_snapshot`` from another thread; ``receive_snapshot`` on the
    event loop (the returned receiver's ``write`` must be quick: a buffered file write)."""

    @property
    def cluster_id(self) -> str | None:
        """The formatted cluster's id, if the storage knows it (read-only here, so a storage
        that always knows it may declare ``str``)."""

    @property
    def directory_id(self) -> str:
        """Changes when the storage is formatted again ("" if it never is)."""

    def recover(self) -> RecoveredState:
        """The newest snapshot, the entries after it and the last hard state."""

    def save(self, rd: Ready) -> None:
        """Persist ``rd.snapshot`` (received from the leader: it replaces the log), then
        ``rd.hard_state`` and ``rd.entries`` (an entry replaces any at or after its index),
        durably before returning when ``rd.must_sync()``."""

    def receive_snapshot(self, meta: SnapshotMeta) -> SnapshotReceiver:
        """Where the chunks of a snapshot from the leader go as they arrive."""

    def write_snapshot(self, index: int, term: int, membership: Membership, context: bytes,
                       write_payload: Callable[[BinaryIO], None]) -> SnapshotSource:
        """Write the application's snapshot at ``index`` durably; return a source of it."""

    def compact(self, meta: SnapshotMeta) -> None:
        """Drop what the snapshot ``meta`` (handed to the core already) makes unnecessary."""

    def close(self) -> None:
        """Release files; no call follows."""
