"""The controller's gRPC service (``protos/controller.proto``): each RPC decodes its request
(``metadata.codec``), calls the operation (``metadata.operations``) and encodes the answer.

Every answer carries a ``Status``: NOT_CONTROLLER (with the active controller's id and
endpoint) on standbys, REQUEST_TIMED_OUT when a write's outcome is unknown; per-item results
carry Kafka's error codes as Kafka answers them. Offsets are Raft log indexes (the first entry
is offset 1); high watermarks and log end offsets are exclusive, as in Kafka.

This module only says who asks: the session of the caller's certificate, or the client's a
broker forwards (Kafka's EnvelopeRequest), honoured only from a caller allowed CLUSTER_ACTION.
What that session may do is the operations' policy (``metadata.authorizer.Access``).
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

import grpc

from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from raft.errors import RaftError

from . import codec
from .acls import AclOperation
from .authorizer import Access, StandardAuthorizer
from .controller import NotController, QuorumController
from common.errors import ErrorCode, KafkaError
from .operations import ControllerOperations
from .principal import FORWARDED_HOST, FORWARDED_PRINCIPAL, PrincipalMapper, Session, caller

O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
R = TypeVar("R")
D = TypeVar("D")


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, controller: QuorumController, authorizer: StandardAuthorizer | None = None,
                 mapper: PrincipalMapper | None = None, listener_name: str = "CONTROLLER") -> None:
        """``authorizer`` None: every request is allowed (no ``authorizer.class.name``);
        ``listener_name``: controller.listener.names, how voters' endpoints are named."""
        self.ops = ControllerOperations(controller, authorizer, listener_name)
        self.authorizer = authorizer
        self.mapper = mapper or PrincipalMapper()

    async def _access(self, context: grpc.aio.ServicerContext) -> Access:
        """The request's session, or the client's a broker forwards. A certificate no mapping
        rule maps ends the call (UNAUTHENTICATED), as Kafka refuses the connection."""
        session = await caller(context, self.mapper)
        direct = Access(self.authorizer, session)
        sent = dict(context.invocation_metadata() or ())
        forwarded = sent.get(FORWARDED_PRINCIPAL)
        if forwarded is None:
            return direct
        # Only a super user or an explicit ALLOW may speak for others: with
        # allow.everyone.if.no.acl.found and no cluster ACL, anyone would pass CLUSTER_ACTION and
        # could forward as a super user.
        if not direct.cluster(O.CLUSTER_ACTION, explicit=True):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"Cluster authorization failed: "
                           f"{session.principal} may not forward requests for other principals (that takes "
                           "CLUSTER_ACTION on the cluster, granted by an ACL or super.users)")
        host = sent.get(FORWARDED_HOST, b"")
        return Access(self.authorizer, Session(_text(forwarded), _text(host)))

    async def _answer(self, response_type: Any, context: grpc.aio.ServicerContext, decode: Callable[[], D],
                      call: Callable[[Access, D], Awaitable[R]], encode: Callable[[R], Any], *,
                      encode_in_worker: bool = False) -> Any:
        """Decode the request, call the operation for the request's session, encode its
        result; map the failures of the whole request onto ``response.status``.
        ``encode_in_worker``: the answer grows with the cluster, so it is encoded off the
        event loop (the decodes are cheap: ``codec.Decoded`` builds items once counted)."""
        try:
            access = await self._access(context)
            result = await call(access, decode())
            return await self.ops.in_worker(encode, result) if encode_in_worker else encode(result)
        except NotController as e:
            return response_type(status=codec.status(ErrorCode.NOT_CONTROLLER, str(e), e.controller_id or -1,
                                                     e.endpoint or ""))
        except KafkaError as e:
            return response_type(status=codec.status(e.code, e.message))
        except RaftError as e:
            return response_type(status=codec.status(ErrorCode.REQUEST_TIMED_OUT, str(e)))

    # ---------------------------------------------------------------------------- topics

    async def CreateTopics(self, request: pb.CreateTopicsRequest, context) -> pb.CreateTopicsResponse:
        return await self._answer(pb.CreateTopicsResponse, context, lambda: codec.new_topics(request),
                                  lambda a, topics: self.ops.create_topics(a, topics, validate_only=request.validate_only),
                                  codec.created_topics)

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context) -> pb.DeleteTopicsResponse:
        return await self._answer(pb.DeleteTopicsResponse, context, lambda: codec.topics_to_delete(request),
                                  lambda a, d: self.ops.delete_topics(a, *d), codec.deleted_topics)

    async def CreatePartitions(self, request: pb.CreatePartitionsRequest, context) -> pb.CreatePartitionsResponse:
        return await self._answer(pb.CreatePartitionsResponse, context, lambda: codec.new_partitions(request),
                                  lambda a, topics: self.ops.create_partitions(a, topics,
                                                                               validate_only=request.validate_only),
                                  codec.created_partitions)

    async def DescribeTopics(self, request: pb.DescribeTopicsRequest, context) -> pb.DescribeTopicsResponse:
        return await self._answer(pb.DescribeTopicsResponse, context, lambda: list(request.names),
                                  self.ops.describe_topics, codec.topics_description, encode_in_worker=True)

    # ---------------------------------------------------------------------------- partitions

    async def ElectLeaders(self, request: pb.ElectLeadersRequest, context) -> pb.ElectLeadersResponse:
        return await self._answer(pb.ElectLeadersResponse, context, lambda: codec.election(request),
                                  lambda a, d: self.ops.elect_leaders(a, *d), codec.elected)

    async def AlterPartitionReassignments(self, request: pb.AlterPartitionReassignmentsRequest,
                                          context) -> pb.AlterPartitionReassignmentsResponse:
        return await self._answer(pb.AlterPartitionReassignmentsResponse, context,
                                  lambda: codec.reassignment_plan(request), self.ops.alter_reassignments,
                                  codec.reassigned)

    async def ListPartitionReassignments(self, request: pb.ListPartitionReassignmentsRequest,
                                         context) -> pb.ListPartitionReassignmentsResponse:
        return await self._answer(pb.ListPartitionReassignmentsResponse, context,
                                  lambda: codec.reassignment_topics(request), self.ops.list_reassignments,
                                  codec.ongoing_reassignments)

    async def AlterPartition(self, request: pb.AlterPartitionRequest, context) -> pb.AlterPartitionResponse:
        return await self._answer(pb.AlterPartitionResponse, context, lambda: codec.alter_partition(request),
                                  self.ops.alter_partition, codec.altered_partition)

    # ---------------------------------------------------------------------------- cluster and configs

    async def DescribeCluster(self, request: pb.DescribeClusterRequest, context) -> pb.DescribeClusterResponse:
        return await self._answer(pb.DescribeClusterResponse, context, _nothing,
                                  lambda a, _: self.ops.describe_cluster(a), codec.cluster_description)

    async def IncrementalAlterConfigs(self, request: pb.IncrementalAlterConfigsRequest,
                                      context) -> pb.IncrementalAlterConfigsResponse:
        return await self._answer(pb.IncrementalAlterConfigsResponse, context, lambda: codec.config_changes(request),
                                  lambda a, changes: self.ops.incremental_alter_configs(
                                      a, changes, validate_only=request.validate_only),
                                  codec.altered_configs)

    async def DescribeConfigs(self, request: pb.DescribeConfigsRequest, context) -> pb.DescribeConfigsResponse:
        return await self._answer(pb.DescribeConfigsResponse, context, lambda: codec.config_resources(request),
                                  self.ops.describe_configs, codec.described_configs)

    # ---------------------------------------------------------------------------- brokers

    async def BrokerRegistration(self, request: pb.BrokerRegistrationRequest,
                                 context) -> pb.BrokerRegistrationResponse:
        return await self._answer(pb.BrokerRegistrationResponse, context, lambda: codec.broker_registration(request),
                                  self.ops.register_broker, codec.registered)

    async def BrokerHeartbeat(self, request: pb.BrokerHeartbeatRequest, context) -> pb.BrokerHeartbeatResponse:
        return await self._answer(pb.BrokerHeartbeatResponse, context, lambda: codec.heartbeat(request),
                                  self.ops.broker_heartbeat, codec.heartbeat_answer)

    async def BrokerHeartbeatStream(self, requests: AsyncIterator[pb.BrokerHeartbeatRequest],
                                    context) -> AsyncIterator[pb.BrokerHeartbeatResponse]:
        """A broker's heartbeats as messages of one call, each answered as ``BrokerHeartbeat``."""
        async for answer in _in_order(requests, context, self.BrokerHeartbeat):
            yield answer

    async def UnregisterBroker(self, request: pb.UnregisterBrokerRequest, context) -> pb.UnregisterBrokerResponse:
        return await self._answer(pb.UnregisterBrokerResponse, context, lambda: request.broker_id,
                                  self.ops.unregister_broker, lambda _: pb.UnregisterBrokerResponse(status=codec.OK))

    async def AllocateProducerIds(self, request: pb.AllocateProducerIdsRequest,
                                  context) -> pb.AllocateProducerIdsResponse:
        return await self._answer(pb.AllocateProducerIdsResponse, context, _nothing,
                                  lambda a, _: self.ops.allocate_producer_ids(a, request.broker_id, request.broker_epoch),
                                  codec.producer_id_block)

    # ---------------------------------------------------------------------------- the metadata log and the quorum

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context) -> pb.FetchMetadataResponse:
        return await self._answer(pb.FetchMetadataResponse, context, _nothing, lambda a, _: self.ops.fetch_metadata(
            a, request.offset, max_wait_ms=request.max_wait_ms, max_bytes=request.max_bytes,
            broker_id=request.broker_id), codec.metadata_fetched)

    async def FetchMetadataStream(self, requests: AsyncIterator[pb.FetchMetadataRequest],
                                  context) -> AsyncIterator[pb.FetchMetadataResponse]:
        """A broker's long polls as messages of one call, each answered as ``FetchMetadata``."""
        async for answer in _in_order(requests, context, self.FetchMetadata):
            yield answer

    async def FetchSnapshot(self, request: pb.FetchSnapshotRequest, context) -> pb.FetchSnapshotResponse:
        return await self._answer(pb.FetchSnapshotResponse, context, _nothing, lambda a, _: self.ops.fetch_snapshot(
            a, request.snapshot_offset, request.position, request.max_bytes), codec.snapshot_chunk)

    async def DescribeQuorum(self, request: pb.DescribeQuorumRequest, context) -> pb.DescribeQuorumResponse:
        return await self._answer(pb.DescribeQuorumResponse, context, _nothing,
                                  lambda a, _: self.ops.describe_quorum(a), codec.quorum_description)

    async def AddRaftVoter(self, request: pb.AddRaftVoterRequest, context) -> pb.AddRaftVoterResponse:
        return await self._answer(pb.AddRaftVoterResponse, context, lambda: codec.add_voter(request),
                                  self.ops.add_voter, lambda _: pb.AddRaftVoterResponse(status=codec.OK))

    async def RemoveRaftVoter(self, request: pb.RemoveRaftVoterRequest, context) -> pb.RemoveRaftVoterResponse:
        return await self._answer(pb.RemoveRaftVoterResponse, context, lambda: codec.remove_voter(request),
                                  self.ops.remove_voter, lambda _: pb.RemoveRaftVoterResponse(status=codec.OK))

    # ---------------------------------------------------------------------------- ACLs

    async def CreateAcls(self, request: pb.CreateAclsRequest, context) -> pb.CreateAclsResponse:
        return await self._answer(pb.CreateAclsResponse, context, lambda: codec.new_acls(request),
                                  self.ops.create_acls, codec.acls_created)

    async def DescribeAcls(self, request: pb.DescribeAclsRequest, context) -> pb.DescribeAclsResponse:
        return await self._answer(pb.DescribeAclsResponse, context, lambda: codec.acl_describe_filter(request),
                                  self.ops.describe_acls, codec.acls_described)

    async def DeleteAcls(self, request: pb.DeleteAclsRequest, context) -> pb.DeleteAclsResponse:
        return await self._answer(pb.DeleteAclsResponse, context, lambda: codec.acl_delete_filters(request),
                                  self.ops.delete_acls, codec.acls_deleted)

    # ---------------------------------------------------------------------------- SCRAM credentials

    async def AlterUserScramCredentials(self, request: pb.AlterUserScramCredentialsRequest,
                                        context) -> pb.AlterUserScramCredentialsResponse:
        return await self._answer(pb.AlterUserScramCredentialsResponse, context, lambda: codec.scram_changes(request),
                                  lambda a, d: self.ops.alter_user_scram_credentials(a, *d), codec.scram_altered)

    async def DescribeUserScramCredentials(self, request: pb.DescribeUserScramCredentialsRequest,
                                           context) -> pb.DescribeUserScramCredentialsResponse:
        return await self._answer(pb.DescribeUserScramCredentialsResponse, context, lambda: list(request.users),
                                  self.ops.describe_user_scram_credentials, codec.scram_described)

    # ---------------------------------------------------------------------------- client quotas

    async def AlterClientQuotas(self, request: pb.AlterClientQuotasRequest, context) -> pb.AlterClientQuotasResponse:
        return await self._answer(pb.AlterClientQuotasResponse, context, lambda: codec.quota_alterations(request),
                                  lambda a, d: self.ops.alter_client_quotas(a, d[0], validate_only=d[1]),
                                  codec.quotas_altered)

    async def DescribeClientQuotas(self, request: pb.DescribeClientQuotasRequest,
                                   context) -> pb.DescribeClientQuotasResponse:
        return await self._answer(pb.DescribeClientQuotasResponse, context, lambda: codec.quota_filter(request),
                                  lambda a, d: self.ops.describe_client_quotas(a, *d), codec.quotas_described)


async def _in_order(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext,
                    answer: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]) -> AsyncIterator[Any]:
    """A broker's requests of one kind as messages of one call (a unary call cost an idle broker
    about twice a message of a stream: docs/brokers.md, "The brokers' idle CPU"), each answered
    by ``answer``, the unary RPC's handler, in order: the next is read once the last is
    answered, so a caller has at most one request waiting, as with unary calls. A message that
    does not decode ends the call with one line (``raft.transport``'s guard)."""
    # The broker waits for it before its first request (metadata/controller_stream.py): that
    # this controller serves the stream, where an older one answers UNIMPLEMENTED.
    await context.send_initial_metadata(())
    async for request in requests:
        yield await answer(request, context)


def _nothing() -> None:
    """The decode of a request the operation reads no more than a field or two of."""
    return None


def _text(value: bytes | str) -> str:
    """A binary metadata value (``-bin`` keys carry bytes: a principal may be any Unicode)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
