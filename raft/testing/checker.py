"""Raft's safety properties (paper §5.2-5.4, Figure 3), checked as a simulation runs.

Each check is incremental so it can run after every step: the checker is told about every
leader, every persisted entry, every commit and every applied entry, and remembers just
enough to catch a violation the moment it happens.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..log import RaftLog
from ..messages import Entry


class SafetyViolation(AssertionError):
    pass


class SafetyChecker:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, int] = {}
        self.entry_at: dict[tuple[int, int], tuple[int, bytes, int]] = {}  # (i,t) -> (type,data,prev term)
        self.committed: dict[int, int] = {}  # index -> term, for every index ever committed
        self.max_committed = 0
        self.applied: dict[int, tuple[int, bytes]] = {}  # index -> (term, data) of applied entries
        self.state_at: dict[int, int] = {}  # index -> state-machine digest after applying it

    # election safety: at most one leader per term
    def leader(self, node: int, term: int) -> None:
        other = self.leader_of_term.setdefault(term, node)
        if other != node:
            raise SafetyViolation(f"two leaders in term {term}: nodes {other} and {node}")

    # log matching: an (index, term) pair names one entry, and one predecessor
    def persisted(self, node: int, entries: Sequence[Entry], prev_term: int) -> None:
        for e in entries:
            key = (e.index, e.term)
            seen = self.entry_at.setdefault(key, (e.type, e.data, prev_term))
            if seen != (e.type, e.data, prev_term):
                raise SafetyViolation(
                    f"log matching: node {node} holds a different entry at index {e.index} term {e.term}")
            prev_term = e.term

    # leader completeness: a new leader holds every committed entry
    def leader_log(self, node: int, term: int, log: RaftLog) -> None:
        for i in range(log.snap_index + 1, self.max_committed + 1):
            t = self.committed.get(i)
            if t is not None and log.term(i) != t:
                raise SafetyViolation(
                    f"leader completeness: node {node} leads term {term} without committed entry {i} (term {t})")

    # committed entries never change
    def commit(self, node: int, log: RaftLog, old: int, new: int) -> None:
        for i in range(max(old, log.snap_index) + 1, new + 1):
            t = log.term(i)
            if t is None:
                raise SafetyViolation(f"node {node} committed index {i}, which its log does not hold")
            known = self.committed.setdefault(i, t)
            if known != t:
                raise SafetyViolation(f"node {node} committed index {i} with term {t}, "
                                      f"but term {known} was committed there before")
        self.max_committed = max(self.max_committed, new)

    # state machine safety: no two nodes apply different entries at the same index
    def apply(self, node: int, e: Entry, digest: int) -> None:
        seen = self.applied.setdefault(e.index, (e.term, e.data))
        if seen != (e.term, e.data):
            raise SafetyViolation(f"state machine safety: node {node} applied a different entry "
                                  f"at index {e.index}")
        self.digest(node, e.index, digest)

    def digest(self, node: int, index: int, digest: int) -> None:
        seen = self.state_at.setdefault(index, digest)
        if seen != digest:
            raise SafetyViolation(f"state machine safety: node {node} has a different state after index {index}")

    def commit_monotonic(self, node: int, before: int, after: int) -> None:
        if after < before:
            raise SafetyViolation(f"node {node}'s commit index went back from {before} to {after}")
