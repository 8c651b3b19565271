"""The brokers' Kafka listener against librdkafka (confluent-kafka), a client nobody here
wrote: its admin API, an idempotent acks=all producer in every codec, a group consumer that
commits and resumes, the cluster and group descriptions; bad bytes on the socket; and kill -9
of a partition leader under an idempotent producer (issue 15). kafka-python and aiokafka are
in tests/test_kafka_python_clients.py."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic)

from common.errors import ErrorCode
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually

GROUP_PROPS = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
               "group.min.session.timeout.ms": "1000", "socket.request.max.bytes": "1048576"}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("kafka"), GROUP_PROPS) as c:
        yield c


def admin(c: BrokerCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.kafka_bootstrap_servers})


def create(c: BrokerCluster, name: str, partitions: int, rf: int = 3) -> None:
    a = admin(c)  # kept: a client destroyed while its request is out fails the request
    a.create_topics([NewTopic(name, partitions, rf)])[name].result(30)
    asyncio.run(c.wait_topic(name, partitions))


def producer(c: BrokerCluster, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, **extra})


def consume(c: BrokerCluster, group: str, topics: list[str], n: int, timeout: float = 60) -> tuple[Consumer, list]:
    """A group consumer that has read ``n`` records (no fewer, and no more arrive in a second)."""
    cons = Consumer({"bootstrap.servers": c.kafka_bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    cons.subscribe(topics)
    got: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(got) < n:
        m = cons.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    extra = cons.poll(1.0)
    assert extra is None or extra.error(), f"more than {n} records: {extra.value()!r}"
    assert len(got) == n, f"{group}: {len(got)} of {n} records within {timeout:.0f}s"
    return cons, got


def test_confluent_kafka_admin_produce_every_codec_consume_commit_and_resume(cluster):
    create(cluster, "cf", 3)
    base_ts = int(time.time() * 1000) - 60_000
    sent: dict[bytes, tuple[bytes, list, int]] = {}
    errors: list = []
    for codec in CODECS:
        p = producer(cluster, **{"compression.type": codec})
        for i in range(40):
            key, value = f"{codec}-{i}".encode(), os.urandom(8) + b"x" * 200
            headers = [("codec", codec.encode()), ("i", str(i).encode()), ("null", None)]
            sent[key] = (value, headers, base_ts + i)
            p.produce("cf", value, key, headers=headers, timestamp=base_ts + i,
                      on_delivery=lambda err, msg: err and errors.append(err))
        assert p.flush(30) == 0
    assert not errors

    cons, got = consume(cluster, "cf-group", ["cf"], len(sent))
    by_partition: dict[int, list[int]] = {}
    for m in got:
        value, headers, ts = sent[m.key()]
        assert (m.value(), m.headers(), m.timestamp()[1]) == (value, headers, ts)
        by_partition.setdefault(m.partition(), []).append(m.offset())
    assert sorted(k for k in sent) == sorted(m.key() for m in got)
    assert all(offs == list(range(len(offs))) for offs in by_partition.values()), by_partition
    cons.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in cons.committed([TopicPartition("cf", i) for i in range(3)], 10)}
    assert committed == {p: len(offs) for p, offs in by_partition.items()}
    cons.close()

    p = producer(cluster)
    for i in range(12):
        p.produce("cf", b"after-%d" % i, b"after-%d" % i)
    assert p.flush(30) == 0
    cons, got = consume(cluster, "cf-group", ["cf"], 12)  # resumes at the committed offsets
    assert sorted(m.value() for m in got) == sorted(b"after-%d" % i for i in range(12))
    assert all(m.offset() >= committed[m.partition()] for m in got)

    a = admin(cluster)
    listed = a.list_consumer_groups().result(10)
    assert "cf-group" in {g.group_id for g in listed.valid}
    desc = a.describe_consumer_groups(["cf-group"])["cf-group"].result(10)
    assert desc.group_id == "cf-group" and len(desc.members) == 1
    assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1, 2}
    cons.close()
    info = a.describe_cluster().result(10)
    assert info.cluster_id == cluster.quorum.cluster_id
    assert sorted(n.id for n in info.nodes) == cluster.ids
    assert {n.port for n in info.nodes} == set(cluster.kafka_ports.values())


def test_confluent_kafka_admin_configs_partitions_and_deletes(cluster):
    a = admin(cluster)
    create(cluster, "cf-admin", 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cf-admin",
                         incremental_configs=[ConfigEntry("retention.ms", "123456",
                                                          incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(10)
    configs = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cf-admin")])
    described = next(iter(configs.values())).result(10)
    assert described["retention.ms"].value == "123456"
    a.create_partitions([NewPartitions("cf-admin", 3)])["cf-admin"].result(10)
    asyncio.run(cluster.wait_topic("cf-admin", 3))
    with pytest.raises(Exception) as e:  # Kafka's own errors come back as Kafka's errors
        a.create_topics([NewTopic("cf-admin", 1, 3)])["cf-admin"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    a.delete_topics(["cf-admin"])["cf-admin"].result(10)
    asyncio.run(eventually(lambda: "cf-admin" not in a.list_topics(timeout=5).topics, timeout=20))


def _refusal(future) -> tuple[int, str]:
    with pytest.raises(Exception) as e:
        future.result(10)
    return e.value.args[0].code(), e.value.args[0].str()


def test_confluent_kafka_every_kafka_topic_config_name_is_accepted_described_and_checked(cluster):
    """Issue 27: Kafka's topic config names (not only the ones this broker acts on) are accepted,
    described with Kafka's defaults and sources, and bad values refused as Kafka refuses them."""
    a = admin(cluster)
    given = {"flush.ms": "1000", "flush.messages": "500", "index.interval.bytes": "8192", "segment.ms": "3600000",
             "segment.jitter.ms": "10", "segment.index.bytes": "4096", "file.delete.delay.ms": "0",
             "message.timestamp.type": "LogAppendTime", "message.timestamp.difference.max.ms": "60000",
             "message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000",
             "message.downconversion.enable": "false", "preallocate": "true", "min.compaction.lag.ms": "5",
             "max.compaction.lag.ms": "600000", "local.retention.ms": "-2", "remote.storage.enable": "false",
             "leader.replication.throttled.replicas": "0:101,0:102", "follower.replication.throttled.replicas": "*",
             "compression.gzip.level": "9", "compression.lz4.level": "1", "compression.zstd.level": "-5"}
    a.create_topics([NewTopic("cf-names", 1, 3, config=given)])["cf-names"].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cf-names")
    described = a.describe_configs([res])[res].result(10)
    assert {k: described[k].value for k in given} == given
    assert all(described[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value for k in given)
    defaults = {"segment.bytes": "1073741824", "local.retention.bytes": "-2", "min.insync.replicas": "1",
                "message.format.version": "3.0-IV1", "unclean.leader.election.enable": "false"}
    assert {k: described[k].value for k in defaults} == defaults
    assert all(described[k].source == ConfigSource.DEFAULT_CONFIG.value and described[k].is_default for k in defaults)

    bad = {"flush.ms": ("-1", "Invalid value -1 for configuration flush.ms: value -1 must be at least 0"),
           "message.timestamp.type": ("WallClock", "Invalid value WallClock for configuration message.timestamp.type"),
           "segment.index.bytes": ("3", "Invalid value 3 for configuration segment.index.bytes"),
           "compression.gzip.level": ("10", "Invalid value 10 for configuration compression.gzip.level"),
           "leader.replication.throttled.replicas": ("101", "must be the literal '*' or a list of replicas"),
           "preallocate": ("yes", "Invalid value yes for configuration preallocate"),
           "remote.storage.enable": ("true", "Tiered Storage functionality is disabled in the broker. Topic cannot "
                                             "be configured with remote log storage."),
           "no.such.config": ("1", "Unknown topic config name: no.such.config")}
    for key, (value, message) in bad.items():
        code, text = _refusal(a.create_topics([NewTopic("cf-bad-config", 1, 3, config={key: value})])["cf-bad-config"])
        assert code == KafkaError.INVALID_CONFIG and message in text, (key, text)
    code, text = _refusal(a.create_topics([NewTopic("cf-bad-config", 1, 3, config={
        "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})])["cf-bad-config"])
    assert (code, text) == (KafkaError.INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms (10) > "
                                                       "max.compaction.lag.ms (5)")
    # the same rules when a config is changed, over the configs the topic would have
    change = ConfigResource(ConfigResource.Type.TOPIC, "cf-names", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "600001", incremental_operation=AlterConfigOpType.SET)])
    code, text = _refusal(a.incremental_alter_configs([change])[change])
    assert code == KafkaError.INVALID_CONFIG and "min.compaction.lag.ms (600001) > max.compaction.lag.ms (600000)" in text
    assert "cf-bad-config" not in a.list_topics(timeout=5).topics


# -- bad input -----------------------------------------------------------------------------------

def _request(api_key: int, version: int, body: bytes = b"", flexible: bool = False) -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 4) + b"test" + (b"\0" if flexible else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed(sock: socket.socket, timeout: float = 5) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _api_versions(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(_request(18, 3, b"\x05pytk\x021\x00", flexible=True))
        s.settimeout(5)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        return s.recv(size, socket.MSG_WAITALL)


def test_bad_bytes_close_one_connection_and_nothing_else(cluster):
    create(cluster, "cf-bad", 1)
    port = cluster.kafka_ports[cluster.ids[0]]
    p = producer(cluster)
    bad = {
        "garbage": struct.pack(">i", 64) + b"\xff\xff" + os.urandom(62),  # api key -1: never a real one
        "over the size limit": struct.pack(">i", 1048577),
        "unknown api key": _request(999, 0),
        "unadvertised version": _request(0, 2),
        "truncated Metadata": _request(3, 12, b"\x02\x04na", flexible=True),
        "negative size": struct.pack(">i", -5),
    }
    for what, data in bad.items():
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(data)
            assert _closed(s), f"{what}: the connection stayed open"
        p.produce("cf-bad", what.encode())
    assert p.flush(30) == 0  # the broker, and another client's connection, carry on
    answer = _api_versions(port)
    assert struct.unpack_from(">ih", answer) == (7, 0)  # correlation id, no error
    # A newer ApiVersions than ours is answered in v0 with our versions (KIP-511), not closed.
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(_request(18, 99))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        correlation, error, count = struct.unpack_from(">ihi", s.recv(size, socket.MSG_WAITALL))
        assert (correlation, error) == (7, 35) and count > 10
    log = cluster.log_path(cluster.ids[0]).read_text()
    assert log.count("closing the Kafka connection") >= len(bad) - 1  # a refused size may race the close
    # Clients of another protocol are named in the log, not as a size.
    others = {b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n": "an HTTP/2 connection preface (a gRPC client",
              b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03": "a TLS handshake on a plaintext listener"}
    for data in others:
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(data)
            assert _closed(s), data
    log = cluster.log_path(cluster.ids[0]).read_text()
    for said in others.values():
        assert said in log, said


UNKNOWN_TAG = b"\x63\x03abc"  # tag 99 with 3 bytes: a field of a newer version than ours (KIP-482)


def _tags(*fields: bytes) -> bytes:
    """A tagged section: its count, then each field (tag, size, bytes)."""
    return bytes([len(fields)]) + b"".join(fields)


def _metadata_v12(topic: str, header: bytes = b"\0", nested: bytes = b"\0", top: bytes = b"\0") -> bytes:
    """A Metadata v12 request for ``topic``, with the given tagged sections in its header, its
    topic and itself."""
    head = struct.pack(">hhih", 3, 12, 7, 4) + b"test" + header
    body = b"\x02" + bytes(16) + bytes([len(topic) + 1]) + topic.encode() + nested + b"\0\0" + top
    return struct.pack(">i", len(head) + len(body)) + head + body


def _answer(s: socket.socket, data: bytes) -> bytes:
    s.sendall(data)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL) or b"\0\0\0\0")[0]
    assert size > 0, "the connection was closed"
    return s.recv(size, socket.MSG_WAITALL)


def test_tags_we_do_not_know_are_skipped_and_bad_tagged_sections_close_the_connection(cluster):
    """A newer client's tags (KIP-482) in the request header, a nested struct or the request
    itself are skipped, as Kafka's readers skip them: the answer is byte for byte the one
    without them. A tagged section that claims more than the frame holds still closes the
    connection at once."""
    create(cluster, "cf-tags", 1)
    port = cluster.kafka_ports[cluster.ids[0]]
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.settimeout(10)
        plain = _answer(s, _metadata_v12("cf-tags"))
        assert b"cf-tags" in plain
        for where in ("header", "nested", "top"):
            assert _answer(s, _metadata_v12("cf-tags", **{where: _tags(UNKNOWN_TAG)})) == plain, where
        everywhere = _tags(b"\x64\x00", UNKNOWN_TAG)  # two unknown tags, one of them empty
        assert _answer(s, _metadata_v12("cf-tags", everywhere, everywhere, everywhere)) == plain
        api_versions = struct.pack(">hhih", 18, 3, 8, 4) + b"test" + _tags(UNKNOWN_TAG) + b"\x05pytk\x021" + _tags(
            UNKNOWN_TAG)
        assert struct.unpack_from(">ih", _answer(s, struct.pack(">i", len(api_versions)) + api_versions)) == (8, 0)
    bad = {"a count of 2^31 tags": b"\x80\x80\x80\x80\x08" + UNKNOWN_TAG,
           "a tag longer than the frame": _tags(b"\x63\x7fab"),
           "a size past 32 bits": _tags(b"\x63\xff\xff\xff\xff\x7f")}
    for what, section in bad.items():  # after an unknown tag in the header: past kio, to our skipping
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(_metadata_v12("cf-tags", _tags(UNKNOWN_TAG), nested=section))
            assert _closed(s), f"{what}: the connection stayed open"
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.settimeout(10)
        assert _answer(s, _metadata_v12("cf-tags")) == plain  # and the broker carries on


def test_a_leaders_fetch_answer_with_tags_we_do_not_know_is_read_as_without_them():
    """A follower reads a newer leader's Fetch answer (brokerd/kafka/replica_client.py): unknown
    tags in the response header, a partition, the tagged struct it knows (diverging_epoch)
    and the answer itself are skipped, and what it knows is read as without them."""
    from brokerd.kafka.codec import MalformedRequest, read_response

    def answer(unknown: tuple[bytes, ...]) -> bytes:
        diverging = struct.pack(">iq", 3, 70) + _tags(*unknown)  # tag 0: epoch, end offset
        partition = (struct.pack(">ihqqq", 0, 0, 100, 100, 0) + b"\x01" + struct.pack(">i", -1) + b"\x01"
                     + _tags(b"\x00" + bytes([len(diverging)]) + diverging, *unknown))
        topic = b"\x02t" + b"\x02" + partition + _tags(*unknown)
        return struct.pack(">i", 9) + _tags(*unknown) + struct.pack(">ihi", 0, 0, 5) + b"\x02" + topic + _tags(*unknown)

    correlation, plain = read_response(answer(()), 1, 12)
    assert (correlation, plain.responses[0].partitions[0].diverging_epoch.end_offset) == (9, 70)
    assert read_response(answer((UNKNOWN_TAG,)), 1, 12) == (9, plain)
    with pytest.raises(MalformedRequest, match="tagged field 99 of 127 bytes"):
        read_response(answer((b"\x63\x7fabc",)), 1, 12)


def test_pipelined_requests_are_answered_in_order(cluster):
    """Requests sent back to back on one connection come back in the order sent, a slow one
    (a Fetch that long-polls) holding back the quick ones behind it."""
    create(cluster, "cf-pipe", 1)
    fetch = (b"\xff\xff\xff\xff" + struct.pack(">iiib", 800, 1, 1 << 20, 0) + struct.pack(">i", 1)  # Fetch v4
             + struct.pack(">h", 7) + b"cf-pipe" + struct.pack(">iiqi", 1, 0, 0, 1 << 20))
    frames = [_request(1, 4, fetch)] + [_request(18, 0) for _ in range(3)]
    ids = [100, 101, 102, 103]
    data = b"".join(f[:8] + struct.pack(">i", i) + f[12:] for f, i in zip(frames, ids, strict=True))
    port = cluster.kafka_ports[asyncio.run(cluster.describe_topic("cf-pipe")).partitions[0].leader]
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        start = time.monotonic()
        s.sendall(data)
        s.settimeout(10)
        seen = []
        for _ in ids:
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            seen.append(struct.unpack_from(">i", s.recv(size, socket.MSG_WAITALL))[0])
        assert seen == ids
        assert time.monotonic() - start >= 0.7  # the empty fetch waited its max_wait_ms first


def test_every_advertised_api_and_version_answers(cluster):
    """A minimal request (every field zero or empty) of each API at each version ApiVersions
    lists gets an answer that reads as that version's response, not a closed connection, nor
    UNKNOWN_SERVER_ERROR anywhere in it (a handler that fails is answered so: error_answers)."""
    from brokerd.kafka.apis import VERSIONS
    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    port = cluster.kafka_ports[cluster.ids[0]]
    fields = {0: {"acks": 1}}  # a produce with acks=0 is not answered
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.settimeout(15)
        for key, (low, high) in sorted(VERSIONS.items()):
            for v in range(low, high + 1):
                request = build(request_schema(key, v), fields.get(key, {}))
                s.sendall(frame_request(key, v, key * 100 + v, "pytest", request))
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL) or b"\0\0\0\0")[0]
                assert size > 0, f"api {key} v{v}: the connection was closed"
                correlation, response = read_response(s.recv(size, socket.MSG_WAITALL), key, v)
                assert correlation == key * 100 + v
                assert int(ErrorCode.UNKNOWN_SERVER_ERROR) not in _error_codes(response), \
                    f"api {key} v{v}: its handler failed (the broker's log says how): {response}"


def _error_codes(entity: Any) -> set[int]:
    """Every error code in a read response, nested entities included."""
    from dataclasses import fields, is_dataclass
    found: set[int] = set()
    for f in fields(entity):
        v = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.add(int(v))
        for item in (v if isinstance(v, tuple) else (v,)):
            if is_dataclass(item):
                found |= _error_codes(item)
    return found


def test_xerial_framed_snappy_is_read():
    """kafka-python and Java producers frame snappy the xerial way; librdkafka writes it raw."""
    from kafka.codec import snappy_encode

    from clients.compression import CompressionError, decompress
    data = b"a log line, again and again " * 5000
    framed = snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert framed[:8] == b"\x82SNAPPY\x00" and decompress(2, framed) == data
    with pytest.raises(CompressionError, match="expands past"):
        decompress(2, framed, limit=10_000)
    with pytest.raises(CompressionError, match="ends inside"):
        decompress(2, framed[:-3])


# -- faults --------------------------------------------------------------------------------------

def test_idempotent_librdkafka_producer_loses_and_duplicates_nothing_when_the_leader_is_killed(cluster):
    create(cluster, "cf-kill", 2)
    acked: list[bytes] = []
    failed: list = []
    stop = threading.Event()

    def delivered(err, msg) -> None:
        (failed.append(err) if err else acked.append(msg.value()))

    def run() -> None:
        p = producer(cluster, **{"compression.type": "lz4", "message.timeout.ms": 120000})
        i = 0
        while not stop.is_set():
            try:
                p.produce("cf-kill", b"%08d" % i, b"%d" % (i % 97), on_delivery=delivered)
                i += 1
            except BufferError:
                p.poll(0.05)
                continue
            if i % 50 == 0:
                p.poll(0.01)
        p.flush(120)

    t = threading.Thread(target=run)
    t.start()
    try:
        asyncio.run(eventually(lambda: len(acked) >= 3000, timeout=60))
        leader = asyncio.run(cluster.describe_topic("cf-kill")).partitions[0].leader
        cluster.kill(leader)
        at_kill = len(acked)
        asyncio.run(eventually(lambda: len(acked) >= at_kill + 3000, timeout=90))
    finally:
        stop.set()
        t.join(150)
    assert not failed, failed[:3]
    cons = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "cf-kill-reader",
                     "auto.offset.reset": "earliest"})
    cons.assign([TopicPartition("cf-kill", i, 0) for i in range(2)])
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(read) < len(acked) and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and not m.error():
            read.append(m.value())
    cons.close()
    print(f"acknowledged {len(acked)}, read {len(read)} ({at_kill} before the kill of broker {leader})")
    duplicates = [v for v, n in Counter(read).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} duplicates, e.g. {duplicates[:3]}"
    assert set(read) == set(acked), f"{len(set(acked) - set(read))} acknowledged records lost"
    cluster.start_broker(leader)
    asyncio.run(cluster.wait_unfenced(timeout=60))


def test_broker_api_versions_tool(cluster):
    import subprocess
    import sys

    from tests.brokercluster import REPO
    tool = [sys.executable, "-m", "kraft.cli", "broker-api-versions", "--bootstrap-server"]
    p = subprocess.run([*tool, cluster.kafka_bootstrap_servers.split(",")[0]], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert [line.split(" ")[0] for line in p.stdout.splitlines() if "->" in line] == \
        [f"127.0.0.1:{port}" for port in cluster.kafka_ports.values()]
    assert p.stdout.count("\tProduce(0): 3 to 9,") == 3
    p = subprocess.run([*tool, cluster.address(cluster.ids[0]), "--timeout", "3"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)  # a gRPC listener, not a Kafka one
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "is it a Kafka listener?" in p.stderr, p.stderr


def test_kcat_lists_produces_and_consumes(cluster):
    """kcat (librdkafka's command-line client, from Debian): metadata, an idempotent lz4
    produce with keys and headers, and a consume that prints them back."""
    import json
    import shutil
    import subprocess
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make venv installs Debian's kcat)"
    create(cluster, "cf-kcat", 2)
    boot = ["-b", cluster.kafka_bootstrap_servers]
    md = json.loads(subprocess.run([kcat, *boot, "-L", "-J"], capture_output=True, text=True, timeout=30,
                                   check=True).stdout)
    assert sorted(b["id"] for b in md["brokers"]) == cluster.ids
    assert {p["partition"] for t in md["topics"] if t["topic"] == "cf-kcat" for p in t["partitions"]} == {0, 1}
    lines = [f"k{i}:v{i}" for i in range(50)]
    subprocess.run([kcat, *boot, "-t", "cf-kcat", "-P", "-K:", "-z", "lz4", "-H", "src=kcat",
                    "-X", "enable.idempotence=true", "-X", "acks=all"], input="\n".join(lines) + "\n",
                   capture_output=True, text=True, timeout=60, check=True)
    out = subprocess.run([kcat, *boot, "-t", "cf-kcat", "-C", "-e", "-o", "beginning", "-q", "-f", "%k=%s %h\n"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert sorted(out.splitlines()) == sorted(f"k{i}=v{i} src=kcat" for i in range(50))


def test_the_shortest_newer_api_versions_request_is_answered(cluster):
    """An ApiVersions of a newer version with nothing after its correlation id (8 bytes in all)
    is answered in v0 like any newer one, not a failure of the connection's task."""
    port = cluster.kafka_ports[cluster.ids[0]]
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(struct.pack(">ihhi", 8, 18, 99, 41))
        s.settimeout(5)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack_from(">ih", s.recv(size, socket.MSG_WAITALL)) == (41, 35)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # what older applications call
def test_confluent_kafka_alter_configs_replaces_the_whole_set(cluster):
    """AlterConfigs (API 33, librdkafka's AlterConfigs): the keys not given return to their
    defaults; validate_only changes nothing; each resource is answered alone (issue 27)."""
    a = admin(cluster)
    a.create_topics([NewTopic("cf-legacy", 1, 3, config={"retention.ms": "3600000", "flush.ms": "1000"})])[
        "cf-legacy"].result(30)

    def legacy(configs: dict[str, str], name: str = "cf-legacy", **kw: object):
        res = ConfigResource(ConfigResource.Type.TOPIC, name, set_config=configs)
        return a.alter_configs([res], **kw)[res]

    def described() -> dict[str, tuple[str, bool]]:
        res = ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy")
        got = a.describe_configs([res])[res].result(10)
        return {k: (got[k].value, got[k].is_default) for k in ("retention.ms", "flush.ms", "cleanup.policy")}

    assert legacy({"cleanup.policy": "compact"}, validate_only=True).result(10) is None
    assert described() == {"retention.ms": ("3600000", False), "flush.ms": ("1000", False),
                           "cleanup.policy": ("delete", True)}
    assert legacy({"cleanup.policy": "compact", "flush.ms": "2000"}).result(10) is None
    assert described() == {"retention.ms": ("604800000", True), "flush.ms": ("2000", False),
                           "cleanup.policy": ("compact", False)}
    good = ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy", set_config={"flush.ms": "3000"})
    bad = ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy-missing", set_config={"flush.ms": "1"})
    futures = a.alter_configs([good, bad])
    assert futures[good].result(10) is None
    assert _refusal(futures[bad])[0] == KafkaError.UNKNOWN_TOPIC_OR_PART
    code, text = _refusal(legacy({"flush.ms": "-1"}))
    assert (code, text) == (KafkaError.INVALID_CONFIG, "Invalid value -1 for configuration flush.ms: value -1 must "
                                                       "be at least 0")
    assert described() == {"retention.ms": ("604800000", True), "flush.ms": ("3000", False),
                           "cleanup.policy": ("delete", True)}


def test_confluent_kafka_incremental_append_and_subtract_list_configs(cluster):
    """IncrementalAlterConfigs' APPEND and SUBTRACT (KIP-339) on list-typed topic configs,
    from the current value or the default; INVALID_CONFIG for another key, as Kafka (issue 27)."""
    a = admin(cluster)
    create(cluster, "cf-lists", 1)

    def change(*ops: tuple[str, str, AlterConfigOpType]):
        res = ConfigResource(ConfigResource.Type.TOPIC, "cf-lists", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
        return a.incremental_alter_configs([res])[res]

    def described(*keys: str) -> dict[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, "cf-lists")
        got = a.describe_configs([res])[res].result(10)
        return {k: got[k].value for k in keys}

    APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
    assert change(("cleanup.policy", "compact", APPEND),
                  ("leader.replication.throttled.replicas", "0:101,0:102", APPEND)).result(10) is None
    assert described("cleanup.policy", "leader.replication.throttled.replicas") == {
        "cleanup.policy": "delete,compact", "leader.replication.throttled.replicas": "0:101,0:102"}  # from the default
    assert change(("cleanup.policy", "delete", SUBTRACT),
                  ("leader.replication.throttled.replicas", "0:102,0:103", APPEND)).result(10) is None
    assert described("cleanup.policy", "leader.replication.throttled.replicas") == {
        "cleanup.policy": "compact", "leader.replication.throttled.replicas": "0:101,0:102,0:103"}
    code, text = _refusal(change(("retention.ms", "1000", APPEND)))
    assert (code, text) == (KafkaError.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")
    code, text = _refusal(change(("cleanup.policy", "compact", SUBTRACT)))  # nothing left: refused, not stored
    assert code == KafkaError.INVALID_CONFIG and text.startswith("Invalid value  for configuration cleanup.policy")
    code, text = _refusal(change(("leader.replication.throttled.replicas", "oops", APPEND)))
    assert code == KafkaError.INVALID_CONFIG and "[partitionId]:[brokerId]" in text
    assert described("cleanup.policy") == {"cleanup.policy": "compact"}


def test_log_append_time_topics_take_the_leaders_clock(cluster):
    """Issue 27 item 7: ``message.timestamp.type=LogAppendTime`` (a topic config) has the leader
    set each batch's max timestamp and the timestamp-type bit (new CRC): librdkafka's delivery
    reports and consumers see TIMESTAMP_LOG_APPEND_TIME with the broker's time, not the
    producer's; a CreateTime topic keeps the producer's timestamps."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
    a = admin(cluster)
    a.create_topics([NewTopic("appended", 1, 3, config={"message.timestamp.type": "LogAppendTime"}),
                     NewTopic("created", 1, 3)])["appended"].result(30)
    asyncio.run(cluster.wait_topic("appended", 1))
    asyncio.run(cluster.wait_topic("created", 1))
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: the producer's clock, not the broker's
    delivered: list = []
    p = producer(cluster, on_delivery=lambda err, m: delivered.append((err, m.topic(), m.timestamp())))
    before = int(time.time() * 1000)
    for topic in ("appended", "created"):
        for i in range(3):
            p.produce(topic, b"v%d" % i, timestamp=old + i)
    assert p.flush(30) == 0
    after = int(time.time() * 1000)
    assert all(err is None for err, _, _ in delivered), delivered
    stamped = [ts for _, t, ts in delivered if t == "appended"]
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for kind, ts in stamped), stamped
    cons, got = consume(cluster, "timestamps", ["appended", "created"], 6)
    cons.close()
    by_topic = {t: [m.timestamp() for m in got if m.topic() == t] for t in ("appended", "created")}
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for kind, ts in by_topic["appended"])
    assert sorted(by_topic["created"]) == [(TIMESTAMP_CREATE_TIME, old + i) for i in range(3)]
