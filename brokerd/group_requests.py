"""The group coordinator's requests and their answers (Kafka's FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups and OffsetDelete), as the coordinator takes and returns them; the two front ends translate, as for
``requests``. Answers default to zeros, as protobuf's do; the coordinator sets what it means.
"""
from __future__ import annotations

from dataclasses import dataclass, field


COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1  # FindCoordinator's key types (Kafka's CoordinatorType)


@dataclass(slots=True)
class FindCoordinatorRequest:
    key: str = ""  # the group id, or the transactional id
    key_type: int = 0  # 0: a group, 1: a transactional id (Kafka's CoordinatorType)


@dataclass(slots=True)
class FindCoordinatorResponse:
    error_code: int = 0
    error_message: str = ""
    node_id: int = 0
    host: str = ""
    port: int = 0


# -- membership ------------------------------------------------------------------------------------

@dataclass(slots=True)
class JoinGroupProtocol:
    name: str = ""  # an assignor: range, roundrobin, sticky
    metadata: bytes = b""  # the member's subscription


@dataclass(slots=True)
class JoinGroupRequest:
    group_id: str = ""
    session_timeout_ms: int = 0
    rebalance_timeout_ms: int = 0
    member_id: str = ""  # empty on a member's first join
    group_instance_id: str | None = None  # static membership
    protocol_type: str = ""
    protocols: list[JoinGroupProtocol] = field(default_factory=list)
    client_id: str = ""
    client_host: str = ""  # the broker's to say: "/" and the client's address
    reason: str | None = None  # v8+ (KIP-800): why the client joins, logged
    skip_assignment_supported: bool = False  # v9+ (KIP-814)


@dataclass(slots=True)
class JoinGroupMember:
    member_id: str = ""
    group_instance_id: str | None = None
    metadata: bytes = b""


@dataclass(slots=True)
class JoinGroupResponse:
    error_code: int = 0
    error_message: str = ""
    generation_id: int = 0
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)  # for the leader only
    skip_assignment: bool = False  # KIP-814: a restarted static leader leads but must not assign


@dataclass(slots=True)
class SyncGroupAssignment:
    member_id: str = ""
    assignment: bytes = b""


@dataclass(slots=True)
class SyncGroupRequest:
    group_id: str = ""
    generation_id: int = 0
    member_id: str = ""
    group_instance_id: str | None = None
    assignments: list[SyncGroupAssignment] = field(default_factory=list)  # from the leader only


@dataclass(slots=True)
class SyncGroupResponse:
    error_code: int = 0
    error_message: str = ""
    assignment: bytes = b""


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str = ""
    generation_id: int = 0
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(slots=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class MemberIdentity:
    member_id: str = ""
    group_instance_id: str | None = None
    reason: str | None = None  # LeaveGroup v5+ (KIP-800): logged


@dataclass(slots=True)
class LeaveGroupRequest:
    group_id: str = ""
    members: list[MemberIdentity] = field(default_factory=list)


@dataclass(slots=True)
class LeaveGroupMemberResponse:
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: int = 0


@dataclass(slots=True)
class LeaveGroupResponse:
    error_code: int = 0
    error_message: str = ""
    members: list[LeaveGroupMemberResponse] = field(default_factory=list)


# -- offsets ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class OffsetCommitPartition:
    partition: int = 0
    offset: int = 0
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(slots=True)
class OffsetCommitTopic:
    name: str = ""
    partitions: list[OffsetCommitPartition] = field(default_factory=list)


@dataclass(slots=True)
class OffsetCommitRequest:
    group_id: str = ""
    generation_id: int = -1  # -1 with an empty member id: no group management
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[OffsetCommitTopic] = field(default_factory=list)


@dataclass(slots=True)
class OffsetCommitPartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class OffsetCommitTopicResponse:
    name: str = ""
    partitions: list[OffsetCommitPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetCommitResponse:
    topics: list[OffsetCommitTopicResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetFetchTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class OffsetFetchRequest:
    group_id: str = ""
    topics: list[OffsetFetchTopic] = field(default_factory=list)  # none: every committed offset
    require_stable: bool = False  # KIP-447: UNSTABLE_OFFSET_COMMIT while a transaction's offsets are pending


@dataclass(slots=True)
class OffsetFetchPartitionResponse:
    partition: int = 0
    offset: int = 0  # -1: none committed
    leader_epoch: int = 0
    metadata: str = ""
    error_code: int = 0


@dataclass(slots=True)
class OffsetFetchTopicResponse:
    name: str = ""
    partitions: list[OffsetFetchPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetFetchResponse:
    error_code: int = 0
    error_message: str = ""
    topics: list[OffsetFetchTopicResponse] = field(default_factory=list)


# -- administration --------------------------------------------------------------------------------

@dataclass(slots=True)
class ListGroupsRequest:
    pass


@dataclass(slots=True)
class ListedGroup:
    group_id: str = ""
    protocol_type: str = ""
    state: str = ""


@dataclass(slots=True)
class ListGroupsResponse:
    error_code: int = 0
    groups: list[ListedGroup] = field(default_factory=list)


@dataclass(slots=True)
class DescribeGroupsRequest:
    groups: list[str] = field(default_factory=list)


@dataclass(slots=True)
class DescribedGroupMember:
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    metadata: bytes = b""
    assignment: bytes = b""
    client_host: str = ""


@dataclass(slots=True)
class DescribedGroup:
    error_code: int = 0
    error_message: str = ""
    group_id: str = ""
    state: str = ""  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str = ""
    protocol: str = ""
    members: list[DescribedGroupMember] = field(default_factory=list)
    generation_id: int = 0


@dataclass(slots=True)
class DescribeGroupsResponse:
    groups: list[DescribedGroup] = field(default_factory=list)


@dataclass(slots=True)
class DeleteGroupsRequest:
    groups: list[str] = field(default_factory=list)


@dataclass(slots=True)
class DeletedGroup:
    group_id: str = ""
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class DeleteGroupsResponse:
    results: list[DeletedGroup] = field(default_factory=list)


# -- offset delete (Kafka's OffsetDelete, API 47) ------------------------------------------------------

@dataclass(slots=True)
class OffsetDeleteTopic:
    name: str = ""
    partitions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class OffsetDeleteRequest:
    group_id: str = ""
    topics: list[OffsetDeleteTopic] = field(default_factory=list)


@dataclass(slots=True)
class OffsetDeletePartitionResponse:
    partition: int = 0
    error_code: int = 0
    error_message: str = ""


@dataclass(slots=True)
class OffsetDeleteTopicResponse:
    name: str = ""
    partitions: list[OffsetDeletePartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class OffsetDeleteResponse:
    error_code: int = 0  # the group's: nothing was deleted
    error_message: str = ""
    topics: list[OffsetDeleteTopicResponse] = field(default_factory=list)
