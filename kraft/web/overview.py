"""The overview page: the quorum (leader, epoch, high watermark, each voter's lag and last
contact), the brokers (state, rack, endpoints, replicas and leaders they hold, and each log
directory's size and free space, from the brokers' DescribeLogDirs) and the health findings
over every partition, by the rules ``kraft topics describe`` filters with."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from common.errors import ErrorCode
from kraft.reassign import kib
from protos import broker_pb2 as bpb

from .cluster import CLUSTER_ERRORS, Cluster

LOG_DIRS_TIMEOUT_S = 5.0  # a broker that does not answer by then shows no disks, not a slow page


@dataclass(frozen=True, slots=True)
class Disk:
    """One log directory of a broker: what its replicas' logs take, and its file system's room."""

    path: str
    replicas: int
    size_bytes: int
    usable_bytes: int
    total_bytes: int
    error: str | None

    def __str__(self) -> str:
        if self.error:
            return f"{self.path}: {self.error}"
        return (f"{self.path}: {kib(self.size_bytes)} in {self.replicas} replicas, "
                f"{kib(self.usable_bytes)} free of {kib(self.total_bytes)}")


async def disks(cluster: Cluster) -> tuple[dict[int, list[Disk]], str | None]:
    """Each broker's log directories (DescribeLogDirs over its gRPC listener), and why there
    are none when the brokers could not be asked; a broker that does not answer is left out."""
    try:
        admin = await cluster.brokers()
    except CLUSTER_ERRORS as e:
        return {}, str(e)

    async def one(address: str) -> bpb.DescribeLogDirsResponse | None:
        try:
            return await admin.connections.stub(address).DescribeLogDirs(bpb.DescribeLogDirsRequest(),
                                                                        timeout=LOG_DIRS_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return None
    brokers = dict(admin.cluster.brokers)
    answers = await asyncio.gather(*(one(a) for a in brokers.values()))
    out: dict[int, list[Disk]] = {}
    problem = None
    for broker, r in zip(brokers, answers, strict=True):
        if r is None:
            continue
        if r.error_code:  # CLUSTER_AUTHORIZATION_FAILED: the console's principal may not DESCRIBE the cluster
            problem = f"{ErrorCode.of(r.error_code).name}: {r.error_message}"
            continue
        out[broker] = [Disk(d.log_dir, sum(len(t.partitions) for t in d.topics),
                            sum(p.size_bytes for t in d.topics for p in t.partitions), d.usable_bytes, d.total_bytes,
                            ErrorCode.of(d.error_code).name if d.error_code else None) for d in r.log_dirs]
    return out, problem


@dataclass
class Findings:
    """Partitions with a problem, as ``kraft topics describe --unavailable-partitions``,
    ``--under-replicated-partitions`` and ``--under-min-isr-partitions`` list them."""
    offline: list[tuple[str, int]] = field(default_factory=list)
    under_replicated: list[tuple[str, int]] = field(default_factory=list)
    under_min_isr: list[tuple[str, int]] = field(default_factory=list)

    def add(self, topic: Any, min_isr_default: int) -> None:
        min_isr = int(topic.configs.get("min.insync.replicas", min_isr_default))
        for p in topic.partitions:
            where = (topic.name, p.partition)
            if p.leader < 0:
                self.offline.append(where)
            if len(p.isr) < len(p.replicas):
                self.under_replicated.append(where)
            if len(p.isr) < min_isr:
                self.under_min_isr.append(where)


async def overview(cluster: Cluster) -> dict[str, Any]:
    """Everything the overview page shows, from DescribeQuorum, DescribeCluster and DescribeTopics."""
    quorum = await cluster.quorum()
    described = await cluster.describe_cluster()
    topics = await cluster.topics()
    min_isr = await cluster.min_isr_default()
    log_dirs, log_dirs_problem = await disks(cluster)
    now_ms = time.time() * 1000
    voters = [{"id": v.replica_id, "leader": v.replica_id == quorum.leader_id, "log_end_offset": v.log_end_offset,
               "lag": v.lag, "endpoints": list(v.endpoints),
               "last_contact_ms": int(now_ms - v.last_fetch_timestamp) if v.last_fetch_timestamp > 0 else None}
              for v in sorted(quorum.voters, key=lambda v: v.replica_id)]
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    findings = Findings()
    for t in topics:
        findings.add(t, min_isr)
        for p in t.partitions:
            for b in p.replicas:
                replicas[b] = replicas.get(b, 0) + 1
            if p.leader >= 0:
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
    brokers = [{"id": b.id, "rack": b.rack or "-", "epoch": b.epoch,
                "state": "fenced" if b.fenced else "shutting down" if b.in_controlled_shutdown else "active",
                "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in b.endpoints],
                "replicas": replicas.get(b.id, 0), "leaders": leaders.get(b.id, 0), "disks": log_dirs.get(b.id)}
               for b in sorted(described.brokers, key=lambda b: b.id)]
    return {"cluster_id": quorum.cluster_id, "leader_id": quorum.leader_id, "leader_epoch": quorum.leader_epoch,
            "high_watermark": quorum.high_watermark, "metadata_offset": described.metadata_offset,
            "voters": voters, "observers": sorted(o.replica_id for o in quorum.observers),
            "brokers": brokers, "topic_count": len(topics), "findings": findings, "log_dirs_problem": log_dirs_problem}
