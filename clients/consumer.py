"""The consumer (asyncio), after Kafka's KafkaConsumer, without groups yet: it is assigned
partitions, fetches from their leaders below the high watermark, and resets a missing or
out-of-range position per ``auto.offset.reset``.

    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as c:
        await c.subscribe("orders")
        records = await c.poll(1000)
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import grpc

from protos import broker_pb2 as pb

from .cluster_view import ClientError, ClusterView, Connections, parse_bootstrap
from .errors import RETRIABLE, STALE_METADATA, ErrorCode
from .records import ConsumerRecord, batches, check_crc, records_of

log = logging.getLogger("clients.consumer")

EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


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
