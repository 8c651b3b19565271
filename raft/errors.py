"""Errors raised to users of the Raft library. Each carries what the caller needs to act."""
from __future__ import annotations


class RaftError(Exception):
    """Base class of the library's errors."""


class NotLeader(RaftError):
    """This node cannot take the request; ``leader_id``/``leader_address`` name the node that
    can, when known (0 / None otherwise). Retriable against the leader."""

    def __init__(self, leader_id: int = 0, leader_address: str | None = None,
                 message: str | None = None) -> None:
        self.leader_id = leader_id
        self.leader_address = leader_address
        where = (f"node {leader_id} at {leader_address}" if leader_address
                 else f"node {leader_id}" if leader_id else "unknown")
        super().__init__(message or f"not the leader; the leader is {where}")


class ProposalDropped(RaftError):
    """The proposal was certainly not applied, and never will be: it was not appended (a
    leadership transfer or membership change is pending, too much is uncommitted), or a leader
    of a later term replaced the entry at its index. Safe to retry."""


class OutcomeUnknown(RaftError):
    """The entry was appended, but this node can no longer tell whether it committed: a
    snapshot from the leader covered its index, or the node stopped first. It may have been
    applied; do not retry a non-idempotent write blindly (docs/raft.md, "Write outcomes")."""


class NodeStopped(RaftError):
    """The node is not running (stopping, stopped, or not started), so the call did nothing."""


class LogCompacted(RaftError):
    """The entries asked for were compacted into a snapshot: read the snapshot
    (``snapshot``), then continue from ``first_index``."""

    def __init__(self, first_index: int, snapshot) -> None:
        self.first_index = first_index
        self.snapshot = snapshot
        super().__init__(f"the log starts at {first_index}; older entries are in the snapshot "
                         f"at {snapshot.index}")


class CommittedConflict(RaftError):
    """A message tried to overwrite a committed entry. A correct leader never sends one, so the
    message is dropped and counted."""


class StorageError(RaftError):
    """The data directory is unusable: corrupted, foreign, or not formatted."""


class MembershipRefused(RaftError):
    """A membership change that cannot be made as asked (the last voter, no live majority
    left, another replica's directory); nothing was appended."""


class TooManyObservers(RaftError):
    """The leader already replicates to as many observers as it will (``raft.core.MAX_OBSERVERS``);
    ask again once one is forgotten or made a member."""


class NotCaughtUp(RaftError):
    """A node to be added as a voter did not catch up with the leader's log in time."""


class LeftAsLearner(RaftError):
    """``add_voter`` made the node a learner (that change committed), then could not make it a
    voter: ``cause`` says why. It stays a learner, replicated to and counted for nothing, until
    ``add_voter`` is called again or ``remove_member`` removes it (KIP-853's AddVoter has two
    steps, thesis §4.2.1; only the first took effect)."""

    def __init__(self, node_id: int, directory_id: str, cause: RaftError) -> None:
        self.node_id, self.directory_id, self.cause = node_id, directory_id, cause
        where = f" (directory {directory_id})" if directory_id else ""
        super().__init__(f"node {node_id} was added as a learner{where} but not made a voter: {cause}; it stays a "
                         f"learner until add_voter makes it a voter or remove_member removes it")
