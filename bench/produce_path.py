"""The leader's Produce path in one process: a Produce request of an idempotent producer
(acks=all) through the Kafka listener's handler (kio's reader, ``KafkaApis.handle`` with the
client quotas' boundary, the hand-encoded answer, framed) down to the RocksDB write and the
wait for the high watermark, which a fake follower moves as soon as the request waits; and
the same batches through the gRPC ``Produce`` of ``brokerd.service`` (its call, not gRPC's
transport); and, with ``--path grpc-transport``, through grpc.aio's transport too: a server in
this process set up as a broker's gRPC listener (``brokerd.server``: its options, the request
metrics, serving gate and request-time quota interceptors, the guarded service with its size
limit), a client in a subprocess sending the serialized request ``--in-flight`` at a time, and
this process's CPU (every thread: grpc's, RocksDB's) per request; ``--path grpc-noop`` is the
same with a Produce that answers at once, the floor that gRPC's per-call work sets;
``grpc-stream`` and ``grpc-stream-noop`` send the requests on one ProduceStream (each with its
own correlation id). ``kafka-transport`` and ``kafka-noop`` are the same measure through the
Kafka listener (``KafkaListener`` with its request metrics, ``KafkaApis``; a client process
keeping ``--in-flight`` framed requests on one connection), so the two listeners' costs per
request compare directly. There the leader is alone in the ISR, so acks=all is answered at the
append (no follower can move the high watermark across the transport).

    python -m bench.produce_path --seconds 1
    python -m bench.produce_path --path grpc-noop --path grpc-transport --requests 2000
    python -m bench.produce_path --path kafka-transport --path grpc-stream --partitions 1 --records 700

Why: the leader's produce, its RocksDB write and the listener are about a third of the
brokers' Python CPU while librdkafka produces (docs/brokers.md, "Data path performance"),
spread over per-request and per-batch steps. Shape: 2 partitions x one batch of 770 records
of 256 bytes per request (librdkafka's ~200 KB requests under ``bench.kafka_clients``).
JSON lines: this process's CPU per request, medians and ranges of ``--repeats`` timings;
``--profile N`` prints cProfile's top N functions (per-thread CPU clock) instead.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import socket
import struct
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from brokerd.config import LogConfig
from brokerd.grpc_throttling import RequestTimeQuotas
from brokerd.kafka.apis import KafkaApis
from brokerd.kafka.batches import to_wire
from brokerd.kafka.codec import (build, encode_response, frame_request, frame_response, read_request,
                                 request_schema)
from brokerd.kafka.listener import KafkaListener
from brokerd.kafka.throttling import KafkaThrottling
from brokerd.log_store import LogStore
from brokerd.partition import Partition
from brokerd.partition_log import PartitionLog
from brokerd.producer_state import BatchMetadata, ProducerEntry
from brokerd.quotas import ClientQuotas
from brokerd.replica_manager import ReplicaManager
from brokerd.server import TRANSPORT_HEADROOM, ServingGate
from brokerd.service import BrokerService
from clients.records import RecordsBuilder
from common.metrics import RequestMetrics
from metadata.image import PartitionRegistration
from metadata.principal import ANONYMOUS, PrincipalMapper, Session
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.transport import EXCLUSIVE_BIND, add_service

from .common import cpu_seconds, emit, free_ports
from .follower_fetch import config

TOPIC, PID, EPOCH, LEADER, FOLLOWER = "bench", 4242, 0, 7, 8
PRODUCE = 0
_SIZE = struct.Struct(">i")


def batch(records: int, size: int, base_sequence: int) -> pb.RecordBatch:
    b = RecordsBuilder()
    for k in range(records):
        b.append(None, bytes(size), 1_700_000_000_000 + k)
    return b.build(producer_id=PID, producer_epoch=EPOCH, base_sequence=base_sequence)


class _Context:
    """What ``BrokerService.Produce`` asks of a gRPC call's context."""

    def auth_context(self) -> dict[str, Any]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"


class Harness:
    def __init__(self, store: LogStore, partitions: int, records: int, size: int) -> None:
        self.rm = ReplicaManager(config(), None, None, fenced=lambda: False)  # type: ignore[arg-type]
        tid = uuid.uuid4()
        self.partitions: list[Partition] = []
        for i in range(partitions):
            p = Partition(LEADER, TOPIC, tid, i, PartitionLog(store, tid, i), LogConfig())
            p.update(PartitionRegistration((LEADER, FOLLOWER), (LEADER, FOLLOWER), LEADER, 1, 1))
            self.rm.partitions[(tid, i)] = p
            self.rm.by_name[(TOPIC, i)] = p
            self.partitions.append(p)
        self.records = records
        # Every request sends the same sequence: the producer's entry is reset before each, so
        # that the batch is the next one (not a duplicate) and is written.
        self.sequence = 10 * records
        self.batch = batch(records, size, self.sequence)
        quotas = self.quotas = ClientQuotas(lambda: self.rm.image.client_quotas)
        self.apis = KafkaApis(self.rm, "PLAINTEXT", None, None, None,  # type: ignore[arg-type]
                              throttling=KafkaThrottling(quotas))
        self.service = BrokerService(self.rm, "PLAINTEXT", lambda: 1, pb.DescribeBrokerResponse,
                                     None, None, quotas=quotas)  # type: ignore[arg-type]
        wire = to_wire(self.batch)
        request = build(request_schema(PRODUCE, 9), {
            "transactional_id": None, "acks": -1, "timeout": 30_000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": i, "records": wire} for i in range(partitions)]}]})
        self.kafka_body = frame_request(PRODUCE, 9, 1, "bench", request)[4:]
        self.grpc_request = pb.ProduceRequest(acks=-1, timeout_ms=30_000, client_id="bench", topics=[
            pb.ProduceTopicData(name=TOPIC, partitions=[pb.ProducePartitionData(partition=i, batch=self.batch)
                                                        for i in range(partitions)])])
        self.session = Session(ANONYMOUS, "127.0.0.1")

    def _reset(self) -> None:
        for p in self.partitions:
            p.log.producers.producers[PID] = ProducerEntry(PID, EPOCH, 0, _deque(BatchMetadata(
                self.sequence - self.records, self.sequence - 1, 0, self.records - 1)))

    async def _replicate(self, work: Awaitable[Any]) -> Any:
        """``work`` (a produce), with the follower fetching at the leader's log end once the
        produce waits for the high watermark."""
        task = asyncio.ensure_future(work)
        while not task.done():
            await asyncio.sleep(0)
            for p in self.partitions:
                if p.delayed_produces:
                    self.rm.follower_fetched(p, FOLLOWER, p.log.log_end_offset)
        return task.result()

    async def kafka(self) -> None:
        self._reset()
        header, request = read_request(self.kafka_body, PRODUCE, 9)
        response = await self._replicate(self.apis.handle(header, request, self.session))
        frame_response(header, response)

    async def grpc(self) -> None:
        self._reset()
        answer = await self._replicate(self.service.Produce(self.grpc_request, _Context()))
        answer.SerializeToString()


class _ResetApis(KafkaApis):
    """The Kafka listener's APIs, with the producer's state reset before each Produce (as
    ``Harness.kafka`` does), or (``noop``) answering it at once."""

    def __init__(self, h: Harness, noop: bool) -> None:
        vars(self).update(vars(h.apis))
        self.h, self.noop = h, noop
        self._noop_answer = {"responses": [{"name": TOPIC, "partition_responses": [
            {"index": p.index, "error_code": 0, "base_offset": 0, "log_append_time": None, "log_start_offset": 0,
             "error_message": None, "record_errors": []} for p in h.partitions]}]}

    async def handle(self, header: Any, request: Any, session: Session) -> Any:
        self.h._reset()
        if self.noop:
            return encode_response(header, self._noop_answer)
        return await super().handle(header, request, session)


class _ResetService(BrokerService):
    """The broker's service, with the producer's state reset before each Produce (as
    ``Harness.grpc`` does), or (``noop``) answering at once."""

    def __init__(self, h: Harness, noop: bool) -> None:
        vars(self).update(vars(h.service))
        self.h, self.noop = h, noop

    async def Produce(self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext) -> pb.ProduceResponse:
        self.h._reset()
        return pb.ProduceResponse() if self.noop else await super().Produce(request, context)

    async def _stream_answer(self, request: pb.ProduceRequest, access: Any, user: str) -> pb.ProduceResponse:
        self.h._reset()
        if self.noop:
            return pb.ProduceResponse(correlation_id=request.correlation_id)
        return await super()._stream_answer(request, access, user)


async def over_transport(path: str, requests: int, in_flight: int, partitions: int, records: int,
                         size: int) -> dict[str, Any]:
    """This process's CPU per Produce served by grpc.aio (``grpc-transport``, ``grpc-noop``; with
    ``-stream``, the requests pipelined on one ProduceStream)."""
    with tempfile.TemporaryDirectory() as d:
        store = LogStore(d)
        h = Harness(store, partitions, records, size)
        for p in h.partitions:  # alone in the ISR: acks=all answered at the append
            p.update(PartitionRegistration((LEADER, FOLLOWER), (LEADER,), LEADER, 1, 2))
        gate = ServingGate(LEADER)
        gate.open()
        # as a broker's listener (brokerd.server): request metrics, the gate, the request-time
        # quotas, the guard's size limit (socket.request.max.bytes' default)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", (100 << 20) + TRANSPORT_HEADROOM),
                                          ("grpc.max_send_message_length", 256 << 20), EXCLUSIVE_BIND],
                                 interceptors=[RequestMetrics(CollectorRegistry()).interceptor("GRPC"), gate,
                                               RequestTimeQuotas(h.quotas, PrincipalMapper())])
        add_service(server, broker_pb2_grpc.add_BrokerServicer_to_server, _ResetService(h, path.endswith("noop")),
                    max_bytes=100 << 20)
        port = free_ports(1)[0]
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        body = Path(d) / "request"
        body.write_bytes(h.grpc_request.SerializeToString())  # before the client starts: nothing waits
        client = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.produce_path", "--client",
                                                      str(port), str(body), str(requests), str(in_flight),
                                                      *(["--stream"] if "stream" in path else []))
        start_cpu, start = cpu_seconds(os.getpid()), time.perf_counter()
        if await client.wait():
            raise RuntimeError(f"the client of {path} failed (exit code {client.returncode})")
        cpu, wall = cpu_seconds(os.getpid()) - start_cpu, time.perf_counter() - start
        appended = sum(p.log.log_end_offset for p in h.partitions)  # records: every request's were written
        await server.stop(0)
        await store.close()
    return {"bench": "produce_path", "path": path, "partitions": partitions, "records": records, "size": size,
            "requests": requests, "in_flight": in_flight, "us_per_request": round(cpu / requests * 1e6, 1),
            "wall_s": round(wall, 2), "appended": appended}


async def over_kafka_listener(path: str, requests: int, in_flight: int, partitions: int, records: int,
                              size: int) -> dict[str, Any]:
    """``over_transport``'s measure through the Kafka listener (``kafka-transport``, ``kafka-noop``):
    a ``KafkaListener`` in this process serving ``KafkaApis`` (its request metrics on, as a
    broker's), a client process keeping ``in_flight`` framed Produce requests on one connection."""
    with tempfile.TemporaryDirectory() as d:
        store = LogStore(d)
        h = Harness(store, partitions, records, size)
        for p in h.partitions:  # alone in the ISR: acks=all answered at the append
            p.update(PartitionRegistration((LEADER, FOLLOWER), (LEADER,), LEADER, 1, 2))
        port = free_ports(1)[0]
        listener = KafkaListener("KAFKA", "127.0.0.1", port, _ResetApis(h, path.endswith("noop")), 100 << 20,
                                 RequestMetrics(CollectorRegistry()))
        await listener.bind()
        await listener.start()
        body = Path(d) / "request"
        body.write_bytes(_SIZE.pack(len(h.kafka_body)) + h.kafka_body)
        client = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.produce_path", "--client",
                                                      str(port), str(body), str(requests), str(in_flight),
                                                      "--kafka")
        start_cpu, start = cpu_seconds(os.getpid()), time.perf_counter()
        if await client.wait():
            raise RuntimeError(f"the client of {path} failed (exit code {client.returncode})")
        cpu, wall = cpu_seconds(os.getpid()) - start_cpu, time.perf_counter() - start
        appended = sum(p.log.log_end_offset for p in h.partitions)  # records: every request's were written
        await listener.stop()
        await store.close()
    return {"bench": "produce_path", "path": path, "partitions": partitions, "records": records, "size": size,
            "requests": requests, "in_flight": in_flight, "us_per_request": round(cpu / requests * 1e6, 1),
            "wall_s": round(wall, 2), "appended": appended}


def send_framed(port: int, frame: bytes, requests: int, in_flight: int) -> None:
    """The client of ``over_kafka_listener``: the framed request sent ``requests`` times on one
    connection, ``in_flight`` ahead of their answers (a blocking socket: this process's CPU is
    not measured)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        written = 0
        for _ in range(min(in_flight, requests)):
            s.sendall(frame)
            written += 1
        for _ in range(requests):
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                raise RuntimeError("the listener closed the connection")
            left = int.from_bytes(head, "big")
            while left:
                got = len(s.recv(min(left, 1 << 16)))
                if not got:
                    raise RuntimeError("the listener closed the connection")
                left -= got
            if written < requests:
                s.sendall(frame)
                written += 1


async def send(port: int, body: bytes, requests: int, in_flight: int) -> None:
    """The client of ``over_transport``: the serialized request sent ``requests`` times."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    produce = channel.unary_unary("/kraft.broker.Broker/Produce")
    await produce(body, wait_for_ready=True)
    left = requests - 1

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await produce(body)
    await asyncio.gather(*(sender() for _ in range(in_flight)))
    await channel.close()


async def send_streamed(port: int, body: bytes, requests: int, in_flight: int) -> None:
    """``send`` on one ProduceStream: ``in_flight`` requests written ahead of their answers."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    await channel.channel_ready()
    call = channel.stream_stream("/kraft.broker.Broker/ProduceStream")()
    written = 0

    def numbered(n: int) -> bytes:  # the request with correlation_id n (a scalar field's last value wins)
        return body + pb.ProduceRequest(correlation_id=n).SerializeToString()
    for _ in range(min(in_flight, requests)):
        written += 1
        await call.write(numbered(written))
    for _ in range(requests):
        if await call.read() is grpc.aio.EOF:
            raise RuntimeError("the broker ended the stream")
        if written < requests:
            written += 1
            await call.write(numbered(written))
    await call.done_writing()
    await channel.close()


def _deque(*items: BatchMetadata) -> Any:
    e = ProducerEntry(PID, EPOCH, 0)
    e.batches.extend(items)
    return e.batches


async def measure(path: str, seconds: float, repeats: int, partitions: int, records: int, size: int,
                  profile: int) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory() as d:
        store = LogStore(d)
        h = Harness(store, partitions, records, size)
        once: Callable[[], Awaitable[None]] = h.kafka if path == "kafka" else h.grpc
        n, start = 0, time.thread_time()
        while time.thread_time() - start < 0.2:
            await once()
            n += 1
        calls = max(1, int(n * seconds / 0.2 / repeats))
        timings = []
        prof = cProfile.Profile(time.thread_time) if profile else None
        for _ in range(repeats):
            if prof is not None:
                prof.enable()
            start = time.thread_time()
            for _ in range(calls):
                await once()
            timings.append((time.thread_time() - start) / calls * 1e6)
            if prof is not None:
                prof.disable()
        await store.close()
    if prof is not None:
        print(f"# {path}: {calls * repeats} requests")
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
        return None
    return {"bench": "produce_path", "path": path, "partitions": partitions, "records": records, "size": size,
            "calls": calls, "us_per_request": round(statistics.median(timings), 1),
            "range": [round(min(timings), 1), round(max(timings), 1)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per path (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per path, their median reported")
    ap.add_argument("--path", choices=("kafka", "grpc", "kafka-transport", "kafka-noop", "grpc-transport",
                                       "grpc-noop", "grpc-stream", "grpc-stream-noop"), action="append",
                    help="default: kafka and grpc")
    ap.add_argument("--requests", type=int, default=2000, help="requests over the gRPC transport")
    ap.add_argument("--in-flight", type=int, default=5, help="requests in flight over the gRPC transport")
    ap.add_argument("--client", nargs=4, metavar=("PORT", "FILE", "N", "IN_FLIGHT"), help=argparse.SUPPRESS)
    ap.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kafka", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--records", type=int, default=770)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions instead")
    args = ap.parse_args()
    if args.client:
        port, body, n, in_flight = args.client
        if args.kafka:
            send_framed(int(port), Path(body).read_bytes(), int(n), int(in_flight))
            return
        asyncio.run((send_streamed if args.stream else send)(int(port), Path(body).read_bytes(), int(n),
                                                            int(in_flight)))
        return
    for path in args.path or ("kafka", "grpc"):
        if path.startswith("kafka-"):
            emit(asyncio.run(over_kafka_listener(path, args.requests, args.in_flight, args.partitions, args.records,
                                                 args.size)))
            continue
        if path.startswith("grpc-"):
            emit(asyncio.run(over_transport(path, args.requests, args.in_flight, args.partitions, args.records,
                                            args.size)))
            continue
        result = asyncio.run(measure(path, args.seconds, args.repeats, args.partitions, args.records, args.size,
                                     args.profile))
        if result is not None:
            emit(result)


if __name__ == "__main__":
    main()
