"""Clusters of RaftNodes in the test's own event loop, on loopback, whose directed links can be
cut: for runtime scenarios that need precise control of who hears whom."""
from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import BinaryIO, Callable

from raft.config import NodeOptions
from raft.messages import Entry, Message
from raft.node import RaftNode
from raft.storage import format_storage
from tests.eventually import eventually
from tests.kvcluster import free_ports


class ListMachine:
    """A state machine that keeps every applied entry's data, in order."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    def apply(self, entry: Entry) -> int:
        self.items.append(entry.data)
        return len(self.items)

    def snapshot(self) -> Callable[[BinaryIO], None]:
        items = list(self.items)
        return lambda f: f.write(pickle.dumps(items))

    def restore(self, source: BinaryIO) -> None:
        self.items = pickle.loads(source.read())


class NodeCluster:
    def __init__(self, base: Path, n: int = 3, **options) -> None:
        self.ids = list(range(1, n + 1))
        ports = free_ports(n)
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(self.ids, ports, strict=True))
        opts = NodeOptions(**{"tick_ms": 10, "heartbeat_interval_ms": 30, "election_timeout_ms": 200,
                              "fsync": False, **options})
        self.cuts: set[tuple[int, int]] = set()
        self.machines = {i: ListMachine() for i in self.ids}
        self.nodes: dict[int, RaftNode] = {}
        for i in self.ids:
            format_storage(str(base / f"n{i}"), "test", i)
            node = self.nodes[i] = RaftNode(i, voters, self.machines[i], data_dir=str(base / f"n{i}"),
                                            options=opts, seed=i)
            self._filter(node)

    def _filter(self, node: RaftNode) -> None:
        send = node.transport.send

        def filtered(msgs: list[Message]) -> None:
            send([m for m in msgs if (node.id, m.to) not in self.cuts])
        node.transport.send = filtered

    async def __aenter__(self) -> "NodeCluster":
        for node in self.nodes.values():
            await node.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for node in self.nodes.values():
            await node.stop(transfer=False)

    def cut(self, a: int, b: int) -> None:
        """What ``a`` sends ``b`` is lost; the other way still works."""
        self.cuts.add((a, b))

    def isolate(self, nid: int) -> None:
        for other in self.ids:
            if other != nid:
                self.cuts |= {(nid, other), (other, nid)}

    def heal(self) -> None:
        self.cuts.clear()

    def applied(self, node: RaftNode) -> list[bytes]:
        return self.machines[node.id].items

    async def leader(self, among: list[int] | None = None, timeout: float = 10.0) -> RaftNode:
        """The leader of the highest term among ``among``, once it has committed in its term."""
        async def ready() -> RaftNode | None:
            leaders = [self.nodes[i] for i in among or self.ids if self.nodes[i]._started and self.nodes[i].is_leader]
            if not leaders:
                return None
            node = max(leaders, key=lambda n: n.term)
            try:
                await node.read_barrier(timeout=0.5)
            except Exception:
                return None
            return node
        return await eventually(ready, timeout, interval=0.01, what=f"a leader among {among or self.ids}")

    async def converge(self, timeout: float = 10.0) -> None:
        """Wait until every running node has applied what the leader has."""
        leader = await self.leader(timeout=timeout)
        target = leader.status().commit_index
        await asyncio.gather(*(n.wait_applied(target, timeout) for n in self.nodes.values() if n._started))
