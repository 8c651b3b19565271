"""The broker's data-path requests and their answers, as the core takes and returns them:
produce, fetch, list offsets, delete records, describe producers, describe log dirs, offsets
for leader epoch, metadata and producer ids (Kafka's ProduceRequest, FetchRequest, ... as KafkaApis hands them
to the ReplicaManager).

Both front ends translate to and from these: the gRPC service with ``proto_codec`` (field names
match ``protos/broker.proto``), the Kafka listener in ``kafka/apis.py`` from kio's messages. A
field that may be absent is ``X | None`` (a protobuf ``optional``); a record batch stays the
shared record format (``RecordBatch``), which the partition log stores as is. Answers default
to zeros, as protobuf's do; the core sets what each means.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from protos.broker_pb2 import RecordBatch


@dataclass(slots=True)
class RecordError:
    """A record that failed its batch (KIP-467)."""
    batch_index: int = 0
    message: str = ""


# -- produce ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class ProducePartitionData:
    partition: int = 0
    batch: RecordBatch | None = None


@dataclass(slots=True)
class ProduceTopicData:
    name: str = ""
    partitions: list[ProducePartitionData] = field(default_factory=list)


@dataclass(slots=True)
class ProduceRequest:
    acks: int = 0
    timeout_ms: int = 0
    topics: list[ProduceTopicData] = field(default_factory=list)
    transactional_id: str | None = None  # a transactional producer's: its partitions are verified (KIP-890)


@dataclass(slots=True)
class ProducePartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    base_offset: int = 0
    log_append_time: int = 0
    log_start_offset: int = 0
    record_errors: list[RecordError] = field(default_factory=list)


@dataclass(slots=True)
class ProduceTopicResponse:
    name: str = ""
    partitions: list[ProducePartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ProduceResponse:
    topics: list[ProduceTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0  # set at the request boundary by the client quotas (brokerd/quotas.py)


# -- fetch -----------------------------------------------------------------------------------------

@dataclass(slots=True)
class FetchPartition:
    partition: int = 0
    current_leader_epoch: int | None = None  # None: not checked
    fetch_offset: int = 0
    log_start_offset: int = -1
    partition_max_bytes: int = 0  # 0: max.partition.fetch.bytes's default


@dataclass(slots=True)
class FetchTopic:
    name: str = ""
    topic_id: bytes = b""  # followers name topics by id, consumers by name
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(slots=True)
class FetchRequest:
    replica_id: int = -1  # -1: a consumer; a follower's broker id otherwise
    max_wait_ms: int = 0
    min_bytes: int = 0
    max_bytes: int = 0  # 0: fetch.max.bytes's default
    topics: list[FetchTopic] = field(default_factory=list)
    replica_epoch: int = -1
    isolation_level: int = 0  # 1: read_committed, up to the last stable offset
    rack_id: str | None = None  # a consumer's client.rack (Fetch v11+); None: only the leader serves it
    client_id: str = ""  # whose consumer_byte_rate quota applies


@dataclass(slots=True)
class AbortedTransaction:
    producer_id: int = 0
    first_offset: int = 0


@dataclass(slots=True)
class FetchPartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    high_watermark: int = 0
    log_start_offset: int = 0
    # The stored batches as the log read them, each a view of its RocksDB value: the Kafka
    # listener writes them to the socket as they are; gRPC's answer places them once in the bytes
    # it sends (``records``, protos/broker.proto's field: ``grpc_fetch_answer``), so the generic
    # proto codec leaves this field out.
    frames: list[memoryview] = field(default_factory=list, metadata={"wire": False})
    leader_id: int = 0
    leader_epoch: int = 0
    last_stable_offset: int = 0
    aborted_transactions: list[AbortedTransaction] = field(default_factory=list)
    preferred_read_replica: int = -1  # KIP-392: the broker to read from instead; -1: this one

    @property
    def records(self) -> bytes:
        """The stored batches back to back (a RecordBatchSet), as gRPC's FetchResponse has them."""
        return b"".join(self.frames)

    @property
    def records_size(self) -> int:
        """The bytes of stored batches answered."""
        return sum(map(len, self.frames))


@dataclass(slots=True)
class FetchTopicResponse:
    name: str = ""
    topic_id: bytes = b""
    partitions: list[FetchPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class FetchResponse:
    topics: list[FetchTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0  # set at the request boundary by the client quotas (brokerd/quotas.py)


# -- list offsets ----------------------------------------------------------------------------------

@dataclass(slots=True)
class ListOffsetsPartition:
    partition: int = 0
    current_leader_epoch: int | None = None
    timestamp: int = 0  # -2: earliest, -1: latest, else a time in ms


@dataclass(slots=True)
class ListOffsetsTopic:
    name: str = ""
    partitions: list[ListOffsetsPartition] = field(default_factory=list)


@dataclass(slots=True)
class ListOffsetsRequest:
    topics: list[ListOffsetsTopic] = field(default_factory=list)
    isolation_level: int = 0  # 1: read_committed, whose latest offset is the last stable offset


@dataclass(slots=True)
class ListOffsetsPartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    timestamp: int = 0
    offset: int = 0
    leader_epoch: int = 0


@dataclass(slots=True)
class ListOffsetsTopicResponse:
    name: str = ""
    partitions: list[ListOffsetsPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ListOffsetsResponse:
    topics: list[ListOffsetsTopicResponse] = field(default_factory=list)


# -- delete records (Kafka's DeleteRecords, API 21) ---------------------------------------------------

@dataclass(slots=True)
class DeleteRecordsPartition:
    partition: int = 0
    offset: int = 0  # the new log start offset; -1: the high watermark


@dataclass(slots=True)
class DeleteRecordsTopic:
    name: str = ""
    partitions: list[DeleteRecordsPartition] = field(default_factory=list)


@dataclass(slots=True)
class DeleteRecordsRequest:
    topics: list[DeleteRecordsTopic] = field(default_factory=list)
    timeout_ms: int = 0


@dataclass(slots=True)
class DeleteRecordsPartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    low_watermark: int = 0  # the log start offset after the deletion; -1 on an error


@dataclass(slots=True)
class DeleteRecordsTopicResponse:
    name: str = ""
    partitions: list[DeleteRecordsPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class DeleteRecordsResponse:
    topics: list[DeleteRecordsTopicResponse] = field(default_factory=list)


# -- describe producers (Kafka's DescribeProducers, API 61) --------------------------------------------

@dataclass(slots=True)
class DescribeProducersTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DescribeProducersRequest:
    topics: list[DescribeProducersTopic] = field(default_factory=list)


@dataclass(slots=True)
class ProducerStateView:
    """One producer as a partition's leader knows it."""
    producer_id: int = 0
    producer_epoch: int = 0
    last_sequence: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # not kept here: always -1
    current_txn_start_offset: int = -1  # -1: no transaction open in this partition


@dataclass(slots=True)
class DescribeProducersPartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    active_producers: list[ProducerStateView] = field(default_factory=list)


@dataclass(slots=True)
class DescribeProducersTopicResponse:
    name: str = ""
    partitions: list[DescribeProducersPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class DescribeProducersResponse:
    topics: list[DescribeProducersTopicResponse] = field(default_factory=list)


# -- describe log dirs (Kafka's DescribeLogDirs, API 35) ----------------------------------------------

@dataclass(slots=True)
class DescribeLogDirsTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class DescribeLogDirsRequest:
    topics: list[DescribeLogDirsTopic] | None = None  # None: every partition


@dataclass(slots=True)
class LogDirPartition:
    partition: int = 0
    size_bytes: int = 0
    offset_lag: int = 0  # Kafka's: how far the log end is below the high watermark
    is_future: bool = False  # a future log (AlterReplicaLogDirs): offset_lag is then how far it is behind the current one


@dataclass(slots=True)
class LogDirTopic:
    name: str = ""
    partitions: list[LogDirPartition] = field(default_factory=list)


@dataclass(slots=True)
class LogDir:
    log_dir: str = ""
    error_code: int = 0
    topics: list[LogDirTopic] = field(default_factory=list)
    total_bytes: int = -1  # of the file system holding it
    usable_bytes: int = -1


@dataclass(slots=True)
class DescribeLogDirsResponse:
    error_code: int = 0
    error_message: str = ""
    log_dirs: list[LogDir] = field(default_factory=list)


# -- alter replica log dirs (Kafka's AlterReplicaLogDirs, API 34) -----------------------------------------

@dataclass(slots=True)
class AlterReplicaLogDirsTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class AlterReplicaLogDir:
    path: str = ""  # the absolute path of one of the broker's log.dirs
    topics: list[AlterReplicaLogDirsTopic] = field(default_factory=list)


@dataclass(slots=True)
class AlterReplicaLogDirsRequest:
    dirs: list[AlterReplicaLogDir] = field(default_factory=list)


@dataclass(slots=True)
class AlterReplicaLogDirsPartitionResult:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class AlterReplicaLogDirsTopicResult:
    name: str = ""
    partitions: list[AlterReplicaLogDirsPartitionResult] = field(default_factory=list)


@dataclass(slots=True)
class AlterReplicaLogDirsResponse:
    topics: list[AlterReplicaLogDirsTopicResult] = field(default_factory=list)


# -- offsets for leader epoch (KIP-101/279/320) -----------------------------------------------------

@dataclass(slots=True)
class OffsetForLeaderPartition:
    partition: int = 0
    current_leader_epoch: int | None = None
    leader_epoch: int = 0


@dataclass(slots=True)
class OffsetForLeaderTopic:
    name: str = ""
    topic_id: bytes = b""
    partitions: list[OffsetForLeaderPartition] = field(default_factory=list)


@dataclass(slots=True)
class OffsetsForLeaderEpochRequest:
    replica_id: int = -1
    topics: list[OffsetForLeaderTopic] = field(default_factory=list)


@dataclass(slots=True)
class EpochEndOffset:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""
    leader_epoch: int = 0
    end_offset: int = 0


@dataclass(slots=True)
class OffsetForLeaderTopicResult:
    name: str = ""
    topic_id: bytes = b""
    partitions: list[EpochEndOffset] = field(default_factory=list)


@dataclass(slots=True)
class OffsetsForLeaderEpochResponse:
    topics: list[OffsetForLeaderTopicResult] = field(default_factory=list)


# -- metadata --------------------------------------------------------------------------------------

@dataclass(slots=True)
class MetadataRequest:
    topics: list[str] = field(default_factory=list)  # empty: every topic
    allow_auto_topic_creation: bool = False


@dataclass(slots=True)
class BrokerEndpoint:
    node_id: int = 0
    host: str = ""
    port: int = 0
    rack: str = ""


@dataclass(slots=True)
class PartitionMetadata:
    error_code: int = 0
    partition: int = 0
    leader: int = 0
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicMetadata:
    error_code: int = 0
    error_message: str = ""
    name: str = ""
    topic_id: bytes = b""
    partitions: list[PartitionMetadata] = field(default_factory=list)


@dataclass(slots=True)
class MetadataResponse:
    cluster_id: str = ""
    controller_id: int = 0
    brokers: list[BrokerEndpoint] = field(default_factory=list)
    topics: list[TopicMetadata] = field(default_factory=list)
    metadata_offset: int = 0


# -- producer ids ----------------------------------------------------------------------------------

@dataclass(slots=True)
class InitProducerIdRequest:
    producer_id: int | None = None  # a returning producer's id, to bump its epoch
    producer_epoch: int = 0


@dataclass(slots=True)
class InitProducerIdResponse:
    error_code: int = 0
    error_message: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
