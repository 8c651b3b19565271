"""Replaying records onto an image: ``MetadataDelta`` and what it changed.

A delta starts from a base image, replays committed records in log order, and ``apply()``
yields the next image; the base is never touched, so whoever holds it keeps a consistent
view. As Kafka's ``MetadataDelta`` composes ``TopicsDelta``, ``ClusterDelta``,
``ConfigurationsDelta``, ``FeaturesDelta``, ``ProducerIdsDelta`` and ``AclsDelta``, this one
dispatches each record to the delta of its domain (``topics``, ``cluster``, ``configs``,
``features``, ``producer_ids``, ``acls``) and composes their results into the domain images of
the next ``MetadataImage`` (``metadata/image.py``), keeping each unchanged domain's image as it was. Records apply as Kafka's do (a PartitionChangeRecord
changes only its present fields, RemoveTopicRecord also drops the topic's partitions and
configs, ...). A record that names a topic, partition or broker registration that does not
exist raises ``RecordError``: such a log is corrupt, and applying past it would let this
node's metadata diverge unnoticed.

``changes()`` lists what differs from the base (topics, partitions, brokers, configs,
features, whether ACLs did); ``changes_between`` does the same for any two images, however
far apart.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from protos import metadata_pb2 as pb

from ..image import (ClusterImage, ConfigurationsImage, FeaturesImage, MetadataImage, ProducerIdsImage,
                     TopicImage, TopicsImage)
from ..records import RECORD_VERSION, MetadataRecord, RecordBatch, RecordError, check, type_name
from .acls import AclsDelta
from .client_quotas import ClientQuotasDelta
from .changes import MetadataChanges, TopicIdPartition, changes_between, compare
from .cluster import ClusterDelta
from .configs import ConfigurationsDelta
from .features import FeaturesDelta, ProducerIdsDelta
from .scram import ScramDelta
from .topics import TopicsDelta

__all__ = ["MetadataChanges", "MetadataDelta", "TopicIdPartition", "changes_between"]


class MetadataDelta:
    """Records replayed on top of ``base``; see the module docstring.

    Replay records with ``replay`` (one record at a time, several may share an offset) or
    ``replay_batch`` (one Raft entry). Offsets must not go back and epochs must not decrease.
    ``apply()`` may be called any number of times, replaying more in between; each call
    returns the image with everything replayed so far. After a ``RecordError`` the delta is
    unusable (a batch may be half replayed); the base image is intact, so start again from it.
    """

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._image = base  # as of the last apply()
        self._offset = base.offset
        self._epoch = base.epoch
        self._error: RecordError | None = None
        self._dirty = False
        self.topics = TopicsDelta(base.topics_by_id, base.topics_by_name)
        self.cluster = ClusterDelta(base.brokers)
        self.configs = ConfigurationsDelta(base.configs, self.topics.has_name)
        self.features = FeaturesDelta(base.features)
        self.producer_ids = ProducerIdsDelta(base.next_producer_id)
        self.acls = AclsDelta(base.acls)
        self.scram = ScramDelta(base.scram)
        self.client_quotas = ClientQuotasDelta(base.client_quotas)
        t, c = self.topics, self.cluster
        # Record type (the MetadataRecord oneof's name) -> the domain's handler.
        self._handlers: dict[str, Callable[[Any], None]] = {
            "register_broker": c.register_broker,
            "unregister_broker": c.unregister_broker,
            "fence_broker": c.fence_broker,
            "unfence_broker": c.unfence_broker,
            "broker_registration_change": c.broker_registration_change,
            "topic": t.topic,
            "remove_topic": self._remove_topic,
            "partition": t.partition,
            "partition_change": t.partition_change,
            "config": self.configs.config,
            "feature_level": self.features.feature_level,
            "producer_ids": self.producer_ids.producer_ids,
            "access_control_entry": self.acls.access_control_entry,
            "remove_access_control_entry": self.acls.remove_access_control_entry,
            "user_scram_credential": self.scram.user_scram_credential,
            "remove_user_scram_credential": self.scram.remove_user_scram_credential,
            "client_quota": self.client_quotas.client_quota,
            "no_op": lambda r: None,
        }

    def _remove_topic(self, r: pb.RemoveTopicRecord) -> None:
        self.configs.remove_topic(self.topics.remove_topic(r))

    @property
    def base(self) -> MetadataImage:
        return self._base

    @property
    def offset(self) -> int:
        """The offset of the last record replayed (the base's if none)."""
        return self._offset

    @property
    def epoch(self) -> int:
        return self._epoch

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord, offset: int, epoch: int) -> None:
        """Apply one record committed at Raft entry ``offset`` of term ``epoch``; records of
        one entry share its offset."""
        if self._error is not None:
            raise self._error
        if offset <= self._base.offset or offset < self._offset or epoch < self._epoch:
            self._fail(f"{type_name(record)} at offset {offset} (epoch {epoch}) is out of "
                       f"order: the delta is at offset {max(self._offset, self._base.offset)} "
                       f"(epoch {self._epoch})")
        self._replay_all((record,), offset, epoch)

    def replay_batch(self, batch: RecordBatch | Iterable[MetadataRecord], offset: int,
                     epoch: int) -> None:
        """Apply one Raft entry's records. An entry without records (a Raft no-op, a membership
        change) still advances the image's offset."""
        if self._error is not None:
            raise self._error
        if offset <= self._offset or epoch < self._epoch:
            self._fail(f"entry at offset {offset} (epoch {epoch}) is not after offset "
                       f"{self._offset} (epoch {self._epoch})")
        self._replay_all(batch.records if isinstance(batch, pb.RecordBatch) else batch,
                         offset, epoch)

    def _replay_all(self, records: Iterable[MetadataRecord], offset: int, epoch: int) -> None:
        handlers = self._handlers
        record: MetadataRecord | None = None
        known = False
        try:
            for record in records:
                which = record.WhichOneof("record")
                known = which is not None and record.version == RECORD_VERSION
                if not known:
                    check(record)  # raises, naming the type and version
                handlers[which](getattr(record, which))
        except RecordError as e:
            where = f"{type_name(record)} at offset" if known and record else "at offset"
            self._fail(f"{where} {offset}: {e}")
        except BaseException:
            self._error = RecordError(f"replay at offset {offset} was interrupted")
            raise
        finally:
            self._dirty = True
        self._offset = offset
        self._epoch = epoch

    def _fail(self, message: str) -> NoReturn:
        self._error = RecordError(message)
        raise self._error from None

    # -- results ------------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every record replayed so far; the base image is left as it was.
        Costs what was touched: unchanged topics and maps are shared with the previous image."""
        if self._error is not None:
            raise self._error
        if not self._dirty:
            return self._image
        img = self._image
        # Each domain's image is kept, object and all, unless its delta changed something.
        by_id, by_name = self.topics.finish()
        brokers, configs, features = self.cluster.finish(), self.configs.finish(), self.features.finish()
        next_id = self.producer_ids.next_producer_id
        self._image = MetadataImage(
            img.cluster_id, self._offset, self._epoch,
            img.cluster if brokers is img.brokers else ClusterImage(brokers),
            img.topics if by_id is img.topics_by_id and by_name is img.topics_by_name else TopicsImage(by_id, by_name),
            img.configurations if configs is img.configs else ConfigurationsImage(configs),
            img.finalized_features if features is img.features else FeaturesImage(features),
            img.producer_ids if next_id == img.next_producer_id else ProducerIdsImage(next_id),
            self.acls.image(img.acls), self.scram.image(img.scram), self.client_quotas.image(img.client_quotas))
        self._dirty = False
        return self._image

    def changes(self) -> MetadataChanges:
        """What ``apply()`` changed relative to the base image (see ``MetadataChanges``);
        only what the replayed records touched is compared."""
        t = self.topics
        born_or_died, touched = t.born_or_died, t.touched_partitions

        def candidates(tid: uuid.UUID, before: TopicImage, after: TopicImage) -> Iterable[int]:
            if tid in born_or_died:  # removed and created again: anything may differ
                return set(before.partitions.keys()) | set(after.partitions.keys())
            return touched.get(tid, ())

        return compare(self._base, self.apply(), t.touched_topics, candidates,
                       self.cluster.touched, self.configs.touched, self.features.touched)
