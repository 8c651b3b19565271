"""The replicas this broker hosts, driven by metadata deltas (Kafka's ReplicaManager with its
KRaft metadata publisher).

Every image the metadata fetcher applies comes here with what changed: a partition assigned to
this broker gets a local log and becomes leader or follower as the controller says; one that
moved away or whose topic was deleted stops being served and its data is deleted; topic and
broker config changes update the log settings. Produce and fetch look partitions up here.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING
from collections.abc import Callable, Iterable, Iterator

from metadata.delta import MetadataChanges, changes_between
from metadata.image import MetadataImage, ResourceType, TopicImage

from .config import BrokerConfig, LogConfig
from common.errors import ErrorCode, KafkaError
from .isr import IsrManager
from .log_manager import LogManager
from .log_cleaner import clean
from .log_dir_moves import IO_RATE, LogDirMoves
from .partition import Change, Partition
from .topic_stats import BrokerTopicStats
from .replica_fetcher import ReplicaFetcherManager
from .replication_quota import FOLLOWER_RATE, LEADER_RATE, ReplicationQuota, throttled_rate

if TYPE_CHECKING:
    from .transaction_verification import TransactionVerifier

log = logging.getLogger("brokerd.replicas")


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: LogManager, fetchers: ReplicaFetcherManager,
                 fenced: Callable[[], bool]) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.logs = logs
        self.moves = LogDirMoves(logs)  # replicas moving between log.dirs (AlterReplicaLogDirs)
        self.fetchers = fetchers
        self.fenced = fenced
        self.isr: IsrManager | None = None
        #: Verifies a transactional producer's first batch in a partition with its coordinator
        #: (KIP-890; set by the server: ``transaction_verification.TransactionVerifier``).
        self.txn_verifier: TransactionVerifier | None = None
        self.topic_stats = BrokerTopicStats()
        self.image = MetadataImage.empty()
        self.partitions: dict[tuple[uuid.UUID, int], Partition] = {}
        self.by_name: dict[tuple[str, int], Partition] = {}
        self._tasks: list[asyncio.Task] = []
        self.leader_quota = ReplicationQuota()  # leader.replication.throttled.rate (fetch.py)

    # -- metadata -------------------------------------------------------------------------------

    def apply(self, image: MetadataImage, changes: MetadataChanges | None) -> None:
        """Act on a new metadata image (``changes`` None: compare with the last one, e.g. after
        a snapshot was loaded)."""
        old, self.image = self.image, image
        if changes is None:
            changes = changes_between(old, image)
        for tid in changes.topics_removed:
            for key, gone in list(self.partitions.items()):
                if key[0] == tid:
                    self._remove(gone, "its topic was deleted")
        if any(r.type == ResourceType.BROKER for r in changes.configs_changed):
            self._reconfigure(p for p in self.partitions.values())
            self.leader_quota.set_rate(throttled_rate(image, self.broker_id, LEADER_RATE))
            self.fetchers.set_rate(throttled_rate(image, self.broker_id, FOLLOWER_RATE))
            self.moves.quota.set_rate(throttled_rate(image, self.broker_id, IO_RATE))
        else:
            names = {r.name for r in changes.configs_changed if r.type == ResourceType.TOPIC}
            if names:
                self._reconfigure(p for p in self.partitions.values() if p.topic in names)
        for tp in changes.partitions_changed:
            topic = image.topics_by_id.get(tp.topic_id)
            reg = topic.partitions.get(tp.partition) if topic is not None else None
            p = self.partitions.get((tp.topic_id, tp.partition))
            if reg is None:
                continue
            if self.broker_id not in reg.replicas:
                if p is not None:
                    self._remove(p, "this broker is no longer one of its replicas")
                continue
            if p is None:
                assert topic is not None
                p = self._create(topic, tp.partition)
            self._act(p, p.update(reg))
        for bid in changes.brokers_changed:
            self._leader_moved(bid)

    def _create(self, topic: TopicImage, index: int) -> Partition:
        plog = self.logs.open(topic.id, index)
        p = Partition(self.broker_id, topic.name, topic.id, index, plog, self.config.log_config(self.image, topic.name))
        self.partitions[(topic.id, index)] = p
        self.by_name[(topic.name, index)] = p
        self.moves.resume(p)
        return p

    def _act(self, p: Partition, change: Change) -> None:
        if change == Change.BECAME_LEADER:
            self.fetchers.unfollow(p)
            log.info("%s: leader at epoch %d (log end %d, high watermark %d, ISR %s)", p.name, p.leader_epoch,
                     p.log.log_end_offset, p.log.high_watermark, list(p.isr))
        elif change == Change.BECAME_FOLLOWER:
            source = self.replica_source(p.leader)
            if source is None:
                self.fetchers.unfollow(p)
                log.info("%s: no leader (epoch %d)", p.name, p.leader_epoch)
            else:
                self.fetchers.follow(p, p.leader, *source)
                log.info("%s: following broker %d at epoch %d (log end %d) over %s at %s", p.name, p.leader,
                         p.leader_epoch, p.log.log_end_offset, "Kafka's protocol" if source[1] else "gRPC", source[0])

    def _leader_moved(self, broker_id: int) -> None:
        """A broker re-registered, maybe at another address: follow it there."""
        source = self.replica_source(broker_id)
        for p in self.partitions.values():
            key = self.fetchers.source(p)
            if p.leader == broker_id and not p.is_leader and source is not None and key != (broker_id, source[0]):
                self.fetchers.follow(p, broker_id, *source)

    def _remove(self, p: Partition, why: str) -> None:
        self.fetchers.unfollow(p)
        self.moves.cancel(p)
        p.stop()
        self.partitions.pop((p.topic_id, p.index), None)
        if self.by_name.get((p.topic, p.index)) is p:
            del self.by_name[(p.topic, p.index)]
        self.logs.delete(p.topic_id, p.index, p.log)
        log.info("%s: stopped and deleted: %s", p.name, why)

    def _reconfigure(self, partitions: Iterable[Partition]) -> None:
        cache: dict[str, LogConfig] = {}
        for p in partitions:
            cfg = cache.get(p.topic)
            if cfg is None:
                cfg = cache[p.topic] = self.config.log_config(self.image, p.topic)
            p.config = cfg

    def delete_stray_logs(self) -> None:
        """Logs on disk for partitions this broker does not host (deleted or moved while it was
        down) go, as Kafka deletes stray logs at startup."""
        for tid, index in self.logs.local_partitions():
            if (tid, index) not in self.partitions:
                self.logs.delete(tid, index)
                log.info("deleted the stray log of partition %d of topic id %s", index, tid)

    def address_of(self, broker_id: int, listener: str | None = None) -> str | None:
        """``broker_id``'s address on ``listener`` (the inter-broker gRPC listener by default)."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return None
        for e in b.endpoints:
            if e.name == (listener or self.config.listener):
                return f"{e.host}:{e.port}"
        return None

    def replica_source(self, broker_id: int) -> tuple[str, bool] | None:
        """Where this broker fetches from ``broker_id`` as its follower, and whether over Kafka's
        protocol: its Kafka listener of ``replica_listener``'s name (replica.fetch.protocol=kafka)
        when it has one, else its gRPC inter-broker listener (a leader configured otherwise)."""
        if self.config.replica_listener is not None:
            address = self.address_of(broker_id, self.config.replica_listener)
            if address is not None:
                return address, True
        address = self.address_of(broker_id)
        return None if address is None else (address, False)

    # -- lookups --------------------------------------------------------------------------------

    def leaders(self) -> Iterator[Partition]:
        return (p for p in self.partitions.values() if p.is_leader)

    def partition(self, topic: str, index: int, topic_id: bytes = b"") -> Partition:
        """The local replica, or UNKNOWN_TOPIC_OR_PARTITION (no such partition) /
        NOT_LEADER_OR_FOLLOWER (it exists, but not here)."""
        if topic_id:
            try:
                tid = uuid.UUID(bytes=topic_id)
            except ValueError:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "the topic id is a 16-byte UUID") from None
            p = self.partitions.get((tid, index))
            if p is not None:
                return p
            t = self.image.topics_by_id.get(tid)
            if t is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"This server does not host topic id {tid}.")
        else:
            p = self.by_name.get((topic, index))
            if p is not None:
                return p
            t = self.image.topics_by_name.get(topic)
        if t is None or index not in t.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"This server does not host this topic-partition: {topic}-{index}.")
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                          f"Broker {self.broker_id} is not a replica of {t.name}-{index}")

    def alive(self, broker_id: int) -> bool:
        """Registered and not fenced, as this broker's metadata says (Kafka's hasAliveBroker)."""
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced

    def leader(self, topic: str, index: int, current_leader_epoch: int | None = None) -> Partition:
        p = self.partition(topic, index)
        p.check_leader(current_leader_epoch)
        if self.fenced():
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"Broker {self.broker_id} is fenced and does not lead {p.name}")
        return p

    def follower_fetched(self, p: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        st = p.update_follower(replica, fetch_offset, log_start_offset)
        if st is not None and self.isr is not None and replica not in p.maximal_isr:
            self.isr.maybe_expand(p, replica)

    # -- upkeep ---------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(self.config.hw_checkpoint_interval_ms, self.checkpoint)),
                       loop.create_task(self._every(self.config.retention_check_interval_ms, self.enforce_retention)),
                       loop.create_task(self._every(self.config.producer_id_expiration_check_interval_ms,
                                                    self.expire_producers))]
        if self.config.log_cleaner_enable:
            self._tasks.append(loop.create_task(self._clean_logs()))

    async def _every(self, period_ms: int, work: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            try:
                work()
            except Exception as e:
                log.error("%s failed: %s", getattr(work, "__name__", work), e)

    def checkpoint(self) -> None:
        """Persist high watermarks (Kafka's replication-offset-checkpoint)."""
        for p in self.partitions.values():
            p.log.checkpoint()

    def enforce_retention(self) -> None:
        """Delete batches past retention.ms / retention.bytes, oldest first, with range deletes;
        each partition's values read once (``PartitionLog.retention_cut``)."""
        now = int(time.time() * 1000)
        for p in list(self.partitions.values()):
            cfg = p.config
            if not cfg.delete or (cfg.retention_ms < 0 and cfg.retention_bytes < 0):
                continue
            cut = p.log.retention_cut(now, cfg.retention_ms, cfg.retention_bytes)
            if cut.start > p.log.log_start_offset:
                before = p.log.log_start_offset
                freed = p.log.apply_retention(cut)  # from what the scan read: no second read
                log.info("%s: retention moved the log start from %d to %d (%d bytes freed)",
                         p.name, before, p.log.log_start_offset, freed)

    async def _clean_logs(self) -> None:
        """Compact the logs of topics whose cleanup.policy includes compact, one partition at
        a time, every ``log.cleaner.backoff.ms`` (Kafka's cleaner thread)."""
        while True:
            await asyncio.sleep(self.config.log_cleaner_backoff_ms / 1000)
            for p in [p for p in self.partitions.values() if p.config.compact and not p.stopped]:
                try:
                    result = await clean(p.log, p.config, int(time.time() * 1000))
                except Exception as e:
                    log.error("%s: compaction failed: %s", p.name, e)
                    continue
                if result is not None and result.records_removed:
                    log.info("%s: compacted up to offset %d: %d records removed, %d batches rewritten and %d "
                             "removed, %d bytes freed", p.name, result.cleaned_to, result.records_removed,
                             result.batches_rewritten, result.batches_removed, result.bytes_freed)

    def expire_producers(self) -> None:
        """Forget idempotent producers silent for ``producer.id.expiration.ms`` (Kafka's
        ``producer.id.expiration.check.interval.ms`` schedule)."""
        now = int(time.time() * 1000)
        for p in list(self.partitions.values()):
            gone = p.log.expire_producers(now, self.config.producer_id_expiration_ms)
            if gone:
                log.info("%s: producer ids %s expired", p.name, gone)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.moves.stop()
        for p in self.partitions.values():
            p.stop()
        self.checkpoint()
