"""Stand-ins for the producer's cluster view: one broker (1, ``fake:1``) leading partition 0 of
topic ``t``; tests give the broker's stub."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc

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
            return broker if hasattr(broker, "ProduceStream") else _WithProduceStream(broker)

        async def close(self) -> None: ...

    monkeypatch.setattr(producer, "ClusterView", FakeCluster)
    monkeypatch.setattr(producer, "Connections", Connections)


class _WithProduceStream:
    """A fake broker's stub whose ProduceStream is served by the fake's own ``Produce``."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    def ProduceStream(self) -> "_StreamOverUnary":
        return _StreamOverUnary(self._broker)


class _StreamOverUnary:
    """Each request written is answered by the fake's ``Produce``, as the broker's stream
    serves it; an error that call raises ends the stream with it (a dropped connection)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.answers: asyncio.Queue[Any] = asyncio.Queue()
        self.error: grpc.aio.AioRpcError | None = None
        self.serving: set[asyncio.Task[None]] = set()

    async def initial_metadata(self) -> tuple:
        return ()

    def done(self) -> bool:
        return self.error is not None

    async def write(self, request: Any) -> None:
        if self.error is not None:
            raise self.error
        task = asyncio.get_running_loop().create_task(self._serve(request))
        self.serving.add(task)
        task.add_done_callback(self.serving.discard)

    async def _serve(self, request: Any) -> None:
        try:
            answer = await self.broker.Produce(request, timeout=None)
        except grpc.aio.AioRpcError as e:
            self.error = self.error or e
            self.answers.put_nowait(e)
            return
        answer.correlation_id = request.correlation_id
        self.answers.put_nowait(answer)

    async def read(self) -> Any:
        answer = await self.answers.get()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def cancel(self) -> bool:
        for task in self.serving:
            task.cancel()
        return True
