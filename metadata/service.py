"""The controller's gRPC service (``protos/controller.proto``).

Every answer carries a ``Status``: NOT_CONTROLLER (with the active controller's id and
endpoint) on standbys, REQUEST_TIMED_OUT when a write's outcome is unknown; per-item results
carry Kafka's error codes as Kafka answers them. Offsets are Raft log indexes (the first entry
is offset 1); high watermarks and log end offsets are exclusive, as in Kafka.

With an authorizer (``metadata.authorizer``), every request is checked with the operation
Kafka's ControllerApis checks: cluster-wide ones answer CLUSTER_AUTHORIZATION_FAILED in the
status, per-topic ones TOPIC_AUTHORIZATION_FAILED for the topics refused while the others go
ahead. A request a broker forwards for a Kafka client carries the client's principal
(Kafka's EnvelopeRequest), honoured only from a caller allowed CLUSTER_ACTION.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from typing import Any, Awaitable, Callable, TypeVar

import grpc

from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from raft.errors import LogCompacted, RaftError
from raft.messages import EntryType

from . import quorum
from .acls import AclBindingFilter, AclOperation, StandardAcl, acl_filter, create_acls, delete_acls, matching, new_acl
from .authorizer import Access, StandardAuthorizer
from .brokers import Heartbeat
from .controller import NotController, QuorumController
from .errors import ApiError, ErrorCode, capped
from .image import ConfigResource, MetadataImage, ResourceType, SecurityProtocol
from .principal import FORWARDED_HOST, FORWARDED_PRINCIPAL, PrincipalMapper, Session, caller
from .partitions import PREFERRED, UNCLEAN, alter_partition, elect_leaders
from .reassignments import Reassignment, alter, ongoing
from .records import endpoint, producer_ids
from .topics import (MAX_RECORDS_PER_USER_OP, ConfigOp, ItemResult, NewTopic, alter_configs,
                     check_request_size, create_partitions, create_topics, delete_topics, describe_configs)

PRODUCER_ID_BLOCK = 1000
MAX_FETCH_BYTES = 8 << 20
O = AclOperation


def _status(code: ErrorCode = ErrorCode.NONE, message: str = "", controller_id: int = -1,
            endpoint_: str = "") -> pb.Status:
    return pb.Status(error_code=int(code), error_message=capped(message), controller_id=controller_id,
                     controller_endpoint=endpoint_)


def _uuid(raw: bytes) -> uuid.UUID | None:
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, controller: QuorumController, authorizer: StandardAuthorizer | None = None,
                 mapper: PrincipalMapper | None = None, listener_name: str = "CONTROLLER") -> None:
        """``authorizer`` None: every request is allowed (no ``authorizer.class.name``)."""
        self.c = controller
        self.authorizer = authorizer
        self.mapper = mapper or PrincipalMapper()
        self.listener_name = listener_name  # controller.listener.names: how voters' endpoints are named

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
            raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"Cluster authorization failed: "
                           f"{session.principal} may not forward requests for other principals (that takes "
                           "CLUSTER_ACTION on the cluster, granted by an ACL or super.users)")
        host = sent.get(FORWARDED_HOST, b"")
        return Access(self.authorizer, Session(_text(forwarded), _text(host)))

    async def _answer(self, response_type: Any, context: grpc.aio.ServicerContext,
                      work: Callable[[Access], Awaitable[Any]], needs: AclOperation | None = None) -> Any:
        """Run ``work`` for the request's session and map controller-level failures onto
        ``response.status``; ``needs``: the operation on the cluster the request needs."""
        try:
            access = await self._access(context)
            if needs is not None and not access.cluster(needs):
                raise access.cluster_refusal(needs)
            return await work(access)
        except NotController as e:
            return response_type(status=_status(ErrorCode.NOT_CONTROLLER, str(e), e.controller_id or -1,
                                                e.endpoint or ""))
        except ApiError as e:
            return response_type(status=_status(e.code, e.message))
        except RaftError as e:
            return response_type(status=_status(ErrorCode.REQUEST_TIMED_OUT, str(e)))

    # ---------------------------------------------------------------------------- topics

    async def CreateTopics(self, request: pb.CreateTopicsRequest, context) -> pb.CreateTopicsResponse:
        cfg = self.c.config

        async def work(access: Access) -> pb.CreateTopicsResponse:
            check_request_size(len(request.topics), "topics")  # first: it bounds the sums below
            check_request_size(sum(len(t.assignments) or (cfg.default_partitions if t.num_partitions == -1
                                                          else max(t.num_partitions, 0)) for t in request.topics),
                               "partitions")
            check_request_size(sum(len(t.configs) for t in request.topics), "configs")
            # Kafka's rule: CREATE on the cluster, or else on each topic.
            anywhere = access.cluster(O.CREATE, log_denial=False)
            refused = {t.name for t in request.topics if not anywhere and not access.topic(O.CREATE, t.name)}
            wanted = [t for t in request.topics if t.name not in refused]
            # What build needs from the live state machine, taken here on the event loop:
            # build runs in a thread (QuorumController.write) and reads only its arguments.
            image, stats = self.c.sm.image, self.c.sm.stats
            load, start, folded = stats.load(), self.c.next_placement_start(), frozenset(stats.folded_names)

            def build(view: MetadataImage) -> tuple[list, list[ItemResult]]:
                topics = [NewTopic(t.name, t.num_partitions, t.replication_factor,
                                   {a.partition: list(a.replicas) for a in t.assignments}, dict(t.configs))
                          for t in wanted]
                return create_topics(view, topics, default_partitions=cfg.default_partitions,
                                     default_replication=cfg.default_replication_factor, load=load, start=start,
                                     collisions=folded if view is image else None)
            results = await self.c.write(build, validate_only=request.validate_only, in_thread=True)
            return pb.CreateTopicsResponse(status=_status(), topics=[
                pb.CreateTopicResult(name=r.name, topic_id=r.topic_id.bytes if r.topic_id else b"",
                                     error_code=int(r.error.code) if r.error else 0,
                                     error_message=r.error.message if r.error else "",
                                     num_partitions=r.partitions, replication_factor=r.replication_factor)
                for r in results] + [pb.CreateTopicResult(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                          error_message=access.topic_denied(O.CREATE, name))
                                     for name in sorted(refused)])
        return await self._answer(pb.CreateTopicsResponse, context, work)

    @staticmethod
    def _topic_results(results: list[ItemResult]) -> list[pb.TopicResult]:
        return [pb.TopicResult(name=r.name, topic_id=r.topic_id.bytes if r.topic_id else b"",
                               error_code=int(r.error.code) if r.error else 0,
                               error_message=r.error.message if r.error else "") for r in results]

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context) -> pb.DeleteTopicsResponse:
        ids = [_uuid(i) for i in request.topic_ids]

        async def work(access: Access) -> pb.DeleteTopicsResponse:
            if None in ids:
                raise ApiError(ErrorCode.INVALID_REQUEST, "topic ids are 16-byte UUIDs")
            check_request_size(len(request.names) + len(ids), "topics")
            known = self.c.sm.image.topics_by_id
            refused = [ItemResult(name, error=access.topic_refusal(O.DELETE, name))
                       for name in request.names if not access.topic(O.DELETE, name)]
            refused += [ItemResult(known[i].name, i, access.topic_refusal(O.DELETE, known[i].name))
                        for i in ids if i in known and not access.topic(O.DELETE, known[i].name)]
            gone = {r.name for r in refused}
            names = [n for n in request.names if n not in gone]
            wanted = [i for i in ids if i not in known or known[i].name not in gone]
            results = await self.c.write(lambda view: delete_topics(view, names, wanted), in_thread=True)
            return pb.DeleteTopicsResponse(status=_status(), topics=self._topic_results(results + refused))
        return await self._answer(pb.DeleteTopicsResponse, context, work)

    async def CreatePartitions(self, request: pb.CreatePartitionsRequest, context) -> pb.CreatePartitionsResponse:
        async def work(access: Access) -> pb.CreatePartitionsResponse:
            check_request_size(len(request.topics), "topics")
            load, start = self.c.sm.stats.load(), self.c.next_placement_start()
            refused = {t.name for t in request.topics if not access.topic(O.ALTER, t.name)}
            wanted = [t for t in request.topics if t.name not in refused]

            def build(view: MetadataImage) -> tuple[list, list[ItemResult]]:
                check_request_size(sum(max(0, t.count - len(view.topics_by_name[t.name].partitions))
                                       for t in wanted if t.name in view.topics_by_name), "new partitions")
                records, results = [], []
                for k, t in enumerate(wanted):
                    recs, res = create_partitions(view, t.name, t.count, [list(a.replicas) for a in t.assignments],
                                                  load=load, start=start + k)
                    records += recs
                    results.append(res)
                return records, results
            results = await self.c.write(build, validate_only=request.validate_only, in_thread=True)
            results += [ItemResult(name, error=access.topic_refusal(O.ALTER, name)) for name in sorted(refused)]
            return pb.CreatePartitionsResponse(status=_status(), topics=self._topic_results(results))
        return await self._answer(pb.CreatePartitionsResponse, context, work)

    async def ElectLeaders(self, request: pb.ElectLeadersRequest, context) -> pb.ElectLeadersResponse:
        async def work(access: Access) -> pb.ElectLeadersResponse:
            wanted = [(t.name, p) for t in request.topics for p in t.partitions] if request.topics else None
            check_request_size(len(wanted or ()), "partitions")
            kind = UNCLEAN if request.election_type == pb.ElectLeadersRequest.UNCLEAN else PREFERRED
            results = await self.c.write(lambda view: elect_leaders(view, kind, wanted), in_thread=True)
            return pb.ElectLeadersResponse(status=_status(), results=[
                pb.ElectionResult(topic=r.topic, partition=r.partition, error_code=int(r.code),
                                  error_message=r.message) for r in results])
        return await self._answer(pb.ElectLeadersResponse, context, work, needs=O.ALTER)

    async def AlterPartitionReassignments(self, request: pb.AlterPartitionReassignmentsRequest,
                                          context) -> pb.AlterPartitionReassignmentsResponse:
        async def work(access: Access) -> pb.AlterPartitionReassignmentsResponse:
            check_request_size(len(request.reassignments), "reassignments")
            plan = [Reassignment(r.topic, r.partition, tuple(r.replicas.ids) if r.HasField("replicas") else None)
                    for r in request.reassignments]
            outcomes = await self.c.write(lambda view: alter(view, plan), in_thread=True)
            return pb.AlterPartitionReassignmentsResponse(status=_status(), results=[
                pb.ReassignmentResult(topic=o.topic, partition=o.partition, error_code=int(o.code),
                                      error_message=o.message) for o in outcomes])
        return await self._answer(pb.AlterPartitionReassignmentsResponse, context, work, needs=O.ALTER)

    async def ListPartitionReassignments(self, request: pb.ListPartitionReassignmentsRequest,
                                         context) -> pb.ListPartitionReassignmentsResponse:
        async def work(access: Access) -> pb.ListPartitionReassignmentsResponse:
            topics = {t.name: list(t.partitions) for t in request.topics} if request.topics else None
            image = await self.c.read_image()
            found = await self.c.in_worker(ongoing, image, topics)
            return pb.ListPartitionReassignmentsResponse(status=_status(), reassignments=[
                pb.OngoingReassignment(topic=name, partition=pid, replicas=p.replicas, adding_replicas=p.adding,
                                       removing_replicas=p.removing, isr=p.isr, leader=p.leader)
                for name, pid, p in found])
        return await self._answer(pb.ListPartitionReassignmentsResponse, context, work, needs=O.DESCRIBE)

    async def UnregisterBroker(self, request: pb.UnregisterBrokerRequest, context) -> pb.UnregisterBrokerResponse:
        async def work(access: Access) -> pb.UnregisterBrokerResponse:
            await self.c.write(lambda view: (self.c.brokers.unregister(view, request.broker_id), None))
            return pb.UnregisterBrokerResponse(status=_status())
        return await self._answer(pb.UnregisterBrokerResponse, context, work, needs=O.ALTER)

    async def DescribeTopics(self, request: pb.DescribeTopicsRequest, context) -> pb.DescribeTopicsResponse:
        async def work(access: Access) -> pb.DescribeTopicsResponse:
            image = await self.c.read_image()  # immutable: described in a thread, as it scales with the cluster
            return await self.c.in_worker(self._describe_topics, image, list(request.names), access)
        return await self._answer(pb.DescribeTopicsResponse, context, work)

    @staticmethod
    def _describe_topics(image: MetadataImage, names: list[str], access: Access) -> pb.DescribeTopicsResponse:
        """As Kafka's Metadata: a listing leaves out the topics the session may not DESCRIBE; a
        topic named is answered TOPIC_AUTHORIZATION_FAILED, whether it exists or not."""
        named = bool(names)
        names = names or [n for n in sorted(image.topics_by_name) if access.topic(O.DESCRIBE, n, log_denial=False)]
        live = {b.id for b in image.brokers.values() if not b.fenced}
        out = []
        for name in names:
            if named and not access.topic(O.DESCRIBE, name):
                out.append(pb.TopicDescription(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                               error_message=access.topic_denied(O.DESCRIBE, name)))
                continue
            t = image.topics_by_name.get(name)
            if t is None:
                out.append(pb.TopicDescription(name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                               error_message=capped(f"This server does not host this topic: {name}")))
                continue
            configs = dict(image.config(ConfigResource(ResourceType.TOPIC, name)))
            out.append(pb.TopicDescription(
                name=name, topic_id=t.id.bytes, configs=configs,
                partitions=[pb.PartitionInfo(partition=pid, leader=p.leader, leader_epoch=p.leader_epoch,
                                             partition_epoch=p.partition_epoch, replicas=p.replicas,
                                             isr=p.isr, offline_replicas=[r for r in p.replicas if r not in live],
                                             adding_replicas=p.adding, removing_replicas=p.removing)
                            for pid, p in sorted(t.partitions.items())]))
        return pb.DescribeTopicsResponse(status=_status(), topics=out, metadata_offset=image.offset)

    # ---------------------------------------------------------------------------- cluster

    async def DescribeCluster(self, request: pb.DescribeClusterRequest, context) -> pb.DescribeClusterResponse:
        async def work(access: Access) -> pb.DescribeClusterResponse:
            image = await self.c.read_image()
            return pb.DescribeClusterResponse(
                status=_status(), cluster_id=image.cluster_id, controller_id=self.c.node.id,
                metadata_offset=image.offset, features=dict(image.features),
                brokers=[pb.BrokerInfo(id=b.id, rack=b.rack or "", fenced=b.fenced,
                                       in_controlled_shutdown=b.in_controlled_shutdown, epoch=b.epoch,
                                       incarnation_id=b.incarnation_id.bytes,
                                       endpoints=[pb.Endpoint(name=e.name, host=e.host, port=e.port,
                                                              security_protocol=e.security_protocol.name)
                                                  for e in b.endpoints])
                         for b in sorted(image.brokers.values(), key=lambda b: b.id)])
        return await self._answer(pb.DescribeClusterResponse, context, work, needs=O.DESCRIBE)

    # ---------------------------------------------------------------------------- configs

    async def IncrementalAlterConfigs(self, request: pb.IncrementalAlterConfigsRequest,
                                      context) -> pb.IncrementalAlterConfigsResponse:
        refused: dict[int, ApiError] = {}

        def build(view: MetadataImage) -> tuple[list, list[pb.ResourceResult]]:
            records, results = [], []
            for k, r in enumerate(request.resources):
                res = pb.ResourceResult(resource_type=r.resource_type, resource_name=r.resource_name)
                try:
                    if k in refused:
                        raise refused[k]
                    ops = [ConfigOp(c.name, c.op == pb.AlterableConfig.DELETE, c.value) for c in r.configs]
                    records += alter_configs(view, _resource_type(r.resource_type), r.resource_name, ops)
                except ApiError as e:
                    res.error_code, res.error_message = int(e.code), e.message
                results.append(res)
            return records, results

        async def work(access: Access) -> pb.IncrementalAlterConfigsResponse:
            check_request_size(sum(len(r.configs) or 1 for r in request.resources), "config changes")
            for k, r in enumerate(request.resources):
                error = _config_refusal(access, O.ALTER_CONFIGS, r.resource_type, r.resource_name)
                if error is not None:
                    refused[k] = error
            results = await self.c.write(build, validate_only=request.validate_only, in_thread=True)
            return pb.IncrementalAlterConfigsResponse(status=_status(), resources=results)
        return await self._answer(pb.IncrementalAlterConfigsResponse, context, work)

    async def DescribeConfigs(self, request: pb.DescribeConfigsRequest, context) -> pb.DescribeConfigsResponse:
        async def work(access: Access) -> pb.DescribeConfigsResponse:
            image = await self.c.read_image()
            out = []
            for r in request.resources:
                d = pb.DescribedResource(resource_type=r.resource_type, resource_name=r.resource_name)
                try:
                    error = _config_refusal(access, O.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
                    if error is not None:
                        raise error
                    kind = _resource_type(r.resource_type)
                    d.configs.extend(pb.ConfigEntry(name=k, value=v, is_default=dflt)
                                     for k, v, dflt in describe_configs(image, kind, r.resource_name))
                except ApiError as e:
                    d.error_code, d.error_message = int(e.code), e.message
                out.append(d)
            return pb.DescribeConfigsResponse(status=_status(), resources=out)
        return await self._answer(pb.DescribeConfigsResponse, context, work)

    # ---------------------------------------------------------------------------- producers

    async def AllocateProducerIds(self, request: pb.AllocateProducerIdsRequest,
                                  context) -> pb.AllocateProducerIdsResponse:
        def build(view: MetadataImage) -> tuple[list, int]:
            self.c.brokers.registration(view, request.broker_id, request.broker_epoch)
            start = view.next_producer_id
            return [producer_ids(request.broker_id, request.broker_epoch, start + PRODUCER_ID_BLOCK)], start

        async def work(access: Access) -> pb.AllocateProducerIdsResponse:
            try:
                start = await self.c.write(build)
            except ApiError as e:
                if e.code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                    return pb.AllocateProducerIdsResponse(status=_status(), error_code=int(e.code))
                raise
            return pb.AllocateProducerIdsResponse(status=_status(), producer_id_start=start,
                                                  producer_id_len=PRODUCER_ID_BLOCK)
        return await self._answer(pb.AllocateProducerIdsResponse, context, work, needs=O.CLUSTER_ACTION)

    # ---------------------------------------------------------------------------- brokers

    async def BrokerRegistration(self, request: pb.BrokerRegistrationRequest,
                                 context) -> pb.BrokerRegistrationResponse:
        inc = _uuid(request.incarnation_id)

        def build(view: MetadataImage) -> tuple[list, int]:
            if inc is None:
                raise ApiError(ErrorCode.INVALID_REQUEST, "the incarnation id is a 16-byte UUID")
            eps = [endpoint(e.name, e.host, e.port, _protocol(e.security_protocol)) for e in request.listeners]
            return self.c.brokers.register(view, request.broker_id, inc, request.cluster_id, eps,
                                           request.rack or None, self.c.node.next_index)

        async def work(access: Access) -> pb.BrokerRegistrationResponse:
            try:
                epoch = await self.c.write(build)
            except ApiError as e:
                if e.code == ErrorCode.REQUEST_TIMED_OUT:
                    raise
                return pb.BrokerRegistrationResponse(status=_status(), error_code=int(e.code), error_message=e.message)
            return pb.BrokerRegistrationResponse(status=_status(), broker_epoch=epoch)
        return await self._answer(pb.BrokerRegistrationResponse, context, work, needs=O.CLUSTER_ACTION)

    async def BrokerHeartbeat(self, request: pb.BrokerHeartbeatRequest, context) -> pb.BrokerHeartbeatResponse:
        hb = Heartbeat(request.broker_id, request.broker_epoch, request.current_metadata_offset,
                       request.want_fence, request.want_shut_down)

        async def work(access: Access) -> pb.BrokerHeartbeatResponse:
            try:
                answer = await self.c.write(lambda view: self.c.brokers.heartbeat(view, hb))
            except ApiError as e:
                if e.code == ErrorCode.REQUEST_TIMED_OUT:
                    raise
                return pb.BrokerHeartbeatResponse(status=_status(), error_code=int(e.code), error_message=e.message)
            return pb.BrokerHeartbeatResponse(status=_status(), is_caught_up=answer.is_caught_up,
                                              is_fenced=answer.is_fenced, should_shut_down=answer.should_shut_down)
        return await self._answer(pb.BrokerHeartbeatResponse, context, work, needs=O.CLUSTER_ACTION)

    async def AlterPartition(self, request: pb.AlterPartitionRequest, context) -> pb.AlterPartitionResponse:
        tid = _uuid(request.topic_id)

        def build(view: MetadataImage) -> tuple[list, None]:
            self.c.brokers.registration(view, request.broker_id, request.broker_epoch)
            if tid is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the topic id is a 16-byte UUID")
            rec, _ = alter_partition(view, request.broker_id, tid, request.partition, request.leader_epoch,
                                     request.partition_epoch, list(request.new_isr))
            return ([rec] if rec is not None else []), None

        async def work(access: Access) -> pb.AlterPartitionResponse:
            try:
                await self.c.write(build)
            except ApiError as e:
                if e.code == ErrorCode.REQUEST_TIMED_OUT:
                    raise
                return pb.AlterPartitionResponse(status=_status(), error_code=int(e.code), error_message=e.message)
            p = self.c.sm.image.partition(tid, request.partition)
            if p is None:  # deleted meanwhile
                return pb.AlterPartitionResponse(status=_status(), error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            return pb.AlterPartitionResponse(status=_status(), leader=p.leader, leader_epoch=p.leader_epoch,
                                             partition_epoch=p.partition_epoch, isr=p.isr)
        return await self._answer(pb.AlterPartitionResponse, context, work, needs=O.CLUSTER_ACTION)

    # ---------------------------------------------------------------------------- metadata log

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context) -> pb.FetchMetadataResponse:
        async def work(access: Access) -> pb.FetchMetadataResponse:
            await self.c.ensure_active()
            node = self.c.node
            offset = max(1, request.offset)
            if request.max_wait_ms > 0 and offset > node.applied:
                try:
                    await node.wait_applied(offset, timeout=min(request.max_wait_ms, 30_000) / 1000)
                except asyncio.TimeoutError:
                    pass
            resp = pb.FetchMetadataResponse(status=_status(), high_watermark=node.commit_index + 1,
                                            log_start_offset=node.log_start,
                                            snapshot_offset=node.latest_snapshot.index,
                                            snapshot_term=node.latest_snapshot.term)
            try:
                entries = node.committed_entries(offset, min(request.max_bytes or MAX_FETCH_BYTES, MAX_FETCH_BYTES))
            except LogCompacted:
                resp.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                return resp
            resp.batches.extend(pb.MetadataBatch(offset=e.index, term=e.term,
                                                 data=e.data if e.type == EntryType.NORMAL else b"")
                                for e in entries)
            if request.broker_id >= 0:
                fetched = entries[-1].index if entries else offset - 1
                self.c.fetchers[request.broker_id] = (fetched, time.time() * 1000)
            return resp
        return await self._answer(pb.FetchMetadataResponse, context, work, needs=O.CLUSTER_ACTION)

    async def FetchSnapshot(self, request: pb.FetchSnapshotRequest, context) -> pb.FetchSnapshotResponse:
        async def work(access: Access) -> pb.FetchSnapshotResponse:
            await self.c.ensure_active()
            src = self.c.node.snapshot_reader()
            if src is None or src.meta.index != request.snapshot_offset:
                current = src.meta.index if src is not None else 0
                return pb.FetchSnapshotResponse(status=_status(), error_code=int(ErrorCode.OFFSET_OUT_OF_RANGE),
                                                snapshot_offset=current)
            pos = max(0, request.position)
            n = min(request.max_bytes or (1 << 20), 4 << 20)
            data = await asyncio.get_running_loop().run_in_executor(None, src.read, pos, n)
            return pb.FetchSnapshotResponse(status=_status(), snapshot_offset=src.meta.index,
                                            snapshot_term=src.meta.term, size=src.meta.size,
                                            position=pos, data=data)
        return await self._answer(pb.FetchSnapshotResponse, context, work, needs=O.CLUSTER_ACTION)

    async def DescribeQuorum(self, request: pb.DescribeQuorumRequest, context) -> pb.DescribeQuorumResponse:
        async def work(access: Access) -> pb.DescribeQuorumResponse:
            await self.c.ensure_active()
            node = self.c.node
            st = node.status()
            now_ms = time.time() * 1000
            leo = st.last_index + 1
            peers = {p.node_id: p for p in st.peers}

            def state(p: Any, directory: str) -> pb.ReplicaState:
                heard = int(now_ms - p.last_contact_s * 1000) if p.last_contact_s >= 0 else -1
                return pb.ReplicaState(replica_id=p.node_id, log_end_offset=p.match_index + 1, lag=p.lag,
                                       last_fetch_timestamp=heard, last_caught_up_timestamp=heard if p.lag == 0 else -1,
                                       directory_id=directory, endpoints=self._endpoints(p.address))

            voters = []
            for v in st.voters:  # from the membership: a voter that is gone or formatted again shows as silent
                directory = st.directories.get(v, "")
                if v == node.id:
                    voters.append(pb.ReplicaState(replica_id=v, log_end_offset=leo, lag=0, last_fetch_timestamp=int(now_ms),
                                                  last_caught_up_timestamp=int(now_ms), directory_id=directory,
                                                  endpoints=self._endpoints(node.address)))
                elif v in peers and peers[v].voter:
                    voters.append(state(peers[v], directory))
                else:
                    voters.append(pb.ReplicaState(replica_id=v, log_end_offset=-1, lag=-1, last_fetch_timestamp=-1,
                                                  last_caught_up_timestamp=-1, directory_id=directory,
                                                  endpoints=self._endpoints(node.addresses.get(v))))
            # Observers: controllers catching up (learners, observers, replicas on a disk formatted
            # again), then the brokers fetching metadata.
            observers = [state(p, p.directory_id) for p in st.peers if not p.voter]
            observers += [pb.ReplicaState(replica_id=b, log_end_offset=off + 1, lag=max(0, leo - off - 1),
                                          last_fetch_timestamp=int(ts), last_caught_up_timestamp=int(ts) if off + 1 >= leo else -1)
                          for b, (off, ts) in sorted(self.c.fetchers.items())]
            return pb.DescribeQuorumResponse(status=_status(), cluster_id=node.cluster_id, leader_id=node.id,
                                             leader_epoch=st.term, high_watermark=st.commit_index + 1,
                                             voters=voters, observers=observers)
        return await self._answer(pb.DescribeQuorumResponse, context, work, needs=O.DESCRIBE)

    # ---------------------------------------------------------------------------- ACLs

    def _acls_enabled(self) -> None:
        """Kafka answers the ACL requests SECURITY_DISABLED without an authorizer."""
        if self.authorizer is None:
            raise ApiError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the controllers: set "
                                                        "authorizer.class.name to manage ACLs")

    async def CreateAcls(self, request: pb.CreateAclsRequest, context) -> pb.CreateAclsResponse:
        async def work(access: Access) -> pb.CreateAclsResponse:
            self._acls_enabled()
            check_request_size(len(request.creations), "ACLs")
            wanted = _each(request.creations, _new_acl)
            results = await self.c.write(lambda view: create_acls(view.acls, wanted), in_thread=True)
            return pb.CreateAclsResponse(status=_status(), results=[
                pb.AclResult(error_code=int(e.code), error_message=e.message) if e else pb.AclResult()
                for e in results])
        return await self._answer(pb.CreateAclsResponse, context, work, needs=O.ALTER)

    async def DescribeAcls(self, request: pb.DescribeAclsRequest, context) -> pb.DescribeAclsResponse:
        async def work(access: Access) -> pb.DescribeAclsResponse:
            self._acls_enabled()
            wanted = _acl_filter(request.filter)
            image = await self.c.read_image()
            found = await self.c.in_worker(lambda: sorted(acl for _, acl in matching(image.acls, wanted)))
            return pb.DescribeAclsResponse(status=_status(), acls=[_binding(a) for a in found])
        return await self._answer(pb.DescribeAclsResponse, context, work, needs=O.DESCRIBE)

    async def DeleteAcls(self, request: pb.DeleteAclsRequest, context) -> pb.DeleteAclsResponse:
        async def work(access: Access) -> pb.DeleteAclsResponse:
            self._acls_enabled()
            check_request_size(len(request.filters), "ACL filters")
            filters = _each(request.filters, _acl_filter)
            results = await self.c.write(lambda view: delete_acls(view.acls, filters, MAX_RECORDS_PER_USER_OP),
                                         in_thread=True)
            return pb.DeleteAclsResponse(status=_status(), filter_results=[
                pb.DeleteAclsFilterResult(error_code=int(r.code), error_message=r.message)
                if isinstance(r, ApiError) else pb.DeleteAclsFilterResult(matching_acls=[_binding(a) for a in sorted(r)])
                for r in results])
        return await self._answer(pb.DeleteAclsResponse, context, work, needs=O.ALTER)

    def _endpoints(self, address: str | None) -> list[str]:
        return [f"{self.listener_name}://{address}"] if address else []

    async def AddRaftVoter(self, request: pb.AddRaftVoterRequest, context) -> pb.AddRaftVoterResponse:
        async def work(access: Access) -> pb.AddRaftVoterResponse:
            await self.c.ensure_active()
            await quorum.add_voter(self.c, request, self.listener_name)
            return pb.AddRaftVoterResponse(status=_status())
        return await self._answer(pb.AddRaftVoterResponse, context, work, needs=O.ALTER)  # Kafka: ALTER on the cluster

    async def RemoveRaftVoter(self, request: pb.RemoveRaftVoterRequest, context) -> pb.RemoveRaftVoterResponse:
        async def work(access: Access) -> pb.RemoveRaftVoterResponse:
            await self.c.ensure_active()
            await quorum.remove_voter(self.c, request)
            return pb.RemoveRaftVoterResponse(status=_status())
        return await self._answer(pb.RemoveRaftVoterResponse, context, work, needs=O.ALTER)


def _text(value: bytes | str) -> str:
    """A binary metadata value (``-bin`` keys carry bytes: a principal may be any Unicode)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _protocol(name: str) -> SecurityProtocol:
    try:
        return SecurityProtocol[name or "PLAINTEXT"]
    except KeyError:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"unknown security protocol {name!r}: use "
                       f"{', '.join(p.name for p in SecurityProtocol)}") from None


T = TypeVar("T")


def _each(items: Iterable[Any], convert: Callable[[Any], T]) -> list[T | ApiError]:
    """Each item converted, or the refusal of it in its place (Kafka answers ACLs one by one)."""
    out: list[T | ApiError] = []
    for item in items:
        try:
            out.append(convert(item))
        except ApiError as e:
            out.append(e)
    return out


def _new_acl(b: pb.AclBinding) -> StandardAcl:
    return new_acl(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                   b.permission_type)


def _acl_filter(f: pb.AclFilter) -> AclBindingFilter:
    return acl_filter(f.resource_type, f.resource_name if f.HasField("resource_name") else None, f.pattern_type,
                      f.principal if f.HasField("principal") else None, f.host if f.HasField("host") else None,
                      f.operation, f.permission_type)


def _binding(acl: StandardAcl) -> pb.AclBinding:
    return pb.AclBinding(resource_type=acl.resource_type, resource_name=acl.resource_name,
                         pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                         operation=acl.operation, permission_type=acl.permission_type)


def _config_refusal(access: Access, op: AclOperation, resource_type: int, name: str) -> ApiError | None:
    """Why ``op`` on a config resource is refused: a topic's configs need it on the topic, a
    broker's (or the cluster default's) on the cluster, as in Kafka; None when allowed."""
    if resource_type == ResourceType.TOPIC and not access.topic(op, name):
        return access.topic_refusal(op, name)
    if resource_type == ResourceType.BROKER and not access.cluster(op):
        return access.cluster_refusal(op)
    return None


def _resource_type(value: int) -> ResourceType:
    if value in (ResourceType.TOPIC, ResourceType.BROKER):
        return ResourceType(value)
    raise ApiError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {value}: use TOPIC (2) or BROKER (4)")
