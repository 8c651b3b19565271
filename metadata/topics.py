"""Topic operations as records: CreateTopics, DeleteTopics, CreatePartitions and incremental
config changes, validated against an image with Kafka's rules and error codes. Each function
returns the records to write (one atomic batch) and a result per requested item."""
from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import IntEnum

from common.config_def import ConfigKey
from common.errors import ErrorCode, KafkaError

from .configs import BROKER_CONFIGS, TOPIC_CONFIGS, validate, validate_topic
from .image import ConfigResource, MetadataImage, ResourceType, TopicImage
from .placement import BrokerLoad, UsableBroker, place_replicas, validate_assignment
from .records import MetadataRecord, config, partition, remove_topic, topic

MAX_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
#: The most partitions, topics, configs or deletions one request may ask for, checked before
#: any work: Kafka's QuorumController.MAX_RECORDS_PER_USER_OP and ReplicationControlManager's
#: MAX_PARTITIONS_PER_BATCH (both 10,000). It bounds the records one write makes, so no single
#: request can hold the controller's event loop for long (docs/operations.md, "Bounded work").
MAX_RECORDS_PER_USER_OP = 10_000


def check_request_size(count: int, what: str) -> None:
    """POLICY_VIOLATION, as Kafka answers, when one request asks for too much at once."""
    if count > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.POLICY_VIOLATION,
                       f"Excessively large number of {what} per request: {count}, at most "
                       f"{MAX_RECORDS_PER_USER_OP}; split it into several requests.")


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    partitions: int = -1
    replication_factor: int = -1
    assignment: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ItemResult:
    name: str
    topic_id: uuid.UUID | None = None
    error: KafkaError | None = None
    partitions: int = 0
    replication_factor: int = 0


def validate_name(name: str) -> None:
    """Kafka's topic name rules (``org.apache.kafka.common.internals.Topic``)."""
    def bad(msg: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)
    if not name:
        raise bad("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise bad('Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME:
        raise bad(f"Topic name is illegal, it can't be longer than {MAX_NAME} characters, topic name: {name}")
    if not _LEGAL.match(name):
        raise bad(f'Topic name "{name}" is illegal, it contains a character other than ASCII '
                  f"alphanumerics, '.', '_' and '-'")


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def usable_brokers(image: MetadataImage) -> list[UsableBroker]:
    return [UsableBroker(b.id, b.rack) for b in sorted(image.brokers.values(), key=lambda b: b.id)
            if not b.fenced and not b.in_controlled_shutdown]


def create_topics(image: MetadataImage, topics: list[NewTopic], *, default_partitions: int,
                  default_replication: int, load: BrokerLoad, start: int,
                  collisions: AbstractSet[str] | None = None) -> tuple[list[MetadataRecord], list[ItemResult]]:
    """Records for every topic that can be created; a topic and all its partitions go in the
    same batch. ``collisions`` holds the dot/underscore-folded names of existing topics."""
    brokers = usable_brokers(image)
    registered = set(image.brokers)
    folded = set(collisions) if collisions is not None else {_collision_key(n) for n in image.topics_by_name}
    leaders, replicas = Counter(load.leaders), Counter(load.replicas)
    seen = Counter(t.name for t in topics)
    records: list[MetadataRecord] = []
    results: list[ItemResult] = []
    for k, t in enumerate(topics):
        res = ItemResult(t.name)
        results.append(res)
        try:
            validate_name(t.name)
            if seen[t.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic '{t.name}' appears more than once in the request.")
            if t.name in image.topics_by_name:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            if _collision_key(t.name) in folded:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                               f"Topic '{t.name}' collides with an existing topic: '.' and '_' "
                               f"are interchangeable in metric names")
            for key, value in t.configs.items():
                validate("topic", key, value)
            validate_topic(t.configs)
            if t.assignment:
                if t.partitions not in (-1, len(t.assignment)) or t.replication_factor != -1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Give either an assignment or partitions and "
                                                              "a replication factor, not both.")
                rf = validate_assignment(t.assignment, registered)
                placed = [tuple(t.assignment[p]) for p in sorted(t.assignment)]
            else:
                n = default_partitions if t.partitions == -1 else t.partitions
                rf = default_replication if t.replication_factor == -1 else t.replication_factor
                placed = place_replicas(brokers, n, rf, start=start + k,
                                        load=BrokerLoad(leaders, replicas))
        except KafkaError as e:
            res.error = e
            continue
        tid = uuid.uuid4()
        res.topic_id, res.partitions, res.replication_factor = tid, len(placed), rf
        folded.add(_collision_key(t.name))
        records.append(topic(t.name, tid))
        for key, value in sorted(t.configs.items()):
            records.append(config(ResourceType.TOPIC, t.name, key, value))
        for pid, reps in enumerate(placed):
            records.append(partition(tid, pid, reps))
            leaders[reps[0]] += 1
            replicas.update(reps)
    return records, results


def find_topic(image: MetadataImage, name: str | None, topic_id: uuid.UUID | None) -> TopicImage:
    t = image.topics_by_name.get(name) if name else image.topics_by_id.get(topic_id) if topic_id else None
    if t is None:
        what = name or topic_id or "no name or id was given"
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic: {what}")
    return t


def delete_topics(image: MetadataImage, names: list[str], ids: list[uuid.UUID]
                  ) -> tuple[list[MetadataRecord], list[ItemResult]]:
    records, results, done = [], [], set()
    for name, tid in [(n, None) for n in names] + [(None, i) for i in ids]:
        res = ItemResult(name or "")
        results.append(res)
        try:
            t = find_topic(image, name, tid)
        except KafkaError as e:
            res.error = e
            continue
        res.name, res.topic_id = t.name, t.id
        if t.id not in done:
            done.add(t.id)
            records.append(remove_topic(t.id))
    return records, results


def create_partitions(image: MetadataImage, name: str, count: int, assignment: list[list[int]],
                      *, load: BrokerLoad, start: int) -> tuple[list[MetadataRecord], ItemResult]:
    """Grow a topic to ``count`` partitions (partitions only ever grow)."""
    res = ItemResult(name)
    try:
        t = find_topic(image, name, None)
        res.topic_id = t.id
        current = len(t.partitions)
        if count < current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                           f"Topic currently has {current} partitions, which is higher than the requested {count}.")
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        rf = len(t.partitions[0].replicas)
        if assignment:
            if len(assignment) != count - current:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Increasing the number of partitions by {count - current} but "
                               f"{len(assignment)} assignments provided.")
            validate_assignment({current + k: a for k, a in enumerate(assignment)}, set(image.brokers),
                                first_partition=current, replication_factor=rf)
            placed = [tuple(a) for a in assignment]
        else:
            placed = place_replicas(usable_brokers(image), count - current, rf, start=start, load=load)
    except KafkaError as e:
        res.error = e
        return [], res
    res.partitions, res.replication_factor = count, rf
    return [partition(t.id, current + k, reps) for k, reps in enumerate(placed)], res


class ConfigOpType(IntEnum):
    """IncrementalAlterConfigs' operations, with Kafka's numbers; APPEND and SUBTRACT change
    list-typed keys (``cleanup.policy``, ``*.replication.throttled.replicas``) item by item."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One change of a key; ``op`` as sent (a ConfigOpType, else refused INVALID_REQUEST)."""

    key: str
    op: int = ConfigOpType.SET
    value: str = ""


def alter_configs(image: MetadataImage, kind: ResourceType, name: str, ops: list[ConfigOp], *,
                  replace: bool = False) -> list[MetadataRecord]:
    """IncrementalAlterConfigs for one resource: set, delete, append to or subtract from keys;
    ``replace`` (AlterConfigs, the legacy whole set): the keys set now and not in ``ops`` return
    to their defaults."""
    if kind == ResourceType.TOPIC:
        find_topic(image, name, None)
        label = "topic"
    elif kind == ResourceType.BROKER:
        if name and (not name.isdigit() or int(name) not in image.brokers):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"broker {name!r} is not registered (use '' for the "
                                                      f"cluster-wide default)")
        label = "broker"
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {kind}")
    records = []
    after = dict(image.config(ConfigResource(kind, name)))
    if replace:
        given = {op.key for op in ops}
        ops = ops + [ConfigOp(key, ConfigOpType.DELETE) for key in sorted(after) if key not in given]
    known = TOPIC_CONFIGS if kind == ResourceType.TOPIC else BROKER_CONFIGS
    for op in ops:
        if op.op == ConfigOpType.DELETE:
            validate(label, op.key, None)
            records.append(config(kind, name, op.key, None))
            after.pop(op.key, None)
            continue
        if op.op == ConfigOpType.SET:
            value = op.value
        elif op.op in (ConfigOpType.APPEND, ConfigOpType.SUBTRACT):
            validate(label, op.key, None)
            value = _list_change(known[op.key], ConfigOpType(op.op), after.get(op.key), op.value)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op.op} on {op.key}: use SET (0), "
                                                        f"DELETE (1), APPEND (2) or SUBTRACT (3)")
        validate(label, op.key, value)
        records.append(config(kind, name, op.key, value))
        after[op.key] = value
    if kind == ResourceType.TOPIC:
        validate_topic(after)
    return records


def _list_change(spec: ConfigKey, op: ConfigOpType, current: str | None, values: str) -> str:
    """APPEND or SUBTRACT ``values`` (comma-separated) to a list-typed key's current value (its
    default when unset), as Kafka does: appended items already there are not repeated."""
    if spec.type != "list":
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Can't {op.name} to key {spec.name} because its type is not LIST.")
    items = [i.strip() for i in (current if current is not None else spec.default or "").split(",") if i.strip()]
    given = [v.strip() for v in values.split(",") if v.strip()]
    if op == ConfigOpType.APPEND:
        return ",".join(items + [v for v in dict.fromkeys(given) if v not in items])
    return ",".join(i for i in items if i not in given)


def describe_configs(image: MetadataImage, kind: ResourceType, name: str) -> list[tuple[str, str | None, bool]]:
    """(key, value, is_default) for every known key of the resource; None: a key without a default."""
    if kind == ResourceType.TOPIC:
        find_topic(image, name, None)
    set_keys = dict(image.config(ConfigResource(kind, name)))
    known = TOPIC_CONFIGS if kind == ResourceType.TOPIC else BROKER_CONFIGS
    return [(k, set_keys.get(k, spec.default), k not in set_keys) for k, spec in sorted(known.items())]
