"""An embeddable Raft library.

``raft.core`` is the consensus algorithm as a pure state machine; ``raft.testing`` simulates
whole clusters of it deterministically. The asyncio runtime (durable storage, gRPC transport
and the node API) builds on these.
"""
from .core import CoreConfig, CoreStatus, RaftCore
from .errors import NodeStopped, NotLeader, OutcomeUnknown, ProposalDropped, RaftError, StorageError
from .messages import (ConfChangeType, Entry, EntryType, HardState, Membership, Message,
                       MessageType, ReadState, Ready, Role, Snapshot, SnapshotMeta)

__all__ = [
    "ConfChangeType", "CoreConfig", "CoreStatus", "Entry", "EntryType", "HardState",
    "Membership", "Message", "MessageType", "NodeStopped", "NotLeader", "OutcomeUnknown",
    "ProposalDropped", "RaftCore",
    "RaftError", "ReadState", "Ready", "Role", "Snapshot", "SnapshotMeta", "StorageError",
]
