"""What each broker request needs (Kafka's KafkaApis with its AuthHelper), in one place for
both front ends: the gRPC service and the Kafka listener call these instead of the broker's
core functions, with the request's ``Access``.

Kafka's operations: Produce WRITE on each topic; Fetch READ on each topic, or CLUSTER_ACTION
on the cluster for a follower; ListOffsets DESCRIBE; DeleteRecords DELETE; DescribeProducers
READ; OffsetsForLeaderEpoch CLUSTER_ACTION or
else DESCRIBE; Metadata DESCRIBE (a listing leaves the other topics out, a named topic is
refused); InitProducerId IDEMPOTENT_WRITE on the cluster or WRITE on some topic; the group
APIs READ (joining, syncing, heartbeats, leaving, committing), DESCRIBE (finding the
coordinator, describing, fetching offsets) or DELETE on the group (deleting it or its
offsets), and for offsets READ or
DESCRIBE on each topic; ListGroups DESCRIBE on the cluster, or else only the groups the
session may DESCRIBE; DescribeBroker and DescribeLogDirs DESCRIBE on the cluster; the transaction APIs DESCRIBE
(finding the coordinator) or WRITE on the transactional id, and AddPartitionsToTxn WRITE on
each topic; WriteTxnMarkers CLUSTER_ACTION (brokers only). Refused topics are answered
TOPIC_AUTHORIZATION_FAILED per partition while the rest of the request goes ahead; refused
groups GROUP_AUTHORIZATION_FAILED; cluster refusals CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import fields, replace
from functools import cache
from typing import Any, TypeVar

from common.errors import ErrorCode, capped
from metadata.acls import AclOperation, AclResourceType
from metadata.authorizer import Access

from . import group_requests as g
from . import requests as r
from .cluster_metadata import live_brokers, metadata_answer
from .delete_records import delete_records as delete_records_of
from .describe_producers import describe_producers as describe_producers_of
from .log_dirs import alter_replica_log_dirs as alter_replica_log_dirs_of
from .log_dirs import describe_log_dirs as describe_log_dirs_of
from .fetch import fetch as fetch_records
from . import transaction_requests as txn
from .group_coordinator import GroupCoordinator
from .offsets import list_offsets as list_offsets_of, offsets_for_leader_epoch as leader_epoch_offsets
from .produce import produce as produce_records
from .producer_ids import ProducerIdManager
from .replica_manager import ReplicaManager
from .transaction_coordinator import TransactionCoordinator
from .transaction_markers import write_txn_markers as write_markers

O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
R = TypeVar("R")
D = TypeVar("D")
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _split(req: R, allowed: Callable[[Any], bool]) -> tuple[R, list[Any]]:
    """The request with only the topics ``allowed`` lets through, and the others; the request
    itself when none is refused (a copy shares the kept topics and their records)."""
    verdicts = [(t, allowed(t)) for t in req.topics]  # type: ignore[attr-defined]
    refused = [t for t, ok in verdicts if not ok]
    if not refused:
        return req, []
    return replace(req, topics=[t for t, ok in verdicts if ok]), refused  # type: ignore[type-var]


def _refuse(answers: list[Any], refused: list[Any], topic: type, partition: type, message: Callable[[str], str],
            **defaults: int) -> None:
    """Answer every partition of the refused topics TOPIC_AUTHORIZATION_FAILED (with the
    message where the answer has a place for one)."""
    for t in refused:
        out = topic(name=t.name)
        # a class is Hashable, but mypy does not see it for type[Any] (functools.cache's argument)
        if "topic_id" in _names(topic) and "topic_id" in _names(type(t)):  # type: ignore[arg-type]
            out.topic_id = t.topic_id
        said = {"error_message": message(t.name)} if "error_message" in _names(partition) else {}
        out.partitions = [partition(partition=p if isinstance(p, int) else p.partition, error_code=TOPIC_DENIED,
                                    **said, **defaults) for p in t.partitions]
        answers.append(out)


@cache
def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _topic_check(access: Access, op: AclOperation) -> Callable[[Any], bool]:
    return lambda t: access.topic(op, t.name)


# -- produce, fetch, offsets, metadata -----------------------------------------------------------

async def produce(rm: ReplicaManager, req: r.ProduceRequest, access: Access) -> r.ProduceResponse:
    ours, refused = _split(req, _topic_check(access, O.WRITE))
    resp = await produce_records(rm, ours)
    _refuse(resp.topics, refused, r.ProduceTopicResponse, r.ProducePartitionResponse,
            lambda n: access.topic_denied(O.WRITE, n), base_offset=-1, log_start_offset=-1)
    return resp


async def fetch(rm: ReplicaManager, req: r.FetchRequest, access: Access) -> r.FetchResponse:
    """A follower's fetch needs CLUSTER_ACTION on the cluster (all or nothing, as in Kafka); a
    consumer's READ on each topic."""
    if req.replica_id >= 0:
        allowed = access.cluster(O.CLUSTER_ACTION)
        ours, refused = _split(req, lambda t: allowed)
    else:
        ours, refused = _split(req, lambda t: access.topic(O.READ, _name(rm, t)))
    resp = await fetch_records(rm, ours)
    _refuse(resp.topics, refused, r.FetchTopicResponse, r.FetchPartitionResponse,
            lambda n: access.topic_denied(O.READ, n) if req.replica_id < 0
            else access.cluster_denied(O.CLUSTER_ACTION), high_watermark=-1, log_start_offset=-1)
    return resp


def list_offsets(rm: ReplicaManager, req: r.ListOffsetsRequest, access: Access) -> r.ListOffsetsResponse:
    ours, refused = _split(req, _topic_check(access, O.DESCRIBE))
    resp = list_offsets_of(rm, ours)
    _refuse(resp.topics, refused, r.ListOffsetsTopicResponse, r.ListOffsetsPartitionResponse,
            lambda n: access.topic_denied(O.DESCRIBE, n), timestamp=-1, offset=-1)
    return resp


async def delete_records(rm: ReplicaManager, req: r.DeleteRecordsRequest, access: Access) -> r.DeleteRecordsResponse:
    ours, refused = _split(req, _topic_check(access, O.DELETE))
    resp = await delete_records_of(rm, ours)
    _refuse(resp.topics, refused, r.DeleteRecordsTopicResponse, r.DeleteRecordsPartitionResponse,
            lambda n: access.topic_denied(O.DELETE, n), low_watermark=-1)
    return resp


def describe_producers(rm: ReplicaManager, req: r.DescribeProducersRequest,
                       access: Access) -> r.DescribeProducersResponse:
    ours, refused = _split(req, _topic_check(access, O.READ))
    resp = describe_producers_of(rm, ours)
    _refuse(resp.topics, refused, r.DescribeProducersTopicResponse, r.DescribeProducersPartitionResponse,
            lambda n: access.topic_denied(O.READ, n))
    return resp


def offsets_for_leader_epoch(rm: ReplicaManager, req: r.OffsetsForLeaderEpochRequest,
                             access: Access) -> r.OffsetsForLeaderEpochResponse:
    """CLUSTER_ACTION on the cluster (a follower), or else DESCRIBE on each topic."""
    follower = access.cluster(O.CLUSTER_ACTION, log_denial=False)
    ours, refused = _split(req, lambda t: follower or access.topic(O.DESCRIBE, _name(rm, t)))
    resp = leader_epoch_offsets(rm, ours)
    _refuse(resp.topics, refused, r.OffsetForLeaderTopicResult, r.EpochEndOffset,
            lambda n: access.topic_denied(O.DESCRIBE, n), leader_epoch=-1, end_offset=-1)
    return resp


def _name(rm: ReplicaManager, t: r.FetchTopic | r.OffsetForLeaderTopic) -> str:
    """A request topic's name, looked up by its id when it gives only that ("" if unknown)."""
    if t.name or len(t.topic_id) != 16:
        return t.name
    found = rm.image.topics_by_id.get(uuid.UUID(bytes=t.topic_id))
    return found.name if found is not None else ""


def metadata(rm: ReplicaManager, req: r.MetadataRequest, listener: str, controller_id: int,
             access: Access) -> r.MetadataResponse:
    """As Kafka's: every topic the session may DESCRIBE when none is named (the others left
    out, without a log line each); a named topic it may not is TOPIC_AUTHORIZATION_FAILED,
    whether it exists or not."""
    if not req.topics:
        resp = metadata_answer(rm.image, req, listener, controller_id)
        resp.topics = [t for t in resp.topics if access.topic(O.DESCRIBE, t.name, log_denial=False)]
        return resp
    refused = {n for n in req.topics if not access.topic(O.DESCRIBE, n)}
    if not refused:
        return metadata_answer(rm.image, req, listener, controller_id)
    allowed = [n for n in req.topics if n not in refused]
    image = rm.image
    resp = metadata_answer(image, r.MetadataRequest(topics=allowed), listener, controller_id) if allowed else \
        r.MetadataResponse(cluster_id=image.cluster_id, controller_id=controller_id, metadata_offset=image.offset,
                           brokers=live_brokers(image, listener))
    resp.topics.extend(r.TopicMetadata(name=n, error_code=TOPIC_DENIED,
                                       error_message=access.topic_denied(O.DESCRIBE, n)) for n in sorted(refused))
    return resp


async def init_producer_id(ids: ProducerIdManager, req: r.InitProducerIdRequest,
                           access: Access) -> r.InitProducerIdResponse:
    if not access.cluster(O.IDEMPOTENT_WRITE, log_denial=False) and not access.any_topic(O.WRITE):
        return r.InitProducerIdResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), producer_id=-1,
                                        producer_epoch=-1, error_message=access.cluster_denied(O.IDEMPOTENT_WRITE))
    return await ids.init_producer_id(req)


def describe_log_dirs(rm: ReplicaManager, req: r.DescribeLogDirsRequest,
                      access: Access) -> r.DescribeLogDirsResponse:
    """DESCRIBE on the cluster."""
    if not access.cluster(O.DESCRIBE):
        return r.DescribeLogDirsResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                         error_message=access.cluster_denied(O.DESCRIBE))
    return describe_log_dirs_of(rm, req)


def alter_replica_log_dirs(rm: ReplicaManager, req: r.AlterReplicaLogDirsRequest,
                           access: Access) -> r.AlterReplicaLogDirsResponse:
    """ALTER on the cluster (Kafka's): without it, every partition is refused."""
    if not access.cluster(O.ALTER):
        denied = access.cluster_denied(O.ALTER)
        topics: dict[str, r.AlterReplicaLogDirsTopicResult] = {}
        for d in req.dirs:
            for t in d.topics:
                out = topics.setdefault(t.name, r.AlterReplicaLogDirsTopicResult(name=t.name))
                out.partitions += [r.AlterReplicaLogDirsPartitionResult(
                    partition=i, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=denied)
                    for i in t.partitions]
        return r.AlterReplicaLogDirsResponse(topics=list(topics.values()))
    return alter_replica_log_dirs_of(rm, req)


def describe_broker(describe: Callable[[], D], denied: Callable[[int, str], D], access: Access) -> D:
    """DescribeBroker: DESCRIBE on the cluster (``denied`` answers with the code and message)."""
    if not access.cluster(O.DESCRIBE):
        return denied(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), access.cluster_denied(O.DESCRIBE))
    return describe()


# -- groups ------------------------------------------------------------------------------------------

class GroupAccess:
    """The group coordinator's requests, checked (Kafka's operations per group API)."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups

    async def find_coordinator(self, req: g.FindCoordinatorRequest, listener: str,
                               access: Access) -> g.FindCoordinatorResponse:
        if not access.group(O.DESCRIBE, req.key):
            return g.FindCoordinatorResponse(error_code=GROUP_DENIED, node_id=-1, port=-1,
                                             error_message=access.group_denied(O.DESCRIBE, req.key))
        return await self.groups.find_coordinator(req, listener)

    @staticmethod
    async def _member(req: Any, access: Access, answer: Callable[..., R], serve: Callable[[Any], Awaitable[R]]) -> R:
        """A member's request (join, sync, heartbeat, leave): READ on the group."""
        if not access.group(O.READ, req.group_id):
            return answer(error_code=GROUP_DENIED, error_message=access.group_denied(O.READ, req.group_id))
        return await serve(req)

    async def join_group(self, req: g.JoinGroupRequest, access: Access) -> g.JoinGroupResponse:
        return await self._member(req, access, g.JoinGroupResponse, self.groups.join_group)

    async def sync_group(self, req: g.SyncGroupRequest, access: Access) -> g.SyncGroupResponse:
        return await self._member(req, access, g.SyncGroupResponse, self.groups.sync_group)

    async def heartbeat(self, req: g.HeartbeatRequest, access: Access) -> g.HeartbeatResponse:
        return await self._member(req, access, g.HeartbeatResponse, self.groups.heartbeat)

    async def leave_group(self, req: g.LeaveGroupRequest, access: Access) -> g.LeaveGroupResponse:
        return await self._member(req, access, g.LeaveGroupResponse, self.groups.leave_group)

    async def offset_commit(self, req: g.OffsetCommitRequest, access: Access) -> g.OffsetCommitResponse:
        """READ on the group (else every partition is GROUP_AUTHORIZATION_FAILED), and READ on
        each topic."""
        return await self._commit(req, access, self.groups.offset_commit)

    async def txn_offset_commit(self, req: txn.TxnOffsetCommitRequest, access: Access) -> g.OffsetCommitResponse:
        """As OffsetCommit, and WRITE on the transactional id."""
        if not _transactional_id(access, O.WRITE, req.transactional_id):
            return _every_partition(req.offsets, TXN_DENIED, _txn_denied(access, O.WRITE, req.transactional_id))

        async def serve(offsets: g.OffsetCommitRequest) -> g.OffsetCommitResponse:
            return await self.groups.txn_offset_commit(replace(req, offsets=offsets))
        return await self._commit(req.offsets, access, serve)

    @staticmethod
    async def _commit(req: g.OffsetCommitRequest, access: Access,
                      serve: Callable[[g.OffsetCommitRequest], Awaitable[g.OffsetCommitResponse]]) -> g.OffsetCommitResponse:
        if not access.group(O.READ, req.group_id):
            return _every_partition(req, GROUP_DENIED, access.group_denied(O.READ, req.group_id))
        ours, refused = _split(req, _topic_check(access, O.READ))
        resp = await serve(ours) if ours.topics or not refused else g.OffsetCommitResponse()
        _refuse(resp.topics, refused, g.OffsetCommitTopicResponse, g.OffsetCommitPartitionResponse,
                lambda n: access.topic_denied(O.READ, n))
        return resp

    async def offset_fetch(self, req: g.OffsetFetchRequest, access: Access) -> g.OffsetFetchResponse:
        """DESCRIBE on the group; topics named need DESCRIBE each, and a fetch of every offset
        leaves out the topics the session may not DESCRIBE."""
        if not access.group(O.DESCRIBE, req.group_id):
            return g.OffsetFetchResponse(error_code=GROUP_DENIED,
                                         error_message=access.group_denied(O.DESCRIBE, req.group_id))
        if not req.topics:
            resp = await self.groups.offset_fetch(req)
            resp.topics = [t for t in resp.topics if access.topic(O.DESCRIBE, t.name, log_denial=False)]
            return resp
        ours, refused = _split(req, _topic_check(access, O.DESCRIBE))
        resp = await self.groups.offset_fetch(ours) if ours.topics else g.OffsetFetchResponse()
        _refuse(resp.topics, refused, g.OffsetFetchTopicResponse, g.OffsetFetchPartitionResponse,
                lambda n: access.topic_denied(O.DESCRIBE, n), offset=-1, leader_epoch=-1)
        return resp

    def list_groups(self, access: Access) -> g.ListGroupsResponse:
        resp = self.groups.list_groups()
        if access.cluster(O.DESCRIBE, log_denial=False):
            return resp
        resp.groups = [x for x in resp.groups if access.group(O.DESCRIBE, x.group_id)]
        return resp

    def describe_groups(self, req: g.DescribeGroupsRequest, access: Access) -> g.DescribeGroupsResponse:
        refused = {x for x in req.groups if not access.group(O.DESCRIBE, x)}
        resp = self.groups.describe_groups(g.DescribeGroupsRequest(groups=[x for x in req.groups if x not in refused]))
        resp.groups.extend(g.DescribedGroup(group_id=x, error_code=GROUP_DENIED, state="Dead",
                                            error_message=access.group_denied(O.DESCRIBE, x)) for x in sorted(refused))
        return resp

    async def offset_delete(self, req: g.OffsetDeleteRequest, access: Access) -> g.OffsetDeleteResponse:
        """DELETE on the group, and READ on each topic."""
        if not access.group(O.DELETE, req.group_id):
            return g.OffsetDeleteResponse(error_code=GROUP_DENIED,
                                          error_message=access.group_denied(O.DELETE, req.group_id))
        ours, refused = _split(req, _topic_check(access, O.READ))
        resp = await self.groups.offset_delete(ours)
        _refuse(resp.topics, refused, g.OffsetDeleteTopicResponse, g.OffsetDeletePartitionResponse,
                lambda n: access.topic_denied(O.READ, n))
        return resp

    async def delete_groups(self, req: g.DeleteGroupsRequest, access: Access) -> g.DeleteGroupsResponse:
        refused = {x for x in req.groups if not access.group(O.DELETE, x)}
        kept = g.DeleteGroupsRequest(groups=[x for x in req.groups if x not in refused])
        resp = await self.groups.delete_groups(kept)
        resp.results.extend(g.DeletedGroup(group_id=x, error_code=GROUP_DENIED,
                                           error_message=access.group_denied(O.DELETE, x)) for x in sorted(refused))
        return resp


# -- transactions ------------------------------------------------------------------------------------

def _every_partition(req: g.OffsetCommitRequest, code: int, message: str) -> g.OffsetCommitResponse:
    return g.OffsetCommitResponse(topics=[g.OffsetCommitTopicResponse(name=t.name, partitions=[
        g.OffsetCommitPartitionResponse(partition=p.partition, error_code=code, error_message=message)
        for p in t.partitions]) for t in req.topics])


def _transactional_id(access: Access, op: AclOperation, transactional_id: str) -> bool:
    return access.authorizer is None or access.authorizer.authorize(
        access.session, op, AclResourceType.TRANSACTIONAL_ID, transactional_id)


def _txn_denied(access: Access, op: AclOperation, transactional_id: str) -> str:
    return capped(f"Transactional Id authorization failed: {access.session.principal} may not {op.name} "
                  f"transactional id {transactional_id}")


class TransactionAccess:
    """The transaction coordinator's requests, checked (Kafka's operations per API)."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator

    async def find_coordinator(self, transactional_id: str, listener: str, access: Access
                               ) -> g.FindCoordinatorResponse:
        if not _transactional_id(access, O.DESCRIBE, transactional_id):
            return g.FindCoordinatorResponse(error_code=TXN_DENIED, node_id=-1, port=-1,
                                             error_message=_txn_denied(access, O.DESCRIBE, transactional_id))
        return await self.coordinator.find_coordinator(transactional_id, listener)

    async def init_producer_id(self, req: txn.InitTransactionalProducerRequest, access: Access
                               ) -> txn.InitTransactionalProducerResponse:
        if not _transactional_id(access, O.WRITE, req.transactional_id):
            return txn.InitTransactionalProducerResponse(
                error_code=TXN_DENIED, error_message=_txn_denied(access, O.WRITE, req.transactional_id))
        return await self.coordinator.init_producer_id(req)

    async def add_partitions(self, req: txn.AddPartitionsToTxnRequest, access: Access) -> txn.AddPartitionsToTxnResponse:
        if not _transactional_id(access, O.WRITE, req.transactional_id):
            return txn.AddPartitionsToTxnResponse(results=[txn.TxnPartitionResult(topic=n, partition=i, error_code=TXN_DENIED)
                                                         for n, i in req.partitions])
        refused = {n for n, _ in req.partitions if not access.topic(O.WRITE, n)}
        if refused:
            return txn.AddPartitionsToTxnResponse(results=[txn.TxnPartitionResult(
                topic=n, partition=i, error_code=TOPIC_DENIED if n in refused else int(ErrorCode.OPERATION_NOT_ATTEMPTED))
                for n, i in req.partitions])
        return await self.coordinator.add_partitions(req)

    async def add_offsets(self, req: txn.AddOffsetsToTxnRequest, access: Access) -> txn.AddOffsetsToTxnResponse:
        """WRITE on the transactional id and READ on the group."""
        if not _transactional_id(access, O.WRITE, req.transactional_id):
            return txn.AddOffsetsToTxnResponse(error_code=TXN_DENIED,
                                             error_message=_txn_denied(access, O.WRITE, req.transactional_id))
        if not access.group(O.READ, req.group_id):
            return txn.AddOffsetsToTxnResponse(error_code=GROUP_DENIED,
                                             error_message=access.group_denied(O.READ, req.group_id))
        return await self.coordinator.add_offsets(req)

    def list_transactions(self, req: txn.ListTransactionsRequest, access: Access) -> txn.ListTransactionsResponse:
        """Only the transactional ids the session may DESCRIBE."""
        resp = self.coordinator.list_transactions(req)
        resp.transactions = [x for x in resp.transactions
                             if _transactional_id(access, O.DESCRIBE, x.transactional_id)]
        return resp

    def describe_transactions(self, ids: list[str], access: Access) -> list[txn.DescribedTransaction]:
        return [self.coordinator.describe_transaction(i) if _transactional_id(access, O.DESCRIBE, i)
                else txn.DescribedTransaction(transactional_id=i, error_code=TXN_DENIED) for i in ids]

    async def end_txn(self, req: txn.EndTxnRequest, access: Access) -> txn.EndTxnResponse:
        if not _transactional_id(access, O.WRITE, req.transactional_id):
            return txn.EndTxnResponse(error_code=TXN_DENIED, error_message=_txn_denied(access, O.WRITE, req.transactional_id))
        return await self.coordinator.end_txn(req)


async def write_txn_markers(rm: ReplicaManager, req: txn.WriteTxnMarkersRequest, access: Access,
                            groups: GroupCoordinator) -> txn.WriteTxnMarkersResponse | None:
    """None: refused (CLUSTER_ACTION on the cluster, which only brokers have)."""
    if not access.cluster(O.CLUSTER_ACTION):
        return None
    return await write_markers(rm, req, groups.marker_written)
