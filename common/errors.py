"""Kafka's error codes (``org.apache.kafka.common.protocol.Errors``) and the one exception that
carries one: every part answers with them, controller, brokers and clients alike, so a client
that knows Kafka reads them the same way. Messages are Kafka's where Kafka has one, and always
one line. (Kafka keeps these in its clients' ``common`` package too; here they are the floor's,
so the configuration table's errors and the Raft library's callers share them.)
"""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    RECORD_TOO_LARGE = 10  # Kafka's MESSAGE_TOO_LARGE, raised as RecordTooLargeException
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34  # a SASL request on a listener that is not SASL
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86  # OffsetDelete of a topic the group's members consume
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91  # KIP-554: a SCRAM credential that does not exist
    DUPLICATE_RESOURCE = 92  # KIP-554: one user altered twice in one request
    UNACCEPTABLE_CREDENTIAL = 93  # KIP-554: an empty user, iterations out of range
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    DUPLICATE_VOTER = 126  # KIP-853: AddRaftVoter for a node id that is already a voter
    VOTER_NOT_FOUND = 127  # KIP-853: RemoveRaftVoter for a (node id, directory id) that is no voter

    @classmethod
    def of(cls, value: int) -> "ErrorCode":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


#: Kafka's default message for each code, used when there is nothing more specific to say.
DEFAULT_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.OFFSET_OUT_OF_RANGE: "The requested offset is not within the range of offsets maintained by the server.",
    ErrorCode.CORRUPT_MESSAGE: "This message has failed its CRC checksum, exceeds the valid size, has a null key "
                               "for a compacted topic, or is otherwise corrupt.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the "
                                      "broker is not the current leader.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.NETWORK_EXCEPTION: "The server disconnected before a response was received.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "The group member's supported protocols are incompatible with those of "
                                           "existing members or first group member tried to join with empty "
                                           "protocol type or empty protocol list.",
    ErrorCode.INVALID_GROUP_ID: "The configured groupId is invalid.",
    ErrorCode.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    ErrorCode.INVALID_SESSION_TIMEOUT: "The session timeout is not within the range allowed by the broker (as "
                                       "configured by group.min.session.timeout.ms and "
                                       "group.max.session.timeout.ms).",
    ErrorCode.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "The committing offset data size is not valid.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.SECURITY_DISABLED: "Security features are disabled.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "The consumer group is actively subscribed to the topic",
    ErrorCode.FENCED_INSTANCE_ID: "The broker rejected this static consumer since another consumer with the same "
                                  "group.instance.id has registered with a different member.id.",
    ErrorCode.RECORD_TOO_LARGE: "The request included a message larger than the max message size the server "
                                "will accept.",
    ErrorCode.NOT_ENOUGH_REPLICAS: "Messages are rejected since there are fewer in-sync replicas than required.",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Messages are written to the log, but to fewer in-sync replicas "
                                                "than required.",
    ErrorCode.INVALID_REQUIRED_ACKS: "Produce request specified an invalid value for required acks.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker.",
    ErrorCode.KAFKA_STORAGE_ERROR: "Disk error when trying to access log file on the disk.",
    ErrorCode.LOG_DIR_NOT_FOUND: "The user-specified log directory is not found in the broker config.",
    ErrorCode.REPLICA_NOT_AVAILABLE: "The replica is not available for the requested topic-partition.",
    ErrorCode.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the epoch on the broker.",
    ErrorCode.INVALID_RECORD: "This record has failed the validation on broker and hence will be rejected.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.OFFSET_NOT_AVAILABLE: "The leader high watermark has not caught up from a recent leader election so the "
                                    "offsets cannot be guaranteed to be monotonically increasing.",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "The broker received an out of order sequence number.",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "The broker received a duplicate sequence number.",
    ErrorCode.INVALID_PRODUCER_EPOCH: "Producer attempted to produce with an old epoch.",
    ErrorCode.INVALID_TXN_STATE: "The producer attempted a transactional operation in an invalid state.",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "The producer attempted to use a producer id which is not currently "
                                           "assigned to its transactional id.",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "The transaction timeout is larger than the maximum value allowed by "
                                           "the broker (as configured by transaction.max.timeout.ms).",
    ErrorCode.CONCURRENT_TRANSACTIONS: "The producer attempted to update a transaction while another concurrent "
                                       "operation on the same transaction was ongoing.",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "Indicates that the transaction coordinator sending a "
                                              "WriteTxnMarker is no longer the current coordinator for a given "
                                              "producer.",
    ErrorCode.OPERATION_NOT_ATTEMPTED: "The broker did not attempt to execute this operation. This may happen "
                                       "for batched RPCs where some operations in the batch failed, causing the "
                                       "broker to respond without trying the rest.",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "There are unstable offsets that need to be cleared.",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "The transactionalId could not be found.",
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is invalid.",
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session encountered inconsistent topic ID usage.",
    ErrorCode.PRODUCER_FENCED: "There is a newer producer with the same transactionalId which fences the "
                               "current one.",
    ErrorCode.UNKNOWN_PRODUCER_ID: "This exception is raised by the broker if it could not locate the producer "
                                   "metadata associated with the producerId in question.",
}

#: Kafka's RetriableException codes: the same request may succeed if sent again (a producer
#: sends the same batch again, a client asks again after refreshing what it knows).
RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR, ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.NOT_CONTROLLER,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.REPLICA_NOT_AVAILABLE,
})

#: Errors that mean "your metadata is stale: refresh it before trying again".
STALE_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.NETWORK_EXCEPTION,
})


#: The longest message an answer carries. A message may echo a name from the request (a topic,
#: a group), which can be as long as the request: an 8 MiB topic name was answered with 16 MiB.
MAX_MESSAGE_CHARS = 1000


def capped(message: str) -> str:
    """``message``, or for a longer one its start and its end (where the reason usually is)
    around a note of how many characters were left out."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = (MAX_MESSAGE_CHARS - 40) // 2
    return f"{message[:keep]}...({len(message) - 2 * keep} characters left out)...{message[-keep:]}"


class KafkaError(Exception):
    """Kafka's ApiException: a request failed with ``code``, the error a response carries, and
    ``message``, one line of at most MAX_MESSAGE_CHARS whatever names it echoes (None: Kafka's
    default message for the code). The controller's rules, the brokers and the clients raise
    it; ``retriable`` is Kafka's RetriableException."""

    def __init__(self, code: ErrorCode, message: str | None = None,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        """``record_errors``: (index in the batch, message) of the records that failed a produce
        (Kafka's per-record errors, KIP-467)."""
        self.code = code
        self.message = capped(DEFAULT_MESSAGES.get(code, code.name) if message is None else message)
        self.record_errors = tuple((i, capped(m)) for i, m in record_errors)
        super().__init__(f"{code.name}: {self.message}" if self.message else code.name)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE
