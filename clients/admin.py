"""What a tool needs to know about a cluster before it reads or writes: its topics and their
partitions (Metadata from any broker) and where each partition's log starts and ends, or
where a time falls in it (ListOffsets at the leaders). The consumer-groups tool and the Spark
topic source plan from it."""
from __future__ import annotations

from typing import Any

from protos import broker_pb2 as pb

from .cluster_view import ClientError, BrokerResponseError, ClusterView, Connections, TopicInfo, parse_bootstrap
from .errors import ErrorCode

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1


class Admin:
    def __init__(self, bootstrap: str | list[str], *, timeout_ms: int = 10000) -> None:
        self.connections = Connections()
        self.cluster = ClusterView(parse_bootstrap(bootstrap), self.connections)
        self.timeout_ms = timeout_ms

    async def __aenter__(self) -> "Admin":
        self.cluster.start()
        await self.cluster.refresh()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cluster.close()
        await self.connections.close()

    async def topics(self) -> dict[str, TopicInfo]:
        """Every topic the cluster has now (one Metadata request for all of them)."""
        wanted, self.cluster.wanted = self.cluster.wanted, set()
        try:
            await self.cluster.refresh()
        finally:
            self.cluster.wanted = wanted
        return dict(self.cluster.topics)

    async def partitions_of(self, topic: str) -> list[TopicPartition]:
        self.cluster.add(topic)
        await self.cluster.wait_on_metadata(topic, None, self.timeout_ms)
        return [(topic, p) for p in range(self.cluster.partition_count(topic) or 0)]

    async def offsets(self, which: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets for each partition: -2 its log start, -1 its high watermark, else the
        first offset whose record is at or after that time in ms (-1 when none is). Answers
        ``(offset, timestamp)``; a partition without a leader or an error raises ClientError."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in which:
            self.cluster.add(tp[0])
            await self.cluster.wait_on_metadata(tp[0], tp[1], self.timeout_ms)
            leader = self.cluster.leader_for(*tp)
            if leader is None:
                raise ClientError(f"partition {tp[0]}-{tp[1]} has no leader")
            by_leader.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, tuple[int, int]] = {}
        for leader, group in by_leader.items():
            req = pb.ListOffsetsRequest()
            topics: dict[str, Any] = {}
            for t, p in group:
                (topics.get(t) or topics.setdefault(t, req.topics.add(name=t))).partitions.add(
                    partition=p, timestamp=which[(t, p)])
            r = await self.connections.stub(self.cluster.brokers[leader]).ListOffsets(req, timeout=self.timeout_ms / 1000)
            for t in r.topics:
                for a in t.partitions:
                    if a.error_code:
                        raise BrokerResponseError(ErrorCode.of(a.error_code), a.error_message)
                    out[(t.name, a.partition)] = (a.offset, a.timestamp)
        return out
