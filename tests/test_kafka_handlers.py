"""Every Kafka handler at the lowest and the highest version the broker serves (issue 26): for
each API in ``brokerd.kafka.apis.VERSIONS``, a real request (topics, partitions, groups and
members that exist) is encoded with kio, sent to a broker of a real cluster, and its answer
decoded and checked. A name a handler misspells, in a request it reads or an answer it builds,
fails here: ``codec.build`` refuses names no version has, and a handler that reads a field
its version lacks raises, which is answered UNKNOWN_SERVER_ERROR (brokerd/kafka/error_answers.py),
refused by ``Broker.ask`` for every API."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from brokerd.kafka import apis as A
from brokerd.kafka.batches import to_wire
from brokerd.kafka.codec import UnknownField, build, frame_request, read_response, request_schema, response_schema
from common.errors import ErrorCode as E
from clients.records import build_batch
from metadata.authorizer import STANDARD_AUTHORIZER
from metadata.configs import ConfigSource
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually

PROPS = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
         "group.min.session.timeout.ms": "1000"}
#: ACLs are served with an authorizer only (else SECURITY_DISABLED); every node and this test
#: connect as User:ANONYMOUS, a super user, so nothing else is refused.
SECURITY = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
TOPIC = "kh"
LEVELS = ("lowest", "highest")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("handlers"), {**PROPS, **SECURITY}, controller_props=SECURITY) as c:
        asyncio.run(c.create_topic(TOPIC, 1, 3))
        asyncio.run(c.wait_topic(TOPIC, 1))
        yield c


class Broker:
    """Requests to the cluster's Kafka listeners, one connection per request."""

    def __init__(self, c: BrokerCluster) -> None:
        self.c = c

    def ask(self, key: int, version: int, data: dict[str, Any], broker: int | None = None) -> Any:
        port = self.c.kafka_ports[broker if broker is not None else self.leader()]
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            s.settimeout(30)
            s.sendall(frame_request(key, version, 4242, "handlers", build(request_schema(key, version), data)))
            head = s.recv(4, socket.MSG_WAITALL)
            assert len(head) == 4, f"api {key} v{version}: the connection was closed instead of answered"
            body = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        correlation, response = read_response(body, key, version)
        assert correlation == 4242
        assert int(E.UNKNOWN_SERVER_ERROR) not in codes(response), \
            f"api {key} v{version}: its handler failed (the broker's log says how): {response}"
        return response

    def leader(self, topic: str = TOPIC) -> int:
        return asyncio.run(self.c.describe_topic(topic)).partitions[0].leader

    def epoch(self, topic: str = TOPIC) -> int:
        return asyncio.run(self.c.describe_topic(topic)).partitions[0].leader_epoch

    def coordinator(self, group: str) -> int:
        """The node coordinating ``group``, once ``__consumer_offsets`` is there and loaded."""
        def found() -> int | None:
            r = self.ask(A.FIND_COORDINATOR, 1, {"key": group, "key_type": 0}, self.c.ids[0])
            if r.error_code.value:
                return None
            loaded = self.ask(A.OFFSET_FETCH, 2, {"group_id": group, "topics": None}, r.node_id)
            return r.node_id if loaded.error_code.value == 0 else None
        return asyncio.run(eventually(found, 30, interval=0.2, what=f"a coordinator for {group}"))

    def transaction(self, transactional_id: str) -> tuple[int, int, int]:
        """(coordinator, producer id, epoch) of a new producer of ``transactional_id``, once
        ``__transaction_state`` is there and its coordinator loaded."""
        def found() -> tuple[int, int, int] | None:
            r = self.ask(A.FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1}, self.c.ids[0])
            if r.error_code.value:
                return None
            init = self.ask(A.INIT_PRODUCER_ID, 4, {"transactional_id": transactional_id, "transaction_timeout": 60_000,
                                                    "producer_id": -1, "producer_epoch": -1}, r.node_id)
            return (r.node_id, init.producer_id, init.producer_epoch) if init.error_code.value == 0 else None
        return asyncio.run(eventually(found, 30, interval=0.2, what=f"a coordinator for {transactional_id}"))

    def add_partition(self, version: int, transactional_id: str) -> tuple[int, int, int, Any]:
        node, pid, epoch = self.transaction(transactional_id)
        return node, pid, epoch, self.ask(A.ADD_PARTITIONS_TO_TXN, version, {
            "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}, node)

    def produce(self, version: int = 9, n: int = 3) -> Any:
        batch = to_wire(build_batch([(b"k", b"v%d" % i, int(time.time() * 1000), ()) for i in range(n)]))
        return self.ask(A.PRODUCE, version, {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})

    def join(self, version: int, group: str) -> Any:
        return self.ask(A.JOIN_GROUP, version, {
            "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": b"subscription"}]}, self.coordinator(group))


def codes(entity: Any) -> set[int]:
    """Every error code in an answer, nested entities included."""
    out: set[int] = set()
    if is_dataclass(entity):
        for f in fields(entity):
            v = getattr(entity, f.name)
            if f.name == "error_code":
                out.add(int(v.value))
            elif isinstance(v, tuple):
                for x in v:
                    out |= codes(x)
            else:
                out |= codes(v)
    return out


def only(*expected: E) -> set[int]:
    return {int(e) for e in expected}


# -- one case per API: send at ``version``, check the answer -------------------------------------

Case = Callable[[Broker, int], None]


def api_versions(b: Broker, v: int) -> None:
    r = b.ask(A.API_VERSIONS, v, {"client_software_name": "pytest", "client_software_version": "1"})
    assert codes(r) == only(E.NONE) and {k.api_key for k in r.api_keys} == set(A.VERSIONS)


def metadata(b: Broker, v: int) -> None:
    r = b.ask(A.METADATA, v, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
    assert codes(r) == only(E.NONE) and [t.name for t in r.topics] == [TOPIC]
    assert r.topics[0].partitions[0].leader_id == b.leader() and len(r.brokers) == 3


def produce(b: Broker, v: int) -> None:
    r = b.produce(v)
    assert codes(r) == only(E.NONE) and r.responses[0].partition_responses[0].base_offset >= 0


def fetch(b: Broker, v: int) -> None:
    b.produce()
    r = b.ask(A.FETCH, v, {"replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                           "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                           "topics": [{"topic": TOPIC, "partitions": [
                               {"partition": 0, "current_leader_epoch": b.epoch(), "fetch_offset": 0,
                                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                           "forgotten_topics_data": []})
    p = r.responses[0].partitions[0]
    assert codes(r) == only(E.NONE) and p.high_watermark > 0 and p.records


def list_offsets(b: Broker, v: int) -> None:
    b.produce()
    r = b.ask(A.LIST_OFFSETS, v, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "current_leader_epoch": b.epoch(), "timestamp": -1}]}]})
    assert codes(r) == only(E.NONE) and r.topics[0].partitions[0].offset > 0


def offset_for_leader_epoch(b: Broker, v: int) -> None:
    b.produce()
    epoch = b.epoch()
    r = b.ask(A.OFFSET_FOR_LEADER_EPOCH, v, {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}]}]})
    p = r.topics[0].partitions[0]
    assert codes(r) == only(E.NONE) and p.leader_epoch == epoch and p.end_offset > 0


def init_producer_id(b: Broker, v: int) -> None:
    r = b.ask(A.INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout": 60_000,
                                      "producer_id": -1, "producer_epoch": -1})
    assert codes(r) == only(E.NONE) and r.producer_id >= 0 and r.producer_epoch == 0


def find_coordinator(b: Broker, v: int) -> None:
    group = f"find-{v}"
    node = b.coordinator(group)
    r = b.ask(A.FIND_COORDINATOR, v, {"key": group, "key_type": 0, "coordinator_keys": [group]})
    assert codes(r) == only(E.NONE)
    assert (r.coordinators[0].node_id if v >= 4 else r.node_id) == node


def join_group(b: Broker, v: int) -> None:
    r = b.join(v, f"join-{v}")
    assert codes(r) == only(E.NONE) and r.member_id and r.leader == r.member_id
    assert [m.member_id for m in r.members] == [r.member_id]


def _synced(b: Broker, v: int, group: str) -> tuple[str, int]:
    """A member of ``group`` that has joined and synced: its id and generation."""
    joined = b.join(5, group)
    r = b.ask(A.SYNC_GROUP, v, {"group_id": group, "generation_id": joined.generation_id,
                                "member_id": joined.member_id, "group_instance_id": None, "protocol_type": "consumer",
                                "protocol_name": "range", "assignments": [
                                    {"member_id": joined.member_id, "assignment": b"assigned"}]},
              b.coordinator(group))
    assert codes(r) == only(E.NONE) and r.assignment == b"assigned"
    return joined.member_id, joined.generation_id


def sync_group(b: Broker, v: int) -> None:
    _synced(b, v, f"sync-{v}")


def heartbeat(b: Broker, v: int) -> None:
    group = f"heartbeat-{v}"
    member, generation = _synced(b, 0, group)
    r = b.ask(A.HEARTBEAT, v, {"group_id": group, "generation_id": generation, "member_id": member,
                               "group_instance_id": None}, b.coordinator(group))
    assert codes(r) == only(E.NONE)


def leave_group(b: Broker, v: int) -> None:
    group = f"leave-{v}"
    member, _ = _synced(b, 0, group)
    r = b.ask(A.LEAVE_GROUP, v, {"group_id": group, "member_id": member, "members": [
        {"member_id": member, "group_instance_id": None, "reason": None}]}, b.coordinator(group))
    assert codes(r) == only(E.NONE)


def _commit(b: Broker, v: int, group: str, offset: int) -> Any:
    return b.ask(A.OFFSET_COMMIT, v, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                      "group_instance_id": None, "retention_time": -1, "topics": [
                                          {"name": TOPIC, "partitions": [
                                              {"partition_index": 0, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": "m"}]}]},
                 b.coordinator(group))


def offset_commit(b: Broker, v: int) -> None:
    r = _commit(b, v, f"commit-{v}", 1)
    assert codes(r) == only(E.NONE) and r.topics[0].partitions[0].partition_index == 0


def offset_fetch(b: Broker, v: int) -> None:
    group = f"offsets-{v}"
    assert codes(_commit(b, 2, group, 2)) == only(E.NONE)
    r = b.ask(A.OFFSET_FETCH, v, {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                                  "require_stable": False}, b.coordinator(group))
    p = r.topics[0].partitions[0]
    assert codes(r) == only(E.NONE) and (p.committed_offset, p.metadata) == (2, "m")


def describe_groups(b: Broker, v: int) -> None:
    group = f"describe-{v}"
    member, _ = _synced(b, 0, group)
    r = b.ask(A.DESCRIBE_GROUPS, v, {"groups": [group], "include_authorized_operations": False},
              b.coordinator(group))
    g = r.groups[0]
    assert codes(r) == only(E.NONE) and g.group_state == "Stable" and [m.member_id for m in g.members] == [member]


def list_groups(b: Broker, v: int) -> None:
    group = f"list-{v}"
    _synced(b, 0, group)
    r = b.ask(A.LIST_GROUPS, v, {"states_filter": ["Stable"]}, b.coordinator(group))
    assert codes(r) == only(E.NONE) and group in {g.group_id for g in r.groups}


def delete_groups(b: Broker, v: int) -> None:
    group = f"delete-{v}"
    assert codes(_commit(b, 2, group, 1)) == only(E.NONE)
    r = b.ask(A.DELETE_GROUPS, v, {"groups_names": [group]}, b.coordinator(group))
    assert codes(r) == only(E.NONE) and r.results[0].group_id == group


def consumer_group_heartbeat(b: Broker, v: int) -> None:
    r = b.ask(A.CONSUMER_GROUP_HEARTBEAT, v, {"group_id": "kip848", "member_id": "", "member_epoch": 0,
                                              "instance_id": None, "rack_id": None, "rebalance_timeout": 1000,
                                              "subscribed_topic_names": None, "server_assignor": None,
                                              "topic_partitions": None})
    assert codes(r) == only(E.UNSUPPORTED_VERSION)


def sasl_handshake(b: Broker, v: int) -> None:
    assert codes(b.ask(A.SASL_HANDSHAKE, v, {"mechanism": "PLAIN"})) == only(E.ILLEGAL_SASL_STATE)


def sasl_authenticate(b: Broker, v: int) -> None:
    assert codes(b.ask(A.SASL_AUTHENTICATE, v, {"auth_bytes": b""})) == only(E.ILLEGAL_SASL_STATE)


def describe_cluster(b: Broker, v: int) -> None:
    r = b.ask(A.DESCRIBE_CLUSTER, v, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert codes(r) == only(E.NONE) and len(r.brokers) == 3


def _create(b: Broker, v: int, name: str, partitions: int = 1) -> Any:
    return b.ask(A.CREATE_TOPICS, v, {"timeout": 10_000, "validate_only": False, "topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}]})


def create_topics(b: Broker, v: int) -> None:
    r = _create(b, v, f"created-{v}", 2)
    assert codes(r) == only(E.NONE) and r.topics[0].name == f"created-{v}"


def delete_topics(b: Broker, v: int) -> None:
    name = f"deleted-{v}"
    assert codes(_create(b, 7, name)) == only(E.NONE)
    r = b.ask(A.DELETE_TOPICS, v, {"timeout": 10_000, "topic_names": [name],
                                   "topics": [{"name": name, "topic_id": None}]})
    assert codes(r) == only(E.NONE) and r.responses[0].name == name


def create_partitions(b: Broker, v: int) -> None:
    name = f"grown-{v}"
    assert codes(_create(b, 7, name)) == only(E.NONE)
    asyncio.run(b.c.wait_topic(name, 1))
    r = b.ask(A.CREATE_PARTITIONS, v, {"timeout": 10_000, "validate_only": False, "topics": [
        {"name": name, "count": 2, "assignments": None}]})
    assert codes(r) == only(E.NONE)


def describe_configs(b: Broker, v: int) -> None:
    """v3+ answers each key's type (Kafka's numbers: LIST 7, LONG 5) and, when asked, its documentation."""
    r = b.ask(A.DESCRIBE_CONFIGS, v, {"include_synonyms": False, "include_documentation": True, "resources": [
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": ["cleanup.policy", "flush.ms"]}]})
    assert codes(r) == only(E.NONE)
    got = {c.name: c for c in r.results[0].configs}
    assert sorted(got) == ["cleanup.policy", "flush.ms"]
    assert (got["flush.ms"].value, got["flush.ms"].config_source) == (str(2**63 - 1), 5)  # Kafka's default
    if v >= 3:
        assert (got["cleanup.policy"].config_type, got["flush.ms"].config_type) == (7, 5)
        assert got["flush.ms"].documentation == "fsync after this many ms"


def incremental_alter_configs(b: Broker, v: int) -> None:
    r = b.ask(A.INCREMENTAL_ALTER_CONFIGS, v, {"validate_only": False, "resources": [
        {"resource_type": 2, "resource_name": TOPIC, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}]})
    assert codes(r) == only(E.NONE)


def alter_configs(b: Broker, v: int) -> None:
    """The legacy whole set (API 33): the keys not given return to their defaults; per resource."""
    name = f"legacy-{v}"
    assert codes(_create(b, 7, name)) == only(E.NONE)
    asyncio.run(b.c.wait_topic(name, 1))

    def legacy(configs: dict[str, str | None], resource: str = name) -> Any:
        return b.ask(A.ALTER_CONFIGS, v, {"validate_only": False, "resources": [
            {"resource_type": 2, "resource_name": resource, "configs": [
                {"name": k, "value": x} for k, x in configs.items()]}]})
    assert codes(legacy({"flush.ms": "1000", "retention.ms": "5000"})) == only(E.NONE)
    assert codes(legacy({"flush.ms": "2000"})) == only(E.NONE)
    r = b.ask(A.DESCRIBE_CONFIGS, 1, {"include_synonyms": False, "resources": [
        {"resource_type": 2, "resource_name": name, "configuration_keys": ["flush.ms", "retention.ms"]}]})
    assert {c.name: (c.value, c.config_source) for c in r.results[0].configs} == {
        "flush.ms": ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG), "retention.ms": ("604800000", ConfigSource.DEFAULT_CONFIG)}
    assert codes(legacy({"flush.ms": None})) == only(E.INVALID_REQUEST)
    assert codes(legacy({"flush.ms": "1"}, f"{name}-missing")) == only(E.UNKNOWN_TOPIC_OR_PARTITION)


def elect_leaders(b: Broker, v: int) -> None:
    r = b.ask(A.ELECT_LEADERS, v, {"election_type": 0, "timeout": 10_000, "topic_partitions": [
        {"topic": TOPIC, "partitions": [0]}]})
    # The preferred leader leads already: Kafka's answer for that partition.
    assert codes(r) <= only(E.NONE, E.ELECTION_NOT_NEEDED)
    assert r.replica_election_results[0].partition_result[0].partition_id == 0


def alter_partition_reassignments(b: Broker, v: int) -> None:
    r = b.ask(A.ALTER_PARTITION_REASSIGNMENTS, v, {"timeout": 10_000, "allow_replication_factor_change": False,
                                                   "topics": [{"name": TOPIC, "partitions": [
                                                       {"partition_index": 0, "replicas": None}]}]})
    # A cancellation with nothing to cancel.
    assert codes(r) <= only(E.NONE, E.NO_REASSIGNMENT_IN_PROGRESS)


def list_partition_reassignments(b: Broker, v: int) -> None:
    r = b.ask(A.LIST_PARTITION_REASSIGNMENTS, v, {"timeout": 10_000, "topics": [
        {"name": TOPIC, "partition_indexes": [0]}]})
    assert codes(r) == only(E.NONE) and r.topics == ()


ACL = {"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3, "principal": "User:alice",
       "host": "*", "operation": 3, "permission_type": 3}


def create_acls(b: Broker, v: int) -> None:
    assert codes(b.ask(A.CREATE_ACLS, v, {"creations": [ACL]})) == only(E.NONE)


def describe_acls(b: Broker, v: int) -> None:
    assert codes(b.ask(A.CREATE_ACLS, 1, {"creations": [ACL]})) == only(E.NONE)
    r = b.ask(A.DESCRIBE_ACLS, v, {"resource_type_filter": 2, "resource_name_filter": TOPIC,
                                   "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
                                   "operation": 1, "permission_type": 1})
    assert codes(r) == only(E.NONE) and [a.principal for x in r.resources for a in x.acls] == ["User:alice"]


def delete_acls(b: Broker, v: int) -> None:
    assert codes(b.ask(A.CREATE_ACLS, 1, {"creations": [ACL]})) == only(E.NONE)
    r = b.ask(A.DELETE_ACLS, v, {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": TOPIC, "pattern_type_filter": 3,
        "principal_filter": "User:alice", "host_filter": None, "operation": 1, "permission_type": 1}]})
    assert codes(r) == only(E.NONE) and len(r.filter_results[0].matching_acls) == 1


def alter_user_scram_credentials(b: Broker, v: int) -> None:
    r = b.ask(A.ALTER_USER_SCRAM_CREDENTIALS, v, {"deletions": [], "upsertions": [
        {"name": "handlers-user", "mechanism": 2, "iterations": 8192, "salt": b"s" * 16,
         "salted_password": b"p" * 64}]})
    assert [(x.user, x.error_code) for x in r.results] == [("handlers-user", E.NONE)]


def describe_user_scram_credentials(b: Broker, v: int) -> None:
    r = b.ask(A.DESCRIBE_USER_SCRAM_CREDENTIALS, v, {"users": [{"name": "nobody"}]})
    assert r.error_code == E.NONE and [(x.user, x.error_code) for x in r.results] == [
        ("nobody", E.RESOURCE_NOT_FOUND)]


def alter_client_quotas(b: Broker, v: int) -> None:
    r = b.ask(A.ALTER_CLIENT_QUOTAS, v, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "handlers"}],
        "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}]})
    assert [(e.error_code, [p.entity_name for p in e.entity]) for e in r.entries] == [(E.NONE, ["handlers"])]


def describe_client_quotas(b: Broker, v: int) -> None:
    r = b.ask(A.DESCRIBE_CLIENT_QUOTAS, v, {"strict": True, "components": [
        {"entity_type": "client-id", "match_type": 0, "match": "nobody"}]})
    assert r.error_code == E.NONE and r.entries == ()


def _added(r: Any) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, p.partition_error_code.value) for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition]


def add_partitions_to_txn(b: Broker, v: int) -> None:
    *_, r = b.add_partition(v, f"add-{v}")
    assert _added(r) == [(TOPIC, 0, E.NONE)]


def end_txn(b: Broker, v: int) -> None:
    tid = f"end-{v}"
    node, pid, epoch, added = b.add_partition(3, tid)
    assert _added(added) == [(TOPIC, 0, E.NONE)]
    r = b.ask(A.END_TXN, v, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": True},
              node)
    assert codes(r) == only(E.NONE)


def _offsets_added(b: Broker, v: int, tid: str, group: str) -> tuple[int, int]:
    b.coordinator(group)  # __consumer_offsets exists
    node, pid, epoch = b.transaction(tid)
    r = b.ask(A.ADD_OFFSETS_TO_TXN, v, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                        "group_id": group}, node)
    assert codes(r) == only(E.NONE)
    return pid, epoch


def add_offsets_to_txn(b: Broker, v: int) -> None:
    _offsets_added(b, v, f"add-offsets-{v}", f"add-offsets-{v}")


def txn_offset_commit(b: Broker, v: int) -> None:
    tid = group = f"txn-commit-{v}"
    pid, epoch = _offsets_added(b, 3, tid, group)
    r = b.ask(A.TXN_OFFSET_COMMIT, v, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch, "generation_id": -1,
        "member_id": "", "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        b.coordinator(group))
    assert codes(r) == only(E.NONE) and r.topics[0].partitions[0].partition_index == 0


def list_transactions(b: Broker, v: int) -> None:
    tid = f"list-{v}"
    node, pid, _ = b.transaction(tid)
    r = b.ask(A.LIST_TRANSACTIONS, v, {"state_filters": ["Empty", "Bogus"], "producer_id_filters": [],
                                       "duration_filter": -1}, node)
    assert codes(r) == only(E.NONE) and r.unknown_state_filters == ("Bogus",)
    assert (tid, pid, "Empty") in [(x.transactional_id, x.producer_id, x.transaction_state)
                                   for x in r.transaction_states]


def describe_transactions(b: Broker, v: int) -> None:
    tid = f"describe-{v}"
    node, pid, epoch, _ = b.add_partition(3, tid)
    # (an id not found or not open is answered with start time -1, as Kafka does, which kio cannot read back)
    r = b.ask(A.DESCRIBE_TRANSACTIONS, v, {"transactional_ids": [tid]}, node)
    [known] = r.transaction_states
    assert known.error_code.value == 0 and (known.transaction_state, known.producer_id, known.producer_epoch) == \
        ("Ongoing", pid, epoch)
    assert [(t.topic, t.partitions) for t in known.topics] == [(TOPIC, (0,))]


def write_txn_markers(b: Broker, v: int) -> None:
    r = b.ask(A.WRITE_TXN_MARKERS, v, {"markers": [{
        "producer_id": 4242 + v, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]})
    assert codes(r) == only(E.NONE) and r.markers[0].topics[0].partitions[0].partition_index == 0


def delete_records(b: Broker, v: int) -> None:
    """Offset 0 moves nothing (the other cases read the topic from its start)."""
    b.produce()
    r = b.ask(A.DELETE_RECORDS, v, {"timeout": 10_000, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "offset": 0}]}]})
    p = r.topics[0].partitions[0]
    assert codes(r) == only(E.NONE) and (p.partition_index, p.low_watermark) == (0, 0)


def offset_delete(b: Broker, v: int) -> None:
    group = f"offset-delete-{v}"
    assert codes(_commit(b, 2, group, 2)) == only(E.NONE)
    r = b.ask(A.OFFSET_DELETE, v, {"group_id": group, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0}]}]}, b.coordinator(group))
    assert codes(r) == only(E.NONE) and r.topics[0].partitions[0].partition_index == 0


def describe_producers(b: Broker, v: int) -> None:
    r = b.ask(A.DESCRIBE_PRODUCERS, v, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    assert codes(r) == only(E.NONE) and r.topics[0].partitions[0].partition_index == 0


def describe_log_dirs(b: Broker, v: int) -> None:
    r = b.ask(A.DESCRIBE_LOG_DIRS, v, {"topics": [{"topic": TOPIC, "partitions": [0]}]})
    [d] = r.results
    assert codes(r) == only(E.NONE) and [(t.name, [p.partition_index for p in t.partitions]) for t in d.topics] == \
        [(TOPIC, [0])]


def alter_replica_log_dirs(b: Broker, v: int) -> None:
    """A replica asked to its own log dir is already there (NONE); a dir not in log.dirs is
    LOG_DIR_NOT_FOUND (moves themselves: test_log_dir_moves)."""
    leader = b.leader()
    [here] = b.ask(A.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": TOPIC, "partitions": [0]}]}, leader).results
    r = b.ask(A.ALTER_REPLICA_LOG_DIRS, v, {"dirs": [
        {"path": here.log_dir, "topics": [{"name": TOPIC, "partitions": [0]}]},
        {"path": "/not/a/log/dir", "topics": [{"name": TOPIC, "partitions": [0]}]}]}, leader)
    assert [(t.topic_name, [(p.partition_index, p.error_code.value) for p in t.partitions]) for t in r.results] == [
        (TOPIC, [(0, E.NONE), (0, E.LOG_DIR_NOT_FOUND)])]


CASES: dict[int, Case] = {
    A.API_VERSIONS: api_versions, A.METADATA: metadata, A.PRODUCE: produce, A.FETCH: fetch,
    A.LIST_OFFSETS: list_offsets, A.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    A.INIT_PRODUCER_ID: init_producer_id, A.FIND_COORDINATOR: find_coordinator, A.JOIN_GROUP: join_group,
    A.SYNC_GROUP: sync_group, A.HEARTBEAT: heartbeat, A.LEAVE_GROUP: leave_group, A.OFFSET_COMMIT: offset_commit,
    A.OFFSET_FETCH: offset_fetch, A.DESCRIBE_GROUPS: describe_groups, A.LIST_GROUPS: list_groups,
    A.DELETE_GROUPS: delete_groups, A.CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    A.SASL_HANDSHAKE: sasl_handshake, A.SASL_AUTHENTICATE: sasl_authenticate,
    A.DESCRIBE_CLUSTER: describe_cluster, A.CREATE_TOPICS: create_topics, A.DELETE_TOPICS: delete_topics,
    A.CREATE_PARTITIONS: create_partitions, A.DESCRIBE_CONFIGS: describe_configs,
    A.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs, A.ALTER_CONFIGS: alter_configs,
    A.ELECT_LEADERS: elect_leaders,
    A.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    A.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
    A.CREATE_ACLS: create_acls, A.DESCRIBE_ACLS: describe_acls, A.DELETE_ACLS: delete_acls,
    A.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
    A.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    A.ALTER_CLIENT_QUOTAS: alter_client_quotas, A.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    A.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn, A.END_TXN: end_txn, A.WRITE_TXN_MARKERS: write_txn_markers,
    A.ADD_OFFSETS_TO_TXN: add_offsets_to_txn, A.TXN_OFFSET_COMMIT: txn_offset_commit,
    A.LIST_TRANSACTIONS: list_transactions, A.DESCRIBE_TRANSACTIONS: describe_transactions,
    A.DELETE_RECORDS: delete_records, A.OFFSET_DELETE: offset_delete, A.DESCRIBE_PRODUCERS: describe_producers,
    A.DESCRIBE_LOG_DIRS: describe_log_dirs, A.ALTER_REPLICA_LOG_DIRS: alter_replica_log_dirs,
}


def test_every_served_api_has_a_case():
    assert set(CASES) == set(A.VERSIONS)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("key", sorted(A.VERSIONS), ids=lambda k: f"api{k}")
def test_handler_answers_at_its_lowest_and_highest_version(cluster, key: int, level: str) -> None:
    version = A.VERSIONS[key][LEVELS.index(level)]
    CASES[key](Broker(cluster), version)


def test_a_restarted_static_leader_is_told_to_skip_assignment_from_join_group_v9(cluster) -> None:
    """KIP-814: a static leader back within its session with a new member id is told, from
    JoinGroup v9, that it leads (with the members) and must skip the assignment; before v9 the
    answer names the leader as it was. Either way its SyncGroup gets the old assignment and the
    group does not rebalance; the client's reason (KIP-800) is logged."""
    b, group = Broker(cluster), "static-leader"
    node = b.coordinator(group)

    def join(v: int, member: str = "", reason: str | None = None) -> Any:
        return b.ask(A.JOIN_GROUP, v, {
            "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": member,
            "group_instance_id": "instance-a", "protocol_type": "consumer", "reason": reason,
            "protocols": [{"name": "range", "metadata": b"subscription"}]}, node)

    def sync(member: str, generation: int, assignments: dict[str, bytes]) -> bytes:
        r = b.ask(A.SYNC_GROUP, 5, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": "instance-a", "protocol_type": "consumer",
                                    "protocol_name": "range", "assignments": [
                                        {"member_id": m, "assignment": a} for m, a in assignments.items()]}, node)
        assert codes(r) == only(E.NONE)
        return r.assignment
    first = join(9)
    assert codes(first) == only(E.NONE) and first.leader == first.member_id and not first.skip_assignment
    assert sync(first.member_id, first.generation_id, {first.member_id: b"mine"}) == b"mine"

    back = join(9, reason="the application restarted")
    assert codes(back) == only(E.NONE) and back.generation_id == first.generation_id  # no rebalance
    assert back.member_id != first.member_id and back.leader == back.member_id and back.skip_assignment
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in back.members] == [
        (back.member_id, "instance-a", b"subscription")]
    assert sync(back.member_id, back.generation_id, {}) == b"mine"

    older = join(8)  # before v9: the leader as it was, which is not the new id, and no members
    assert codes(older) == only(E.NONE) and older.generation_id == first.generation_id
    assert older.leader == back.member_id != older.member_id and older.members == ()
    assert sync(older.member_id, older.generation_id, {}) == b"mine"
    assert "client reason: the application restarted" in cluster.log_path(node).read_text()


def test_a_misspelt_name_in_an_answer_raises_at_once():
    """A name only another version has is left out; one no version has is a bug."""
    built = build(response_schema(A.FETCH, 4), {"error_code": 0, "responses": [{"topic": TOPIC, "partitions": [
        {"partition_index": 0, "log_start_offset": 5, "current_leader": {}}]}]})  # v5+ and v12 fields
    assert built.responses[0].partitions[0].partition_index == 0
    with pytest.raises(UnknownField, match="'high_watermak'"):
        build(response_schema(A.FETCH, 12), {"responses": [{"topic": TOPIC, "partitions": [
            {"partition_index": 0, "high_watermak": 5}]}]})
