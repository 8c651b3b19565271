"""The producer (asyncio), after Kafka's KafkaProducer (docs/brokers.md, "Client library").

    async with Producer("127.0.0.1:9092", acks="all") as p:
        md = await (await p.send("orders", b"value", key=b"k"))   # RecordMetadata

``send`` waits for the topic's metadata (up to ``max.block.ms``, with Kafka's timeout
messages), picks the partition like Kafka's default partitioner (``partitioner``), and appends
to a batch (``accumulator``); a sender task drains ready batches into one Produce request per
leader, at most ``max.in.flight.requests.per.connection`` in flight per broker, retrying
retriable errors until ``delivery.timeout.ms``. Batches are compressed with
``compression.type``. acks=0 batches go down a fire-and-forget stream and complete with
offset -1.

Idempotence is on by default (``enable.idempotence``, as in Kafka 3): the producer gets an id
and epoch from a broker (InitProducerId) and numbers each partition's batches; a retry carries
the same numbers, so the partition leader writes it at most once and answers a duplicate with
the original offsets, and it refuses a batch that skips ahead, so with up to five requests in
flight the order of a partition's batches survives retries (a retried batch waits until every
earlier batch of its partition is answered, Kafka's insertInSequenceOrder). When the sequence
is broken (a batch failed for good, or the leader lost the producer's state) the producer bumps
its epoch and numbers the partition's batches from 0 again, as Kafka's does (KIP-360).
``enable_idempotence=False`` gives at-least-once: a retry after a lost answer can write a
batch twice, and retried batches can be reordered.

With a ``transactional_id`` the producer writes in transactions (KIP-98, ``transactions``):

    async with Producer("127.0.0.1:9092", transactional_id="billing-1") as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("orders", b"value")
        await p.commit_transaction()            # or abort_transaction()
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from protos import broker_pb2 as pb

from common.tls import TLSConfig

from .accumulator import RECORD_OVERHEAD, RecordAccumulator, RecordFuture, RecordMetadata, ProducerBatch
from .compression import Codec
from .config import from_properties
from common.config_def import ConfigError
from .cluster_view import CLIENT_ERRORS, ClientError, ClusterView, Connections, KafkaTimeoutError, parse_bootstrap
from common.errors import ErrorCode, KafkaError, RETRIABLE, STALE_METADATA
from . import interceptors
from .interceptors import ProducerInterceptor
from .partitioner import Partitioner, StickyPartitioner, partition_for_key
from .produce_stream import ProduceStream
from .records import Header, ProducerRecord
from .serialization import Serializer, checked, serialize
from .consumer_coordinator import ConsumerGroupMetadata
from .transactions import TransactionAbortedError, TransactionManager

log = logging.getLogger("clients.producer")

ACKS: dict[Any, int] = {"all": -1, "-1": -1, "1": 1, "0": 0, -1: -1, 1: 1, 0: 0}


class RecordTooLargeError(ClientError):
    """Kafka's RecordTooLargeException, raised by ``send`` before anything is sent."""


MAX_IN_FLIGHT_IDEMPOTENT = 5
SEQUENCE_MODULUS = 1 << 31  # sequences wrap after Int32.MAX


def _rpc_error(e: grpc.aio.AioRpcError) -> tuple[ErrorCode, str]:
    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ErrorCode.REQUEST_TIMED_OUT, "the broker did not answer in time"
    if e.code() == grpc.StatusCode.UNAVAILABLE:
        return ErrorCode.NETWORK_EXCEPTION, e.details() or "the broker is unreachable"
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{e.code().name}: {e.details()}"


def producer_config(properties: dict[str, str]) -> dict[str, Any]:
    """Kafka producer keys as ``Producer`` keyword arguments (``clients.config``)."""
    return from_properties(Producer.__init__, properties, "producer")


class Producer:
    def __init__(self, bootstrap_servers: str | list[str], *, acks: str | int = "all", batch_size: int = 16384,
                 linger_ms: int = 0, max_request_size: int = 1048576, buffer_memory: int = 33554432,
                 max_block_ms: int = 60000, request_timeout_ms: int = 30000, delivery_timeout_ms: int = 120000,
                 retries: int = 2147483647, retry_backoff_ms: int = 100,
                 max_in_flight_requests_per_connection: int = 5, metadata_max_age_ms: int = 300000,
                 client_id: str = "", enable_idempotence: bool | None = None,
                 compression_type: str = "none", tls: TLSConfig | None = None,
                 key_serializer: Serializer | None = None, value_serializer: Serializer | None = None,
                 partitioner: Partitioner | None = None, interceptors: Sequence[ProducerInterceptor] = (),
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60000) -> None:
        """``enable_idempotence`` None means Kafka's default: on, unless ``acks``, ``retries``
        or ``max_in_flight_requests_per_connection`` rule it out (then off); True with such a
        setting raises ConfigError with Kafka's message. ``tls``: TLS to the brokers
        (``clients.security.client_tls`` reads Kafka's ``security.protocol`` and ``ssl.*``).
        ``key_serializer``/``value_serializer`` (``clients.serialization``), ``partitioner``
        (``clients.partitioner.Partitioner``) and ``interceptors`` (``clients.interceptors``)
        are Kafka's extension points of the same names. ``transactional_id`` (Kafka's
        ``transactional.id``) makes the producer transactional, with transactions the coordinator
        aborts after ``transaction_timeout_ms``; it needs idempotence."""
        self.tls = tls
        self.key_serializer = checked(key_serializer, "key.serializer")
        self.value_serializer = checked(value_serializer, "value.serializer")
        if partitioner is not None and not callable(getattr(partitioner, "partition", None)):
            raise ConfigError(f"Invalid value {partitioner} for configuration partitioner.class: expected an "
                                  f"object with partition(topic, key, key_bytes, value, value_bytes, cluster)")
        self.partitioner = partitioner
        self.interceptors = list(interceptors)
        if acks not in ACKS:
            raise ConfigError(f"Invalid value {acks} for configuration acks: String must be one of: all, -1, 0, 1")
        self.acks = ACKS[acks]
        try:
            self.codec = Codec.named(compression_type)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        conflicts = [m for bad, m in (
            (self.acks != -1, "Must set acks to all in order to use the idempotent producer. Otherwise we "
                              "cannot guarantee idempotence."),
            (max_in_flight_requests_per_connection > MAX_IN_FLIGHT_IDEMPOTENT,
             "Must set max.in.flight.requests.per.connection to at most 5 to use the idempotent producer."),
            (retries == 0, "Must set retries to non-zero when using the idempotent producer.")) if bad]
        if (enable_idempotence or transactional_id) and conflicts:
            raise ConfigError(conflicts[0])
        if transactional_id is not None and enable_idempotence is False:
            raise ConfigError("Cannot set a transactional.id without also enabling idempotence.")
        self.transactional_id = transactional_id or None
        self.transaction_timeout_ms = transaction_timeout_ms
        self._txn: TransactionManager | None = None
        self.idempotent = enable_idempotence is not False and not conflicts
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence: dict[tuple[str, int], int] = {}
        #: Batches sent with a sequence and not yet answered for good, per partition.
        self._unresolved: dict[tuple[str, int], set[ProducerBatch]] = {}
        self._epoch_bump = False  # a sequence is broken: bump the epoch once nothing is in flight
        self._init_attempts = 0
        #: Per partition, the sequence after the last acknowledged batch.
        self._acked_next: dict[tuple[str, int], int] = {}
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
        self._throttled: dict[int, float] = {}  # node -> until when (monotonic) a quota's throttle holds sends
        self._streams: dict[str, Any] = {}
        self._produce_streams: dict[str, ProduceStream] = {}  # acks 1/all: one pipelined stream per broker
        self._unary_only: set[str] = set()  # brokers without ProduceStream
        self._closed = False
        self._stopping = False
        self._sender: asyncio.Task | None = None
        self._in_flight_batches: set[ProducerBatch] = set()  # sent and not answered: they expire too
        #: Requests in flight per partition: without idempotence at most one (see ``_may_send``).
        self._partition_requests: Counter[tuple[str, int]] = Counter()
        # The produce requests under way, kept until they end (the loop holds only weak
        # references to tasks); close() cancels and awaits those still waiting for an answer.
        self._requests: set[asyncio.Task] = set()
        #: Kafka's producer metrics of the same names: records acknowledged, records failed,
        #: produce requests and batches sent (retries included).
        self.metrics = {"record-send-total": 0, "record-error-total": 0, "request-total": 0, "batch-total": 0,
                        "produce-throttle-time-max": 0}

    async def start(self) -> "Producer":
        self.connections = Connections(self.tls)
        self.cluster = ClusterView(self._bootstrap, self.connections, refresh_backoff_ms=self._retry_backoff_ms,
                                   max_age_ms=self._metadata_max_age_ms, request_timeout_ms=self.request_timeout_ms,
                                   allow_auto_topic_creation=True)
        self.acc = RecordAccumulator(self._batch_size, self._linger_ms, self.buffer_memory, self._retry_backoff_ms,
                                     self.codec)
        self.acc.may_send = self._may_send
        self._wake = asyncio.Event()
        if self.transactional_id is not None:
            self._txn = TransactionManager(self.transactional_id, self.transaction_timeout_ms, self.cluster,
                                           self.connections, max_block_ms=self.max_block_ms,
                                           request_timeout_ms=self.request_timeout_ms,
                                           retry_backoff_ms=self._retry_backoff_ms)
        self.cluster.start()
        self._sender = asyncio.get_running_loop().create_task(self._run(), name="producer-sender")
        return self

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- send -------------------------------------------------------------------------------------

    async def send(self, topic: str, value: Any, key: Any = None, *, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Sequence[Header] = ()) -> RecordFuture:
        """Queue a record; returns a future of its RecordMetadata. Waits only for metadata and
        buffer memory (``max.block.ms``). Interceptors see the record first, then the
        serializers make its key and value bytes (without them: bytes, or str as UTF-8)."""
        if self._closed:
            raise ClientError("Cannot perform operation after producer has been closed")
        if self._txn is not None:
            self._txn.check_send()
        if self.interceptors:
            fut = await self._append_intercepted(ProducerRecord(topic, value, key, partition, timestamp_ms,
                                                                tuple(headers)))
        else:  # no ProducerRecord made: the common path, once per record
            fut = await self._append(topic, value, key, partition, timestamp_ms, tuple(headers) if headers else ())
        if self._txn is not None:
            await self._in_transaction(fut.batch.topic, fut.batch.partition)
        return fut

    async def _append_intercepted(self, record: ProducerRecord) -> RecordFuture:
        """``_append`` of the record the interceptors' ``on_send`` return; they hear of its
        acknowledgement, or of its failure to be queued."""
        record = interceptors.on_send(self.interceptors, record)
        try:
            fut = await self._append(record.topic, record.value, record.key, record.partition, record.timestamp,
                                     record.headers)
        except CLIENT_ERRORS as e:
            p = record.partition if record.partition is not None else -1
            interceptors.on_acknowledgement(self.interceptors, RecordMetadata(record.topic, p, -1, -1), e)
            raise
        fut.add_done_callback(self._acknowledged)
        return fut

    # -- transactions (clients/transactions.py) ------------------------------------------------------

    def _transactional(self) -> TransactionManager:
        if self._txn is None:
            raise ClientError("Cannot use transactional methods without enabling transactions by setting "
                              "transactional.id" if self.transactional_id is None else
                              "Cannot perform operation before the producer is started")
        if self._closed:
            raise ClientError("Cannot perform operation after producer has been closed")
        return self._txn

    async def init_transactions(self) -> None:
        """Kafka's initTransactions(): get the transactional id's producer id and a new epoch,
        which fences an older producer with the same id (its open transaction is aborted).
        Once, before the first transaction; KafkaTimeoutError after ``max.block.ms``."""
        txn = self._transactional()
        self._use_producer(*await txn.init())

    def begin_transaction(self) -> None:
        self._transactional().begin()

    async def _in_transaction(self, topic: str, partition: int) -> None:
        """The partition joins the open transaction before its first batch leaves (the sender
        holds its batches back until then); if it cannot, its batches fail and so does send."""
        txn = self._transactional()
        try:
            await txn.add_partition((topic, partition))
        except CLIENT_ERRORS as e:
            self._fail_queued(e, only=lambda tp: tp not in txn.added)
            raise
        finally:
            self._wake.set()

    async def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], int],
                                          group_metadata: ConsumerGroupMetadata) -> None:
        """Commit a consumer group's ``offsets`` (the next offset to read, per partition) with
        the open transaction: they count if and when it commits (consume-transform-produce).
        ``group_metadata``: the consumer's ``group_metadata()``."""
        await self._transactional().send_offsets(offsets, group_metadata)

    async def commit_transaction(self) -> None:
        """Send what is buffered, wait for every answer, then commit. A failed batch fails
        the commit with TransactionAbortableError: abort_transaction(), then go on."""
        txn = self._transactional()
        txn.begin_commit()
        await self.flush()
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Drop what was not sent yet, wait for what is in flight, then abort: read_committed
        consumers never see the transaction's records."""
        txn = self._transactional()
        txn.begin_abort()
        self._fail_queued(TransactionAbortedError("Failing batch since transaction was aborted"))
        await self.flush()
        await txn.end(commit=False)
        # a batch failed, so its partition's sequence has a hole, or the coordinator no longer
        # knew the producer: a bump, or a new producer id (KIP-360)
        if self._epoch_bump or txn.epoch_bump_required:
            self._use_producer(*await txn.init(self.producer_id, self.producer_epoch))

    def _fail_queued(self, error: BaseException, only: Callable[[tuple[str, int]], bool] | None = None) -> None:
        """Fail the batches not sent yet (of the partitions ``only`` lets through)."""
        for tp, dq in self.acc.batches.items():
            if only is not None and not only(tp):
                continue
            for b in list(dq):
                self._fail(b, error)
            dq.clear()

    def _acknowledged(self, fut: RecordFuture) -> None:
        error = fut.exception()
        metadata = (fut.result() if error is None else
                    RecordMetadata(fut.batch.topic, fut.batch.partition, -1, fut.timestamp))
        interceptors.on_acknowledgement(self.interceptors, metadata, error)

    async def _append(self, topic: str, value: Any, key: Any, partition: int | None, timestamp: int | None,
                      headers: tuple[Header, ...]) -> RecordFuture:
        cluster = self.cluster
        begin = None  # when max.block.ms started counting, if anything waits
        count = cluster.partition_count(topic)
        if count is None or (partition is not None and partition >= count):
            begin = time.monotonic()
            await cluster.wait_on_metadata(topic, partition, self.max_block_ms)
            count = cluster.partition_count(topic)
            assert count is not None
        # bytes without a serializer, and None, are what serialize() would return: not called
        k = key if key is None or (key.__class__ is bytes and self.key_serializer is None) else \
            serialize(self.key_serializer, topic, key, "key")
        v = value if value is None or (value.__class__ is bytes and self.value_serializer is None) else \
            serialize(self.value_serializer, topic, value, "value")
        size = RECORD_OVERHEAD + (len(k) if k else 0) + (len(v) if v else 0)
        for hk, hv in headers:
            size += len(hk) + (len(hv) if hv else 0)
        if size > self.max_request_size:
            raise RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than "
                                      f"{self.max_request_size}, which is the value of the max.request.size "
                                      f"configuration.")
        acc = self.acc
        if size > self.buffer_memory:
            raise RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than the total "
                                      f"memory buffer you have configured with the buffer.memory configuration.")
        if acc.used + size > self.buffer_memory:
            await acc.reserve(size, (begin or time.monotonic()) + self.max_block_ms / 1000, self.max_block_ms)
        ts = timestamp if timestamp is not None else time.time_ns() // 1_000_000
        sticky = partition is None and k is None and self.partitioner is None
        if partition is None:
            if self.partitioner is not None:
                partition = self.partitioner.partition(topic, key, k, value, v, cluster)
                if not isinstance(partition, int) or not 0 <= partition < count:
                    raise ClientError(f"Invalid partition given with record: {partition} is not in the range "
                                      f"[0...{count}].")
            elif k is not None:
                partition = partition_for_key(k, count)
            else:
                partition = self.sticky.partition(topic, count, cluster.topics[topic].available)
        fut, wake = acc.append(topic, partition, k, v, ts, headers, size, sticky)
        if fut is None:  # the sticky partition needs a new batch: move on first (KIP-480)
            partition = self.sticky.next_partition(topic, count, cluster.topics[topic].available, partition)
            fut, wake = acc.append(topic, partition, k, v, ts, headers, size, False)
            assert fut is not None
        if wake:
            self._wake.set()
            await asyncio.sleep(0)  # a batch filled up or began: let the sender run even if the caller never waits
        return fut

    async def send_and_wait(self, topic: str, value: Any, key: Any = None, **kw: Any) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kw))

    async def flush(self) -> None:
        """Send everything buffered now and wait for the answers."""
        await self._send_buffered(None)

    async def _send_buffered(self, timeout_s: float | None) -> bool:
        """Send everything buffered now; whether every answer came within ``timeout_s``."""
        self.acc.flushing += 1
        self._wake.set()
        try:
            pending = [b.future for b in list(self.acc.incomplete)]
            if not pending:
                return True
            _, late = await asyncio.wait(pending, timeout=timeout_s)  # not gather: a timeout must not cancel them
            return not late
        finally:
            self.acc.flushing -= 1

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send what is buffered and wait for the answers, for at most ``timeout_ms`` (None:
        as long as that takes, Kafka's close()); what is still unanswered then fails with
        Kafka's "Producer is closed forcefully." (close(Duration))."""
        if self._closed:
            return
        self._closed = True
        self.acc.closing = True
        if not await self._send_buffered(None if timeout_ms is None else timeout_ms / 1000):
            forced = ClientError("Producer is closed forcefully.")
            for dq in self.acc.batches.values():
                dq.clear()
            for b in list(self.acc.incomplete):
                self._fail(b, forced)
        self._stopping = True
        self._wake.set()
        if self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)
        # Every batch is done now (answered, expired or failed): what still waits, e.g. for a
        # broker that hangs, waits for nothing anyone reads.
        for task in self._requests:
            task.cancel()
        await asyncio.gather(*self._requests, return_exceptions=True)
        await asyncio.gather(*(stream.close() for stream in self._produce_streams.values()))
        for call in self._streams.values():
            try:
                await call.done_writing()
                await call
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
        await self.cluster.close()
        await self.connections.close()
        interceptors.close(self.interceptors)
        close = getattr(self.partitioner, "close", None)  # Kafka's Partitioner.close(), if it has one
        if callable(close):
            close()

    # -- the sender -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            in_flight_expired = [b for b in self._in_flight_batches if now - b.created > self.delivery_timeout_s]
            for b in self.acc.expired(now, self.delivery_timeout_s) + in_flight_expired:
                # KIP-91: a batch in flight expires too, rather than when its request times out
                self._in_flight_batches.discard(b)
                self._fail(b, KafkaTimeoutError(f"Expiring {b.record_count} record(s) for {b.topic}-{b.partition}:"
                                                f"{(now - b.created) * 1000:.0f} ms has passed since batch creation"))
            if self._stopping and not self.acc.incomplete:
                return
            if self.idempotent and self.acc.has_queued() and not await self._ready_to_number():
                continue
            nodes, next_check, unknown = self.acc.ready(self.cluster.leader_for, now)
            if unknown:
                for t in unknown:
                    self.cluster.add(t)
                self.cluster.request_update()
                next_check = min(next_check, 0.05)
            for node in nodes:
                if self._inflight.get(node, 0) >= self.max_in_flight:
                    continue
                if (held := self._throttled.get(node, 0.0) - now) > 0:  # the broker's throttle_time_ms (KIP-219)
                    next_check = min(next_check, held)
                    continue
                address = self.cluster.brokers.get(node)
                if address is None:
                    self.cluster.request_update()
                    next_check = min(next_check, 0.05)
                    continue
                parts = [tp for tp, dq in self.acc.batches.items() if dq and self.cluster.leader_for(*tp) == node]
                drained = self.acc.drain(parts, node, self.max_request_size, now)
                if self.idempotent:
                    for b in drained:
                        self._number(b)
                if drained:
                    self._in_flight_batches.update(drained)
                    self._partition_requests.update((b.topic, b.partition) for b in drained)
                    self._inflight[node] = self._inflight.get(node, 0) + 1
                    request = asyncio.get_running_loop().create_task(self._produce(node, address, drained))
                    self._requests.add(request)
                    request.add_done_callback(self._requests.discard)
            if self._stopping and not self.acc.incomplete:
                return
            if self._in_flight_batches:  # wake when the oldest batch in flight expires
                oldest = min(b.created for b in self._in_flight_batches)
                next_check = min(next_check, max(0.0, oldest + self.delivery_timeout_s - now) + 0.001)
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
        if self.transactional_id is not None:
            req.transactional_id = self.transactional_id  # the leader verifies its partitions (KIP-890)
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
            resp = await self._request(address, req)
            if resp.error_code:  # ProduceStream's answer to a request the broker could not serve at all
                for b in drained:
                    self._retry_or_fail(b, ErrorCode.of(resp.error_code), resp.error_message)
                self.cluster.request_update()
                return
            if resp.throttle_time_ms > 0:
                self.metrics["produce-throttle-time-max"] = max(self.metrics["produce-throttle-time-max"],
                                                                resp.throttle_time_ms)
                self._throttled[node] = time.monotonic() + resp.throttle_time_ms / 1000
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
        except KafkaError as e:
            for b in drained:
                self._fail(b, e)
            self.cluster.request_update()
        finally:
            self._in_flight_batches.difference_update(drained)
            self._partition_requests.subtract((b.topic, b.partition) for b in drained)
            self._inflight[node] -= 1
            self._wake.set()

    async def _request(self, address: str, req: pb.ProduceRequest) -> pb.ProduceResponse:
        """``req``'s answer, over the broker's ProduceStream (``produce_stream``), or a unary
        Produce call to a broker without it."""
        timeout_s = self.request_timeout_ms / 1000 + 5
        if address not in self._unary_only:
            stream = self._produce_streams.get(address)
            if stream is None or stream.ended:
                stream = self._produce_streams[address] = ProduceStream(self.connections.stub(address))
            try:
                return await stream.request(req, timeout_s)
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                # An older broker: nothing was served on the stream; this and later requests unary.
                log.info("broker %s has no ProduceStream: producing with unary calls", address)
                self._unary_only.add(address)
        return await self.connections.stub(address).Produce(req, timeout=timeout_s)

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
            raise KafkaError(code, message or (details or "")) from None

    # -- idempotence ------------------------------------------------------------------------------

    async def _ready_to_number(self) -> bool:
        """Whether batches can be numbered now: the producer has an id, and no epoch bump is
        due (one waits until nothing is in flight, so every answer under the old epoch is in)."""
        if self.producer_id >= 0 and not self._epoch_bump:
            return True
        if self._txn is not None:
            # A transactional producer's id and epoch come from init_transactions, and a bump
            # after a failed batch from abort_transaction: until then its batches wait.
            await self._wake_or_back_off()
            return False
        if self._epoch_bump and any(self._inflight.values()):
            self._wake.clear()
            await self._wake.wait()  # an answer arrives
            return False
        try:
            await self._init_producer_id()
            return True
        except (*CLIENT_ERRORS, grpc.aio.AioRpcError) as e:
            log.info("no producer id yet: %s", e)
            await self._wake_or_back_off()
            return False

    async def _init_producer_id(self) -> None:
        req = pb.InitProducerIdRequest()
        if self.producer_id >= 0:
            req.producer_id, req.producer_epoch = self.producer_id, self.producer_epoch
        addresses = list(self.cluster.brokers.values()) or self._bootstrap
        self._init_attempts += 1  # a broker that does not answer is not asked again next time
        address = addresses[self._init_attempts % len(addresses)]
        r = await self.connections.stub(address).InitProducerId(req, timeout=self.request_timeout_ms / 1000)
        if r.error_code:
            raise KafkaError(ErrorCode.of(r.error_code), r.error_message)
        self._use_producer(r.producer_id, r.producer_epoch)

    def _use_producer(self, producer_id: int, producer_epoch: int) -> None:
        """Number batches with this producer id and epoch from now on."""
        bumped = self.producer_id == producer_id
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._epoch_bump = False
        # Every partition starts over at sequence 0 under the new epoch; batches waiting to be
        # retried are numbered again, in their order, when next drained.
        self._next_sequence.clear()
        self._unresolved.clear()
        self._acked_next.clear()
        for dq in self.acc.batches.values():
            for b in dq:
                b.base_sequence = None
        log.info("producer id %d, epoch %d%s", self.producer_id, self.producer_epoch,
                 " (epoch bumped: sequences start over)" if bumped else "")

    def _number(self, b: ProducerBatch) -> None:
        """Give a drained batch its sequence, unless it has one (a retry keeps it)."""
        tp = (b.topic, b.partition)
        if b.base_sequence is None:
            seq = self._next_sequence.get(tp, 0)
            b.set_producer(self.producer_id, self.producer_epoch, seq, self._txn is not None)
            self._next_sequence[tp] = (seq + b.record_count) % SEQUENCE_MODULUS
        self._unresolved.setdefault(tp, set()).add(b)

    async def _wake_or_back_off(self) -> None:
        """Wait until something changes (an answer, a send) or ``retry_backoff_ms`` passes."""
        self._wake.clear()
        try:
            async with asyncio.timeout(self._retry_backoff_ms / 1000):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _may_send(self, b: ProducerBatch) -> bool:
        """Without idempotence, a batch goes only when no request for its partition is in flight:
        the broker runs concurrent gRPC calls as separate tasks, so two in flight could be appended
        in either order, and without sequences nothing would put them back (a Kafka connection
        answers its requests in order; tests/test_idempotence.py). With idempotence, a retried batch
        goes only once every earlier batch of its partition is answered; in a transaction, a batch
        waits until its partition is added."""
        if self._txn is not None and (b.topic, b.partition) not in self._txn.added:
            return False  # not in the open transaction yet
        if not self.idempotent:
            return self._partition_requests[(b.topic, b.partition)] <= 0
        if b.base_sequence is None:
            return True
        pending = self._unresolved.get((b.topic, b.partition))
        return not pending or b.base_sequence == min(x.base_sequence for x in pending if x.base_sequence is not None)

    def _resolved(self, b: ProducerBatch, failed: bool) -> None:
        tp = (b.topic, b.partition)
        pending = self._unresolved.get(tp)
        if pending is not None and b in pending:
            pending.discard(b)
            if failed:  # the sequence has a hole now: the broker would refuse what follows
                self._epoch_bump = True
            elif b.base_sequence is not None:
                self._acked_next[tp] = (b.base_sequence + b.record_count) % SEQUENCE_MODULUS

    def _earlier_unresolved(self, b: ProducerBatch) -> bool:
        pending = self._unresolved.get((b.topic, b.partition), ())
        return any(x.base_sequence is not None and b.base_sequence is not None and x.base_sequence < b.base_sequence
                   for x in pending)

    def _retry_or_fail(self, b: ProducerBatch, code: ErrorCode, message: str) -> None:
        if b.future.done():
            return  # expired in flight, or failed by a forced close: its answer comes too late
        if code in STALE_METADATA:
            self.cluster.request_update()
        retriable = code in RETRIABLE
        if self.idempotent and b.base_sequence is not None:
            in_line = self._acked_next.get((b.topic, b.partition), 0) == b.base_sequence
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (
                    self._earlier_unresolved(b) or (in_line and b.attempts <= 3)):
                # An earlier batch failed first, or reached the leader after this one: this one
                # follows it again (a batch next in line refused repeatedly means the leader lost
                # our state: then the epoch is bumped, below).
                retriable = True
            elif code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
                # The leader's state for us does not follow our numbers (it expired, or was
                # truncated away): start over under a new epoch, as Kafka's producer does.
                log.info("%s-%d: %s; bumping the producer epoch", b.topic, b.partition, code.name)
                self._epoch_bump = True
                retriable = True
            elif code == ErrorCode.INVALID_PRODUCER_EPOCH and (b.producer_epoch < self.producer_epoch
                                                                or self._epoch_bump):
                retriable = True  # sent under the epoch we have since left: numbered again
        if (retriable and b.attempts <= self.retries and not self._stopping
                and time.monotonic() - b.created < self.delivery_timeout_s):
            log.debug("retrying a batch for %s-%d (attempt %d): %s", b.topic, b.partition, b.attempts, code.name)
            self.acc.reenqueue(b)
        else:
            self._fail(b, KafkaError(code, message))

    def _complete(self, b: ProducerBatch, base_offset: int) -> None:
        if b.future.done():
            return
        self._resolved(b, failed=False)
        b.done(base_offset)
        self.acc.deallocate(b)
        self.metrics["record-send-total"] += b.record_count

    def _fail(self, b: ProducerBatch, error: BaseException) -> None:
        if b.future.done():
            return
        self._resolved(b, failed=True)
        if self._txn is not None:
            self._txn.send_failed(error)
        b.fail(error)
        self.acc.deallocate(b)
        self.metrics["record-error-total"] += b.record_count
