"""Client semantics where Kafka's are the specification (issue 25): what a group member
commits when it stops or loses partitions, and how our client's API behaves where Kafka's
does. One broker process (offsets topic of one replica) keeps it quick."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from clients import Consumer, Producer
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually

PROPS = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
         "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
FAST_GROUP = dict(session_timeout_ms=3000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("semantics"), PROPS, brokers=1) as c:
        yield c


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def produce(c: BrokerCluster, topic: str, n: int) -> None:
    async with Producer(c.bootstrap_servers, linger_ms=5) as p:
        futures = [await p.send(topic, b"%d" % i, key=b"%d" % i) for i in range(n)]
        for f in futures:
            await f


def console_consumer(c: BrokerCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server",
                           c.bootstrap_servers, *args], cwd=REPO, capture_output=True, text=True, timeout=90)


def test_a_console_consumer_group_run_again_reads_what_the_first_run_did_not_print(cluster):
    """Issue 25 item 1: the first run commits what it printed and, for the partitions it printed
    nothing from, where it had reset them to (the beginning), so the second run, without
    --from-beginning, reads the other 45 records instead of starting those at latest."""
    async def go():
        await cluster.create_topic("fifty", partitions=5, rf=1)
        await produce(cluster, "fifty", 50)
    run(go())
    first = console_consumer(cluster, "--topic", "fifty", "--group", "g1", "--from-beginning", "--max-messages", "5",
                             "--timeout-ms", "15000")
    assert "Processed a total of 5 messages" in first.stderr, first.stderr
    second = console_consumer(cluster, "--topic", "fifty", "--group", "g1", "--max-messages", "45",
                              "--timeout-ms", "5000")
    assert "Processed a total of 45 messages" in second.stderr, second.stderr
    assert sorted(int(v) for v in first.stdout.split() + second.stdout.split()) == list(range(50))


def test_a_consumer_commits_every_assigned_partitions_position_on_close_and_on_revocation(cluster):
    """Kafka commits every assigned partition's position (auto commit) on close and before
    giving partitions up, including partitions it only reset (here to latest) and read nothing
    from."""
    async def go():
        await cluster.create_topic("positions", partitions=4, rf=1)
        await produce(cluster, "positions", 40)
        tps = [("positions", p) for p in range(4)]
        async with Consumer(cluster.bootstrap_servers, group_id="closers", auto_offset_reset="latest",
                            auto_commit_interval_ms=60000, **FAST_GROUP) as probe:
            ends = {}
            for tp in tps:
                await probe.assign([tp])
                probe.seek_to_end()
                await probe.poll(0)
                ends[tp] = probe.position(*tp)
        assert sum(ends.values()) == 40

        # close: nothing was read, every partition was reset to its end, and that is committed
        async with Consumer(cluster.bootstrap_servers, group_id="closers", auto_offset_reset="latest",
                            auto_commit_interval_ms=60000, **FAST_GROUP) as c:
            await c.subscribe(["positions"])
            await eventually(lambda: _polled(c, 4, tps), 20, what="four partitions assigned and their positions reset")
        async with Consumer(cluster.bootstrap_servers, group_id="closers", enable_auto_commit=False) as reader:
            assert {tp: await reader.committed(*tp) for tp in tps} == ends

        # revocation: a second member joins, the first gives two partitions up and commits them first
        settings = dict(group_id="revokers", auto_offset_reset="latest", auto_commit_interval_ms=60000, **FAST_GROUP)
        async with Consumer(cluster.bootstrap_servers, **settings) as a:
            await a.subscribe(["positions"])
            await eventually(lambda: _polled(a, 4, tps), 20, what="the first member owning every partition")
            async with Consumer(cluster.bootstrap_servers, **{**settings, "enable_auto_commit": False}) as b:
                await b.subscribe(["positions"])
                polling = [asyncio.create_task(_keep_polling(m)) for m in (a, b)]  # each member in its own task
                try:
                    await eventually(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30,
                                     what="the partitions split between two members")
                finally:
                    for t in polling:
                        t.cancel()
                    await asyncio.gather(*polling, return_exceptions=True)
                for tp in b.assignment():  # given up by a, which committed where it was
                    assert await b.committed(*tp) == ends[tp]
    run(go())


async def _polled(c: Consumer, n: int, tps: list[tuple[str, int]]) -> bool:
    await c.poll(50)
    return len(c.assignment()) == n and all(c.position(*tp) is not None for tp in tps)


async def _keep_polling(c: Consumer) -> None:
    while True:
        await c.poll(50)
