"""The console's one way to the cluster: a controller client (quorum, brokers, topics) and a
broker admin client (offsets, records), kept open for the server's life, with the same
clients and TLS settings (``--command-config``) as the ``kraft`` tools."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from clients import Producer
from clients.consumer_groups import GroupAdmin
from clients.cluster_view import ClientError
from metadata.client import ControllerClient
from common.errors import KafkaError, ErrorCode
from metadata.shell.source import MetadataSource, SourceError
from protos import controller_pb2 as pb
from common.tls import TLSConfig

if TYPE_CHECKING:
    from metadata.shell.live import LiveSource

T = TypeVar("T")


class Cluster:
    """What every page asks through; ``start`` before the first request, ``close`` after the last."""

    def __init__(self, bootstrap_controller: str, bootstrap_server: str, tls: TLSConfig | None = None,
                 timeout: float = 15.0) -> None:
        self.bootstrap_controller = bootstrap_controller
        self.bootstrap_server = bootstrap_server
        self.tls = tls
        self._source: LiveSource | None = None  # the metadata log, fetched as metadata-shell does
        self._shell_lock = asyncio.Lock()  # the source is one thread's at a time
        self.controller = ControllerClient(bootstrap_controller, timeout=timeout, attempt_timeout=5.0, tls=tls,
                                           give_up_unconnectable=True)  # a page answers at once, as a tool
        self.timeout_ms = int(timeout * 1000)
        self._admin: GroupAdmin | None = None
        self._producer: Producer | None = None
        self._starting = asyncio.Lock()  # two first requests at once start one client, not two

    async def start(self) -> None:
        await self.controller.__aenter__()

    async def close(self) -> None:
        if self._source is not None:
            await asyncio.to_thread(self._source.close)
        if self._producer is not None:
            await self._producer.close()
        if self._admin is not None:
            await self._admin.__aexit__(None, None, None)
        await self.controller.__aexit__(None, None, None)

    async def brokers(self) -> GroupAdmin:
        """The admin client, connected on first use (the overview needs no broker); one that
        found no broker is closed, and the next page tries a new one."""
        async with self._starting:
            if self._admin is None:
                admin = GroupAdmin(self.bootstrap_server, timeout_ms=self.timeout_ms, tls=self.tls)
                try:
                    await admin.__aenter__()
                except BaseException:
                    await admin.__aexit__(None, None, None)
                    raise
                self._admin = admin
        return self._admin

    async def producer(self) -> Producer:
        """One idempotent producer for every message the console sends, started on first use."""
        async with self._starting:
            if self._producer is None:
                self._producer = await Producer(self.bootstrap_server, tls=self.tls).start()
        return self._producer

    async def metadata_log(self, read: Callable[[MetadataSource], T]) -> T:
        """``read`` run over the committed metadata log as ``metadata-shell
        --bootstrap-controller`` holds it (fetched on first use, caught up before each read),
        in a thread: the shell's source is synchronous and one reader's at a time."""
        from metadata.shell.live import LiveSource

        def run() -> T:
            if self._source is None:
                self._source = LiveSource(self.bootstrap_controller, timeout=self.timeout_ms / 1000, tls=self.tls)
            else:
                self._source.refresh()
            return read(self._source)
        async with self._shell_lock:
            return await asyncio.to_thread(run)

    async def quorum(self) -> pb.DescribeQuorumResponse:
        return await self.controller.describe_quorum(pb.DescribeQuorumRequest())

    async def describe_cluster(self) -> pb.DescribeClusterResponse:
        return await self.controller.describe_cluster(pb.DescribeClusterRequest())

    async def topics(self, names: list[str] | None = None) -> list[pb.TopicDescription]:
        """Topics with their partitions (every topic when ``names`` is empty); a named topic
        that does not exist raises UNKNOWN_TOPIC_OR_PARTITION."""
        r = await self.controller.describe_topics(pb.DescribeTopicsRequest(names=names or []))
        for t in r.topics:
            check(t.error_code, t.error_message or f"Topic '{t.name}' does not exist.")
        return list(r.topics)

    async def min_isr_default(self) -> int:
        """The cluster-wide dynamic min.insync.replicas, else 1 (as ``kraft topics describe``)."""
        r = await self.controller.describe_configs(pb.DescribeConfigsRequest(resources=[
            pb.AlterConfigsResource(resource_type=pb.BROKER, resource_name="")]))
        return int(next((e.value for res in r.resources for e in res.configs
                         if e.name == "min.insync.replicas" and not e.is_default), "1"))

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> None:
        t = pb.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                              configs=configs)
        r = await self.controller.create_topics(pb.CreateTopicsRequest(topics=[t]))
        check(r.topics[0].error_code, r.topics[0].error_message)

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> None:
        """IncrementalAlterConfigs on a topic, as ``kraft configs --alter --add-config
        --delete-config``: the controller validates every value and answers in one line."""
        changes = [pb.AlterableConfig(name=k, op=pb.AlterableConfig.SET, value=v) for k, v in set_.items()]
        changes += [pb.AlterableConfig(name=k, op=pb.AlterableConfig.DELETE) for k in delete]
        r = await self.controller.incremental_alter_configs(pb.IncrementalAlterConfigsRequest(resources=[
            pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name=name, configs=changes)]))
        check(r.resources[0].error_code, r.resources[0].error_message)

    async def delete_topic(self, name: str) -> None:
        r = await self.controller.delete_topics(pb.DeleteTopicsRequest(names=[name]))
        check(r.topics[0].error_code, r.topics[0].error_message)


def check(code: int, message: str) -> None:
    """Raise Kafka's error for a non-zero ``code``, as the ``kraft`` tools report it."""
    c = ErrorCode.of(code)
    if c != ErrorCode.NONE:
        raise KafkaError(c, message)


#: What the pages catch and show as one line: every failure the clients report in Kafka's words,
#: and the metadata shell's (a history out of reach, a quorum that does not answer).
CLUSTER_ERRORS: tuple[type[Exception], ...] = (KafkaError, KafkaError, ClientError, SourceError)


def error_status(e: Exception) -> int:
    """The HTTP status for a cluster's error: 404 for what does not exist, 403 for what the
    principal may not do, 400 for a refused request, 503 when the cluster does not answer."""
    if isinstance(e, SourceError):  # the quorum did not answer the shell's fetch
        return 503
    code: Any = getattr(e, "code", None)
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
        return 404
    if code is not None and code.name.endswith("AUTHORIZATION_FAILED"):
        return 403
    if code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_CONTROLLER, None):
        return 503
    return 400
