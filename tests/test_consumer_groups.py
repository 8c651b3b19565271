"""Consumer groups as operators run them (docs/brokers.md, "Consumer groups"): three broker
processes, group members as processes killed with SIGKILL, the coordinator's broker killed,
a console consumer resuming from its group's committed offsets, and Kafka's errors for bad
requests. Short timeouts keep it quick: sessions of 3 s, no initial rebalance delay."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

from clients import Consumer, Producer
from common.errors import ErrorCode
from protos import broker_pb2 as bpb
from tests.brokercluster import REPO, BrokerCluster, _stub, running_cluster
from tests.eventually import eventually

GROUP_PROPS = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
               "group.min.session.timeout.ms": "1000", "log.cleaner.backoff.ms": "500"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("groups"), GROUP_PROPS) as c:
        yield c


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def produce(c: BrokerCluster, topic: str, n: int, start: int = 0) -> None:
    async with Producer(c.bootstrap_servers, linger_ms=5) as p:
        futures = [await p.send(topic, b"%d" % i, key=b"%d" % i) for i in range(start, start + n)]
        for f in futures:
            await f


class Member:
    """A group member process and what it printed."""

    def __init__(self, c: BrokerCluster, group: str, topic: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.group_member", c.bootstrap_servers, group, topic],
                                     cwd=REPO, stdout=subprocess.PIPE, text=True)
        self.assignments: list[list[tuple[str, int]]] = []
        self.values: list[int] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "assigned" in msg:
                self.assignments.append([tuple(tp) for tp in msg["assigned"]])
            else:
                self.values.append(int(msg["v"]))

    @property
    def owned(self) -> set[int]:
        return {p for _, p in self.assignments[-1]} if self.assignments else set()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def test_members_share_the_partitions_and_a_killed_members_move_on(cluster):
    async def go():
        await cluster.create_topic("shared", partitions=6, rf=3)
        await produce(cluster, "shared", 300)
        members = [Member(cluster, "sharers", "shared") for _ in range(3)]
        try:
            def balanced() -> bool:
                owned = [m.owned for m in members]
                return (sorted(p for o in owned for p in o) == list(range(6))
                        and all(len(o) == 2 for o in owned))
            await eventually(balanced, 40, what="six partitions, two to each of three members")
            victim = members[0]
            lost = victim.owned
            victim.kill()
            killed_at = time.monotonic()
            await produce(cluster, "shared", 300, start=300)
            survivors = members[1:]

            def moved() -> bool:
                owned = [m.owned for m in survivors]
                return sorted(p for o in owned for p in o) == list(range(6))
            await eventually(moved, 30, what="the killed member's partitions reassigned")
            took = time.monotonic() - killed_at
            assert lost <= set().union(*(m.owned for m in survivors))

            def everything() -> bool:
                return set(range(600)) <= {v for m in members for v in m.values}
            await eventually(everything, 30, what="every message consumed by some member")
            seen = [v for m in members for v in m.values]
            print(f"reassigned {took:.1f}s after the kill; {len(seen) - len(set(seen))} duplicates, 0 missing")
        finally:
            for m in members:
                if m.proc.poll() is None:
                    m.stop()
    run(go(), timeout=150)


def test_committed_offsets_survive_the_coordinators_death_and_a_restart(cluster):
    async def go():
        await cluster.create_topic("kept", partitions=2, rf=3)
        await produce(cluster, "kept", 50)
        async with Consumer(cluster.bootstrap_servers, group_id="keepers", enable_auto_commit=False) as c:
            await c.assign([("kept", 0), ("kept", 1)])
            await c.commit({("kept", 0): 17, ("kept", 1): 23})
            assert await c.committed("kept", 0) == 17
            coordinator = c.group.coordinator
        async with _stub(cluster.bootstrap_servers.split(",")[0]) as s:
            r = await s.FindCoordinator(bpb.FindCoordinatorRequest(key="keepers"))
        victim = r.node_id
        assert coordinator == f"{r.host}:{r.port}"
        cluster.kill(victim)
        try:
            async with Consumer(cluster.bootstrap_servers, group_id="keepers", enable_auto_commit=False) as c:
                async def moved():
                    async with _stub(cluster.address(next(b for b in cluster.ids if b != victim))) as s:
                        r = await s.FindCoordinator(bpb.FindCoordinatorRequest(key="keepers"))
                    return r.error_code == 0 and r.node_id != victim
                await eventually(moved, 30, what="a new coordinator for the group")
                assert await c.committed("kept", 0) == 17 and await c.committed("kept", 1) == 23
        finally:
            cluster.start_broker(victim)
            await cluster.wait_unfenced([victim], timeout=60)
        # every broker restarted: still there
        for b in cluster.ids:
            cluster.stop_broker(b)
        for b in cluster.ids:
            cluster.start_broker(b)
        await cluster.wait_unfenced(timeout=60)
        async with Consumer(cluster.bootstrap_servers, group_id="keepers", enable_auto_commit=False) as c:
            assert await c.committed("kept", 0) == 17 and await c.committed("kept", 1) == 23
            await c.assign([("kept", 0)])
            records = await c.poll(5000)
            assert records and records[0].offset == 17  # it resumes where the group left off
    run(go(), timeout=240)


def test_a_console_consumer_in_a_group_resumes_after_what_it_printed(cluster):
    async def go():
        await cluster.create_topic("lines", partitions=3, rf=3)
        await produce(cluster, "lines", 30)

        def consume(n: int) -> list[int]:
            out = subprocess.run([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server",
                                  cluster.bootstrap_servers, "--topic", "lines", "--group", "readers",
                                  "--from-beginning", "--max-messages", str(n), "--timeout-ms", "15000"],
                                 cwd=REPO, capture_output=True, text=True, timeout=90)
            assert f"Processed a total of {n} messages" in out.stderr, out.stderr
            return [int(x) for x in out.stdout.split()]
        first = await asyncio.to_thread(consume, 12)
        second = await asyncio.to_thread(consume, 18)
        assert sorted(first + second) == list(range(30))  # nothing twice, nothing skipped
    run(go(), timeout=200)


def test_bad_group_requests_get_kafkas_errors(cluster):
    async def go():
        await cluster.create_topic("errs", partitions=1, rf=3)
        async with Consumer(cluster.bootstrap_servers, group_id="strict", session_timeout_ms=3000,
                            heartbeat_interval_ms=300, enable_auto_commit=False) as c:
            await c.subscribe(["errs"])
            await c.poll(100)
            await eventually(lambda: c.group.generation > 0, 20, what="the member to join")
            address = c.group.coordinator
            generation, member = c.group.generation, c.group.member_id
            async with _stub(address) as s:
                r = await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=["strict"]))
                g = r.groups[0]
                assert g.state == "Stable" and [m.member_id for m in g.members] == [member]
                stale = await s.OffsetCommit(bpb.OffsetCommitRequest(
                    group_id="strict", generation_id=generation - 1, member_id=member,
                    topics=[bpb.OffsetCommitTopic(name="errs", partitions=[bpb.OffsetCommitPartition(partition=0, offset=1)])]))
                assert stale.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
                stranger = await s.Heartbeat(bpb.HeartbeatRequest(group_id="strict", generation_id=generation,
                                                                  member_id="nobody"))
                assert stranger.error_code == ErrorCode.UNKNOWN_MEMBER_ID
                empty = await s.JoinGroup(bpb.JoinGroupRequest(group_id="", session_timeout_ms=3000,
                                                               protocol_type="consumer"))
                assert empty.error_code == ErrorCode.INVALID_GROUP_ID
                short = await s.JoinGroup(bpb.JoinGroupRequest(group_id="strict", session_timeout_ms=10,
                                                               protocol_type="consumer", protocols=[
                                                                   bpb.JoinGroupProtocol(name="range")]))
                assert short.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
                busy = await s.DeleteGroups(bpb.DeleteGroupsRequest(groups=["strict"]))
                assert busy.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
                unknown = await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=["no-such-group"]))
                assert unknown.groups[0].error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NOT_COORDINATOR)
            await c.commit({("errs", 0): 0})
            assert await c.committed("errs", 0) == 0  # what was committed is still there
    run(go(), timeout=120)


def kraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_the_consumer_groups_tool_lists_describes_resets_and_deletes(cluster):
    async def go():
        await cluster.create_topic("tool", partitions=2, rf=3)
        await produce(cluster, "tool", 40)
        async with Consumer(cluster.bootstrap_servers, group_id="tooled", enable_auto_commit=False) as c:
            await c.assign([("tool", 0), ("tool", 1)])
            await c.commit({("tool", 0): 5, ("tool", 1): 7})
        bs = cluster.bootstrap_servers
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--list")
        assert "tooled" in out.stdout.split(), out.stderr
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tooled")
        lines = [line.split() for line in out.stdout.splitlines() if line.startswith("tooled ")]
        ends = {int(p): int(end) for _, _, p, _, end, _, _, _ in lines}
        assert {int(p): (int(cur), int(lag)) for _, _, p, cur, _, lag, _, _ in lines} == {
            0: (5, ends[0] - 5), 1: (7, ends[1] - 7)}
        assert "has no active members" in out.stdout
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group",
                                      "tooled", "--topic", "tool", "--to-offset", "1000", "--execute")
        assert out.returncode == 0 and "is higher than latest offset for topic partition tool-0" in out.stderr
        async with Consumer(cluster.bootstrap_servers, group_id="tooled", enable_auto_commit=False) as c:
            assert await c.committed("tool", 0) == ends[0] and await c.committed("tool", 1) == ends[1]
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group",
                                      "tooled", "--topic", "tool", "--to-earliest", "--dry-run")
        assert [line.split()[-1] for line in out.stdout.splitlines()[1:]] == ["0", "0"]
        async with Consumer(cluster.bootstrap_servers, group_id="tooled", enable_auto_commit=False) as c:
            assert await c.committed("tool", 0) == ends[0]  # a dry run commits nothing
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--delete", "--group", "tooled")
        assert "was successful" in out.stdout, out.stderr
        out = await asyncio.to_thread(kraft, "consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tooled")
        assert out.returncode == 1 and out.stderr.strip().startswith("Error: GROUP_ID_NOT_FOUND"), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    run(go(), timeout=180)


def test_a_member_that_stops_polling_leaves_and_rejoins_when_it_polls_again(cluster):
    async def go():
        await cluster.create_topic("slow", partitions=4, rf=3)
        settings = dict(group_id="pollers", session_timeout_ms=3000, heartbeat_interval_ms=200,
                        max_poll_interval_ms=1500, enable_auto_commit=False)
        async with Consumer(cluster.bootstrap_servers, **settings) as a, \
                Consumer(cluster.bootstrap_servers, **settings) as b:
            await a.subscribe(["slow"])
            await b.subscribe(["slow"])

            async def keep_polling(c: Consumer) -> None:  # each member polls in its own task
                while True:
                    await c.poll(50)

            polling_a = asyncio.create_task(keep_polling(a))
            polling_b = asyncio.create_task(keep_polling(b))
            try:
                def split() -> bool:
                    return len(a.assignment()) == 2 and len(b.assignment()) == 2
                await eventually(split, 30, what="the four partitions split between the two members")
                polling_a.cancel()  # a stops polling; its heartbeats go on until max.poll.interval.ms
                await eventually(lambda: len(b.assignment()) == 4, 30,
                                 what="the member that stopped polling to leave, b taking everything")
                polling_a = asyncio.create_task(keep_polling(a))
                await eventually(split, 30, what="the member to rejoin once it polls again")
            finally:
                polling_a.cancel()
                polling_b.cancel()
                await asyncio.gather(polling_a, polling_b, return_exceptions=True)
    run(go(), timeout=120)


class StaticMember:
    """A confluent-kafka member with a group.instance.id (tests/static_member.py) and the events
    it printed: assignments, revocations, records, errors."""

    def __init__(self, c: BrokerCluster, group: str, topic: str, instance: str, session_ms: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.static_member", c.kafka_bootstrap_servers, group,
                                      topic, instance, str(session_ms)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def of(self, kind: str) -> list:
        return [e[kind] for e in list(self.events) if kind in e]

    @property
    def owned(self) -> set[int]:
        """Its partitions now: the last assignment less what was revoked since. A rebalance
        revokes first, so a member that has not printed its new assignment yet owns nothing,
        rather than the partitions of the generation before."""
        owned: set[int] = set()
        for e in list(self.events):
            if "assigned" in e:
                owned = set(e["assigned"])
            elif "revoked" in e:
                owned -= set(e["revoked"])
        return owned

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


async def coordinator(c: BrokerCluster, group: str) -> str:
    """The gRPC address of the group's coordinator, once there is one (asking a running broker)."""
    async with _stub(c.address(next(b for b in c.ids if c.procs[b].poll() is None))) as s:
        async def found() -> bpb.FindCoordinatorResponse | None:
            r = await s.FindCoordinator(bpb.FindCoordinatorRequest(key=group))
            return None if r.error_code else r
        r = await eventually(found, 20, what=f"a coordinator for {group}")
    return f"{r.host}:{r.port}"


async def described(c: BrokerCluster, group: str) -> bpb.DescribedGroup:
    """The group as its coordinator describes it (the generation included)."""
    async with _stub(await coordinator(c, group)) as s:
        return (await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=[group]))).groups[0]


def test_static_members_restarted_within_their_session_keep_their_partitions_without_a_rebalance(cluster):
    """KIP-345 with librdkafka: a static member closed (no LeaveGroup) or killed with SIGKILL and
    restarted within session.timeout.ms gets its partitions back in the same generation, the
    other member sees no callback; a duplicate instance id fences the member it replaces."""
    async def go():
        await cluster.create_topic("statics", partitions=4, rf=3)
        await produce(cluster, "statics", 100)
        a, b = (StaticMember(cluster, "statics", "statics", name, 10000) for name in ("a", "b"))
        members = [a, b]
        try:
            await eventually(lambda: a.owned and b.owned and a.owned | b.owned == {0, 1, 2, 3}, 40,
                             what="the four partitions split between the two static members")
            before = await described(cluster, "statics")
            assert before.state == "Stable" and sorted(m.group_instance_id for m in before.members) == ["a", "b"]
            await eventually(lambda: len(set(a.of("v")) | set(b.of("v"))) == 100, 30, what="every record read")
            a_owned, b_events = a.owned, len(b.events)

            a.stop()  # closed: a static member sends no LeaveGroup, so nothing happens to b
            a = StaticMember(cluster, "statics", "statics", "a", 10000)
            members.append(a)
            await eventually(lambda: a.owned == a_owned, 20, what="the restarted member to get its partitions back")
            b.kill()  # SIGKILL, restarted within the session
            b_owned, b_callbacks = b.owned, [e for e in b.events[b_events:] if "v" not in e]
            assert b_callbacks == [], f"b saw a rebalance when a restarted: {b_callbacks}"
            b = StaticMember(cluster, "statics", "statics", "b", 10000)
            members.append(b)
            await eventually(lambda: b.owned == b_owned, 20, what="the killed member to get its partitions back")
            await produce(cluster, "statics", 100, start=100)
            await eventually(lambda: {str(i) for i in range(100, 200)} <= set(a.of("v")) | set(b.of("v")), 30,
                             what="the new records read by the restarted members")
            after = await described(cluster, "statics")
            assert (after.state, after.generation_id) == ("Stable", before.generation_id), "a rebalance happened"
            assert len(a.of("assigned")) == len(b.of("assigned")) == 1 and not a.of("revoked") + b.of("revoked")

            twin = StaticMember(cluster, "statics", "statics", "b", 10000)  # a second live "b"
            members.append(twin)
            await eventually(lambda: twin.owned == b_owned, 20, what="the duplicate to take b's place")
            # librdkafka makes FENCED_INSTANCE_ID fatal: _FATAL, with the broker's reason
            await eventually(lambda: any(e.get("error") == "_FATAL" and "Static consumer fenced" in e["text"]
                                         for e in b.events), 20, what="the member replaced by a duplicate to be fenced")
            assert (await described(cluster, "statics")).generation_id == before.generation_id
        finally:
            for m in members:
                m.kill()
    run(go(), timeout=150)


def test_a_static_member_gone_beyond_its_session_is_rebalanced_away_once(cluster):
    async def go():
        await cluster.create_topic("statics-expire", partitions=4, rf=3)
        a, b = (StaticMember(cluster, "expiring", "statics-expire", name, 3000) for name in ("a", "b"))
        try:
            await eventually(lambda: a.owned and b.owned and a.owned | b.owned == {0, 1, 2, 3}, 40,
                             what="the four partitions split between the two static members")
            before = await described(cluster, "expiring")
            a.kill()
            await eventually(lambda: b.owned == {0, 1, 2, 3}, 30, what="b to take every partition after a's session")
            after = await described(cluster, "expiring")
            assert (after.state, after.generation_id) == ("Stable", before.generation_id + 1)
            assert [m.group_instance_id for m in after.members] == ["b"]
        finally:
            a.kill()
            b.kill()
    run(go(), timeout=90)


def test_a_static_members_old_id_is_fenced_and_a_changed_subscription_rebalances(cluster):
    """The coordinator's side of KIP-345, request by request: a static member back with a new
    member id is answered in the current generation (naming the old leader, so it assigns
    nothing) and syncs its old assignment; its old id is fenced everywhere, also by the next
    coordinator after the first is killed; coming back with another subscription starts a
    rebalance; a LeaveGroup naming the instance removes it."""
    from clients.group_protocol import Subscription, encode_assignment, encode_subscription

    def join(topics: list[str]) -> bpb.JoinGroupRequest:
        return bpb.JoinGroupRequest(group_id="fenced", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                    group_instance_id="x", protocol_type="consumer", protocols=[bpb.JoinGroupProtocol(
                                        name="range", metadata=encode_subscription(Subscription(tuple(topics))))])

    async def go():
        await cluster.create_topic("fenced", partitions=1, rf=3)
        s_address = await coordinator(cluster, "fenced")
        async with _stub(s_address) as s:
            async def joined() -> bpb.JoinGroupResponse | None:
                r = await s.JoinGroup(join(["fenced"]))
                return None if r.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else r
            first = await eventually(joined, 20, what="the first join")
            assert first.error_code == 0 and first.leader == first.member_id
            assignment = encode_assignment([("fenced", 0)])
            synced = await s.SyncGroup(bpb.SyncGroupRequest(
                group_id="fenced", generation_id=first.generation_id, member_id=first.member_id, group_instance_id="x",
                assignments=[bpb.SyncGroupAssignment(member_id=first.member_id, assignment=assignment)]))
            assert synced.error_code == 0

            back = await s.JoinGroup(join(["fenced"]))
            assert (back.error_code, back.generation_id, back.leader) == (0, first.generation_id, first.member_id)
            assert back.member_id != first.member_id and not back.members
            again = await s.SyncGroup(bpb.SyncGroupRequest(group_id="fenced", generation_id=back.generation_id,
                                                           member_id=back.member_id, group_instance_id="x"))
            assert (again.error_code, again.assignment) == (0, assignment)
            old = dict(group_id="fenced", generation_id=first.generation_id, member_id=first.member_id,
                       group_instance_id="x")
            assert (await s.Heartbeat(bpb.HeartbeatRequest(**old))).error_code == ErrorCode.FENCED_INSTANCE_ID
            assert (await s.SyncGroup(bpb.SyncGroupRequest(**old))).error_code == ErrorCode.FENCED_INSTANCE_ID
            commit = await s.OffsetCommit(bpb.OffsetCommitRequest(**old, topics=[bpb.OffsetCommitTopic(
                name="fenced", partitions=[bpb.OffsetCommitPartition(partition=0, offset=1)])]))
            assert commit.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
            group = (await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=["fenced"]))).groups[0]
            assert (group.state, group.generation_id) == ("Stable", first.generation_id)
            assert [(m.member_id, m.group_instance_id) for m in group.members] == [(back.member_id, "x")]

        # The new member id is in the group's record: the next coordinator knows it, and fences the old one.
        victim = next(bid for bid in cluster.ids if cluster.address(bid) == s_address)
        cluster.kill(victim)
        try:
            async def moved() -> str | None:
                address = await coordinator(cluster, "fenced")
                if address == s_address:
                    return None
                async with _stub(address) as s:
                    r = await s.Heartbeat(bpb.HeartbeatRequest(group_id="fenced", generation_id=back.generation_id,
                                                               member_id=back.member_id, group_instance_id="x"))
                return address if r.error_code not in (ErrorCode.NOT_COORDINATOR,
                                                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) else None
            async with _stub(await eventually(moved, 30, what="a new coordinator")) as s:
                assert (await s.Heartbeat(bpb.HeartbeatRequest(
                    group_id="fenced", generation_id=back.generation_id, member_id=back.member_id,
                    group_instance_id="x"))).error_code == 0
                assert (await s.Heartbeat(bpb.HeartbeatRequest(**old))).error_code == ErrorCode.FENCED_INSTANCE_ID

                changed = await s.JoinGroup(join(["fenced", "other"]))
                assert changed.error_code == 0 and changed.generation_id == first.generation_id + 1
                assert changed.leader == changed.member_id and len(changed.members) == 1
                # An admin's removal (LeaveGroup v3+ naming the instance) does take the member out.
                removed = await s.LeaveGroup(bpb.LeaveGroupRequest(group_id="fenced", members=[
                    bpb.MemberIdentity(group_instance_id="x")]))
                assert [(m.group_instance_id, m.error_code) for m in removed.members] == [("x", 0)]
                group = (await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=["fenced"]))).groups[0]
                assert (group.state, len(group.members)) == ("Empty", 0)
        finally:
            cluster.start_broker(victim)
            await cluster.wait_unfenced()
    run(go(), timeout=120)
