"""The broker's log directories (``log.dirs``): one RocksDB store in each, and which directory
holds which partition. A new partition goes to the directory holding the fewest, as Kafka
places new logs."""
from __future__ import annotations

import uuid

from .log_store import FlushPolicy, LogStore
from .partition_log import PartitionLog

TopicPartitionId = tuple[uuid.UUID, int]


class LogManager:
    def __init__(self, log_dirs: tuple[str, ...], policy: FlushPolicy) -> None:
        self.stores = [LogStore(d, policy) for d in log_dirs]
        self._where: dict[TopicPartitionId, LogStore] = {}
        for s in self.stores:
            for tp in s.local_partitions():
                self._where[tp] = s

    def start(self) -> None:
        for s in self.stores:
            s.start()

    def local_partitions(self) -> list[TopicPartitionId]:
        return list(self._where)

    def open(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        tp = (topic_id, partition)
        store = self._where.get(tp)
        if store is None:
            counts = {id(s): 0 for s in self.stores}
            for s in self._where.values():
                counts[id(s)] += 1
            store = min(self.stores, key=lambda s: counts[id(s)])
            self._where[tp] = store
        return PartitionLog(store, topic_id, partition)

    def delete(self, topic_id: uuid.UUID, partition: int, log: PartitionLog | None = None) -> None:
        store = self._where.pop((topic_id, partition), None)
        if store is not None:
            (log or PartitionLog(store, topic_id, partition)).delete_all()

    async def close(self) -> None:
        for s in self.stores:
            await s.close()
