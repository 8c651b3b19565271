"""The controller's operations, typed: what each request may do, what it writes and what it
answers, with no wire in sight (``metadata.service`` is the gRPC codec over them).

Each write follows Kafka's ControllerResult: a build function turns the request into records
plus a response on the controller's view, ``QuorumController.write`` commits the records as
one batch, and the method returns the response once they are applied. Per-item refusals are
typed errors in the response (an ``KafkaError`` in the item); a refusal of the whole request, or
a write whose outcome is unknown, is raised (``KafkaError``, ``NotController``, ``RaftError``).
Authorization is policy, so it is decided here: every method takes the caller's ``Access``,
checks what Kafka's ControllerApis checks and filters what the caller may see.

A new controller operation is one method here (with its request and response dataclasses)
plus one line per codec: the decode and encode in ``metadata.codec`` and the RPC in
``metadata.service``, and on the client side one method of ``metadata.client.ControllerClient``
with its row in the idempotency table.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from raft.errors import LogCompacted
from raft.messages import Entry, SnapshotSource
from raft.node import PeerInfo

from . import quorum
from .acls import AclBindingFilter, AclOperation, StandardAcl, create_acls, delete_acls, matching
from .authorizer import Access, StandardAuthorizer
from .brokers import Heartbeat, HeartbeatAnswer
from .client_quotas import (QuotaAlteration, QuotaAlterResult, QuotaFilterComponent, alter_quotas,
                            describe_quotas)
from .controller import QuorumController
from common.errors import ErrorCode, KafkaError
from .image import (BrokerRegistration, ConfigResource, MetadataImage, PartitionRegistration, ResourceType,
                    SecurityProtocol, TopicImage)
from .partitions import PartitionOutcome, alter_partition, elect_leaders
from .quorum import AddVoter, RemoveVoter
from .reassignments import Reassignment, alter, ongoing
from .records import MetadataRecord, endpoint, producer_ids
from .scram import ScramDeletion, ScramUpsertion, ScramUserResult, alter_credentials, describe_credentials
from .topics import (MAX_RECORDS_PER_USER_OP, ConfigOp, ItemResult, NewTopic, alter_configs,
                     check_request_size, create_partitions, create_topics, delete_topics, describe_configs)

PRODUCER_ID_BLOCK = 1000
BROKER_LOGGER = 8  # Kafka's ConfigResource.Type for log4j levels, which are not served here
MAX_FETCH_BYTES = 8 << 20
O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
T = TypeVar("T")


# ------------------------------------------------------------------------------ requests

@dataclass(frozen=True, slots=True)
class NewPartitions:
    """CreatePartitions for one topic: grow it to ``count``, placed as given (or by the controller)."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """IncrementalAlterConfigs for one resource (``resource_type`` as sent: checked here);
    ``replace``: AlterConfigs, whose keys not given return to their defaults."""

    resource_type: int
    name: str
    ops: Sequence[ConfigOp]
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Listener:
    """A listener as a broker or a new controller names it (the protocol's name, checked here)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: uuid.UUID | None  # None: not a 16-byte UUID
    cluster_id: str
    listeners: tuple[Listener, ...]
    rack: str | None


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topic_id: uuid.UUID | None  # None: not a 16-byte UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


# ------------------------------------------------------------------------------ responses

@dataclass(frozen=True, slots=True)
class TopicDescription:
    """One topic as the caller may see it: ``topic`` None with ``error`` set when it is refused
    or unknown."""

    name: str
    topic: TopicImage | None
    configs: dict[str, str]
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class TopicsDescription:
    """``live``: the unfenced brokers (a replica elsewhere is offline)."""

    topics: list[TopicDescription]
    live: frozenset[int]
    metadata_offset: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    metadata_offset: int
    features: dict[str, int]
    brokers: list[BrokerRegistration]


@dataclass(frozen=True, slots=True)
class ResourceResult:
    """What a config operation did to one resource; ``error`` None when it was carried out."""

    resource_type: int
    name: str
    error: KafkaError | None = None
    configs: tuple[tuple[str, str | None, bool], ...] = ()  # described: (key, value or None, is default)


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    topic: str
    partition: int
    partition_state: PartitionRegistration


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A block of producer ids, or ``error`` (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED)."""

    start: int = 0
    length: int = 0
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class BrokerAnswer(Generic[T]):
    """What a broker's own request got: the per-request error Kafka puts in the response body
    (``error``), else ``value`` (a broker epoch, a HeartbeatAnswer, a PartitionRegistration)."""

    value: T | None = None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    high_watermark: int
    log_start_offset: int
    snapshot_offset: int
    snapshot_term: int
    entries: list[Entry]
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    snapshot_offset: int
    snapshot_term: int = 0
    size: int = 0
    position: int = 0
    data: bytes = b""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    lag: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    directory_id: str = ""
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaState]
    observers: list[ReplicaState]


# ------------------------------------------------------------------------------ operations

class ControllerOperations:
    """The typed API of one controller node; every method acts on the active controller
    (NotController elsewhere)."""

    def __init__(self, controller: QuorumController, authorizer: StandardAuthorizer | None = None,
                 listener_name: str = "CONTROLLER") -> None:
        """``authorizer`` None: no ``authorizer.class.name`` (everything allowed, ACL requests
        SECURITY_DISABLED); ``listener_name``: how voters' endpoints are named."""
        self.c = controller
        self.authorizer = authorizer
        self.listener_name = listener_name

    @staticmethod
    def _require(access: Access, op: AclOperation) -> None:
        """CLUSTER_AUTHORIZATION_FAILED unless the caller may ``op`` the cluster."""
        if not access.cluster(op):
            raise access.cluster_refusal(op)

    async def in_worker(self, fn: Callable[..., T], *args: object) -> T:
        """Work that scales with the cluster, in the controller's worker thread."""
        return await self.c.in_worker(fn, *args)

    # -------------------------------------------------------------------------- topics

    async def create_topics(self, access: Access, topics: Sequence[NewTopic], *, validate_only: bool = False
                            ) -> list[ItemResult]:
        """Kafka's rule: CREATE on the cluster, or else on each topic; the refused ones are
        answered TOPIC_AUTHORIZATION_FAILED after the others, by name."""
        cfg = self.c.config
        check_request_size(len(topics), "topics")  # first: it bounds the sums below
        check_request_size(sum(len(t.assignment) or (cfg.default_partitions if t.partitions == -1
                                                     else max(t.partitions, 0)) for t in topics), "partitions")
        check_request_size(sum(len(t.configs) for t in topics), "configs")
        anywhere = access.cluster(O.CREATE, log_denial=False)
        refused = {t.name for t in topics if not anywhere and not access.topic(O.CREATE, t.name)}
        wanted = [t for t in topics if t.name not in refused]
        # What build needs from the live state machine, taken here on the event loop: build
        # runs in a thread (QuorumController.write) and reads only its arguments.
        image, stats = self.c.sm.image, self.c.sm.stats
        load, start, folded = stats.load(), self.c.next_placement_start(), frozenset(stats.folded_names)

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], list[ItemResult]]:
            return create_topics(view, wanted, default_partitions=cfg.default_partitions,
                                 default_replication=cfg.default_replication_factor, load=load, start=start,
                                 collisions=folded if view is image else None)
        results = await self.c.write(build, validate_only=validate_only, in_thread=True)
        return results + [ItemResult(name, error=access.topic_refusal(O.CREATE, name)) for name in sorted(refused)]

    async def delete_topics(self, access: Access, names: list[str], ids: list[uuid.UUID | None]
                            ) -> list[ItemResult]:
        """By name and by id (None: an id that is not a 16-byte UUID refuses the request)."""
        checked = [i for i in ids if i is not None]
        if len(checked) != len(ids):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "topic ids are 16-byte UUIDs")
        check_request_size(len(names) + len(checked), "topics")
        known = self.c.sm.image.topics_by_id
        refused = [ItemResult(name, error=access.topic_refusal(O.DELETE, name))
                   for name in names if not access.topic(O.DELETE, name)]
        refused += [ItemResult(known[i].name, i, access.topic_refusal(O.DELETE, known[i].name))
                    for i in checked if i in known and not access.topic(O.DELETE, known[i].name)]
        gone = {r.name for r in refused}
        by_name = [n for n in names if n not in gone]
        by_id = [i for i in checked if i not in known or known[i].name not in gone]
        results = await self.c.write(lambda view: delete_topics(view, by_name, by_id), in_thread=True)
        return results + refused

    async def create_partitions(self, access: Access, topics: Sequence[NewPartitions], *,
                                validate_only: bool = False) -> list[ItemResult]:
        check_request_size(len(topics), "topics")
        load, start = self.c.sm.stats.load(), self.c.next_placement_start()
        refused = {t.name for t in topics if not access.topic(O.ALTER, t.name)}
        wanted = [t for t in topics if t.name not in refused]

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], list[ItemResult]]:
            check_request_size(sum(max(0, t.count - len(view.topics_by_name[t.name].partitions))
                                   for t in wanted if t.name in view.topics_by_name), "new partitions")
            records: list[MetadataRecord] = []
            results = []
            for k, t in enumerate(wanted):
                recs, res = create_partitions(view, t.name, t.count, [list(a) for a in t.assignments],
                                              load=load, start=start + k)
                records += recs
                results.append(res)
            return records, results
        results = await self.c.write(build, validate_only=validate_only, in_thread=True)
        return results + [ItemResult(name, error=access.topic_refusal(O.ALTER, name)) for name in sorted(refused)]

    async def describe_topics(self, access: Access, names: list[str]) -> TopicsDescription:
        """As Kafka's Metadata: a listing leaves out the topics the session may not DESCRIBE; a
        topic named is answered TOPIC_AUTHORIZATION_FAILED, whether it exists or not."""
        image = await self.c.read_image()  # immutable: described in a thread, as it scales with the cluster
        return await self.in_worker(_describe_topics, image, names, access)

    # -------------------------------------------------------------------------- partitions

    async def elect_leaders(self, access: Access, kind: str, partitions: list[tuple[str, int]] | None
                            ) -> list[PartitionOutcome]:
        """``kind``: partitions.PREFERRED or UNCLEAN; ``partitions`` None: every partition."""
        self._require(access, O.ALTER)
        check_request_size(len(partitions or ()), "partitions")
        return await self.c.write(lambda view: elect_leaders(view, kind, partitions), in_thread=True)

    async def alter_reassignments(self, access: Access, plan: Sequence[Reassignment]) -> list[PartitionOutcome]:
        self._require(access, O.ALTER)
        check_request_size(len(plan), "reassignments")
        return await self.c.write(lambda view: alter(view, plan), in_thread=True)

    async def list_reassignments(self, access: Access, topics: dict[str, list[int]] | None
                                 ) -> list[OngoingReassignment]:
        """``topics`` None: every partition; an empty list: every partition of that topic."""
        self._require(access, O.DESCRIBE)
        image = await self.c.read_image()
        found = await self.in_worker(ongoing, image, topics)
        return [OngoingReassignment(name, pid, p) for name, pid, p in found]

    async def alter_partition(self, access: Access, request: AlterPartitionRequest
                              ) -> BrokerAnswer[PartitionRegistration]:
        """A leader's ISR change; the answer is the partition as committed (``value``)."""
        self._require(access, O.CLUSTER_ACTION)
        tid = request.topic_id

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], None]:
            self.c.brokers.registration(view, request.broker_id, request.broker_epoch)
            if tid is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the topic id is a 16-byte UUID")
            rec, _ = alter_partition(view, request.broker_id, tid, request.partition, request.leader_epoch,
                                     request.partition_epoch, list(request.new_isr))
            return ([rec] if rec is not None else []), None
        try:
            await self.c.write(build)
        except KafkaError as e:
            if e.code == ErrorCode.REQUEST_TIMED_OUT:
                raise
            return BrokerAnswer(error=e)
        p = self.c.sm.image.partition(tid, request.partition) if tid is not None else None
        if p is None:  # deleted meanwhile
            return BrokerAnswer(error=KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ""))
        return BrokerAnswer(p)

    # -------------------------------------------------------------------------- cluster and configs

    async def describe_cluster(self, access: Access) -> ClusterDescription:
        self._require(access, O.DESCRIBE)
        image = await self.c.read_image()
        return ClusterDescription(image.cluster_id, self.c.node.id, image.offset, dict(image.features),
                                  sorted(image.brokers.values(), key=lambda b: b.id))

    async def incremental_alter_configs(self, access: Access, changes: Sequence[ConfigChange], *,
                                        validate_only: bool = False) -> list[ResourceResult]:
        """IncrementalAlterConfigs, and AlterConfigs (each change's ``replace``): ALTER_CONFIGS on
        each resource, which is changed or refused alone; the changes allowed are one write."""
        check_request_size(sum(len(r.ops) or 1 for r in changes), "config changes")
        refused = {k: e for k, r in enumerate(changes)
                   if (e := _config_refusal(access, O.ALTER_CONFIGS, r.resource_type, r.name)) is not None}

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], list[ResourceResult]]:
            records: list[MetadataRecord] = []
            results = []
            for k, r in enumerate(changes):
                try:
                    if k in refused:
                        raise refused[k]
                    records += alter_configs(view, _resource_type(r.resource_type), r.name, list(r.ops),
                                             replace=r.replace)
                    results.append(ResourceResult(r.resource_type, r.name))
                except KafkaError as e:
                    results.append(ResourceResult(r.resource_type, r.name, e))
            return records, results
        return await self.c.write(build, validate_only=validate_only, in_thread=True)

    async def describe_configs(self, access: Access, resources: list[tuple[int, str]]) -> list[ResourceResult]:
        """``resources``: (resource type as sent, name); each is refused or described alone."""
        image = await self.c.read_image()
        out = []
        for rtype, name in resources:
            try:
                error = _config_refusal(access, O.DESCRIBE_CONFIGS, rtype, name)
                if error is not None:
                    raise error
                out.append(ResourceResult(rtype, name, configs=tuple(describe_configs(image, _resource_type(rtype),
                                                                                      name))))
            except KafkaError as e:
                out.append(ResourceResult(rtype, name, e))
        return out

    # -------------------------------------------------------------------------- brokers

    async def register_broker(self, access: Access, request: BrokerRegistrationRequest) -> BrokerAnswer[int]:
        """The broker's new epoch (``value``), or why it may not register (``error``)."""
        self._require(access, O.CLUSTER_ACTION)

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], int]:
            if request.incarnation_id is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "the incarnation id is a 16-byte UUID")
            eps = [endpoint(e.name, e.host, e.port, _protocol(e.security_protocol)) for e in request.listeners]
            return self.c.brokers.register(view, request.broker_id, request.incarnation_id, request.cluster_id, eps,
                                           request.rack or None, self.c.node.next_index)
        try:
            return BrokerAnswer(await self.c.write(build))
        except KafkaError as e:
            if e.code == ErrorCode.REQUEST_TIMED_OUT:
                raise
            return BrokerAnswer(error=e)

    async def broker_heartbeat(self, access: Access, hb: Heartbeat) -> BrokerAnswer[HeartbeatAnswer]:
        """A HeartbeatAnswer (``value``), or why the heartbeat was refused (``error``)."""
        self._require(access, O.CLUSTER_ACTION)
        try:
            answer: HeartbeatAnswer = await self.c.write(lambda view: self.c.brokers.heartbeat(view, hb))
        except KafkaError as e:
            if e.code == ErrorCode.REQUEST_TIMED_OUT:
                raise
            return BrokerAnswer(error=e)
        return BrokerAnswer(answer)

    async def unregister_broker(self, access: Access, broker_id: int) -> None:
        self._require(access, O.ALTER)
        await self.c.write(lambda view: (self.c.brokers.unregister(view, broker_id), None))

    async def allocate_producer_ids(self, access: Access, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        self._require(access, O.CLUSTER_ACTION)

        def build(view: MetadataImage) -> tuple[list[MetadataRecord], int]:
            self.c.brokers.registration(view, broker_id, broker_epoch)
            start = view.next_producer_id
            return [producer_ids(broker_id, broker_epoch, start + PRODUCER_ID_BLOCK)], start
        try:
            start = await self.c.write(build)
        except KafkaError as e:
            if e.code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                return ProducerIdBlock(error=e)
            raise
        return ProducerIdBlock(start, PRODUCER_ID_BLOCK)

    # -------------------------------------------------------------------------- the metadata log

    async def fetch_metadata(self, access: Access, offset: int, *, max_wait_ms: int = 0, max_bytes: int = 0,
                             broker_id: int = -1) -> MetadataFetch:
        """Committed batches from ``offset`` on, waiting up to ``max_wait_ms`` for new ones; a
        broker (``broker_id`` >= 0) is remembered as an observer of the log."""
        self._require(access, O.CLUSTER_ACTION)
        await self.c.ensure_active()
        node = self.c.node
        offset = max(1, offset)
        if max_wait_ms > 0 and offset > node.applied:
            try:
                await node.wait_applied(offset, timeout=min(max_wait_ms, 30_000) / 1000)
            except asyncio.TimeoutError:
                pass
        head = (node.commit_index + 1, node.log_start, node.latest_snapshot.index, node.latest_snapshot.term)
        try:
            entries = node.committed_entries(offset, min(max_bytes or MAX_FETCH_BYTES, MAX_FETCH_BYTES))
        except LogCompacted:
            return MetadataFetch(*head, entries=[], error=ErrorCode.OFFSET_OUT_OF_RANGE)
        if broker_id >= 0:
            fetched = entries[-1].index if entries else offset - 1
            self.c.fetchers[broker_id] = (fetched, time.time() * 1000)
        return MetadataFetch(*head, entries=entries)

    async def fetch_snapshot(self, access: Access, snapshot_offset: int, position: int, max_bytes: int
                             ) -> SnapshotChunk:
        self._require(access, O.CLUSTER_ACTION)
        await self.c.ensure_active()
        src: SnapshotSource | None = self.c.node.snapshot_reader()
        if src is None or src.meta.index != snapshot_offset:
            return SnapshotChunk(src.meta.index if src is not None else 0, error=ErrorCode.OFFSET_OUT_OF_RANGE)
        pos = max(0, position)
        n = min(max_bytes or (1 << 20), 4 << 20)
        data = await asyncio.get_running_loop().run_in_executor(None, src.read, pos, n)
        return SnapshotChunk(src.meta.index, src.meta.term, src.meta.size, pos, data)

    # -------------------------------------------------------------------------- the quorum

    async def describe_quorum(self, access: Access) -> QuorumDescription:
        self._require(access, O.DESCRIBE)
        await self.c.ensure_active()
        node = self.c.node
        st = node.status()
        now_ms = time.time() * 1000
        leo = st.last_index + 1
        peers = {p.node_id: p for p in st.peers}

        def state(p: PeerInfo, directory: str) -> ReplicaState:
            heard = int(now_ms - p.last_contact_s * 1000) if p.last_contact_s >= 0 else -1
            return ReplicaState(p.node_id, p.match_index + 1, p.lag, heard, heard if p.lag == 0 else -1, directory,
                                self._endpoints(p.address))

        voters = []
        for v in st.voters:  # from the membership: a voter that is gone or formatted again shows as silent
            directory = st.directories.get(v, "")
            if v == node.id:
                voters.append(ReplicaState(v, leo, 0, int(now_ms), int(now_ms), directory,
                                           self._endpoints(node.address)))
            elif v in peers and peers[v].voter:
                voters.append(state(peers[v], directory))
            else:
                voters.append(ReplicaState(v, -1, -1, -1, -1, directory, self._endpoints(node.addresses.get(v))))
        # Observers: controllers catching up (learners, observers, replicas on a disk formatted
        # again), then the brokers fetching metadata.
        observers = [state(p, p.directory_id) for p in st.peers if not p.voter]
        observers += [ReplicaState(b, off + 1, max(0, leo - off - 1), int(ts), int(ts) if off + 1 >= leo else -1)
                      for b, (off, ts) in sorted(self.c.fetchers.items())]
        return QuorumDescription(node.cluster_id, node.id, st.term, st.commit_index + 1, voters, observers)

    def _endpoints(self, address: str | None) -> tuple[str, ...]:
        return (f"{self.listener_name}://{address}",) if address else ()

    async def add_voter(self, access: Access, request: AddVoter) -> None:
        self._require(access, O.ALTER)  # Kafka: ALTER on the cluster
        await self.c.ensure_active()
        await quorum.add_voter(self.c, request, self.listener_name)

    async def remove_voter(self, access: Access, request: RemoveVoter) -> None:
        self._require(access, O.ALTER)
        await self.c.ensure_active()
        await quorum.remove_voter(self.c, request)

    # -------------------------------------------------------------------------- ACLs

    def _acls_enabled(self) -> None:
        """Kafka answers the ACL requests SECURITY_DISABLED without an authorizer."""
        if self.authorizer is None:
            raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the controllers: set "
                                                        "authorizer.class.name to manage ACLs")

    async def create_acls(self, access: Access, acls: Sequence[StandardAcl | KafkaError]) -> list[KafkaError | None]:
        """``acls``: each wanted ACL, or why it is not one (answered in its place)."""
        self._require(access, O.ALTER)
        self._acls_enabled()
        check_request_size(len(acls), "ACLs")
        return await self.c.write(lambda view: create_acls(view.acls, list(acls)), in_thread=True)

    async def describe_acls(self, access: Access, wanted: AclBindingFilter | KafkaError) -> list[StandardAcl]:
        """``wanted``: the filter, or why it is not one (which refuses the request)."""
        self._require(access, O.DESCRIBE)
        self._acls_enabled()
        if isinstance(wanted, KafkaError):
            raise wanted
        image = await self.c.read_image()
        return await self.in_worker(lambda: sorted(acl for _, acl in matching(image.acls, wanted)))

    async def delete_acls(self, access: Access, filters: Sequence[AclBindingFilter | KafkaError]
                          ) -> list[list[StandardAcl] | KafkaError]:
        """Per filter: the ACLs it deleted (sorted), or why it was refused."""
        self._require(access, O.ALTER)
        self._acls_enabled()
        check_request_size(len(filters), "ACL filters")
        results = await self.c.write(lambda view: delete_acls(view.acls, list(filters), MAX_RECORDS_PER_USER_OP),
                                     in_thread=True)
        return [r if isinstance(r, KafkaError) else sorted(r) for r in results]

    # -------------------------------------------------------------------------- SCRAM credentials (KIP-554)

    async def alter_user_scram_credentials(self, access: Access, deletions: Sequence[ScramDeletion],
                                           upsertions: Sequence[ScramUpsertion]) -> list[ScramUserResult]:
        """ALTER on the cluster, as Kafka's ControllerApis; one result per user named."""
        self._require(access, O.ALTER)
        check_request_size(len(deletions) + len(upsertions), "credential changes")
        return await self.c.write(lambda view: alter_credentials(view.scram.users, deletions, upsertions),
                                  in_thread=True)

    async def describe_user_scram_credentials(self, access: Access, users: Sequence[str]) -> list[ScramUserResult]:
        """DESCRIBE on the cluster; ``users`` empty: every user with a credential (mechanisms
        and iterations only: the salted keys never leave the metadata log)."""
        self._require(access, O.DESCRIBE)
        check_request_size(len(users), "users")
        image = await self.c.read_image()
        return describe_credentials(image.scram.users, list(users))

    # -------------------------------------------------------------------------- client quotas (KIP-546)

    async def alter_client_quotas(self, access: Access, entries: Sequence[QuotaAlteration], *,
                                  validate_only: bool = False) -> list[QuotaAlterResult]:
        """ALTER_CONFIGS on the cluster, as Kafka's ControllerApis; one result per entry."""
        self._require(access, O.ALTER_CONFIGS)
        check_request_size(len(entries), "quota entries")
        return await self.c.write(lambda view: alter_quotas(view.client_quotas.entities, entries),
                                  validate_only=validate_only, in_thread=True)

    async def describe_client_quotas(self, access: Access, components: Sequence[QuotaFilterComponent],
                                     strict: bool) -> list[tuple[tuple[tuple[str, str | None], ...],
                                                                 dict[str, float]]]:
        """DESCRIBE_CONFIGS on the cluster; the matching entities and their keys."""
        self._require(access, O.DESCRIBE_CONFIGS)
        check_request_size(len(components), "filter components")
        image = await self.c.read_image()
        return describe_quotas(image.client_quotas.entities, components, strict)


def _describe_topics(image: MetadataImage, names: list[str], access: Access) -> TopicsDescription:
    named = bool(names)
    names = names or [n for n in sorted(image.topics_by_name) if access.topic(O.DESCRIBE, n, log_denial=False)]
    out = []
    for name in names:
        if named and not access.topic(O.DESCRIBE, name):
            out.append(TopicDescription(name, None, {}, KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                                 access.topic_denied(O.DESCRIBE, name))))
            continue
        t = image.topics_by_name.get(name)
        if t is None:
            out.append(TopicDescription(name, None, {}, KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                                 f"This server does not host this topic: {name}")))
            continue
        out.append(TopicDescription(name, t, dict(image.config(ConfigResource(ResourceType.TOPIC, name)))))
    return TopicsDescription(out, frozenset(b.id for b in image.brokers.values() if not b.fenced), image.offset)


def _protocol(name: str) -> SecurityProtocol:
    try:
        return SecurityProtocol[name or "PLAINTEXT"]
    except KeyError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown security protocol {name!r}: use "
                       f"{', '.join(p.name for p in SecurityProtocol)}") from None


def _config_refusal(access: Access, op: AclOperation, resource_type: int, name: str) -> KafkaError | None:
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
    if value == BROKER_LOGGER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unexpected resource type BROKER_LOGGER: this cluster has no "
                                                    "dynamic log levels (set them in the servers' logging setup)")
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {value}: use TOPIC (2) or BROKER (4)")

