"""The produce gap after ``kill -9`` of a partition's leader, with default timings
(broker.session.timeout.ms 9000, broker.heartbeat.interval.ms 2000, election 500 ms).

    python -m bench.produce_failover --kills 3

Three controllers and three brokers run as processes; one producer (acks=all, replication
factor 3) sends a record every 10 ms and waits for each acknowledgement. Each round kills the
partition's leader with SIGKILL and emits one JSON line: ``gap_s``, the longest time between
two acknowledgements (the dead leader cannot say it is gone: the controller moves leadership
once its session expires), and ``rejoin_s``, how long the restarted broker took to be unfenced
again (a new incarnation waits until the old one's session has expired, as in Kafka). No
acknowledged record may be missing afterwards (checked by reading the partition back).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import time
from itertools import pairwise

from clients import Consumer, Producer
from metadata.client import ControllerClient
from kraft.dev_quorum import DevQuorum, consecutive_ports
from protos import controller_pb2 as pb

from .common import emit

TOPIC = "gap"


async def leader_of(q: DevQuorum) -> int:
    async with ControllerClient(q.bootstrap, timeout=30, attempt_timeout=1) as c:
        r = await c.describe_topics(pb.DescribeTopicsRequest(names=[TOPIC]))
        return r.topics[0].partitions[0].leader


async def round_(q: DevQuorum, k: int, acked: list[bytes]) -> dict:
    times: list[float] = []
    stop = asyncio.Event()
    killed = math.inf
    flowing_again = asyncio.Event()  # acks have flowed again for a while after the kill

    async def produce(p: Producer) -> None:
        i = 0
        while not stop.is_set():
            value = b"%d-%d" % (k, i)
            try:
                await p.send_and_wait(TOPIC, value)
                acked.append(value)
                times.append(time.monotonic())
                if times[-1] >= killed + 3:
                    flowing_again.set()
            except Exception:
                pass  # delivery.timeout.ms: counted in the gap
            i += 1
            await asyncio.sleep(0.01)

    async with Producer(q.bootstrap_servers, acks="all", linger_ms=0) as p:
        task = asyncio.create_task(produce(p))
        await asyncio.sleep(3)
        victim = await leader_of(q)
        killed = time.monotonic()
        q.kill(victim)
        await flowing_again.wait()
        stop.set()
        await task
    gaps = [b - a for a, b in pairwise(times)]
    restarted = time.monotonic()
    q.start_node(victim)
    await q.wait_for_brokers(timeout=60)
    return {"bench": "produce-failover", "round": k, "killed": victim, "gap_s": round(max(gaps), 2),
            "first_ack_after_kill_s": round(min(t for t in times if t > killed) - killed, 2),
            "rejoin_s": round(time.monotonic() - restarted, 2)}


async def run(kills: int) -> None:
    q = DevQuorum(None, consecutive_ports(9), brokers=3,
                  broker_extra={"broker.heartbeat.interval.ms": "2000"})
    q.start()
    acked: list[bytes] = []
    try:
        await q.wait_for_brokers()
        async with ControllerClient(q.bootstrap, timeout=30) as c:
            await c.create_topics(pb.CreateTopicsRequest(topics=[
                pb.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3)]))
        for k in range(kills):
            emit(await round_(q, k, acked))
        async with Consumer(q.bootstrap_servers, auto_offset_reset="earliest") as c:
            await c.subscribe(TOPIC)
            got: set[bytes] = set()
            deadline = time.monotonic() + 60
            while not set(acked) <= got and time.monotonic() < deadline:
                got.update(r.value for r in await c.poll(1000) if r.value is not None)
        emit({"bench": "produce-failover", "acknowledged": len(acked), "lost": len(set(acked) - got)})
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=3)
    asyncio.run(run(ap.parse_args().kills))


if __name__ == "__main__":
    main()
