"""The controller's wire (``protos/controller.proto``) to and from ``metadata.operations``'
dataclasses: one decode per request and one encode per response, and nothing else (no
policy, no checks: a value the wire cannot carry is passed on for the operation to refuse,
in the order Kafka refuses it)."""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable, TypeVar, cast, overload

from protos import controller_pb2 as pb
from raft.messages import EntryType

from .acls import AclBindingFilter, StandardAcl, acl_filter, new_acl
from .brokers import Heartbeat, HeartbeatAnswer
from .client_quotas import QuotaAlteration, QuotaAlterResult, QuotaFilterComponent, QuotaOp
from common.errors import ErrorCode, KafkaError, capped
from .image import Endpoint, PartitionRegistration
from .operations import (AlterPartitionRequest, BrokerAnswer, BrokerRegistrationRequest, ClusterDescription,
                         ConfigChange, Listener, MetadataFetch, NewPartitions, OngoingReassignment, ProducerIdBlock,
                         QuorumDescription, ReplicaState, ResourceResult, SnapshotChunk, TopicsDescription)
from .partitions import PREFERRED, UNCLEAN, PartitionOutcome
from .quorum import AddVoter, RemoveVoter
from .reassignments import Reassignment
from .scram import ScramDeletion, ScramUpsertion, ScramUserResult
from .topics import ConfigOp, ItemResult, NewTopic

T = TypeVar("T")


def _error(code: int) -> pb.ErrorCode:
    """Kafka's error code as the wire's enum: the same int, typed as protoc's stubs type enum fields."""
    return cast(pb.ErrorCode, int(code))


def _resource(resource_type: int) -> pb.ResourceType:
    return cast(pb.ResourceType, int(resource_type))


def status(code: ErrorCode = ErrorCode.NONE, message: str = "", controller_id: int = -1,
           endpoint: str = "") -> pb.Status:
    return pb.Status(error_code=_error(code), error_message=capped(message), controller_id=controller_id,
                     controller_endpoint=endpoint)


OK = status()


class Decoded(Sequence[T]):
    """The items of a repeated field, decoded all at once when first read: an operation
    counts them (Kafka's request size bounds) before any is built, so an oversized request is
    refused without allocating its items (whose garbage collection would stall the loop)."""

    __slots__ = ("_items", "_convert", "_decoded")

    def __init__(self, items: Sequence[Any], convert: Callable[[Any], T]) -> None:
        self._items = items
        self._convert = convert
        self._decoded: list[T] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def _all(self) -> list[T]:
        if self._decoded is None:
            self._decoded = [self._convert(item) for item in self._items]
        return self._decoded

    @overload
    def __getitem__(self, k: int) -> T: ...
    @overload
    def __getitem__(self, k: slice) -> list[T]: ...

    def __getitem__(self, k: int | slice) -> T | list[T]:
        return self._all()[k]

    def __iter__(self) -> Iterator[T]:
        return iter(self._all())


def _uuid(raw: bytes) -> uuid.UUID | None:
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def _code(error: KafkaError | None) -> tuple[pb.ErrorCode, str]:
    return (_error(error.code), error.message) if error else (_error(ErrorCode.NONE), "")


# ------------------------------------------------------------------------------ topics

def _new_topic(t: pb.CreatableTopic) -> NewTopic:
    return NewTopic(t.name, t.num_partitions, t.replication_factor,
                    {a.partition: list(a.replicas) for a in t.assignments}, dict(t.configs))


def new_topics(r: pb.CreateTopicsRequest) -> Sequence[NewTopic]:
    return Decoded(r.topics, _new_topic)


def created_topics(results: list[ItemResult]) -> pb.CreateTopicsResponse:
    return pb.CreateTopicsResponse(status=OK, topics=[
        pb.CreateTopicResult(name=r.name, topic_id=r.topic_id.bytes if r.topic_id else b"",
                             error_code=_code(r.error)[0], error_message=_code(r.error)[1],
                             num_partitions=r.partitions, replication_factor=r.replication_factor)
        for r in results])


def topic_results(results: list[ItemResult]) -> list[pb.TopicResult]:
    return [pb.TopicResult(name=r.name, topic_id=r.topic_id.bytes if r.topic_id else b"",
                           error_code=_code(r.error)[0], error_message=_code(r.error)[1]) for r in results]


def topics_to_delete(r: pb.DeleteTopicsRequest) -> tuple[list[str], list[uuid.UUID | None]]:
    return list(r.names), [_uuid(i) for i in r.topic_ids]


def deleted_topics(results: list[ItemResult]) -> pb.DeleteTopicsResponse:
    return pb.DeleteTopicsResponse(status=OK, topics=topic_results(results))


def new_partitions(r: pb.CreatePartitionsRequest) -> Sequence[NewPartitions]:
    return Decoded(r.topics, lambda t: NewPartitions(t.name, t.count, tuple(tuple(a.replicas) for a in t.assignments)))


def created_partitions(results: list[ItemResult]) -> pb.CreatePartitionsResponse:
    return pb.CreatePartitionsResponse(status=OK, topics=topic_results(results))


def topics_description(d: TopicsDescription) -> pb.DescribeTopicsResponse:
    """Built in the controller's worker, as it scales with the cluster, and in place: a
    message given a list of 10,000 PartitionInfos copies them in one C call that holds the
    GIL throughout (75-140 ms on a loaded machine), and the event loop waits for it; one
    ``add`` per partition lets the loop take the GIL between two of them."""
    out = pb.DescribeTopicsResponse(status=OK, metadata_offset=d.metadata_offset)
    for entry in d.topics:
        t = entry.topic
        if t is None:
            code, message = _code(entry.error)
            out.topics.add(name=entry.name, error_code=code, error_message=message)
            continue
        add = out.topics.add(name=entry.name, topic_id=t.id.bytes, configs=entry.configs).partitions.add
        for pid in sorted(t.partitions):  # the ids alone: ints sort in a fraction of the time pairs take
            p = t.partitions[pid]
            add(partition=pid, leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                replicas=p.replicas, isr=p.isr, offline_replicas=[r for r in p.replicas if r not in d.live],
                adding_replicas=p.adding, removing_replicas=p.removing)
    return out


# ------------------------------------------------------------------------------ partitions

def election(r: pb.ElectLeadersRequest) -> tuple[str, list[tuple[str, int]] | None]:
    kind = UNCLEAN if r.election_type == pb.ElectLeadersRequest.UNCLEAN else PREFERRED
    return kind, ([(t.name, p) for t in r.topics for p in t.partitions] if r.topics else None)


def elected(results: list[PartitionOutcome]) -> pb.ElectLeadersResponse:
    return pb.ElectLeadersResponse(status=OK, results=[
        pb.ElectionResult(topic=o.topic, partition=o.partition, error_code=_error(o.code), error_message=o.message)
        for o in results])


def reassignment_plan(r: pb.AlterPartitionReassignmentsRequest) -> Sequence[Reassignment]:
    return Decoded(r.reassignments, lambda a: Reassignment(a.topic, a.partition, tuple(a.replicas.ids)
                                                           if a.HasField("replicas") else None))


def reassigned(results: list[PartitionOutcome]) -> pb.AlterPartitionReassignmentsResponse:
    return pb.AlterPartitionReassignmentsResponse(status=OK, results=[
        pb.ReassignmentResult(topic=o.topic, partition=o.partition, error_code=_error(o.code), error_message=o.message)
        for o in results])


def reassignment_topics(r: pb.ListPartitionReassignmentsRequest) -> dict[str, list[int]] | None:
    return {t.name: list(t.partitions) for t in r.topics} if r.topics else None


def ongoing_reassignments(found: list[OngoingReassignment]) -> pb.ListPartitionReassignmentsResponse:
    return pb.ListPartitionReassignmentsResponse(status=OK, reassignments=[
        pb.OngoingReassignment(topic=o.topic, partition=o.partition, replicas=o.partition_state.replicas,
                               adding_replicas=o.partition_state.adding, removing_replicas=o.partition_state.removing,
                               isr=o.partition_state.isr, leader=o.partition_state.leader)
        for o in found])


def alter_partition(r: pb.AlterPartitionRequest) -> AlterPartitionRequest:
    return AlterPartitionRequest(r.broker_id, r.broker_epoch, _uuid(r.topic_id), r.partition, r.leader_epoch,
                                 r.partition_epoch, tuple(r.new_isr))


def altered_partition(a: BrokerAnswer[PartitionRegistration]) -> pb.AlterPartitionResponse:
    p = a.value
    if p is None:
        return pb.AlterPartitionResponse(status=OK, error_code=_code(a.error)[0], error_message=_code(a.error)[1])
    return pb.AlterPartitionResponse(status=OK, leader=p.leader, leader_epoch=p.leader_epoch,
                                     partition_epoch=p.partition_epoch, isr=p.isr)


# ------------------------------------------------------------------------------ cluster and configs

def cluster_description(d: ClusterDescription) -> pb.DescribeClusterResponse:
    return pb.DescribeClusterResponse(
        status=OK, cluster_id=d.cluster_id, controller_id=d.controller_id, metadata_offset=d.metadata_offset,
        features=d.features,
        brokers=[pb.BrokerInfo(id=b.id, rack=b.rack or "", fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown,
                               epoch=b.epoch, incarnation_id=b.incarnation_id.bytes,
                               endpoints=[pb.Endpoint(name=e.name, host=e.host, port=e.port,
                                                      security_protocol=e.security_protocol.name)
                                          for e in b.endpoints])
                 for b in d.brokers])


def config_changes(r: pb.IncrementalAlterConfigsRequest) -> Sequence[ConfigChange]:
    return Decoded(r.resources, lambda c: ConfigChange(c.resource_type, c.resource_name, Decoded(
        c.configs, lambda o: ConfigOp(o.name, o.op, o.value)), r.replace))


def altered_configs(results: list[ResourceResult]) -> pb.IncrementalAlterConfigsResponse:
    return pb.IncrementalAlterConfigsResponse(status=OK, resources=[
        pb.ResourceResult(resource_type=_resource(r.resource_type), resource_name=r.name, error_code=_code(r.error)[0],
                          error_message=_code(r.error)[1]) for r in results])


def config_resources(r: pb.DescribeConfigsRequest) -> list[tuple[int, str]]:
    return [(c.resource_type, c.resource_name) for c in r.resources]


def described_configs(results: list[ResourceResult]) -> pb.DescribeConfigsResponse:
    return pb.DescribeConfigsResponse(status=OK, resources=[
        pb.DescribedResource(resource_type=_resource(r.resource_type), resource_name=r.name,
                             error_code=_code(r.error)[0],
                             error_message=_code(r.error)[1],
                             configs=[pb.ConfigEntry(name=k, value=v, is_default=d) for k, v, d in r.configs])
        for r in results])


# ------------------------------------------------------------------------------ brokers

def _listeners(endpoints: Iterable[pb.Endpoint]) -> tuple[Listener, ...]:
    return tuple(Listener(e.name, e.host, e.port, e.security_protocol) for e in endpoints)


def broker_registration(r: pb.BrokerRegistrationRequest) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(r.broker_id, _uuid(r.incarnation_id), r.cluster_id, _listeners(r.listeners),
                                     r.rack or None)


def registered(a: BrokerAnswer[int]) -> pb.BrokerRegistrationResponse:
    if a.value is None:
        return pb.BrokerRegistrationResponse(status=OK, error_code=_code(a.error)[0], error_message=_code(a.error)[1])
    return pb.BrokerRegistrationResponse(status=OK, broker_epoch=a.value)


def heartbeat(r: pb.BrokerHeartbeatRequest) -> Heartbeat:
    return Heartbeat(r.broker_id, r.broker_epoch, r.current_metadata_offset, r.want_fence, r.want_shut_down)


def heartbeat_answer(a: BrokerAnswer[HeartbeatAnswer]) -> pb.BrokerHeartbeatResponse:
    h = a.value
    if h is None:
        return pb.BrokerHeartbeatResponse(status=OK, error_code=_code(a.error)[0], error_message=_code(a.error)[1])
    return pb.BrokerHeartbeatResponse(status=OK, is_caught_up=h.is_caught_up, is_fenced=h.is_fenced,
                                      should_shut_down=h.should_shut_down)


def producer_id_block(b: ProducerIdBlock) -> pb.AllocateProducerIdsResponse:
    if b.error is not None:
        return pb.AllocateProducerIdsResponse(status=OK, error_code=_error(b.error.code))
    return pb.AllocateProducerIdsResponse(status=OK, producer_id_start=b.start, producer_id_len=b.length)


# ------------------------------------------------------------------------------ the metadata log and the quorum

def metadata_fetched(f: MetadataFetch) -> pb.FetchMetadataResponse:
    return pb.FetchMetadataResponse(
        status=OK, high_watermark=f.high_watermark, log_start_offset=f.log_start_offset,
        snapshot_offset=f.snapshot_offset, snapshot_term=f.snapshot_term, error_code=_error(f.error),
        batches=[pb.MetadataBatch(offset=e.index, term=e.term, data=e.data if e.type == EntryType.NORMAL else b"")
                 for e in f.entries])


def snapshot_chunk(c: SnapshotChunk) -> pb.FetchSnapshotResponse:
    if c.error != ErrorCode.NONE:
        return pb.FetchSnapshotResponse(status=OK, error_code=_error(c.error), snapshot_offset=c.snapshot_offset)
    return pb.FetchSnapshotResponse(status=OK, snapshot_offset=c.snapshot_offset, snapshot_term=c.snapshot_term,
                                    size=c.size, position=c.position, data=c.data)


def _replica(s: ReplicaState) -> pb.ReplicaState:
    return pb.ReplicaState(replica_id=s.replica_id, log_end_offset=s.log_end_offset, lag=s.lag,
                           last_fetch_timestamp=s.last_fetch_timestamp,
                           last_caught_up_timestamp=s.last_caught_up_timestamp, directory_id=s.directory_id,
                           endpoints=s.endpoints)


def quorum_description(d: QuorumDescription) -> pb.DescribeQuorumResponse:
    return pb.DescribeQuorumResponse(status=OK, cluster_id=d.cluster_id, leader_id=d.leader_id,
                                     leader_epoch=d.leader_epoch, high_watermark=d.high_watermark,
                                     voters=[_replica(v) for v in d.voters],
                                     observers=[_replica(o) for o in d.observers])


def add_voter(r: pb.AddRaftVoterRequest) -> AddVoter:
    return AddVoter(r.cluster_id, r.voter_id, r.voter_directory_id,
                    tuple(Endpoint(e.name, e.host, e.port) for e in r.listeners), r.timeout_ms)


def remove_voter(r: pb.RemoveRaftVoterRequest) -> RemoveVoter:
    return RemoveVoter(r.cluster_id, r.voter_id, r.voter_directory_id)


# ------------------------------------------------------------------------------ ACLs

def _each(convert: Callable[[Any], T]) -> Callable[[Any], T | KafkaError]:
    """``convert``, answering the refusal of an item in its place (Kafka answers ACLs one by one)."""
    def one(item: Any) -> T | KafkaError:
        try:
            return convert(item)
        except KafkaError as e:
            return e
    return one


def _new_acl(b: pb.AclBinding) -> StandardAcl:
    return new_acl(b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation,
                   b.permission_type)


def _acl_filter(f: pb.AclFilter) -> AclBindingFilter:
    return acl_filter(f.resource_type, f.resource_name if f.HasField("resource_name") else None, f.pattern_type,
                      f.principal if f.HasField("principal") else None, f.host if f.HasField("host") else None,
                      f.operation, f.permission_type)


def new_acls(r: pb.CreateAclsRequest) -> Sequence[StandardAcl | KafkaError]:
    return Decoded(r.creations, _each(_new_acl))


def acls_created(results: list[KafkaError | None]) -> pb.CreateAclsResponse:
    return pb.CreateAclsResponse(status=OK, results=[
        pb.AclResult(error_code=_error(e.code), error_message=e.message) if e else pb.AclResult() for e in results])


def acl_describe_filter(r: pb.DescribeAclsRequest) -> AclBindingFilter | KafkaError:
    return _each(_acl_filter)(r.filter)


def binding(acl: StandardAcl) -> pb.AclBinding:
    return pb.AclBinding(resource_type=acl.resource_type, resource_name=acl.resource_name,
                         pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host,
                         operation=acl.operation, permission_type=acl.permission_type)


def acls_described(found: list[StandardAcl]) -> pb.DescribeAclsResponse:
    return pb.DescribeAclsResponse(status=OK, acls=[binding(a) for a in found])


def acl_delete_filters(r: pb.DeleteAclsRequest) -> Sequence[AclBindingFilter | KafkaError]:
    return Decoded(r.filters, _each(_acl_filter))


def acls_deleted(results: list[list[StandardAcl] | KafkaError]) -> pb.DeleteAclsResponse:
    return pb.DeleteAclsResponse(status=OK, filter_results=[
        pb.DeleteAclsFilterResult(error_code=_error(r.code), error_message=r.message) if isinstance(r, KafkaError)
        else pb.DeleteAclsFilterResult(matching_acls=[binding(a) for a in r]) for r in results])


# ------------------------------------------------------------------------------ SCRAM credentials

def scram_changes(r: pb.AlterUserScramCredentialsRequest) -> tuple[Sequence[ScramDeletion], Sequence[ScramUpsertion]]:
    return (Decoded(r.deletions, lambda d: ScramDeletion(d.name, d.mechanism)),
            Decoded(r.upsertions, lambda u: ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt,
                                                           u.salted_password)))


def scram_altered(results: list[ScramUserResult]) -> pb.AlterUserScramCredentialsResponse:
    return pb.AlterUserScramCredentialsResponse(status=OK, results=[
        pb.ScramAlterResult(user=r.user, error_code=_code(r.error)[0], error_message=_code(r.error)[1])
        for r in results])


def scram_described(results: list[ScramUserResult]) -> pb.DescribeUserScramCredentialsResponse:
    return pb.DescribeUserScramCredentialsResponse(status=OK, results=[
        pb.DescribedScramUser(user=r.user, error_code=_code(r.error)[0], error_message=_code(r.error)[1],
                              credentials=[pb.ScramCredentialInfo(mechanism=int(m), iterations=i)
                                           for m, i in r.credentials])
        for r in results])


# ------------------------------------------------------------------------------ client quotas

def _entity(parts: Iterable[pb.QuotaEntityPart]) -> tuple[tuple[str, str | None], ...]:
    return tuple((p.entity_type, p.entity_name if p.HasField("entity_name") else None) for p in parts)


def entity_parts(entity: Iterable[tuple[str, str | None]]) -> list[pb.QuotaEntityPart]:
    return [pb.QuotaEntityPart(entity_type=t) if n is None else pb.QuotaEntityPart(entity_type=t, entity_name=n)
            for t, n in entity]


def quota_alterations(r: pb.AlterClientQuotasRequest) -> tuple[Sequence[QuotaAlteration], bool]:
    return Decoded(r.entries, lambda e: QuotaAlteration(
        _entity(e.entity), tuple(QuotaOp(o.key, o.value, o.remove) for o in e.ops))), r.validate_only


def quotas_altered(results: list[QuotaAlterResult]) -> pb.AlterClientQuotasResponse:
    return pb.AlterClientQuotasResponse(status=OK, results=[
        pb.QuotaAlterResult(entity=entity_parts(r.entity), error_code=_code(r.error)[0],
                            error_message=_code(r.error)[1]) for r in results])


def quota_filter(r: pb.DescribeClientQuotasRequest) -> tuple[Sequence[QuotaFilterComponent], bool]:
    return Decoded(r.components, lambda c: QuotaFilterComponent(
        c.entity_type, c.match_type, c.match if c.HasField("match") else None)), r.strict


def quotas_described(found: list[tuple[tuple[tuple[str, str | None], ...], dict[str, float]]]
                     ) -> pb.DescribeClientQuotasResponse:
    return pb.DescribeClientQuotasResponse(status=OK, entries=[
        pb.DescribedQuotaEntity(entity=entity_parts(entity), values=values) for entity, values in found])
