"""Operator tools shaped like Kafka's (issue 18): kafka-get-offsets.sh, kafka-storage.sh info,
and kafka-topics.sh --describe's min-ISR and overrides filters, against broker processes."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from clients import Producer
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("tools"), {"replica.lag.time.max.ms": "2000"}) as c:
        yield c


def kraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_get_offsets_latest_earliest_and_by_time(cluster):
    asyncio.run(cluster.create_topic("go", partitions=2))

    async def produce() -> int:
        async with Producer(cluster.bootstrap_servers) as p:
            for i in range(10):
                await p.send_and_wait("go", b"%d" % i, partition=i % 2, timestamp_ms=1_000 * (i + 1))
        return 0
    asyncio.run(produce())
    boot = ["--bootstrap-server", cluster.bootstrap_servers, "--topic", "go"]
    assert kraft("get-offsets", *boot).stdout == "go:0:5\ngo:1:5\n"
    assert kraft("get-offsets", *boot, "--time", "-2", "--partitions", "1").stdout == "go:1:0\n"
    assert kraft("get-offsets", *boot, "--time", "6000").stdout == "go:0:3\ngo:1:2\n"  # 7000 and 6000 ms
    assert kraft("get-offsets", *boot, "--time", str(int(time.time() * 1000))).stdout == "go:0:\ngo:1:\n"
    p = kraft("get-offsets", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "nope")
    assert p.returncode == 1 and p.stderr == "Error: UNKNOWN_TOPIC_OR_PARTITION: Topic nope does not exist.\n"
    p = kraft("get-offsets", *boot, "--partitions", "7")
    assert p.returncode == 1 and "no partitions [7]" in p.stderr


def test_storage_info(cluster, tmp_path):
    bid = cluster.ids[0]
    p = kraft("storage", "info", "--config", str(cluster.config_path(bid)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"cluster.id={cluster.quorum.cluster_id}" in p.stdout and f"node.id={bid}" in p.stdout
    blank = tmp_path / "blank.properties"
    blank.write_text(cluster.config_path(bid).read_text().replace(str(cluster.log_dir(bid)), str(tmp_path / "new")))
    (tmp_path / "new").mkdir()
    p = kraft("storage", "info", "--config", str(blank))
    assert p.returncode == 1 and f"  {tmp_path / 'new'} is not formatted" in p.stdout


def test_describe_at_and_under_min_isr_and_overrides(cluster):
    asyncio.run(cluster.create_topic("strict", partitions=2, configs={"min.insync.replicas": "3"}))
    asyncio.run(cluster.create_topic("plain", partitions=1))
    ctl = ["topics", "--bootstrap-controller", cluster.quorum.bootstrap, "describe"]
    at = kraft(*ctl, "--at-min-isr-partitions").stdout
    assert at.count("Topic: strict\tPartition:") == 2 and "plain" not in at
    assert kraft(*ctl, "--under-min-isr-partitions").stdout == ""
    overrides = kraft(*ctl, "--topics-with-overrides").stdout
    assert overrides.startswith("Topic: strict\t") and "Configs: min.insync.replicas=3" in overrides
    assert "plain" not in overrides and "Partition:" not in overrides
    victim = cluster.ids[-1]
    cluster.kill(victim)
    try:
        async def shrunk() -> bool:
            t = await cluster.describe_topic("strict")
            return all(len(p.isr) == 2 for p in t.partitions)
        asyncio.run(eventually(shrunk, timeout=30, what="the ISRs without the killed broker"))
        under = kraft(*ctl, "--under-min-isr-partitions").stdout
        assert under.count("Topic: strict\tPartition:") == 2 and "plain" not in under
    finally:
        cluster.start_broker(victim)
        asyncio.run(cluster.wait_unfenced(timeout=60))


def test_unregister_only_a_stopped_broker_that_hosts_nothing(cluster):
    ctl = ["cluster", "--bootstrap-controller", cluster.quorum.bootstrap]
    victim = cluster.ids[-1]
    asyncio.run(cluster.create_topic("pinned", partitions=1, rf=1, assignments=[[victim]]))
    p = kraft(*ctl, "unregister", "--id", str(victim))
    assert p.returncode == 1 and p.stderr == f"Error: INVALID_REQUEST: broker {victim} is running (unfenced): stop " \
                                             f"it before unregistering it\n"
    assert cluster.stop_broker(victim) == 0
    try:
        for t in ("go", "strict", "plain"):  # this module's other topics have replicas on every broker
            assert kraft("topics", "--bootstrap-controller", cluster.quorum.bootstrap, "delete", "--topic",
                         t).returncode == 0
        p = kraft(*ctl, "unregister", "--id", str(victim))
        assert p.returncode == 1 and p.stderr == f"Error: INVALID_REQUEST: broker {victim} still hosts 1 replicas " \
                                                 f"(pinned-0): move them to other brokers first\n"
        assert kraft("topics", "--bootstrap-controller", cluster.quorum.bootstrap, "delete", "--topic",
                     "pinned").returncode == 0
        p = kraft(*ctl, "unregister", "--id", str(victim))
        assert p.returncode == 0 and p.stdout == f"Broker {victim} is no longer registered.\n", p.stderr
        assert f"\n  {victim}\t" not in kraft(*ctl, "describe").stdout
        p = kraft(*ctl, "unregister", "--id", str(victim))
        assert p.returncode == 1 and p.stderr == f"Error: BROKER_ID_NOT_REGISTERED: broker {victim} is not registered\n"
    finally:
        cluster.start_broker(victim)  # registers anew
        asyncio.run(cluster.wait_unfenced(timeout=60))
