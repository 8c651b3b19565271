"""A Kafka-style client for the brokers (asyncio): a batching ``Producer`` and a ``Consumer``.

    async with Producer("127.0.0.1:9092", acks="all") as p:
        md = await (await p.send("orders", b"value", key=b"k"))   # RecordMetadata
    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as c:
        await c.subscribe("orders")
        records = await c.poll(1000)

The producer mirrors Kafka's (seeds 001-003): ``send`` waits for the topic's metadata (up to
``max.block.ms``, with Kafka's timeout messages), picks the partition like Kafka's default
partitioner (``partitioner``), and appends to a batch (``accumulator``); a sender task drains
ready batches into one Produce request per leader, at most
``max.in.flight.requests.per.connection`` in flight per broker, retrying retriable errors
until ``delivery.timeout.ms``. acks=0 batches go down a fire-and-forget stream and complete
with offset -1. There is no idempotence: a retry after a lost answer can write a batch twice
(use ``retries=0`` for at-most-once). The consumer has no groups: it is assigned partitions,
fetches from their leaders below the high watermark, and resets a missing or out-of-range
position per ``auto.offset.reset``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import grpc

from protos import broker_pb2 as pb

from .accumulator import RECORD_OVERHEAD, RecordAccumulator, RecordFuture, RecordMetadata, ProducerBatch
from .client_metadata import (BrokerResponseError, ClientError, ClusterView, Connections, KafkaTimeoutError,
                              parse_bootstrap)
from .errors import RETRIABLE, STALE_METADATA, ErrorCode
from .partitioner import StickyPartitioner, partition_for_key
from .records import ConsumerRecord, Header, batches, check_crc, records_of

__all__ = ["Producer", "Consumer", "RecordMetadata", "RecordFuture", "ConsumerRecord", "ClientError",
           "KafkaTimeoutError", "BrokerResponseError", "RecordTooLargeError", "ACKS"]

log = logging.getLogger("brokerd.client")

ACKS: dict[Any, int] = {"all": -1, "-1": -1, "1": 1, "0": 0, -1: -1, 1: 1, 0: 0}
EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


class RecordTooLargeError(ClientError):
    """Kafka's RecordTooLargeException, raised by ``send`` before anything is sent."""


def _bytes(v: bytes | str | None) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def _rpc_error(e: grpc.aio.AioRpcError) -> tuple[ErrorCode, str]:
    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ErrorCode.REQUEST_TIMED_OUT, "the broker did not answer in time"
    if e.code() == grpc.StatusCode.UNAVAILABLE:
        return ErrorCode.NETWORK_EXCEPTION, e.details() or "the broker is unreachable"
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{e.code().name}: {e.details()}"


class Producer:
    def __init__(self, bootstrap_servers: str | list[str], *, acks: str | int = "all", batch_size: int = 16384,
                 linger_ms: int = 0, max_request_size: int = 1048576, buffer_memory: int = 33554432,
                 max_block_ms: int = 60000, request_timeout_ms: int = 30000, delivery_timeout_ms: int = 120000,
                 retries: int = 2147483647, retry_backoff_ms: int = 100,
                 max_in_flight_requests_per_connection: int = 5, metadata_max_age_ms: int = 300000,
                 client_id: str = "") -> None:
        if acks not in ACKS:
            raise ClientError(f"Invalid value {acks} for configuration acks: String must be one of: all, -1, 0, 1")
        self.acks = ACKS[acks]
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.retries = retries
        self.max_in_flight = max(1, max_in_flight_requests_per_connection)
        self.client_id = client_id
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._metadata_max_age_ms = metadata_max_age_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._batch_size = batch_size
        self._linger_ms = linger_ms
        self.sticky = StickyPartitioner()
        self._inflight: dict[int, int] = {}
        self._streams: dict[str, Any] = {}
        self._closed = False
        self._stopping = False
        self._sender: asyncio.Task | None = None
        #: Kafka's producer metrics of the same names: records acknowledged, records failed,
        #: produce requests and batches sent (retries included).
        self.metrics = {"record-send-total": 0, "record-error-total": 0, "request-total": 0, "batch-total": 0}

    async def start(self) -> "Producer":
        self.connections = Connections()
        self.cluster = ClusterView(self._bootstrap, self.connections, refresh_backoff_ms=self._retry_backoff_ms,
                                   max_age_ms=self._metadata_max_age_ms, request_timeout_ms=self.request_timeout_ms)
        self.acc = RecordAccumulator(self._batch_size, self._linger_ms, self.buffer_memory, self._retry_backoff_ms)
        self._wake = asyncio.Event()
        self.cluster.start()
        self._sender = asyncio.get_running_loop().create_task(self._run(), name="producer-sender")
        return self

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- send -------------------------------------------------------------------------------------

    async def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Header] = ()) -> RecordFuture:
        """Queue a record; returns a future of its RecordMetadata. Waits only for metadata and
        buffer memory (``max.block.ms``)."""
        if self._closed:
            raise ClientError("Cannot perform operation after producer has been closed")
        begin = time.monotonic()
        cluster = self.cluster
        count = cluster.partition_count(topic)
        if count is None or (partition is not None and partition >= count):
            await cluster.wait_on_metadata(topic, partition, self.max_block_ms)
            count = cluster.partition_count(topic)
            assert count is not None
        k = key if key is None or type(key) is bytes else _bytes(key)
        v = value if type(value) is bytes else _bytes(value)
        size = RECORD_OVERHEAD + (len(k) if k else 0) + (len(v) if v else 0)
        for hk, hv in headers:
            size += len(hk) + (len(hv) if hv else 0)
        if size > self.max_request_size:
            raise RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than "
                                      f"{self.max_request_size}, which is the value of the max.request.size "
                                      f"configuration.")
        if size > self.buffer_memory:
            raise RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than the total "
                                      f"memory buffer you have configured with the buffer.memory configuration.")
        if self.acc.used + size > self.buffer_memory:
            await self.acc.reserve(size, begin + self.max_block_ms / 1000, self.max_block_ms)
        ts = timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000
        sticky = partition is None and k is None
        if partition is None:
            if k is not None:
                partition = partition_for_key(k, count)
            else:
                partition = self.sticky.partition(topic, count, cluster.topics[topic].available)
        fut, wake = self.acc.append(topic, partition, k, v, ts, headers, size, sticky)
        if fut is None:  # the sticky partition needs a new batch: move on first (KIP-480)
            partition = self.sticky.next_partition(topic, count, cluster.topics[topic].available, partition)
            fut, wake = self.acc.append(topic, partition, k, v, ts, headers, size, False)
            assert fut is not None
        if wake:
            self._wake.set()
            await asyncio.sleep(0)  # a batch filled up or began: let the sender run even if the caller never waits
        return fut

    async def send_and_wait(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                            **kw: Any) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kw))

    async def flush(self) -> None:
        """Send everything buffered now and wait for the answers."""
        self.acc.flushing += 1
        self._wake.set()
        try:
            pending = [b.future for b in list(self.acc.incomplete)]
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        finally:
            self.acc.flushing -= 1

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.acc.closing = True
        await self.flush()
        self._stopping = True
        self._wake.set()
        if self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        for call in self._streams.values():
            try:
                await call.done_writing()
                await call
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
        await self.cluster.close()
        await self.connections.close()

    # -- the sender -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            for b in self.acc.expired(now, self.delivery_timeout_s):
                self._fail(b, KafkaTimeoutError(f"Expiring {len(b.entries)} record(s) for {b.topic}-{b.partition}:"
                                                f"{(now - b.created) * 1000:.0f} ms has passed since batch creation"))
            nodes, next_check, unknown = self.acc.ready(self.cluster.leader_for, now)
            if unknown:
                for t in unknown:
                    self.cluster.add(t)
                self.cluster.request_update()
                next_check = min(next_check, 0.05)
            for node in nodes:
                if self._inflight.get(node, 0) >= self.max_in_flight:
                    continue
                address = self.cluster.brokers.get(node)
                if address is None:
                    self.cluster.request_update()
                    next_check = min(next_check, 0.05)
                    continue
                parts = [tp for tp, dq in self.acc.batches.items() if dq and self.cluster.leader_for(*tp) == node]
                drained = self.acc.drain(parts, node, self.max_request_size, now)
                if drained:
                    self._inflight[node] = self._inflight.get(node, 0) + 1
                    asyncio.get_running_loop().create_task(self._produce(node, address, drained))
            if self._stopping and not self.acc.incomplete:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), None if next_check == float("inf") else next_check)
            except asyncio.TimeoutError:
                pass

    async def _produce(self, node: int, address: str, drained: list[ProducerBatch]) -> None:
        now = time.monotonic()
        self.metrics["request-total"] += 1
        self.metrics["batch-total"] += len(drained)
        req = pb.ProduceRequest(acks=self.acks, timeout_ms=self.request_timeout_ms, client_id=self.client_id)
        topics: dict[str, pb.ProduceTopicData] = {}
        for b in drained:
            b.attempts += 1
            b.last_attempt = now
            t = topics.get(b.topic)
            if t is None:
                t = topics[b.topic] = req.topics.add(name=b.topic)
            t.partitions.add(partition=b.partition, batch=b.encoded())
        try:
            if self.acks == 0:
                await self._write_no_ack(address, req)
                for b in drained:
                    self._complete(b, -1)
                return
            resp = await self.connections.stub(address).Produce(req, timeout=self.request_timeout_ms / 1000 + 5)
            answers = {(t.name, a.partition): a for t in resp.topics for a in t.partitions}
            for b in drained:
                a = answers.get((b.topic, b.partition))
                if a is None:
                    self._retry_or_fail(b, ErrorCode.UNKNOWN_SERVER_ERROR, "the broker did not answer for the partition")
                elif a.error_code == 0:
                    self._complete(b, a.base_offset)
                else:
                    self._retry_or_fail(b, ErrorCode.of(a.error_code), a.error_message)
        except grpc.aio.AioRpcError as e:
            code, message = _rpc_error(e)
            for b in drained:
                self._retry_or_fail(b, code, message)
            self.cluster.request_update()
        except BrokerResponseError as e:
            for b in drained:
                self._fail(b, e)
            self.cluster.request_update()
        finally:
            self._inflight[node] -= 1
            self._wake.set()

    async def _write_no_ack(self, address: str, req: pb.ProduceRequest) -> None:
        """acks=0: write to the broker's stream; if the broker ended it with an error (as Kafka
        closes the connection), report that and refresh metadata."""
        call = self._streams.get(address)
        if call is None or call.done():
            call = self._streams[address] = self.connections.stub(address).ProduceNoAck()
        try:
            await call.write(req)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
            self._streams.pop(address, None)
            details = e.details() if isinstance(e, grpc.aio.AioRpcError) else None
            if details is None:
                try:
                    await call
                except grpc.aio.AioRpcError as err:
                    details = err.details()
            code_name, _, message = (details or "NETWORK_EXCEPTION").partition(": ")
            code = ErrorCode.__members__.get(code_name, ErrorCode.NETWORK_EXCEPTION)
            raise BrokerResponseError(code, message or (details or "")) from None

    def _retry_or_fail(self, b: ProducerBatch, code: ErrorCode, message: str) -> None:
        if code in STALE_METADATA:
            self.cluster.request_update()
        if (code in RETRIABLE and b.attempts <= self.retries and not self._stopping
                and time.monotonic() - b.created < self.delivery_timeout_s):
            log.debug("retrying a batch for %s-%d (attempt %d): %s", b.topic, b.partition, b.attempts, code.name)
            self.acc.reenqueue(b)
        else:
            self._fail(b, BrokerResponseError(code, message))

    def _complete(self, b: ProducerBatch, base_offset: int) -> None:
        b.done(base_offset)
        self.acc.deallocate(b)
        self.metrics["record-send-total"] += len(b.entries)

    def _fail(self, b: ProducerBatch, error: BaseException) -> None:
        b.fail(error)
        self.acc.deallocate(b)
        self.metrics["record-error-total"] += len(b.entries)


class Consumer:
    def __init__(self, bootstrap_servers: str | list[str], *, auto_offset_reset: str = "latest",
                 fetch_min_bytes: int = 1, fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, max_poll_records: int = 500,
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000, check_crcs: bool = True,
                 retry_backoff_ms: int = 100) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ClientError(f"Invalid value {auto_offset_reset} for configuration auto.offset.reset: String must "
                              f"be one of: latest, earliest, none")
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self.check_crcs = check_crcs
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._metadata_max_age_ms = metadata_max_age_ms
        self.positions: dict[TopicPartition, int | None] = {}
        self._reset: dict[TopicPartition, int] = {}
        self._next_fetch: dict[TopicPartition, int] = {}
        self._buffer: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._inflight: dict[int, asyncio.Task] = {}
        self._fetched = asyncio.Event()
        self._error: ClientError | None = None
        self._rotation = -1

    async def start(self) -> "Consumer":
        self.connections = Connections()
        self.cluster = ClusterView(self._bootstrap, self.connections, max_age_ms=self._metadata_max_age_ms,
                                   request_timeout_ms=self.request_timeout_ms)
        self.cluster.start()
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for t in self._inflight.values():
            t.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        await self.cluster.close()
        await self.connections.close()

    # -- assignment and positions -----------------------------------------------------------------

    async def subscribe(self, topic: str, timeout_ms: int = 60000) -> list[TopicPartition]:
        """Assign every partition of ``topic`` (no consumer group)."""
        await self.cluster.wait_on_metadata(topic, None, timeout_ms)
        count = self.cluster.partition_count(topic) or 0
        tps = [(topic, p) for p in range(count)]
        await self.assign(tps)
        return tps

    async def assign(self, tps: list[TopicPartition]) -> None:
        for topic, p in tps:
            self.cluster.add(topic)
            await self.cluster.wait_on_metadata(topic, p, 60000)
        self.positions = {tp: self.positions.get(tp) for tp in tps}
        self._buffer = {tp: q for tp, q in self._buffer.items() if tp in self.positions}

    def assignment(self) -> list[TopicPartition]:
        return list(self.positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        tp = (topic, partition)
        if tp not in self.positions:
            raise ClientError(f"No current assignment for partition {topic}-{partition}")
        self.positions[tp] = offset
        self._reset.pop(tp, None)
        self._next_fetch.pop(tp, None)
        self._buffer.pop(tp, None)

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps or list(self.positions):
            self._seek_reset(tp, EARLIEST)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps or list(self.positions):
            self._seek_reset(tp, LATEST)

    def _seek_reset(self, tp: TopicPartition, strategy: int) -> None:
        self.positions[tp] = None
        self._reset[tp] = strategy
        self._next_fetch.pop(tp, None)
        self._buffer.pop(tp, None)

    def position(self, topic: str, partition: int) -> int | None:
        return self.positions.get((topic, partition))

    async def _resolve_positions(self) -> None:
        """ListOffsets for partitions without a position (auto.offset.reset or a seek to an end)."""
        missing = [tp for tp, pos in self.positions.items() if pos is None]
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in missing:
            strategy = self._reset.get(tp)
            if strategy is None:
                if self.auto_offset_reset == "none":
                    raise ClientError(f"Undefined offset with no reset policy for partitions: {tp[0]}-{tp[1]}")
                strategy = self._reset[tp] = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
            leader = self.cluster.leader_for(*tp)
            if leader is None or leader not in self.cluster.brokers:
                self.cluster.request_update()
                continue
            by_node.setdefault(leader, []).append(tp)
        for node, tps in by_node.items():
            req = pb.ListOffsetsRequest()
            topics: dict[str, pb.ListOffsetsTopic] = {}
            for topic, p in tps:
                t = topics.get(topic) or topics.setdefault(topic, req.topics.add(name=topic))
                t.partitions.add(partition=p, timestamp=self._reset[(topic, p)])
            try:
                resp = await self.connections.stub(self.cluster.brokers[node]).ListOffsets(req, timeout=10)
            except grpc.aio.AioRpcError:
                self.cluster.request_update()
                continue
            for t in resp.topics:
                for a in t.partitions:
                    tp = (t.name, a.partition)
                    if a.error_code == 0 and a.offset >= 0 and self.positions.get(tp) is None:
                        self.positions[tp] = a.offset
                        self._reset.pop(tp, None)
                    elif a.error_code:
                        self.cluster.request_update()

    # -- polling ----------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most ``max.poll.records``; [] on timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if any(pos is None for pos in self.positions.values()):
                await self._resolve_positions()
            records = self._drain()
            self._send_fetches()
            if records:
                return records
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._fetched.clear()
            try:
                await asyncio.wait_for(self._fetched.wait(), min(left, 0.1 if self._waiting_for_metadata() else left))
            except asyncio.TimeoutError:
                pass

    def _waiting_for_metadata(self) -> bool:
        return any(pos is None for pos in self.positions.values()) or any(
            self.cluster.leader_for(*tp) is None for tp in self.positions)

    def _drain(self) -> list[ConsumerRecord]:
        """Buffered records from the position on, starting at a different partition each time
        so that none starves. Records of a partition are buffered in offset order."""
        out: list[ConsumerRecord] = []
        tps = list(self._buffer)
        if not tps:
            return out
        self._rotation = (self._rotation + 1) % len(tps)
        for tp in tps[self._rotation:] + tps[:self._rotation]:
            q = self._buffer[tp]
            pos = self.positions.get(tp)
            if pos is None:
                continue
            while q and q[0].offset < pos:  # already consumed (a fetch started inside a batch)
                q.popleft()
            take = min(len(q), self.max_poll_records - len(out))
            if take == len(q) and take:
                chunk = list(q)
                q.clear()
            else:
                chunk = [q.popleft() for _ in range(take)]
            if chunk:
                out.extend(chunk)
                self.positions[tp] = chunk[-1].offset + 1
            if len(out) >= self.max_poll_records:
                break
        return out

    def _send_fetches(self) -> None:
        by_node: dict[int, list[TopicPartition]] = {}
        for tp, pos in self.positions.items():
            if pos is None or len(self._buffer.get(tp, ())) >= self.max_poll_records:
                continue
            leader = self.cluster.leader_for(*tp)
            if leader is None or leader not in self.cluster.brokers:
                self.cluster.request_update()
                continue
            if leader not in self._inflight:
                by_node.setdefault(leader, []).append(tp)
        for node, tps in by_node.items():
            self._inflight[node] = asyncio.get_running_loop().create_task(self._fetch(node, tps))

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                              max_bytes=self.fetch_max_bytes)
        topics: dict[str, pb.FetchTopic] = {}
        sent: dict[TopicPartition, int] = {}
        for tp in tps:
            offset = self._next_fetch.get(tp, self.positions[tp])
            assert offset is not None
            info = self.cluster.partition(*tp)
            t = topics.get(tp[0]) or topics.setdefault(tp[0], req.topics.add(name=tp[0]))
            fp = t.partitions.add(partition=tp[1], fetch_offset=offset, log_start_offset=-1,
                                  partition_max_bytes=self.max_partition_fetch_bytes)
            if info is not None:
                fp.current_leader_epoch = info.leader_epoch
            sent[tp] = offset
        try:
            address = self.cluster.brokers[node]
            resp = await self.connections.stub(address).Fetch(
                req, timeout=self.fetch_max_wait_ms / 1000 + self.request_timeout_ms / 1000)
            self._handle(resp, sent)
        except (grpc.aio.AioRpcError, KeyError) as e:
            log.debug("fetch from broker %d failed: %s", node, e)
            self.cluster.request_update()
            await asyncio.sleep(self.retry_backoff_s)
        except ClientError as e:
            self._error = e
        finally:
            del self._inflight[node]
            self._fetched.set()

    def _handle(self, resp: pb.FetchResponse, sent: dict[TopicPartition, int]) -> None:
        for t in resp.topics:
            for a in t.partitions:
                tp = (t.name, a.partition)
                offset = sent.get(tp)
                if offset is None or self.positions.get(tp) is None or self._next_fetch.get(tp, self.positions[tp]) != offset:
                    continue  # seeked or reassigned meanwhile
                code = ErrorCode.of(a.error_code)
                if code == ErrorCode.NONE:
                    q = self._buffer.setdefault(tp, deque())
                    next_offset = offset
                    hw = a.high_watermark
                    for b in batches(a.records):
                        if self.check_crcs:
                            try:
                                check_crc(b)
                            except Exception as e:
                                raise ClientError(f"Record batch for partition {tp[0]}-{tp[1]} at offset "
                                                  f"{b.base_offset} is invalid, cause: {e}") from None
                        end = b.base_offset + b.last_offset_delta + 1
                        if end <= hw:
                            q.extend(records_of(b, tp[0], tp[1], offset))
                        else:  # never served below the HW, but a consumer must not trust that
                            q.extend(r for r in records_of(b, tp[0], tp[1], offset) if r.offset < hw)
                        next_offset = max(next_offset, min(end, hw))
                    self._next_fetch[tp] = next_offset
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.auto_offset_reset == "none":
                        raise ClientError(f"Fetch position FetchPosition{{offset={offset}}} is out of range for "
                                          f"partition {tp[0]}-{tp[1]}")
                    log.info("Fetch position %d is out of range for partition %s-%d, resetting offset", offset, *tp)
                    self._seek_reset(tp, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)
                elif code in STALE_METADATA or code in RETRIABLE:
                    self.cluster.request_update()
                else:
                    raise ClientError(f"Fetch for {tp[0]}-{tp[1]} failed: {code.name}: {a.error_message}")
