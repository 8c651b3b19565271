"""What a tool needs to know about a cluster before it reads or writes: its topics and their
partitions (Metadata from any broker) and where each partition's log starts and ends, or
where a time falls in it (ListOffsets at the leaders). The consumer-groups tool and the Spark
topic source plan from it."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Self

import grpc

from protos import broker_pb2 as pb

from common.tls import TLSConfig

from .cluster_view import ClientError, ClusterView, Connections, TopicInfo, parse_bootstrap
from common.errors import ErrorCode, KafkaError, RETRIABLE

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1
RETRY_BACKOFF_S = 0.2


class Admin:
    def __init__(self, bootstrap: str | list[str], *, timeout_ms: int = 30000, tls: TLSConfig | None = None) -> None:
        self.connections = Connections(tls)
        self.cluster = ClusterView(parse_bootstrap(bootstrap), self.connections)
        self.timeout_ms = timeout_ms

    async def __aenter__(self) -> Self:
        self.cluster.start()
        await self.cluster.refresh()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cluster.close()
        await self.connections.close()

    async def topics(self) -> dict[str, TopicInfo]:
        """Every topic the cluster has now (one Metadata request for all of them)."""
        wanted, self.cluster.wanted = self.cluster.wanted, set()
        try:
            await self.cluster.refresh()
        finally:
            self.cluster.wanted = wanted
        return dict(self.cluster.topics)

    async def partitions_of(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions; [] when the cluster has no such topic (one Metadata round,
        not a wait for it to appear)."""
        self.cluster.add(topic)
        try:  # a round of our own: the background refresh may be one that began before the add
            await asyncio.wait_for(self.cluster.refresh(), self.timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise ClientError(f"no broker answered a metadata request within {self.timeout_ms} ms") from None
        self.cluster.check_authorized(topic)
        t = self.cluster.topics.get(topic)
        return [(topic, p.partition) for p in t.partitions] if t is not None and not t.error else []

    async def describe_brokers(self, ids: list[int] | None = None) -> dict[int, pb.DescribeBrokerResponse]:
        """Each broker's own view of its replicas (sizes, offsets, followers), for operator tools;
        brokers that do not answer are left out."""
        addresses = {b: a for b, a in self.cluster.brokers.items() if ids is None or b in ids}

        async def one(address: str) -> pb.DescribeBrokerResponse | None:
            try:
                r = await self.connections.stub(address).DescribeBroker(
                    pb.DescribeBrokerRequest(), timeout=self.timeout_ms / 1000)
            except grpc.aio.AioRpcError:
                return None
            if r.error_code:  # CLUSTER_AUTHORIZATION_FAILED: asking another broker changes nothing
                raise KafkaError(ErrorCode.of(r.error_code), r.error_message)
            return r
        answers = await asyncio.gather(*(one(a) for a in addresses.values()))
        return {b: r for b, r in zip(addresses, answers, strict=True) if r is not None}

    async def alter_replica_log_dirs(self, broker: int, moves: dict[TopicPartition, str]
                                     ) -> dict[TopicPartition, KafkaError | None]:
        """AlterReplicaLogDirs at ``broker``: each replica to the log dir named (an absolute path
        of its ``log.dirs``). Answers each replica's error (None: moving, or already there);
        REPLICA_NOT_AVAILABLE means the broker does not host it yet and will create it there."""
        address = self.cluster.brokers.get(broker)
        if address is None:
            raise ClientError(f"broker {broker} is not in the cluster's metadata")
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (topic, partition), path in moves.items():
            by_dir.setdefault(path, {}).setdefault(topic, []).append(partition)
        req = pb.AlterReplicaLogDirsRequest(dirs=[pb.AlterReplicaLogDir(path=path, topics=[
            pb.AlterReplicaLogDirsTopic(name=t, partitions=ps) for t, ps in topics.items()])
            for path, topics in by_dir.items()])
        try:
            r = await self.connections.stub(address).AlterReplicaLogDirs(req, timeout=self.timeout_ms / 1000)
        except grpc.aio.AioRpcError as e:
            raise ClientError(f"broker {broker} at {address} did not answer: {e.details()}") from None
        return {(t.name, x.partition): KafkaError(ErrorCode.of(x.error_code), x.error_message or None)
                if x.error_code else None for t in r.topics for x in t.partitions}

    async def describe_log_dirs(self, broker: int) -> pb.DescribeLogDirsResponse:
        """DescribeLogDirs at ``broker``: its log dirs with the replicas (and future replicas) in each."""
        address = self.cluster.brokers.get(broker)
        if address is None:
            raise ClientError(f"broker {broker} is not in the cluster's metadata")
        try:
            r = await self.connections.stub(address).DescribeLogDirs(pb.DescribeLogDirsRequest(),
                                                                      timeout=self.timeout_ms / 1000)
        except grpc.aio.AioRpcError as e:
            raise ClientError(f"broker {broker} at {address} did not answer: {e.details()}") from None
        if r.error_code:
            raise KafkaError(ErrorCode.of(r.error_code), r.error_message or None)
        return r

    async def offsets(self, which: dict[TopicPartition, int], *, read_committed: bool = False
                      ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets for each partition: -2 its log start, -1 its high watermark (with
        ``read_committed``, its last stable offset), else the first offset whose record is at
        or after that time in ms (-1 when none is). Answers ``(offset, timestamp)``. A leader
        that is gone or moving is waited for (new metadata, then again) until ``timeout_ms``;
        any other error raises KafkaError."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        await self._at_leaders("ListOffsets", dict(which),
                               lambda pending: self._list_offsets(pending, out, read_committed))
        return out

    async def delete_records(self, which: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """DeleteRecords for each partition: its log start moves up to the offset (-1: its high
        watermark). Answers each partition's new log start (its low watermark); leaders are
        found and waited for as in ``offsets``, any other error raises KafkaError."""
        out: dict[TopicPartition, int] = {}
        await self._at_leaders("DeleteRecords", dict(which), lambda pending: self._delete_records(pending, out))
        return out

    async def _at_leaders(self, what: str, pending: dict[TopicPartition, int],
                          one_round: Callable[[dict[TopicPartition, int]], Awaitable[str]]) -> None:
        """Rounds of ``one_round`` (which removes what it answered from ``pending`` and says why
        the rest is not), with new metadata between them, until nothing is pending or
        ``timeout_ms`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        while True:
            last = await one_round(pending)
            if not pending:
                return
            if loop.time() > deadline:
                raise ClientError(f"no leader answered {what} for {', '.join(f'{t}-{p}' for t, p in pending)} "
                                  f"within {self.timeout_ms} ms: {last}")
            version = self.cluster.request_update()
            try:
                await self.cluster.await_update(version, max(0.0, min(1.0, deadline - loop.time())))
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _list_offsets(self, pending: dict[TopicPartition, int], out: dict[TopicPartition, tuple[int, int]],
                            read_committed: bool = False) -> str:
        """One round: answered partitions move from ``pending`` to ``out``; returns why the
        others are still pending."""
        last = "no leader"
        for leader, group in (await self._by_leader(pending)).items():
            req = pb.ListOffsetsRequest(isolation_level=int(read_committed))
            topics: dict[str, Any] = {}
            for t, p in group:
                (topics.get(t) or topics.setdefault(t, req.topics.add(name=t))).partitions.add(
                    partition=p, timestamp=pending[(t, p)])
            try:
                r = await self.connections.stub(self.cluster.brokers[leader]).ListOffsets(req, timeout=10)
            except grpc.aio.AioRpcError as e:
                last = f"broker {leader}: {e.code().name}"
                continue
            last = _take(r, pending, lambda a: (a.offset, a.timestamp), out) or last
        return last

    async def _by_leader(self, pending: dict[TopicPartition, int]) -> dict[int, list[TopicPartition]]:
        """The pending partitions whose leader is known, by leader."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            self.cluster.add(tp[0])
            await self.cluster.wait_on_metadata(tp[0], tp[1], self.timeout_ms)
            leader = self.cluster.leader_for(*tp)
            if leader is not None and leader in self.cluster.brokers:
                by_leader.setdefault(leader, []).append(tp)
        return by_leader

    async def _delete_records(self, pending: dict[TopicPartition, int], out: dict[TopicPartition, int]) -> str:
        """One round of DeleteRecords, as ``_list_offsets``."""
        last = "no leader"
        for leader, group in (await self._by_leader(pending)).items():
            req = pb.DeleteRecordsRequest(timeout_ms=self.timeout_ms)
            topics: dict[str, Any] = {}
            for t, p in group:
                (topics.get(t) or topics.setdefault(t, req.topics.add(name=t))).partitions.add(
                    partition=p, offset=pending[(t, p)])
            try:
                # the leader answers when its followers' log starts moved, within timeout_ms
                r = await self.connections.stub(self.cluster.brokers[leader]).DeleteRecords(
                    req, timeout=self.timeout_ms / 1000 + 5)
            except grpc.aio.AioRpcError as e:
                last = f"broker {leader}: {e.code().name}"
                continue
            last = _take(r, pending, lambda a: a.low_watermark, out) or last
        return last

    # -- transactions (kraft transactions, kafka-transactions.sh) -------------------------------------

    async def list_transactions(self, states: list[str] | None = None, producer_ids: list[int] | None = None,
                                min_duration_ms: int = -1) -> list[tuple[int, pb.ListedTransaction]]:
        """Every broker's coordinated transactions, as (coordinator id, transaction); a broker
        that does not answer is left out."""
        req = pb.ListTransactionsRequest(states=states or [], producer_ids=producer_ids or [],
                                         min_duration_ms=min_duration_ms)

        async def one(address: str) -> pb.ListTransactionsResponse | None:
            try:
                return await self.connections.stub(address).ListTransactions(req, timeout=self.timeout_ms / 1000)
            except grpc.aio.AioRpcError:
                return None
        brokers = dict(self.cluster.brokers)
        answers = await asyncio.gather(*(one(a) for a in brokers.values()))
        out: list[tuple[int, pb.ListedTransaction]] = []
        for bid, r in zip(brokers, answers, strict=True):
            if r is None:
                continue
            if r.error_code and r.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                raise KafkaError(ErrorCode.of(r.error_code), "ListTransactions failed")
            out.extend((bid, t) for t in r.transactions)
        return sorted(out, key=lambda x: x[1].transactional_id)

    async def describe_transaction(self, transactional_id: str) -> tuple[int, pb.DescribedTransaction]:
        """The transaction as its coordinator keeps it, with the coordinator's id; KafkaError
        (TRANSACTIONAL_ID_NOT_FOUND, ...) otherwise. Retried while the coordinator moves or loads."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        last = ErrorCode.COORDINATOR_NOT_AVAILABLE
        while loop.time() < deadline:
            for address in list(self.cluster.brokers.values()) or self.cluster.bootstrap:
                try:
                    found = await self.connections.stub(address).FindCoordinator(
                        pb.FindCoordinatorRequest(key=transactional_id, key_type=1), timeout=self.timeout_ms / 1000)
                    if found.error_code:
                        last = ErrorCode.of(found.error_code)
                        if last not in RETRIABLE:
                            raise KafkaError(last, found.error_message)
                        break
                    r = await self.connections.stub(f"{found.host}:{found.port}").DescribeTransactions(
                        pb.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                        timeout=self.timeout_ms / 1000)
                except grpc.aio.AioRpcError:
                    last = ErrorCode.NETWORK_EXCEPTION
                    continue
                d = r.transactions[0]
                last = ErrorCode.of(d.error_code)
                if last == ErrorCode.NONE:
                    return found.node_id, d
                if last not in RETRIABLE:
                    raise KafkaError(last, f"transactional id {transactional_id}" if
                                     last == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND else None)
                break
            await asyncio.sleep(RETRY_BACKOFF_S)
        raise KafkaError(last, f"no coordinator described transactional id {transactional_id} within "
                               f"{self.timeout_ms} ms")

    async def describe_producers(self, tps: list[TopicPartition]) -> dict[TopicPartition, list[pb.ProducerStateView]]:
        """The producers each partition's leader keeps state for (Kafka's DescribeProducers)."""
        out: dict[TopicPartition, list[pb.ProducerStateView]] = {}
        for leader, group in (await self._leaders_of(tps)).items():
            req = pb.DescribeProducersRequest()
            topics: dict[str, Any] = {}
            for t, p in group:
                (topics.get(t) or topics.setdefault(t, req.topics.add(name=t))).partitions.append(p)
            r = await self.connections.stub(self.cluster.brokers[leader]).DescribeProducers(
                req, timeout=self.timeout_ms / 1000)
            for t in r.topics:
                for d in t.partitions:
                    if d.error_code:
                        raise KafkaError(ErrorCode.of(d.error_code), f"{t.name}-{d.partition}: {d.error_message}")
                    out[(t.name, d.partition)] = list(d.active_producers)
        return out

    async def abort_transaction(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Write an abort marker for the producer's open transaction in one partition
        (WriteTxnMarkers to its leader), as kafka-transactions.sh abort does for a hanging one."""
        (leader, _), = (await self._leaders_of([tp])).items()
        req = pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch, topics=[pb.WritableTxnMarkerTopic(name=tp[0], partitions=[tp[1]])])])
        try:
            r = await self.connections.stub(self.cluster.brokers[leader]).WriteTxnMarkers(
                req, timeout=self.timeout_ms / 1000)
        except grpc.aio.AioRpcError as e:
            raise ClientError(e.details() or e.code().name) from None
        for m in r.markers:
            for t in m.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaError(ErrorCode.of(p.error_code), p.error_message or None)

    async def _leaders_of(self, tps: list[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """``_by_leader``, where a partition without a leader is an error."""
        by_leader = await self._by_leader(dict.fromkeys(tps, 0))
        led = {tp for group in by_leader.values() for tp in group}
        for t, p in tps:
            if (t, p) not in led:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{t}-{p} has no leader")
        return by_leader


def _take(resp: Any, pending: dict[TopicPartition, int], value: Callable[[Any], Any], out: dict[TopicPartition, Any]
          ) -> str:
    """A leader's per-partition answers: answered partitions move from ``pending`` to ``out``
    (as ``value`` reads them); returns why the last retriable one is still pending ("" if
    none); any other error raises KafkaError."""
    last = ""
    for t in resp.topics:
        for a in t.partitions:
            code = ErrorCode.of(a.error_code)
            if code in RETRIABLE:
                last = f"{t.name}-{a.partition}: {code.name}"
            elif code != ErrorCode.NONE:
                raise KafkaError(code, a.error_message)
            else:
                out[(t.name, a.partition)] = value(a)
                pending.pop((t.name, a.partition), None)
    return last
