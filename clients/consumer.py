"""The consumer (asyncio), after Kafka's KafkaConsumer: it fetches from the leaders of its
partitions (or, with ``client_rack``, from the follower in its rack a leader names, KIP-392)
below the high watermark, and starts each partition at the group's committed offset, else per
``auto.offset.reset``.

    async with Consumer("127.0.0.1:9092", group_id="billing", auto_offset_reset="earliest") as c:
        await c.subscribe(["orders"])           # group management: the coordinator assigns
        records = await c.poll(1000)             # commits every auto.commit.interval.ms

With a ``group_id``, ``subscribe`` puts the consumer in a consumer group
(``consumer_coordinator``): the group's members share the partitions, rebalance when one
joins, leaves or dies, and commit offsets to the group's coordinator, so a restarted member
resumes where the group left off (at least once: what was consumed but not yet committed is
read again). Without one, ``subscribe`` assigns every partition of the topics, and ``assign``
always assigns exactly the partitions given (commits then need a ``group_id`` and no
``subscribe``, as Kafka's "simple" consumer).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from protos import broker_pb2 as pb

from common.tls import TLSConfig

from .cluster_view import CLIENT_ERRORS, ClientError, ClusterView, Connections, parse_bootstrap
from common.errors import ErrorCode, KafkaError, RETRIABLE, STALE_METADATA
from .consumer_coordinator import ConsumerCoordinator, ConsumerGroupMetadata
from . import interceptors
from .interceptors import ConsumerInterceptor
from .records import ConsumerRecord, batches, check_crc, is_control, is_transactional, records_of
from .topics import INTERNAL_TOPICS
from .serialization import Deserializer, RecordDeserializationError, checked

log = logging.getLogger("clients.consumer")

EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


class Consumer:
    def __init__(self, bootstrap_servers: str | list[str], *, auto_offset_reset: str = "latest",
                 fetch_min_bytes: int = 1, fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, max_poll_records: int = 500,
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000, check_crcs: bool = True,
                 retry_backoff_ms: int = 100, group_id: str | None = None, client_id: str = "",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, partition_assignment_strategy: str | list[str] = "range",
                 group_instance_id: str | None = None, tls: TLSConfig | None = None,
                 key_deserializer: Deserializer | None = None, value_deserializer: Deserializer | None = None,
                 interceptors: Sequence[ConsumerInterceptor] = (), allow_auto_create_topics: bool = True,
                 isolation_level: str = "read_uncommitted", client_rack: str | None = None) -> None:
        """``tls``: TLS to the brokers (``clients.security.client_tls`` reads Kafka's keys).
        ``client_rack``: Kafka's ``client.rack``; a leader with a rack-aware replica selector
        then sends the consumer to an in-sync replica in that rack (KIP-392).
        ``isolation_level``: Kafka's ``isolation.level``; ``read_committed`` reads up to the last
        stable offset and drops the records of aborted transactions.
        ``key_deserializer``/``value_deserializer`` (``clients.serialization``) and
        ``interceptors`` (``clients.interceptors``) are Kafka's extension points;
        ``allow_auto_create_topics``: Kafka's ``allow.auto.create.topics`` (default true)."""
        self.tls = tls
        self.key_deserializer = checked(key_deserializer, "key.deserializer")
        self.value_deserializer = checked(value_deserializer, "value.deserializer")
        self.interceptors = list(interceptors)
        self.allow_auto_create_topics = allow_auto_create_topics
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ClientError(f"Invalid value {auto_offset_reset} for configuration auto.offset.reset: String must "
                              f"be one of: latest, earliest, none")
        self.auto_offset_reset = auto_offset_reset
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ClientError(f"Invalid value {isolation_level} for configuration isolation.level: String must be "
                              f"one of: read_committed, read_uncommitted")
        self.read_committed = isolation_level == "read_committed"
        self.client_rack = client_rack
        #: KIP-392: the follower each partition is read from, as its leader said; dropped on
        #: any error there, so the next fetch goes to the leader again.
        self._read_replica: dict[TopicPartition, int] = {}
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
        self._error: Exception | None = None
        self._rotation = -1
        self.group_id = group_id
        self.client_id = client_id
        self.throttle_time_ms = 0  # the last throttle a broker asked for (consumer_byte_rate)
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_s = auto_commit_interval_ms / 1000
        self._group_settings = dict(
            client_id=client_id, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=max_poll_interval_ms,
            heartbeat_interval_ms=heartbeat_interval_ms, instance_id=group_instance_id,
            strategies=[partition_assignment_strategy] if isinstance(partition_assignment_strategy, str)
            else list(partition_assignment_strategy),
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self.group: ConsumerCoordinator | None = None
        self._subscription: list[str] = []  # topics under group management
        self._pattern: re.Pattern[str] | None = None  # subscribe(pattern=...)
        #: Partition counts of the topics the last assignment was computed over (by this
        #: member, and by the leader for the whole group): a change means rejoining.
        self._joined_counts: dict[str, int] = {}
        self._on_assigned: Callable[[list[TopicPartition]], Any] | None = None
        self._on_revoked: Callable[[list[TopicPartition]], Any] | None = None
        self._paused: set[TopicPartition] = set()
        self._next_auto_commit = 0.0
        self._committing: asyncio.Task | None = None
        self._closed = False
        self._last_commit: asyncio.Task | None = None  # the newest commit, which the next one waits for

    async def start(self) -> "Consumer":
        self.connections = Connections(self.tls)
        self.cluster = ClusterView(self._bootstrap, self.connections, max_age_ms=self._metadata_max_age_ms,
                                   request_timeout_ms=self.request_timeout_ms,
                                   allow_auto_topic_creation=self.allow_auto_create_topics)
        self.cluster.start()
        if self.group_id is not None:
            self.group = ConsumerCoordinator(self.group_id, self.cluster, self.connections,
                                             **self._group_settings)  # type: ignore[arg-type]
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_ms: int = 30000) -> None:
        """Commit what was consumed (with auto commit) and leave the group, for at most
        ``timeout_ms`` (Kafka's close(Duration), 30 s by default), then close; closing again
        does nothing."""
        if self._closed:
            return
        self._closed = True
        if self.group is not None:
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    try:
                        if self.enable_auto_commit:
                            await self.commit()
                    except CLIENT_ERRORS as e:
                        log.info("group %s: the final commit failed: %s", self.group_id, e)
                    if self._managed:
                        await self.group.leave()
            except TimeoutError:
                log.info("group %s: committing and leaving took longer than the close timeout (%d ms)",
                         self.group_id, timeout_ms)
            self.group.stop_heartbeats()
        interceptors.close(self.interceptors)
        for t in self._inflight.values():
            t.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        await self.cluster.close()
        await self.connections.close()

    # -- assignment and positions -----------------------------------------------------------------

    @property
    def _managed(self) -> bool:
        """Subscribed under group management (topics or a pattern), rather than assigned."""
        return self.group is not None and (bool(self._subscription) or self._pattern is not None)

    async def subscribe(self, topics: str | list[str] | None = None, timeout_ms: int = 60000, *,
                        pattern: str | re.Pattern[str] | None = None,
                        on_assigned: Callable[[list[TopicPartition]], Any] | None = None,
                        on_revoked: Callable[[list[TopicPartition]], Any] | None = None) -> list[TopicPartition]:
        """With a group id: join the group for ``topics``, or for every topic whose whole name
        matches ``pattern`` (internal topics aside), now and as topics are created; partitions
        arrive with the next ``poll`` (``on_assigned``/``on_revoked`` are Kafka's
        ConsumerRebalanceListener, plain or async functions). Without one: assign every
        partition of ``topics``. No topics (``subscribe([])``) is ``unsubscribe()``, as in Kafka."""
        names = [topics] if isinstance(topics, str) else list(topics or [])
        if any(not isinstance(t, str) or not t.strip() for t in names):
            raise ClientError("Topic collection to subscribe to cannot contain null or empty topic")
        if pattern is not None and names:
            raise ClientError("Subscription to topics and to a pattern are mutually exclusive")
        if pattern is None and not names:
            await self.unsubscribe()
            return []
        if self.group is not None:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.cluster.all_topics = self._pattern is not None
            self._subscription = self._matching() if self._pattern is not None else names
            for topic in self._subscription:
                self.cluster.add(topic)
            self.cluster.request_update()
            self._on_assigned, self._on_revoked = on_assigned, on_revoked
            self.group.rejoin_needed = True
            return []
        if pattern is not None:
            raise ClientError("To use the group management or offset commit APIs, you must provide a valid "
                              "group.id in the consumer configuration.")
        tps = []
        for topic in names:
            await self.cluster.wait_on_metadata(topic, None, timeout_ms)
            tps += [(topic, p) for p in range(self.cluster.partition_count(topic) or 0)]
        await self.assign(tps)
        return tps

    async def unsubscribe(self) -> None:
        """Give every partition up (committing first, with auto commit, and calling
        ``on_revoked``), and leave the group."""
        if self._managed:
            assert self.group is not None
            await self._revoke_all("unsubscribing")
            await self.group.leave()
        self._subscription, self._pattern, self._joined_counts = [], None, {}
        self.cluster.all_topics = False
        self.positions, self._buffer, self._next_fetch, self._reset = {}, {}, {}, {}
        self._paused = set()

    def _matching(self) -> list[str]:
        """The topics the pattern subscription covers now."""
        assert self._pattern is not None
        return sorted(t for t, info in self.cluster.topics.items()
                      if t not in INTERNAL_TOPICS and info.error == ErrorCode.NONE and self._pattern.fullmatch(t))

    def _check_metadata(self) -> None:
        """Kafka's metadata-change rebalance: rejoin when a topic matching the pattern appears
        (or goes), or a topic the last assignment was computed over has a different number of
        partitions now (it gained some, or it was created)."""
        group = self.group
        if group is None or not self._managed or group.rejoin_needed:
            return
        if self._pattern is not None:
            matching = self._matching()
            if matching != self._subscription:
                log.info("group %s: the topics matching %s are now %s", self.group_id, self._pattern.pattern, matching)
                self._subscription = matching
                group.rejoin_needed = True
                return
        for topic, count in self._joined_counts.items():
            now = self.cluster.partition_count(topic)
            if now is not None and now != count:
                log.info("group %s: topic %s has %d partitions now, not %d: rejoining", self.group_id, topic, now,
                         count)
                group.rejoin_needed = True
                return

    async def assign(self, tps: list[TopicPartition], timeout_ms: int = 60000) -> None:
        """Exactly these partitions, without group management; with a group id each starts at
        the group's committed offset. Waits up to ``timeout_ms`` for their metadata."""
        for topic, p in tps:
            self.cluster.add(topic)
            await self.cluster.wait_on_metadata(topic, p, timeout_ms)
        await self._set_assignment(tps)

    async def _set_assignment(self, tps: list[TopicPartition]) -> None:
        new = [tp for tp in tps if tp not in self.positions]
        self.positions = {tp: self.positions.get(tp) for tp in tps}
        self._buffer = {tp: q for tp, q in self._buffer.items() if tp in self.positions}
        self._paused &= set(tps)
        if self.group is not None and new:
            committed = await self.group.committed(new)
            for tp, offset in committed.items():
                self.positions[tp] = offset

    async def _wait_topics(self, topics: list[str]) -> dict[str, int]:
        """The leader's partition counts for the assignor (a topic that does not exist yet is
        left out, and watched for its creation)."""
        counts = {}
        for topic in topics:
            self.cluster.add(topic)
            self._joined_counts[topic] = 0
            try:
                await self.cluster.wait_on_metadata(topic, None, 10000)
            except KafkaError as e:
                if e.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise  # Kafka's consumer throws TopicAuthorizationException from poll
                continue
            except CLIENT_ERRORS:
                continue  # a topic that does not exist yet: no partitions for now
            counts[topic] = self._joined_counts[topic] = self.cluster.partition_count(topic) or 0
        return counts

    async def _revoke_all(self, why: str) -> list[TopicPartition]:
        """Before giving the partitions up: commit their positions (auto commit), then tell
        the application."""
        revoked = list(self.positions)
        if revoked:
            if self.enable_auto_commit:
                try:
                    await self.commit()
                except CLIENT_ERRORS as e:
                    log.info("group %s: commit before %s failed: %s", self.group_id, why, e)
            await _call_back(self._on_revoked, revoked)
        return revoked

    async def _ensure_group(self) -> None:
        """Carry out a rebalance the coordinator (or a metadata change) asked for (Kafka does
        it inside poll)."""
        group = self.group
        self._check_metadata()
        if group is None or not self._managed or not group.rejoin_needed:
            return
        revoked = await self._revoke_all("rebalancing")
        if self._pattern is not None:  # join with the topics matching now, not at the last refresh
            try:
                await self.cluster.await_update(self.cluster.request_update(), self.request_timeout_ms / 1000)
            except asyncio.TimeoutError:
                pass
            self._subscription = self._matching()
        self._joined_counts = {}
        assigned = await group.join(self._subscription, revoked, self._wait_topics)
        for topic in self._subscription:  # a member that is not the leader watches its own topics
            count = self.cluster.partition_count(topic)
            if count is not None:
                self._joined_counts.setdefault(topic, count)
        self.positions = {}
        self._buffer, self._next_fetch, self._reset = {}, {}, {}
        await self._set_assignment(assigned)
        await _call_back(self._on_assigned, assigned)

    # -- committing -------------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, int]:
        return {tp: pos for tp, pos in self.positions.items() if pos is not None}

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the next offset to read per partition; default: the positions
        of every assigned partition, what ``poll`` returned and where the others were reset
        to) and wait for the coordinator's answer. CommitFailedError if the group rebalanced
        meanwhile."""
        await self._commit_in_turn(self._offsets_to_commit(offsets))

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None) -> asyncio.Task:
        """Commit without waiting; the task's result or exception says how it went. The
        offsets are taken now, and commits go out one at a time in the order they were asked
        for, so an earlier one (retried while the coordinator moved) never lands after, and
        overwrites, a later one."""
        task = self._commit_in_turn(self._offsets_to_commit(offsets))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    def _offsets_to_commit(self, offsets: dict[TopicPartition, int] | None) -> dict[TopicPartition, int]:
        if self.group is None:
            raise ClientError("Cannot commit offsets without a group.id")
        return self._consumed() if offsets is None else dict(offsets)

    def _commit_in_turn(self, offsets: dict[TopicPartition, int]) -> asyncio.Task:
        """A task that sends the commit once the one asked for before it is answered."""
        task = asyncio.get_running_loop().create_task(self._commit_after(self._last_commit, offsets))
        self._last_commit = task
        return task

    async def _commit_after(self, earlier: asyncio.Task | None, offsets: dict[TopicPartition, int]) -> None:
        assert self.group is not None
        if earlier is not None:
            await asyncio.wait([earlier])
            del earlier  # no chain of finished commits kept alive
        await self.group.commit(offsets, managed=self._managed)
        if self.interceptors and offsets:
            interceptors.on_commit(self.interceptors, offsets)

    async def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition, None if none."""
        if self.group is None:
            raise ClientError("Cannot fetch committed offsets without a group.id")
        return (await self.group.committed([(topic, partition)])).get((topic, partition))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Who this consumer is in its group now, for a transactional producer's
        ``send_offsets_to_transaction`` (Kafka's groupMetadata())."""
        if self.group is None:
            raise ClientError("Cannot get group metadata without a group.id")
        managed = self._managed
        return ConsumerGroupMetadata(self.group.group_id, self.group.generation if managed else -1,
                                     self.group.member_id if managed else "",
                                     self.group.instance_id if managed else None)

    def pause(self, *tps: TopicPartition) -> None:
        """Stop fetching these partitions (their position stays) until ``resume``."""
        self._paused |= {tp for tp in tps if tp in self.positions}

    def resume(self, *tps: TopicPartition) -> None:
        self._paused -= set(tps)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

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
            req = pb.ListOffsetsRequest(isolation_level=int(self.read_committed))
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
        if self.group is not None:
            self.group.last_poll = time.monotonic()
        await self._ensure_group()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.auto_commit_s
            if self._committing is None or self._committing.done():
                self._committing = self.commit_async()
        while True:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self.cluster.fatal_error is not None:
                raise self.cluster.fatal_error
            if any(pos is None for pos in self.positions.values()):
                await self._resolve_positions()
            records = self._drain()
            self._send_fetches()
            if records:
                return interceptors.on_consume(self.interceptors, records) if self.interceptors else records
            if self._error is not None:
                continue  # a record that does not deserialize: raised at once
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
            if pos is None or tp in self._paused:
                continue
            while q and q[0].offset < pos:  # already consumed (a fetch started inside a batch)
                q.popleft()
            take = min(len(q), self.max_poll_records - len(out))
            if take == len(q) and take:
                chunk = list(q)
                q.clear()
            else:
                chunk = [q.popleft() for _ in range(take)]
            if chunk and (self.key_deserializer or self.value_deserializer):
                chunk = self._deserialized(chunk, q)
            if chunk:
                out.extend(chunk)
                pos = self.positions[tp] = chunk[-1].offset + 1
            skipped_to = self._next_fetch.get(tp)
            if not q and skipped_to is not None and skipped_to > pos:
                # what the fetches skipped (transaction markers, aborted transactions) is consumed
                # too: the position moves past it, as Kafka's consumer's does
                self.positions[tp] = skipped_to
            if len(out) >= self.max_poll_records or self._error is not None:
                break
        return out

    def _deserialized(self, chunk: list[ConsumerRecord], q: deque[ConsumerRecord]) -> list[ConsumerRecord]:
        """The chunk's records with their keys and values deserialized, up to the first that
        fails: that one and the rest go back to the buffer, the position stays at it, and
        poll raises (Kafka's RecordDeserializationException) until the application seeks past."""
        out = []
        for i, r in enumerate(chunk):
            part = "key"
            try:
                key = self.key_deserializer(r.topic, r.key) if self.key_deserializer else r.key
                part = "value"
                value = self.value_deserializer(r.topic, r.value) if self.value_deserializer else r.value
            except Exception as e:
                q.extendleft(reversed(chunk[i:]))
                self._error = RecordDeserializationError(part, r.topic, r.partition, r.offset, e)
                break
            out.append(r._replace(key=key, value=value))
        return out

    def _send_fetches(self) -> None:
        by_node: dict[int, list[TopicPartition]] = {}
        for tp, pos in self.positions.items():
            if pos is None or tp in self._paused or len(self._buffer.get(tp, ())) >= self.max_poll_records:
                continue
            leader = self.cluster.leader_for(*tp)
            if leader is None or leader not in self.cluster.brokers:
                self.cluster.request_update()
                continue
            node = self._read_replica.get(tp, leader)
            if node not in self.cluster.brokers:
                self._read_replica.pop(tp, None)
                node = leader
            if node not in self._inflight:
                by_node.setdefault(node, []).append(tp)
        for node, tps in by_node.items():
            self._inflight[node] = asyncio.get_running_loop().create_task(self._fetch(node, tps))

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                              max_bytes=self.fetch_max_bytes, isolation_level=int(self.read_committed),
                              client_id=self.client_id)
        if self.client_rack is not None:
            req.rack_id = self.client_rack
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
            if resp.throttle_time_ms > 0:  # over a consumer_byte_rate quota: this broker is asked again after it
                self.throttle_time_ms = resp.throttle_time_ms
                await asyncio.sleep(resp.throttle_time_ms / 1000)
        except (grpc.aio.AioRpcError, KeyError) as e:
            log.debug("fetch from broker %d failed: %s", node, e)
            for tp in tps:
                self._read_replica.pop(tp, None)
            self.cluster.request_update()
            await asyncio.sleep(self.retry_backoff_s)
        except CLIENT_ERRORS as e:
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
                if tp in self._read_replica and code != ErrorCode.NONE:
                    del self._read_replica[tp]  # a follower's error: ask the leader (KIP-392)
                    continue
                if code == ErrorCode.NONE and self.client_rack is not None and a.preferred_read_replica >= 0:
                    self._read_replica[tp] = a.preferred_read_replica
                elif code == ErrorCode.NONE:
                    q = self._buffer.setdefault(tp, deque())
                    next_offset = offset
                    # read_committed: up to the last stable offset, without aborted transactions
                    hw = a.last_stable_offset if self.read_committed else a.high_watermark
                    aborted = sorted((x.first_offset, x.producer_id) for x in a.aborted_transactions)
                    aborting: set[int] = set()  # producers whose aborted transaction is being read
                    for b in batches(a.records):
                        if self.check_crcs:
                            try:
                                check_crc(b)
                            except Exception as e:
                                raise ClientError(f"Record batch for partition {tp[0]}-{tp[1]} at offset "
                                                  f"{b.base_offset} is invalid, cause: {e}") from None
                        end = b.base_offset + b.last_offset_delta + 1
                        if self.read_committed:
                            while aborted and aborted[0][0] < end:
                                aborting.add(aborted.pop(0)[1])
                            if is_transactional(b) and b.producer_id in aborting:
                                if is_control(b):
                                    aborting.discard(b.producer_id)  # the abort marker: its transaction ends
                                next_offset = max(next_offset, min(end, hw))
                                continue
                        q.extend(self._buffered(b, tp, offset, hw))
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

    def _buffered(self, batch: pb.RecordBatch, tp: TopicPartition, start: int, stop: int) -> Iterable[Any]:
        """What the buffer holds of a fetched batch: its records from ``start`` (a fetch may
        begin inside a batch) and below ``stop`` (the high watermark or last stable offset). A
        reader that decodes batches itself (the Spark source's, clients/spark/columns.py)
        buffers something else that has an ``offset``: the last one it covers."""
        # never served above ``stop``, but a consumer must not trust that
        return records_of(batch, tp[0], tp[1], start, stop)


async def _call_back(fn: Callable[[list[TopicPartition]], Any] | None, tps: list[TopicPartition]) -> None:
    """A rebalance listener, plain or async; its failure is logged, not raised (as in Kafka)."""
    if fn is None:
        return
    try:
        result = fn(tps)
        if inspect.isawaitable(result):
            await result
    except Exception as e:
        log.error("rebalance listener %s failed: %s", getattr(fn, "__name__", fn), e)
