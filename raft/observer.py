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
from .messages import Role
from .proto import raft_pb2 as pb
from .proto import raft_pb2_grpc

if TYPE_CHECKING:
    from .node import RaftNode

log = logging.getLogger("raft.observer")
#: Election timeouts without a leader after which a member asks the bootstrap servers too.
MEMBER_SILENCE = 3


class Observing:
    """The observer's side: while this node is not a member, keep a leader replicating to it."""

    def __init__(self, node: "RaftNode", bootstrap_servers: list[str]) -> None:
        self.node = node
        self.bootstrap_servers = list(bootstrap_servers)
        self.leader = 0  # the leader that last agreed to replicate to us
        self._silent = 0  # election timeouts without a leader heard
        self._failing = False

    def needed(self) -> bool:
        """Called once an election timeout. Not a member, and no leader heard for that long;
        or a member that has heard none for several (one removed without learning it, which
        only its place as an observer in the leader's log can tell it)."""
        core = self.node.core
        if core.role == Role.LEADER or (core.leader and core.election_elapsed < core.cfg.election_ticks):
            self._silent = 0
            return False
        self._silent += 1
        member = core.id in core.membership.members and core.membership.matches(core.id, core.directory_id)
        return self._silent >= (MEMBER_SILENCE if member else 1)

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
        request = pb.ObserveRequest(node_id=node.id, address=node.address or "", cluster_id=node.cluster_id)
        try:
            answer = await client.call(lambda ch, t: raft_pb2_grpc.RaftAdminStub(ch).Observe(request, timeout=t),
                                       idempotent=True)
        except (ConnectionError, TimeoutError, RuntimeError) as e:
            # Retried every election timeout: said once, until it works again.
            log.log(logging.DEBUG if self._failing else logging.WARNING, "node %d: cannot observe the quorum "
                    "at %s (retrying every election timeout): %s", node.id, ",".join(self.bootstrap_servers), e)
            self._failing = True
            return
        self._failing = False
        node.learn_view(dict(answer.addresses))
        if answer.leader_id != self.leader:
            self.leader = answer.leader_id
            log.info("node %d: observing the log of leader %d at %s", node.id, answer.leader_id,
                     answer.leader_address)
