"""Per-topic traffic counters (Kafka's BrokerTopicStats): bumped by the produce and fetch paths
as plain integers, read by ``brokerd.metrics`` when Prometheus scrapes."""
from __future__ import annotations

from collections import Counter


class BrokerTopicStats:
    """Bytes and messages per topic since the broker started. Only the event loop writes; a
    scrape copies the counters (a dict copy is atomic under the GIL)."""

    def __init__(self) -> None:
        self.bytes_in: Counter[str] = Counter()
        self.messages_in: Counter[str] = Counter()
        self.bytes_out: Counter[str] = Counter()
        self.replication_bytes_out: Counter[str] = Counter()

    def produced(self, topic: str, size: int, records: int) -> None:
        """A leader appended a producer's batch (Kafka's BytesInPerSec, MessagesInPerSec)."""
        self.bytes_in[topic] += size
        self.messages_in[topic] += records

    def fetched(self, topic: str, size: int, follower: bool) -> None:
        """Bytes a fetch returned: to a consumer (BytesOutPerSec) or a follower
        (ReplicationBytesOutPerSec)."""
        if size:
            (self.replication_bytes_out if follower else self.bytes_out)[topic] += size
