"""Kafka's exact answers where ours differed (issue 27 item 3), with librdkafka: a commit of
offsets for a topic or partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION (and not
stored); a keyless record on a compacted topic fails its batch INVALID_RECORD with the
record's index and reason (KIP-467); DescribeGroups shows each member's client id and host,
and member ids begin with the client id."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from common.errors import ErrorCode
from protos import broker_pb2 as bpb
from tests.brokercluster import BrokerCluster, _stub, running_cluster
from tests.eventually import eventually

PROPS = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
         "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("exact"), PROPS) as c:
        asyncio.run(c.create_topic("present", partitions=1, rf=3))
        asyncio.run(c.create_topic("compacted", partitions=1, rf=3, configs={"cleanup.policy": "compact"}))
        yield c


def consumer(c: BrokerCluster, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": c.kafka_bootstrap_servers, "group.id": group,
                     "enable.auto.commit": False, "session.timeout.ms": 6000, **extra})


def test_committing_offsets_of_a_topic_that_does_not_exist_is_unknown_topic(cluster):
    """Per partition on the wire (ours, gRPC: the same coordinator); librdkafka raises it."""
    async def commit() -> list[tuple[str, int, int]]:
        async with _stub(cluster.address(cluster.ids[0])) as stub:
            async def coordinator() -> bpb.FindCoordinatorResponse | None:
                r = await stub.FindCoordinator(bpb.FindCoordinatorRequest(key="commits-raw"), timeout=20)
                return r if r.error_code == 0 else None
            found = await eventually(coordinator, 30, interval=0.2)
        async with _stub(f"{found.host}:{found.port}") as stub:
            async def answered() -> bpb.OffsetCommitResponse | None:  # once the coordinator has loaded
                r = await stub.OffsetCommit(bpb.OffsetCommitRequest(group_id="commits-raw", generation_id=-1, topics=[
                    bpb.OffsetCommitTopic(name="present", partitions=[bpb.OffsetCommitPartition(partition=0, offset=3),
                                                                      bpb.OffsetCommitPartition(partition=7, offset=1)]),
                    bpb.OffsetCommitTopic(name="never-created", partitions=[
                        bpb.OffsetCommitPartition(partition=0, offset=5)])]), timeout=20)
                return r if r.topics[0].partitions[0].error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else None
            r = await eventually(answered, 30, interval=0.2)
        return [(t.name, p.partition, p.error_code) for t in r.topics for p in t.partitions]
    assert asyncio.run(commit()) == [("present", 0, 0), ("present", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                     ("never-created", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]

    c = consumer(cluster, "commits")
    with pytest.raises(KafkaException) as e:
        c.commit(offsets=[TopicPartition("never-created", 0, 5)], asynchronous=False)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    c.commit(offsets=[TopicPartition("present", 0, 3)], asynchronous=False)
    stored = c.committed([TopicPartition("present", 0), TopicPartition("never-created", 0)], timeout=20)
    assert [tp.offset for tp in stored] == [3, -1001]  # -1001: none stored
    c.close()


def test_describe_groups_shows_client_id_and_host_and_member_ids_start_with_the_client_id(cluster):
    c = consumer(cluster, "described", **{"client.id": "billing-app"})
    c.subscribe(["present"])
    deadline = time.monotonic() + 60
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    assert c.assignment(), "no assignment within 60s"
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    g = admin.describe_consumer_groups(["described"])["described"].result(30)
    c.close()
    [m] = g.members
    assert m.client_id == "billing-app" and m.host == "/127.0.0.1"
    assert m.member_id.startswith("billing-app-")


def test_a_keyless_record_on_a_compacted_topic_fails_its_batch_with_its_index(cluster):
    from brokerd.kafka.batches import to_wire
    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    from clients.records import build_batch

    records = to_wire(build_batch([(b"k", b"kept", 1, []), (None, b"keyless", 1, [])]))
    leader = asyncio.run(cluster.describe_topic("compacted")).partitions[0].leader
    request = build(request_schema(0, 9), {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": "compacted", "partition_data": [{"index": 0, "records": records}]}]})
    with socket.create_connection(("127.0.0.1", cluster.kafka_ports[leader]), 10) as s:
        s.sendall(frame_request(0, 9, 7, "pytest", request))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        _, resp = read_response(s.recv(size, socket.MSG_WAITALL), 0, 9)
    [answer] = resp.responses[0].partition_responses
    reason = "Compacted topic cannot accept message without key in topic partition compacted-0."
    assert answer.error_code == ErrorCode.INVALID_RECORD and answer.base_offset == -1
    assert [(r.batch_index, r.batch_index_error_message) for r in answer.record_errors] == [(1, reason)]
    assert answer.error_message.startswith("One or more records have been rejected due to 1 record errors")

    from confluent_kafka import Producer
    failed: list = []
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    p.produce("compacted", b"no key", on_delivery=lambda err, msg: failed.append(err))
    assert p.flush(30) == 0
    assert [e.code() for e in failed] == [KafkaError.INVALID_RECORD]
