"""Write outcomes are honest (docs/raft.md, "Write outcomes"): "not applied" only when the entry
can never commit, "unknown" otherwise, and clients retry only the former.

One test per row of the table, in-process nodes where the scenario needs precise control, real
`raft-kv` processes behind one-way cuts for the case fault injection found: a cut-off leader's
writes committed by its successor and then superseded on it by a snapshot."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from raft.examples.kv.client import OutcomeUnknown as KVOutcomeUnknown
from common.errors import ErrorCode as E
from protos import controller_pb2 as pb
from raft.errors import NodeStopped, NotLeader, OutcomeUnknown, ProposalDropped
from raft.node import _superseded
from tests.controllers import InProcessQuorum, start_brokers
from tests.eventually import eventually
from tests.raftnodes import NodeCluster


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------ the rows, in one process


def test_a_follower_and_a_stopped_node_refuse_at_once_and_nothing_is_appended(tmp_path):
    async def go():
        async with NodeCluster(tmp_path) as c:
            leader = await c.leader()
            follower = next(n for n in c.nodes.values() if n is not leader)
            with pytest.raises(NotLeader) as e:
                await follower.propose(b"x")
            assert e.value.leader_id == leader.id and e.value.leader_address == leader.address
            await follower.stop(transfer=False)
            with pytest.raises(NodeStopped):
                await follower.propose(b"x")
            assert b"x" not in c.applied(leader)
    run(go())


def test_an_entry_replaced_by_a_later_leader_is_not_applied(tmp_path):
    async def go():
        async with NodeCluster(tmp_path) as c:
            old = await c.leader()
            c.isolate(old.id)
            fut = old.propose_nowait(b"lost")
            new = await c.leader(among=[n for n in c.ids if n != old.id])
            for i in range(5):
                await new.propose(b"after-%d" % i)
            c.heal()
            with pytest.raises(ProposalDropped, match="not applied"):
                await asyncio.wait_for(fut, 10)
            await c.converge()
            assert all(b"lost" not in c.applied(n) for n in c.nodes.values())
    run(go())


def test_a_full_uncommitted_window_refuses_at_once_and_nothing_is_appended(tmp_path):
    async def go():
        async with NodeCluster(tmp_path, max_uncommitted_entries=2) as c:
            leader = await c.leader()
            c.isolate(leader.id)
            pending = [leader.propose_nowait(b"a"), leader.propose_nowait(b"b")]
            last = leader.next_index
            with pytest.raises(ProposalDropped):
                leader.propose_nowait(b"c")
            assert leader.next_index == last
            await leader.stop(transfer=False)
            await asyncio.gather(*pending, return_exceptions=True)
    run(go())


def test_a_storage_failure_leaves_appended_entries_unknown(tmp_path):
    """The entry may have reached followers before the leader's disk failed."""
    async def go():
        async with NodeCluster(tmp_path) as c:
            leader = await c.leader()
            c.isolate(leader.id)

            def broken(*_):
                raise OSError(28, "No space left on device")
            leader.storage.save = broken
            with pytest.raises(OutcomeUnknown, match="outcome is unknown"):
                await asyncio.wait_for(leader.propose(b"maybe"), 10)
    run(go())


def test_a_pending_entry_at_stop_has_an_unknown_outcome(tmp_path):
    async def go():
        async with NodeCluster(tmp_path) as c:
            leader = await c.leader()
            c.isolate(leader.id)
            fut = leader.propose_nowait(b"maybe")
            await leader.stop(transfer=False)
            with pytest.raises(OutcomeUnknown, match="outcome is unknown"):
                await fut
    run(go())


def test_a_timeout_leaves_the_outcome_unknown_and_the_entry_may_still_commit(tmp_path):
    async def go():
        async with NodeCluster(tmp_path) as c:
            leader = await c.leader()
            with pytest.raises(asyncio.TimeoutError):  # no round trip is that quick
                await leader.propose(b"late", timeout=1e-6)
            await c.converge()  # the entry was appended all the same, and commits
            assert b"late" in c.applied(leader)
    run(go())


def test_a_snapshot_covering_an_entry_says_unknown_unless_the_terms_prove_otherwise():
    assert isinstance(_superseded(10, 3, 3), OutcomeUnknown)
    assert isinstance(_superseded(10, 3, 7), OutcomeUnknown)
    # terms never decrease along a log: the leader's entry at 10 is at most term 2, not ours
    assert isinstance(_superseded(10, 3, 2), ProposalDropped)


def test_entries_committed_by_a_successor_then_snapshotted_are_unknown_not_dropped(tmp_path):
    """The fault: the old leader's appends reached the others (one-way cut), the new leader
    committed them and compacted its log, and the old leader caught up by snapshot."""
    async def go():
        async with NodeCluster(tmp_path, snapshot_entries=10, snapshot_trailing_entries=0) as c:
            old = await c.leader()
            others = [n for n in c.ids if n != old.id]
            for o in others:
                c.cut(o, old.id)  # their answers vanish; its appends still reach them
            futs = [old.propose_nowait(b"cut-%d" % i) for i in range(3)]
            new = await c.leader(among=others)
            for i in range(25):
                await new.propose(b"fill-%d" % i)
            # The snapshot is written in the background: wait for it, as the process test does.
            old_last = old.status().last_index
            await eventually(lambda: new.status().snapshot_index > old_last, 15,
                             what="the new leader's snapshot past the old leader's log")
            c.heal()
            results = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 10)
            assert all(isinstance(r, OutcomeUnknown) for r in results), results
            await c.converge()
            for n in c.nodes.values():  # they were applied: "not applied" would have been a lie
                assert all(b"cut-%d" % i in c.applied(n) for i in range(3))
    run(go())


# ------------------------------------------------------------------ real processes


def test_kv_client_never_reruns_a_cas_that_a_snapshot_made_unknown(kv_cluster):
    """raft-kv processes, a proxy per directed link: the leader's followers stop reaching it
    (one-way), the new leader commits the leader's CAS writes and compacts its log, and the old
    leader learns of them by snapshot. Before the fix the writes came back marked not-applied,
    the client ran each CAS again and reported it failed against its own value."""
    c = kv_cluster(args=("--snapshot-entries", "20", "--snapshot-trailing-entries", "0",
                         "--election-timeout-ms", "300", "--heartbeat-ms", "50"))
    c.start_all()

    async def go():
        leader, term = await c.wait_leader()
        others = [n for n in c.ids if n != leader]
        everywhere = c.client()
        await everywhere.put(b"warm", b"up")
        # Connected before the cut: the CAS writes must reach the old leader before it steps
        # down (check quorum, one election timeout), or its NotLeader hint sends them to the new
        # one and they simply succeed.
        at_old = c.client([leader], timeout=30, attempt_timeout=30)
        await at_old.get(b"warm")
        for o in others:
            c.stall(o, leader)
        cas = [asyncio.create_task(at_old.cas(b"k%d" % i, None, b"mine")) for i in range(4)]
        new, _ = await c.wait_leader(among=others, not_term=term)
        via_new = c.client(others)
        for i in range(45):
            await via_new.put(b"fill%d" % i, b"x")
        # The scenario needs the old leader's entries compacted away on the new leader before
        # the links heal; its snapshot is written in the background, later under load.
        old_last = (await c.statuses([leader]))[leader].last_index

        async def compacted() -> bool:
            st = (await c.statuses([new])).get(new)
            return st is not None and st.snapshot_index > old_last
        await eventually(compacted, 15, what="the new leader's snapshot past the old leader's log")
        c.heal()
        results = await asyncio.gather(*cas, return_exceptions=True)
        unknown = 0
        for i, r in enumerate(results):
            value = await via_new.get(b"k%d" % i)
            if isinstance(r, KVOutcomeUnknown):
                unknown += 1
                continue
            assert not isinstance(r, BaseException), f"CAS k{i}: {r!r}"
            succeeded, before = r
            assert succeeded, f"CAS k{i} reported failed, yet the value it found was {before!r}: its own write"
            assert value == b"mine"
        assert unknown, f"the old leader never caught up by snapshot: {results}"
        for client in (everywhere, at_old, via_new):
            await client.close()
    run(go())


# ------------------------------------------------------------------ the controller


def test_a_create_whose_commit_outlives_its_deadline_is_reported_unknown_not_already_exists(tmp_path):
    """REQUEST_TIMED_OUT from the controller means "unknown"; the client used to retry it, and
    the second attempt answered TOPIC_ALREADY_EXISTS for the caller's own topic."""
    async def go():
        q = InProcessQuorum(tmp_path)
        await q.start()
        try:
            active = await q.active()
            brokers = await start_brokers(q, [(1, "")])
            async with q.client() as c:
                active.controller.config = dataclasses.replace(active.controller.config, write_timeout_s=0)
                with pytest.raises(Exception) as e:
                    await c.create_topics(pb.CreateTopicsRequest(topics=[
                        pb.CreatableTopic(name="mine", num_partitions=1, replication_factor=1)]))
                assert getattr(e.value, "code", None) == E.REQUEST_TIMED_OUT, e.value
                assert "may or may not" in str(e.value)
                d = await c.describe_topics(pb.DescribeTopicsRequest(names=["mine"]))
                assert d.topics[0].error_code == E.NONE  # it was applied, as "unknown" allowed
            for b in brokers:
                await b.stop()
        finally:
            await q.stop()
    run(go())


def test_a_proposal_says_where_its_entry_went(tmp_path):
    async def go():
        async with NodeCluster(tmp_path) as c:
            leader = await c.leader()
            expected = leader.next_index
            fut = leader.propose_nowait(b"here")
            assert (fut.index, fut.term) == (expected, leader.term)
            assert await fut == len(c.machines[leader.id].items)  # ListMachine returns its length
            assert c.applied(leader)[-1] == b"here" and leader.commit_index >= fut.index
    run(go())
