"""Automatic topic creation (issue 27 item 1), Kafka's way: a Metadata request naming an
unknown topic, from a client that allows it, creates it with num.partitions and
default.replication.factor. Programs written for Kafka that create nothing themselves
(confluent-kafka, kafka-python, our own client) produce to a new topic and read it back; the
tools' Metadata and consumers with allow.auto.create.topics=false create nothing; an illegal
name is INVALID_TOPIC_EXCEPTION; too few live brokers is INVALID_REPLICATION_FACTOR; a
broker with auto.create.topics.enable=false answers UNKNOWN_TOPIC_OR_PARTITION; CREATE is
checked and concurrent requests share one creation (with a fake controller)."""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

from brokerd.auto_topics import AutoCreateConfig, TopicAutoCreator
from common.errors import ErrorCode
from metadata.acls import CLUSTER_NAME, AclOperation, AclResourceType
from metadata.authorizer import Access
from metadata.client import QuorumUnreachable
from protos import broker_pb2 as bpb
from protos import controller_pb2 as cpb
from tests.brokercluster import BrokerCluster, _stub, running_cluster
from tests.eventually import eventually
from tests.test_authorizer import ALICE, acl, authorizer

PROPS = {"num.partitions": "2", "default.replication.factor": "2", "offsets.topic.num.partitions": "2",
         "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    """Three brokers with auto-creation on (Kafka's default): 2 partitions, 2 replicas."""
    with running_cluster(tmp_path_factory.mktemp("auto"), PROPS) as c:
        yield c


async def metadata(c: BrokerCluster, bid: int, topics: list[str], allow: bool) -> bpb.MetadataResponse:
    async with _stub(c.address(bid)) as stub:
        return await stub.Metadata(bpb.MetadataRequest(topics=topics, allow_auto_topic_creation=allow), timeout=15)


async def exists(c: BrokerCluster, name: str) -> bool:
    async with c.controller() as ctl:
        r = await ctl.describe_topics(cpb.DescribeTopicsRequest(names=[name]))
        return r.topics[0].error_code == 0


def test_confluent_kafka_program_produces_to_a_new_topic_and_consumes_it(cluster):
    """An unmodified librdkafka program: no admin call, the broker creates the topic."""
    from confluent_kafka import Consumer, Producer
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True})
    errors: list = []
    for i in range(10):
        p.produce("cf-new", b"v%d" % i, b"k%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0 and not errors, errors
    d = asyncio.run(cluster.describe_topic("cf-new"))
    assert len(d.partitions) == 2 and all(len(p.replicas) == 2 for p in d.partitions)
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "cf-new-g",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["cf-new"])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.add(m.value())
    c.close()
    assert got == {b"v%d" % i for i in range(10)}


def test_kafka_python_program_produces_to_a_new_topic_and_consumes_it(cluster):
    from kafka import KafkaConsumer, KafkaProducer
    p = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
    for i in range(5):
        p.send("kp-new", b"v%d" % i).get(60)
    p.close()
    c = KafkaConsumer("kp-new", bootstrap_servers=cluster.kafka_bootstrap_servers, group_id="kp-new-g",
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    got = set()
    for m in c:
        got.add(m.value)
        if len(got) == 5:
            break
    c.close()
    assert got == {b"v%d" % i for i in range(5)}


def test_our_producer_creates_our_tools_and_non_creating_consumers_do_not(cluster):
    from clients import Consumer, Producer
    from clients.cluster_view import KafkaTimeoutError

    async def main() -> None:
        async with Producer(cluster.bootstrap_servers) as p:
            md = await (await p.send("ours-new", b"x"))
        assert md.offset == 0 and await exists(cluster, "ours-new")
        # The tools' Metadata (no flag) and a consumer with allow.auto.create.topics=false create nothing.
        r = await metadata(cluster, 101, ["tool-asks"], allow=False)
        assert r.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        async with Consumer(cluster.bootstrap_servers, allow_auto_create_topics=False) as c:
            with pytest.raises(KafkaTimeoutError):
                await c.subscribe(["consumer-no-create"], timeout_ms=1500)
        assert not await exists(cluster, "tool-asks") and not await exists(cluster, "consumer-no-create")
        # Kafka's consumer default (allow.auto.create.topics=true) creates: the subscription finds it.
        async with Consumer(cluster.bootstrap_servers) as c:
            assert sorted(await c.subscribe(["consumer-creates"], timeout_ms=30000)) == \
                [("consumer-creates", 0), ("consumer-creates", 1)]

    asyncio.run(main())


def test_metadata_answers_leader_not_available_then_the_topic(cluster):
    async def main() -> None:
        r = await metadata(cluster, 102, ["lna"], allow=True)
        assert r.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE  # retriable: created, not yet here

        async def ready() -> bool:
            t = (await metadata(cluster, 102, ["lna"], allow=True)).topics[0]
            return t.error_code == 0 and len(t.partitions) == 2
        await eventually(ready, 20, interval=0.1)

    asyncio.run(main())


@pytest.mark.parametrize("name", ["bad/name", "x" * 250, ".."])
def test_an_illegal_name_is_invalid_topic_exception_and_not_created(cluster, name):
    async def main() -> None:
        for allow in (True, False):
            t = (await metadata(cluster, 101, [name], allow=allow)).topics[0]
            assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, t
            assert "illegal" in t.error_message or "cannot be" in t.error_message

    asyncio.run(main())


def test_too_few_live_brokers_and_auto_creation_off(tmp_path):
    """Broker 101 wants 3 replicas of 2 live brokers: the controller's INVALID_REPLICATION_FACTOR;
    broker 102 has auto.create.topics.enable=false: UNKNOWN_TOPIC_OR_PARTITION, as before."""
    node_props = {101: {"default.replication.factor": "3"}, 102: {"auto.create.topics.enable": "false"}}
    with running_cluster(tmp_path, {}, node_props, brokers=2) as c:
        async def main() -> None:
            t = (await metadata(c, 101, ["rf3"], allow=True)).topics[0]
            assert t.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, t
            assert "2 broker(s)" in t.error_message
            t = (await metadata(c, 102, ["off"], allow=True)).topics[0]
            assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, t
            assert not await exists(c, "rf3") and not await exists(c, "off")

        asyncio.run(main())


def test_librdkafka_is_told_an_illegal_name_at_once(cluster):
    from confluent_kafka import KafkaError, Producer
    failed: list = []
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "message.timeout.ms": 20000})
    began = time.monotonic()
    p.produce("bad/name", b"x", on_delivery=lambda err, msg: failed.append(err))
    p.flush(30)
    assert [e.code() for e in failed] == [KafkaError.TOPIC_EXCEPTION]  # not a timeout on an unknown topic
    assert time.monotonic() - began < 10


# -- the creator alone, with a fake controller ----------------------------------------------------

class FakeController:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.release = asyncio.Event()

    async def create_topics(self, request: cpb.CreateTopicsRequest, **kw: object) -> cpb.CreateTopicsResponse:
        self.calls.append(request.topics[0].name)
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return cpb.CreateTopicsResponse(topics=[cpb.CreateTopicResult(name=request.topics[0].name)])


def unknown(*names: str) -> bpb.MetadataResponse:
    return bpb.MetadataResponse(topics=[bpb.TopicMetadata(name=n, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                                        for n in names])


def test_concurrent_requests_share_one_creation():
    async def main() -> None:
        ctl = FakeController()
        creator = TopicAutoCreator(AutoCreateConfig(), ctl)  # type: ignore[arg-type]
        answers = [unknown("t") for _ in range(5)]
        waiting = [asyncio.create_task(creator.resolve(a, Access(None, ALICE), allowed=True)) for a in answers]
        await eventually(lambda: ctl.calls, 5)
        ctl.release.set()
        await asyncio.gather(*waiting)
        assert ctl.calls == ["t"]
        assert {a.topics[0].error_code for a in answers} == {ErrorCode.LEADER_NOT_AVAILABLE}

    asyncio.run(main())


def test_create_is_needed_on_the_cluster_or_the_topic():
    async def main() -> None:
        ctl = FakeController()
        ctl.release.set()
        creator = TopicAutoCreator(AutoCreateConfig(), ctl)  # type: ignore[arg-type]
        topic_only = authorizer(acl("mine", AclOperation.CREATE))
        answer = unknown("mine", "theirs")
        await creator.resolve(answer, Access(topic_only, ALICE), allowed=True)
        assert [t.error_code for t in answer.topics] == [ErrorCode.LEADER_NOT_AVAILABLE,
                                                        ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        assert "may not CREATE" in answer.topics[1].error_message
        on_cluster = authorizer(acl(CLUSTER_NAME, AclOperation.CREATE, rtype=AclResourceType.CLUSTER))
        answer = unknown("theirs")
        await creator.resolve(answer, Access(on_cluster, ALICE), allowed=True)
        assert answer.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
        assert ctl.calls == ["mine", "theirs"]
        # Neither the client's flag nor the broker's setting off: nothing asked.
        answer = unknown("flag-off")
        await creator.resolve(answer, Access(None, ALICE), allowed=False)
        await TopicAutoCreator(AutoCreateConfig(enable=False), ctl).resolve(  # type: ignore[arg-type]
            answer, Access(None, ALICE), allowed=True)
        assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and ctl.calls == ["mine", "theirs"]

    asyncio.run(main())


def test_an_unreachable_quorum_is_retriable_for_the_client():
    async def main() -> None:
        ctl = FakeController(QuorumUnreachable("no controller answered"))
        ctl.release.set()
        answer = unknown(f"t-{uuid.uuid4().hex[:6]}")
        await TopicAutoCreator(AutoCreateConfig(), ctl).resolve(answer, Access(None, ALICE),  # type: ignore[arg-type]
                                                                 allowed=True)
        assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "no controller answered" in answer.topics[0].error_message

    asyncio.run(main())
