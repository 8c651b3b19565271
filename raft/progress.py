"""What the leader knows about each follower's log (Raft §5.3 nextIndex/matchIndex), and the
flow-control state that decides how much to send it (etcd's Progress)."""
from __future__ import annotations

from collections import deque
from enum import IntEnum

from .messages import SnapshotSource


class ProgressState(IntEnum):
    PROBE = 0  # position unknown: one append at a time until one is accepted
    REPLICATE = 1  # position known: pipeline appends, at most ``max_inflight`` unacknowledged
    SNAPSHOT = 2  # the entries it needs are compacted: stream the snapshot


class Progress:
    __slots__ = ("match", "next", "state", "probe_sent", "inflight", "max_inflight",
                 "recent_active", "snap_source", "snap_index", "snap_offset", "snap_acked", "snap_idle",
                 "snap_rewound",
                 "is_learner", "last_contact_tick")

    def __init__(self, next_index: int, max_inflight: int, is_learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight: deque[int] = deque()  # last index of each unacknowledged append
        self.max_inflight = max_inflight
        self.recent_active = False
        self.snap_source: SnapshotSource | None = None  # kept even if a newer one is taken
        self.snap_index = 0
        self.snap_offset = 0  # next byte to send
        self.snap_acked = 0  # bytes the follower has confirmed
        self.snap_idle = 0  # ticks without a snapshot acknowledgement
        self.snap_rewound = -1  # offset we last rewound to after a lost chunk
        self.is_learner = is_learner
        self.last_contact_tick = 0

    def paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return len(self.inflight) >= self.max_inflight
        return True  # snapshot chunks are paced by their acknowledgements

    def become_probe(self) -> None:
        # After a snapshot the follower holds at least the snapshot's index.
        if self.state == ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.snap_index + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight.clear()
        self.snap_index = 0
        self.snap_source = None

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()

    def become_snapshot(self, source: SnapshotSource) -> None:
        self.state = ProgressState.SNAPSHOT
        self.inflight.clear()
        self.snap_source = source
        self.snap_index = source.meta.index
        self.snap_offset = self.snap_acked = self.snap_idle = 0
        self.snap_rewound = -1

    def maybe_update(self, index: int) -> bool:
        """An acknowledgement up to ``index``; returns whether ``match`` advanced."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        if self.next < index + 1:
            self.next = index + 1
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def sent(self, last: int) -> None:
        """An append carrying entries up to ``last`` went out."""
        if self.state == ProgressState.REPLICATE:
            self.next = last + 1
            self.inflight.append(last)
        else:
            self.probe_sent = True

    def __repr__(self) -> str:
        return (f"Progress({self.state.name} match={self.match} next={self.next} "
                f"inflight={len(self.inflight)})")
