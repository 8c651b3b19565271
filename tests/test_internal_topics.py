"""Internal topics are the brokers' own (issue 25 item 8): a client's produce to
``__consumer_offsets`` or ``__transaction_state`` is refused INVALID_TOPIC_EXCEPTION, as Kafka
answers, on the Kafka listener and on our gRPC produce, so no client can rewrite a group's
offsets, while the group coordinator still writes them. And a broker echoes a name a request
carries once, not again in its error message."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from clients import Producer as OurProducer
from common.errors import MAX_MESSAGE_CHARS, ErrorCode, KafkaError
from protos import broker_pb2 as bpb
from tests.brokercluster import BrokerCluster, _stub, running_cluster

GROUP_PROPS = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
               "group.min.session.timeout.ms": "1000"}
REFUSED = "Cannot append to internal topic __consumer_offsets"


def _read(cons: Consumer, n: int, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == n, f"{len(got)} of {n} records within {timeout:.0f}s"
    return got


def _committed(cons: Consumer) -> int:
    return cons.committed([TopicPartition("orders", 0)], 20)[0].offset


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("internal"), GROUP_PROPS) as c:
        yield c


def test_clients_cannot_write_internal_topics_and_the_group_coordinator_still_does(cluster):
    asyncio.run(cluster.create_topic("orders", 1, 3))
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all"})
    for i in range(3):
        p.produce("orders", b"v%d" % i)
    assert p.flush(30) == 0
    cons = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "billing",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    cons.subscribe(["orders"])
    _read(cons, 3)
    cons.commit(asynchronous=False)  # the coordinator writes __consumer_offsets
    assert _committed(cons) == 3

    # librdkafka, on the Kafka listener
    errors: list = []
    p.produce("__consumer_offsets", b"forged", b"billing", on_delivery=lambda err, _: errors.append(err))
    assert p.flush(30) == 0
    assert [e.code() if e else "written" for e in errors] == [confluent_kafka.KafkaError.TOPIC_EXCEPTION]

    # ours, on gRPC; and a raw request to the internal topic that does not exist here
    async def ours() -> tuple[KafkaError, bpb.ProducePartitionResponse]:
        async with OurProducer(cluster.bootstrap_servers, retries=0) as op:
            with pytest.raises(KafkaError) as refused:
                await op.send_and_wait("__consumer_offsets", b"forged", key=b"billing")
        async with _stub(cluster.address(cluster.ids[0])) as stub:
            r = await stub.Produce(bpb.ProduceRequest(acks=-1, topics=[bpb.ProduceTopicData(
                name="__transaction_state", partitions=[bpb.ProducePartitionData(partition=0)])]))
        return refused.value, r.topics[0].partitions[0]
    refused, raw = asyncio.run(ours())
    assert refused.code == ErrorCode.INVALID_TOPIC_EXCEPTION and refused.message == REFUSED
    assert raw.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert raw.error_message == "Cannot append to internal topic __transaction_state"

    # nothing forged was written: the group's offset is its own, and it still moves
    assert _committed(cons) == 3
    for i in range(3, 5):
        p.produce("orders", b"v%d" % i)
    assert p.flush(30) == 0
    _read(cons, 2)
    cons.commit(asynchronous=False)
    assert _committed(cons) == 5
    cons.close()


def test_a_broker_echoes_an_8_mib_topic_name_once(cluster):
    big = "x" * (8 << 20)

    async def echoes() -> list[tuple[int, int, str]]:
        async with _stub(cluster.address(cluster.ids[0])) as stub:
            md = await stub.Metadata(bpb.MetadataRequest(topics=[big]))
            pr = await stub.Produce(bpb.ProduceRequest(acks=1, topics=[bpb.ProduceTopicData(
                name=big, partitions=[bpb.ProducePartitionData(partition=0)])]))
        return [(md.ByteSize(), md.topics[0].error_code, md.topics[0].error_message),
                (pr.ByteSize(), pr.topics[0].partitions[0].error_code, pr.topics[0].partitions[0].error_message)]
    # Metadata: an illegal name (longer than 249 characters) is INVALID_TOPIC_EXCEPTION, never
    # created; Produce: the topic is unknown, as Kafka answers both
    answers = asyncio.run(echoes())
    assert [code for _, code, _ in answers] == [ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    for size, _, message in answers:
        assert len(message) <= MAX_MESSAGE_CHARS and size < (8 << 20) + 4096
