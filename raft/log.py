"""The core's view of the replicated log: entries after the last snapshot, plus the
commit, apply and persistence cursors (Raft §5.3, §7)."""
from __future__ import annotations

from .errors import CommittedConflict
from .messages import ENTRY_OVERHEAD, Entry, SnapshotMeta


class RaftLog:
    """Entries ``snap_index+1 .. last_index`` live in ``entries``; everything at or before
    ``snap_index`` is covered by the snapshot.

    Cursors: ``stable`` (last index known to be on disk), ``committed`` (known to be on a
    majority), ``applied`` (handed to the application in a Ready). They keep, at every step
    (``check``, asserted by the simulator after every event):

        snap_index <= applied <= committed <= last_index    (nothing applied before it is
                                                              committed, Raft §5.4)
        snap_index <= stable <= last_index
        entries[k].index == snap_index + 1 + k               (the log has no holes)
        terms never decrease along the log                   (Raft §5.3, log matching)
    """

    __slots__ = ("snap_index", "snap_term", "entries", "committed", "applied", "stable")

    def __init__(self, snap_index: int = 0, snap_term: int = 0,
                 entries: list[Entry] | None = None, committed: int = 0) -> None:
        self.snap_index = snap_index
        self.snap_term = snap_term
        self.entries: list[Entry] = list(entries or [])
        self.stable = self.last_index()
        self.committed = max(committed, snap_index)
        self.applied = snap_index

    def check(self) -> None:
        """Raise AssertionError if a cursor invariant above is broken (O(1): the ends)."""
        problems = []
        if not self.snap_index <= self.applied <= self.committed <= self.last_index():
            problems.append("snapshot <= applied <= committed <= last")
        if not self.snap_index <= self.stable <= self.last_index():
            problems.append("snapshot <= stable <= last")
        if self.entries and self.entries[0].index != self.snap_index + 1:
            problems.append("the first entry follows the snapshot")
        if self.entries and (self.entries[0].term < self.snap_term
                             or self.entries[-1].term < self.entries[0].term):
            problems.append("terms never decrease")
        if problems:
            raise AssertionError(f"log cursors broken ({'; '.join(problems)}): snapshot "
                                 f"{self.snap_index}, applied {self.applied}, committed "
                                 f"{self.committed}, stable {self.stable}, last {self.last_index()}")

    # -- reading -------------------------------------------------------------------------

    def last_index(self) -> int:
        return self.snap_index + len(self.entries)

    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.snap_term

    def term(self, index: int) -> int | None:
        """The term of the entry at ``index``; None when compacted away or beyond the end."""
        off = index - self.snap_index
        if off == 0:
            return self.snap_term
        if 0 < off <= len(self.entries):
            return self.entries[off - 1].term
        return None

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: a candidate's log is at least as up to date as ours."""
        my_term = self.last_term()
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index())

    def entry(self, index: int) -> Entry:
        return self.entries[index - self.snap_index - 1]

    def slice(self, lo: int, max_entries: int, max_bytes: int) -> list[Entry]:
        """Entries from ``lo`` on, at most ``max_entries`` and about ``max_bytes`` (always at
        least one entry, so an oversized entry still makes progress)."""
        start = lo - self.snap_index - 1
        if start < 0:
            raise IndexError(f"index {lo} is compacted (snapshot at {self.snap_index})")
        out = self.entries[start:start + max_entries]
        size = 0
        for k, e in enumerate(out):
            size += len(e.data) + ENTRY_OVERHEAD
            if size > max_bytes and k > 0:
                return out[:k]
        return out

    def conflict_hint(self, index: int) -> tuple[int, int]:
        """For a rejected AppendEntries whose previous entry is ``index``: our conflicting term
        and the first index we hold of it, or (last index + 1, 0) when our log is shorter.
        Lets the leader skip a whole term per round trip instead of one entry."""
        if index > self.last_index():
            return self.last_index() + 1, 0
        term = self.term(index)
        assert term is not None
        first = index
        while first - 1 > self.snap_index and self.entry(first - 1).term == term:
            first -= 1
        return first, term

    def last_index_of_term(self, term: int) -> int:
        """The last index holding ``term`` in our log, or 0."""
        for e in reversed(self.entries):
            if e.term == term:
                return e.index
            if e.term < term:
                return 0
        return self.snap_index if self.snap_term == term else 0

    # -- writing -------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Leader-side append of new entries at the end of the log."""
        self.entries.extend(entries)

    def maybe_append(self, prev_index: int, prev_term: int, entries: list[Entry]) -> int | None:
        """Follower side of AppendEntries (Raft §5.3). Returns the index of the last entry the
        message covers, or None when the consistency check on (prev_index, prev_term) fails."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        if prev_index == self.snap_index + len(self.entries):  # the common case: at our end
            self.entries.extend(entries)
            return last_new
        for k, e in enumerate(entries):
            t = self.term(e.index)
            if t is None and e.index <= self.snap_index:
                continue  # already covered by our snapshot: committed, hence identical
            if t != e.term:
                if e.index <= self.committed:
                    raise CommittedConflict(f"entry {e.index} conflicts with a committed entry")
                self._truncate_from(e.index)
                self.entries.extend(entries[k:])
                break
        return last_new

    def _truncate_from(self, index: int) -> None:
        del self.entries[index - self.snap_index - 1:]
        if self.stable >= index:
            self.stable = index - 1

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            self.committed = min(index, self.last_index())
            return True
        return False

    def unstable(self) -> list[Entry]:
        return self.entries[self.stable - self.snap_index:]

    def stable_to(self, index: int, term: int) -> None:
        if index > self.stable and self.term(index) == term:
            self.stable = index

    def take_committed(self, max_entries: int) -> list[Entry]:
        lo = self.applied - self.snap_index
        out = self.entries[lo:lo + min(self.committed - self.applied, max_entries)]
        if out:
            self.applied = out[-1].index
        return out

    def restore(self, meta: SnapshotMeta) -> None:
        """Replace the log with a snapshot received from the leader (Raft §7)."""
        self.snap_index, self.snap_term = meta.index, meta.term
        self.entries = []
        self.committed = self.applied = self.stable = meta.index

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` once a snapshot covers them."""
        if index <= self.snap_index:
            return
        term = self.term(index)
        if term is None or index > self.applied:
            raise ValueError(f"cannot compact to {index}: applied is {self.applied}, "
                             f"log is {self.snap_index}..{self.last_index()}")
        del self.entries[:index - self.snap_index]
        self.snap_index, self.snap_term = index, term
