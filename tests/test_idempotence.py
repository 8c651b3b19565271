"""Idempotent producer state and batch compression, in one process: the partition log's
producer state (duplicates, gaps, fenced epochs, rebuilding, expiry, persistence) and every
codec through build, validate and read (docs/brokers.md, "Idempotence" and "Compression")."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest

from brokerd.log_store import LogStore
from brokerd.partition_log import PartitionLog
from brokerd.producer_state import ProducerStateManager, last_sequence
from clients.compression import Codec, CompressionError, compress, decompress
from common.errors import ErrorCode, KafkaError
from clients.producer import Producer
from common.config_def import ConfigError
from clients.records import batch_crc, build_batch, records_of, recompress, set_producer, validate_batch

PID = 4000


def _batch(pid: int | None, epoch: int, seq: int, n: int = 3, codec: Codec = Codec.NONE, tag: str = "x"):
    ts = int(time.time() * 1000)
    b = build_batch([(b"k%d" % i, f"{tag}-{seq + i}".encode(), ts, ()) for i in range(n)], codec)
    if pid is not None:
        set_producer(b, pid, epoch, seq)
    return b


def _log(tmp_path) -> tuple[LogStore, PartitionLog]:
    store = LogStore(str(tmp_path))
    return store, PartitionLog(store, uuid.UUID(int=7), 0)


def _values(log: PartitionLog) -> list[bytes]:
    out = []
    for b in log.stored_batches(log.log_start_offset):
        batch = log.batch_at(b.base_offset)
        out += [r.value for r in records_of(batch, "t", 0)]
    return out


def run(coro):
    return asyncio.run(coro)


# -- producer state on the partition log ------------------------------------------------------

def test_a_duplicate_batch_gets_its_original_offsets_and_is_not_written_again(tmp_path):
    async def go():
        store, log = _log(tmp_path)
        first = await log.append_as_leader(_batch(PID, 0, 0), 0)
        second = await log.append_as_leader(_batch(PID, 0, 3), 0)
        again = await log.append_as_leader(_batch(PID, 0, 0), 0)  # a retry of the first
        assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
        assert log.log_end_offset == 6 and len(_values(log)) == 6
        again2 = await log.append_as_leader(_batch(PID, 0, 3), 0)
        assert again2.duplicate and again2.first_offset == second.first_offset
        await store.close()
    run(go())


def test_a_sequence_gap_an_old_epoch_and_an_unknown_producer_are_refused(tmp_path):
    async def go():
        store, log = _log(tmp_path)
        await log.append_as_leader(_batch(PID, 0, 0), 0)
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID, 0, 5), 0)  # 3 expected
        assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert "5 (incoming seq. number), 2 (current end sequence number)" in e.value.message
        await log.append_as_leader(_batch(PID, 1, 0), 0)  # a new epoch starts at 0
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID, 0, 3), 0)
        assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID, 2, 7), 0)  # a new epoch must start at 0
        assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID + 1, 0, 9), 0)
        assert e.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
        assert log.log_end_offset == 6  # nothing refused was written
        await store.close()
    run(go())


def test_only_the_last_five_batches_are_remembered(tmp_path):
    async def go():
        store, log = _log(tmp_path)
        for k in range(7):
            await log.append_as_leader(_batch(PID, 0, 3 * k), 0)
        assert (await log.append_as_leader(_batch(PID, 0, 6), 0)).duplicate  # the 3rd: still known
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID, 0, 3), 0)  # the 2nd: forgotten, a gap now
        assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        await store.close()
    run(go())


def test_state_survives_a_restart_and_truncation_rebuilds_it_from_the_log(tmp_path):
    async def go():
        store, log = _log(tmp_path)
        for k in range(4):
            await log.append_as_leader(_batch(PID, 0, 3 * k), 0)
        before = {pid: e.encode() for pid, e in log.producers.producers.items()}
        await store.close()
        store, log = _log(tmp_path)  # reopened: read from RocksDB, not rescanned
        assert {pid: e.encode() for pid, e in log.producers.producers.items()} == before
        assert (await log.append_as_leader(_batch(PID, 0, 9), 0)).duplicate
        await log.truncate_to(6)  # the last two batches go
        rebuilt = ProducerStateManager("t-0")
        rebuilt.rebuild([b for b in log.stored_batches(None)])
        assert log.producers.producers[PID].encode() == rebuilt.producers[PID].encode()
        assert log.producers.producers[PID].last_seq == 5
        await log.append_as_leader(_batch(PID, 0, 6), 0)  # the next in line after the cut
        await store.close()
        store, log = _log(tmp_path)
        assert log.producers.producers[PID].last_seq == 8
        await store.close()
    run(go())


def test_followers_keep_the_same_state(tmp_path):
    async def go():
        store, leader = _log(tmp_path / "a")
        fstore, follower = _log(tmp_path / "b")
        for k in range(3):
            await leader.append_as_leader(_batch(PID, 0, 3 * k), 0)
        await follower.append_as_follower([leader.batch_at(b.base_offset) for b in leader.stored_batches(None)])
        assert follower.producers.producers[PID].encode() == leader.producers.producers[PID].encode()
        # the follower, now leader, recognises a retry of a batch the old leader wrote
        assert (await follower.append_as_leader(_batch(PID, 0, 6), 1)).duplicate
        await store.close()
        await fstore.close()
    run(go())


def test_producers_expire_and_leave_with_retention(tmp_path):
    async def go():
        store, log = _log(tmp_path)
        await log.append_as_leader(_batch(PID, 0, 0), 0)
        await log.append_as_leader(_batch(PID + 1, 0, 0), 0)
        log.set_high_watermark(log.log_end_offset)
        now = int(time.time() * 1000)
        assert log.expire_producers(now, 3_600_000) == []
        assert log.expire_producers(now + 3_600_000, 3_600_000) == [PID, PID + 1]
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_batch(PID, 0, 3), 0)
        assert e.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
        await log.append_as_leader(_batch(PID + 2, 0, 0), 0)
        log.set_high_watermark(log.log_end_offset)
        log.delete_before(log.log_end_offset)  # retention removed its only batch
        assert PID + 2 not in log.producers.producers
        await store.close()
        store, log = _log(tmp_path)
        assert log.producers.producers == {}
        await store.close()
    run(go())


def test_sequences_wrap_after_int32_max():
    assert last_sequence(2**31 - 2, 3) == 0
    state = ProducerStateManager("t-0")
    state.record_batch(0, 2, 0, PID, 0, 2**31 - 3)
    assert state.check(PID, 0, 0, 2, 3) is None  # 0 follows Int32.MAX


# -- compression -------------------------------------------------------------------------------

LINES = [json.dumps({"ts": 1700000000000 + i, "level": "INFO", "service": "orders",
                     "msg": f"order {i} accepted", "items": i % 7}).encode() for i in range(500)]


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_round_trips_through_a_batch(codec):
    b = build_batch([(None, v, 1, ()) for v in LINES], codec)
    assert validate_batch(b, "t-0", 1 << 20) > 0
    assert [r.value for r in records_of(b, "t", 0)] == LINES
    if codec != Codec.NONE:
        assert len(b.records) < len(b"".join(LINES)) / 3  # JSON lines compress
        plain = recompress(b, Codec.NONE)
        assert plain.attributes == 0 and [r.value for r in records_of(plain, "t", 0)] == LINES
        assert recompress(plain, codec).records == b.records


def test_a_corrupt_compressed_batch_is_corrupt_message():
    b = build_batch([(None, v, 1, ()) for v in LINES], Codec.ZSTD)
    b.records = b.records[: len(b.records) // 2]
    b.crc = batch_crc(b)  # a well-meaning but broken producer: the CRC matches
    with pytest.raises(KafkaError) as e:
        validate_batch(b, "t-0", 1 << 20)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    b.attributes = 6  # no such codec
    b.crc = batch_crc(b)
    with pytest.raises(KafkaError) as e:
        validate_batch(b, "t-0", 1 << 20)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and "unknown compression codec 6" in e.value.message


def test_a_decompression_bomb_is_refused_with_bounded_memory():
    bomb = compress(Codec.ZSTD, bytes(256 << 20))
    assert len(bomb) < 64 << 10
    with pytest.raises(CompressionError, match="expands past"):
        decompress(Codec.ZSTD, bomb)
    for codec in (Codec.GZIP, Codec.LZ4, Codec.SNAPPY):
        with pytest.raises(CompressionError, match="expands past"):
            decompress(codec, compress(codec, bytes(8 << 20)), limit=1 << 20)


def test_the_message_size_limit_applies_to_the_compressed_batch():
    entries = [(None, v, 1, ()) for v in LINES]
    raw = sum(len(v) for v in LINES)
    b = build_batch(entries, Codec.GZIP)
    assert validate_batch(b, "t-0", raw // 2) > 0  # the plain batch would not fit
    with pytest.raises(KafkaError) as e:
        validate_batch(build_batch(entries), "t-0", raw // 2)
    assert e.value.code == ErrorCode.RECORD_TOO_LARGE


# -- the client's settings ---------------------------------------------------------------------

def test_idempotence_is_on_by_default_and_conflicts_are_kafkas_config_errors():
    assert Producer("h:1").idempotent
    assert not Producer("h:1", acks=1).idempotent  # not asked for: quietly off, as in Kafka
    assert not Producer("h:1", enable_idempotence=False).idempotent
    for kw, message in [({"acks": 1}, "Must set acks to all in order to use the idempotent producer"),
                        ({"max_in_flight_requests_per_connection": 6},
                         "Must set max.in.flight.requests.per.connection to at most 5"),
                        ({"retries": 0}, "Must set retries to non-zero when using the idempotent producer")]:
        with pytest.raises(ConfigError, match=message):
            Producer("h:1", enable_idempotence=True, **kw)
    with pytest.raises(ConfigError, match="compression.type"):
        Producer("h:1", compression_type="brotli")


# -- the client against a partition log that answers as a leader would --------------------------

def _fake_leader(monkeypatch, tmp_path, answer):
    """A Producer whose one broker appends to a real PartitionLog; ``answer(request_no, batch)``
    may return an ErrorCode to answer instead of appending, or ("lose", None) to append and
    then lose the answer."""
    from tests.fakes import fake_broker

    store, log = _log(tmp_path)
    calls = {"produce": 0, "init": []}

    class FakeBroker:
        async def InitProducerId(self, req, timeout):
            from protos import broker_pb2 as pb
            calls["init"].append((req.producer_id, req.producer_epoch) if req.HasField("producer_id") else None)
            if req.HasField("producer_id"):
                return pb.InitProducerIdResponse(producer_id=req.producer_id, producer_epoch=req.producer_epoch + 1)
            return pb.InitProducerIdResponse(producer_id=PID, producer_epoch=0)

        async def Produce(self, req, timeout):
            from protos import broker_pb2 as pb
            calls["produce"] += 1
            resp = pb.ProduceResponse()
            for t in req.topics:
                rt = resp.topics.add(name=t.name)
                for p in t.partitions:
                    verdict = answer(calls["produce"], p.batch)
                    if isinstance(verdict, ErrorCode):
                        rt.partitions.add(partition=p.partition, error_code=int(verdict))
                        continue
                    try:
                        info = await log.append_as_leader(p.batch, 0)
                    except KafkaError as e:
                        rt.partitions.add(partition=p.partition, error_code=int(e.code))
                        continue
                    if verdict == "lose":  # written, but the connection drops before the answer
                        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, "connection reset")
                    rt.partitions.add(partition=p.partition, base_offset=info.first_offset)
            return resp

    fake_broker(monkeypatch, FakeBroker())
    return store, log, calls


def test_a_retry_after_a_lost_answer_is_not_written_twice(monkeypatch, tmp_path):
    async def go():
        store, log, calls = _fake_leader(monkeypatch, tmp_path, lambda n, b: "lose" if n == 2 else None)
        async with Producer("fake:1", retry_backoff_ms=10, linger_ms=0) as p:
            mds = []
            for i in range(5):
                mds.append(await p.send_and_wait("t", b"v%d" % i))
        assert [md.offset for md in mds] == [0, 1, 2, 3, 4]
        assert _values(log) == [b"v%d" % i for i in range(5)]  # the lost answer's batch once
        assert calls["produce"] == 6
        await store.close()
    run(go())


def test_an_unknown_producer_makes_the_client_bump_its_epoch_and_start_over(monkeypatch, tmp_path):
    async def go():
        store, log, calls = _fake_leader(
            monkeypatch, tmp_path, lambda n, b: ErrorCode.UNKNOWN_PRODUCER_ID if n == 3 else None)
        async with Producer("fake:1", retry_backoff_ms=10, linger_ms=0) as p:
            for i in range(4):
                await p.send_and_wait("t", b"v%d" % i)
            assert (p.producer_id, p.producer_epoch) == (PID, 1)
        assert calls["init"] == [None, (PID, 0)]  # a new id, then the bump
        assert _values(log) == [b"v%d" % i for i in range(4)]
        last = log.batch_at(3)
        assert (last.producer_epoch, last.base_sequence) == (1, 1)  # numbered from 0 again
        await store.close()
    run(go())


def test_the_producer_id_comes_from_the_next_broker_when_one_is_down(monkeypatch):
    """InitProducerId rotates over the brokers: a dead one (the demo killed broker 101, first in
    the list) must not be asked forever."""
    from tests.fakes import FakeCluster, fake_broker

    asked: list[str] = []

    class Brokers(FakeCluster):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            self.brokers = {1: "dead:1", 2: "alive:2"}

    class Stub:
        def __init__(self, address: str) -> None:
            self.address = address

        async def InitProducerId(self, req, timeout):
            asked.append(self.address)
            if self.address.startswith("dead"):
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, "connection refused")
            from protos import broker_pb2 as pb
            return pb.InitProducerIdResponse(producer_id=PID, producer_epoch=0)

    from clients import producer as client
    fake_broker(monkeypatch, None)
    monkeypatch.setattr(client, "ClusterView", Brokers)

    class Connections:
        def __init__(self, tls: object = None) -> None: ...

        def stub(self, address: str) -> Stub:
            return Stub(address)

        async def close(self) -> None: ...
    monkeypatch.setattr(client, "Connections", Connections)

    async def go():
        p = await Producer("fake:1", retry_backoff_ms=10).start()
        p.acc.append("t", 0, None, b"x", 0, (), 10, False)
        await p._ready_to_number() or await p._ready_to_number()
        assert p.producer_id == PID and "alive:2" in asked
        p._closed = p._stopping = True
        p._sender.cancel()
    run(go())


def test_without_idempotence_one_partition_has_one_request_in_flight(monkeypatch, tmp_path):
    """A broker's gRPC service runs each unary call as its own task, so two produce requests in
    flight may be appended in either order (a Kafka connection answers one request at a time and
    keeps the order). Without sequence numbers the broker cannot put them back in order, so a
    non-idempotent producer keeps one request per partition in flight; the fake broker here
    appends the second request first whenever it arrives while the first waits."""
    from tests.fakes import fake_broker
    from protos import broker_pb2 as pb

    store, log = _log(tmp_path)
    second_arrived = asyncio.Event()
    calls = {"produce": 0, "overlapping": 0}

    class ReorderingBroker:
        async def Produce(self, req, timeout):
            calls["produce"] += 1
            first = calls["produce"] == 1
            if first:  # wait for an overlapping request (there must be none), at most 1 s
                try:
                    async with asyncio.timeout(1):
                        await second_arrived.wait()
                    calls["overlapping"] += 1
                except TimeoutError:
                    pass
            else:
                second_arrived.set()
            resp = pb.ProduceResponse()
            for t in req.topics:
                rt = resp.topics.add(name=t.name)
                for p in t.partitions:
                    info = await log.append_as_leader(p.batch, 0)
                    rt.partitions.add(partition=p.partition, base_offset=info.first_offset)
            return resp

    fake_broker(monkeypatch, ReorderingBroker())

    async def go():
        async with Producer("fake:1", acks="1", retries=0, linger_ms=0) as p:
            assert not p.idempotent
            futures = [await p.send("t", b"v%d" % i) for i in range(20)]
            await p.flush()
        assert all(f.exception() is None for f in futures)
        assert calls["overlapping"] == 0, "a second request for the partition was sent while one was in flight"
        assert _values(log) == [b"v%d" % i for i in range(20)]
        await store.close()
    run(go())
