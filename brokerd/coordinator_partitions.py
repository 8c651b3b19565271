"""The partitions of a coordinator's internal topic (``__consumer_offsets`` for the group
coordinator, ``__transaction_state`` for the transaction coordinator) that this broker serves.
Both coordinators answer for a key only as the leader of its partition (NOT_COORDINATOR
elsewhere) and only once they have replayed that partition in the current leader epoch
(COORDINATOR_LOAD_IN_PROGRESS, retriable, while the load runs), as Kafka's do: one home for
that check, so that the two cannot drift apart."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from common.errors import ErrorCode, KafkaError

from .partition import Partition
from .replica_manager import ReplicaManager

#: A coordinator's load of one partition in one leader epoch: it sets ``loaded`` and leaves ``loading``.
Load = Callable[[Partition, int], Coroutine[Any, Any, None]]


class CoordinatorPartitions:
    """Which partitions of ``topic`` were loaded in which leader epoch, and the loads running."""

    def __init__(self, rm: ReplicaManager, topic: str, load: Load) -> None:
        self.rm = rm
        self.topic = topic
        self._load = load
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch it was loaded in
        self.loading: dict[int, asyncio.Task[None]] = {}

    def serves(self, index: int, epoch: int | None) -> bool:
        """Whether this broker still leads partition ``index`` in ``epoch`` (the one it was
        loaded in; None: not loaded)."""
        p = self.rm.by_name.get((self.topic, index))
        return p is not None and p.is_leader and p.leader_epoch == epoch

    def require(self, index: int, not_coordinator: str) -> Partition:
        """Partition ``index``, led here and loaded; otherwise NOT_COORDINATOR (with
        ``not_coordinator`` as its message), or COORDINATOR_LOAD_IN_PROGRESS after starting
        its load."""
        p = self.rm.by_name.get((self.topic, index))
        if p is None or not p.is_leader:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, not_coordinator)
        if self.loaded.get(index) != p.leader_epoch:
            if index not in self.loading:
                self.loading[index] = asyncio.get_running_loop().create_task(self._load(p, p.leader_epoch))
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return p
