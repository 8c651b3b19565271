"""Followers copy their leaders' logs (Kafka's ReplicaFetcherThread): one fetcher per leader
broker long-polls Fetch with this broker's id as the replica id, for every partition it follows
there, and appends what comes back with the leader's offsets and epochs.

Before fetching under a new leader epoch a follower truncates the suffix of its log the leader
does not have (KIP-101/279): it asks the leader with OffsetsForLeaderEpoch where its own latest
epoch ends in the leader's log and truncates there. That is what keeps every acknowledged
write (acks=all: on every ISR member, so on any new leader) and drops only writes that were
never committed, which a stale high watermark could not tell apart.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from rocksdict import WriteBatch

from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from common.channels import dial

from .config import BrokerConfig
from common.errors import ErrorCode, KafkaError
from .fetch_session import FetchSessionHandler
from .kafka.batches import FetchedBatch
from .kafka.replica_client import (FetchPartitionFields, FetchRequestFields, FetchTopicFields, ForgottenTopicFields,
                                   KafkaLeaderClient, LeaderUnreachable, PartitionAnswer)
from .leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from .log_store import LogStore, StorageFailure
from .partition import Partition
from .partition_log import AppendInfo
from .replication_quota import ReplicationQuota
from clients.records import batches, check_crc, frames

log = logging.getLogger("brokerd.replica")

GRPC_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
#: A fetcher that cannot reach its leader says so once per this many seconds, not once per retry
#: (every replica.fetch.backoff.ms) nor once per flap of a connection that comes and goes.
UNREACHABLE_LOG_INTERVAL_S = 300.0


@dataclass(slots=True)
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    #: (topic id, index): how the fetch session names the partition, made once
    key: tuple[bytes, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.partition.topic_id.bytes, self.partition.index)


class ReplicaFetcher:
    def __init__(self, config: BrokerConfig, leader_id: int, address: str, broker_epoch: Callable[[], int],
                 on_fatal: Callable[[BaseException], None], quota: ReplicationQuota | None = None,
                 kafka: bool = False) -> None:
        """``kafka``: ``address`` is the leader's Kafka listener (replica.fetch.protocol=kafka),
        else its broker gRPC service."""
        self.config = config
        self.quota = quota or ReplicationQuota()  # follower.replication.throttled.rate (none: unthrottled)
        self.leader_id = leader_id
        self.address = address
        self.broker_epoch = broker_epoch
        self.on_fatal = on_fatal
        #: the leader's Fetch and OffsetsForLeaderEpoch, over either protocol, in the gRPC service's messages
        self.stub: broker_pb2_grpc.BrokerStub | KafkaLeaderClient
        self.channel: grpc.aio.Channel | None = None
        if kafka:
            self.stub = KafkaLeaderClient(address, config.replica_tls, config.node_id)
        else:
            self.channel = dial(address, config.inter_broker_tls, GRPC_OPTIONS)
            self.stub = broker_pb2_grpc.BrokerStub(self.channel)
        self.states: dict[Partition, FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        #: When "cannot fetch from broker N" was last logged (UNREACHABLE_LOG_INTERVAL_S apart)
        self._warned_at: float | None = None
        #: The listener dialled, and the key naming it, for the operator reading that line
        self._listener = (config.replica_listener, "replica.fetch.listener.name") if kafka \
            else (config.listener, "inter.broker.listener.name")
        #: The fetch session with the leader (KIP-227), partitions named (topic id, index).
        self.session: FetchSessionHandler[tuple[bytes, int]] = FetchSessionHandler()
        self._max_wait = datetime.timedelta(milliseconds=config.replica_fetch_wait_max_ms)  # Fetch's max_wait

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.channel is not None:
            await self.channel.close()
        elif isinstance(self.stub, KafkaLeaderClient):
            await self.stub.close()

    def add(self, p: Partition) -> None:
        self.states[p] = FetchState(p, p.leader_epoch)
        self._wake.set()

    def remove(self, p: Partition) -> None:
        self.states.pop(p, None)

    def rethrottled(self) -> None:
        """The throttle's rate changed: a replica held back for what the old rate allowed is
        fetched again now (Kafka applies a new throttle at the next fetch)."""
        now = time.monotonic()
        for s in self.states.values():
            if s.partition.being_added:
                s.delayed_until = min(s.delayed_until, now)
        self._wake.set()

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.config.replica_fetch_backoff_ms / 1000
        while True:
            try:
                now = time.monotonic()
                truncating = [s for s in self.states.values() if s.truncating and s.delayed_until <= now]
                if truncating:
                    await self._truncate(truncating)
                ready = [s for s in self.states.values() if not s.truncating and s.delayed_until <= now]
                wait = self.quota.wait_seconds()
                if wait > 0:  # follower.replication.throttled.rate: moving replicas sit this one out
                    for s in ready:
                        if s.partition.being_added:
                            s.delayed_until = now + wait
                    ready = [s for s in ready if not s.partition.being_added]
                if ready:
                    await self._fetch(ready)
                    continue
                delays = [s.delayed_until - now for s in self.states.values()]
                self._wake.clear()
                try:  # asyncio.timeout, not wait_for: see raft/transport.py (a cancel must not be lost)
                    async with asyncio.timeout(max(0.01, min(delays)) if delays else None):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except (grpc.aio.AioRpcError, LeaderUnreachable) as e:
                if isinstance(e, LeaderUnreachable) and e.dropped:  # stopping or restarting: not a wrong address
                    log.info("broker %d at %s closed the replication connection; fetching again", self.leader_id,
                             self.address)
                else:
                    self._unreachable(e.details() or e.code().name if isinstance(e, grpc.aio.AioRpcError) else str(e))
                await asyncio.sleep(min(backoff, 0.5))
            except StorageFailure as e:
                self.on_fatal(e)
                return
            except KafkaError as e:  # a corrupt batch from the leader: say so, try again later
                log.error("replica fetcher for broker %d: %s", self.leader_id, e)
                await asyncio.sleep(backoff)
            except Exception as e:  # a bug: keep the broker up and say so
                log.exception("replica fetcher for broker %d: %s", self.leader_id, e)
                await asyncio.sleep(backoff)

    def _unreachable(self, why: str) -> None:
        """One line, rate-limited, naming the address and the key behind it: a leader advertising
        an address this broker cannot reach stalls replication, and the operator must see why."""
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < UNREACHABLE_LOG_INTERVAL_S:
            return
        self._warned_at = now
        listener, key = self._listener
        log.warning("cannot fetch from broker %d at %s, its %s listener as advertised: %s; its partitions' "
                    "replicas here stall until this broker reaches it (every broker must: advertise an address "
                    "they all reach, or name such a listener with %s); logged at most every %.0f s",
                    self.leader_id, self.address, listener, why, key, UNREACHABLE_LOG_INTERVAL_S)

    def _delay(self, s: FetchState) -> None:
        s.delayed_until = time.monotonic() + self.config.replica_fetch_backoff_ms / 1000

    def _current(self, s: FetchState) -> bool:
        return self.states.get(s.partition) is s and s.partition.leader_epoch == s.leader_epoch

    # -- truncation ---------------------------------------------------------------------------

    async def _truncate(self, states: list[FetchState]) -> None:
        topics: dict[uuid.UUID, pb.OffsetForLeaderTopic] = {}
        for s in states:
            p = s.partition
            t = topics.get(p.topic_id)
            if t is None:
                t = topics[p.topic_id] = pb.OffsetForLeaderTopic(name=p.topic, topic_id=p.topic_id.bytes)
            t.partitions.add(partition=p.index, current_leader_epoch=s.leader_epoch,
                             leader_epoch=p.log.epochs.latest_epoch)
        resp = await self.stub.OffsetsForLeaderEpoch(
            pb.OffsetsForLeaderEpochRequest(replica_id=self.config.node_id, topics=topics.values()), timeout=10)
        by_key = {(s.partition.topic_id, s.partition.index): s for s in states}
        for t in resp.topics:
            tid = uuid.UUID(bytes=t.topic_id)
            for r in t.partitions:
                state = by_key.get((tid, r.partition))
                if state is None or not self._current(state):
                    continue
                if r.error_code != ErrorCode.NONE:
                    log.info("%s: OffsetsForLeaderEpoch from broker %d: %s", state.partition.name, self.leader_id,
                             ErrorCode.of(r.error_code).name)
                    self._delay(state)
                    continue
                await self._truncate_one(state, r.leader_epoch, r.end_offset)

    async def _truncate_one(self, s: FetchState, leader_epoch: int, leader_end: int) -> None:
        p = s.partition
        plog = p.log
        if leader_epoch == UNDEFINED_EPOCH or leader_end == UNDEFINED_OFFSET:
            target, done = plog.high_watermark, True  # the leader knows nothing of our epochs (Kafka's fallback)
        else:
            ours, our_end = plog.end_offset_for_epoch(leader_epoch)
            if ours != leader_epoch:
                # We do not have the epoch the leader answered with: cut back to where our
                # nearest older epoch ends and ask again.
                target, done = min(leader_end, our_end if our_end >= 0 else plog.high_watermark), False
            else:
                target, done = min(leader_end, plog.log_end_offset), True
        if target < plog.log_end_offset:
            before = plog.log_end_offset
            await plog.truncate_to(target)
            log.info("%s: truncated from offset %d to %d (leader %d, epoch %d ends at %d in its log)",
                     p.name, before, plog.log_end_offset, self.leader_id, leader_epoch, leader_end)
        if done or not plog.epochs.entries:
            s.truncating = False

    # -- fetching -----------------------------------------------------------------------------

    async def _fetch(self, states: list[FetchState]) -> None:
        """One Fetch for ``states``, in the fetch session with the leader (KIP-227): after the
        first, a request carries only the partitions whose fetch offset (or epoch, or log
        start) moved, and the answer only those with news, so a follower of many quiet
        partitions costs both brokers little per fetch."""
        wanted: dict[tuple[bytes, int], tuple[int, ...]] = {}
        sent: dict[tuple[bytes, int], tuple[FetchState, int]] = {}
        for s in states:
            plog = s.partition.log
            offset = plog.log_end_offset
            wanted[s.key] = (offset, s.leader_epoch, plog.log_start_offset)
            sent[s.key] = (s, offset)
        send, forget = self.session.build(wanted)
        try:
            if isinstance(self.stub, KafkaLeaderClient):
                error, session_id, answers = await self.stub.fetch_partitions(
                    self._kafka_request(self.stub, send, forget, sent), self._fetch_timeout)
            else:
                error, session_id, answers = await self._grpc_fetch(send, forget, sent)
        except BaseException:
            self.session.reset()  # answered or not, the leader's session may have moved on: start over
            raise
        if error:  # the session was evicted, or the leader restarted: a full fetch next
            log.debug("fetch session %d with broker %d: %s; starting a new one", self.session.session_id,
                      self.leader_id, ErrorCode.of(error).name)
            self.session.reset()
            if error not in _SESSION_ERRORS:  # the leader's Fetch failed (its handler answered
                for s in states:              # UNKNOWN_SERVER_ERROR): not again before the backoff
                    self._delay(s)
            return
        self.session.answered(session_id)
        fetched: list[tuple[FetchState, PartitionAnswer, list[FetchedBatch]]] = []
        for a in answers:
            entry = sent.get((a.topic_id, a.partition))
            if entry is None or not self._current(entry[0]):
                continue
            s, offset = entry
            got = a.batches
            if s.partition.being_added:
                self.quota.record(len(a.records) if got is None else sum(len(p) for _, ps in got for p in ps))
            if s.truncating or s.partition.log.log_end_offset != offset:
                continue  # truncated meanwhile
            if a.error_code == ErrorCode.NONE:
                # every batch read and checked before any is staged: a corrupt one changes nothing
                fetched.append((s, a, got if got is not None else _stored_batches(a.records)))
            else:
                await self._failed(s, offset, a)
        await self._append(fetched)

    @property
    def _fetch_timeout(self) -> float:
        return self.config.replica_fetch_wait_max_ms / 1000 + 10

    def _kafka_request(self, client: KafkaLeaderClient, send: list[tuple[bytes, int]], forget: list[tuple[bytes, int]],
                       sent: dict[tuple[bytes, int], tuple[FetchState, int]]) -> FetchRequestFields:
        """The Kafka Fetch of the partitions to ``send`` and ``forget``, made at once: no
        protobuf request to convert (the gRPC path's ``pb.FetchRequest``)."""
        cfg = self.config
        topics: dict[bytes, FetchTopicFields] = {}
        for key in send:
            s, offset = sent[key]
            p = s.partition
            t = topics.get(key[0])
            if t is None:
                t = topics[key[0]] = FetchTopicFields(p.topic, [], key[0])
            t.partitions.append(FetchPartitionFields(p.index, s.leader_epoch, offset, p.log.log_start_offset,
                                                     cfg.replica_fetch_max_bytes))
        forgotten: dict[bytes, ForgottenTopicFields] = {}
        for topic_id, index in forget:
            f = forgotten.get(topic_id)
            if f is None:
                f = forgotten[topic_id] = ForgottenTopicFields(client.topic_name(topic_id), [])
            f.partitions.append(index)
        return FetchRequestFields(cfg.node_id, self._max_wait, cfg.replica_fetch_min_bytes, cfg.replica_fetch_response_max_bytes,
                                  self.session.session_id, self.session.epoch, list(topics.values()),
                                  list(forgotten.values()))

    async def _grpc_fetch(self, send: list[tuple[bytes, int]], forget: list[tuple[bytes, int]],
                          sent: dict[tuple[bytes, int], tuple[FetchState, int]]) -> tuple[int, int, list[PartitionAnswer]]:
        """The same Fetch over the broker gRPC service (replica.fetch.protocol=grpc)."""
        cfg = self.config
        topics: dict[bytes, pb.FetchTopic] = {}
        for key in send:
            s, offset = sent[key]
            p = s.partition
            t = topics.get(key[0])
            if t is None:
                t = topics[key[0]] = pb.FetchTopic(name=p.topic, topic_id=key[0])
            t.partitions.add(partition=p.index, current_leader_epoch=s.leader_epoch, fetch_offset=offset,
                             log_start_offset=p.log.log_start_offset, partition_max_bytes=cfg.replica_fetch_max_bytes)
        forgotten: dict[bytes, pb.ForgottenTopic] = {}
        for topic_id, index in forget:
            forgotten.setdefault(topic_id, pb.ForgottenTopic(topic_id=topic_id)).partitions.append(index)
        req = pb.FetchRequest(replica_id=cfg.node_id, replica_epoch=self.broker_epoch(),
                              max_wait_ms=cfg.replica_fetch_wait_max_ms, min_bytes=cfg.replica_fetch_min_bytes,
                              max_bytes=cfg.replica_fetch_response_max_bytes, topics=topics.values(),
                              session_id=self.session.session_id, session_epoch=self.session.epoch,
                              forgotten_topics=forgotten.values())
        assert not isinstance(self.stub, KafkaLeaderClient)
        resp = await self.stub.Fetch(req, timeout=self._fetch_timeout)
        return resp.error_code, resp.session_id, [
            PartitionAnswer(t.topic_id, r.partition, r.error_code, r.high_watermark, r.log_start_offset,
                            r.error_message, None, r.records) for t in resp.topics for r in t.partitions]

    async def _append(self, fetched: list[tuple[FetchState, PartitionAnswer, list[FetchedBatch]]]) -> None:
        """Append what a fetch answered: one write per log directory for all its partitions,
        each batch stored as the leader's frame; then the high watermarks the leader sent."""
        writes: dict[LogStore, tuple[WriteBatch, list[int]]] = {}
        done: list[tuple[FetchState, PartitionAnswer, AppendInfo | None]] = []
        for s, r, got in fetched:
            info = None
            if got:
                plog = s.partition.log
                wb, records = writes.get(plog.store) or writes.setdefault(plog.store, (WriteBatch(raw_mode=True), []))
                try:
                    info = plog.stage_as_follower(wb, [b for b, _ in got], [parts for _, parts in got])
                except ValueError as e:
                    log.warning("%s: %s; truncating against the leader again", s.partition.name, e)
                    s.truncating = True
                    continue
                except KafkaError as e:  # a corrupt marker: nothing of it staged, the others are
                    log.error("%s: from broker %d: %s; fetching it again later", s.partition.name, self.leader_id, e)
                    self._delay(s)
                    continue
                if info is not None:
                    records.append(info.records)
            done.append((s, r, info))
        for store, (wb, records) in writes.items():
            if not records:
                continue  # every batch was one the log already had
            pending = store.write(wb, sum(records))
            if pending is not None:
                await pending
        for s, r, info in done:
            p = s.partition
            plog = p.log
            if info is not None:
                plog.appended(info)
            # the high watermark first, as Kafka's ReplicaFetcherThread.processPartitionData: a log
            # start moves at most to it, and in a fetch session the leader tells a new log start once
            plog.set_high_watermark(min(r.high_watermark, plog.log_end_offset))
            if r.log_start_offset > plog.log_start_offset:
                plog.delete_before(min(r.log_start_offset, r.high_watermark))
            p.notify()

    async def _failed(self, s: FetchState, offset: int, r: PartitionAnswer) -> None:
        p = s.partition
        code = ErrorCode.of(r.error_code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if offset < r.log_start_offset:
                log.info("%s: offset %d is below the leader's log start %d; starting over there",
                         p.name, offset, r.log_start_offset)
                await p.log.truncate_fully_and_start_at(r.log_start_offset)
            else:
                s.truncating = True
        elif code == ErrorCode.CORRUPT_MESSAGE:
            raise KafkaError(code, r.error_message or None)
        else:
            log.debug("%s: fetch from broker %d: %s: %s", p.name, self.leader_id, code.name, r.error_message)
            self._delay(s)


#: A Fetch's top-level errors that end its fetch session alone: the next fetch, a full one, goes at once.
_SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})


def _stored_batches(data: bytes) -> list[FetchedBatch]:
    """A gRPC fetch answer's stored frames (a RecordBatchSet), each batch decoded and its CRC
    checked, with its frame as it came; KafkaError (CORRUPT_MESSAGE) for any that is not."""
    got = batches(data)
    for b in got:
        check_crc(b)
    return [(b, (f,)) for b, f in zip(got, frames(data), strict=True)]


class ReplicaFetcherManager:
    """Which fetcher follows which partition: one fetcher per (leader, address)."""

    def __init__(self, config: BrokerConfig, broker_epoch: Callable[[], int],
                 on_fatal: Callable[[BaseException], None]) -> None:
        self.config = config
        self.broker_epoch = broker_epoch
        self.on_fatal = on_fatal
        self.fetchers: dict[tuple[int, str], ReplicaFetcher] = {}
        self._following: dict[Partition, tuple[int, str]] = {}
        self.quota = ReplicationQuota()  # follower.replication.throttled.rate, set by the ReplicaManager

    def follow(self, p: Partition, leader_id: int, address: str, kafka: bool = False) -> None:
        """(Re)start fetching ``p`` from its leader, truncating first; ``kafka``: ``address`` is
        the leader's Kafka listener."""
        self.unfollow(p)
        key = (leader_id, address)
        f = self.fetchers.get(key)
        if f is None:
            f = self.fetchers[key] = ReplicaFetcher(self.config, leader_id, address, self.broker_epoch, self.on_fatal,
                                                          self.quota, kafka)
            f.start()
        f.add(p)
        self._following[p] = key

    def set_rate(self, rate: int) -> None:
        """follower.replication.throttled.rate in force now."""
        if rate != self.quota.rate:
            self.quota.set_rate(rate)
            for f in self.fetchers.values():
                f.rethrottled()

    def source(self, p: Partition) -> tuple[int, str] | None:
        """The (leader, address) ``p`` is fetched from."""
        return self._following.get(p)

    def unfollow(self, p: Partition) -> None:
        key = self._following.pop(p, None)
        if key is not None and key in self.fetchers:
            self.fetchers[key].remove(p)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._following.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
