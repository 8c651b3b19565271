"""The reassignments page: every partition reassignment in progress, as ``kraft
reassign-partitions --list`` lists them, and for each replica being added how far it is behind
its leader in offsets and bytes, as ``--verify --bootstrap-server`` reports it
(kraft/reassign.py's ``ongoing`` and ``progress``), drawn as a progress bar."""
from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from kraft import reassign

from .pages import cluster_of, render


@dataclass(frozen=True, slots=True)
class Moving:
    """One replica being added: what the leader holds, how much of it the replica still lacks."""

    broker: int
    offsets_behind: int
    bytes_behind: int
    leader_bytes: int

    @property
    def copied_bytes(self) -> int:
        return max(0, self.leader_bytes - self.bytes_behind)

    @property
    def percent(self) -> int:
        return 100 if self.leader_bytes <= 0 else int(100 * self.copied_bytes / self.leader_bytes)

    @property
    def behind(self) -> str:
        return f"{self.offsets_behind} offsets ({reassign.kib(self.bytes_behind)}) behind"


async def reassignment_list(request: Request) -> Response:
    cluster = cluster_of(request)
    moving = await reassign.ongoing(cluster.controller, None)
    describes = await (await cluster.brokers()).describe_brokers() if moving else {}
    rows = []
    for (topic, partition), o in sorted(moving.items()):
        lead = describes.get(o.leader)
        size = next((s.size_bytes for s in lead.replicas if s.topic == topic and s.partition == partition),
                    0) if lead is not None else 0
        replicas = [Moving(p.broker, p.offsets_behind, p.bytes_behind, size)
                    for p in reassign.progress(describes, topic, partition, o.leader, o.adding_replicas)]
        rows.append({"topic": topic, "partition": partition, "o": o, "moving": replicas})
    return render(request, "reassignments.html", rows=rows)
