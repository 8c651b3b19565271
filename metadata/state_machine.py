"""The metadata log as a Raft state machine: every committed RecordBatch is replayed into an
immutable MetadataImage, and snapshots are metadata snapshot files.

Every controller also keeps, incrementally, what the active controller needs at once after a
failover: the leader and replica count of each broker (for placement) and the folded topic
names (for Kafka's '.'/'_' collision rule). Rebuilding them would mean a pass over every
partition, which at a million partitions would slow failover down."""
from __future__ import annotations

import uuid
from collections import Counter
from typing import BinaryIO, Callable, Iterable

from protos import metadata_pb2 as pb
from raft.messages import Entry
from raft.state_machine import StateMachine

from .delta import MetadataDelta
from .image import MetadataImage
from .placement import BrokerLoad
from .records import NO_LEADER, decode_batch
from .snapshot import read_info, read_snapshot, write_snapshot


def fold(name: str) -> str:
    """Topic names that differ only in '.' versus '_' collide in Kafka's metric names."""
    return name.replace(".", "_")


class ClusterStats:
    def __init__(self) -> None:
        self.leaders: Counter[int] = Counter()
        self.replicas: Counter[int] = Counter()
        self.folded_names: set[str] = set()
        self.removed_names: set[str] = set()  # in a change: names a batch removed

    @classmethod
    def of(cls, image: MetadataImage) -> "ClusterStats":
        s = cls()
        load = BrokerLoad.of(image)
        s.leaders.update(load.leaders)
        s.replicas.update(load.replicas)
        s.folded_names = {fold(n) for n in image.topics_by_name}
        return s

    def load(self) -> BrokerLoad:
        return BrokerLoad(+self.leaders, +self.replicas)

    def merge(self, change: "ClusterStats") -> None:
        """Add what ``changes`` counted (negative counts and removed names included)."""
        self.leaders.update(change.leaders)
        self.replicas.update(change.replicas)
        self.folded_names |= change.folded_names
        self.folded_names -= change.removed_names

    @classmethod
    def changes(cls, before: MetadataImage, records: Iterable[pb.MetadataRecord]) -> "ClusterStats":
        """What one batch changes, as counts to add; reads nothing but its arguments, so it
        may run in a thread (``MetadataStateMachine.prepare``)."""
        self = cls()
        current: dict[tuple[bytes, int], tuple[int, tuple[int, ...]]] = {}

        def old(tid: bytes, pid: int) -> tuple[int, tuple[int, ...]]:
            if (tid, pid) in current:
                return current[(tid, pid)]
            p = before.partition(uuid.UUID(bytes=tid), pid)
            return (p.leader, p.replicas) if p is not None else (NO_LEADER, ())

        for r in records:
            kind = r.WhichOneof("record")
            if kind == "topic":
                self.folded_names.add(fold(r.topic.name))
                self.removed_names.discard(fold(r.topic.name))
            elif kind == "partition":
                p = r.partition
                if p.leader != NO_LEADER:
                    self.leaders[p.leader] += 1
                self.replicas.update(p.replicas)
                current[(p.topic_id, p.partition_id)] = (p.leader, tuple(p.replicas))
            elif kind == "partition_change":
                c = r.partition_change
                leader, replicas = old(c.topic_id, c.partition_id)
                if c.HasField("leader") and c.leader != leader:
                    if leader != NO_LEADER:
                        self.leaders[leader] -= 1
                    if c.leader != NO_LEADER:
                        self.leaders[c.leader] += 1
                    leader = c.leader
                if c.HasField("replicas"):
                    self.replicas.subtract(replicas)
                    replicas = tuple(c.replicas.ids)
                    self.replicas.update(replicas)
                current[(c.topic_id, c.partition_id)] = (leader, replicas)
            elif kind == "remove_topic":
                t = before.topics_by_id.get(uuid.UUID(bytes=r.remove_topic.topic_id))
                if t is not None:
                    self.folded_names.discard(fold(t.name))
                    self.removed_names.add(fold(t.name))
                    for pid in t.partitions:
                        leader, replicas = old(t.id.bytes, pid)
                        if leader != NO_LEADER:
                            self.leaders[leader] -= 1
                        self.replicas.subtract(replicas)
        return self


class MetadataStateMachine(StateMachine):
    def __init__(self, cluster_id: str) -> None:
        self.image = MetadataImage.empty(cluster_id)
        self.stats = ClusterStats()
        self.last_append_ms = 0  # of the last batch: snapshots are stamped with it, not the clock
        self.listeners: list[Callable[[MetadataImage], None]] = []

    def apply(self, entry: Entry) -> MetadataImage:
        """Replay one batch; the proposer receives the image right after it."""
        return self.prepare(entry)()

    def prepare(self, entry: Entry) -> Callable[[], MetadataImage]:
        """The replay, which reads only the current (immutable) image: for a large batch the
        Raft node runs this in a thread, then the returned function on the event loop, so a
        10,000-partition CreateTopics does not stall the controller (raft/state_machine.py)."""
        batch = decode_batch(entry.data)
        before = self.image
        delta = MetadataDelta(before)
        delta.replay_batch(batch, entry.index, entry.term)
        after = delta.apply()
        change = ClusterStats.changes(before, batch.records)

        def finish() -> MetadataImage:
            self.image = after
            self.stats.merge(change)
            self.last_append_ms = batch.append_time_ms or self.last_append_ms
            for listener in self.listeners:
                listener(after)
            return after
        return finish

    def snapshot(self) -> Callable[[BinaryIO], None]:
        image, created = self.image, self.last_append_ms
        def write(f: BinaryIO) -> None:
            write_snapshot(image, f, created_ms=created)
        return write

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        """Decode the snapshot and count its brokers' load, which reads nothing of the current
        state: the Raft node runs this in a thread and the returned swap on the event loop, so
        a million-partition snapshot does not stop heartbeats for the seconds it takes."""
        created = read_info(source).created_ms
        source.seek(0)
        image = read_snapshot(source)
        stats = ClusterStats.of(image)

        def swap() -> None:
            self.image, self.stats, self.last_append_ms = image, stats, created
            for listener in self.listeners:
                listener(image)
        return swap

    def restore(self, source: BinaryIO) -> None:
        self.prepare_restore(source)()
