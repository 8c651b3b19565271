"""What each broker request needs (Kafka's KafkaApis with its AuthHelper), in one place for
both front ends: the gRPC service and the Kafka listener call these instead of the broker's
core functions, with the request's ``Access``.

Kafka's operations: Produce WRITE on each topic; Fetch READ on each topic, or CLUSTER_ACTION
on the cluster for a follower; ListOffsets DESCRIBE; OffsetsForLeaderEpoch CLUSTER_ACTION or
else DESCRIBE; Metadata DESCRIBE (a listing leaves the other topics out, a named topic is
refused); InitProducerId IDEMPOTENT_WRITE on the cluster or WRITE on some topic; the group
APIs READ (joining, syncing, heartbeats, leaving, committing), DESCRIBE (finding the
coordinator, describing, fetching offsets) or DELETE on the group, and for offsets READ or
DESCRIBE on each topic; ListGroups DESCRIBE on the cluster, or else only the groups the
session may DESCRIBE; DescribeBroker DESCRIBE on the cluster. Refused topics are answered
TOPIC_AUTHORIZATION_FAILED per partition while the rest of the request goes ahead; refused
groups GROUP_AUTHORIZATION_FAILED; cluster refusals CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from clients.errors import ErrorCode
from metadata.acls import AclOperation
from metadata.authorizer import Access
from protos import broker_pb2 as pb

from .cluster_metadata import live_brokers, metadata_answer
from .fetch import fetch as fetch_records
from .group_coordinator import GroupCoordinator
from .offsets import list_offsets as list_offsets_of, offsets_for_leader_epoch as leader_epoch_offsets
from .produce import produce as produce_records
from .producer_ids import ProducerIdManager
from .replica_manager import ReplicaManager

O = AclOperation
M = TypeVar("M")
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


def _split(req: M, allowed: Callable[[Any], bool]) -> tuple[M, list[Any]]:
    """The request with only the topics ``allowed`` lets through, and the others; the request
    itself (no copy of its records) when none is refused."""
    verdicts = [(t, allowed(t)) for t in req.topics]  # type: ignore[attr-defined]
    refused = [t for t, ok in verdicts if not ok]
    if not refused:
        return req, []
    kept = type(req)()
    kept.CopyFrom(req)  # type: ignore[attr-defined]
    del kept.topics[:]  # type: ignore[attr-defined]
    kept.topics.extend(t for t, ok in verdicts if ok)  # type: ignore[attr-defined]
    return kept, refused


def _refuse(resp_topics: Any, refused: list[Any], message: Callable[[str], str], **defaults: int) -> None:
    """Answer every partition of the refused topics TOPIC_AUTHORIZATION_FAILED."""
    for t in refused:
        out = resp_topics.add(name=t.name)
        if "topic_id" in out.DESCRIPTOR.fields_by_name and "topic_id" in t.DESCRIPTOR.fields_by_name:
            out.topic_id = t.topic_id
        for p in t.partitions:
            out.partitions.add(partition=p if isinstance(p, int) else p.partition, error_code=TOPIC_DENIED,
                               error_message=message(t.name), **defaults)


def _topic_check(access: Access, op: AclOperation) -> Callable[[Any], bool]:
    return lambda t: access.topic(op, t.name)


# -- produce, fetch, offsets, metadata -----------------------------------------------------------

async def produce(rm: ReplicaManager, req: pb.ProduceRequest, access: Access) -> pb.ProduceResponse:
    ours, refused = _split(req, _topic_check(access, O.WRITE))
    resp = await produce_records(rm, ours)
    _refuse(resp.topics, refused, lambda n: access.topic_denied(O.WRITE, n), base_offset=-1, log_start_offset=-1)
    return resp


async def fetch(rm: ReplicaManager, req: pb.FetchRequest, access: Access) -> pb.FetchResponse:
    """A follower's fetch needs CLUSTER_ACTION on the cluster (all or nothing, as in Kafka); a
    consumer's READ on each topic."""
    if req.replica_id >= 0:
        allowed = access.cluster(O.CLUSTER_ACTION)
        ours, refused = _split(req, lambda t: allowed)
    else:
        ours, refused = _split(req, lambda t: access.topic(O.READ, _name(rm, t)))
    resp = await fetch_records(rm, ours)
    _refuse(resp.topics, refused, lambda n: access.topic_denied(O.READ, n) if req.replica_id < 0
            else access.cluster_denied(O.CLUSTER_ACTION), high_watermark=-1, log_start_offset=-1)
    return resp


def list_offsets(rm: ReplicaManager, req: pb.ListOffsetsRequest, access: Access) -> pb.ListOffsetsResponse:
    ours, refused = _split(req, _topic_check(access, O.DESCRIBE))
    resp = list_offsets_of(rm, ours)
    _refuse(resp.topics, refused, lambda n: access.topic_denied(O.DESCRIBE, n), timestamp=-1, offset=-1)
    return resp


def offsets_for_leader_epoch(rm: ReplicaManager, req: pb.OffsetsForLeaderEpochRequest,
                             access: Access) -> pb.OffsetsForLeaderEpochResponse:
    """CLUSTER_ACTION on the cluster (a follower), or else DESCRIBE on each topic."""
    follower = access.cluster(O.CLUSTER_ACTION, log_denial=False)
    ours, refused = _split(req, lambda t: follower or access.topic(O.DESCRIBE, _name(rm, t)))
    resp = leader_epoch_offsets(rm, ours)
    _refuse(resp.topics, refused, lambda n: access.topic_denied(O.DESCRIBE, n), leader_epoch=-1, end_offset=-1)
    return resp


def _name(rm: ReplicaManager, t: Any) -> str:
    """A request topic's name, looked up by its id when it gives only that ("" if unknown)."""
    if t.name or not getattr(t, "topic_id", b"") or len(t.topic_id) != 16:
        return t.name
    found = rm.image.topics_by_id.get(uuid.UUID(bytes=t.topic_id))
    return found.name if found is not None else ""


def metadata(rm: ReplicaManager, req: pb.MetadataRequest, listener: str, controller_id: int,
             access: Access) -> pb.MetadataResponse:
    """As Kafka's: every topic the session may DESCRIBE when none is named (the others left
    out, without a log line each); a named topic it may not is TOPIC_AUTHORIZATION_FAILED,
    whether it exists or not."""
    if not req.topics:
        resp = metadata_answer(rm.image, req, listener, controller_id)
        kept = [t for t in resp.topics if access.topic(O.DESCRIBE, t.name, log_denial=False)]
        if len(kept) < len(resp.topics):
            del resp.topics[:]
            resp.topics.extend(kept)
        return resp
    refused = {n for n in req.topics if not access.topic(O.DESCRIBE, n)}
    if not refused:
        return metadata_answer(rm.image, req, listener, controller_id)
    allowed = [n for n in req.topics if n not in refused]
    image = rm.image
    resp = metadata_answer(image, pb.MetadataRequest(topics=allowed), listener, controller_id) if allowed else \
        pb.MetadataResponse(cluster_id=image.cluster_id, controller_id=controller_id, metadata_offset=image.offset,
                            brokers=live_brokers(image, listener))
    resp.topics.extend(pb.TopicMetadata(name=n, error_code=TOPIC_DENIED, error_message=access.topic_denied(O.DESCRIBE, n))
                       for n in sorted(refused))
    return resp


async def init_producer_id(ids: ProducerIdManager, req: pb.InitProducerIdRequest,
                           access: Access) -> pb.InitProducerIdResponse:
    if not access.cluster(O.IDEMPOTENT_WRITE, log_denial=False) and not access.any_topic(O.WRITE):
        return pb.InitProducerIdResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), producer_id=-1,
                                         producer_epoch=-1, error_message=access.cluster_denied(O.IDEMPOTENT_WRITE))
    return await ids.init_producer_id(req)


def describe_broker(describe: Callable[[], pb.DescribeBrokerResponse], access: Access) -> pb.DescribeBrokerResponse:
    if not access.cluster(O.DESCRIBE):
        return pb.DescribeBrokerResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                         error_message=access.cluster_denied(O.DESCRIBE))
    return describe()


# -- groups ------------------------------------------------------------------------------------------

class GroupAccess:
    """The group coordinator's requests, checked (Kafka's operations per group API)."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups

    async def find_coordinator(self, req: pb.FindCoordinatorRequest, listener: str,
                               access: Access) -> pb.FindCoordinatorResponse:
        if not access.group(O.DESCRIBE, req.key):
            return pb.FindCoordinatorResponse(error_code=GROUP_DENIED, node_id=-1, port=-1,
                                              error_message=access.group_denied(O.DESCRIBE, req.key))
        return await self.groups.find_coordinator(req, listener)

    @staticmethod
    async def _member(req: Any, access: Access, answer: type, serve: Callable[[Any], Awaitable[Any]]) -> Any:
        """A member's request (join, sync, heartbeat, leave): READ on the group."""
        if not access.group(O.READ, req.group_id):
            return answer(error_code=GROUP_DENIED, error_message=access.group_denied(O.READ, req.group_id))
        return await serve(req)

    async def join_group(self, req: pb.JoinGroupRequest, access: Access) -> pb.JoinGroupResponse:
        return await self._member(req, access, pb.JoinGroupResponse, self.groups.join_group)

    async def sync_group(self, req: pb.SyncGroupRequest, access: Access) -> pb.SyncGroupResponse:
        return await self._member(req, access, pb.SyncGroupResponse, self.groups.sync_group)

    async def heartbeat(self, req: pb.HeartbeatRequest, access: Access) -> pb.HeartbeatResponse:
        return await self._member(req, access, pb.HeartbeatResponse, self.groups.heartbeat)

    async def leave_group(self, req: pb.LeaveGroupRequest, access: Access) -> pb.LeaveGroupResponse:
        return await self._member(req, access, pb.LeaveGroupResponse, self.groups.leave_group)

    async def offset_commit(self, req: pb.OffsetCommitRequest, access: Access) -> pb.OffsetCommitResponse:
        """READ on the group (else every partition is GROUP_AUTHORIZATION_FAILED), and READ on
        each topic."""
        if not access.group(O.READ, req.group_id):
            resp = pb.OffsetCommitResponse()
            message = access.group_denied(O.READ, req.group_id)
            for t in req.topics:
                resp.topics.add(name=t.name, partitions=[pb.OffsetCommitPartitionResponse(
                    partition=p.partition, error_code=GROUP_DENIED, error_message=message) for p in t.partitions])
            return resp
        ours, refused = _split(req, _topic_check(access, O.READ))
        resp = await self.groups.offset_commit(ours) if ours.topics or not refused else pb.OffsetCommitResponse()
        _refuse(resp.topics, refused, lambda n: access.topic_denied(O.READ, n))
        return resp

    async def offset_fetch(self, req: pb.OffsetFetchRequest, access: Access) -> pb.OffsetFetchResponse:
        """DESCRIBE on the group; topics named need DESCRIBE each, and a fetch of every offset
        leaves out the topics the session may not DESCRIBE."""
        if not access.group(O.DESCRIBE, req.group_id):
            return pb.OffsetFetchResponse(error_code=GROUP_DENIED,
                                          error_message=access.group_denied(O.DESCRIBE, req.group_id))
        if not req.topics:
            resp = await self.groups.offset_fetch(req)
            kept = [t for t in resp.topics if access.topic(O.DESCRIBE, t.name, log_denial=False)]
            if len(kept) < len(resp.topics):
                del resp.topics[:]
                resp.topics.extend(kept)
            return resp
        ours, refused = _split(req, _topic_check(access, O.DESCRIBE))
        resp = await self.groups.offset_fetch(ours) if ours.topics else pb.OffsetFetchResponse()
        _refuse(resp.topics, refused, lambda n: access.topic_denied(O.DESCRIBE, n), offset=-1, leader_epoch=-1)
        return resp

    def list_groups(self, access: Access) -> pb.ListGroupsResponse:
        resp = self.groups.list_groups()
        if access.cluster(O.DESCRIBE, log_denial=False):
            return resp
        kept = [g for g in resp.groups if access.group(O.DESCRIBE, g.group_id)]
        del resp.groups[:]
        resp.groups.extend(kept)
        return resp

    def describe_groups(self, req: pb.DescribeGroupsRequest, access: Access) -> pb.DescribeGroupsResponse:
        refused = {g for g in req.groups if not access.group(O.DESCRIBE, g)}
        resp = self.groups.describe_groups(pb.DescribeGroupsRequest(groups=[g for g in req.groups if g not in refused]))
        resp.groups.extend(pb.DescribedGroup(group_id=g, error_code=GROUP_DENIED, state="Dead",
                                             error_message=access.group_denied(O.DESCRIBE, g)) for g in sorted(refused))
        return resp

    async def delete_groups(self, req: pb.DeleteGroupsRequest, access: Access) -> pb.DeleteGroupsResponse:
        refused = {g for g in req.groups if not access.group(O.DELETE, g)}
        resp = await self.groups.delete_groups(pb.DeleteGroupsRequest(groups=[g for g in req.groups if g not in refused]))
        resp.results.extend(pb.DeletedGroup(group_id=g, error_code=GROUP_DENIED,
                                            error_message=access.group_denied(O.DELETE, g)) for g in sorted(refused))
        return resp
