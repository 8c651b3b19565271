"""Replaying records onto an image: ``MetadataDelta`` and what it changed.

A delta starts from a base image, replays committed records in log order, and ``apply()``
yields the next image; the base is never touched, so whoever holds it keeps a consistent
view. Records apply as Kafka's do (a PartitionChangeRecord changes only its present fields,
RemoveTopicRecord also drops the topic's partitions and configs, ...). A record that names a
topic, partition or broker registration that does not exist raises ``RecordError``: such a
log is corrupt, and applying past it would let this node's metadata diverge unnoticed.

``changes()`` lists what differs from the base (topics, partitions, brokers, configs,
features), the way a broker learns what to act on after pulling the records since its offset;
``changes_between`` does the same for any two images, however far apart.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from immutables import Map, MapMutation

from protos import metadata_pb2 as pb

from .image import (METADATA_VERSION, BrokerRegistration, ConfigResource, Endpoint,
                    MetadataImage, PartitionRegistration, ResourceType, SecurityProtocol,
                    TopicImage)
from .records import (NO_LEADER, RECORD_VERSION, MetadataRecord, RecordBatch, RecordError, check,
                      type_name, uuid_of)

_EMPTY: Map = Map()
_INTERN_LIMIT = 1 << 16


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class MetadataChanges:
    """What differs between a delta's base image and its result; net, so a topic created and
    removed within the same delta appears nowhere.

    ``topics_changed`` are topics that exist in both images with changed partitions;
    ``partitions_changed`` covers those and every partition of ``topics_created`` (partitions
    of removed topics are gone with their topic). ``brokers_changed`` are new or modified
    registrations; ``configs_changed`` resources whose keys differ (a removed topic's configs
    count).
    """

    base_offset: int
    offset: int
    epoch: int
    topics_created: frozenset[uuid.UUID]
    topics_changed: frozenset[uuid.UUID]
    topics_removed: frozenset[uuid.UUID]
    partitions_changed: frozenset[TopicIdPartition]
    brokers_changed: frozenset[int]
    brokers_removed: frozenset[int]
    configs_changed: frozenset[ConfigResource]
    features_changed: frozenset[str]
    producer_ids_changed: bool

    @property
    def empty(self) -> bool:
        return not (self.topics_created or self.topics_changed or self.topics_removed
                    or self.brokers_changed or self.brokers_removed or self.configs_changed
                    or self.features_changed or self.producer_ids_changed)


class MetadataDelta:
    """Records replayed on top of ``base``; see the module docstring.

    Replay records with ``replay`` (one record at a time, several may share an offset) or
    ``replay_batch`` (one Raft entry). Offsets must not go back and epochs must not decrease.
    ``apply()`` may be called any number of times, replaying more in between; each call
    returns the image with everything replayed so far. After a ``RecordError`` the delta is
    unusable (a batch may be half replayed); the base image is intact, so start again from it.
    """

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._image = base  # as of the last apply()
        self._offset = base.offset
        self._epoch = base.epoch
        self._error: RecordError | None = None
        self._dirty = False
        # Mutations of self._image's maps, made on first write and finished by apply().
        self._brokers: MapMutation[int, BrokerRegistration] | None = None
        self._topics_by_id: MapMutation[uuid.UUID, TopicImage] | None = None
        self._topics_by_name: MapMutation[str, TopicImage] | None = None
        self._configs: MapMutation[ConfigResource, Map[str, str]] | None = None
        self._features: MapMutation[str, int] | None = None
        self._work: dict[uuid.UUID, _TopicWork] = {}  # topics being changed, since apply()
        self._cursor: tuple[bytes, _TopicWork] | None = None  # the last topic worked on
        self._next_producer_id = base.next_producer_id
        # Keys touched since the base, for changes().
        self._touched_brokers: set[int] = set()
        self._touched_topics: set[uuid.UUID] = set()
        self._topics_born_or_died: set[uuid.UUID] = set()  # saw a Topic or RemoveTopic record
        self._touched_partitions: dict[uuid.UUID, set[int]] = {}
        self._touched_configs: set[ConfigResource] = set()
        self._touched_features: set[str] = set()
        # Replica lists, and whole registrations, repeat across partitions (a new topic's
        # partitions differ only in which brokers they use): share one object per value.
        self._intern: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._registrations: dict[tuple[Any, ...], PartitionRegistration] = {}

    @property
    def base(self) -> MetadataImage:
        return self._base

    @property
    def offset(self) -> int:
        """The offset of the last record replayed (the base's if none)."""
        return self._offset

    @property
    def epoch(self) -> int:
        return self._epoch

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int, epoch: int) -> None:
        """Apply one record committed at Raft entry ``offset`` of term ``epoch``; records of
        one entry share its offset."""
        if self._error is not None:
            raise self._error
        if offset <= self._base.offset or offset < self._offset or epoch < self._epoch:
            self._fail(f"{type_name(record)} at offset {offset} (epoch {epoch}) is out of "
                       f"order: the delta is at offset {max(self._offset, self._base.offset)} "
                       f"(epoch {self._epoch})")
        self._replay_all((record,), offset, epoch)

    def replay_batch(self, batch: RecordBatch | Iterable[MetadataRecord], offset: int,
                     epoch: int) -> None:
        """Apply one Raft entry's records. An entry without records (a Raft no-op, a membership
        change) still advances the image's offset."""
        if self._error is not None:
            raise self._error
        if offset <= self._offset or epoch < self._epoch:
            self._fail(f"entry at offset {offset} (epoch {epoch}) is not after offset "
                       f"{self._offset} (epoch {self._epoch})")
        self._replay_all(batch.records if isinstance(batch, pb.RecordBatch) else batch,
                         offset, epoch)

    def _replay_all(self, records: Iterable[MetadataRecord], offset: int, epoch: int) -> None:
        handlers = self._HANDLERS
        record: MetadataRecord | None = None
        known = False
        try:
            for record in records:
                which = record.WhichOneof("record")
                known = which is not None and record.version == RECORD_VERSION
                if not known:
                    check(record)  # raises, naming the type and version
                handlers[which](self, getattr(record, which))
        except RecordError as e:
            where = f"{type_name(record)} at offset" if known and record else "at offset"
            self._fail(f"{where} {offset}: {e}")
        except BaseException:
            self._error = RecordError(f"replay at offset {offset} was interrupted")
            raise
        finally:
            self._dirty = True
        self._offset = offset
        self._epoch = epoch

    def _fail(self, message: str) -> NoReturn:
        self._error = RecordError(message)
        raise self._error from None

    # -- views of the state so far (mutations if written, else the last image's maps) --------

    def _topics_view(self) -> Map[uuid.UUID, TopicImage] | MapMutation[uuid.UUID, TopicImage]:
        return self._image.topics_by_id if self._topics_by_id is None else self._topics_by_id

    def _topic_names_view(self) -> Map[str, TopicImage] | MapMutation[str, TopicImage]:
        return self._image.topics_by_name if self._topics_by_name is None else self._topics_by_name

    def _brokers_view(self) -> Map[int, BrokerRegistration] | MapMutation[int, BrokerRegistration]:
        return self._image.brokers if self._brokers is None else self._brokers

    def _configs_view(self) -> Map[ConfigResource, Map[str, str]] | MapMutation[ConfigResource,
                                                                             Map[str, str]]:
        return self._image.configs if self._configs is None else self._configs

    def _features_view(self) -> Map[str, int] | MapMutation[str, int]:
        return self._image.features if self._features is None else self._features

    def _write_topics(self) -> tuple[MapMutation[uuid.UUID, TopicImage],
                                     MapMutation[str, TopicImage]]:
        if self._topics_by_id is None or self._topics_by_name is None:
            self._topics_by_id = self._image.topics_by_id.mutate()
            self._topics_by_name = self._image.topics_by_name.mutate()
        return self._topics_by_id, self._topics_by_name

    def _write_brokers(self) -> MapMutation[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = self._image.brokers.mutate()
        return self._brokers

    def _write_configs(self) -> MapMutation[ConfigResource, Map[str, str]]:
        if self._configs is None:
            self._configs = self._image.configs.mutate()
        return self._configs

    def _write_features(self) -> MapMutation[str, int]:
        if self._features is None:
            self._features = self._image.features.mutate()
        return self._features

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
            topic = self._topics_view().get(tid)
            if topic is None:
                raise RecordError(f"topic {tid} does not exist")
            touched = None  # None: a topic born in this delta, all its partitions are new
            if tid not in self._topics_born_or_died:
                touched = self._touched_partitions.get(tid)
                if touched is None:
                    touched = self._touched_partitions[tid] = set()
            work = self._work[tid] = _TopicWork(topic, touched)
        self._cursor = (raw_id, work)
        return work

    def _broker(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        b = self._brokers_view().get(broker_id)
        if b is None:
            raise RecordError(f"cannot {action} broker {broker_id}: it is not registered")
        if b.epoch != epoch:
            raise RecordError(f"cannot {action} broker {broker_id}: its registration has epoch "
                              f"{b.epoch}, not {epoch}")
        return b

    def _set_broker(self, b: BrokerRegistration) -> None:
        self._write_brokers()[b.id] = b
        self._touched_brokers.add(b.id)

    def _registration(self, work: _TopicWork, pid: int, replicas: tuple[int, ...],
                      isr: tuple[int, ...], leader: int, leader_epoch: int,
                      partition_epoch: int) -> PartitionRegistration:
        """The registration with these fields, checked; shared with equal ones (which were
        checked when first seen)."""
        key = (replicas, isr, leader, leader_epoch, partition_epoch)
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
            self._touched_topics.add(work.topic.id)
        parts[pid] = p
        if work.touched is not None:
            work.touched.add(pid)

    # -- one handler per record type ----------------------------------------------------------

    def _register_broker(self, r: pb.RegisterBrokerRecord) -> None:
        try:
            endpoints = tuple(Endpoint(e.name, e.host, e.port,
                                       SecurityProtocol(e.security_protocol)) for e in r.endpoints)
        except ValueError as e:
            raise RecordError(f"broker {r.broker_id}: {e}") from None
        self._set_broker(BrokerRegistration(
            r.broker_id, uuid_of(r.incarnation_id, "incarnation_id"), r.broker_epoch, endpoints,
            r.rack if r.HasField("rack") else None, r.fenced, r.in_controlled_shutdown))

    def _unregister_broker(self, r: pb.UnregisterBrokerRecord) -> None:
        self._broker(r.broker_id, r.broker_epoch, "unregister")
        del self._write_brokers()[r.broker_id]
        self._touched_brokers.add(r.broker_id)

    def _fence_broker(self, r: pb.FenceBrokerRecord) -> None:
        b = self._broker(r.id, r.epoch, "fence")
        self._set_broker(_with_state(b, True, b.in_controlled_shutdown))

    def _unfence_broker(self, r: pb.UnfenceBrokerRecord) -> None:
        b = self._broker(r.id, r.epoch, "unfence")
        self._set_broker(_with_state(b, False, b.in_controlled_shutdown))

    def _broker_registration_change(self, r: pb.BrokerRegistrationChangeRecord) -> None:
        b = self._broker(r.broker_id, r.broker_epoch, "change")
        fenced = r.fenced if r.HasField("fenced") else b.fenced
        shutdown = (r.in_controlled_shutdown if r.HasField("in_controlled_shutdown")
                    else b.in_controlled_shutdown)
        self._set_broker(_with_state(b, fenced, shutdown))

    def _topic_record(self, r: pb.TopicRecord) -> None:
        tid = uuid_of(r.topic_id, "topic_id")
        if not r.name:
            raise RecordError(f"topic {tid} has an empty name")
        existing = self._topics_view().get(tid)
        if existing is not None:
            raise RecordError(f"topic id {tid} already exists (topic {existing.name!r})")
        existing = self._topic_names_view().get(r.name)
        if existing is not None:
            raise RecordError(f"topic {r.name!r} already exists with id {existing.id}")
        by_id, by_name = self._write_topics()
        by_id[tid] = by_name[r.name] = TopicImage(r.name, tid, _EMPTY)
        self._touched_topics.add(tid)
        self._topics_born_or_died.add(tid)
        self._touched_partitions.pop(tid, None)

    def _remove_topic(self, r: pb.RemoveTopicRecord) -> None:
        t = self._topic(r.topic_id).topic
        by_id, by_name = self._write_topics()
        del by_id[t.id]
        del by_name[t.name]
        del self._work[t.id]
        self._cursor = None
        self._touched_topics.add(t.id)
        self._topics_born_or_died.add(t.id)
        self._touched_partitions.pop(t.id, None)
        resource = ConfigResource(ResourceType.TOPIC, t.name)
        if resource in self._configs_view():
            del self._write_configs()[resource]
        self._touched_configs.add(resource)

    def _partition_record(self, r: pb.PartitionRecord) -> None:
        # The hot path of loading a snapshot (a million of these): kept to inline steps.
        raw, cursor, intern = r.topic_id, self._cursor, self._intern
        work = cursor[1] if cursor is not None and cursor[0] == raw else self._topic(raw)
        listed = tuple(r.replicas[:])
        replicas = intern.get(listed) or self._ids(listed)
        listed_isr = tuple(r.isr[:])
        isr = replicas if listed_isr == listed else intern.get(listed_isr) or self._ids(listed_isr)
        key = (replicas, isr, r.leader, r.leader_epoch, r.partition_epoch)
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

    def _partition_change(self, r: pb.PartitionChangeRecord) -> None:
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
            leader, leader_epoch, old.partition_epoch + 1))

    def _config(self, r: pb.ConfigRecord) -> None:
        if r.resource_type not in (ResourceType.TOPIC, ResourceType.BROKER):
            raise RecordError(f"unknown config resource type {r.resource_type}")
        if not r.name:
            raise RecordError(f"empty config name for {r.resource_name!r}")
        if r.resource_type == ResourceType.TOPIC:
            if r.resource_name not in self._topic_names_view():
                raise RecordError(f"topic {r.resource_name!r} does not exist")
        elif r.resource_name and not r.resource_name.isdecimal():
            raise RecordError(f"broker config resource {r.resource_name!r} is neither a broker "
                              "id nor empty (the cluster default)")
        resource = ConfigResource(ResourceType(r.resource_type), r.resource_name)
        current: Map = self._configs_view().get(resource, _EMPTY)
        if r.HasField("value"):
            updated = current.set(r.name, r.value)
        elif r.name in current:
            updated = current.delete(r.name)
        else:
            updated = current
        if updated is not current:
            configs = self._write_configs()
            if len(updated):
                configs[resource] = updated
            else:
                del configs[resource]
        self._touched_configs.add(resource)

    def _feature_level(self, r: pb.FeatureLevelRecord) -> None:
        if not r.name:
            raise RecordError("empty feature name")
        if r.feature_level == 0:
            if r.name == METADATA_VERSION:
                raise RecordError(f"{METADATA_VERSION} cannot be removed (level 0)")
            if r.name in self._features_view():
                del self._write_features()[r.name]
        else:
            self._write_features()[r.name] = r.feature_level
        self._touched_features.add(r.name)

    def _producer_ids(self, r: pb.ProducerIdsRecord) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise RecordError(f"next producer id {r.next_producer_id} is not greater than the "
                              f"current one, {self._next_producer_id}")
        self._next_producer_id = r.next_producer_id

    def _no_op(self, r: pb.NoOpRecord) -> None:
        pass

    _HANDLERS: dict[str, Callable[[MetadataDelta, Any], None]] = {
        "register_broker": _register_broker,
        "unregister_broker": _unregister_broker,
        "fence_broker": _fence_broker,
        "unfence_broker": _unfence_broker,
        "broker_registration_change": _broker_registration_change,
        "topic": _topic_record,
        "remove_topic": _remove_topic,
        "partition": _partition_record,
        "partition_change": _partition_change,
        "config": _config,
        "feature_level": _feature_level,
        "producer_ids": _producer_ids,
        "no_op": _no_op,
    }

    # -- results ------------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every record replayed so far; the base image is left as it was.
        Costs what was touched: unchanged topics and maps are shared with the previous image."""
        if self._error is not None:
            raise self._error
        if not self._dirty:
            return self._image
        img = self._image
        if self._work:
            by_id, by_name = self._write_topics()
            for tid, work in self._work.items():
                if work.partitions is not None:
                    name = work.topic.name
                    by_id[tid] = by_name[name] = TopicImage(name, tid, work.partitions.finish())
            self._work = {}
            self._cursor = None
        self._image = MetadataImage(
            img.cluster_id, self._offset, self._epoch,
            img.brokers if self._brokers is None else self._brokers.finish(),
            img.topics_by_id if self._topics_by_id is None else self._topics_by_id.finish(),
            img.topics_by_name if self._topics_by_name is None else self._topics_by_name.finish(),
            img.configs if self._configs is None else self._configs.finish(),
            img.features if self._features is None else self._features.finish(),
            self._next_producer_id)
        self._brokers = self._topics_by_id = self._topics_by_name = None
        self._configs = self._features = None
        self._dirty = False
        return self._image

    def changes(self) -> MetadataChanges:
        """What ``apply()`` changed relative to the base image (see ``MetadataChanges``);
        only what the replayed records touched is compared."""
        born_or_died, touched = self._topics_born_or_died, self._touched_partitions

        def candidates(tid: uuid.UUID, before: TopicImage, after: TopicImage) -> Iterable[int]:
            if tid in born_or_died:  # removed and created again: anything may differ
                return set(before.partitions.keys()) | set(after.partitions.keys())
            return touched.get(tid, ())

        return _compare(self._base, self.apply(), self._touched_topics, candidates,
                        self._touched_brokers, self._touched_configs, self._touched_features)


def changes_between(before: MetadataImage, after: MetadataImage) -> MetadataChanges:
    """What changed from one image to a later one of the same cluster, however many deltas
    apart; e.g. for a reader that kept the image it last acted on. Walks topics, brokers and
    configs but not partitions: images derived from one another share every unchanged topic,
    so only changed topics have their partitions compared."""
    def candidates(tid: uuid.UUID, b: TopicImage, a: TopicImage) -> Iterable[int]:
        return set(b.partitions.keys()) | set(a.partitions.keys())

    return _compare(before, after,
                    set(before.topics_by_id.keys()) | set(after.topics_by_id.keys()),
                    candidates,
                    set(before.brokers.keys()) | set(after.brokers.keys()),
                    set(before.configs.keys()) | set(after.configs.keys()),
                    set(before.features.keys()) | set(after.features.keys()))


def _compare(base: MetadataImage, new: MetadataImage, topic_ids: Iterable[uuid.UUID],
             partition_ids: Callable[[uuid.UUID, TopicImage, TopicImage], Iterable[int]],
             broker_ids: Iterable[int], resources: Iterable[ConfigResource],
             features: Iterable[str]) -> MetadataChanges:
    """The differences between two images among the given keys."""
    created: set[uuid.UUID] = set()
    changed: set[uuid.UUID] = set()
    removed: set[uuid.UUID] = set()
    parts: set[TopicIdPartition] = set()
    for tid in topic_ids:
        before, after = base.topics_by_id.get(tid), new.topics_by_id.get(tid)
        if after is None:
            if before is not None:
                removed.add(tid)
        elif before is None:
            created.add(tid)
            parts.update(TopicIdPartition(tid, p) for p in after.partitions)
        elif before is not after:
            diff = [p for p in partition_ids(tid, before, after)
                    if before.partitions.get(p) != after.partitions.get(p)]
            if diff:
                changed.add(tid)
                parts.update(TopicIdPartition(tid, p) for p in diff)
    brokers_changed, brokers_removed = set(), set()
    for b in broker_ids:
        now = new.brokers.get(b)
        if now is None:
            if b in base.brokers:
                brokers_removed.add(b)
        elif now != base.brokers.get(b):
            brokers_changed.add(b)
    return MetadataChanges(
        base_offset=base.offset, offset=new.offset, epoch=new.epoch,
        topics_created=frozenset(created), topics_changed=frozenset(changed),
        topics_removed=frozenset(removed), partitions_changed=frozenset(parts),
        brokers_changed=frozenset(brokers_changed), brokers_removed=frozenset(brokers_removed),
        configs_changed=frozenset(r for r in resources if base.config(r) != new.config(r)),
        features_changed=frozenset(f for f in features
                                   if base.features.get(f) != new.features.get(f)),
        producer_ids_changed=base.next_producer_id != new.next_producer_id)


class _TopicWork:
    """A topic the delta is changing: its image as of the last apply (whose partitions are
    stale once ``partitions``, their mutation, exists) and the partition ids touched since the
    base (None for a topic created or removed in the delta)."""

    __slots__ = ("topic", "partitions", "touched")

    def __init__(self, topic: TopicImage, touched: set[int] | None) -> None:
        self.topic = topic
        self.partitions: MapMutation[int, PartitionRegistration] | None = None
        self.touched = touched


def _with_state(b: BrokerRegistration, fenced: bool, in_controlled_shutdown: bool
                ) -> BrokerRegistration:
    if b.fenced == fenced and b.in_controlled_shutdown == in_controlled_shutdown:
        return b
    return BrokerRegistration(b.id, b.incarnation_id, b.epoch, b.endpoints, b.rack, fenced,
                              in_controlled_shutdown)


def _partition_problem(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
                       leader_epoch: int, partition_epoch: int) -> str | None:
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
    return None
