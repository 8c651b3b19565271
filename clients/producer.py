"""The producer (asyncio), after Kafka's KafkaProducer (docs/brokers.md, "Client library").

    async with Producer("127.0.0.1:9092", acks="all") as p:
        md = await (await p.send("orders", b"value", key=b"k"))   # RecordMetadata

``send`` waits for the topic's metadata (up to ``max.block.ms``, with Kafka's timeout
messages), picks the partition like Kafka's default partitioner (``partitioner``), and appends
to a batch (``accumulator``); a sender task drains ready batches into one Produce request per
leader, at most ``max.in.flight.requests.per.connection`` in flight per broker, retrying
retriable errors until ``delivery.timeout.ms``. acks=0 batches go down a fire-and-forget
stream and complete with offset -1. There is no idempotence: a retry after a lost answer can
write a batch twice (use ``retries=0`` for at-most-once).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc

from protos import broker_pb2 as pb

from .accumulator import RECORD_OVERHEAD, RecordAccumulator, RecordFuture, RecordMetadata, ProducerBatch
from .cluster_view import (BrokerResponseError, ClientError, ClusterView, Connections, KafkaTimeoutError,
                           parse_bootstrap)
from .errors import RETRIABLE, STALE_METADATA, ErrorCode
from .partitioner import StickyPartitioner, partition_for_key
from .records import Header

log = logging.getLogger("clients.producer")

ACKS: dict[Any, int] = {"all": -1, "-1": -1, "1": 1, "0": 0, -1: -1, 1: 1, 0: 0}


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
            try:  # asyncio.timeout, not wait_for, which can lose a cancel on 3.11 (gh-86296)
                async with asyncio.timeout(None if next_check == float("inf") else next_check):
                    await self._wake.wait()
            except TimeoutError:
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
