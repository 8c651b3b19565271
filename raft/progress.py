"""What the leader knows about each follower's log (Raft §5.3 nextIndex/matchIndex), and the
flow-control state that decides how much to send it (etcd's Progress)."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from enum import IntEnum

from .messages import SnapshotSource


class ProgressState(IntEnum):
    PROBE = 0  # position unknown: one append at a time until one is accepted
    REPLICATE = 1  # position known: pipeline appends, at most ``max_inflight`` unacknowledged
    SNAPSHOT = 2  # the entries it needs are compacted: stream the snapshot


class SnapshotTransfer:
    """One snapshot streaming to one follower. Chunks go out while fewer than ``window``
    bytes are unconfirmed; a rejection names the offset the follower expects, and we rewind
    there once (the other chunks of the window that followed a gap are rejected too); a
    silence of ``idle_limit`` ticks means chunks or acknowledgements were lost, so we rewind
    to the last confirmed byte. The follower writes chunks as they come
    (``SnapshotReceiver``), so resending from an offset is all a retry needs."""

    __slots__ = ("source", "offset", "acked", "idle", "rewound")

    def __init__(self, source: SnapshotSource) -> None:
        self.source = source  # kept even if a newer snapshot is taken meanwhile
        self.offset = 0  # next byte to send; size + 1 once the last chunk went
        self.acked = 0  # bytes the follower has confirmed
        self.idle = 0  # ticks without an acknowledgement
        self.rewound = -1  # the offset we last rewound to after a rejection

    @property
    def index(self) -> int:
        return self.source.meta.index

    def chunks(self, chunk_bytes: int, window: int) -> Iterator[tuple[int, bytes, bool]]:
        """(offset, data, last) of the chunks that may go now."""
        size = self.source.meta.size
        while self.offset <= size and self.offset - self.acked < window:
            off = self.offset
            data = self.source.read(off, min(chunk_bytes, size - off))
            last = off + len(data) >= size
            self.offset = size + 1 if last else off + len(data)
            yield off, data, last

    def answered(self, offset: int, reject: bool) -> bool:
        """The follower confirmed ``offset`` bytes, or rejected a chunk and expects
        ``offset``; returns whether more may be sent."""
        self.idle = 0
        if reject:
            if offset == self.rewound:
                return False
            self.offset = self.acked = self.rewound = offset
        elif offset > self.acked:
            self.acked = offset
            self.rewound = -1
        return True

    def tick(self, idle_limit: int) -> bool:
        """One tick without news; returns True when it rewound (send again)."""
        self.idle += 1
        if self.idle < idle_limit:
            return False
        self.idle, self.offset, self.rewound = 0, self.acked, -1
        return True


class Progress:
    __slots__ = ("match", "next", "state", "probe_sent", "inflight", "max_inflight",
                 "recent_active", "snapshot", "is_learner", "last_contact_tick", "asked_tick",
                 "directory", "observer", "commit_known")

    def __init__(self, next_index: int, max_inflight: int, is_learner: bool = False,
                 observer: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight: deque[int] = deque()  # last index of each unacknowledged append
        self.max_inflight = max_inflight
        self.recent_active = False
        self.snapshot: SnapshotTransfer | None = None  # set in the SNAPSHOT state
        self.is_learner = is_learner
        # The leader's tick of the last answer to its own appends, heartbeats or snapshot chunks
        # in its term (-1: never): the only proof that the leader reaches this node.
        self.last_contact_tick = -1
        # The leader's tick of this node's last Observe request (-1: never). It keeps an observer
        # from being forgotten, but proves nothing about the leader's messages reaching it.
        self.asked_tick = -1
        self.directory = ""  # the data directory its answers come from (KIP-853)
        self.observer = observer  # not a member: replicated to, never counted
        self.commit_known = 0  # the commit index its answers last said it knows

    def paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return len(self.inflight) >= self.max_inflight
        return True  # snapshot chunks are paced by their acknowledgements

    def become_probe(self) -> None:
        # After a snapshot the follower holds at least the snapshot's index.
        if self.snapshot is not None:
            self.next = max(self.match + 1, self.snapshot.index + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight.clear()
        self.snapshot = None

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()
        self.snapshot = None

    def become_snapshot(self, source: SnapshotSource) -> None:
        self.state = ProgressState.SNAPSHOT
        self.inflight.clear()
        self.snapshot = SnapshotTransfer(source)

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

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """The follower rejected the append whose previous entry is ``rejected``; ``hint`` is
        where to try next (the leader works it out from the follower's conflict hint,
        thesis §5.3). Returns False for a stale rejection (etcd's MaybeDecrTo)."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False  # answers an append sent before a newer acknowledgement
        elif self.state == ProgressState.PROBE:
            if self.next - 1 != rejected:
                return False  # answers an older probe
        else:
            return False  # snapshot transfers are paced by their own answers
        self.become_probe()
        self.next = max(min(hint, rejected), self.match + 1)
        return True

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
