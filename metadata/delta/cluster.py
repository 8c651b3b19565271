"""Broker registrations replayed onto the image's broker map (Kafka's ``ClusterDelta``)."""
from __future__ import annotations

from immutables import Map

from protos import metadata_pb2 as pb

from ..image import BrokerRegistration, Endpoint, SecurityProtocol
from ..records import RecordError, uuid_of
from .maps import MapDelta


class ClusterDelta(MapDelta[int, BrokerRegistration]):
    """Registrations, fencing and controlled shutdown of brokers. A record naming a broker
    must carry its current registration's epoch, so a stale one cannot touch a newer
    incarnation."""

    def __init__(self, brokers: Map[int, BrokerRegistration]) -> None:
        super().__init__(brokers)
        self.touched: set[int] = set()  # since the base, for changes()

    def _broker(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        b = self.view().get(broker_id)
        if b is None:
            raise RecordError(f"cannot {action} broker {broker_id}: it is not registered")
        if b.epoch != epoch:
            raise RecordError(f"cannot {action} broker {broker_id}: its registration has epoch "
                              f"{b.epoch}, not {epoch}")
        return b

    def _set(self, b: BrokerRegistration) -> None:
        self._write()[b.id] = b
        self.touched.add(b.id)

    def register_broker(self, r: pb.RegisterBrokerRecord) -> None:
        try:
            endpoints = tuple(Endpoint(e.name, e.host, e.port,
                                       SecurityProtocol(e.security_protocol)) for e in r.endpoints)
        except ValueError as e:
            raise RecordError(f"broker {r.broker_id}: {e}") from None
        self._set(BrokerRegistration(
            r.broker_id, uuid_of(r.incarnation_id, "incarnation_id"), r.broker_epoch, endpoints,
            r.rack if r.HasField("rack") else None, r.fenced, r.in_controlled_shutdown))

    def unregister_broker(self, r: pb.UnregisterBrokerRecord) -> None:
        self._broker(r.broker_id, r.broker_epoch, "unregister")
        del self._write()[r.broker_id]
        self.touched.add(r.broker_id)

    def fence_broker(self, r: pb.FenceBrokerRecord) -> None:
        b = self._broker(r.id, r.epoch, "fence")
        self._set(_with_state(b, True, b.in_controlled_shutdown))

    def unfence_broker(self, r: pb.UnfenceBrokerRecord) -> None:
        b = self._broker(r.id, r.epoch, "unfence")
        self._set(_with_state(b, False, b.in_controlled_shutdown))

    def broker_registration_change(self, r: pb.BrokerRegistrationChangeRecord) -> None:
        b = self._broker(r.broker_id, r.broker_epoch, "change")
        fenced = r.fenced if r.HasField("fenced") else b.fenced
        shutdown = (r.in_controlled_shutdown if r.HasField("in_controlled_shutdown")
                    else b.in_controlled_shutdown)
        self._set(_with_state(b, fenced, shutdown))


def _with_state(b: BrokerRegistration, fenced: bool, in_controlled_shutdown: bool
                ) -> BrokerRegistration:
    if b.fenced == fenced and b.in_controlled_shutdown == in_controlled_shutdown:
        return b
    return BrokerRegistration(b.id, b.incarnation_id, b.epoch, b.endpoints, b.rack, fenced,
                              in_controlled_shutdown)
