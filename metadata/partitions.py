"""Partition leadership and ISR changes, as the records that make them (Kafka's
PartitionChangeBuilder). A PartitionChange record names only what changes; replaying one
increments the partition epoch, and the leader epoch when it names a leader."""
from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .configs import topic_config
from common.errors import ErrorCode, KafkaError
from .image import ConfigResource, MetadataImage, PartitionRegistration, ResourceType, TopicImage
from .records import NO_LEADER, MetadataRecord, partition_change

log = logging.getLogger("metadata.partitions")


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


def change(topic: TopicImage, pid: int, p: PartitionRegistration, leader: int, isr: tuple[int, ...],
           replicas: tuple[int, ...] | None = None, adding: tuple[int, ...] | None = None,
           removing: tuple[int, ...] | None = None) -> MetadataRecord | None:
    """The PartitionChange record naming only the fields that differ from ``p``, or None."""
    fields: dict[str, Any] = {"leader": leader if leader != p.leader else None, "isr": isr if isr != p.isr else None,
              "replicas": replicas if replicas is not None and replicas != p.replicas else None,
              "adding": adding if adding is not None and adding != p.adding else None,
              "removing": removing if removing is not None and removing != p.removing else None}
    if all(v is None for v in fields.values()):
        return None
    return partition_change(topic.id, pid, **fields)


def completed(p: PartitionRegistration, isr: tuple[int, ...], live: set[int]
              ) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """A reassignment in progress completes once every target replica is in the ISR (Kafka's
    PartitionChangeBuilder.completeReassignmentIfNeeded): the replicas become the target, the
    removed ones leave the ISR, and if the leader was removed the first live target in the ISR
    leads. Returns (replicas, isr, leader), or None while targets are still catching up."""
    if not p.reassigning:
        return None
    target = p.target
    if not set(target) <= set(isr):
        return None
    new_isr = tuple(r for r in target if r in isr)
    leader = p.leader
    if leader not in target:
        leader = next((r for r in new_isr if r in live), NO_LEADER)
    return target, new_isr, leader


def partitions_with(image: MetadataImage, broker: int) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """The partitions that list ``broker`` as a replica."""
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
    for t, pid, p in partitions_with(image, broker):
        isr = tuple(r for r in p.isr if r != broker)
        if not isr and keep_last_isr:
            isr = p.isr
        leader = p.leader
        if leader == broker or (leader != NO_LEADER and leader not in live):
            probe = PartitionRegistration(p.replicas, isr, NO_LEADER, p.leader_epoch, p.partition_epoch)
            leader = elect(probe, live, unclean_allowed(image, t))
            if leader != NO_LEADER and leader not in isr:  # an unclean election
                isr = (leader,)
        rec = change(t, pid, p, leader, isr)
        if rec is not None:
            out.append(rec)
    return out


def restore_broker(image: MetadataImage, broker: int) -> list[MetadataRecord]:
    """A broker is unfenced: partitions left without a leader that it can lead get it back."""
    live = live_brokers(image) | {broker}
    out = []
    for t, pid, p in partitions_with(image, broker):
        if p.leader == NO_LEADER:
            leader = elect(p, live, unclean_allowed(image, t))
            if leader != NO_LEADER:
                isr = p.isr if leader in p.isr else (leader,)
                rec = change(t, pid, p, leader, isr)
                if rec is not None:
                    out.append(rec)
    return out


def alter_partition(image: MetadataImage, broker: int, topic_id: uuid.UUID, pid: int, leader_epoch: int,
                    partition_epoch: int, new_isr: list[int]) -> tuple[MetadataRecord | None, PartitionRegistration]:
    """A partition leader asks to shrink or expand its ISR (Kafka's AlterPartition)."""
    t = image.topics_by_id.get(topic_id)
    p = t.partitions.get(pid) if t is not None else None
    if t is None or p is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {pid} of topic {topic_id} does not exist")
    if p.leader != broker:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker} does not lead {t.name}-{pid} "
                                                         f"(the leader is {p.leader})")
    if leader_epoch < p.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} of {t.name}-{pid} is "
                                                      f"older than the current {p.leader_epoch}")
    if leader_epoch > p.leader_epoch:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {leader_epoch} of {t.name}-{pid} is "
                                                       f"newer than the current {p.leader_epoch}")
    if partition_epoch != p.partition_epoch:
        raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, f"partition epoch {partition_epoch} of {t.name}-{pid} "
                                                         f"is stale (current {p.partition_epoch})")
    isr = tuple(dict.fromkeys(new_isr))
    if broker not in isr or not set(isr) <= set(p.replicas):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"ISR {list(isr)} must contain the leader and only replicas "
                                                  f"of {t.name}-{pid} ({list(p.replicas)})")
    live = live_brokers(image) | {broker}
    added = [r for r in isr if r not in p.isr and r not in live]
    if added:
        raise KafkaError(ErrorCode.INELIGIBLE_REPLICA, f"replicas {added} are fenced or shutting down and cannot "
                                                     f"join the ISR of {t.name}-{pid}")
    ordered = tuple(r for r in p.replicas if r in isr)
    done = completed(p, ordered, live)
    if done is not None:
        replicas, ordered, leader = done
        log.info("reassignment of %s-%d completed: replicas %s, leader %d", t.name, pid, list(replicas), leader)
        return change(t, pid, p, leader, ordered, replicas, (), ()), p
    return change(t, pid, p, p.leader, ordered), p


# -- leader elections on demand and leader rebalancing (Kafka's ElectLeaders, the controller's
# -- auto.leader.rebalance.enable) ---------------------------------------------------------------

PREFERRED, UNCLEAN = "preferred", "unclean"


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What an operation (an election, a reassignment) did to one partition: code NONE when it
    was carried out."""

    topic: str
    partition: int
    code: ErrorCode
    message: str = ""


def elect_leaders(image: MetadataImage, kind: str, wanted: list[tuple[str, int]] | None
                  ) -> tuple[list[MetadataRecord], list[PartitionOutcome]]:
    """Kafka's ElectLeaders. Preferred: the first replica leads again when it is alive and in
    the ISR. Unclean: a partition without a leader takes any live replica, even one outside the
    ISR, as the operator asked (records acknowledged only by the lost ISR may be gone).
    ``wanted`` None means every partition, and only those that change or fail are answered."""
    live = live_brokers(image)
    records: list[MetadataRecord] = []
    results: list[PartitionOutcome] = []
    if wanted is None:
        targets = [(t, pid, p) for t in image.topics_by_id.values() for pid, p in sorted(t.partitions.items())]
    else:
        targets = []
        for name, pid in wanted:
            t = image.topics_by_name.get(name)
            p = t.partitions.get(pid) if t is not None else None
            if t is None or p is None:
                results.append(PartitionOutcome(name, pid, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"partition {name}-{pid} does not exist"))
            else:
                targets.append((t, pid, p))
    for t, pid, p in targets:
        if kind == PREFERRED:
            leader, isr = p.replicas[0], p.isr
            if p.leader == leader:
                code, why = ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica already leads"
            elif leader not in live or leader not in p.isr:
                code, why = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, (
                    f"the preferred replica {leader} is {'not alive' if leader not in live else 'not in the ISR'}")
            else:
                code, why = ErrorCode.NONE, ""
        else:
            leader = elect(p, live, unclean=True)
            isr = p.isr if leader in p.isr else (leader,)
            if p.leader != NO_LEADER:
                code, why = ErrorCode.ELECTION_NOT_NEEDED, f"broker {p.leader} leads"
            elif leader == NO_LEADER:
                code, why = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {list(p.replicas)} is alive"
            else:
                code, why = ErrorCode.NONE, ""
                if leader not in p.isr:
                    log.warning("unclean election of %s-%d asked for: broker %d, outside the ISR %s, leads; what "
                                "only the ISR had is lost", t.name, pid, leader, list(p.isr))
        if code == ErrorCode.NONE:
            rec = change(t, pid, p, leader, isr)
            if rec is not None:
                records.append(rec)
        if wanted is not None or code not in (ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                              ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE):
            results.append(PartitionOutcome(t.name, pid, code, why))
    return records, results


def imbalanced(image: MetadataImage, percentage: int) -> list[tuple[str, int]]:
    """The partitions to hand back to their preferred leaders (Kafka's leader imbalance check):
    for each broker whose share of not-led preferred partitions is over ``percentage``
    (leader.imbalance.per.broker.percentage), those it could lead now."""
    live = live_brokers(image)
    preferred: dict[int, list[tuple[TopicImage, int, PartitionRegistration]]] = {}
    for t in image.topics_by_id.values():
        for pid, p in t.partitions.items():
            if p.replicas:
                preferred.setdefault(p.replicas[0], []).append((t, pid, p))
    out = []
    for broker, parts in sorted(preferred.items()):
        not_led = [(t, pid, p) for t, pid, p in parts if p.leader != broker]
        if broker in live and not_led and len(not_led) * 100 > percentage * len(parts):
            out += [(t.name, pid) for t, pid, p in not_led if broker in p.isr]
    return out
