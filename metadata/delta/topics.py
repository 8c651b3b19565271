"""Topics and partitions replayed onto the image's topic maps (Kafka's ``TopicsDelta``)."""
from __future__ import annotations

import uuid
from typing import Any

from immutables import Map, MapMutation

from protos import metadata_pb2 as pb

from ..image import PartitionRegistration, TopicImage
from ..records import NO_LEADER, RecordError, uuid_of

_EMPTY: Map = Map()
_INTERN_LIMIT = 1 << 16


class TopicsDelta:
    """Topics by id and by name, and their partitions. Replica lists, and whole
    registrations, repeat across partitions (a new topic's partitions differ only in which
    brokers they use), so one object is shared per value: a million-partition snapshot
    holds a few thousand distinct ones."""

    def __init__(self, by_id: Map[uuid.UUID, TopicImage], by_name: Map[str, TopicImage]) -> None:
        self._by_id, self._by_name = by_id, by_name  # as of the last finish()
        self._write_by_id: MapMutation[uuid.UUID, TopicImage] | None = None
        self._write_by_name: MapMutation[str, TopicImage] | None = None
        self._work: dict[uuid.UUID, _TopicWork] = {}  # topics being changed, since finish()
        self._cursor: tuple[bytes, _TopicWork] | None = None  # the last topic worked on
        # Keys touched since the base, for changes().
        self.touched_topics: set[uuid.UUID] = set()
        self.born_or_died: set[uuid.UUID] = set()  # saw a Topic or RemoveTopic record
        self.touched_partitions: dict[uuid.UUID, set[int]] = {}
        self._intern: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._registrations: dict[tuple[Any, ...], PartitionRegistration] = {}

    # -- views and results ---------------------------------------------------------------------

    def by_id(self) -> Map[uuid.UUID, TopicImage] | MapMutation[uuid.UUID, TopicImage]:
        return self._by_id if self._write_by_id is None else self._write_by_id

    def by_name(self) -> Map[str, TopicImage] | MapMutation[str, TopicImage]:
        return self._by_name if self._write_by_name is None else self._write_by_name

    def has_name(self, name: str) -> bool:
        return name in self.by_name()

    def _write(self) -> tuple[MapMutation[uuid.UUID, TopicImage], MapMutation[str, TopicImage]]:
        if self._write_by_id is None or self._write_by_name is None:
            self._write_by_id = self._by_id.mutate()
            self._write_by_name = self._by_name.mutate()
        return self._write_by_id, self._write_by_name

    def finish(self) -> tuple[Map[uuid.UUID, TopicImage], Map[str, TopicImage]]:
        """The topic maps with everything replayed so far; unchanged topics are shared."""
        if self._work:
            by_id, by_name = self._write()
            for tid, work in self._work.items():
                if work.partitions is not None:
                    name = work.topic.name
                    by_id[tid] = by_name[name] = TopicImage(name, tid, work.partitions.finish())
            self._work = {}
            self._cursor = None
        if self._write_by_id is not None and self._write_by_name is not None:
            self._by_id, self._by_name = self._write_by_id.finish(), self._write_by_name.finish()
            self._write_by_id = self._write_by_name = None
        return self._by_id, self._by_name

    # -- helpers ------------------------------------------------------------------------------

    def _ids(self, ids: list[int] | tuple[int, ...]) -> tuple[int, ...]:
        """A broker id list as a shared tuple; checked to be duplicate-free when first seen."""
        t = tuple(ids)
        intern = self._intern
        shared = intern.get(t)
        if shared is None:
            if len(set(t)) != len(t):
                raise RecordError(f"duplicate broker ids in {list(t)}")
            if len(intern) >= _INTERN_LIMIT:
                intern.clear()
            shared = intern[t] = t
        return shared

    def _topic(self, raw_id: bytes) -> _TopicWork:
        """The existing topic with this id, ready for changes. Records of one topic come in
        runs (a CreateTopics batch, a snapshot), so the last one is remembered."""
        cursor = self._cursor
        if cursor is not None and cursor[0] == raw_id:
            return cursor[1]
        tid = uuid_of(raw_id, "topic_id")
        work = self._work.get(tid)
        if work is None:
            topic = self.by_id().get(tid)
            if topic is None:
                raise RecordError(f"topic {tid} does not exist")
            touched = None  # None: a topic born in this delta, all its partitions are new
            if tid not in self.born_or_died:
                touched = self.touched_partitions.get(tid)
                if touched is None:
                    touched = self.touched_partitions[tid] = set()
            work = self._work[tid] = _TopicWork(topic, touched)
        self._cursor = (raw_id, work)
        return work

    def _registration(self, work: _TopicWork, pid: int, replicas: tuple[int, ...],
                      isr: tuple[int, ...], leader: int, leader_epoch: int,
                      partition_epoch: int, adding: tuple[int, ...] = (),
                      removing: tuple[int, ...] = ()) -> PartitionRegistration:
        """The registration with these fields, checked; shared with equal ones (which were
        checked when first seen)."""
        key = (replicas, isr, leader, leader_epoch, partition_epoch, adding, removing)
        p = self._registrations.get(key)
        problem = "negative partition id" if pid < 0 else None
        if p is None and problem is None:
            problem = _partition_problem(*key)
        if problem is not None:
            t = work.topic
            raise RecordError(f"partition {pid} of topic {t.name!r} ({t.id}): {problem}")
        if p is None:
            if len(self._registrations) >= _INTERN_LIMIT:
                self._registrations.clear()
            p = self._registrations[key] = PartitionRegistration(*key)
        return p

    def _set_partition(self, work: _TopicWork, pid: int, p: PartitionRegistration) -> None:
        parts = work.partitions
        if parts is None:
            parts = work.partitions = work.topic.partitions.mutate()
            self.touched_topics.add(work.topic.id)
        parts[pid] = p
        if work.touched is not None:
            work.touched.add(pid)

    # -- one handler per record type ----------------------------------------------------------

    def topic(self, r: pb.TopicRecord) -> None:
        tid = uuid_of(r.topic_id, "topic_id")
        if not r.name:
            raise RecordError(f"topic {tid} has an empty name")
        existing = self.by_id().get(tid)
        if existing is not None:
            raise RecordError(f"topic id {tid} already exists (topic {existing.name!r})")
        existing = self.by_name().get(r.name)
        if existing is not None:
            raise RecordError(f"topic {r.name!r} already exists with id {existing.id}")
        by_id, by_name = self._write()
        by_id[tid] = by_name[r.name] = TopicImage(r.name, tid, _EMPTY)
        self.touched_topics.add(tid)
        self.born_or_died.add(tid)
        self.touched_partitions.pop(tid, None)

    def remove_topic(self, r: pb.RemoveTopicRecord) -> str:
        """Removes the topic and its partitions; returns its name (its configs go too)."""
        t = self._topic(r.topic_id).topic
        by_id, by_name = self._write()
        del by_id[t.id]
        del by_name[t.name]
        del self._work[t.id]
        self._cursor = None
        self.touched_topics.add(t.id)
        self.born_or_died.add(t.id)
        self.touched_partitions.pop(t.id, None)
        return t.name

    def partition(self, r: pb.PartitionRecord) -> None:
        # The hot path of loading a snapshot (a million of these): kept to inline steps.
        raw, cursor, intern = r.topic_id, self._cursor, self._intern
        work = cursor[1] if cursor is not None and cursor[0] == raw else self._topic(raw)
        listed = tuple(r.replicas[:])
        replicas = intern.get(listed) or self._ids(listed)
        listed_isr = tuple(r.isr[:])
        isr = replicas if listed_isr == listed else intern.get(listed_isr) or self._ids(listed_isr)
        key: tuple = (replicas, isr, r.leader, r.leader_epoch, r.partition_epoch, (), ())
        if r.adding_replicas or r.removing_replicas:
            key = key[:5] + (self._ids(r.adding_replicas[:]), self._ids(r.removing_replicas[:]))
        pid = r.partition_id
        p = self._registrations.get(key)
        if p is None or pid < 0:
            p = self._registration(work, pid, *key)
        parts = work.partitions
        if parts is None:
            self._set_partition(work, pid, p)
        else:
            parts[pid] = p
            if work.touched is not None:
                work.touched.add(pid)

    def partition_change(self, r: pb.PartitionChangeRecord) -> None:
        work = self._topic(r.topic_id)
        pid = r.partition_id
        old = (work.topic.partitions if work.partitions is None else work.partitions).get(pid)
        if old is None:
            t = work.topic
            raise RecordError(f"partition {pid} of topic {t.name!r} ({t.id}) does not exist")
        leader, leader_epoch = old.leader, old.leader_epoch
        if r.HasField("leader"):
            leader, leader_epoch = r.leader, leader_epoch + 1
        self._set_partition(work, pid, self._registration(
            work, pid,
            self._ids(r.replicas.ids[:]) if r.HasField("replicas") else old.replicas,
            self._ids(r.isr.ids[:]) if r.HasField("isr") else old.isr,
            leader, leader_epoch, old.partition_epoch + 1,
            self._ids(r.adding_replicas.ids[:]) if r.HasField("adding_replicas") else old.adding,
            self._ids(r.removing_replicas.ids[:]) if r.HasField("removing_replicas") else old.removing))


class _TopicWork:
    """A topic the delta is changing: its image as of the last finish (whose partitions are
    stale once ``partitions``, their mutation, exists) and the partition ids touched since the
    base (None for a topic created or removed in the delta)."""

    __slots__ = ("topic", "partitions", "touched")

    def __init__(self, topic: TopicImage, touched: set[int] | None) -> None:
        self.topic = topic
        self.partitions: MapMutation[int, PartitionRegistration] | None = None
        self.touched = touched


def _partition_problem(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
                       leader_epoch: int, partition_epoch: int, adding: tuple[int, ...],
                       removing: tuple[int, ...]) -> str | None:
    """What is wrong with a registration no correct controller writes (it would mislead every
    broker); lists are already known to be duplicate-free (``_ids``)."""
    if not replicas:
        return "no replicas"
    if isr is not replicas and not set(isr).issubset(replicas):
        return f"isr {list(isr)} is not a subset of the replicas {list(replicas)}"
    if leader != NO_LEADER and leader not in replicas:
        return f"leader {leader} is not one of the replicas {list(replicas)}"
    if leader_epoch < 0 or partition_epoch < 0:
        return "negative epoch"
    if adding or removing:
        if not set(adding + removing).issubset(replicas) or set(adding) & set(removing):
            return (f"adding {list(adding)} and removing {list(removing)} replicas must be distinct replicas "
                    f"of {list(replicas)}")
        if len(removing) == len(replicas):
            return "every replica is being removed"
    return None
