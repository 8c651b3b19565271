"""Transactions end to end (issue 28), with real processes and real Kafka clients: a
transaction coordinator on the leader of the transactional id's partition of
``__transaction_state``, commit and abort markers written to every partition of the
transaction, and read_committed consumers that stop at the last stable offset and drop the
records of aborted transactions."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually

TOPICS = ("txn-a", "txn-b")
EXPIRATION_MS = 15_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("txn"),
                         {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "1",
                          "group.initial.rebalance.delay.ms": "0",
                          "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
                          # idle ids go after 15 s (test_an_idle_transactional_id_expires); a producer
                          # whose id went meanwhile gets an abortable error and a new producer id
                          "transactional.id.expiration.ms": str(EXPIRATION_MS),
                          "transaction.remove.expired.transaction.cleanup.interval.ms": "500"}) as c:
        for t in TOPICS:
            asyncio.run(c.create_topic(t, partitions=2, rf=3))
        yield c


def _consume_all(cluster: BrokerCluster, isolation: str, expected: int, timeout: float = 30) -> list[tuple[str, bytes]]:
    """Every record of TOPICS a consumer with ``isolation`` reads, once it has read ``expected``
    and then reached the end of every partition."""
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"g-{isolation}-{time.time()}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(t, p, 0) for t in TOPICS for p in range(2)])
    got: list[tuple[str, bytes]] = []
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not (len(got) >= expected and len(at_end) == 2 * len(TOPICS)):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add((m.topic(), m.partition()))
                    continue
                raise AssertionError(m.error().str())
            at_end.discard((m.topic(), m.partition()))
            got.append((m.topic(), m.value()))
    finally:
        c.close()
    return got


def test_librdkafka_commits_one_transaction_and_aborts_another(cluster):
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-e2e",
                  "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPICS[i % 2], b"committed-%d" % i, key=b"%d" % i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(TOPICS[i % 2], b"aborted-%d" % i, key=b"%d" % i)
    p.flush(30)
    p.abort_transaction(30)
    # a record after the abort, so that read_committed readers must step over the aborted ones
    p.begin_transaction()
    p.produce(TOPICS[0], b"committed-last", key=b"x")
    p.commit_transaction(30)

    committed = _consume_all(cluster, "read_committed", 11)
    values = sorted(v for _, v in committed)
    assert values == sorted([b"committed-%d" % i for i in range(10)] + [b"committed-last"])
    assert {t for t, _ in committed} == set(TOPICS)

    everything = _consume_all(cluster, "read_uncommitted", 17)
    assert sorted(v for _, v in everything) == sorted(values + [b"aborted-%d" % i for i in range(6)])


def test_read_committed_stops_at_an_open_transaction(cluster):
    """The last stable offset: an open transaction holds read_committed readers (and
    ListOffsets latest) back until it commits; read_uncommitted readers see it at once."""
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-open"})
    p.init_transactions(30)
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "lso",
                  "isolation.level": "read_committed"})
    u = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "lso-u",
                  "isolation.level": "read_uncommitted"})
    try:
        tp = TopicPartition("txn-b", 1)
        _, before = c.get_watermark_offsets(tp, timeout=10, cached=False)
        p.begin_transaction()
        p.produce("txn-b", b"open", partition=1)
        p.flush(30)
        _, hw = u.get_watermark_offsets(tp, timeout=10, cached=False)
        assert hw == before + 1
        # librdkafka's query_watermark_offsets asks ListOffsets with the consumer's isolation level
        assert c.get_watermark_offsets(tp, timeout=10, cached=False)[1] == before
        p.commit_transaction(30)
        asyncio.run(eventually(lambda: c.get_watermark_offsets(tp, timeout=10, cached=False)[1] == before + 2, 10,
                               what="the LSO past the committed transaction (its record and marker)"))
    finally:
        c.close()
        u.close()


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(cluster):
    """send_offsets_to_transaction (AddOffsetsToTxn, TxnOffsetCommit): the group's offsets
    move with a committed transaction and stay where they were after an aborted one."""
    asyncio.run(cluster.create_topic("ctp-in", partitions=1, rf=3))
    asyncio.run(cluster.create_topic("ctp-out", partitions=1, rf=3))
    src = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(10):
        src.produce("ctp-in", b"in-%d" % i)
    src.flush(30)
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-ctp"})
    p.init_transactions(30)
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "ctp",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe(["ctp-in"])
    tp = TopicPartition("ctp-in", 0)

    def cycle(n: int, commit: bool) -> None:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n:
            assert time.monotonic() < deadline, f"read {len(got)} of {n}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        p.begin_transaction()
        for v in got:
            p.produce("ctp-out", v.replace(b"in", b"out"))
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)

    def committed() -> int:
        return c.committed([tp], timeout=10)[0].offset

    try:
        cycle(4, commit=True)
        assert committed() == 4
        cycle(3, commit=False)
        assert committed() == 4  # the aborted transaction's offsets were dropped
        c.seek(TopicPartition("ctp-in", 0, 4))  # as an application does after an abort
        cycle(6, commit=True)
        assert committed() == 10
    finally:
        c.close()
    out = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "ctp-check",
                    "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                    "enable.partition.eof": True})
    out.assign([TopicPartition("ctp-out", 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = out.poll(0.2)
            if m is None:
                continue
            if m.error():
                if len(values) >= 10:
                    break
                continue
            values.append(m.value())
    finally:
        out.close()
    assert values == [b"out-%d" % i for i in range(10)]  # each input once, the aborted copies dropped


def _committed_values(cluster: BrokerCluster, topic: str, until: bytes, timeout: float = 30) -> list[bytes]:
    """What a read_committed reader of partition 0 of ``topic`` reads, up to ``until``."""
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"check-{time.time()}",
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while until not in values:
            assert time.monotonic() < deadline, f"{until!r} not read; read {values}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                values.append(m.value())
    finally:
        c.close()
    return values


def test_a_second_producer_fences_the_first(cluster):
    """Zombie fencing: the new producer's InitProducerId aborts the old one's transaction under
    a bumped epoch; the old one's writes and commit are refused and nothing of it is visible."""
    asyncio.run(cluster.create_topic("fence", partitions=1, rf=3))
    conf = {"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-fence"}
    old = Producer(conf)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("fence", b"zombie-1", partition=0)
    old.flush(30)
    new = Producer(conf)
    new.init_transactions(30)
    old.produce("fence", b"zombie-2", partition=0)
    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                          KafkaError.INVALID_PRODUCER_EPOCH), err
    new.begin_transaction()
    new.produce("fence", b"new", partition=0)
    new.commit_transaction(30)
    assert _committed_values(cluster, "fence", b"new") == [b"new"]


def test_the_coordinator_aborts_a_transaction_past_its_timeout(cluster):
    """A producer that goes quiet mid-transaction: after transaction.timeout.ms the coordinator
    aborts it (bumping its epoch), and read_committed readers move past it."""
    asyncio.run(cluster.create_topic("stuck", partitions=1, rf=3))
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-stuck",
                  "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("stuck", b"never committed", partition=0)
    p.flush(30)
    began = time.monotonic()
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    plain.produce("stuck", b"after", partition=0)
    plain.flush(30)
    assert _committed_values(cluster, "stuck", b"after") == [b"after"]  # once the abort moved the LSO
    assert time.monotonic() - began >= 1.5  # not before the timeout
    with pytest.raises(KafkaException):
        p.commit_transaction(30)


def test_a_timeout_above_the_brokers_maximum_is_refused(cluster):
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-long",
                  "transaction.timeout.ms": 900_001})  # transaction.max.timeout.ms is Kafka's 15 minutes
    with pytest.raises(KafkaException) as e:
        p.init_transactions(30)
    assert e.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_a_transactional_batch_for_a_partition_not_added_is_refused(cluster):
    """KIP-890 part 1: the leader asks the coordinator before a producer's first transactional
    batch in a partition; one the transaction does not include is INVALID_TXN_STATE and is not
    written, so it cannot open a transaction no marker would close."""
    from brokerd.kafka import apis as A
    from brokerd.kafka.batches import to_wire
    from common.errors import ErrorCode
    from clients.records import TRANSACTIONAL_FLAG, build_batch, set_producer
    from tests.test_kafka_handlers import Broker

    asyncio.run(cluster.create_topic("kip890", partitions=1, rf=3))
    b = Broker(cluster)
    node, pid, epoch = b.transaction("tx-kip890")

    def produce() -> int:
        batch = build_batch([(b"k", b"v", int(time.time() * 1000), ())])
        batch.attributes |= TRANSACTIONAL_FLAG
        set_producer(batch, pid, epoch, 0)
        r = b.ask(A.PRODUCE, 9, {"transactional_id": "tx-kip890", "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": "kip890", "partition_data": [{"index": 0, "records": to_wire(batch)}]}]}, b.leader("kip890"))
        return r.responses[0].partition_responses[0].error_code.value

    assert produce() == ErrorCode.INVALID_TXN_STATE
    added = b.ask(A.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "tx-kip890", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "kip890", "partitions": [0]}]}, node)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code.value == 0
    assert produce() == ErrorCode.NONE
    ended = b.ask(A.END_TXN, 3, {"transactional_id": "tx-kip890", "producer_id": pid, "producer_epoch": epoch,
                                 "committed": True}, node)
    assert ended.error_code.value == 0
    assert _committed_values(cluster, "kip890", b"v") == [b"v"]


def test_our_consumer_reads_committed_or_uncommitted(cluster):
    """clients.Consumer(isolation_level=...): read_committed drops the aborted transaction's
    records (the aborted index and its marker) and stops at an open one; read_uncommitted
    reads all of them."""
    from clients.consumer import Consumer as OurConsumer

    asyncio.run(cluster.create_topic("ours", partitions=1, rf=3))
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "tx-ours"})
    p.init_transactions(30)
    for value, commit in ((b"c1", True), (b"a1", False), (b"a2", False), (b"c2", True)):
        p.begin_transaction()
        p.produce("ours", value, partition=0)
        p.flush(30)  # sent before the abort (librdkafka drops what is still queued)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    p.begin_transaction()
    p.produce("ours", b"open", partition=0)
    p.flush(30)

    async def read(isolation: str, expected: int) -> list[bytes]:
        async with OurConsumer(cluster.bootstrap_servers, isolation_level=isolation, fetch_max_wait_ms=100) as c:
            await c.assign([("ours", 0)])
            c.seek("ours", 0, 0)
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < expected and time.monotonic() < deadline:
                got.extend(r.value for r in await c.poll(200))
            for _ in range(3):  # and nothing more arrives
                got.extend(r.value for r in await c.poll(200))
            return got

    try:
        assert asyncio.run(read("read_committed", 2)) == [b"c1", b"c2"]
        assert asyncio.run(read("read_uncommitted", 5)) == [b"c1", b"a1", b"a2", b"c2", b"open"]
    finally:
        p.abort_transaction(30)


def test_kafka_python_and_aiokafka_transactional_producers(cluster):
    """The other clients' transactional producers against the same coordinator: one
    transaction committed and one aborted each; read_committed sees the committed ones."""
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    asyncio.run(cluster.create_topic("others", partitions=1, rf=3))
    kp = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, transactional_id="tx-kafka-python")
    kp.init_transactions()
    for value, commit in ((b"kp-committed", True), (b"kp-aborted", False)):
        kp.begin_transaction()
        kp.send("others", value, partition=0)
        kp.flush()
        kp.commit_transaction() if commit else kp.abort_transaction()
    kp.close()

    async def aio() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, transactional_id="tx-aiokafka")
        await ap.start()
        try:
            async with ap.transaction():
                await ap.send_and_wait("others", b"aio-committed", partition=0)
            await ap.begin_transaction()
            await ap.send_and_wait("others", b"aio-aborted", partition=0)
            await ap.abort_transaction()
            async with ap.transaction():
                await ap.send_and_wait("others", b"aio-last", partition=0)
        finally:
            await ap.stop()
    asyncio.run(aio())
    assert _committed_values(cluster, "others", b"aio-last") == [b"kp-committed", b"aio-committed", b"aio-last"]


EOS_PER_PARTITION = 40


def _coordinator_of(cluster: BrokerCluster, key: str, key_type: int = 1) -> int:
    """The broker a live broker names as the coordinator of ``key``: a transactional id
    (``key_type`` 1) or a group (0)."""
    from protos import broker_pb2 as bpb
    from tests.brokercluster import _stub

    async def find() -> int:
        asker = next(b for b in cluster.ids if cluster.procs[b].poll() is None)
        async with _stub(cluster.address(asker)) as s:
            found = await s.FindCoordinator(bpb.FindCoordinatorRequest(key=key, key_type=key_type), timeout=10)
        assert found.error_code == 0 and found.node_id in cluster.ids, found
        return found.node_id
    return asyncio.run(find())


def _read_partitions(cluster: BrokerCluster, topic: str, partitions: int, isolation: str, expected: int,
                     timeout: float = 60) -> dict[int, list[bytes]]:
    """Every value of ``topic`` a consumer with ``isolation`` reads, by partition, once it has
    read ``expected`` and reached the end of every partition."""
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"check-{time.time()}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    got: dict[int, list[bytes]] = {i: [] for i in range(partitions)}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while not (sum(map(len, got.values())) >= expected and len(eof) == partitions):
            assert time.monotonic() < deadline, f"read {got}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error().str()
                eof.add(m.partition())
                continue
            eof.discard(m.partition())
            got[m.partition()].append(m.value())
    finally:
        c.close()
    return got


def test_exactly_once_through_a_killed_coordinator_and_a_stopped_leader(cluster):
    """Consume-transform-produce in a group (librdkafka), every fourth transaction aborted,
    while the transaction coordinator's broker is killed with kill -9 mid-transaction (and
    restarted) and then the leader of an output partition (a follower if the coordinators
    lead them all) is SIGSTOPped mid-transaction (and continued): a read_committed reader of the output sees every input exactly once, in order
    per partition, and none of the aborted records, which a read_uncommitted reader does see.
    (It kills and stops brokers; each is back and unfenced at its end.)"""
    n, parts, tid = EOS_PER_PARTITION, 2, "tx-eos"
    for t in ("eos-in", "eos-out"):
        asyncio.run(cluster.create_topic(t, partitions=parts, rf=3))
    src = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True})
    for i in range(n):
        for part in range(parts):
            src.produce("eos-in", b"%d-%d" % (part, i), partition=part)
    assert src.flush(30) == 0
    src.close()
    # A stopped broker answers nothing: librdkafka gives up on a request to it after these
    # timeouts (60 and 30 s by default) and then asks the new leader or coordinator.
    patience = {"socket.timeout.ms": 5000, "request.timeout.ms": 5000}
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": tid,
                  "transaction.timeout.ms": 60000, **patience})
    p.init_transactions(60)
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "eos", "auto.offset.reset":
                  "earliest", "enable.auto.commit": False, "isolation.level": "read_committed", "socket.timeout.ms": 5000})
    c.subscribe(["eos-in"])
    aborted: list[bytes] = []  # flushed, then aborted on purpose: read_uncommitted sees them
    killed = stopped = None
    cycle = committed = 0

    def rewind() -> None:
        """After an abort, back to the group's committed offsets (as an application does)."""
        for tp in c.committed(c.assignment(), timeout=30):
            c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))

    try:
        deadline = time.monotonic() + 120
        while committed < n * parts:
            assert time.monotonic() < deadline, f"{committed} of {n * parts} inputs committed by cycle {cycle}"
            batch = [m for m in c.consume(5, 0.5) if not m.error()]
            if not batch:
                continue
            cycle += 1
            if cycle == 9:  # the killed broker is back before the next fault (and the transaction)
                asyncio.run(cluster.wait_unfenced(timeout=60))
            p.begin_transaction()
            values = [b"%s@%d" % (m.value(), cycle) for m in batch]
            for m, v in zip(batch, values, strict=True):
                p.produce("eos-out", v, partition=m.partition())
            if cycle == 3:  # the coordinator dies with the transaction open and its records written
                assert p.flush(30) == 0
                killed = _coordinator_of(cluster, tid)
                cluster.kill(killed)
            if cycle == 9:  # an output partition's leader stops with records in flight to it
                # Not a coordinator's broker: stopped past its session, a group coordinator's
                # broker is dropped by librdkafka and never asked about again, and
                # send_offsets_to_transaction blocks past its timeout (librdkafka issues 5511
                # and 5456, docs/brokers.md "Transactions"; the coordinators' failover is the kill above).
                coordinators = {_coordinator_of(cluster, tid), _coordinator_of(cluster, "eos", 0)}
                leaders = [x.leader for x in asyncio.run(cluster.describe_topic("eos-out")).partitions
                           if x.partition in {m.partition() for m in batch}]
                stopped = next((b for b in leaders + cluster.ids if b not in coordinators), leaders[0])
                cluster.signal(stopped, signal.SIGSTOP)
            try:
                offsets = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
                p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 60)
                if cycle % 4 == 0:
                    assert p.flush(60) == 0
                    p.abort_transaction(60)
                    aborted += values
                    rewind()
                else:
                    p.commit_transaction(60)
                    committed += len(batch)
            except KafkaException as e:
                assert e.args[0].txn_requires_abort(), e
                p.abort_transaction(60)
                rewind()
            if cycle == 6 and killed is not None:
                cluster.start_broker(killed)
            if cycle == 13 and stopped is not None:
                cluster.signal(stopped, signal.SIGCONT)
                stopped = None
    finally:
        c.close()
        with contextlib.suppress(KafkaException):  # a fatal error: the failure raised above says more
            p.close()
        if stopped is not None:
            cluster.signal(stopped, signal.SIGCONT)
        if killed is not None and cluster.procs[killed].poll() is not None:
            cluster.start_broker(killed)
        asyncio.run(cluster.wait_unfenced(timeout=60))
    assert killed is not None and cycle >= 13 and aborted
    seen = _read_partitions(cluster, "eos-out", parts, "read_committed", n * parts)
    for part in range(parts):
        assert [v.split(b"@")[0] for v in seen[part]] == [b"%d-%d" % (part, i) for i in range(n)], seen[part]
    assert not set(aborted) & {v for vs in seen.values() for v in vs}
    everything = _read_partitions(cluster, "eos-out", parts, "read_uncommitted", n * parts + len(aborted))
    assert set(aborted) <= {v for vs in everything.values() for v in vs}


#: Less than the brokers' 3 s session: the stopped broker stays the coordinator. (Stopped past
#: it, the broker is fenced and leaves the Metadata answers, and librdkafka 2.16's
#: send_offsets_to_transaction was seen waiting for its cached group coordinator for minutes,
#: past its timeout: confluentinc/librdkafka issues 5456 and 5511.)
STOP_S = 2


@contextlib.contextmanager
def _stopped_for(cluster: BrokerCluster, bids: set[int], seconds: float) -> Iterator[None]:
    """Brokers ``bids`` SIGSTOPped now and continued ``seconds`` later, whatever the body is
    waiting for meanwhile; on exit, once they are continued."""
    def cont() -> None:
        for bid in bids:
            cluster.signal(bid, signal.SIGCONT)
    timer = threading.Timer(seconds, cont)
    for bid in bids:
        cluster.signal(bid, signal.SIGSTOP)
    timer.start()
    try:
        yield
    finally:
        timer.join()
        cont()


def test_send_offsets_and_commit_through_a_stopped_coordinators_broker(cluster):
    """The transaction and the group coordinators' brokers (one or two) are SIGSTOPped for
    STOP_S while librdkafka sends the consumer's offsets and commits, then continued: the
    requests it got meanwhile are answered, each call returns within its timeout (done, or an
    abortable error after which the application aborts and tries again), and the committed
    transaction's output and offsets are there exactly once."""
    for t in ("stop-in", "stop-out"):
        asyncio.run(cluster.create_topic(t, partitions=1, rf=3))
    src = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(5):
        src.produce("stop-in", b"in-%d" % i, partition=0)
    assert src.flush(30) == 0
    patience = {"socket.timeout.ms": 5000, "request.timeout.ms": 5000}
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "stop-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
                  **patience})
    c.subscribe(["stop-in"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 5:
        assert time.monotonic() < deadline, f"read {got}"
        got += [m.value() for m in c.consume(5, 0.5) if not m.error()]
    tid = "tx-stop"
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": tid,
                  "transaction.timeout.ms": 60000, **patience})
    p.init_transactions(30)
    stopped = {_coordinator_of(cluster, tid), _coordinator_of(cluster, "stop-group", 0)}

    def timed(what: str, call, *args, timeout: float = 30) -> None:
        """``call(*args, timeout)``, which must return (or raise) within its timeout."""
        began = time.monotonic()
        try:
            call(*args, timeout)
        finally:
            took = time.monotonic() - began
            assert took < timeout + 5, f"{what} returned after {took:.1f} s, past its timeout of {timeout} s"

    def transaction(values: list[bytes], offset: int, stop: contextlib.ExitStack | None = None) -> None:
        """Until one commits: the outputs of ``values`` and the input's offset; with ``stop``,
        the coordinators' brokers are stopped (until that stack closes, or STOP_S) once the
        first attempt's outputs are written."""
        for attempt in range(3):
            p.begin_transaction()
            for v in values:
                p.produce("stop-out", v.replace(b"in", b"out"), partition=0)
            assert p.flush(30) == 0
            if stop is not None and attempt == 0:
                stop.enter_context(_stopped_for(cluster, stopped, STOP_S))
            try:
                timed("send_offsets_to_transaction", p.send_offsets_to_transaction,
                      [TopicPartition("stop-in", 0, offset)], c.consumer_group_metadata())
                timed("commit_transaction", p.commit_transaction)
                return
            except KafkaException as e:
                assert e.args[0].txn_requires_abort(), e
                timed("abort_transaction", p.abort_transaction)
        raise AssertionError("no transaction committed in 3 attempts")

    try:
        with contextlib.ExitStack() as stop:
            transaction(got[:2], 2)  # librdkafka has met the group's coordinator, as a running application has
            transaction(got[2:], 5, stop)
    finally:
        c.close()
        with contextlib.suppress(KafkaException):
            p.close()
    asyncio.run(cluster.wait_unfenced(timeout=60))
    check = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "stop-group",
                      "isolation.level": "read_committed"})
    try:
        assert check.committed([TopicPartition("stop-in", 0)], timeout=30)[0].offset == 5
    finally:
        check.close()
    assert _committed_values(cluster, "stop-out", b"out-4") == [b"out-%d" % i for i in range(5)]


def test_brokers_name_live_coordinators_while_the_coordinators_broker_is_stopped_past_its_session(cluster):
    """Our brokers' side of what librdkafka was seen blocking on (docs/brokers.md
    "Transactions"): a group's coordinator's broker (and a transactional id's, if it leads a
    partition of __transaction_state) is SIGSTOPped past its session: once it is fenced, the
    other brokers' Metadata answers (Kafka protocol) leave it out, as Kafka leaves out a fenced
    broker, and their FindCoordinator answers name a live broker for the group (and the id);
    continued, it is back in the Metadata answers and names the same coordinators as the
    others."""
    from confluent_kafka.admin import AdminClient
    from protos import broker_pb2 as bpb, controller_pb2 as cpb
    from tests.brokercluster import _stub

    async def named(asker: int, key: str, key_type: int) -> int | None:
        """The coordinator ``asker`` names for ``key``, None while it answers an error."""
        async with _stub(cluster.address(asker)) as s:
            r = await s.FindCoordinator(bpb.FindCoordinatorRequest(key=key, key_type=key_type), timeout=5)
        return r.node_id if r.error_code == 0 else None

    def metadata_brokers(bid: int) -> set[int]:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka_ports[bid]}"})
        return set(admin.list_topics(timeout=10).brokers)

    def coordinator(key: str, key_type: int) -> int:
        """Once there is one (the internal topics may be being created)."""
        return asyncio.run(eventually(lambda: named(cluster.ids[0], key, key_type), 20,
                                      what=f"a coordinator of {key}"))

    group = "stopped-group"
    stopped = coordinator(group, 0)
    # and a transactional id it coordinates, if it leads a partition of __transaction_state
    keys = [(group, 0)] + [(t, 1) for t in (f"tx-stopped-{k}" for k in range(30)) if coordinator(t, 1) == stopped][:1]
    live = [b for b in cluster.ids if b != stopped]

    async def while_stopped() -> None:
        async def fenced() -> bool:
            async with cluster.controller() as cc:
                brokers = (await cc.describe_cluster(cpb.DescribeClusterRequest())).brokers
            return next(b for b in brokers if b.id == stopped).fenced
        async def names_a_live_one(asker: int, key: str, key_type: int) -> bool:
            return await named(asker, key, key_type) in live

        async def leaves_it_out(asker: int) -> bool:
            return await asyncio.to_thread(metadata_brokers, asker) == set(live)

        await eventually(fenced, 20, interval=0.1, what=f"broker {stopped} fenced")
        for asker in live:
            for key, key_type in keys:
                await eventually(functools.partial(names_a_live_one, asker, key, key_type), 20, interval=0.1,
                                 what=f"broker {asker} naming a live coordinator of {key}")
            await eventually(functools.partial(leaves_it_out, asker), 20,
                             what=f"broker {asker}'s Metadata without {stopped}")

    cluster.signal(stopped, signal.SIGSTOP)
    try:
        asyncio.run(while_stopped())
    finally:
        cluster.signal(stopped, signal.SIGCONT)
    asyncio.run(cluster.wait_unfenced(timeout=60))

    async def agreed() -> bool:
        for key, key_type in keys:
            answers = {await named(b, key, key_type) for b in cluster.ids}
            if len(answers) != 1 or None in answers:
                return False
        return metadata_brokers(stopped) == set(cluster.ids)
    asyncio.run(eventually(agreed, 30, interval=0.2, what=f"broker {stopped} back and naming the others' coordinators"))


# -- our Producer's transactional API (clients.Producer(transactional_id=...)) ------------------------

async def _read_ours(cluster: BrokerCluster, tps: list[tuple[str, int]], isolation: str, expected: int,
                     timeout: float = 20) -> list[bytes]:
    """Every value our Consumer with ``isolation`` reads from ``tps``, once it has ``expected``
    and three more polls brought nothing new."""
    from clients.consumer import Consumer as OurConsumer

    async with OurConsumer(cluster.bootstrap_servers, isolation_level=isolation, fetch_max_wait_ms=100,
                           auto_offset_reset="earliest") as c:
        await c.assign(tps)
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(r.value for r in await c.poll(200))
        for _ in range(3):
            got.extend(r.value for r in await c.poll(200))
        return got


def test_our_producer_commits_one_transaction_and_aborts_another(cluster):
    """Over the brokers' gRPC: init, a transaction over two topics committed, one aborted, one
    more committed; our read_committed Consumer sees only the committed records, a
    read_uncommitted one sees all of them."""
    from clients import Producer as OurProducer

    for t in ("ours-a", "ours-b"):
        asyncio.run(cluster.create_topic(t, partitions=1, rf=3))
    tps = [("ours-a", 0), ("ours-b", 0)]

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="ours-e2e", linger_ms=5) as p:
            await p.init_transactions()
            for tag, commit in (("c1", True), ("a1", False), ("c2", True)):
                p.begin_transaction()
                futures = [await p.send(t, f"{tag}-{t}".encode(), partition=0) for t, _ in tps]
                if commit:
                    await p.commit_transaction()
                    assert all(f.done() and f.exception() is None for f in futures)
                else:
                    await p.flush()  # written, then aborted (what is still queued is dropped)
                    await p.abort_transaction()
    asyncio.run(go())
    committed = asyncio.run(_read_ours(cluster, tps, "read_committed", 4))
    assert sorted(committed) == sorted(f"{tag}-{t}".encode() for tag in ("c1", "c2") for t, _ in tps)
    everything = asyncio.run(_read_ours(cluster, tps, "read_uncommitted", 6))
    assert len(everything) == 6 and {b"a1-ours-a", b"a1-ours-b"} <= set(everything)


def test_our_producer_fenced_by_a_second_one_raises_a_fatal_error(cluster):
    """Two of our producers with one transactional id: the second's init_transactions fences
    the first, whose commit then raises ProducerFencedError, and so does every later call;
    nothing the first wrote becomes visible."""
    from clients import Producer as OurProducer
    from clients.transactions import ProducerFencedError, TransactionFatalError

    asyncio.run(cluster.create_topic("ours-fence", partitions=1, rf=3))

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="ours-fence") as old, \
                OurProducer(cluster.bootstrap_servers, transactional_id="ours-fence") as new:
            await old.init_transactions()
            old.begin_transaction()
            await (await old.send("ours-fence", b"zombie", partition=0))
            await new.init_transactions()
            with pytest.raises(ProducerFencedError) as e:
                await old.commit_transaction()
            assert isinstance(e.value, TransactionFatalError) and "PRODUCER_FENCED" in str(e.value)
            with pytest.raises(ProducerFencedError):
                old.begin_transaction()  # the producer is unusable from now on
            new.begin_transaction()
            await new.send("ours-fence", b"new", partition=0)
            await new.commit_transaction()
    asyncio.run(go())
    assert asyncio.run(_read_ours(cluster, [("ours-fence", 0)], "read_committed", 1)) == [b"new"]


def test_our_consume_transform_produce_commits_offsets_with_the_transaction(cluster):
    """Our Consumer in a group reads the input, our Producer writes the transformed records
    and the consumer's offsets in one transaction (send_offsets_to_transaction): an aborted
    round commits neither, a committed one both."""
    from clients import Consumer as OurConsumer, Producer as OurProducer

    for t in ("ours-ctp-in", "ours-ctp-out"):
        asyncio.run(cluster.create_topic(t, partitions=1, rf=3))

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers) as plain:
            for i in range(5):
                await plain.send("ours-ctp-in", f"in-{i}".encode(), partition=0)
        async with OurProducer(cluster.bootstrap_servers, transactional_id="ours-ctp") as p, \
                OurConsumer(cluster.bootstrap_servers, group_id="ctp", auto_offset_reset="earliest",
                            enable_auto_commit=False, isolation_level="read_committed") as c:
            await p.init_transactions()
            await c.subscribe(["ours-ctp-in"])
            records: list = []
            while len(records) < 5:
                records.extend(await c.poll(500))
            for commit in (False, True):
                p.begin_transaction()
                for r in records:
                    await p.send("ours-ctp-out", r.value.replace(b"in", b"out"), partition=0)
                await p.send_offsets_to_transaction({("ours-ctp-in", 0): records[-1].offset + 1}, c.group_metadata())
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
                    assert await c.committed("ours-ctp-in", 0) is None
            assert await eventually(lambda: c.committed("ours-ctp-in", 0), 10) == 5
    asyncio.run(go())
    assert asyncio.run(_read_ours(cluster, [("ours-ctp-out", 0)], "read_committed", 5)) == \
        [f"out-{i}".encode() for i in range(5)]


def test_exactly_once_with_our_clients_through_a_killed_coordinator_and_a_stopped_leader(cluster):
    """The librdkafka fault test above with our clients: our Consumer in a group
    (read_committed) and our Producer (transactional_id) consume, transform and produce, every
    fourth transaction aborted, through a kill -9 of the transaction coordinator's broker with
    a transaction's records written (restarted three transactions later) and a 5 s SIGSTOP of
    an output partition's leader with records in flight to it (past the brokers' 3 s session,
    so the partition's leadership moves, and the coordinators' if it was theirs: our producer
    finds them again within its request timeout): a read_committed reader of the output sees
    every input exactly once and in order, and none of the aborted records, which a
    read_uncommitted reader does see."""
    from clients import Consumer as OurConsumer, Producer as OurProducer
    from clients.transactions import TransactionAbortableError

    n, parts, tid = 20, 2, "ours-eos"
    for t in ("ours-eos-in", "ours-eos-out"):
        asyncio.run(cluster.create_topic(t, partitions=parts, rf=3))
    aborted: list[bytes] = []  # flushed, then aborted on purpose: read_uncommitted sees them
    faults: dict[str, int] = {}

    async def go(stop: contextlib.ExitStack) -> None:
        async with OurProducer(cluster.bootstrap_servers) as src:
            for i in range(n):
                for part in range(parts):
                    await src.send("ours-eos-in", b"%d-%d" % (part, i), partition=part)
        # A stopped broker answers nothing: our clients give up on a request to it after
        # request_timeout_ms (30 s by default) and then ask the new leader or coordinator.
        async with OurProducer(cluster.bootstrap_servers, transactional_id=tid, request_timeout_ms=5000,
                               linger_ms=5) as p, \
                OurConsumer(cluster.bootstrap_servers, group_id="ours-eos", auto_offset_reset="earliest",
                            enable_auto_commit=False, isolation_level="read_committed", request_timeout_ms=5000,
                            max_poll_records=5, fetch_max_wait_ms=100) as c:
            await p.init_transactions()
            await c.subscribe(["ours-eos-in"])
            cycle = committed = 0

            async def rewind() -> None:
                """After an abort, back to the group's committed offsets (as an application does)."""
                for topic, part in c.assignment():
                    c.seek(topic, part, await c.committed(topic, part) or 0)

            deadline = time.monotonic() + 60
            while committed < n * parts:
                assert time.monotonic() < deadline, f"{committed} of {n * parts} inputs committed by cycle {cycle}"
                batch = await c.poll(500)
                if not batch:
                    continue
                cycle += 1
                if cycle == 7:  # the killed broker is back; the leader of the first record's output
                    # partition stops (whatever coordinator it also is) for longer than its session
                    await cluster.wait_unfenced(timeout=60)
                    out = (await cluster.describe_topic("ours-eos-out")).partitions
                    faults["stopped"] = next(x.leader for x in out if x.partition == batch[0].partition)
                    stop.enter_context(_stopped_for(cluster, {faults["stopped"]}, 5))
                p.begin_transaction()
                values = [b"%s@%d" % (r.value, cycle) for r in batch]
                try:
                    for r, v in zip(batch, values, strict=True):
                        await p.send("ours-eos-out", v, partition=r.partition)
                    if cycle == 3:  # the coordinator dies with the transaction open and its records written
                        await p.flush()
                        faults["killed"] = await asyncio.to_thread(_coordinator_of, cluster, tid)
                        cluster.kill(faults["killed"])
                    await p.send_offsets_to_transaction(
                        {tp: pos for tp in c.assignment() if (pos := c.position(*tp)) is not None}, c.group_metadata())
                    if cycle % 4 == 0:
                        await p.flush()
                        await p.abort_transaction()
                        aborted.extend(values)
                        await rewind()
                    else:
                        await p.commit_transaction()
                        committed += len(batch)
                except TransactionAbortableError:
                    # also INVALID_PRODUCER_ID_MAPPING: on a loaded host the coordinator's
                    # failover at cycle 7 left the id idle past the 15 s expiration
                    await p.abort_transaction()
                    await rewind()
                if cycle == 6:
                    cluster.start_broker(faults["killed"])
            assert cycle >= 7

    try:
        with contextlib.ExitStack() as stop:
            asyncio.run(go(stop))
    finally:
        if "killed" in faults and cluster.procs[faults["killed"]].poll() is not None:
            cluster.start_broker(faults["killed"])
        asyncio.run(cluster.wait_unfenced(timeout=60))
    assert {"killed", "stopped"} <= set(faults) and aborted
    seen = _read_partitions(cluster, "ours-eos-out", parts, "read_committed", n * parts)
    for part in range(parts):
        assert [v.split(b"@")[0] for v in seen[part]] == [b"%d-%d" % (part, i) for i in range(n)], seen[part]
    assert not set(aborted) & {v for vs in seen.values() for v in vs}
    everything = _read_partitions(cluster, "ours-eos-out", parts, "read_uncommitted", n * parts + len(aborted))
    assert set(aborted) <= {v for vs in everything.values() for v in vs}


# -- kraft transactions (kafka-transactions.sh) ----------------------------------------------------------

async def _send_plain(cluster: BrokerCluster, topic: str, value: bytes) -> None:
    from clients import Producer as OurProducer
    async with OurProducer(cluster.bootstrap_servers) as p:
        await (await p.send(topic, value, partition=0))


def _kraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], capture_output=True, text=True, timeout=60)


def test_kraft_transactions_lists_describes_finds_hanging_and_aborts(cluster):
    """The tool against the cluster: list and describe an open transaction; a transactional
    batch written without any coordinator knowing it (a hanging transaction, which KIP-890
    prevents for producers that name their transactional id) is found by find-hanging, holds
    read_committed readers, and is gone once ``abort --start-offset`` wrote its marker."""
    from clients import Producer as OurProducer
    from clients.records import build_batch, set_producer
    from protos import broker_pb2 as bpb
    from tests.brokercluster import _stub

    asyncio.run(cluster.create_topic("hang", partitions=1, rf=3))
    boot = ["transactions", "--bootstrap-server", cluster.bootstrap_servers]

    async def open_and_hang() -> tuple[OurProducer, int]:
        # Open across four runs of the tool, each a Python start-up: on a loaded host (load 45)
        # they outlasted the default transaction.timeout.ms of 60 s, the coordinator aborted the
        # transaction (as Kafka's does) and the id expired 15 s later (TRANSACTIONAL_ID_NOT_FOUND).
        # Longer than the test's own timeout, it stays open as long as the test runs.
        p = await OurProducer(cluster.bootstrap_servers, transactional_id="tool-open",
                              transaction_timeout_ms=600_000).start()
        await p.init_transactions()
        p.begin_transaction()
        await (await p.send("hang", b"open", partition=0))
        leader = (await cluster.describe_topic("hang")).partitions[0].leader
        async with _stub(cluster.address(leader)) as s:
            pid = (await s.InitProducerId(bpb.InitProducerIdRequest())).producer_id
            batch = build_batch([(None, b"hanging", int(time.time() * 1000), ())])
            set_producer(batch, pid, 0, 0, transactional=True)
            r = await s.Produce(bpb.ProduceRequest(acks=-1, topics=[bpb.ProduceTopicData(
                name="hang", partitions=[bpb.ProducePartitionData(partition=0, batch=batch)])]))
            assert r.topics[0].partitions[0].error_code == 0
            return p, r.topics[0].partitions[0].base_offset

    loop = asyncio.new_event_loop()
    try:
        p, hanging_offset = loop.run_until_complete(open_and_hang())
        listed = _kraft(*boot, "list")
        assert listed.returncode == 0, listed.stderr
        row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("tool-open "))
        assert row[3] == "Ongoing"
        described = _kraft(*boot, "describe", "--transactional-id", "tool-open")
        assert described.returncode == 0, described.stderr
        assert described.stdout.splitlines()[0].split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId",
                                                               "ProducerEpoch", "TransactionState"]
        fields = described.stdout.splitlines()[1].split()
        assert fields[1] == "tool-open" and fields[4] == "Ongoing" and fields[-1] == "hang-0"
        missing = _kraft(*boot, "describe", "--transactional-id", "no-such-id")
        assert missing.returncode == 1 and missing.stderr.startswith("Error: TRANSACTIONAL_ID_NOT_FOUND"), missing.stderr
        leader = asyncio.run(cluster.describe_topic("hang")).partitions[0].leader
        hanging = _kraft(*boot, "find-hanging", "--broker-id", str(leader), "--max-transaction-timeout", "0")
        assert hanging.returncode == 0, hanging.stderr
        rows = [line.split() for line in hanging.stdout.splitlines()[1:]]
        # the open transaction of tool-open is not hanging: its coordinator has it Ongoing
        assert [(r[0], r[1], r[5]) for r in rows] == [("hang", "0", str(hanging_offset))], hanging.stdout
        loop.run_until_complete(p.abort_transaction())
        aborted = _kraft(*boot, "abort", "--topic", "hang", "--partition", "0", "--start-offset", str(hanging_offset))
        assert aborted.returncode == 0, aborted.stderr
        loop.run_until_complete(_send_plain(cluster, "hang", b"after"))
        # both transactions aborted, and nothing holds read_committed readers back any more
        assert asyncio.run(_read_ours(cluster, [("hang", 0)], "read_committed", 1)) == [b"after"]
        again = _kraft(*boot, "abort", "--topic", "hang", "--partition", "0", "--start-offset", str(hanging_offset))
        assert again.returncode == 1 and "Could not find any open transactions" in again.stderr
    finally:
        loop.run_until_complete(p.close())
        loop.close()


def test_an_idle_transactional_id_expires(cluster):
    """transactional.id.expiration.ms: an id whose last transaction completed and that then
    stays idle is forgotten by its coordinator (a tombstone in __transaction_state): describe
    finds it no more. Its producer, still open, gets INVALID_PRODUCER_ID_MAPPING for its next
    transaction as an abortable error, as Kafka's does (abortableErrorIfPossible, KIP-360): the
    abort gets it a new producer id (no EndTxn: the coordinator does not know the id), and its
    next transaction commits. (Before, that answer was fatal: a producer idle past the
    expiration, as test_exactly_once_with_our_clients_... met it on a loaded CI host, could not
    go on.) A new producer of the id then fences it."""
    from clients import Producer as OurProducer
    from clients.admin import Admin
    from clients.transactions import ProducerFencedError, TransactionAbortableError
    from common.errors import ErrorCode, KafkaError as OurKafkaError

    asyncio.run(cluster.create_topic("expire", partitions=1, rf=3))

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="tx-expire") as p:
            await p.init_transactions()
            first_id = p.producer_id
            p.begin_transaction()
            await p.send("expire", b"v", partition=0)
            await p.commit_transaction()
            async with Admin(cluster.bootstrap_servers) as admin:
                _, d = await admin.describe_transaction("tx-expire")
                assert d.state in ("PrepareCommit", "CompleteCommit")
                committed = time.monotonic()

                async def gone() -> bool:
                    try:
                        await admin.describe_transaction("tx-expire")
                        return False
                    except OurKafkaError as e:
                        return e.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                await eventually(gone, EXPIRATION_MS / 1000 + 10, what="the idle transactional id expired")
                assert time.monotonic() - committed >= EXPIRATION_MS / 1000 - 1.5  # not before its time

            p.begin_transaction()
            with pytest.raises(TransactionAbortableError) as e:
                await p.send("expire", b"refused", partition=0)
            assert e.value.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            await p.abort_transaction()
            assert p.producer_id != first_id and p.producer_epoch == 0
            p.begin_transaction()
            await p.send("expire", b"after expiry", partition=0)
            await p.commit_transaction()
            second_id = p.producer_id

            async with OurProducer(cluster.bootstrap_servers, transactional_id="tx-expire") as newer:
                await newer.init_transactions()
                assert (newer.producer_id, newer.producer_epoch) == (second_id, 1)
                p.begin_transaction()
                with pytest.raises(ProducerFencedError):
                    await p.send("expire", b"fenced", partition=0)
    asyncio.run(go())
    assert _committed_values(cluster, "expire", b"after expiry") == [b"v", b"after expiry"]


def test_a_fenced_producers_txn_offset_commit_is_refused(cluster):
    """A zombie's TxnOffsetCommit: once a newer producer with its transactional id has fenced
    it (the abort marker of its transaction reached the offsets partition under the new
    epoch), its offsets under the old epoch are refused with PRODUCER_FENCED, not kept pending
    where the new producer's commit marker would commit them."""
    from clients import Producer as OurProducer
    from clients.consumer_coordinator import ConsumerGroupMetadata
    from common.errors import ErrorCode
    from protos import broker_pb2 as bpb
    from tests.brokercluster import _stub

    asyncio.run(cluster.create_topic("zombie-in", partitions=1, rf=3))
    group = ConsumerGroupMetadata("zombie-group")

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="tx-zombie") as old, \
                OurProducer(cluster.bootstrap_servers, transactional_id="tx-zombie") as new:
            await old.init_transactions()
            old.begin_transaction()
            await old.send_offsets_to_transaction({("zombie-in", 0): 1}, group)
            await new.init_transactions()  # fences old: its transaction is aborted under a new epoch
            async with _stub(cluster.address(cluster.ids[0])) as s:
                found = await s.FindCoordinator(bpb.FindCoordinatorRequest(key=group.group_id))
            async with _stub(f"{found.host}:{found.port}") as s:
                r = await s.TxnOffsetCommit(bpb.TxnOffsetCommitRequest(
                    transactional_id="tx-zombie", producer_id=old.producer_id, producer_epoch=old.producer_epoch,
                    offsets=bpb.OffsetCommitRequest(group_id=group.group_id, generation_id=-1, topics=[
                        bpb.OffsetCommitTopic(name="zombie-in", partitions=[
                            bpb.OffsetCommitPartition(partition=0, offset=5, leader_epoch=-1)])])))
                code = r.topics[0].partitions[0].error_code
                assert code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH), ErrorCode.of(code).name
            new.begin_transaction()
            await new.send_offsets_to_transaction({("zombie-in", 0): 2}, group)
            await new.commit_transaction()
            async with _stub(f"{found.host}:{found.port}") as s:
                async def committed() -> int | None:
                    r = await s.OffsetFetch(bpb.OffsetFetchRequest(group_id=group.group_id, topics=[
                        bpb.OffsetFetchTopic(name="zombie-in", partitions=[0])]))
                    offset = r.topics[0].partitions[0].offset if r.topics else -1
                    return offset if offset >= 0 else None
                assert await eventually(committed, 10) == 2  # the zombie's 5 never counts
    asyncio.run(go())


def test_a_txn_offset_commit_for_a_group_not_added_is_refused(cluster):
    """KIP-890 part 1 for offsets: the group coordinator asks the transaction coordinator
    before a producer's first transactional offsets in the group's partition; a
    TxnOffsetCommit without AddOffsetsToTxn (in an open transaction, or a late retry after
    the transaction ended) is INVALID_TXN_STATE and not written, so it neither opens a
    transaction no marker would close nor ever counts."""
    from clients import Producer as OurProducer
    from clients.consumer_coordinator import ConsumerGroupMetadata
    from common.errors import ErrorCode
    from protos import broker_pb2 as bpb
    from tests.brokercluster import _stub

    asyncio.run(cluster.create_topic("kip890-in", partitions=1, rf=3))
    group = ConsumerGroupMetadata("kip890-group")

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="tx-kip890-offsets") as p:
            await p.init_transactions()
            async with _stub(cluster.address(cluster.ids[0])) as s:
                found = await s.FindCoordinator(bpb.FindCoordinatorRequest(key=group.group_id))
            async with _stub(f"{found.host}:{found.port}") as s:
                async def txn_offset_commit(offset: int) -> int:
                    r = await s.TxnOffsetCommit(bpb.TxnOffsetCommitRequest(
                        transactional_id="tx-kip890-offsets", producer_id=p.producer_id,
                        producer_epoch=p.producer_epoch, offsets=bpb.OffsetCommitRequest(
                            group_id=group.group_id, generation_id=-1, topics=[bpb.OffsetCommitTopic(
                                name="kip890-in", partitions=[bpb.OffsetCommitPartition(
                                    partition=0, offset=offset, leader_epoch=-1)])])))
                    return r.topics[0].partitions[0].error_code

                async def committed() -> int | None:
                    """The group's offset once no transaction has offsets of it pending."""
                    r = await s.OffsetFetch(bpb.OffsetFetchRequest(group_id=group.group_id, require_stable=True,
                                                                   topics=[bpb.OffsetFetchTopic(
                                                                       name="kip890-in", partitions=[0])]))
                    part = r.topics[0].partitions[0]
                    return None if part.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT else part.offset

                p.begin_transaction()
                await p.send("kip890-in", b"v", partition=0)  # the transaction is open, the group not in it
                assert ErrorCode.of(await txn_offset_commit(7)) == ErrorCode.INVALID_TXN_STATE
                await p.send_offsets_to_transaction({("kip890-in", 0): 1}, group)  # AddOffsetsToTxn first
                await p.commit_transaction()
                assert await eventually(committed, 10) == 1
                # a late TxnOffsetCommit of the ended transaction
                assert ErrorCode.of(await txn_offset_commit(9)) == ErrorCode.INVALID_TXN_STATE
                assert await committed() == 1
    asyncio.run(go())


def test_a_retried_epoch_bump_gets_the_same_epoch(cluster):
    """KIP-360: a producer that bumps its epoch after an abortable error (InitProducerId with
    its producer id and epoch) and retries because the answer was lost gets the epoch of the
    first bump, not PRODUCER_FENCED (Kafka's prepareIncrementProducerEpoch); once a new
    producer initialized with the id, that old epoch is fenced."""
    from brokerd.kafka import apis as A
    from common.errors import ErrorCode
    from tests.test_kafka_handlers import Broker

    b = Broker(cluster)
    node, pid, epoch = b.transaction("tx-bump")

    def init(producer_id: int, producer_epoch: int) -> tuple[ErrorCode, int]:
        r = b.ask(A.INIT_PRODUCER_ID, 4, {"transactional_id": "tx-bump", "transaction_timeout": 60_000,
                                          "producer_id": producer_id, "producer_epoch": producer_epoch}, node)
        return ErrorCode.of(r.error_code.value), r.producer_epoch

    assert init(pid, epoch) == (ErrorCode.NONE, epoch + 1)
    assert init(pid, epoch) == (ErrorCode.NONE, epoch + 1)  # the retry
    assert init(pid, epoch + 1) == (ErrorCode.NONE, epoch + 2)  # the next bump
    assert init(-1, -1) == (ErrorCode.NONE, epoch + 3)  # a new producer
    assert init(pid, epoch + 1)[0] == ErrorCode.PRODUCER_FENCED


def test_the_transaction_state_log_needs_its_min_isr(tmp_path):
    """``__transaction_state`` gets ``min.insync.replicas`` from transaction.state.log.min.isr
    (Kafka's default 2): with one of its two replicas out of the ISR, no change of a transaction
    is acknowledged (COORDINATOR_NOT_AVAILABLE, retriable: the producer keeps trying), and it is
    once the replica is back."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    with running_cluster(tmp_path, {"transaction.state.log.num.partitions": "1",
                                    "offsets.topic.num.partitions": "1"}, brokers=2) as c:
        first = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "transactional.id": "isr-a"})
        first.init_transactions(60)
        admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap_servers})
        [described] = admin.describe_configs([ConfigResource("topic", "__transaction_state")]).values()
        assert described.result(30)["min.insync.replicas"].value == "2"

        state = asyncio.run(c.describe_topic("__transaction_state")).partitions[0]
        out = next(b for b in c.ids if b != state.leader)
        c.signal(out, signal.SIGSTOP)
        try:
            # fenced after its 3 s session, the controller takes it out of the ISR
            asyncio.run(eventually(lambda: _isr_is(c, [state.leader]), 30, what="an ISR of the leader alone"))
            second = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "transactional.id": "isr-b"})
            with pytest.raises(KafkaException) as refused:
                second.init_transactions(5)
            assert refused.value.args[0].retriable(), refused.value
        finally:
            c.signal(out, signal.SIGCONT)
        asyncio.run(eventually(lambda: _isr_is(c, sorted(c.ids)), 60, what="the replica back in the ISR"))
        second.init_transactions(60)


async def _isr_is(c: BrokerCluster, isr: list[int]) -> bool:
    return sorted((await c.describe_topic("__transaction_state")).partitions[0].isr) == isr
