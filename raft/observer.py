"""Observers (KIP-853): a node that is not a member of the configuration but replicates the
log, so that once it is added as a voter it is already caught up and never weighs on the
quorum. A controller started with ``controller.quorum.bootstrap.servers`` and no voter set is
one, as is a voter that was removed, or whose disk was formatted again (a new directory id).

Kafka's observers fetch the log from the leader. Raft's leader pushes it, so ours ask the
leader to (RaftAdmin ``Observe``, ``RaftNode.observe``), found through the bootstrap servers,
and ask again once they have not heard from a leader for an election timeout; a leader keeps
replicating to an observer as long as it answers, and counts it for nothing.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .client import LeaderClient
from .proto import raft_pb2 as pb
from .proto import raft_pb2_grpc

if TYPE_CHECKING:
    from .node import RaftNode

log = logging.getLogger("raft.observer")


class Observing:
    """The observer's side: while this node is not a member, keep a leader replicating to it."""

    def __init__(self, node: "RaftNode", bootstrap_servers: list[str]) -> None:
        self.node = node
        self.bootstrap_servers = list(bootstrap_servers)
        self.leader = 0  # the leader that last agreed to replicate to us
        self._last_error = ""

    def needed(self) -> bool:
        core = self.node.core
        if core.membership.matches(core.id, core.directory_id) and core.id in core.membership.members:
            return False  # a member: the leader replicates to it anyway
        return not core.leader or core.election_elapsed >= core.cfg.election_ticks

    async def run(self) -> None:
        period = self.node.options.election_timeout_ms / 1000
        client = LeaderClient(self.bootstrap_servers, timeout=4 * period, attempt_timeout=period,
                              tls=self.node.options.tls)
        try:
            while True:
                if self.needed():
                    await self._ask(client)
                await asyncio.sleep(period)
        finally:
            await client.close()

    async def _ask(self, client: LeaderClient) -> None:
        node = self.node
        request = pb.ObserveRequest(node_id=node.id, address=node.address or "",
                                    directory_id=node.storage.directory_id, cluster_id=node.cluster_id)
        try:
            answer = await client.call(lambda ch, t: raft_pb2_grpc.RaftAdminStub(ch).Observe(request, timeout=t),
                                       idempotent=True)
        except (ConnectionError, TimeoutError, RuntimeError) as e:
            if str(e) != self._last_error:  # once per distinct failure: it is retried every timeout
                log.warning("node %d: cannot observe the quorum at %s: %s", node.id,
                            ",".join(self.bootstrap_servers), e)
            self._last_error = str(e)
            return
        self._last_error = ""
        node.learn_view(dict(answer.addresses))
        if answer.leader_id != self.leader:
            self.leader = answer.leader_id
            log.info("node %d: observing the log of leader %d at %s", node.id, answer.leader_id,
                     answer.leader_address)
