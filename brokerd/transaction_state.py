"""A transaction's metadata as its coordinator keeps it (Kafka's TransactionMetadata and
TransactionState, KIP-98), and its record in ``__transaction_state``.

A transactional id maps to one producer id and epoch; its transaction moves
Empty -> Ongoing (AddPartitionsToTxn) -> PrepareCommit | PrepareAbort (EndTxn, written before
the markers) -> CompleteCommit | CompleteAbort (written once every partition has its marker)
-> Ongoing again with the next transaction. Each change is one record keyed by the
transactional id, so the partition, compacted, keeps the latest state of each, and a new
coordinator replays it to know where every transaction stood.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from protos import broker_pb2 as pb

from .group_coordinator import partition_for


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        """Markers are being written: the transaction cannot change until they are."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = 0
    start_ms: int = 0  # when the open transaction began (its timeout runs from here)
    #: The producer's epoch before the coordinator bumped it on aborting a timed-out
    #: transaction (KIP-588): that producer may still re-initialize with it.
    last_producer_epoch: int = -1

    def but(self, **changes: object) -> "TransactionMetadata":
        """A copy with ``changes`` (the coordinator writes the new state before adopting it)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) of its record in __transaction_state."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(index)
        value = pb.TransactionValue(producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                    timeout_ms=self.timeout_ms, state=self.state.value,
                                    partitions=[pb.WritableTxnMarkerTopic(name=t, partitions=ps)
                                                for t, ps in by_topic.items()],
                                    last_update_ms=self.last_update_ms, start_ms=self.start_ms,
                                    last_producer_epoch=self.last_producer_epoch)
        return self.transactional_id.encode(), value.SerializeToString()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "TransactionMetadata":
        v = pb.TransactionValue.FromString(value)
        return cls(key.decode(), v.producer_id, v.producer_epoch, v.timeout_ms, TxnState(v.state),
                   frozenset((t.name, i) for t in v.partitions for i in t.partitions), v.last_update_ms,
                   v.start_ms, v.last_producer_epoch)


def txn_partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode()) % transactionTopicPartitionCount``."""
    return partition_for(transactional_id, partitions)
