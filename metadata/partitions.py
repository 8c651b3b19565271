"""Partition leadership and ISR changes, as the records that make them (Kafka's
PartitionChangeBuilder). A PartitionChange record names only what changes; replaying one
increments the partition epoch, and the leader epoch when it names a leader."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

from .configs import topic_config
from .errors import ApiError, ErrorCode
from .image import ConfigResource, MetadataImage, PartitionRegistration, ResourceType, TopicImage
from .records import NO_LEADER, MetadataRecord, partition_change


def live_brokers(image: MetadataImage, exclude: int | None = None) -> set[int]:
    """Registered, unfenced brokers, not shutting down."""
    return {b.id for b in image.brokers.values()
            if not b.fenced and not b.in_controlled_shutdown and b.id != exclude}


def unclean_allowed(image: MetadataImage, topic: TopicImage) -> bool:
    configs = dict(image.config(ConfigResource(ResourceType.TOPIC, topic.name)))
    defaults = dict(image.config(ConfigResource(ResourceType.BROKER, "")))
    return topic_config(configs, "unclean.leader.election.enable", defaults).lower() == "true"


def elect(p: PartitionRegistration, live: set[int], unclean: bool) -> int:
    """The new leader: the first replica (preferred order) that is in the ISR and alive; with
    unclean election allowed, any live replica when no ISR member is."""
    for r in p.replicas:
        if r in live and r in p.isr:
            return r
    if unclean:
        for r in p.replicas:
            if r in live:
                return r
    return NO_LEADER


def _change(topic: TopicImage, pid: int, p: PartitionRegistration, leader: int,
            isr: tuple[int, ...]) -> MetadataRecord | None:
    new_leader = leader if leader != p.leader else None
    new_isr = isr if isr != p.isr else None
    if new_leader is None and new_isr is None:
        return None
    return partition_change(topic.id, pid, leader=new_leader, isr=new_isr)


def _partitions_with(image: MetadataImage, broker: int) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    for t in image.topics_by_id.values():
        for pid, p in t.partitions.items():
            if broker in p.replicas:
                yield t, pid, p


def remove_broker(image: MetadataImage, broker: int, *, keep_last_isr: bool = True) -> list[MetadataRecord]:
    """A broker is fenced or shutting down: it leaves every ISR (but stays the last member of
    an ISR it alone holds, so no acknowledged data is forgotten), and the partitions it led
    get a new leader from the rest of the ISR, or none."""
    live = live_brokers(image, exclude=broker)
    out = []
    for t, pid, p in _partitions_with(image, broker):
        isr = tuple(r for r in p.isr if r != broker)
        if not isr and keep_last_isr:
            isr = p.isr
        leader = p.leader
        if leader == broker or (leader != NO_LEADER and leader not in live):
            probe = PartitionRegistration(p.replicas, isr, NO_LEADER, p.leader_epoch, p.partition_epoch)
            leader = elect(probe, live, unclean_allowed(image, t))
            if leader != NO_LEADER and leader not in isr:  # an unclean election
                isr = (leader,)
        rec = _change(t, pid, p, leader, isr)
        if rec is not None:
            out.append(rec)
    return out


def restore_broker(image: MetadataImage, broker: int) -> list[MetadataRecord]:
    """A broker is unfenced: partitions left without a leader that it can lead get it back."""
    live = live_brokers(image) | {broker}
    out = []
    for t, pid, p in _partitions_with(image, broker):
        if p.leader == NO_LEADER:
            leader = elect(p, live, unclean_allowed(image, t))
            if leader != NO_LEADER:
                isr = p.isr if leader in p.isr else (leader,)
                rec = _change(t, pid, p, leader, isr)
                if rec is not None:
                    out.append(rec)
    return out


def alter_partition(image: MetadataImage, broker: int, topic_id: uuid.UUID, pid: int, leader_epoch: int,
                    partition_epoch: int, new_isr: list[int]) -> tuple[MetadataRecord | None, PartitionRegistration]:
    """A partition leader asks to shrink or expand its ISR (Kafka's AlterPartition)."""
    t = image.topics_by_id.get(topic_id)
    p = t.partitions.get(pid) if t is not None else None
    if t is None or p is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {pid} of topic {topic_id} does not exist")
    if p.leader != broker:
        raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker} does not lead {t.name}-{pid} "
                                                         f"(the leader is {p.leader})")
    if leader_epoch < p.leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} of {t.name}-{pid} is "
                                                      f"older than the current {p.leader_epoch}")
    if leader_epoch > p.leader_epoch:
        raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {leader_epoch} of {t.name}-{pid} is "
                                                       f"newer than the current {p.leader_epoch}")
    if partition_epoch != p.partition_epoch:
        raise ApiError(ErrorCode.INVALID_UPDATE_VERSION, f"partition epoch {partition_epoch} of {t.name}-{pid} "
                                                         f"is stale (current {p.partition_epoch})")
    isr = tuple(dict.fromkeys(new_isr))
    if broker not in isr or not set(isr) <= set(p.replicas):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"ISR {list(isr)} must contain the leader and only replicas "
                                                  f"of {t.name}-{pid} ({list(p.replicas)})")
    live = live_brokers(image) | {broker}
    added = [r for r in isr if r not in p.isr and r not in live]
    if added:
        raise ApiError(ErrorCode.INELIGIBLE_REPLICA, f"replicas {added} are fenced or shutting down and cannot "
                                                     f"join the ISR of {t.name}-{pid}")
    ordered = tuple(r for r in p.replicas if r in isr)
    rec = _change(t, pid, p, p.leader, ordered)
    return rec, p
