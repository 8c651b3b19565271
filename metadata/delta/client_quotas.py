"""Client quota records replayed onto the image (Kafka's ``ClientQuotasDelta``)."""
from __future__ import annotations

from immutables import Map

from common.errors import KafkaError
from protos import metadata_pb2 as pb

from ..client_quotas import check_entity
from ..image import ClientQuotasImage, QuotaEntity
from ..records import RecordError
from .maps import MapDelta

_EMPTY: Map = Map()


class ClientQuotasDelta(MapDelta[QuotaEntity, Map[str, float]]):
    """A ClientQuotaRecord sets one key of an entity, or removes it; an entity left without
    keys is gone."""

    def __init__(self, image: ClientQuotasImage) -> None:
        super().__init__(image.entities)
        self.touched = False

    def client_quota(self, r: pb.ClientQuotaRecord) -> None:
        try:
            entity = check_entity([(p.entity_type, p.entity_name if p.HasField("entity_name") else None)
                                   for p in r.entity])
        except KafkaError as e:
            raise RecordError(f"client quota of a bad entity: {e.message}") from None
        if not r.key:
            raise RecordError("client quota record without a key")
        self.touched = True
        mine = self.view().get(entity, _EMPTY)
        if r.remove:
            rest = mine.delete(r.key) if r.key in mine else mine
            if len(rest):
                self._write()[entity] = rest
            elif entity in self.view():
                del self._write()[entity]
        else:
            self._write()[entity] = mine.set(r.key, r.value)

    def image(self, current: ClientQuotasImage) -> ClientQuotasImage:
        entities = self.finish()
        return current if entities is current.entities else ClientQuotasImage(entities)
