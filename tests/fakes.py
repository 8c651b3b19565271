"""Stand-ins for the producer's cluster view: one broker (1, ``fake:1``) leading partition 0 of
topic ``t``; tests give the broker's stub."""
from __future__ import annotations

from typing import Any

from clients.cluster_view import PartitionInfo, TopicInfo


class FakeCluster:
    def __init__(self, *a: object, **kw: object) -> None:
        self.brokers = {1: "fake:1"}
        self.topics = {"t": TopicInfo("t", None, (PartitionInfo(0, 1, 0, (1,), (1,)),), available=(0,))}

    def start(self) -> None: ...
    async def close(self) -> None: ...
    def add(self, topic: str) -> None: ...
    def request_update(self) -> int: return 0
    def leader_for(self, topic: str, partition: int) -> int: return 1
    def partition_count(self, topic: str) -> int: return 1


def fake_broker(monkeypatch: Any, broker: object) -> None:
    """Producers created from now on see FakeCluster and send every request to ``broker``
    (an object with the methods of the Broker stub they call)."""
    from clients import producer

    class Connections:
        def __init__(self, tls: object = None) -> None: ...

        def stub(self, address: str) -> object:
            return broker

        async def close(self) -> None: ...

    monkeypatch.setattr(producer, "ClusterView", FakeCluster)
    monkeypatch.setattr(producer, "Connections", Connections)
