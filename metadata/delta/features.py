"""Feature levels and the producer-id allocator replayed onto the image (Kafka's
``FeaturesDelta`` and ``ProducerIdsDelta``)."""
from __future__ import annotations

from immutables import Map

from protos import metadata_pb2 as pb

from ..image import METADATA_VERSION
from ..records import RecordError
from .maps import MapDelta


class FeaturesDelta(MapDelta[str, int]):
    """Finalized feature levels; level 0 removes a feature, except ``metadata.version``."""

    def __init__(self, features: Map[str, int]) -> None:
        super().__init__(features)
        self.touched: set[str] = set()  # since the base, for changes()

    def feature_level(self, r: pb.FeatureLevelRecord) -> None:
        if not r.name:
            raise RecordError("empty feature name")
        if r.feature_level == 0:
            if r.name == METADATA_VERSION:
                raise RecordError(f"{METADATA_VERSION} cannot be removed (level 0)")
            if r.name in self.view():
                del self._write()[r.name]
        else:
            self._write()[r.name] = r.feature_level
        self.touched.add(r.name)


class ProducerIdsDelta:
    """The next producer id to hand out: blocks are allocated by moving it forward only."""

    def __init__(self, next_producer_id: int) -> None:
        self.next_producer_id = next_producer_id

    def producer_ids(self, r: pb.ProducerIdsRecord) -> None:
        if r.next_producer_id <= self.next_producer_id:
            raise RecordError(f"next producer id {r.next_producer_id} is not greater than the "
                              f"current one, {self.next_producer_id}")
        self.next_producer_id = r.next_producer_id
