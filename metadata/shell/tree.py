"""The metadata image as a file-system tree, the view Kafka's metadata shell gives operators.

Directories are built lazily, on first listing, so opening the shell on a million partitions
costs nothing until someone lists them. Files hold JSON values. The layout is documented in
``docs/metadata-shell.md``; in short::

    /brokers/<id>/{registration,endpoints,rack,epoch,fenced,incarnationId,inControlledShutdown}
    /topics/<name>/{id,name,configs/<key>,partitions/<n>/{replicas,isr,leader,leaderEpoch,partitionEpoch}}
    /topicIds/<uuid>/...           the same topic directory, by id
    /configs/{brokers,topics}/<name>/<key>    (the cluster-wide broker default is <default>)
    /features/<name>
    /cluster/{id,metadataOffset,metadataEpoch}
    /quorum/{leader,epoch,voters,learners,observers,highWatermark,votedFor}  (what it knows)
    /quorum/replication/{voters,observers}/<id>/...   (a live source: the leader's view)
    /producerIds/nextProducerId
    /acls/byId/<uuid>              one ACL each
    /scram/<user>/<mechanism>      {"mechanism", "iterations"} of a SCRAM credential (never its keys)
    /clientQuotas/<entity>/<key>   a client quota, the entity as user=alice,client-id=<default>
    /coordinators/{groups,transactions}/<n>   the leader of partition n of __consumer_offsets
                                   or __transaction_state: the coordinator of the ids hashing to n
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from clients.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

from ..acls import StandardAcl
from ..client_quotas import entity_label
from ..scram import ScramCredential, ScramMechanism
from ..image import (BrokerRegistration, ConfigResource, MetadataImage, PartitionRegistration,
                     ResourceType, TopicImage)
from .source import QuorumState, ReplicaState

JsonValue = Any  # None | bool | int | str | list[JsonValue] | dict[str, JsonValue]

#: The directory name of the cluster-wide broker config default (resource name ""), as
#: ZooKeeper-era Kafka named it (/config/brokers/<default>).
DEFAULT_RESOURCE = "<default>"
_CONFIG_DIRS = {ResourceType.BROKER: "brokers", ResourceType.TOPIC: "topics"}


class File:
    """A leaf holding one JSON value."""

    __slots__ = ("value",)

    def __init__(self, value: JsonValue) -> None:
        self.value = value


class Directory:
    """A node whose children are made on first use, in listing order."""

    __slots__ = ("_make", "_children")

    def __init__(self, make: Callable[[], Iterable[tuple[str, Node]]]) -> None:
        self._make: Callable[[], Iterable[tuple[str, Node]]] | None = make
        self._children: dict[str, Node] | None = None

    def children(self) -> dict[str, Node]:
        if self._children is None:
            assert self._make is not None
            self._children = dict(self._make())
            self._make = None
        return self._children


Node = File | Directory


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort ``2`` before ``10`` and ``orders-2`` before ``orders-10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", name) if part != "")


def _sorted(items: Iterable[tuple[str, Node]]) -> list[tuple[str, Node]]:
    return sorted(items, key=lambda kv: natural_key(kv[0]))


def metadata_tree(image: MetadataImage, quorum: Callable[[], QuorumState]) -> Directory:
    """The root directory over ``image``; ``quorum`` is asked only if /quorum is visited."""
    return Directory(lambda: [
        ("acls", Directory(lambda: [("byId", Directory(lambda: [
            (str(acl_id), File(_acl(acl))) for acl_id, acl in sorted(image.acls.by_id.items())]))])),
        ("brokers", Directory(lambda: _sorted(
            (str(b.id), _broker(b)) for b in image.brokers.values()))),
        ("clientQuotas", Directory(lambda: sorted(
            ((entity_label(entity), _quota_values(values)) for entity, values in image.client_quotas.entities.items()),
            key=lambda item: item[0]))),
        ("cluster", Directory(lambda: [
            ("id", File(image.cluster_id)),
            ("metadataEpoch", File(image.epoch)),
            ("metadataOffset", File(image.offset)),
        ])),
        ("configs", Directory(lambda: [(name, _configs(image, rtype))
                                       for rtype, name in _CONFIG_DIRS.items()])),
        ("coordinators", Directory(lambda: [(name, _coordinators(image, topic))
                                            for name, topic in _COORDINATOR_TOPICS])),
        ("features", Directory(lambda: [(name, File(level))
                                        for name, level in sorted(image.features.items())])),
        ("producerIds", Directory(lambda: [("nextProducerId", File(image.next_producer_id))])),
        ("quorum", Directory(lambda: _quorum(quorum()))),
        ("scram", Directory(lambda: [(user, _scram_user(creds))
                                     for user, creds in sorted(image.scram.users.items())])),
        ("topicIds", Directory(lambda: sorted(
            (str(t.id), _topic(image, t)) for t in image.topics_by_id.values()))),
        ("topics", Directory(lambda: _sorted(
            (t.name, _topic(image, t)) for t in image.topics_by_name.values()))),
    ])


#: Where each kind of coordinator lives: the group coordinator of a group and the transaction
#: coordinator of a transactional id are the leader of the id's partition of these topics
#: (abs(hash(id)) % partitions, as Kafka places them).
_COORDINATOR_TOPICS = (("groups", OFFSETS_TOPIC), ("transactions", TRANSACTION_STATE_TOPIC))


def _coordinators(image: MetadataImage, topic: str) -> Directory:
    """Each partition of an internal topic with its leader, the coordinator of the ids placed
    on it (-1: none now; empty before the first client created the topic)."""
    t = image.topics_by_name.get(topic)
    return Directory(lambda: [] if t is None else [(str(n), File(t.partitions[n].leader))
                                                   for n in sorted(t.partitions)])


def _broker(b: BrokerRegistration) -> Directory:
    endpoints = [f"{e.name}://{e.host}:{e.port}" for e in b.endpoints]
    registration = {
        "id": b.id, "epoch": b.epoch, "incarnationId": str(b.incarnation_id),
        "endpoints": [{"name": e.name, "host": e.host, "port": e.port,
                       "securityProtocol": e.security_protocol.name} for e in b.endpoints],
        "rack": b.rack, "fenced": b.fenced, "inControlledShutdown": b.in_controlled_shutdown,
    }
    return Directory(lambda: [
        ("endpoints", File(endpoints)),
        ("epoch", File(b.epoch)),
        ("fenced", File(b.fenced)),
        ("inControlledShutdown", File(b.in_controlled_shutdown)),
        ("incarnationId", File(str(b.incarnation_id))),
        ("rack", File(b.rack)),
        ("registration", File(registration)),
    ])


def _acl(acl: StandardAcl) -> JsonValue:
    """An ACL as the log dump prints its record's fields (Kafka's StandardAcl)."""
    return {"resourceType": acl.resource_type.name, "resourceName": acl.resource_name,
            "patternType": acl.pattern_type.name, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation.name, "permissionType": acl.permission_type.name}


def _topic(image: MetadataImage, t: TopicImage) -> Directory:
    resource = ConfigResource(ResourceType.TOPIC, t.name)
    return Directory(lambda: [
        ("configs", Directory(lambda: [(k, File(v))
                                       for k, v in sorted(image.config(resource).items())])),
        ("id", File(str(t.id))),
        ("name", File(t.name)),
        ("partitions", Directory(lambda: [(str(pid), _partition(t.partitions[pid]))
                                          for pid in sorted(t.partitions.keys())])),
    ])


def _partition(p: PartitionRegistration) -> Directory:
    moving = [("addingReplicas", File(list(p.adding))), ("removingReplicas", File(list(p.removing)))]
    return Directory(lambda: sorted((moving if p.reassigning else []) + [
        ("isr", File(list(p.isr))),
        ("leader", File(p.leader)),
        ("leaderEpoch", File(p.leader_epoch)),
        ("partitionEpoch", File(p.partition_epoch)),
        ("replicas", File(list(p.replicas))),
    ], key=lambda entry: entry[0]))


def _configs(image: MetadataImage, rtype: ResourceType) -> Directory:
    return Directory(lambda: _sorted(
        (resource.name or DEFAULT_RESOURCE, _config_values(values))
        for resource, values in image.configs.items() if resource.type == rtype))


def _config_values(values: Mapping[str, str]) -> Directory:
    return Directory(lambda: [(k, File(v)) for k, v in sorted(values.items())])


def _quota_values(values: Mapping[str, float]) -> Directory:
    return Directory(lambda: [(k, File(v)) for k, v in sorted(values.items())])


def _scram_user(creds: Mapping[ScramMechanism, ScramCredential]) -> Directory:
    """A user's credentials: each mechanism with its iterations, never the salt or keys."""
    return Directory(lambda: [(m.mechanism_name, File({"mechanism": m.mechanism_name, "iterations": c.iterations}))
                              for m, c in sorted(creds.items())])


def _quorum(q: QuorumState) -> list[tuple[str, Node]]:
    known: list[tuple[str, JsonValue]] = [
        ("epoch", q.epoch), ("highWatermark", q.high_watermark), ("leader", q.leader),
        ("learners", None if q.learners is None else list(q.learners)),
        ("observers", None if q.observers is None else list(q.observers)),
        ("votedFor", q.voted_for),
        ("voters", None if q.voters is None else list(q.voters))]
    found: list[tuple[str, Node]] = [(name, File(value or None if name == "votedFor" else value))
                                     for name, value in known if value is not None]
    if q.static and q.voters is None:  # known to be in the nodes' configs, not here: null
        found += [("learners", File([])), ("voters", File(None))]
    # Replication state by role: a broker and a controller may share an id.
    roles = [(role, states) for role, states in (("observers", q.observer_states),
                                                 ("voters", q.voter_states))
             if states is not None]
    if roles:
        found.append(("replication", Directory(lambda: [
            (role, _replicas(states)) for role, states in roles])))
    return sorted(found, key=lambda kv: kv[0])


def _replicas(states: Iterable[ReplicaState]) -> Directory:
    return Directory(lambda: [(str(r.id), _replica(r)) for r in sorted(states, key=lambda r: r.id)])


def _replica(r: ReplicaState) -> Directory:
    return Directory(lambda: [
        ("lag", File(r.lag)),
        ("lastCaughtUpTimestamp", File(r.last_caught_up_ms)),
        ("lastFetchTimestamp", File(r.last_fetch_ms)),
        ("logEndOffset", File(r.log_end_offset)),
    ])


# -- walking -----------------------------------------------------------------------------------

def to_json(node: Node) -> JsonValue:
    """A directory as a nested object, a file as its value."""
    if isinstance(node, File):
        return node.value
    return {name: to_json(child) for name, child in node.children().items()}


def walk(node: Node, path: str) -> Iterator[tuple[str, Node]]:
    """``node`` and everything under it, depth first, in listing order."""
    yield path, node
    if isinstance(node, Directory):
        for name, child in node.children().items():
            yield from walk(child, join(path, name))


def join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name
