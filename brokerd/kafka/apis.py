"""Kafka's APIs on the broker (Kafka's KafkaApis), a thin codec like the gRPC service: each
handler turns a request read by ``codec`` into the broker's domain request (``requests``,
``group_requests``, ``transaction_requests``), calls the same checked domain call the gRPC
service calls (``authorization``: produce, fetch, offsets, metadata, producer ids, the group
and transaction coordinators)
and turns the answer into Kafka's response, reading a field only in the versions that have
it. Admin requests go to the active controller, as a KRaft broker forwards them;
DescribeCluster is answered from the broker's metadata image, as Kafka's brokers do.

``VERSIONS`` is what ApiVersions advertises: the versions today's clients negotiate and kio
has schemas for. An API or version not listed is never sent by a client that asked, and one
that is sent anyway closes its connection (codec.MalformedRequest).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from common.errors import ErrorCode, KafkaError
from metadata.acls import CLUSTER_NAME, AclOperation, AclResourceType
from metadata.authorizer import OPERATIONS_NOT_ASKED, Access, StandardAuthorizer
from metadata.client import BoundRpc, ControllerClient
from metadata.configs import (BROKER_CONFIGS, TOPIC_CONFIGS, ConfigSource, broker_config_synonyms,
                              topic_config_synonyms)
from metadata.image import MetadataImage
from metadata.principal import Connection, PrincipalMapper, Session, stream_session
from clients.topics import INTERNAL_TOPICS
from protos import controller_pb2 as cpb

from .. import authorization as authorized
from .. import group_requests as gq
from ..group_requests import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from .. import requests as rq
from ..auto_topics import TopicAutoCreator
from ..cluster_metadata import live_brokers
from ..fetch_session import FetchSessionCache
from ..group_coordinator import GroupCoordinator
from ..producer_ids import ProducerIdManager
from ..replica_manager import ReplicaManager
from .. import transaction_requests as tq
from ..transaction_coordinator import TransactionCoordinator
from .batches import from_wire, stored_to_wire_parts
from .codec import RequestHeader, build, encode_response, ms, response_schema
from .data_path_codec import RecordParts
from .sasl import AuthenticationFailed, SaslAuthenticator
from .throttling import KafkaThrottling

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 0, 1, 2, 3, 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 12, 13, 14, 15, 16
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 18, 19, 20, 22, 23
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS = 29, 30, 31, 32
CREATE_PARTITIONS, DELETE_GROUPS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 37, 42, 43, 44
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, DESCRIBE_CLUSTER = 45, 46, 60
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
SASL_HANDSHAKE, SASL_AUTHENTICATE, CONSUMER_GROUP_HEARTBEAT = 17, 36, 68
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
DELETE_RECORDS, OFFSET_DELETE, DESCRIBE_PRODUCERS, DESCRIBE_LOG_DIRS = 21, 47, 61, 35
ALTER_CONFIGS, ALTER_REPLICA_LOG_DIRS = 33, 34

#: api key -> (min version, max version) served.
VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 9), FETCH: (4, 12), LIST_OFFSETS: (1, 8), METADATA: (1, 12), OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 7), FIND_COORDINATOR: (0, 4), JOIN_GROUP: (0, 9), HEARTBEAT: (0, 4), LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5), DESCRIBE_GROUPS: (0, 5), LIST_GROUPS: (0, 4), API_VERSIONS: (0, 3), CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6), INIT_PRODUCER_ID: (0, 4), OFFSET_FOR_LEADER_EPOCH: (2, 4), DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3), DELETE_GROUPS: (0, 2), INCREMENTAL_ALTER_CONFIGS: (0, 1), DESCRIBE_CLUSTER: (0, 1),
    ELECT_LEADERS: (0, 2), ALTER_PARTITION_REASSIGNMENTS: (0, 1), LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_ACLS: (1, 3), CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1),
    SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2),  # listed, as Kafka lists them on every listener
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # listed so that KIP-848 clients ask, and hear it is off
    ADD_PARTITIONS_TO_TXN: (0, 3), END_TXN: (0, 3),  # the client versions (v4+: KIP-890, between brokers)
    WRITE_TXN_MARKERS: (1, 1), ADD_OFFSETS_TO_TXN: (0, 3), TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_TRANSACTIONS: (0, 0), LIST_TRANSACTIONS: (0, 1),
    DELETE_RECORDS: (0, 2), OFFSET_DELETE: (0, 0), DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_LOG_DIRS: (1, 4),
    ALTER_CONFIGS: (0, 2), ALTER_REPLICA_LOG_DIRS: (1, 2),
}

#: DescribeConfigs' (v3+) config types, as Kafka numbers them (its sources: metadata.configs.ConfigSource).
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
#: KIP-848's protocol (group.protocol=consumer) is not served: Kafka's answer when it is off
#: (group.coordinator.rebalance.protocols without "consumer") is UNSUPPORTED_VERSION.
CONSUMER_PROTOCOL_UNSUPPORTED = ("The new consumer group protocol (KIP-848, group.protocol=consumer) is not enabled "
                                 "on this cluster: use group.protocol=classic")
#: A SASL request on a listener that is not SASL, as Kafka answers it.
SASL_UNSUPPORTED = "SASL is not enabled on this listener (it is PLAINTEXT or SSL): use security.protocol=PLAINTEXT or SSL"
#: The APIs a SASL listener serves before the client has authenticated (Kafka's).
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


#: The client id of the request being handled (its header's), for the handlers that keep it:
#: each request runs in its own task, so each sees its own.
_CLIENT_ID: ContextVar[str] = ContextVar("client_id", default="")


class CloseConnection(Exception):
    """Kafka's answer to an acks=0 produce that failed: no response, the connection closed,
    so that the client refreshes its metadata."""


def _uuid_bytes(u: uuid.UUID | None) -> bytes:
    return u.bytes if u is not None and u.int else b""


def _replica_fetch(api_key: int, request: Any) -> bool:
    """A follower's Fetch (its broker id as replica_id)."""
    return api_key == FETCH and request.replica_id >= 0


def _message(code: int, message: str) -> str | None:
    return message if code and message else None


def _epoch(value: int) -> int | None:
    """A leader epoch from a Kafka request (-1: not given) as the domain's optional epoch:
    None is not checked."""
    return value if value >= 0 else None


class KafkaApis:
    def __init__(self, rm: ReplicaManager, listener: str, groups: GroupCoordinator, producer_ids: ProducerIdManager,
                 controller: ControllerClient, authorizer: StandardAuthorizer | None = None,
                 mapper: PrincipalMapper | None = None, auto_topics: TopicAutoCreator | None = None,
                 transactions: TransactionCoordinator | None = None,
                 throttling: KafkaThrottling | None = None, fetch_sessions: FetchSessionCache | None = None) -> None:
        """``authorizer`` None: every request is allowed (no ``authorizer.class.name``);
        ``auto_topics`` None: Metadata creates no topic; ``transactions`` None: a transactional
        request is answered COORDINATOR_NOT_AVAILABLE; ``throttling`` None: no client quotas;
        ``fetch_sessions`` None: no fetch sessions (every fetch is a full one)."""
        self.fetch_sessions = fetch_sessions or FetchSessionCache(0)
        self.rm = rm
        self.auto_topics = auto_topics
        self.listener = listener
        self.groups = authorized.GroupAccess(groups)
        self.transactions = authorized.TransactionAccess(transactions) if transactions is not None else None
        self.producer_ids = producer_ids
        self.controller = controller
        self.authorizer = authorizer
        self.mapper = mapper or PrincipalMapper()
        self.throttling = throttling
        self.handlers: dict[int, Callable[[Any, int, Access], Awaitable[dict[str, Any] | None]]] = {
            PRODUCE: self.produce, FETCH: self.fetch, LIST_OFFSETS: self.list_offsets, METADATA: self.metadata,
            OFFSET_COMMIT: self.offset_commit, OFFSET_FETCH: self.offset_fetch,
            FIND_COORDINATOR: self.find_coordinator, JOIN_GROUP: self.join_group, HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group, SYNC_GROUP: self.sync_group, DESCRIBE_GROUPS: self.describe_groups,
            LIST_GROUPS: self.list_groups, API_VERSIONS: self.api_versions, CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics, INIT_PRODUCER_ID: self.init_producer_id,
            OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            DESCRIBE_CONFIGS: self.describe_configs, CREATE_PARTITIONS: self.create_partitions,
            DELETE_GROUPS: self.delete_groups, INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            DESCRIBE_CLUSTER: self.describe_cluster, ELECT_LEADERS: self.elect_leaders,
            ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
            CREATE_ACLS: self.create_acls, DESCRIBE_ACLS: self.describe_acls, DELETE_ACLS: self.delete_acls,
            DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas, ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            SASL_HANDSHAKE: self.sasl_handshake, SASL_AUTHENTICATE: self.sasl_authenticate,
            CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
            ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn, END_TXN: self.end_txn,
            WRITE_TXN_MARKERS: self.write_txn_markers, ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            TXN_OFFSET_COMMIT: self.txn_offset_commit, DESCRIBE_TRANSACTIONS: self.describe_transactions,
            LIST_TRANSACTIONS: self.list_transactions,
            DELETE_RECORDS: self.delete_records, OFFSET_DELETE: self.offset_delete,
            DESCRIBE_PRODUCERS: self.describe_producers, DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            ALTER_CONFIGS: self.alter_configs, ALTER_REPLICA_LOG_DIRS: self.alter_replica_log_dirs,
        }
        self._api_names = {key: "".join(w.capitalize() for w in fn.__name__.split("_"))
                           for key, fn in self.handlers.items()}

    @property
    def image(self) -> MetadataImage:
        return self.rm.image

    def api_name(self, api_key: int) -> str:
        """Kafka's name of an API (``list_offsets`` serves ListOffsets), for request metrics."""
        return self._api_names.get(api_key) or str(api_key)

    def session(self, writer: Connection) -> Session:
        """Who is connected (once per connection): its TLS client certificate's principal,
        else ANONYMOUS; PrincipalError when no mapping rule maps the certificate."""
        return stream_session(writer, self.mapper)

    async def handle(self, header: RequestHeader, request: Any, session: Session) -> Any | None:
        """The response entity for a request (None: no response, acks=0)."""
        _CLIENT_ID.set(header.client_id or "")
        answer, image = None, self.image
        # client quotas: counted and answered at the request boundary; a follower's fetch is
        # replication, which Kafka's client quotas leave alone (replication quotas bound it)
        throttling = self.throttling if not _replica_fetch(header.api_key, request) else None
        if throttling is not None:
            request = throttling.before(header.api_key, request, session, header.client_id or "")
            answer = throttling.refusal(header.api_key, header.api_version, request, session, header.client_id or "")
        timer = None
        if answer is None:
            work = self.handlers[header.api_key](request, header.api_version, Access(self.authorizer, session))
            if throttling is not None:  # request_percentage: the handler's time on the loop
                timer = throttling.timed(header.api_key, session, header.client_id or "", work)
            answer = await (timer or work)
        if answer is None:
            return None
        if throttling is not None:
            throttling.after(header.api_key, request, answer, session, header.client_id or "", image, timer)
        if timer is None or throttling is None:
            return encode_response(header, answer)
        start = time.perf_counter()  # the response's encoding counts too, towards the client's next request
        response = encode_response(header, answer)
        throttling.charge(timer, time.perf_counter() - start)
        return response

    # -- versions and metadata -------------------------------------------------------------------

    async def api_versions(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        return {"error_code": 0, "api_keys": api_version_list()}

    async def sasl_handshake(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """Kafka's KafkaApis.handleSaslHandshakeRequest: a SASL listener's authenticator serves
        it (``sasl_answer``), so what reaches here came on a PLAINTEXT or SSL listener and is
        answered ILLEGAL_SASL_STATE with no mechanisms (librdkafka and kafka-python stop at it)."""
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}

    async def sasl_authenticate(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "error_message": SASL_UNSUPPORTED,
                "auth_bytes": b""}

    async def metadata(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        wanted = req.topics
        names: list[str] = []
        for t in wanted or ():
            name = t.name
            if name is None and version >= 10:  # v10+ may name a topic by its id alone
                found = self.image.topics_by_id.get(t.topic_id)
                name = found.name if found is not None else str(t.topic_id)
            names.append(name or "")
        # null asks for every topic, [] for none (a client that wants only the brokers)
        answer = authorized.metadata(self.rm, rq.MetadataRequest(topics=names), self.listener, -1, access) \
            if wanted is None or wanted else None
        if answer is not None and wanted and self.auto_topics is not None:
            # v1-v3 have no flag: those clients always allowed creation, as Kafka answers them
            await self.auto_topics.resolve(answer, access,
                                           allowed=req.allow_auto_topic_creation if version >= 4 else True,
                                           named={t.name for t in wanted if t.name})
        brokers = answer.brokers if answer is not None else live_brokers(self.image, self.listener)
        topics = answer.topics if answer is not None else []
        topic_ops = version >= 8 and req.include_topic_authorized_operations
        out: dict[str, Any] = {
            "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack or None}
                        for b in brokers],
            "cluster_id": self.image.cluster_id,
            # Kafka clients send admin requests to the "controller"; in KRaft a broker names a live
            # broker (itself here), which forwards them to the active controller.
            "controller_id": self.rm.broker_id,
            "topics": [{"error_code": t.error_code, "name": t.name, "topic_id": t.topic_id,
                        "is_internal": t.name in INTERNAL_TOPICS,
                        "topic_authorized_operations": access.authorized_operations(AclResourceType.TOPIC, t.name)
                        if topic_ops else OPERATIONS_NOT_ASKED,
                        "partitions": [{"error_code": p.error_code, "partition_index": p.partition,
                                        "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                                        "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
                                        "offline_replicas": list(p.offline_replicas)} for p in t.partitions]}
                       for t in topics],
        }
        # Only v8-v10 have it (KIP-700 moved it to DescribeCluster): a name that neither the
        # version asked nor the newest has made the encoder's name check import all 13 versions
        # of the answer's schema, 147 ms of CPU at a broker's first Metadata v11+ answer
        # (codec._check_names; docs/brokers.md "The produce path per request, again").
        if 8 <= version <= 10:
            out["cluster_authorized_operations"] = access.authorized_operations(
                AclResourceType.CLUSTER, CLUSTER_NAME) if req.include_cluster_authorized_operations \
                else OPERATIONS_NOT_ASKED
        return out

    async def describe_cluster(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        if not access.cluster(AclOperation.DESCRIBE):
            return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "brokers": [], "controller_id": -1,
                    "error_message": access.cluster_denied(AclOperation.DESCRIBE), "cluster_id": ""}
        return {"error_code": 0, "cluster_id": self.image.cluster_id, "controller_id": self.rm.broker_id,
                "brokers": [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack or None}
                            for b in live_brokers(self.image, self.listener)],
                "cluster_authorized_operations": access.authorized_operations(AclResourceType.CLUSTER, CLUSTER_NAME)
                if req.include_cluster_authorized_operations else OPERATIONS_NOT_ASKED}

    # -- produce, fetch, offsets ---------------------------------------------------------------

    async def produce(self, req: Any, version: int, access: Access) -> dict[str, Any] | None:
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        order: list[tuple[str, int]] = []
        ours = rq.ProduceRequest(acks=req.acks, timeout_ms=ms(req.timeout), transactional_id=req.transactional_id)
        for t in req.topic_data:
            topic = rq.ProduceTopicData(name=t.name)
            ours.topics.append(topic)
            for pd in t.partition_data:
                order.append((t.name, pd.index))
                try:
                    batch = from_wire(pd.records or b"", f"{t.name}-{pd.index}")
                except KafkaError as e:
                    answers[(t.name, pd.index)] = _produce_error(pd.index, e)
                    continue
                topic.partitions.append(rq.ProducePartitionData(partition=pd.index, batch=batch))
        resp = await authorized.produce(self.rm, ours, access)
        for t in resp.topics:
            for a in t.partitions:
                answers[(t.name, a.partition)] = {
                    "index": a.partition, "error_code": a.error_code, "base_offset": a.base_offset,
                    "log_append_time": a.log_append_time if a.log_append_time >= 0 else None,
                    "log_start_offset": a.log_start_offset, "error_message": _message(a.error_code, a.error_message),
                    "record_errors": [{"batch_index": r.batch_index, "batch_index_error_message": r.message}
                                      for r in a.record_errors]}
        if req.acks == 0:
            if any(a["error_code"] for a in answers.values()):
                raise CloseConnection(next(f"{n}-{p}: {ErrorCode.of(answers[(n, p)]['error_code']).name}"
                                           for n, p in order if answers[(n, p)]["error_code"]))
            return None
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for key in order:
            by_topic.setdefault(key[0], []).append(answers[key])
        return {"responses": [{"name": n, "partition_responses": ps} for n, ps in by_topic.items()]}

    async def fetch(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """A consumer's fetch, or a follower's (replica_id: its broker id; replica.fetch.protocol=kafka),
        which reads up to the log end and tells the leader its log end and log start."""
        follower = req.replica_id >= 0
        topics = [rq.FetchTopic(name=t.topic, partitions=[
            rq.FetchPartition(partition=fp.partition, fetch_offset=fp.fetch_offset,
                              log_start_offset=fp.log_start_offset if follower and version >= 5 else -1,
                              partition_max_bytes=max(1, fp.partition_max_bytes),
                              current_leader_epoch=_epoch(fp.current_leader_epoch) if version >= 9 else None)
            for fp in t.partitions]) for t in req.topics]
        ours = rq.FetchRequest(replica_id=req.replica_id if follower else -1, max_wait_ms=ms(req.max_wait),
                               min_bytes=req.min_bytes, max_bytes=max(1, req.max_bytes), topics=topics,
                               isolation_level=req.isolation_level,
                               rack_id=req.rack_id if version >= 11 else None)
        # KIP-227: v7+ may continue a session (v4-v6 are sessionless, as epoch -1 is)
        forgotten = [(t.topic, t.partitions) for t in req.forgotten_topics_data] if version >= 7 else []
        try:
            context = self.fetch_sessions.begin(req.session_id if version >= 7 else 0,
                                                req.session_epoch if version >= 7 else -1, ours, forgotten)
        except KafkaError as e:
            return {"error_code": int(e.code), "session_id": 0, "responses": []}
        # the stored batches as read: their records go to the socket as views
        session_id, resp = context.finish(await authorized.fetch(self.rm, context.request, access))
        return {"error_code": 0, "session_id": session_id, "responses": [
            {"topic": t.name, "partitions": [
                {"partition_index": a.partition, "error_code": a.error_code, "high_watermark": a.high_watermark,
                 "last_stable_offset": a.last_stable_offset, "log_start_offset": a.log_start_offset,
                 "aborted_transactions": [{"producer_id": x.producer_id, "first_offset": x.first_offset}
                                          for x in a.aborted_transactions] if req.isolation_level else None,
                 "current_leader": {"leader_id": a.leader_id, "leader_epoch": a.leader_epoch}
                 if a.error_code else {}, "records": RecordParts.of(stored_to_wire_parts(a.frames)),
                 **({"preferred_read_replica": a.preferred_read_replica} if version >= 11 else {})}  # KIP-392
                for a in t.partitions]}
            for t in resp.topics]}

    async def list_offsets(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = rq.ListOffsetsRequest(topics=[rq.ListOffsetsTopic(name=t.name, partitions=[
            rq.ListOffsetsPartition(partition=lp.partition_index, timestamp=ms(lp.timestamp),
                                   current_leader_epoch=_epoch(lp.current_leader_epoch) if version >= 4 else None)
            for lp in t.partitions]) for t in req.topics], isolation_level=req.isolation_level if version >= 2 else 0)
        resp = authorized.list_offsets(self.rm, ours, access)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": a.partition, "error_code": a.error_code, "timestamp": a.timestamp, "offset": a.offset,
             "leader_epoch": a.leader_epoch} for a in t.partitions]} for t in resp.topics]}

    async def delete_records(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = rq.DeleteRecordsRequest(timeout_ms=ms(req.timeout), topics=[rq.DeleteRecordsTopic(
            name=t.name, partitions=[rq.DeleteRecordsPartition(partition=dp.partition_index, offset=dp.offset)
                                     for dp in t.partitions]) for t in req.topics])
        resp = await authorized.delete_records(self.rm, ours, access)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": a.partition, "error_code": a.error_code, "low_watermark": a.low_watermark}
            for a in t.partitions]} for t in resp.topics]}

    async def describe_producers(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = rq.DescribeProducersRequest(topics=[rq.DescribeProducersTopic(
            name=t.name, partitions=list(t.partition_indexes)) for t in req.topics])
        resp = authorized.describe_producers(self.rm, ours, access)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": a.partition, "error_code": a.error_code,
             "error_message": _message(a.error_code, a.error_message), "active_producers": [
                 {"producer_id": x.producer_id, "producer_epoch": x.producer_epoch,
                  "last_sequence": x.last_sequence, "last_timestamp": x.last_timestamp,
                  "coordinator_epoch": x.coordinator_epoch, "current_txn_start_offset": x.current_txn_start_offset}
                 for x in a.active_producers]} for a in t.partitions]} for t in resp.topics]}

    async def describe_log_dirs(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        topics = None if req.topics is None else [rq.DescribeLogDirsTopic(name=t.topic, partitions=list(t.partitions))
                                                  for t in req.topics]
        resp = authorized.describe_log_dirs(self.rm, rq.DescribeLogDirsRequest(topics=topics), access)
        return {"error_code": resp.error_code, "results": [
            {"error_code": d.error_code, "log_dir": d.log_dir, "total_bytes": d.total_bytes,
             "usable_bytes": d.usable_bytes, "topics": [{"name": t.name, "partitions": [
                 {"partition_index": x.partition, "partition_size": x.size_bytes, "offset_lag": x.offset_lag,
                  "is_future_key": x.is_future} for x in t.partitions]} for t in d.topics]}
            for d in resp.log_dirs]}

    async def alter_replica_log_dirs(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = rq.AlterReplicaLogDirsRequest(dirs=[rq.AlterReplicaLogDir(path=d.path, topics=[
            rq.AlterReplicaLogDirsTopic(name=t.name, partitions=list(t.partitions)) for t in d.topics])
            for d in req.dirs])
        resp = authorized.alter_replica_log_dirs(self.rm, ours, access)
        return {"results": [{"topic_name": t.name, "partitions": [
            {"partition_index": x.partition, "error_code": x.error_code} for x in t.partitions]}
            for t in resp.topics]}

    async def offset_for_leader_epoch(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """A consumer validating its position after a leader change (KIP-320), or a follower
        before it fetches under a new leader epoch (KIP-101): where an epoch ends on the leader."""
        ours = rq.OffsetsForLeaderEpochRequest(replica_id=req.replica_id if version >= 3 else -1, topics=[
            rq.OffsetForLeaderTopic(name=t.topic, partitions=[
                rq.OffsetForLeaderPartition(partition=p.partition, leader_epoch=p.leader_epoch,
                                            current_leader_epoch=_epoch(p.current_leader_epoch))
                for p in t.partitions]) for t in req.topics])
        resp = authorized.offsets_for_leader_epoch(self.rm, ours, access)
        return {"topics": [{"topic": t.name, "partitions": [
            {"error_code": a.error_code, "partition": a.partition, "leader_epoch": a.leader_epoch,
             "end_offset": a.end_offset} for a in t.partitions]} for t in resp.topics]}

    async def init_producer_id(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        if req.transactional_id is not None:
            if self.transactions is None:
                return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "producer_id": -1, "producer_epoch": -1}
            t = await self.transactions.init_producer_id(tq.InitTransactionalProducerRequest(
                transactional_id=req.transactional_id, transaction_timeout_ms=ms(req.transaction_timeout),
                producer_id=req.producer_id if version >= 3 else -1,
                producer_epoch=req.producer_epoch if version >= 3 else -1), access)
            return {"error_code": _fenced(t.error_code, version >= 4), "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch}
        returning = version >= 3 and req.producer_id >= 0  # v3+: a returning producer bumps its epoch
        ours = rq.InitProducerIdRequest(producer_id=req.producer_id, producer_epoch=req.producer_epoch) \
            if returning else rq.InitProducerIdRequest()
        resp = await authorized.init_producer_id(self.producer_ids, ours, access)
        return {"error_code": resp.error_code, "producer_id": resp.producer_id if not resp.error_code else -1,
                "producer_epoch": resp.producer_epoch if not resp.error_code else -1}

    # -- transactions ----------------------------------------------------------------------------

    async def add_partitions_to_txn(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """The client versions (v0-v3): one transaction per request."""
        ours = tq.AddPartitionsToTxnRequest(
            transactional_id=req.v3_and_below_transactional_id, producer_id=req.v3_and_below_producer_id,
            producer_epoch=req.v3_and_below_producer_epoch,
            partitions=[(t.name, i) for t in req.v3_and_below_topics for i in t.partitions])
        if self.transactions is None:
            a = tq.AddPartitionsToTxnResponse(results=[tq.TxnPartitionResult(
                topic=n, partition=i, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE)) for n, i in ours.partitions])
        else:
            a = await self.transactions.add_partitions(ours, access)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for x in a.results:
            by_topic.setdefault(x.topic, []).append(
                {"partition_index": x.partition, "partition_error_code": _fenced(x.error_code, version >= 2)})
        return {"results_by_topic_v3_and_below": [{"name": n, "results_by_partition": ps}
                                                  for n, ps in by_topic.items()]}

    async def add_offsets_to_txn(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        if self.transactions is None:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE)}
        a = await self.transactions.add_offsets(tq.AddOffsetsToTxnRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            group_id=req.group_id), access)
        return {"error_code": _fenced(a.error_code, version >= 2)}

    async def txn_offset_commit(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """To the group coordinator; v3 names the member (KIP-447), whose generation is checked."""
        offsets = gq.OffsetCommitRequest(
            group_id=req.group_id, generation_id=req.generation_id if version >= 3 else -1,
            member_id=req.member_id if version >= 3 else "",
            group_instance_id=req.group_instance_id if version >= 3 else None,
            topics=[gq.OffsetCommitTopic(name=t.name, partitions=[gq.OffsetCommitPartition(
                partition=p.partition_index, offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 2 else -1, metadata=p.committed_metadata or "")
                for p in t.partitions]) for t in req.topics])
        a = await self.groups.txn_offset_commit(tq.TxnOffsetCommitRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            offsets=offsets), access)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition, "error_code": _fenced(p.error_code, version >= 2)} for p in t.partitions]}
            for t in a.topics]}

    async def list_transactions(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """The transactions this broker coordinates (kafka-transactions.sh --list asks every broker)."""
        if self.transactions is None:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "unknown_state_filters": [],
                    "transaction_states": []}
        a = self.transactions.list_transactions(tq.ListTransactionsRequest(
            states=list(req.state_filters), producer_ids=list(req.producer_id_filters),
            min_duration_ms=req.duration_filter if version >= 1 else -1), access)
        return {"error_code": a.error_code, "unknown_state_filters": a.unknown_states, "transaction_states": [
            {"transactional_id": x.transactional_id, "producer_id": x.producer_id, "transaction_state": x.state}
            for x in a.transactions]}

    async def describe_transactions(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ids = list(req.transactional_ids)
        found = self.transactions.describe_transactions(ids, access) if self.transactions is not None else \
            [tq.DescribedTransaction(transactional_id=i, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
             for i in ids]
        states = []
        for x in found:
            by_topic: dict[str, list[int]] = {}
            for topic, index in x.partitions:
                by_topic.setdefault(topic, []).append(index)
            states.append({"error_code": x.error_code, "transactional_id": x.transactional_id,
                           "transaction_state": x.state, "transaction_timeout": x.timeout_ms,
                           "transaction_start_time": x.start_ms, "producer_id": x.producer_id,
                           "producer_epoch": x.producer_epoch,
                           "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]})
        return {"transaction_states": states}

    async def end_txn(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        if self.transactions is None:
            return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE)}
        a = await self.transactions.end_txn(tq.EndTxnRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            committed=req.committed), access)
        return {"error_code": _fenced(a.error_code, version >= 2)}

    async def write_txn_markers(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """Served for completeness: our coordinators send markers over the brokers' gRPC."""
        ours = tq.WriteTxnMarkersRequest(markers=[tq.WritableTxnMarker(
            producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_result=m.transaction_result,
            coordinator_epoch=m.coordinator_epoch,
            topics=[tq.WritableTxnMarkerTopic(name=t.name, partitions=list(t.partition_indexes)) for t in m.topics])
            for m in req.markers])
        a = await authorized.write_txn_markers(self.rm, ours, access, self.groups.groups)
        if a is None:
            return {"markers": [{"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": i,
                                                 "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}
                                                for i in t.partition_indexes]} for t in m.topics]}
                for m in req.markers]}
        return {"markers": [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition, "error_code": p.error_code}
                                            for p in t.partitions]} for t in m.topics]} for m in a.markers]}

    # -- groups --------------------------------------------------------------------------------

    async def consumer_group_heartbeat(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """KIP-848's one request, as Kafka answers it with the new protocol disabled."""
        return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "error_message": CONSUMER_PROTOCOL_UNSUPPORTED,
                "member_id": None, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}

    async def find_coordinator(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        keys = list(req.coordinator_keys) if version >= 4 else [req.key]
        key_type = req.key_type if version >= 1 else COORDINATOR_GROUP
        found = []
        for key in keys:
            if key_type == COORDINATOR_TRANSACTION:
                c = await self.transactions.find_coordinator(key, self.listener, access) if self.transactions \
                    else gq.FindCoordinatorResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            elif key_type != COORDINATOR_GROUP:
                c = gq.FindCoordinatorResponse(error_code=int(ErrorCode.INVALID_REQUEST),
                                              error_message=f"unknown coordinator key type {key_type}")
            else:
                c = await self.groups.find_coordinator(gq.FindCoordinatorRequest(key=key), self.listener, access)
            found.append({"key": key, "node_id": c.node_id if not c.error_code else -1, "host": c.host,
                          "port": c.port if not c.error_code else -1, "error_code": c.error_code,
                          "error_message": _message(c.error_code, c.error_message)})
        if version >= 4:
            return {"coordinators": found}
        one = found[0]  # v0-v3 answer for the one key, at the top level, without naming it
        return {name: one[name] for name in ("node_id", "host", "port", "error_code", "error_message")}

    async def join_group(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        rebalance_timeout = req.rebalance_timeout if version >= 1 else req.session_timeout  # v0: one timeout
        ours = gq.JoinGroupRequest(group_id=req.group_id, session_timeout_ms=ms(req.session_timeout),
                                  rebalance_timeout_ms=ms(rebalance_timeout),
                                  member_id=req.member_id, protocol_type=req.protocol_type,
                                  group_instance_id=req.group_instance_id if version >= 5 else None,
                                  protocols=[gq.JoinGroupProtocol(name=p.name, metadata=p.metadata)
                                             for p in req.protocols],
                                  client_id=_CLIENT_ID.get(), client_host=f"/{access.session.host}",
                                  reason=req.reason if version >= 8 else None, skip_assignment_supported=version >= 9)
        a = await self.groups.join_group(ours, access)
        return {"error_code": a.error_code, "generation_id": a.generation_id, "protocol_type": req.protocol_type,
                "protocol_name": a.protocol_name or None, "leader": a.leader, "member_id": a.member_id,
                "skip_assignment": a.skip_assignment,
                "members": [{"member_id": m.member_id, "metadata": m.metadata, "group_instance_id": m.group_instance_id}
                            for m in a.members]}

    async def sync_group(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = gq.SyncGroupRequest(group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
                                  group_instance_id=req.group_instance_id if version >= 3 else None,
                                  assignments=[gq.SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment)
                                               for a in req.assignments])
        a = await self.groups.sync_group(ours, access)
        return {"error_code": a.error_code, "assignment": a.assignment,
                "protocol_type": req.protocol_type if version >= 5 else None,
                "protocol_name": req.protocol_name if version >= 5 else None}

    async def heartbeat(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = gq.HeartbeatRequest(group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
                                  group_instance_id=req.group_instance_id if version >= 3 else None)
        return {"error_code": (await self.groups.heartbeat(ours, access)).error_code}

    async def leave_group(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        members = [gq.MemberIdentity(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                     reason=m.reason if version >= 5 else None)
                   for m in req.members] if version >= 3 else [gq.MemberIdentity(member_id=req.member_id)]
        a = await self.groups.leave_group(gq.LeaveGroupRequest(group_id=req.group_id, members=members), access)
        code = a.error_code
        if version < 3 and not code and a.members:
            code = a.members[0].error_code
        return {"error_code": code, "members": [
            {"member_id": m.member_id, "error_code": m.error_code, "group_instance_id": m.group_instance_id}
            for m in a.members]}

    async def offset_commit(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = gq.OffsetCommitRequest(
            group_id=req.group_id, generation_id=req.generation_id_or_member_epoch, member_id=req.member_id,
            group_instance_id=req.group_instance_id if version >= 7 else None,
            topics=[gq.OffsetCommitTopic(name=t.name, partitions=[gq.OffsetCommitPartition(
                partition=p.partition_index, offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1, metadata=p.committed_metadata or "")
                for p in t.partitions]) for t in req.topics])
        a = await self.groups.offset_commit(ours, access)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions]} for t in a.topics]}

    async def offset_fetch(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = gq.OffsetFetchRequest(group_id=req.group_id, topics=[
            gq.OffsetFetchTopic(name=t.name, partitions=list(t.partition_indexes)) for t in req.topics or ()],
            require_stable=req.require_stable if version >= 7 else False)
        a = await self.groups.offset_fetch(ours, access)
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p.partition, "committed_offset": p.offset, "committed_leader_epoch": p.leader_epoch,
             "metadata": p.metadata, "error_code": p.error_code or a.error_code} for p in t.partitions]}
            for t in a.topics]
        if a.error_code and req.topics:  # the group-level error on each partition too (v1 has no other place)
            topics = [{"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "metadata": "", "error_code": a.error_code}
                for i in t.partition_indexes]} for t in req.topics]
        return {"error_code": a.error_code, "topics": topics}

    async def list_groups(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        a = self.groups.list_groups(access)
        wanted = {s.lower() for s in req.states_filter} if version >= 4 else set()
        return {"error_code": a.error_code, "groups": [
            {"group_id": x.group_id, "protocol_type": x.protocol_type, "group_state": x.state}
            for x in a.groups if not wanted or x.state.lower() in wanted]}

    async def describe_groups(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        a = self.groups.describe_groups(gq.DescribeGroupsRequest(groups=list(req.groups)), access)
        ops = version >= 3 and req.include_authorized_operations
        return {"groups": [
            {"error_code": x.error_code, "group_id": x.group_id, "group_state": x.state,
             "authorized_operations": access.authorized_operations(AclResourceType.GROUP, x.group_id)
             if ops and x.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED else OPERATIONS_NOT_ASKED,
             "protocol_type": x.protocol_type, "protocol_data": x.protocol, "members": [
                 {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                  "member_metadata": m.metadata, "member_assignment": m.assignment,
                  "group_instance_id": m.group_instance_id}
                 for m in x.members]} for x in a.groups]}

    async def delete_groups(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        a = await self.groups.delete_groups(gq.DeleteGroupsRequest(groups=list(req.groups_names)), access)
        return {"results": [{"group_id": x.group_id, "error_code": x.error_code} for x in a.results]}

    async def offset_delete(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = gq.OffsetDeleteRequest(group_id=req.group_id, topics=[gq.OffsetDeleteTopic(
            name=t.name, partitions=[p.partition_index for p in t.partitions]) for t in req.topics])
        a = await self.groups.offset_delete(ours, access)
        return {"error_code": a.error_code, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions]} for t in a.topics]}

    # -- admin, forwarded to the active controller ---------------------------------------------

    async def _forward(self, rpc: BoundRpc[Any, Any], request: Any, access: Access) -> tuple[Any, ErrorCode, str]:
        """The request to the active controller, which authorizes it for the client's principal
        (carried as Kafka's EnvelopeRequest carries it)."""
        try:
            return await rpc(request, on_behalf_of=access.session), ErrorCode.NONE, ""
        except KafkaError as e:
            return None, ErrorCode.of(int(e.code)), e.message

    async def create_topics(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.CreateTopicsRequest(validate_only=req.validate_only if version >= 1 else False)
        for t in req.topics:
            ours.topics.add(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                            assignments=[cpb.ReplicaAssignment(partition=a.partition_index, replicas=list(a.broker_ids))
                                         for a in t.assignments],
                            configs={c.name: c.value or "" for c in t.configs})
        r, code, message = await self._forward(self.controller.create_topics, ours, access)
        if r is None:
            return {"topics": [{"name": t.name, "error_code": int(code), "error_message": message}
                               for t in req.topics]}
        return {"topics": [{"name": t.name, "topic_id": t.topic_id, "error_code": t.error_code,
                            "error_message": _message(t.error_code, t.error_message),
                            "num_partitions": t.num_partitions if not t.error_code else -1,
                            "replication_factor": t.replication_factor if not t.error_code else -1,
                            "configs": None if t.error_code else []} for t in r.topics]}

    async def delete_topics(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DeleteTopicsRequest()
        if version >= 6:
            for t in req.topics:
                if t.name is not None:
                    ours.names.append(t.name)
                else:
                    ours.topic_ids.append(_uuid_bytes(t.topic_id))
        else:
            ours.names.extend(req.topic_names)
        r, code, message = await self._forward(self.controller.delete_topics, ours, access)
        if r is None:
            return {"responses": [{"name": n, "error_code": int(code), "error_message": message} for n in ours.names]}
        return {"responses": [{"name": t.name, "topic_id": t.topic_id, "error_code": t.error_code,
                               "error_message": _message(t.error_code, t.error_message)} for t in r.topics]}

    async def create_partitions(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.CreatePartitionsRequest(validate_only=req.validate_only)
        image = self.image
        for t in req.topics:
            topic = ours.topics.add(name=t.name, count=t.count)
            existing = image.topics_by_name.get(t.name)
            first = len(existing.partitions) if existing is not None else 0
            for i, a in enumerate(t.assignments or ()):
                topic.assignments.add(partition=first + i, replicas=list(a.broker_ids))
        r, code, message = await self._forward(self.controller.create_partitions, ours, access)
        if r is None:
            return {"results": [{"name": t.name, "error_code": int(code), "error_message": message} for t in req.topics]}
        return {"results": [{"name": t.name, "error_code": t.error_code,
                             "error_message": _message(t.error_code, t.error_message)} for t in r.topics]}

    async def elect_leaders(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """kafka-leader-election.sh; v0 has no election type (preferred)."""
        kind = req.election_type if version >= 1 else 0
        ours = cpb.ElectLeadersRequest(election_type=cpb.ElectLeadersRequest.UNCLEAN if kind == 1 else
                                       cpb.ElectLeadersRequest.PREFERRED)
        for t in req.topic_partitions or ():
            ours.topics.add(name=t.topic, partitions=list(t.partitions))
        r, code, message = await self._forward(self.controller.elect_leaders, ours, access)
        if r is None:
            return {"error_code": int(code), "replica_election_results": [
                {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": int(code),
                                                         "error_message": message} for p in t.partitions]}
                for t in req.topic_partitions or ()]}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for x in r.results:
            by_topic.setdefault(x.topic, []).append({"partition_id": x.partition, "error_code": x.error_code,
                                                     "error_message": _message(x.error_code, x.error_message)})
        return {"error_code": 0, "replica_election_results": [
            {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}

    async def alter_partition_reassignments(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """kafka-reassign-partitions.sh --execute/--cancel. With v1's
        allow_replication_factor_change false (KIP-860), a plan that changes a partition's
        replica count is refused here, whole, as the controller refuses invalid plans."""
        ours = cpb.AlterPartitionReassignmentsRequest()
        refused: dict[tuple[str, int], str] = {}
        for t in req.topics:
            topic = self.image.topics_by_name.get(t.name)
            for p in t.partitions:
                entry = ours.reassignments.add(topic=t.name, partition=p.partition_index)
                if p.replicas is not None:
                    entry.replicas.ids.extend(p.replicas)
                    current = topic.partitions.get(p.partition_index) if topic is not None else None
                    if (version >= 1 and not req.allow_replication_factor_change and current is not None
                            and len(p.replicas) != len(current.target)):
                        refused[(t.name, p.partition_index)] = (
                            f"the plan changes the replication factor of {t.name}-{p.partition_index} from "
                            f"{len(current.target)} to {len(p.replicas)}, and allow_replication_factor_change is false")
        if refused:
            results = {(x.topic, x.partition): (
                (ErrorCode.INVALID_REPLICATION_FACTOR, refused[(x.topic, x.partition)]) if (x.topic, x.partition)
                in refused else (ErrorCode.INVALID_REQUEST, "not started: other entries of the plan are invalid"))
                for x in ours.reassignments}
            code, message = ErrorCode.NONE, ""
        else:
            r, code, message = await self._forward(self.controller.alter_partition_reassignments, ours, access)
            results = {(x.topic, x.partition): (ErrorCode.of(x.error_code), x.error_message)
                       for x in (r.results if r is not None else ())}

        def answer(topic: str, index: int) -> dict[str, Any]:
            c, m = results.get((topic, index), (code, message))
            return {"partition_index": index, "error_code": int(c), "error_message": _message(int(c), m)}
        return {"error_code": int(code), "error_message": message or None,
                "allow_replication_factor_change": True if version < 1 else req.allow_replication_factor_change,
                "responses": [{"name": t.name, "partitions": [answer(t.name, p.partition_index) for p in t.partitions]}
                              for t in req.topics]}

    async def list_partition_reassignments(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.ListPartitionReassignmentsRequest()
        for t in req.topics or ():
            ours.topics.add(name=t.name, partitions=list(t.partition_indexes))
        r, code, message = await self._forward(self.controller.list_partition_reassignments, ours, access)
        if r is None:
            return {"error_code": int(code), "error_message": message, "topics": []}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for o in r.reassignments:
            by_topic.setdefault(o.topic, []).append({
                "partition_index": o.partition, "replicas": list(o.replicas),
                "adding_replicas": list(o.adding_replicas), "removing_replicas": list(o.removing_replicas)})
        return {"error_code": 0, "error_message": None,
                "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}

    async def describe_configs(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DescribeConfigsRequest(resources=[
            cpb.AlterConfigsResource(resource_type=r.resource_type, resource_name=r.resource_name)
            for r in req.resources])
        r, code, message = await self._forward(self.controller.describe_configs, ours, access)
        if r is None:
            return {"results": [{"error_code": int(code), "error_message": message, "resource_type": x.resource_type,
                                 "resource_name": x.resource_name} for x in req.resources]}
        results = []
        documented = version >= 3 and req.include_documentation
        cfg, image = self.rm.config, self.rm.image
        for asked, got in zip(req.resources, r.resources, strict=True):
            keys = set(asked.configuration_keys) if asked.configuration_keys is not None else None
            topic = got.resource_type == cpb.TOPIC
            table = TOPIC_CONFIGS if topic else BROKER_CONFIGS
            own = {c.name: c.value for c in got.configs if not c.is_default}  # the controller's, never stale
            layers = cfg.config_layers(image, str(cfg.node_id) if topic else got.resource_name)
            if not topic:  # the resource's own layer as the controller answered it
                layers = [(layers[0][0], own), *layers[1:]]
            configs = []
            for c in got.configs:
                if keys is not None and c.name not in keys:
                    continue
                # Kafka's value and source are the first synonym's: a key not set on the resource
                # reads the broker's dynamic config, the cluster default, the properties file, Kafka's default
                chain = topic_config_synonyms(c.name, own, layers) if topic else \
                    broker_config_synonyms(c.name, layers)
                configs.append({
                    "name": c.name, "value": chain[0].value if chain else c.value, "read_only": False,
                    "is_sensitive": False,
                    "config_source": chain[0].source if chain else ConfigSource.DEFAULT_CONFIG,
                    "synonyms": [{"name": x.name, "value": x.value, "source": x.source} for x in chain]
                    if req.include_synonyms else [],
                    "config_type": CONFIG_TYPES[table[c.name].type] if c.name in table else 0,
                    "documentation": table[c.name].doc if documented and c.name in table else None})
            results.append({
                "error_code": got.error_code, "error_message": _message(got.error_code, got.error_message),
                "resource_type": got.resource_type, "resource_name": got.resource_name, "configs": configs})
        return {"results": results}

    async def incremental_alter_configs(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """SET, DELETE, and APPEND and SUBTRACT for list-typed keys (the controller checks which)."""
        ours = cpb.IncrementalAlterConfigsRequest(validate_only=req.validate_only, resources=[
            cpb.AlterConfigsResource(resource_type=res.resource_type, resource_name=res.resource_name, configs=[
                cpb.AlterableConfig(name=c.name, op=c.config_operation, value=c.value or "") for c in res.configs])
            for res in req.resources])
        return {"responses": await self._alter_configs(req.resources, ours, {}, access)}

    async def alter_configs(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        """AlterConfigs, the legacy whole set: each resource's configs become the ones given and
        the others return to their defaults, by the controller's one config operation."""
        ours = cpb.IncrementalAlterConfigsRequest(validate_only=req.validate_only, replace=True)
        refused: dict[tuple[int, str], str] = {}
        for res in req.resources:
            nulls = [c.name for c in res.configs if c.value is None]
            if nulls:  # as Kafka: a legacy request sets values; a null one is not a deletion
                refused[(res.resource_type, res.resource_name)] = f"Null value not supported for : {nulls[0]}"
                continue
            ours.resources.add(resource_type=res.resource_type, resource_name=res.resource_name, configs=[
                cpb.AlterableConfig(name=c.name, op=cpb.AlterableConfig.SET, value=c.value) for c in res.configs])
        return {"responses": await self._alter_configs(req.resources, ours, refused, access)}

    async def _alter_configs(self, asked: Any, ours: cpb.IncrementalAlterConfigsRequest,
                             refused: dict[tuple[int, str], str], access: Access) -> list[dict[str, Any]]:
        """One answer per resource asked, in order: INVALID_REQUEST for the ones the codec
        ``refused``, else the controller's answer to ``ours`` (the others)."""
        answers: list[tuple[int, str]] = []
        if ours.resources:
            r, code, message = await self._forward(self.controller.incremental_alter_configs, ours, access)
            answers = [(x.error_code, x.error_message) for x in r.resources] if r is not None else \
                [(int(code), message)] * len(ours.resources)
        sent = iter(answers)
        out = []
        for x in asked:
            key = (x.resource_type, x.resource_name)
            error, text = (int(ErrorCode.INVALID_REQUEST), refused[key]) if key in refused else next(sent)
            out.append({"error_code": error, "error_message": _message(error, text), "resource_type": x.resource_type,
                        "resource_name": x.resource_name})
        return out

    # -- ACLs, forwarded to the active controller (kafka-acls.sh, AdminClient's *_acls) -----------

    async def create_acls(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.CreateAclsRequest(creations=[cpb.AclBinding(
            resource_type=c.resource_type, resource_name=c.resource_name, pattern_type=c.resource_pattern_type,
            principal=c.principal, host=c.host, operation=c.operation, permission_type=c.permission_type)
            for c in req.creations])
        r, code, message = await self._forward(self.controller.create_acls, ours, access)
        if r is None:
            return {"results": [{"error_code": int(code), "error_message": message} for _ in req.creations]}
        return {"results": [{"error_code": x.error_code, "error_message": _message(x.error_code, x.error_message)}
                            for x in r.results]}

    async def describe_acls(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DescribeAclsRequest(filter=_acl_filter(
            req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter, req.principal_filter,
            req.host_filter, req.operation, req.permission_type))
        r, code, message = await self._forward(self.controller.describe_acls, ours, access)
        if r is None:
            return {"error_code": int(code), "error_message": message, "resources": []}
        return {"error_code": 0, "error_message": None, "resources": _by_resource(r.acls)}

    async def delete_acls(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DeleteAclsRequest(filters=[_acl_filter(
            f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
            f.host_filter, f.operation, f.permission_type) for f in req.filters])
        r, code, message = await self._forward(self.controller.delete_acls, ours, access)
        if r is None:
            return {"filter_results": [{"error_code": int(code), "error_message": message, "matching_acls": []}
                                       for _ in req.filters]}
        return {"filter_results": [
            {"error_code": x.error_code, "error_message": _message(x.error_code, x.error_message), "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": a.resource_type,
                 "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
                 "host": a.host, "operation": a.operation, "permission_type": a.permission_type}
                for a in x.matching_acls]} for x in r.filter_results]}

    # -- SCRAM credentials, forwarded to the active controller (kafka-configs.sh --entity-type users) --

    async def alter_user_scram_credentials(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.AlterUserScramCredentialsRequest(
            deletions=[cpb.ScramDeletion(name=d.name, mechanism=d.mechanism) for d in req.deletions],
            upsertions=[cpb.ScramUpsertion(name=u.name, mechanism=u.mechanism, iterations=u.iterations, salt=u.salt,
                                           salted_password=u.salted_password) for u in req.upsertions])
        r, code, message = await self._forward(self.controller.alter_user_scram_credentials, ours, access)
        if r is None:
            users = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
            return {"results": [{"user": u, "error_code": int(code), "error_message": message} for u in users]}
        return {"results": [{"user": x.user, "error_code": x.error_code,
                             "error_message": _message(x.error_code, x.error_message)} for x in r.results]}

    async def describe_user_scram_credentials(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DescribeUserScramCredentialsRequest(users=[u.name for u in req.users or ()])
        r, code, message = await self._forward(self.controller.describe_user_scram_credentials, ours, access)
        if r is None:  # as Kafka's getErrorResponse: the error at the top and for each user asked about
            return {"error_code": int(code), "error_message": message, "results": [
                {"user": u, "error_code": int(code), "error_message": message, "credential_infos": []}
                for u in ours.users]}
        return {"error_code": 0, "error_message": None, "results": [
            {"user": x.user, "error_code": x.error_code, "error_message": _message(x.error_code, x.error_message),
             "credential_infos": [{"mechanism": c.mechanism, "iterations": c.iterations} for c in x.credentials]}
            for x in r.results]}

    # -- client quotas, forwarded to the active controller (kafka-configs.sh --entity-type users|clients|ips) --

    async def alter_client_quotas(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.AlterClientQuotasRequest(validate_only=req.validate_only, entries=[cpb.QuotaAlteration(
            entity=_quota_entity(e.entity), ops=[cpb.QuotaOp(key=o.key, value=o.value, remove=o.remove) for o in e.ops])
            for e in req.entries])
        r, code, message = await self._forward(self.controller.alter_client_quotas, ours, access)
        entities = [[{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity]
                    for e in req.entries]
        if r is None:
            return {"entries": [{"error_code": int(code), "error_message": message, "entity": en} for en in entities]}
        return {"entries": [{"error_code": x.error_code, "error_message": _message(x.error_code, x.error_message),
                             "entity": en} for x, en in zip(r.results, entities, strict=True)]}

    async def describe_client_quotas(self, req: Any, version: int, access: Access) -> dict[str, Any]:
        ours = cpb.DescribeClientQuotasRequest(strict=req.strict, components=[
            cpb.QuotaFilterComponent(entity_type=c.entity_type, match_type=c.match_type) if c.match is None
            else cpb.QuotaFilterComponent(entity_type=c.entity_type, match_type=c.match_type, match=c.match)
            for c in req.components])
        r, code, message = await self._forward(self.controller.describe_client_quotas, ours, access)
        if r is None:
            return {"error_code": int(code), "error_message": message, "entries": None}
        return {"error_code": 0, "error_message": None, "entries": [
            {"entity": [{"entity_type": p.entity_type,
                         "entity_name": p.entity_name if p.HasField("entity_name") else None} for p in e.entity],
             "values": [{"key": k, "value": v} for k, v in sorted(e.values.items())]} for e in r.entries]}


def _quota_entity(parts: Any) -> list[cpb.QuotaEntityPart]:
    return [cpb.QuotaEntityPart(entity_type=p.entity_type) if p.entity_name is None
            else cpb.QuotaEntityPart(entity_type=p.entity_type, entity_name=p.entity_name) for p in parts]


def sasl_answer(header: RequestHeader, request: Any, sasl: SaslAuthenticator) -> tuple[Any, str | None]:
    """A SASL listener's SaslHandshake or SaslAuthenticate, answered by the connection's
    authenticator; the second value is why the connection closes after this answer (a failed
    login, a mechanism not served), None when it goes on."""
    version = header.api_version
    schema = response_schema(header.api_key, version)
    if header.api_key == SASL_HANDSHAKE:
        if version == 0:  # v0 sends the tokens unframed (clients before Kafka 1.0): not served
            return build(schema, {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "mechanisms": []}), \
                "SaslHandshake v0 (unframed SASL tokens) is not served: use a client from Kafka 1.0 on"
        code, mechanisms = sasl.handshake(request.mechanism)
        failed = None if code == ErrorCode.NONE else f"the client asked for SASL mechanism {request.mechanism}, not " \
                                                     f"enabled here ({', '.join(mechanisms)})"
        return build(schema, {"error_code": int(code), "mechanisms": mechanisms}), failed
    try:
        step = sasl.authenticate(request.auth_bytes)
    except AuthenticationFailed as e:
        return build(schema, {"error_code": int(e.code), "error_message": e.message, "auth_bytes": b""}), e.message
    return build(schema, {"error_code": 0, "error_message": None, "auth_bytes": step.token,
                          "session_lifetime": step.session_lifetime_ms}), None


def _acl_filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
                operation: int, permission_type: int) -> cpb.AclFilter:
    """Kafka's nullable filter strings as the controller's optional fields."""
    f = cpb.AclFilter(resource_type=resource_type, pattern_type=pattern_type, operation=operation,
                      permission_type=permission_type)
    for field, value in (("resource_name", name), ("principal", principal), ("host", host)):
        if value is not None:
            setattr(f, field, value)
    return f


def _by_resource(acls: Any) -> list[dict[str, Any]]:
    """DescribeAcls' answer: ACLs grouped under their resource patterns."""
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for a in acls:
        grouped.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            {"principal": a.principal, "host": a.host, "operation": a.operation, "permission_type": a.permission_type})
    return [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": entries}
            for (t, n, p), entries in grouped.items()]


def api_version_list() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(VERSIONS.items())]


def newer_api_versions_answer() -> Any:
    """KIP-511: an ApiVersions newer than ours is answered in v0, with UNSUPPORTED_VERSION and
    the versions we serve, so that the client can pick one (its body is not read)."""
    return build(response_schema(API_VERSIONS, 0),
                 {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": api_version_list()})


def _fenced(code: int, knows_producer_fenced: bool) -> int:
    """PRODUCER_FENCED (KIP-588) as the versions before it say it: INVALID_PRODUCER_EPOCH."""
    return int(ErrorCode.INVALID_PRODUCER_EPOCH) if code == ErrorCode.PRODUCER_FENCED and not knows_producer_fenced \
        else code


def _produce_error(index: int, e: KafkaError) -> dict[str, Any]:
    return {"index": index, "error_code": int(e.code), "base_offset": -1, "log_start_offset": -1,
            "error_message": e.message, "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                                                          for i, m in e.record_errors]}
