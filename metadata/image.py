"""The metadata image: the whole cluster metadata at one Raft offset, immutable.

Like Kafka's ``MetadataImage``, an image is never changed: a ``MetadataDelta`` replays records
on top of one and yields the next. Readers (the controller, brokers, the shell) can therefore
hold an image without locks while newer ones are built. The big maps are persistent HAMTs
(``immutables.Map``): a new image shares everything it did not change with the old one, so a
batch touching one topic copies that topic's path, not a million partitions.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import IntEnum

from immutables import Map

from .acls import ResourcePattern, StandardAcl
from .records import NO_LEADER
from .scram import ScramCredential, ScramMechanism

#: The feature that versions the metadata itself (Kafka's MetadataVersion.FEATURE_NAME).
METADATA_VERSION = "metadata.version"


class SecurityProtocol(IntEnum):
    """Kafka's security protocol ids (the same numbers as ``Endpoint.SecurityProtocol``)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids (the same numbers as ``ConfigRecord.ResourceType``)."""

    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener a broker accepts connections on."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``epoch`` identifies this registration: records about the broker
    name it, so a stale record about an earlier incarnation cannot touch the current one."""

    id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replicas and leadership. ``leader_epoch`` grows with every leader
    election (brokers fence stale leaders with it); ``partition_epoch`` with every change.
    During a reassignment ``replicas`` lists the target replicas, then the ``removing`` ones;
    ``adding`` are targets that were not replicas before (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress (if any) completes."""
        return tuple(r for r in self.replicas if r not in self.removing) if self.removing else self.replicas

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic and its partitions, keyed by partition id."""

    name: str
    id: uuid.UUID
    partitions: Map[int, PartitionRegistration]


@dataclass(frozen=True, slots=True, order=True)
class ConfigResource:
    """What a config applies to: a topic by name, or a broker by id ("" = cluster default)."""

    type: ResourceType
    name: str


_EMPTY: Map = Map()


# -- one image per domain, as Kafka's MetadataImage composes them; each is what its delta in
# -- metadata/delta/ produces --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Registered brokers by id (Kafka's ClusterImage)."""

    brokers: Map[int, BrokerRegistration]


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Topics by id and by name, the same ``TopicImage`` objects in both (Kafka's TopicsImage)."""

    by_id: Map[uuid.UUID, TopicImage]
    by_name: Map[str, TopicImage]


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Explicitly set config keys per resource (Kafka's ConfigurationsImage)."""

    resources: Map[ConfigResource, Map[str, str]]


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """Finalized feature levels by name (Kafka's FeaturesImage)."""

    levels: Map[str, int]


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """Where the next block of producer ids starts, 0 if none was handed out (Kafka's
    ProducerIdsImage)."""

    next_producer_id: int


@dataclass(frozen=True, slots=True)
class AclsImage:
    """ACLs by id, and the same ACLs by the resource pattern they name (Kafka's AclsImage):
    the authorizer looks a resource's ACLs up instead of scanning them all."""

    by_id: Map[uuid.UUID, StandardAcl]
    by_pattern: Map[ResourcePattern, Map[uuid.UUID, StandardAcl]]

    def of(self, pattern: ResourcePattern) -> Map[uuid.UUID, StandardAcl]:
        """The ACLs of exactly this pattern, by id (empty if none)."""
        return self.by_pattern.get(pattern, _EMPTY)


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by user, then mechanism (Kafka's ScramImage): salted hashes only."""

    users: Map[str, Map[ScramMechanism, ScramCredential]]

    def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users.get(user, _EMPTY).get(mechanism)


_NO_SCRAM = ScramImage(_EMPTY)

#: A client quota entity: (entity type, name or None for the default) pairs sorted by type
#: (``metadata.client_quotas``).
QuotaEntity = tuple[tuple[str, "str | None"], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    """Quota keys and values by entity (Kafka's ClientQuotasImage)."""

    entities: Map[QuotaEntity, Map[str, float]]

    def of(self, entity: QuotaEntity) -> Map[str, float]:
        return self.entities.get(entity, _EMPTY)


_NO_QUOTAS = ClientQuotasImage(_EMPTY)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """All cluster metadata as of Raft entry ``offset`` (written in term ``epoch``): one image
    per domain. ``offset`` 0 means nothing applied yet. The maps are also reachable by their
    own names (``brokers``, ``topics_by_id``, ``topics_by_name``, ``configs``, ``features``,
    ``next_producer_id``), which is how most readers use them.
    """

    cluster_id: str
    offset: int
    epoch: int
    cluster: ClusterImage
    topics: TopicsImage
    configurations: ConfigurationsImage
    finalized_features: FeaturesImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    scram: ScramImage = _NO_SCRAM
    client_quotas: ClientQuotasImage = _NO_QUOTAS

    @classmethod
    def empty(cls, cluster_id: str = "") -> MetadataImage:
        return cls(cluster_id, 0, 0, ClusterImage(_EMPTY), TopicsImage(_EMPTY, _EMPTY),
                   ConfigurationsImage(_EMPTY), FeaturesImage(_EMPTY), ProducerIdsImage(0),
                   AclsImage(_EMPTY, _EMPTY))

    def at(self, offset: int, epoch: int) -> MetadataImage:
        """The same metadata, as of another Raft position (entries that carry no records)."""
        return replace(self, offset=offset, epoch=epoch)

    @property
    def brokers(self) -> Map[int, BrokerRegistration]:
        return self.cluster.brokers

    @property
    def topics_by_id(self) -> Map[uuid.UUID, TopicImage]:
        return self.topics.by_id

    @property
    def topics_by_name(self) -> Map[str, TopicImage]:
        return self.topics.by_name

    @property
    def configs(self) -> Map[ConfigResource, Map[str, str]]:
        return self.configurations.resources

    @property
    def features(self) -> Map[str, int]:
        return self.finalized_features.levels

    @property
    def next_producer_id(self) -> int:
        return self.producer_ids.next_producer_id

    @property
    def metadata_version(self) -> int:
        """The finalized ``metadata.version`` level; 0 if none was recorded."""
        return self.features.get(METADATA_VERSION, 0)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.by_name.get(name)

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        t = self.topics.by_id.get(topic_id)
        return None if t is None else t.partitions.get(partition_id)

    def config(self, resource: ConfigResource) -> Map[str, str]:
        """The resource's explicitly set keys (empty if none)."""
        return self.configurations.resources.get(resource, _EMPTY)

    def partition_count(self) -> int:
        """Partitions over all topics (walks the topics, not the partitions)."""
        return sum(len(t.partitions) for t in self.topics.by_id.values())

    def partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition, in no particular order."""
        for t in self.topics.by_id.values():
            for pid, p in t.partitions.items():
                yield t, pid, p
