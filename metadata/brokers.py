"""The broker lifecycle on the active controller (Kafka's ClusterControlManager and
BrokerHeartbeatManager): registration, heartbeats, fencing on session expiry, unfencing once a
broker has caught up with the metadata log, and controlled shutdown.

Heartbeat times are soft state held only by the active controller, like Kafka's: a newly
active controller gives every broker a full session before it may be fenced."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Callable

from protos import metadata_pb2 as mpb

from common.errors import ErrorCode, KafkaError
from .image import BrokerRegistration, MetadataImage
from .partitions import partitions_with, remove_broker, restore_broker
from .records import (MetadataRecord, broker_registration_change, fence_broker, register_broker,
                      unfence_broker, unregister_broker)


@dataclass(slots=True)
class Session:
    last_contact: float
    metadata_offset: int = -1


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_id: int
    broker_epoch: int
    metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class BrokerLifecycle:
    def __init__(self, session_timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.session_timeout_s = session_timeout_s
        self.clock = clock
        self.sessions: dict[int, Session] = {}

    def reset(self, image: MetadataImage) -> None:
        """A new active controller: every registered broker starts a fresh session."""
        now = self.clock()
        self.sessions = {b: Session(now) for b in image.brokers}

    def alive(self, broker_id: int) -> bool:
        s = self.sessions.get(broker_id)
        return s is not None and self.clock() - s.last_contact <= self.session_timeout_s

    # -- registration ------------------------------------------------------------------------

    def register(self, image: MetadataImage, broker_id: int, incarnation: uuid.UUID, cluster_id: str,
                 endpoints: list[mpb.Endpoint], rack: str | None, next_offset: int
                 ) -> tuple[list[MetadataRecord], int]:
        """Records for a registration and the broker epoch it gets (the offset of its record:
        every new incarnation gets a higher one)."""
        if cluster_id != image.cluster_id:
            raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                           f"broker {broker_id} belongs to cluster {cluster_id!r}, this is {image.cluster_id!r}")
        if broker_id < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid broker id {broker_id}")
        existing = image.brokers.get(broker_id)
        if existing is not None:
            if existing.incarnation_id == incarnation:
                self.sessions[broker_id] = Session(self.clock())
                return [], existing.epoch  # a retried registration: same answer
            if not existing.fenced and self.alive(broker_id):
                raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                               f"Another broker is registered with id {broker_id} (incarnation "
                               f"{existing.incarnation_id}) and its session has not expired; retry "
                               f"after {self.session_timeout_s:.0f}s")
        self.sessions[broker_id] = Session(self.clock())
        records = [register_broker(broker_id, incarnation, next_offset, endpoints, rack, fenced=True)]
        if existing is not None and not existing.fenced:
            # A new incarnation is the end of the previous one (Kafka's ClusterControlManager
            # hands it to the unclean-shutdown handler, KIP-966): the old one leaves every ISR
            # and its leaderships move, with a bumped leader epoch, in this same batch. Else the
            # restarted broker would lead again at the old epoch, and followers would never
            # compare logs with a leader that may have lost an unflushed suffix.
            records += remove_broker(image, broker_id)
        return records, next_offset

    def registration(self, image: MetadataImage, broker_id: int, epoch: int) -> BrokerRegistration:
        b = image.brokers.get(broker_id)
        if b is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
        if epoch < b.epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                           f"broker {broker_id} epoch {epoch} is stale; the current registration has epoch {b.epoch}")
        if epoch != b.epoch:  # Kafka answers STALE_BROKER_EPOCH for any mismatch; the words differ
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                           f"broker {broker_id} epoch {epoch} was never issued: the current registration "
                           f"has epoch {b.epoch}, and no later one exists")
        return b

    # -- heartbeats ----------------------------------------------------------------------------

    def heartbeat(self, image: MetadataImage, hb: Heartbeat) -> tuple[list[MetadataRecord], HeartbeatAnswer]:
        """Records the heartbeat leads to, and the answer once they are committed."""
        b = self.registration(image, hb.broker_id, hb.broker_epoch)
        session = self.sessions.setdefault(hb.broker_id, Session(self.clock()))
        session.last_contact = self.clock()
        session.metadata_offset = hb.metadata_offset
        caught_up = hb.metadata_offset >= b.epoch  # it has replayed the log up to its own registration
        if hb.want_shut_down:
            # Controlled shutdown: move its leaderships away and fence it in one batch; once
            # that commits the broker may stop (and a new incarnation may register at once).
            self.sessions.pop(hb.broker_id, None)
            if b.fenced:
                return [], HeartbeatAnswer(caught_up, True, True)
            records = [broker_registration_change(b.id, b.epoch, in_controlled_shutdown=True)]
            records += remove_broker(image, b.id)
            records.append(fence_broker(b.id, b.epoch))
            return records, HeartbeatAnswer(caught_up, True, True)
        if b.fenced and caught_up and not hb.want_fence:
            records = [unfence_broker(b.id, b.epoch)]
            records += restore_broker(image, b.id)
            return records, HeartbeatAnswer(True, False, False)
        if not b.fenced and hb.want_fence:
            return self.fence(image, b), HeartbeatAnswer(caught_up, True, False)
        return [], HeartbeatAnswer(caught_up, b.fenced, False)

    def unregister(self, image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
        """Forget a broker that is gone for good (kafka-cluster.sh unregister). Refused while it
        runs, or while a partition still lists it as a replica: move those first."""
        b = image.brokers.get(broker_id)
        if b is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
        if not b.fenced:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"broker {broker_id} is running (unfenced): stop it before "
                                                      f"unregistering it")
        hosted = [f"{t.name}-{pid}" for t, pid, _ in partitions_with(image, broker_id)]
        if hosted:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"broker {broker_id} still hosts {len(hosted)} replicas "
                                                      f"({', '.join(hosted[:5])}{', ...' if len(hosted) > 5 else ''}): "
                                                      f"move them to other brokers first")
        self.sessions.pop(broker_id, None)
        return [unregister_broker(b.id, b.epoch)]

    def fence(self, image: MetadataImage, b: BrokerRegistration) -> list[MetadataRecord]:
        """Fence a broker: it leaves every ISR and its partitions get new leaders."""
        return [fence_broker(b.id, b.epoch)] + remove_broker(image, b.id)

    def expired(self, image: MetadataImage) -> list[BrokerRegistration]:
        """Unfenced brokers silent for longer than the session timeout."""
        now = self.clock()
        out = []
        for b in image.brokers.values():
            if b.fenced:
                continue
            s = self.sessions.get(b.id)
            if s is None:
                self.sessions[b.id] = Session(now)
            elif now - s.last_contact > self.session_timeout_s:
                out.append(b)
        return out
