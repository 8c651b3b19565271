"""A client of the controller quorum that finds the active controller from any bootstrap
address; used by the CLI, the tools and the brokers. Each RPC is a typed method
(``await client.create_topics(pb.CreateTopicsRequest(...))``), declared in one table, the body
of ``ControllerClient``, with whether it is safe to repeat.

What it retries follows ``raft.client`` and that declaration: NOT_CONTROLLER and
THROTTLING_QUOTA_EXCEEDED (the controller wrote nothing) and a connection that never opened,
always; REQUEST_TIMED_OUT and a call that broke midway (the outcome is unknown) only for RPCs
declared ``idempotent`` (reads, heartbeats, registration with the same incarnation). For the
others, a create or a delete, the caller gets REQUEST_TIMED_OUT saying the outcome is unknown,
instead of a second attempt that would answer TOPIC_ALREADY_EXISTS for their own topic."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import grpc
from google.protobuf.message import Message

from common.host_ports import host_ports
from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from raft.client import LeaderClient, Retry, describe
from common.tls import TLSConfig, tls_failure

from common.errors import ErrorCode, KafkaError

from .controller_stream import InOrderStream

if TYPE_CHECKING:  # metadata.principal reads certificates (cryptography): a tool's call needs none of it
    from .principal import Session

log = logging.getLogger("metadata.client")

#: Answers that prove the controller wrote nothing.
NOT_APPLIED = {ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED}
Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


@dataclass(frozen=True)
class Rpc(Generic[Req, Resp]):
    """One controller RPC as a ``ControllerClient`` method: its name in the Controller service
    and whether repeating it changes nothing more than the first attempt did, which decides
    whether an attempt whose outcome is unknown is retried."""

    name: str
    idempotent: bool
    #: The Controller method that carries it as messages of one stream, answered in order
    #: (``send(..., streamed=True)``); "" for none.
    stream: str = ""

    @overload
    def __get__(self, client: None, owner: type) -> Rpc[Req, Resp]: ...
    @overload
    def __get__(self, client: ControllerClient, owner: type) -> BoundRpc[Req, Resp]: ...

    def __get__(self, client: ControllerClient | None, owner: type) -> Rpc[Req, Resp] | BoundRpc[Req, Resp]:
        return self if client is None else BoundRpc(self, client)


@dataclass(frozen=True, slots=True)
class BoundRpc(Generic[Req, Resp]):
    """``client.create_topics``: called with the request (and the options of ``ControllerClient.send``)."""

    rpc: Rpc[Req, Resp]
    client: ControllerClient

    async def __call__(self, request: Req, *, timeout: float | None = None, attempt_timeout: float | None = None,
                       on_behalf_of: Session | None = None, streamed: bool = False) -> Resp:
        return await self.client.send(self.rpc, request, timeout=timeout, attempt_timeout=attempt_timeout,
                                      on_behalf_of=on_behalf_of, streamed=streamed)


class QuorumUnreachable(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


def parse_bootstrap(text: str) -> list[str]:
    try:
        out = host_ports(text)
    except ValueError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"bad bootstrap address {str(e)!r}: expected HOST:PORT") from None
    if not out:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "no bootstrap controller given: expected HOST:PORT[,HOST:PORT]")
    return out


class ControllerClient(LeaderClient):
    def __init__(self, bootstrap: list[str] | str, *, timeout: float = 15.0, attempt_timeout: float = 5.0,
                 tls: TLSConfig | None = None, give_up_unconnectable: bool = False) -> None:
        """``tls``: how to dial the controller listener (None: plaintext);
        ``give_up_unconnectable``: a tool's fail-fast on addresses where nothing accepts a
        connection (raft.client.LeaderClient)."""
        addresses = parse_bootstrap(bootstrap) if isinstance(bootstrap, str) else list(bootstrap)
        super().__init__(addresses, timeout=timeout, attempt_timeout=attempt_timeout, tls=tls,
                         give_up_unconnectable=give_up_unconnectable)
        self.bootstrap = self.endpoints
        self.last_controller_id = -1
        #: One stub per channel: a stub makes a multi-callable for each of the service's 27
        #: methods (~67 us), which per call was most of an idle broker's cost of a heartbeat
        #: or a metadata fetch (docs/brokers.md, "The brokers' idle CPU").
        self._stubs: dict[grpc.aio.Channel, controller_pb2_grpc.ControllerStub] = {}
        #: The open streams (``send(..., streamed=True)``), by channel and stream method: one
        #: per method, to the controller last asked.
        self._streams: dict[tuple[grpc.aio.Channel, str], InOrderStream] = {}
        #: Servers that answered a stream UNIMPLEMENTED (an older controller, or not a controller): sent unary
        #: calls until the client moves to another controller (a rolling upgrade restarts it).
        self._unary_only: set[tuple[grpc.aio.Channel, str]] = set()

    def stub(self, channel: grpc.aio.Channel) -> controller_pb2_grpc.ControllerStub:
        """The Controller service's stub over ``channel``, made at its first call."""
        stub = self._stubs.get(channel)
        if stub is None:
            stub = self._stubs[channel] = controller_pb2_grpc.ControllerStub(channel)
        return stub

    def unreachable(self, message: str) -> Exception:
        return QuorumUnreachable(f"the controller quorum at {','.join(self.bootstrap)} did not answer {message}")

    def outcome_unknown(self, message: str) -> Exception:
        return KafkaError(ErrorCode.REQUEST_TIMED_OUT, message)

    def unconnectable(self, message: str) -> Exception:
        return KafkaError(ErrorCode.NETWORK_EXCEPTION, f"no controller accepted a connection: {message}")

    def failed(self, address: str, error: grpc.aio.AioRpcError) -> Exception:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:  # a gRPC server without the Controller service
            return KafkaError(ErrorCode.INVALID_REQUEST, f"{address} is not a controller listener (it does not "
                                   f"serve the controller API; a broker's?): give --bootstrap-controller the "
                                   f"controllers' listener, as in controller.quorum.voters")
        code = ErrorCode.NETWORK_EXCEPTION if tls_failure(error.details() or "") else ErrorCode.INVALID_REQUEST
        return KafkaError(code, f"{address}: {describe(error)}")

    # The RPCs, and whether each is safe to repeat (docs/operations.md, "Write outcomes").
    # Reads: safe.
    describe_topics = Rpc[pb.DescribeTopicsRequest, pb.DescribeTopicsResponse]("DescribeTopics", idempotent=True)
    describe_cluster = Rpc[pb.DescribeClusterRequest, pb.DescribeClusterResponse]("DescribeCluster", idempotent=True)
    describe_configs = Rpc[pb.DescribeConfigsRequest, pb.DescribeConfigsResponse]("DescribeConfigs", idempotent=True)
    describe_quorum = Rpc[pb.DescribeQuorumRequest, pb.DescribeQuorumResponse]("DescribeQuorum", idempotent=True)
    describe_acls = Rpc[pb.DescribeAclsRequest, pb.DescribeAclsResponse]("DescribeAcls", idempotent=True)
    describe_user_scram_credentials = Rpc[pb.DescribeUserScramCredentialsRequest,
                                          pb.DescribeUserScramCredentialsResponse](
        "DescribeUserScramCredentials", idempotent=True)
    describe_client_quotas = Rpc[pb.DescribeClientQuotasRequest, pb.DescribeClientQuotasResponse](
        "DescribeClientQuotas", idempotent=True)
    fetch_metadata = Rpc[pb.FetchMetadataRequest, pb.FetchMetadataResponse]("FetchMetadata", idempotent=True,
                                                                           stream="FetchMetadataStream")
    fetch_snapshot = Rpc[pb.FetchSnapshotRequest, pb.FetchSnapshotResponse]("FetchSnapshot", idempotent=True)
    list_partition_reassignments = Rpc[pb.ListPartitionReassignmentsRequest, pb.ListPartitionReassignmentsResponse](
        "ListPartitionReassignments", idempotent=False)  # a read, but not declared safe so far: kept as it was
    # A broker's own requests: safe (the same heartbeat, registration with the same
    # incarnation, the same ISR change or a fresh block of producer ids change nothing more).
    broker_registration = Rpc[pb.BrokerRegistrationRequest, pb.BrokerRegistrationResponse](
        "BrokerRegistration", idempotent=True)
    broker_heartbeat = Rpc[pb.BrokerHeartbeatRequest, pb.BrokerHeartbeatResponse](
        "BrokerHeartbeat", idempotent=True, stream="BrokerHeartbeatStream")
    alter_partition = Rpc[pb.AlterPartitionRequest, pb.AlterPartitionResponse]("AlterPartition", idempotent=True)
    allocate_producer_ids = Rpc[pb.AllocateProducerIdsRequest, pb.AllocateProducerIdsResponse](
        "AllocateProducerIds", idempotent=True)
    # CreateAcls: safe, an ACL that exists is answered as created, writing nothing.
    create_acls = Rpc[pb.CreateAclsRequest, pb.CreateAclsResponse]("CreateAcls", idempotent=True)
    # Writes whose repetition answers differently (TOPIC_ALREADY_EXISTS for one's own topic,
    # a DeleteAcls that deleted nothing): not retried once their outcome is unknown.
    create_topics = Rpc[pb.CreateTopicsRequest, pb.CreateTopicsResponse]("CreateTopics", idempotent=False)
    delete_topics = Rpc[pb.DeleteTopicsRequest, pb.DeleteTopicsResponse]("DeleteTopics", idempotent=False)
    create_partitions = Rpc[pb.CreatePartitionsRequest, pb.CreatePartitionsResponse](
        "CreatePartitions", idempotent=False)
    delete_acls = Rpc[pb.DeleteAclsRequest, pb.DeleteAclsResponse]("DeleteAcls", idempotent=False)
    # A deletion repeated answers RESOURCE_NOT_FOUND for one's own deletion.
    alter_user_scram_credentials = Rpc[pb.AlterUserScramCredentialsRequest, pb.AlterUserScramCredentialsResponse](
        "AlterUserScramCredentials", idempotent=False)
    alter_client_quotas = Rpc[pb.AlterClientQuotasRequest, pb.AlterClientQuotasResponse](
        "AlterClientQuotas", idempotent=False)
    incremental_alter_configs = Rpc[pb.IncrementalAlterConfigsRequest, pb.IncrementalAlterConfigsResponse](
        "IncrementalAlterConfigs", idempotent=False)
    elect_leaders = Rpc[pb.ElectLeadersRequest, pb.ElectLeadersResponse]("ElectLeaders", idempotent=False)
    alter_partition_reassignments = Rpc[pb.AlterPartitionReassignmentsRequest, pb.AlterPartitionReassignmentsResponse](
        "AlterPartitionReassignments", idempotent=False)
    unregister_broker = Rpc[pb.UnregisterBrokerRequest, pb.UnregisterBrokerResponse](
        "UnregisterBroker", idempotent=False)
    add_raft_voter = Rpc[pb.AddRaftVoterRequest, pb.AddRaftVoterResponse]("AddRaftVoter", idempotent=False)
    remove_raft_voter = Rpc[pb.RemoveRaftVoterRequest, pb.RemoveRaftVoterResponse]("RemoveRaftVoter", idempotent=False)

    # Not LeaderClient.call's signature (mypy's override): this one is reached by name from the
    # Kafka listener, the other through send().
    async def call(self, method: str, request: Any, *, timeout: float | None = None,  # type: ignore[override]
                   attempt_timeout: float | None = None, on_behalf_of: Session | None = None) -> Any:
        """The RPC named ``method``, for a caller that forwards requests by name (a broker's
        Kafka listener); everyone else calls the typed methods above."""
        return await self.send(RPCS[method], request, timeout=timeout, attempt_timeout=attempt_timeout,
                               on_behalf_of=on_behalf_of)

    async def send(self, rpc: Rpc[Req, Resp], request: Req, *, timeout: float | None = None,
                   attempt_timeout: float | None = None, on_behalf_of: Session | None = None,
                   streamed: bool = False) -> Resp:
        """Send ``request`` to the active controller; returns the response once its status is
        NONE. Raises KafkaError for a final status (REQUEST_TIMED_OUT when the outcome
        of a write is unknown), QuorumUnreachable when no controller answered in time.
        ``on_behalf_of``: the client a broker forwards the request for, whose principal the
        controller authorizes (Kafka's EnvelopeRequest). ``streamed``: as a message of the
        RPC's stream to that controller (``Rpc.stream``), with the same failover and answers."""
        idempotent = rpc.idempotent
        metadata = None
        if on_behalf_of is not None:
            from .principal import FORWARDED_HOST, FORWARDED_PRINCIPAL
            metadata = ((FORWARDED_PRINCIPAL, on_behalf_of.principal.encode()),
                        (FORWARDED_HOST, on_behalf_of.host.encode()))

        def check(address: str, resp: Resp) -> Resp:
            code = ErrorCode.of(resp.status.error_code)
            if code == ErrorCode.NONE:
                self.last_controller_id = resp.status.controller_id
                return resp
            if code in NOT_APPLIED or (idempotent and code == ErrorCode.REQUEST_TIMED_OUT):
                raise Retry(f"{code.name}: {resp.status.error_message}", resp.status.controller_endpoint or None)
            raise KafkaError(code, resp.status.error_message)

        def unary(ch: grpc.aio.Channel, t: float) -> Awaitable[Resp]:
            return getattr(self.stub(ch), rpc.name)(request, timeout=t, metadata=metadata)

        def invoke(ch: grpc.aio.Channel, t: float) -> Awaitable[Resp]:
            return self._streamed(rpc, ch, request, t, unary)

        # A request forwarded for a client is a call of its own: its principal travels in the call's metadata.
        return await super().call(invoke if streamed and rpc.stream and on_behalf_of is None else unary,
                                  idempotent=idempotent, check=check, timeout=timeout, attempt_timeout=attempt_timeout)

    async def _streamed(self, rpc: Rpc[Req, Resp], channel: grpc.aio.Channel, request: Req, timeout: float,
                        unary: Callable[[grpc.aio.Channel, float], Awaitable[Resp]]) -> Resp:
        """One attempt of ``request`` as a message of ``rpc.stream`` over ``channel``: the
        stream there is opened at the first request and again after it failed; streams to
        other controllers are closed (the active one changed). Unary while a request is on
        the stream already, and at a controller that answered UNIMPLEMENTED."""
        key = (channel, rpc.stream)
        for other in [k for k in self._streams if k[1] == rpc.stream and k[0] is not channel]:
            self._streams.pop(other).close()
        self._unary_only -= {k for k in self._unary_only if k[1] == rpc.stream and k[0] is not channel}
        if key in self._unary_only:
            return await unary(channel, timeout)
        stream = self._streams.get(key)
        if stream is None or stream.ended:
            stream = self._streams[key] = InOrderStream(getattr(self.stub(channel), rpc.stream)())
        elif stream.busy:
            return await unary(channel, timeout)
        try:
            return await stream.ask(request, timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        self._unary_only.add(key)
        address = next((a for a, ch in self._channels.items() if ch is channel), "?")
        # gRPC answers UNIMPLEMENTED alike for a method its service lacks and for a service it
        # does not serve: an older controller, or a broker's or another server's port.
        log.info("the server at %s does not serve %s (an older controller, or not a controller): "
                 "sending it %s calls", address, rpc.stream, rpc.name)
        return await unary(channel, timeout)

    async def close(self) -> None:
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        self._unary_only.clear()
        self._stubs.clear()
        await super().close()

    async def __aenter__(self) -> "ControllerClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: Every RPC the client sends, by name.
RPCS: dict[str, Rpc[Any, Any]] = {r.name: r for r in vars(ControllerClient).values() if isinstance(r, Rpc)}
#: The RPCs declared safe to repeat.
SAFE_TO_REPEAT = frozenset(r.name for r in RPCS.values() if r.idempotent)
