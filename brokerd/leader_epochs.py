"""The leader epoch cache of a partition log (Kafka's LeaderEpochFileCache, KIP-101): for each
leader epoch seen in the log, the offset of its first record.

It answers OffsetsForLeaderEpoch ("where does epoch E end in your log?"), which is how a
follower finds where its log diverges from a new leader's and truncates exactly the suffix the
new leader does not have, instead of trusting its high watermark (which can be stale and
lose acknowledged records, or keep records the leader never had).
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def _start(entry: tuple[int, int]) -> int:
    return entry[1]


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` entries; epochs and start offsets both increase."""

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self.entries: list[tuple[int, int]] = sorted(entries)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when that is new. Entries at or
        after a new epoch's start (left by an older leader's suffix) are dropped."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the batch at base offset ``offset``: the last epoch starting at or before
        it, or the first when it starts before every one (retention moves the first epoch's
        start into its batch: ``truncate_from_start``); None when there is none. What a
        stored batch's partition leader epoch is checked against (``stored_batch.intact``)."""
        if not self.entries:
            return None
        i = bisect.bisect_right(self.entries, offset, key=_start) - 1
        return self.entries[max(i, 0)][0]

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)``: the largest epoch <= ``requested`` and where it ends (the next
        epoch's start, or the log end for the latest). Kafka's ``endOffsetFor``."""
        if requested == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == self.latest_epoch:
            return requested, log_end_offset
        i = bisect.bisect_right(self.entries, (requested, 1 << 63))  # first entry with a higher epoch
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # newer than anything we know
        higher_start = self.entries[i][1]
        if i == 0:
            return requested, higher_start  # older than our oldest epoch
        return self.entries[i - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> list[int]:
        """The log was truncated to ``end_offset``: drop epochs starting at or after it; returns
        the epochs dropped."""
        dropped = []
        while self.entries and self.entries[-1][1] >= end_offset:
            dropped.append(self.entries.pop()[0])
        return dropped

    def truncate_from_start(self, start_offset: int) -> tuple[list[int], tuple[int, int] | None]:
        """The log now starts at ``start_offset``: epochs wholly before it go, the one that spans
        it starts there. Returns the epochs dropped and the entry moved (if any)."""
        dropped: list[int] = []
        while len(self.entries) > 1 and self.entries[1][1] <= start_offset:
            dropped.append(self.entries.pop(0)[0])
        moved = None
        if self.entries and self.entries[0][1] < start_offset:
            self.entries[0] = moved = (self.entries[0][0], start_offset)
        return dropped, moved

    def clear(self) -> list[int]:
        dropped = [e for e, _ in self.entries]
        self.entries.clear()
        return dropped
