"""Config records replayed onto the image's config map (Kafka's ``ConfigurationsDelta``)."""
from __future__ import annotations

from collections.abc import Callable

from immutables import Map

from protos import metadata_pb2 as pb

from ..image import ConfigResource, ResourceType
from ..records import RecordError
from .maps import MapDelta

_EMPTY: Map = Map()


class ConfigurationsDelta(MapDelta[ConfigResource, Map[str, str]]):
    """Topic and broker configs: a ConfigRecord sets or (without a value) deletes one key; a
    topic's configs go with the topic (``remove_topic``)."""

    def __init__(self, configs: Map[ConfigResource, Map[str, str]],
                 topic_exists: Callable[[str], bool]) -> None:
        super().__init__(configs)
        self._topic_exists = topic_exists
        self.touched: set[ConfigResource] = set()  # since the base, for changes()

    def config(self, r: pb.ConfigRecord) -> None:
        if r.resource_type not in (ResourceType.TOPIC, ResourceType.BROKER):
            raise RecordError(f"unknown config resource type {r.resource_type}")
        if not r.name:
            raise RecordError(f"empty config name for {r.resource_name!r}")
        if r.resource_type == ResourceType.TOPIC:
            if not self._topic_exists(r.resource_name):
                raise RecordError(f"topic {r.resource_name!r} does not exist")
        elif r.resource_name and not r.resource_name.isdecimal():
            raise RecordError(f"broker config resource {r.resource_name!r} is neither a broker "
                              "id nor empty (the cluster default)")
        resource = ConfigResource(ResourceType(r.resource_type), r.resource_name)
        current: Map = self.view().get(resource, _EMPTY)
        if r.HasField("value"):
            updated = current.set(r.name, r.value)
        elif r.name in current:
            updated = current.delete(r.name)
        else:
            updated = current
        if updated is not current:
            configs = self._write()
            if len(updated):
                configs[resource] = updated
            else:
                del configs[resource]
        self.touched.add(resource)

    def remove_topic(self, name: str) -> None:
        """A RemoveTopicRecord also removes the topic's configs (as Kafka's does)."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        if resource in self.view():
            del self._write()[resource]
        self.touched.add(resource)
