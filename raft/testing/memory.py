"""An in-memory :class:`~raft.transport.Transport`, so that whole ``RaftNode`` clusters run in
one process and one event loop: no ports, no gRPC, every message counted, links cut at will.

    net = MemoryNetwork()
    nodes = [RaftNode(i, voters, MySM(), storage=MemoryStorage(), transport=net.transport(i))
             for i in voters]

Messages are delivered on a later turn of the event loop, in order per link, as a stream
would deliver them; a cut link drops what is sent over it (Raft retransmits).
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Callable

from ..messages import Message, MessageType


class MemoryNetwork:
    """The links between the transports it hands out."""

    def __init__(self) -> None:
        self.transports: dict[int, MemoryTransport] = {}
        self.cut_links: set[tuple[int, int]] = set()  # (from, to) pairs that drop messages
        self.sent: Counter[MessageType] = Counter()  # every message sent, by type
        self.on_send: list[Callable[[Message], None]] = []  # observers (tests)

    def transport(self, node_id: int) -> "MemoryTransport":
        t = self.transports[node_id] = MemoryTransport(self, node_id)
        return t

    def cut(self, a: int, b: int, *, both: bool = True) -> None:
        """Drop messages from ``a`` to ``b`` (and back, unless ``both`` is False)."""
        self.cut_links.add((a, b))
        if both:
            self.cut_links.add((b, a))

    def isolate(self, node_id: int) -> None:
        for other in self.transports:
            if other != node_id:
                self.cut(node_id, other)

    def heal(self) -> None:
        self.cut_links.clear()

    def _route(self, frm: int, msgs: list[Message]) -> None:
        by_peer: dict[int, list[Message]] = {}
        for m in msgs:
            self.sent[m.type] += 1
            for observe in self.on_send:
                observe(m)
            if (frm, m.to) not in self.cut_links:
                by_peer.setdefault(m.to, []).append(m)
        loop = asyncio.get_running_loop()
        for to, group in by_peer.items():
            peer = self.transports.get(to)
            if peer is not None and not peer.closed:
                loop.call_soon(peer.receive, frm, group)


class MemoryTransport:
    """One node's end of a :class:`MemoryNetwork`."""

    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        self.network = network
        self.node_id = node_id
        self.last_heard: dict[int, float] = {}
        self.rejected: dict[str, int] = {}
        self.peers: set[int] = set()  # those whose address the node learnt or removed
        self.closed = False
        self._deliver: Callable[[list[Message]], None] | None = None

    def attach(self, deliver: Callable[[list[Message]], None]) -> None:
        self._deliver = deliver

    def send(self, msgs: list[Message]) -> None:
        if not self.closed:
            self.network._route(self.node_id, msgs)

    def receive(self, frm: int, msgs: list[Message]) -> None:
        if self.closed or self._deliver is None:
            return
        self.last_heard[frm] = time.monotonic()
        self._deliver(msgs)

    def set_address(self, peer: int, address: str) -> None:
        self.peers.add(peer)

    def remove(self, peer: int) -> None:
        self.peers.discard(peer)

    async def close(self) -> None:
        self.closed = True
