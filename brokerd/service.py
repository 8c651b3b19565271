"""The broker's gRPC service (protos/broker.proto), a thin codec: each RPC decodes its message
into the broker's domain request (``requests``, ``group_requests``, by ``proto_codec``), calls
the same checked domain call the Kafka listener calls (``authorization``) and encodes the
answer. Partition-level problems are answered in-band; a request that cannot be served at all
(a bug, a failed log directory, a client certificate no mapping rule maps) gets a gRPC error
with one line."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc

from protos import broker_pb2 as pb
from protos import broker_pb2_grpc

from common.errors import ErrorCode, KafkaError
from metadata.authorizer import Access, StandardAuthorizer
from metadata.principal import PrincipalMapper, caller

from . import authorization as authorized
from . import group_requests as g
from . import requests as r
from . import transaction_requests as txn
from .auto_topics import TopicAutoCreator
from .fetch_session import NO_SESSION, FetchSessionCache
from .group_coordinator import GroupCoordinator
from .group_requests import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from .grpc_fetch_answer import FetchAnswer
from .grpc_throttling import charged
from .log_store import StorageFailure
from .produce import first_error
from .producer_ids import ProducerIdManager
from .quotas import ClientQuotas, user_of
from .proto_codec import to_domain, to_wire
from .replica_manager import ReplicaManager
from .transaction_coordinator import TransactionCoordinator

log = logging.getLogger("brokerd.service")
T = TypeVar("T")

class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(self, rm: ReplicaManager, listener: str, controller_id: Callable[[], int],
                 describe: Callable[[], pb.DescribeBrokerResponse], producer_ids: ProducerIdManager,
                 groups: GroupCoordinator, authorizer: StandardAuthorizer | None = None,
                 mapper: PrincipalMapper | None = None, auto_topics: TopicAutoCreator | None = None,
                 transactions: TransactionCoordinator | None = None, quotas: ClientQuotas | None = None,
                 fetch_sessions: FetchSessionCache | None = None) -> None:
        """``authorizer`` None: every request is allowed (no ``authorizer.class.name``);
        ``auto_topics`` None: Metadata creates no topic; ``quotas`` None: no client quotas;
        ``fetch_sessions`` None: no fetch sessions (every fetch is a full one)."""
        self.rm = rm
        self.fetch_sessions = fetch_sessions or FetchSessionCache(0)
        self.quotas = quotas
        self.transactions = transactions
        self.txn = authorized.TransactionAccess(transactions) if transactions is not None else None
        self.auto_topics = auto_topics
        self.producer_ids = producer_ids
        self.groups = authorized.GroupAccess(groups)
        self.listener = listener
        self.controller_id = controller_id
        self.describe = describe
        self.authorizer = authorizer
        self.mapper = mapper or PrincipalMapper()

    async def _access(self, context: grpc.aio.ServicerContext) -> Access:
        """Who calls; a certificate no mapping rule maps ends the call, as Kafka refuses the
        connection."""
        return Access(self.authorizer, await caller(context, self.mapper))

    async def _guard(self, context: grpc.aio.ServicerContext, work: Awaitable[T]) -> T:
        try:
            return await work
        except StorageFailure as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"KAFKA_STORAGE_ERROR: {e}")
        except Exception as e:
            log.exception("request failed: %s", e)
            await context.abort(grpc.StatusCode.INTERNAL, f"UNKNOWN_SERVER_ERROR: {type(e).__name__}: {e}")
        raise AssertionError("unreachable")

    async def Produce(self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext) -> pb.ProduceResponse:
        access = await self._access(context)
        resp = await self._guard(context, authorized.produce(self.rm, to_domain(r.ProduceRequest, request), access))
        if request.acks == 0:
            # Kafka sends nothing back for acks=0, and closes the connection on an error.
            error = first_error(resp)
            if error is not None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
            return pb.ProduceResponse()
        return self._produced(request, resp, access)

    def _produced(self, request: pb.ProduceRequest, resp: r.ProduceResponse, access: Access) -> pb.ProduceResponse:
        answer = to_wire(pb.ProduceResponse, resp)
        # The client holds back for the throttle time (KIP-219's way). The bytes are summed only
        # for a client with a quota of them, as on the Kafka listener (kafka/throttling.py):
        # each read of a batch's records copies them out of the protobuf.
        if self.quotas is not None and (sensor := self.quotas.produce.sensor(
                user_of(access.session.principal), request.client_id)) is not None:
            answer.throttle_time_ms = sensor.record(
                sum(len(p.batch.records) for t in request.topics for p in t.partitions), self.quotas.clock())
        return answer

    async def ProduceStream(self, requests: AsyncIterator[pb.ProduceRequest],
                            context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProduceResponse]:
        """Produce requests pipelined on one stream (a gRPC call costs the broker about twice
        one message of a stream: docs/brokers.md, "Our client's produce per Produce request").
        Each request is served as ``Produce`` serves it, started in the order it came (so a
        producer's batches take their offsets in its order), answered when done with its
        ``correlation_id``; one that cannot be served at all is answered with the error
        ``Produce`` would end its call with, so the others' answers go on."""
        access = await self._access(context)
        user = user_of(access.session.principal)
        # The client waits for it before its first request (clients/produce_stream.py): that
        # this broker serves the stream.
        await context.send_initial_metadata(())
        answers: asyncio.Queue[pb.ProduceResponse | None] = asyncio.Queue()
        serving: set[asyncio.Task[None]] = set()

        async def serve(request: pb.ProduceRequest) -> None:
            answers.put_nowait(await self._stream_answer(request, access, user))

        async def read() -> None:
            try:
                async for request in requests:
                    task = asyncio.get_running_loop().create_task(serve(request))
                    serving.add(task)
                    task.add_done_callback(serving.discard)
            finally:  # the client's end of the stream, or a message refused: the rest answered
                if serving:
                    await asyncio.wait(set(serving))
                answers.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (answer := await answers.get()) is not None:
                yield answer
            await reader  # what ended the requests (a refused message) ends the stream
        finally:  # the client went away: what it sent is cancelled, as its unary calls would be
            reader.cancel()
            for task in list(serving):
                task.cancel()

    async def _stream_answer(self, request: pb.ProduceRequest, access: Access, user: str) -> pb.ProduceResponse:
        """One request of ``ProduceStream``: its answer, or the error that stopped it."""
        answer: pb.ProduceResponse
        if request.acks == 0:
            answer = pb.ProduceResponse(error_code=int(ErrorCode.INVALID_REQUIRED_ACKS),
                                        error_message="acks=0 is produced on ProduceNoAck")
        else:
            try:
                if self.quotas is None:
                    resp = await authorized.produce(self.rm, to_domain(r.ProduceRequest, request), access)
                    busy = 0
                else:
                    resp, busy = await charged(self.quotas, user, request.client_id, authorized.produce(
                        self.rm, to_domain(r.ProduceRequest, request), access))
                answer = self._produced(request, resp, access)
                answer.throttle_time_ms = max(busy, answer.throttle_time_ms)
            except StorageFailure as e:
                answer = pb.ProduceResponse(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), error_message=str(e))
            except Exception as e:
                log.exception("request failed: %s", e)
                answer = pb.ProduceResponse(error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                            error_message=f"{type(e).__name__}: {e}")
        answer.correlation_id = request.correlation_id
        return answer

    async def ProduceNoAck(self, request_iterator: AsyncIterator[pb.ProduceRequest],
                           context: grpc.aio.ServicerContext) -> pb.ProduceStreamSummary:
        summary = pb.ProduceStreamSummary()
        access = await self._access(context)
        async for message in request_iterator:
            if message.acks != 0:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"INVALID_REQUIRED_ACKS: the acks=0 stream got a request with acks={message.acks}")
            req = to_domain(r.ProduceRequest, message)
            resp = await self._guard(context, authorized.produce(self.rm, req, access))
            error = first_error(resp)
            if error is not None:
                # No answer can carry the error: end the stream, as Kafka closes the connection.
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
            summary.requests += 1
            for t in req.topics:
                for pd in t.partitions:
                    summary.batches += 1
                    summary.records += pd.batch.record_count if pd.batch is not None else 0
        return summary

    async def Fetch(self, request: pb.FetchRequest, context: grpc.aio.ServicerContext) -> FetchAnswer:
        """The answer as Fetch's response serializer writes it (``grpc_fetch_answer``: the
        partitions' frames copied once, into the bytes gRPC sends)."""
        access = await self._access(context)
        ours = to_domain(r.FetchRequest, request)
        user, quota = user_of(access.session.principal), self.quotas.fetch if self.quotas is not None else None
        most = quota.max_in_window(user, ours.client_id) if quota is not None and ours.replica_id < 0 else None
        if most is not None and (ours.max_bytes <= 0 or ours.max_bytes > most):
            ours.max_bytes = most
        session_id = NO_SESSION
        if request.HasField("session_epoch"):  # KIP-227: a full fetch opening a session, or an incremental one
            try:
                session = self.fetch_sessions.begin(
                    request.session_id, request.session_epoch, ours,
                    [(t.topic_id if t.topic_id else t.name, t.partitions) for t in request.forgotten_topics],
                    uses_topic_ids=ours.replica_id >= 0)
            except KafkaError as e:
                return FetchAnswer(error_code=int(e.code))
            session_id, resp = session.finish(await self._guard(context, authorized.fetch(self.rm, session.request,
                                                                                          access)))
        else:
            resp = await self._guard(context, authorized.fetch(self.rm, ours, access))
        if most is None or quota is None:
            return FetchAnswer(resp, session_id)
        size = sum(a.records_size for t in resp.topics for a in t.partitions)
        throttle = quota.record(user, ours.client_id, size)
        if not throttle:
            return FetchAnswer(resp, session_id)
        quota.unrecord(user, ours.client_id, size)  # answered empty, as Kafka: fetched again after the throttle
        return FetchAnswer(session_id=session_id, throttle_time_ms=throttle)

    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext) -> pb.ListOffsetsResponse:
        resp = authorized.list_offsets(self.rm, to_domain(r.ListOffsetsRequest, request), await self._access(context))
        return to_wire(pb.ListOffsetsResponse, resp)

    async def DeleteRecords(self, request: pb.DeleteRecordsRequest,
                            context: grpc.aio.ServicerContext) -> pb.DeleteRecordsResponse:
        resp = await authorized.delete_records(self.rm, to_domain(r.DeleteRecordsRequest, request),
                                         await self._access(context))
        return to_wire(pb.DeleteRecordsResponse, resp)

    async def DescribeProducers(self, request: pb.DescribeProducersRequest,
                                context: grpc.aio.ServicerContext) -> pb.DescribeProducersResponse:
        resp = authorized.describe_producers(self.rm, to_domain(r.DescribeProducersRequest, request),
                                             await self._access(context))
        return to_wire(pb.DescribeProducersResponse, resp)

    async def OffsetsForLeaderEpoch(self, request: pb.OffsetsForLeaderEpochRequest,
                                    context: grpc.aio.ServicerContext) -> pb.OffsetsForLeaderEpochResponse:
        resp = authorized.offsets_for_leader_epoch(self.rm, to_domain(r.OffsetsForLeaderEpochRequest, request),
                                                   await self._access(context))
        return to_wire(pb.OffsetsForLeaderEpochResponse, resp)

    async def Metadata(self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext) -> pb.MetadataResponse:
        access = await self._access(context)
        resp = authorized.metadata(self.rm, to_domain(r.MetadataRequest, request), self.listener,
                                   self.controller_id(), access)
        if self.auto_topics is not None and request.topics:
            await self._guard(context, self.auto_topics.resolve(resp, access,
                                                                allowed=request.allow_auto_topic_creation))
        return to_wire(pb.MetadataResponse, resp)

    async def InitProducerId(self, request: pb.InitProducerIdRequest,
                             context: grpc.aio.ServicerContext) -> pb.InitProducerIdResponse:
        resp = await self._guard(context, authorized.init_producer_id(
            self.producer_ids, to_domain(r.InitProducerIdRequest, request), await self._access(context)))
        return to_wire(pb.InitProducerIdResponse, resp)

    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest,
                              context: grpc.aio.ServicerContext) -> pb.WriteTxnMarkersResponse:
        """A transaction coordinator's markers (from another broker)."""
        access = await self._access(context)
        resp = await self._guard(context, authorized.write_txn_markers(
            self.rm, to_domain(txn.WriteTxnMarkersRequest, request), access, self.groups.groups))
        if resp is None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"CLUSTER_AUTHORIZATION_FAILED: "
                                                                   f"{access.cluster_denied(authorized.O.CLUSTER_ACTION)}")
        return to_wire(pb.WriteTxnMarkersResponse, resp)

    async def VerifyTxnPartitions(self, request: pb.VerifyTxnPartitionsRequest,
                                  context: grpc.aio.ServicerContext) -> pb.VerifyTxnPartitionsResponse:
        """A partition leader verifying a transactional batch with this coordinator (KIP-890)."""
        access = await self._access(context)
        if self.transactions is None or not access.cluster(authorized.O.CLUSTER_ACTION):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"CLUSTER_AUTHORIZATION_FAILED: "
                                                                   f"{access.cluster_denied(authorized.O.CLUSTER_ACTION)}")
        assert self.transactions is not None
        return to_wire(pb.VerifyTxnPartitionsResponse,
                       self.transactions.verify(to_domain(txn.VerifyTxnPartitionsRequest, request)))

    # -- consumer groups (group_coordinator) --------------------------------------------------

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest,
                              context: grpc.aio.ServicerContext) -> pb.FindCoordinatorResponse:
        access = await self._access(context)
        req = to_domain(g.FindCoordinatorRequest, request)
        if req.key_type == COORDINATOR_TRANSACTION:
            resp = await self._guard(context, self.txn.find_coordinator(req.key, self.listener, access)) \
                if self.txn else _no_coordinator(g.FindCoordinatorResponse)
        elif req.key_type != COORDINATOR_GROUP:
            resp = g.FindCoordinatorResponse(error_code=int(ErrorCode.INVALID_REQUEST), node_id=-1, port=-1,
                                             error_message=f"unknown coordinator key type {req.key_type}")
        else:
            resp = await self._guard(context, self.groups.find_coordinator(req, self.listener, access))
        return to_wire(pb.FindCoordinatorResponse, resp)

    async def JoinGroup(self, request: pb.JoinGroupRequest, context: grpc.aio.ServicerContext) -> pb.JoinGroupResponse:
        access = await self._access(context)
        req = to_domain(g.JoinGroupRequest, request)
        req.client_host = f"/{access.session.host}"  # the broker's to say, as in Kafka
        return to_wire(pb.JoinGroupResponse, await self._guard(context, self.groups.join_group(req, access)))

    async def SyncGroup(self, request: pb.SyncGroupRequest, context: grpc.aio.ServicerContext) -> pb.SyncGroupResponse:
        resp = await self._guard(context, self.groups.sync_group(to_domain(g.SyncGroupRequest, request),
                                                                 await self._access(context)))
        return to_wire(pb.SyncGroupResponse, resp)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> pb.HeartbeatResponse:
        resp = await self._guard(context, self.groups.heartbeat(to_domain(g.HeartbeatRequest, request),
                                                                await self._access(context)))
        return to_wire(pb.HeartbeatResponse, resp)

    async def LeaveGroup(self, request: pb.LeaveGroupRequest,
                         context: grpc.aio.ServicerContext) -> pb.LeaveGroupResponse:
        resp = await self._guard(context, self.groups.leave_group(to_domain(g.LeaveGroupRequest, request),
                                                                  await self._access(context)))
        return to_wire(pb.LeaveGroupResponse, resp)

    async def OffsetCommit(self, request: pb.OffsetCommitRequest,
                           context: grpc.aio.ServicerContext) -> pb.OffsetCommitResponse:
        resp = await self._guard(context, self.groups.offset_commit(to_domain(g.OffsetCommitRequest, request),
                                                                    await self._access(context)))
        return to_wire(pb.OffsetCommitResponse, resp)

    async def OffsetFetch(self, request: pb.OffsetFetchRequest,
                          context: grpc.aio.ServicerContext) -> pb.OffsetFetchResponse:
        resp = await self._guard(context, self.groups.offset_fetch(to_domain(g.OffsetFetchRequest, request),
                                                                   await self._access(context)))
        return to_wire(pb.OffsetFetchResponse, resp)

    async def ListGroups(self, request: pb.ListGroupsRequest,
                         context: grpc.aio.ServicerContext) -> pb.ListGroupsResponse:
        return to_wire(pb.ListGroupsResponse, self.groups.list_groups(await self._access(context)))

    async def DescribeGroups(self, request: pb.DescribeGroupsRequest,
                             context: grpc.aio.ServicerContext) -> pb.DescribeGroupsResponse:
        resp = self.groups.describe_groups(to_domain(g.DescribeGroupsRequest, request), await self._access(context))
        return to_wire(pb.DescribeGroupsResponse, resp)

    async def DeleteGroups(self, request: pb.DeleteGroupsRequest,
                           context: grpc.aio.ServicerContext) -> pb.DeleteGroupsResponse:
        resp = await self._guard(context, self.groups.delete_groups(to_domain(g.DeleteGroupsRequest, request),
                                                                    await self._access(context)))
        return to_wire(pb.DeleteGroupsResponse, resp)

    async def OffsetDelete(self, request: pb.OffsetDeleteRequest,
                           context: grpc.aio.ServicerContext) -> pb.OffsetDeleteResponse:
        resp = await self._guard(context, self.groups.offset_delete(to_domain(g.OffsetDeleteRequest, request),
                                                                    await self._access(context)))
        return to_wire(pb.OffsetDeleteResponse, resp)

    # -- transactions (transaction_coordinator; the Kafka listener's codec is kafka/apis.py) ----------

    async def InitTransactionalProducer(self, request: pb.InitTransactionalProducerRequest,
                                        context: grpc.aio.ServicerContext) -> pb.InitTransactionalProducerResponse:
        if self.txn is None:
            return _no_coordinator(pb.InitTransactionalProducerResponse)
        resp = await self._guard(context, self.txn.init_producer_id(
            to_domain(txn.InitTransactionalProducerRequest, request), await self._access(context)))
        return to_wire(pb.InitTransactionalProducerResponse, resp)

    async def AddPartitionsToTxn(self, request: pb.AddPartitionsToTxnRequest,
                                 context: grpc.aio.ServicerContext) -> pb.AddPartitionsToTxnResponse:
        req = txn.AddPartitionsToTxnRequest(
            transactional_id=request.transactional_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, partitions=[(t.name, i) for t in request.topics for i in t.partitions])
        if self.txn is None:
            return to_wire(pb.AddPartitionsToTxnResponse, txn.AddPartitionsToTxnResponse(results=[
                txn.TxnPartitionResult(topic=n, partition=i, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
                for n, i in req.partitions]))
        resp = await self._guard(context, self.txn.add_partitions(req, await self._access(context)))
        return to_wire(pb.AddPartitionsToTxnResponse, resp)

    async def AddOffsetsToTxn(self, request: pb.AddOffsetsToTxnRequest,
                              context: grpc.aio.ServicerContext) -> pb.AddOffsetsToTxnResponse:
        if self.txn is None:
            return _no_coordinator(pb.AddOffsetsToTxnResponse)
        resp = await self._guard(context, self.txn.add_offsets(to_domain(txn.AddOffsetsToTxnRequest, request),
                                                               await self._access(context)))
        return to_wire(pb.AddOffsetsToTxnResponse, resp)

    async def EndTxn(self, request: pb.EndTxnRequest, context: grpc.aio.ServicerContext) -> pb.EndTxnResponse:
        if self.txn is None:
            return _no_coordinator(pb.EndTxnResponse)
        resp = await self._guard(context, self.txn.end_txn(to_domain(txn.EndTxnRequest, request),
                                                           await self._access(context)))
        return to_wire(pb.EndTxnResponse, resp)

    async def TxnOffsetCommit(self, request: pb.TxnOffsetCommitRequest,
                              context: grpc.aio.ServicerContext) -> pb.OffsetCommitResponse:
        resp = await self._guard(context, self.groups.txn_offset_commit(
            to_domain(txn.TxnOffsetCommitRequest, request), await self._access(context)))
        return to_wire(pb.OffsetCommitResponse, resp)

    async def ListTransactions(self, request: pb.ListTransactionsRequest,
                               context: grpc.aio.ServicerContext) -> pb.ListTransactionsResponse:
        if self.txn is None:
            return _no_coordinator(pb.ListTransactionsResponse)
        resp = self.txn.list_transactions(to_domain(txn.ListTransactionsRequest, request), await self._access(context))
        return to_wire(pb.ListTransactionsResponse, resp)

    async def DescribeTransactions(self, request: pb.DescribeTransactionsRequest,
                                   context: grpc.aio.ServicerContext) -> pb.DescribeTransactionsResponse:
        ids = list(request.transactional_ids)
        found = self.txn.describe_transactions(ids, await self._access(context)) if self.txn is not None else [
            txn.DescribedTransaction(transactional_id=i, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            for i in ids]
        resp = pb.DescribeTransactionsResponse()
        for x in found:
            d = resp.transactions.add(transactional_id=x.transactional_id, error_code=x.error_code, state=x.state,
                                      timeout_ms=x.timeout_ms, start_ms=x.start_ms, producer_id=x.producer_id,
                                      producer_epoch=x.producer_epoch)
            by_topic: dict[str, list[int]] = {}
            for topic, index in x.partitions:
                by_topic.setdefault(topic, []).append(index)
            for topic, indexes in by_topic.items():
                d.topics.add(name=topic, partitions=indexes)
        return resp

    async def DescribeLogDirs(self, request: pb.DescribeLogDirsRequest,
                              context: grpc.aio.ServicerContext) -> pb.DescribeLogDirsResponse:
        topics = [r.DescribeLogDirsTopic(name=t.name, partitions=list(t.partitions)) for t in request.topics]
        resp = authorized.describe_log_dirs(self.rm, r.DescribeLogDirsRequest(topics=topics or None),
                                            await self._access(context))
        return to_wire(pb.DescribeLogDirsResponse, resp)

    async def AlterReplicaLogDirs(self, request: pb.AlterReplicaLogDirsRequest,
                                  context: grpc.aio.ServicerContext) -> pb.AlterReplicaLogDirsResponse:
        resp = authorized.alter_replica_log_dirs(self.rm, to_domain(r.AlterReplicaLogDirsRequest, request),
                                                 await self._access(context))
        return to_wire(pb.AlterReplicaLogDirsResponse, resp)

    async def DescribeBroker(self, request: pb.DescribeBrokerRequest,
                             context: grpc.aio.ServicerContext) -> pb.DescribeBrokerResponse:
        return authorized.describe_broker(self.describe, lambda code, message: pb.DescribeBrokerResponse(
            error_code=code, error_message=message), await self._access(context))


M = TypeVar("M")


def _no_coordinator(cls: Callable[..., M]) -> M:
    """A broker without a transaction coordinator, as Kafka answers when it cannot find one."""
    return cls(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), error_message="no transaction coordinator")
