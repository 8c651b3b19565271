"""Replication throttles for partition moves (Kafka's ReplicationQuotaManager, KIP-73).

``leader.replication.throttled.rate`` caps the bytes a leader sends to replicas being added by
a reassignment, ``follower.replication.throttled.rate`` the bytes such a replica fetches; both
are dynamic broker configs (per broker id, or the cluster default), in bytes per second.
Kafka applies them to the replicas listed in ``*.replication.throttled.replicas``, which its
reassignment tool sets to the moving ones; here the moving replicas are read from the
partition's ``adding`` set in the metadata, so the throttle cannot outlive the move. Replicas
already in sync are never throttled, so producers' acks=all latency does not depend on them.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from metadata.image import ConfigResource, MetadataImage, ResourceType

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


class ReplicationQuota:
    """A byte rate enforced as a token bucket holding at most one second of bytes: a replica
    over its quota waits until the bucket refills (Kafka drops throttled partitions from a
    fetch the same way). ``rate`` 0 means unthrottled."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.rate = 0
        self._tokens = 0.0
        self._at = clock()

    def set_rate(self, rate: int) -> None:
        if rate != self.rate:
            self.rate = rate
            self._tokens, self._at = float(rate), self._clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_seconds(self) -> float:
        """0 when a throttled replica may move bytes now; else how long until it may."""
        if not self.rate:
            return 0.0
        self._refill()
        return 0.0 if self._tokens > 0 else -self._tokens / self.rate + 0.001

    def record(self, nbytes: int) -> None:
        if self.rate:
            self._refill()
            self._tokens -= nbytes


def throttled_rate(image: MetadataImage, broker_id: int, key: str) -> int:
    """The rate ``key`` in force on this broker: its own dynamic config, else the cluster
    default, else unthrottled (0)."""
    for name in (str(broker_id), ""):
        value = image.config(ConfigResource(ResourceType.BROKER, name)).get(key)
        if value is not None:
            try:
                return max(0, int(value))
            except ValueError:
                pass
    return 0
