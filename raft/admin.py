"""The admin surface of a node over gRPC (``RaftAdmin`` in ``raft/proto/raft.proto``), and the
mapping of the library's errors onto gRPC statuses that every service on a node shares.

A NotLeader answer is FAILED_PRECONDITION with the leader in trailing metadata
(``leader-id``, ``leader-address``), so clients can go straight to it."""
from __future__ import annotations

import asyncio
from typing import NoReturn

import grpc

from .proto import raft_pb2 as pb
from .proto import raft_pb2_grpc

from .errors import (NodeStopped, NotLeader, OutcomeUnknown, ProposalDropped, RaftError, StorageError,
                     TooManyObservers)

LEADER_ID = "leader-id"
LEADER_ADDRESS = "leader-address"
NOT_APPLIED = "not-applied"


async def abort_with(context: grpc.aio.ServicerContext, exc: BaseException) -> NoReturn:
    """Answer a failed request with a status that tells the client what to do. Trailing
    metadata ``not-applied: 1`` marks failures that prove a write was not applied (NotLeader,
    ProposalDropped, NodeStopped before anything was appended), so a client may retry it
    safely; a timeout and OutcomeUnknown say the outcome is unknown (docs/raft.md)."""
    not_applied = ((NOT_APPLIED, "1"),)
    if isinstance(exc, NotLeader):
        context.set_trailing_metadata(((LEADER_ID, str(exc.leader_id)),
                                       (LEADER_ADDRESS, exc.leader_address or ""), *not_applied))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, ProposalDropped):
        context.set_trailing_metadata(not_applied)
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
    if isinstance(exc, asyncio.TimeoutError):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "timed out waiting for the quorum; "
                            "a write may or may not have been applied")
    if isinstance(exc, OutcomeUnknown):
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
    if isinstance(exc, StorageError):
        await context.abort(grpc.StatusCode.INTERNAL, str(exc))
    if isinstance(exc, NodeStopped):
        context.set_trailing_metadata(not_applied)
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
    if isinstance(exc, TooManyObservers):
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, RaftError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    raise exc


def leader_hint(err: grpc.aio.AioRpcError) -> tuple[int, str | None]:
    """(leader id, address) from a NotLeader answer; (0, None) when unknown."""
    md = dict(err.trailing_metadata() or ())
    try:
        nid = int(md.get(LEADER_ID, "0"))
    except ValueError:
        nid = 0
    return nid, (md.get(LEADER_ADDRESS) or None)


class AdminService(raft_pb2_grpc.RaftAdminServicer):
    def __init__(self, node) -> None:  # a RaftNode; untyped to avoid an import cycle
        self.node = node

    async def Status(self, request: pb.StatusRequest, context) -> pb.StatusResponse:
        s = self.node.status()
        return pb.StatusResponse(
            node_id=s.node_id, cluster_id=s.cluster_id, role=s.role, term=s.term,
            leader_id=s.leader_id, leader_address=s.leader_address or "",
            commit_index=s.commit_index, applied_index=s.applied_index, last_index=s.last_index,
            snapshot_index=s.snapshot_index, voters=s.voters, learners=s.learners,
            peers=[pb.PeerStatus(node_id=p.node_id, address=p.address or "", voter=p.voter,
                                 match_index=p.match_index, next_index=p.next_index, lag=p.lag,
                                 last_contact_seconds=p.last_contact_s, state=p.state, kind=p.kind,
                                 directory_id=p.directory_id)
                   for p in s.peers],
            rejected=s.rejected, dropped=s.dropped, directory_id=s.directory_id, directories=s.directories)

    async def _member_change(self, coro, context) -> pb.AdminResponse:
        try:
            return pb.AdminResponse(index=await coro)
        except (RaftError, asyncio.TimeoutError) as e:
            await abort_with(context, e)

    async def AddVoter(self, request: pb.MemberRequest, context) -> pb.AdminResponse:
        await self._need_address(request, context)
        return await self._member_change(self.node.add_voter(
            request.node_id, request.address, directory_id=request.directory_id), context)

    async def AddLearner(self, request: pb.MemberRequest, context) -> pb.AdminResponse:
        await self._need_address(request, context)
        return await self._member_change(self.node.add_learner(
            request.node_id, request.address, directory_id=request.directory_id), context)

    async def RemoveMember(self, request: pb.MemberRequest, context) -> pb.AdminResponse:
        directory = request.directory_id if request.HasField("directory_id") else None
        return await self._member_change(self.node.remove_member(request.node_id, directory_id=directory), context)

    async def Observe(self, request: pb.ObserveRequest, context) -> pb.ObserveResponse:
        """A node that is not a member asks the leader for the log (raft.observer)."""
        node = self.node
        if request.cluster_id != node.cluster_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"node {request.node_id} belongs to cluster {request.cluster_id!r}, "
                                f"not {node.cluster_id!r}")
        await self._need_address(request, context)
        try:
            book = node.observe(request.node_id, request.address)
        except RaftError as e:
            await abort_with(context, e)
        return pb.ObserveResponse(leader_id=node.id, leader_address=node.address, addresses=book)

    async def TransferLeadership(self, request: pb.TransferRequest, context) -> pb.AdminResponse:
        try:
            await self.node.transfer_leadership(request.target)
        except (RaftError, asyncio.TimeoutError) as e:
            await abort_with(context, e)
        return pb.AdminResponse()

    @staticmethod
    async def _need_address(request: pb.MemberRequest | pb.ObserveRequest, context) -> None:
        if request.node_id <= 0 or ":" not in request.address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "give a positive node id and its HOST:PORT address")
