"""The answer to a request whose handler failed (Kafka's ``AbstractRequest.getErrorResponse``).

Kafka's KafkaApis catches what a handler raises, logs it and answers the request with its
error response, keeping the connection: ``Errors.forException`` makes the code (a KafkaError's
own, UNKNOWN_SERVER_ERROR for anything unexpected, whose message is left out so that nothing
internal leaks, as ``ApiError.fromThrowable`` does), and each API's error response repeats
the items the request named (its topics, partitions, groups, resources) with that code.

Here one walk does that for every API from two things: ``_ANSWERS``, which of the request's
lists each of the response's lists repeats and with which of their fields (and the values
Kafka sets beside the error, e.g. a Fetch partition's high watermark -1), and the response
schema of the request's version, whose every ``error_code`` field (of Kafka's type
error_code) in what was built gets the code and every ``error_message`` the message. A field
the version lacks is left out, as ``codec.build`` leaves it out of any answer.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.errors import ErrorCode, KafkaError

from . import apis as A
from .codec import RequestHeader, encode_response, entity_fields, response_schema


@dataclass(frozen=True)
class Items:
    """A list of the response repeating the items of a list of the request."""

    answer: str                  # the response's field
    request: str                 # the request's field; "a.b": b of every item of a, flattened
    keys: Mapping[str, str]      # response field -> the request item's field ("": the item, a value)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # set beside the error, as Kafka sets them
    inner: tuple[Items, ...] = ()
    until: int | None = None     # the last version that repeats them (Kafka's, e.g. Fetch before v13)


@dataclass(frozen=True)
class Answer:
    """What an API's error response holds besides its error codes and messages."""

    items: tuple[Items, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)  # top-level fields copied from the request
    #: built from the request in code, where no table says it (AlterUserScramCredentials)
    custom: Callable[[Any], dict[str, Any]] | None = None


def _scram_users(request: Any) -> dict[str, Any]:
    """AlterUserScramCredentials: one result per user named, deletions and upsertions
    together, sorted, as Kafka's error response has them."""
    users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    return {"results": [{"user": u} for u in users]}


_PARTITIONS = Items("partitions", "partitions", {"partition_index": "partition_index"})
_TOPIC_PARTITIONS = (Items("topics", "topics", {"name": "name"}, inner=(_PARTITIONS,)),)
_RESOURCES = {"resource_type": "resource_type", "resource_name": "resource_name"}

#: Per API, what Kafka's getErrorResponse repeats of the request (clients/src/main/java/org/
#: apache/kafka/common/requests/<Api>Request.java); an API not listed answers its top-level
#: error_code alone (Heartbeat, EndTxn, DescribeAcls...).
_ANSWERS: dict[int, Answer] = {
    A.PRODUCE: Answer((Items("responses", "topic_data", {"name": "name"}, inner=(
        Items("partition_responses", "partition_data", {"index": "index"},
              {"base_offset": -1, "log_append_time": None, "log_start_offset": -1, "record_errors": []}),)),)),
    # v13+ (not served) answer the top-level error alone; before, every partition carries it too
    A.FETCH: Answer((Items("responses", "topics", {"topic": "topic", "topic_id": "topic_id"}, until=12, inner=(
        Items("partitions", "partitions", {"partition_index": "partition"},
              {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1}),)),),
        keys={"session_id": "session_id"}),
    A.LIST_OFFSETS: Answer((Items("topics", "topics", {"name": "name"}, inner=(
        Items("partitions", "partitions", {"partition_index": "partition_index"}, {"offset": -1, "timestamp": -1}),)),)),
    A.METADATA: Answer((Items("topics", "topics", {"name": "name", "topic_id": "topic_id"},
                              {"is_internal": False, "partitions": []}),)),
    A.OFFSET_COMMIT: Answer(_TOPIC_PARTITIONS),
    # v0-v1 per partition; v2-v7 the top-level error alone; v8+ per group
    A.OFFSET_FETCH: Answer((
        Items("topics", "topics", {"name": "name"}, until=1, inner=(
            Items("partitions", "partition_indexes", {"partition_index": ""},
                  {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}),)),
        Items("groups", "groups", {"group_id": "group_id"}, {"topics": []}))),
    A.FIND_COORDINATOR: Answer(
        (Items("coordinators", "coordinator_keys", {"key": ""}, {"node_id": -1, "host": "", "port": -1}),),
        fixed={"node_id": -1, "host": "", "port": -1}),  # v0-v3: the one coordinator, no node
    A.JOIN_GROUP: Answer(fixed={"generation_id": -1, "protocol_name": None, "leader": "", "member_id": ""}),
    A.SYNC_GROUP: Answer(fixed={"assignment": b""}),
    A.DESCRIBE_GROUPS: Answer((Items("groups", "groups", {"group_id": ""}),)),
    A.CREATE_TOPICS: Answer((Items("topics", "topics", {"name": "name"}),)),
    A.DELETE_TOPICS: Answer((Items("responses", "topic_names", {"name": ""}),  # v1-v5 name topics, v6 by id too
                             Items("responses", "topics", {"name": "name", "topic_id": "topic_id"}))),
    A.INIT_PRODUCER_ID: Answer(fixed={"producer_id": -1, "producer_epoch": -1}),
    A.OFFSET_FOR_LEADER_EPOCH: Answer((Items("topics", "topics", {"topic": "topic"}, inner=(
        Items("partitions", "partitions", {"partition": "partition"}, {"leader_epoch": -1, "end_offset": -1}),)),)),
    A.DESCRIBE_CONFIGS: Answer((Items("results", "resources", _RESOURCES),)),
    A.ALTER_CONFIGS: Answer((Items("responses", "resources", _RESOURCES),)),
    A.INCREMENTAL_ALTER_CONFIGS: Answer((Items("responses", "resources", _RESOURCES),)),
    A.CREATE_PARTITIONS: Answer((Items("results", "topics", {"name": "name"}),)),
    A.DELETE_GROUPS: Answer((Items("results", "groups_names", {"group_id": ""}),)),
    A.ELECT_LEADERS: Answer((Items("replica_election_results", "topic_partitions", {"topic": "topic"}, inner=(
        Items("partition_result", "partitions", {"partition_id": ""}),)),)),
    A.ALTER_PARTITION_REASSIGNMENTS: Answer((Items("responses", "topics", {"name": "name"}, inner=(_PARTITIONS,)),)),
    A.LIST_PARTITION_REASSIGNMENTS: Answer((Items("topics", "topics", {"name": "name"}, inner=(
        Items("partitions", "partition_indexes", {"partition_index": ""}),)),)),
    A.CREATE_ACLS: Answer((Items("results", "creations", {}),)),
    A.DELETE_ACLS: Answer((Items("filter_results", "filters", {}),)),
    A.DESCRIBE_CLIENT_QUOTAS: Answer(fixed={"entries": None}),
    A.ALTER_CLIENT_QUOTAS: Answer((Items("entries", "entries", {}, inner=(
        Items("entity", "entity", {"entity_type": "entity_type", "entity_name": "entity_name"}),)),)),
    # Kafka's results name no user; naming them costs nothing and tells which is which
    A.DESCRIBE_USER_SCRAM_CREDENTIALS: Answer((Items("results", "users", {"user": "name"}),)),
    A.ALTER_USER_SCRAM_CREDENTIALS: Answer(custom=_scram_users),
    A.SASL_AUTHENTICATE: Answer(fixed={"auth_bytes": b""}),
    A.ADD_PARTITIONS_TO_TXN: Answer((Items("results_by_topic_v3_and_below", "v3_and_below_topics", {"name": "name"},
                                           inner=(Items("results_by_partition", "partitions",
                                                        {"partition_index": ""}),)),)),
    A.WRITE_TXN_MARKERS: Answer((Items("markers", "markers", {"producer_id": "producer_id"}, inner=(
        Items("topics", "topics", {"name": "name"}, inner=(
            Items("partitions", "partition_indexes", {"partition_index": ""}),)),)),)),
    A.TXN_OFFSET_COMMIT: Answer(_TOPIC_PARTITIONS),
    A.DESCRIBE_TRANSACTIONS: Answer((Items("transaction_states", "transactional_ids", {"transactional_id": ""}),)),
    A.DELETE_RECORDS: Answer((Items("topics", "topics", {"name": "name"}, inner=(
        Items("partitions", "partitions", {"partition_index": "partition_index"}, {"low_watermark": -1}),)),)),
    A.DESCRIBE_PRODUCERS: Answer((Items("topics", "topics", {"name": "name"}, inner=(
        Items("partitions", "partition_indexes", {"partition_index": ""}),)),)),
    A.ALTER_REPLICA_LOG_DIRS: Answer((Items("results", "dirs.topics", {"topic_name": "name"}, inner=(
        Items("partitions", "partitions", {"partition_index": ""}),)),)),
}


def error_of(e: BaseException) -> tuple[ErrorCode, str | None]:
    """Kafka's ``ApiError.fromThrowable``: a KafkaError's code and message; anything else
    UNKNOWN_SERVER_ERROR with no message (what failed inside is for the broker's log)."""
    if isinstance(e, KafkaError):
        return e.code, e.message
    return ErrorCode.UNKNOWN_SERVER_ERROR, None


def error_answer(header: RequestHeader, request: Any, e: BaseException) -> Any | None:
    """The encoded response that answers ``request`` with the error ``e`` stands for; None
    where Kafka answers nothing and closes the connection (an acks=0 produce)."""
    if header.api_key == A.PRODUCE and request.acks == 0:
        return None
    code, message = error_of(e)
    answer = error_dict(header.api_key, header.api_version, request)
    _name_error(response_schema(header.api_key, header.api_version), answer, int(code), message)
    return encode_response(header, answer)


def error_dict(api_key: int, version: int, request: Any) -> dict[str, Any]:
    """The error response's items, keys and fixed values, before the error is named in it."""
    spec = _ANSWERS.get(api_key, Answer())
    if spec.custom is not None:
        return spec.custom(request)
    answer = {name: _plain(getattr(request, source)) for name, source in spec.keys.items() if hasattr(request, source)}
    answer.update(spec.fixed)
    _repeat(spec.items, request, version, answer)
    return answer


def _repeat(items: tuple[Items, ...], source: Any, version: int, into: dict[str, Any]) -> None:
    for spec in items:
        if spec.until is not None and version > spec.until:
            continue
        listed = into.setdefault(spec.answer, [])
        for item in _listed(source, spec.request):
            out = {name: _plain(item if not field_ else getattr(item, field_)) for name, field_ in spec.keys.items()
                   if not field_ or hasattr(item, field_)}
            out.update(spec.fixed)
            _repeat(spec.inner, item, version, out)
            listed.append(out)


def _plain(value: Any) -> Any:
    """A request's value as an answer's dict holds it (``codec.build`` takes a uuid's bytes)."""
    return value.bytes if isinstance(value, uuid.UUID) else value


def _listed(source: Any, path: str) -> list[Any]:
    """The items of ``source``'s list ``path`` (none when the version lacks it or it is null)."""
    found = [source]
    for name in path.split("."):
        found = [item for parent in found for item in (getattr(parent, name, None) or ())]
    return found


def _name_error(cls: type, data: dict[str, Any], code: int, message: str | None) -> None:
    """Every error code the schema has in ``data`` (and in the entities built in it) set to
    ``code``, every error message to ``message``."""
    for f in entity_fields(cls):
        if f.kind == "value" and f.target == "error_code":
            data[f.name] = code
        elif f.name == "error_message":
            data[f.name] = message
        elif f.kind == "entities" and data.get(f.name):
            for item in data[f.name]:
                _name_error(f.target, item, code, message)
        elif f.kind == "entity" and isinstance(data.get(f.name), dict):
            _name_error(f.target, data[f.name], code, message)
