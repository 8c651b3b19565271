"""What differs between two metadata images: the way a broker learns what to act on after
pulling the records since its offset (``MetadataDelta.changes``), or after any gap
(``changes_between``)."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..image import ConfigResource, MetadataImage, TopicImage


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
    count); ``acls_changed`` whether any ACL was added or removed.
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
    acls_changed: bool = False

    @property
    def empty(self) -> bool:
        return not (self.topics_created or self.topics_changed or self.topics_removed
                    or self.brokers_changed or self.brokers_removed or self.configs_changed
                    or self.features_changed or self.producer_ids_changed or self.acls_changed)


def changes_between(before: MetadataImage, after: MetadataImage) -> MetadataChanges:
    """What changed from one image to a later one of the same cluster, however many deltas
    apart; e.g. for a reader that kept the image it last acted on. Walks topics, brokers and
    configs but not partitions: images derived from one another share every unchanged topic,
    so only changed topics have their partitions compared."""
    def candidates(tid: uuid.UUID, b: TopicImage, a: TopicImage) -> Iterable[int]:
        return set(b.partitions.keys()) | set(a.partitions.keys())

    return compare(before, after,
                    set(before.topics_by_id.keys()) | set(after.topics_by_id.keys()),
                    candidates,
                    set(before.brokers.keys()) | set(after.brokers.keys()),
                    set(before.configs.keys()) | set(after.configs.keys()),
                    set(before.features.keys()) | set(after.features.keys()))


def compare(base: MetadataImage, new: MetadataImage, topic_ids: Iterable[uuid.UUID],
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
        producer_ids_changed=base.next_producer_id != new.next_producer_id,
        acls_changed=base.acls is not new.acls and base.acls.by_id != new.acls.by_id)
