"""Follower fetching (KIP-392): which replica a consumer reads a partition from.

With ``replica.selector.class`` set to Kafka's RackAwareReplicaSelector, the leader answers a
consumer's fetch that names a ``client.rack`` (Fetch v11+) with a *preferred read replica*
when the leader is in another rack and an in-sync follower in the consumer's rack already has
the offset asked for. The consumer then fetches from that follower, which serves records up to
the high watermark it learned from the leader, so a consumer reads the same records from
either. Cross-rack traffic (and its cost) goes away; ListOffsets stays with the leader.
"""
from __future__ import annotations

from metadata.image import MetadataImage

from common.errors import ErrorCode, KafkaError
from .partition import Partition


def preferred_read_replica(p: Partition, image: MetadataImage, client_rack: str, fetch_offset: int) -> int:
    """The follower the leader ``p`` sends a consumer in ``client_rack`` to, or -1 (read here).
    Kafka's RackAwareReplicaSelector: among the replicas in the consumer's rack that have the
    offset, the leader if it is one, else the one furthest ahead (most recently caught up on
    a tie). Only in-sync, unfenced followers count, so the consumer is not sent to a replica
    that would answer with nothing."""
    if not client_rack or _rack(image, p.broker_id) == client_rack:
        return -1
    candidates = [(st.log_end_offset, st.last_caught_up_ms, r) for r, st in p.followers.items()
                  if r in p.isr and st.log_end_offset >= fetch_offset and _rack(image, r) == client_rack
                  and (b := image.brokers.get(r)) is not None and not b.fenced]
    return max(candidates)[2] if candidates else -1


def check_follower_read(p: Partition, current_leader_epoch: int | None) -> None:
    """A consumer's fetch from this replica, leader or follower (KIP-392): a follower out of the
    ISR (or one that no longer hosts the partition) answers NOT_LEADER_OR_FOLLOWER, and the
    consumer goes back to the leader."""
    p.check_epoch(current_leader_epoch)
    if p.stopped or not (p.is_leader or p.broker_id in p.isr):
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         f"Broker {p.broker_id} is not an in-sync replica of {p.name}")


def _rack(image: MetadataImage, broker_id: int) -> str:
    b = image.brokers.get(broker_id)
    return (b.rack or "") if b is not None else ""
