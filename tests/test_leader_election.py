"""Leadership back where it belongs (issue 18's preferred leader election): after a broker
restarts, `kraft leader-election` hands its partitions back to it, and with
auto.leader.rebalance.enable the controller does so by itself; unclean election and bad input."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.brokercluster import REPO, BrokerCluster
from tests.eventually import eventually
from tests.logs import assert_no_tracebacks


@pytest.fixture
def make_cluster(tmp_path) -> Iterator:
    made: list[BrokerCluster] = []

    def make(**controller_props: str) -> BrokerCluster:
        c = BrokerCluster(tmp_path / f"c{len(made)}", 3, controller_props=controller_props,
                          broker_props={"replica.lag.time.max.ms": "2000"})
        made.append(c)
        c.start()
        asyncio.run(c.wait_unfenced(timeout=60))
        return c
    yield make
    for c in made:
        c.close()
        assert_no_tracebacks(c.base)


def leaders(c: BrokerCluster, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, preferred replica)."""
    t = asyncio.run(c.describe_topic(topic))
    return {p.partition: (p.leader, p.replicas[0]) for p in t.partitions}


def skew_by_restart(c: BrokerCluster, topic: str, victim: int) -> None:
    """A controlled shutdown moves the victim's leaderships away; after its restart it is back
    in every ISR but leads nothing."""
    asyncio.run(c.create_topic(topic, partitions=6, rf=3))
    assert any(pref == victim for _, pref in leaders(c, topic).values())
    assert c.stop_broker(victim) == 0
    c.start_broker(victim)
    asyncio.run(c.wait_unfenced(timeout=60))

    async def back_in_every_isr() -> bool:
        t = await c.describe_topic(topic)
        return all(len(p.isr) == 3 for p in t.partitions)
    asyncio.run(eventually(back_in_every_isr, timeout=60, what="the restarted broker back in every ISR"))


def kraft(c: BrokerCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", "leader-election", "--bootstrap-controller",
                           c.quorum.bootstrap, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_preferred_leader_election_on_demand_and_bad_input(make_cluster):
    c = make_cluster(**{"auto.leader.rebalance.enable": "false"})
    skew_by_restart(c, "le", 101)
    before = leaders(c, "le")
    skewed = sorted(p for p, (leader, pref) in before.items() if leader != pref)
    assert skewed and all(before[p][1] == 101 for p in skewed)

    p = kraft(c, "--election-type", "preferred", "--topic", "le", "--partition", str(skewed[0]))
    assert p.returncode == 0 and p.stdout == f"Successfully completed leader election (PREFERRED) for partitions " \
                                             f"le-{skewed[0]}\n", p.stdout + p.stderr
    p = kraft(c, "--election-type", "preferred", "--all-topic-partitions")
    assert p.returncode == 0, p.stderr
    assert all(leader == pref for leader, pref in leaders(c, "le").values())
    assert p.stdout.startswith("Successfully completed leader election (PREFERRED) for partitions ") or \
        len(skewed) == 1
    assert "le-%d" % skewed[0] not in p.stdout  # already moved by the first call

    p = kraft(c, "--election-type", "preferred", "--topic", "le")
    assert p.returncode == 0 and p.stdout.startswith("Valid replica already elected for partitions le-0")
    p = kraft(c, "--election-type", "unclean", "--topic", "le", "--partition", "0")
    assert p.returncode == 0 and "Valid replica already elected for partitions le-0" in p.stdout
    p = kraft(c, "--election-type", "preferred", "--topic", "le", "--partition", "9")
    assert p.returncode == 1 and p.stderr == "Error completing leader election (PREFERRED) for partition: le-9: " \
                                             "UNKNOWN_TOPIC_OR_PARTITION: partition le-9 does not exist\n"
    p = kraft(c, "--election-type", "preferred", "--topic", "nope")
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in p.stderr
    p = kraft(c, "--election-type", "preferred")
    assert p.returncode == 1 and "--all-topic-partitions" in p.stderr


def test_auto_leader_rebalance_puts_leaders_back_without_an_operator(make_cluster):
    c = make_cluster(**{"leader.imbalance.check.interval.seconds": "1"})
    skew_by_restart(c, "auto", 102)

    async def balanced() -> bool:
        return all(p.leader == p.replicas[0] for p in (await c.describe_topic("auto")).partitions)
    asyncio.run(eventually(balanced, timeout=30, what="every partition led by its preferred replica"))
    logs = "".join(c.quorum.base_dir.joinpath(f"controller-{i}.log").read_text() for i in (1, 2, 3))
    assert "leader rebalance:" in logs
