"""Incremental fetch sessions (KIP-227, issue 27 item 6): the session cache's rules (Kafka's
FetchSession.scala) on their own, then raw Fetch requests encoded with kio against a real
broker (a full fetch creates a session, incremental fetches answer only what changed, forget
partitions, and are refused with Kafka's errors), and kafka-python, whose consumer fetches
incrementally, reading every record of a 100-partition topic through sessions. One broker
serves the module."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from brokerd.fetch_session import EVICTION_MS, FetchSessionCache, FetchSessionHandler
from brokerd.kafka import apis as A
from brokerd.kafka.batches import to_wire
from brokerd.kafka.codec import build, frame_request, read_response, request_schema
from brokerd.requests import FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopic, \
    FetchTopicResponse
from clients.records import build_batch
from common.errors import ErrorCode as E, KafkaError
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports
from tests.test_metrics import scrape, value

TOPIC, WIDE = "sessions", "sessions-wide"
BROKER = 101
FSC = "kafka_server_fetchsessioncache_"


# -- the cache's rules ------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


def full(cache: FetchSessionCache, partitions: int, replica: int = -1) -> int:
    """A full fetch (epoch 0) of ``partitions`` partitions of topic t: the session id answered."""
    req = FetchRequest(replica_id=replica, topics=[FetchTopic("t", partitions=[
        FetchPartition(partition=i) for i in range(partitions)])])
    ctx = cache.begin(0, 0, req)
    sid, _ = ctx.finish(FetchResponse(topics=[FetchTopicResponse("t", partitions=[
        FetchPartitionResponse(partition=i) for i in range(partitions)])]))
    return sid


def test_a_full_cache_evicts_a_stale_session_first_then_a_smaller_or_lesser_one():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    a, b = full(cache, 5), full(cache, 3)
    assert a and b and cache.sessions.keys() == {a, b}
    # young sessions: a consumer cannot evict them, whatever its size; it is answered sessionless
    assert full(cache, 50) == 0 and cache.evictions == 0
    # a follower's session is worth more than a consumer's: it evicts the smallest consumer's
    f = full(cache, 1, replica=102)
    assert f and cache.sessions.keys() == {a, f} and cache.evictions == 1
    # once older than the eviction time, a bigger consumer session evicts a smaller one, but not
    # one of its own size, nor a follower's
    clock.s += EVICTION_MS / 1000 / 2
    cache.begin(a, 1, FetchRequest())  # used now: not stale later
    cache.sessions[f].last_used_ms = clock() * 1000
    clock.s += EVICTION_MS / 1000 * 0.75
    assert full(cache, 5) == 0
    c = full(cache, 6)
    assert c and cache.sessions.keys() == {c, f} and cache.evictions == 2
    # a session unused for the eviction time goes first, whatever its worth
    clock.s += EVICTION_MS / 1000 + 1
    cache.sessions[c].last_used_ms = clock() * 1000
    d = full(cache, 1)
    assert d and cache.sessions.keys() == {c, d} and cache.evictions == 3


def test_no_slots_no_sessions_and_errors_as_kafka():
    assert full(FetchSessionCache(0), 3) == 0
    cache = FetchSessionCache(10)
    sid = full(cache, 2)
    with pytest.raises(KafkaError) as e:
        cache.begin(sid, 1, FetchRequest(), uses_topic_ids=True)
    assert e.value.code == E.FETCH_SESSION_TOPIC_ID_ERROR
    with pytest.raises(KafkaError) as e:
        cache.begin(sid, 2, FetchRequest())
    assert e.value.code == E.INVALID_FETCH_SESSION_EPOCH
    assert cache.begin(sid, 1, FetchRequest()).session is not None
    # forgetting every partition closes the session: sessionless answer, and it is gone
    ctx = cache.begin(sid, 2, FetchRequest(), [("t", [0, 1])])
    assert ctx.session is None and ctx.request.topics == [] and sid not in cache.sessions



def test_a_preferred_read_replica_is_always_answered_in_a_session():
    """KIP-392 with KIP-227: an incremental answer carries a partition whose leader names a
    preferred read replica even when nothing else changed (else the consumer would never hear
    it, and go on fetching from the leader, which answers it no records)."""
    cache = FetchSessionCache(10)
    sid = full(cache, 2)
    ctx = cache.begin(sid, 1, FetchRequest())
    _, resp = ctx.finish(FetchResponse(topics=[FetchTopicResponse("t", partitions=[
        FetchPartitionResponse(partition=0), FetchPartitionResponse(partition=1, preferred_read_replica=102)])]))
    assert [(p.partition, p.preferred_read_replica) for t in resp.topics for p in t.partitions] == [(1, 102)]

def test_a_followers_handler_sends_only_what_moved_and_starts_over_after_a_failure():
    """The fetching side (Kafka's FetchSessionHandler, as followers use it over gRPC) against
    the cache: a full fetch opens the session, then a request carries only the partitions
    whose offset or epoch moved and forgets those no longer fetched; a failed request makes
    the next one full, which replaces the old session."""
    cache, handler = FetchSessionCache(10), FetchSessionHandler()
    tid = b"t" * 16

    def fetch(wanted: dict[int, tuple[int, int]], changed: set[int] = frozenset()) -> tuple[list[int], list[int]]:
        send, forget = handler.build({(tid, i): v for i, v in wanted.items()})
        req = FetchRequest(replica_id=7, topics=[FetchTopic("t", tid, [
            FetchPartition(partition=i, current_leader_epoch=wanted[i][1], fetch_offset=wanted[i][0])
            for _, i in send])] if send else [])
        ctx = cache.begin(handler.session_id, handler.epoch, req, [(tid, [i for _, i in forget])] if forget else [],
                          privileged=True, uses_topic_ids=True)
        # the leader reads every partition of the session; those in ``changed`` got records
        read = {(fp.partition, fp.fetch_offset) for t in ctx.request.topics for fp in t.partitions}
        assert read == {(i, o) for i, (o, _) in wanted.items()}
        sid, _ = ctx.finish(FetchResponse(topics=[FetchTopicResponse("t", tid, [
            FetchPartitionResponse(partition=i, frames=[memoryview(b"x")] if i in changed else [], high_watermark=0)
            for i, _ in sorted(read)])]))
        handler.answered(sid)
        return sorted(i for _, i in send), sorted(i for _, i in forget)

    assert fetch({0: (0, 1), 1: (0, 1), 2: (0, 1)}) == ([0, 1, 2], [])
    first = handler.session_id
    assert first in cache.sessions and cache.sessions[first].privileged
    assert fetch({0: (0, 1), 1: (0, 1), 2: (0, 1)}) == ([], [])
    assert fetch({0: (5, 1), 1: (0, 1), 2: (0, 2)}) == ([0, 2], [])  # an offset and an epoch moved
    assert fetch({0: (5, 1), 1: (0, 1)}) == ([], [2])
    assert cache.incremental_fetches == 3
    handler.reset()  # e.g. the leader did not answer
    assert fetch({0: (5, 1), 1: (0, 1)}) == ([0, 1], [])
    assert handler.session_id != first and list(cache.sessions) == [handler.session_id]
    # no room in the leader's cache: full fetches, each asking again
    handler, cache = FetchSessionHandler(), FetchSessionCache(0)
    assert fetch({0: (0, 1)}) == ([0], []) and fetch({0: (0, 1)}) == ([0], []) and handler.session_id == 0


# -- raw Fetch requests against a broker ------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    metrics = {BROKER: {"prometheus.listener": f"127.0.0.1:{consecutive_ports(1)}"}}
    with running_cluster(tmp_path_factory.mktemp("fetch-sessions"), {}, metrics, brokers=1) as c:
        asyncio.run(c.create_topic(TOPIC, 3, 1))
        asyncio.run(c.create_topic(WIDE, 100, 1))
        asyncio.run(c.wait_topic(TOPIC, 3))
        asyncio.run(c.wait_topic(WIDE, 100))
        yield c


def ask(c: BrokerCluster, key: int, version: int, data: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", c.kafka_ports[BROKER]), 5) as s:
        s.settimeout(30)
        s.sendall(frame_request(key, version, 7, "sessions", build(request_schema(key, version), data)))
        head = s.recv(4, socket.MSG_WAITALL)
        body = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return read_response(body, key, version)[1]


def produce(c: BrokerCluster, partition: int, n: int = 2) -> None:
    batch = to_wire(build_batch([(b"k", b"v%d" % i, int(time.time() * 1000), ()) for i in range(n)]))
    r = ask(c, A.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
    assert code(r.responses[0].partition_responses[0]) == E.NONE


def fetch(c: BrokerCluster, session_id: int, epoch: int, offsets: dict[int, int],
          forget: list[int] | None = None) -> Any:
    return ask(c, A.FETCH, 12, {
        "replica_id": -1, "max_wait": 200, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}] if offsets else [],
        "forgotten_topics_data": [{"topic": TOPIC, "partitions": forget}] if forget else []})


def code(r: Any) -> int:
    return int(r.error_code.value)


def answered(r: Any) -> dict[int, Any]:
    assert code(r) == E.NONE
    return {p.partition_index: p for t in r.responses for p in t.partitions}


def test_a_session_answers_only_what_changed(cluster):
    produce(cluster, 0)
    created = fetch(cluster, 0, 0, {0: 0, 1: 0, 2: 0})
    sid = created.session_id
    parts = answered(created)
    assert sid > 0 and parts.keys() == {0, 1, 2} and parts[0].records and parts[0].high_watermark == 2
    # nothing changed: an empty answer (after max_wait), the session goes on
    quiet = fetch(cluster, sid, 1, {0: 2})
    assert quiet.session_id == sid and answered(quiet) == {}
    # a change on one partition: only it comes back
    produce(cluster, 2, 3)
    changed = answered(fetch(cluster, sid, 2, {}))
    assert changed.keys() == {2} and changed[2].high_watermark == 3 and changed[2].records
    # partition 2 forgotten: a produce to it is no longer answered, one to 1 is
    produce(cluster, 2)
    produce(cluster, 1)
    after = answered(fetch(cluster, sid, 3, {}, forget=[2]))
    assert after.keys() == {1} and after[1].high_watermark == 2
    # a request repeated (or lost) is refused with Kafka's error; so is a session that is closed
    again = fetch(cluster, sid, 3, {})
    assert (code(again), again.session_id, again.responses) == (E.INVALID_FETCH_SESSION_EPOCH, 0, ())
    closed = fetch(cluster, sid, -1, {0: 0})
    assert closed.session_id == 0 and answered(closed).keys() == {0}
    gone = fetch(cluster, sid, 4, {})
    assert code(gone) == E.FETCH_SESSION_ID_NOT_FOUND and gone.session_id == 0


def test_sessionless_fetches_stay_as_they_were(cluster):
    r = fetch(cluster, 0, -1, {0: 0, 1: 0})
    assert r.session_id == 0 and answered(r).keys() == {0, 1}
    unknown = fetch(cluster, 12345, 1, {0: 0})
    assert code(unknown) == E.FETCH_SESSION_ID_NOT_FOUND


def test_kafka_python_reads_a_100_partition_topic_through_sessions(cluster):
    port = int(cluster.node_props[BROKER]["prometheus.listener"].rsplit(":", 1)[1])
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    got: set[bytes] = set()

    def send(first: int) -> None:
        for i in range(first, first + 150):
            producer.send(WIDE, b"%d" % i, partition=i % 100)
        producer.flush(30)

    def read(n: int) -> None:
        def done() -> bool:
            for records in consumer.poll(200).values():
                got.update(r.value for r in records)
            return len(got) == n
        asyncio.run(eventually(done, 60, interval=0, what=f"{n} records"))
    try:
        consumer.assign([TopicPartition(WIDE, p) for p in range(100)])
        send(0)
        read(150)
        before = value(scrape(port), FSC + "incrementalfetches_total")
        send(150)  # read by the session the first fetches created: incremental fetches only
        read(300)
    finally:
        consumer.close()
        producer.close()
    assert got == {b"%d" % i for i in range(300)}
    samples = scrape(port)
    assert value(samples, FSC + "numincrementalfetchsessions") >= 1
    assert value(samples, FSC + "incrementalfetches_total") > before
