"""The transaction requests the broker core takes (Kafka's InitProducerId with a
transactional id, AddPartitionsToTxn, EndTxn and, between brokers, WriteTxnMarkers), as
``requests`` does for the data path. The WriteTxnMarkers classes have the shape of their
``protos/broker.proto`` messages (the coordinator sends them over the brokers' gRPC); the
Kafka listener decodes all of them from kio's messages."""
from __future__ import annotations

from dataclasses import dataclass, field

from .group_requests import OffsetCommitRequest


# -- the coordinator's requests (Kafka listener) -------------------------------------------------

@dataclass(slots=True)
class InitTransactionalProducerRequest:
    transactional_id: str = ""
    transaction_timeout_ms: int = 60_000
    producer_id: int = -1      # KIP-360: a returning producer's current id and epoch, else -1
    producer_epoch: int = -1


@dataclass(slots=True)
class InitTransactionalProducerResponse:
    error_code: int = 0
    error_message: str = ""
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class TxnPartitionResult:
    topic: str = ""
    partition: int = 0
    error_code: int = 0


@dataclass(slots=True)
class AddPartitionsToTxnRequest:
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    partitions: list[tuple[str, int]] = field(default_factory=list)


@dataclass(slots=True)
class AddPartitionsToTxnResponse:
    results: list[TxnPartitionResult] = field(default_factory=list)


@dataclass(slots=True)
class EndTxnRequest:
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    committed: bool = False


@dataclass(slots=True)
class EndTxnResponse:
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    group_id: str = ""


@dataclass(slots=True)
class AddOffsetsToTxnResponse:
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class TxnOffsetCommitRequest:
    """A consumer group's offsets committed as part of a transaction (to the group
    coordinator): they count once the transaction commits. The answer is OffsetCommit's."""
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    offsets: OffsetCommitRequest = field(default_factory=OffsetCommitRequest)


@dataclass(slots=True)
class ListedTransaction:
    transactional_id: str = ""
    producer_id: int = 0
    state: str = ""


@dataclass(slots=True)
class ListTransactionsRequest:
    states: list[str] = field(default_factory=list)        # none: every state
    producer_ids: list[int] = field(default_factory=list)  # none: every producer
    min_duration_ms: int = -1                              # v1: open at least this long (-1: any)


@dataclass(slots=True)
class ListTransactionsResponse:
    error_code: int = 0
    unknown_states: list[str] = field(default_factory=list)
    transactions: list[ListedTransaction] = field(default_factory=list)


@dataclass(slots=True)
class DescribedTransaction:
    transactional_id: str = ""
    error_code: int = 0
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)


# -- markers, coordinator -> partition leaders (gRPC between brokers, Kafka API 27) ---------------

@dataclass(slots=True)
class WritableTxnMarkerTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class WritableTxnMarker:
    producer_id: int = 0
    producer_epoch: int = 0
    transaction_result: bool = False  # True: commit
    topics: list[WritableTxnMarkerTopic] = field(default_factory=list)
    coordinator_epoch: int = 0


@dataclass(slots=True)
class WriteTxnMarkersRequest:
    markers: list[WritableTxnMarker] = field(default_factory=list)


@dataclass(slots=True)
class WritableTxnMarkerPartitionResult:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class WritableTxnMarkerTopicResult:
    name: str = ""
    partitions: list[WritableTxnMarkerPartitionResult] = field(default_factory=list)


@dataclass(slots=True)
class WritableTxnMarkerResult:
    producer_id: int = 0
    topics: list[WritableTxnMarkerTopicResult] = field(default_factory=list)


@dataclass(slots=True)
class WriteTxnMarkersResponse:
    markers: list[WritableTxnMarkerResult] = field(default_factory=list)


# -- KIP-890 part 1: a partition leader verifying with the coordinator (gRPC between brokers) -----

@dataclass(slots=True)
class VerifyTxnPartitionsRequest:
    transactional_id: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    topics: list[WritableTxnMarkerTopic] = field(default_factory=list)


@dataclass(slots=True)
class VerifyTxnPartitionsResponse:
    error_code: int = 0
    error_message: str = ""
    not_added: list[WritableTxnMarkerTopic] = field(default_factory=list)
