"""Fault tests on real processes: `raft-kv serve` nodes on loopback, killed, paused, cut off
and corrupted, with every outcome asserted."""
import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from raft.examples.kv.client import KVError
from raft.storage import wal
from tests.eventually import eventually
from tests.kvcluster import wipe


def run(coro):
    return asyncio.run(coro)


def test_a_three_node_cluster_elects_one_leader_and_serves(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        await c.wait_leader()

        async def all_follow() -> tuple[int, int] | None:
            # A node that gave no vote learns of a new term at the leader's first AppendEntries
            # (Raft paper 5.2), which a loaded machine may deliver late: wait until all three
            # follow one leader, and check at every look that no term has two leaders.
            st = await c.statuses()
            leaders = [(s.term, s.node_id) for s in st.values() if s.role == "LEADER"]
            assert len(set(t for t, _ in leaders)) == len(leaders), leaders
            views = {(s.leader_id, s.term) for s in st.values()}
            if len(st) == 3 and len(views) == 1:
                lid, term = views.pop()
                return (lid, term) if (term, lid) in leaders else None
            return None

        await eventually(all_follow, 15, what="all three nodes following one leader")
        kv = c.client()
        await kv.put(b"k", b"v")
        assert await kv.get(b"k") == b"v"
        await kv.close()
    run(go())


def test_kill_9_of_the_leader_loses_no_acknowledged_write(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, term = await c.wait_leader()
        kv = c.client()
        acked = []
        for i in range(200):
            await kv.put(b"key%d" % i, b"val%d" % i)
            acked.append(i)
        c.kill(lid)
        t0 = time.monotonic()
        others = [n for n in c.ids if n != lid]
        new, new_term = await c.wait_leader(others, not_term=term)
        kv2 = c.client(others)
        await kv2.put(b"after", b"failover")
        elapsed = time.monotonic() - t0
        assert elapsed < 3.0, f"new leader took {elapsed:.2f}s to accept a write"
        for i in acked:
            assert await kv2.get(b"key%d" % i) == b"val%d" % i
        c.start(lid)  # the killed node restarts and catches up
        st = (await c.statuses([new]))[new]
        await c.wait_applied(lid, st.commit_index)
        await kv.close()
        await kv2.close()
    run(go())


def test_a_far_behind_node_catches_up_by_snapshot_and_a_wiped_one_must_be_formatted(kv_cluster):
    c = kv_cluster(3, args=("--snapshot-entries", "100", "--snapshot-trailing-entries", "10"))
    c.start_all()

    async def go():
        lid, _ = await c.wait_leader()
        lagger = next(n for n in c.ids if n != lid)
        c.kill(lagger)
        kv = c.client([n for n in c.ids if n != lagger])
        for i in range(600):
            await kv.put(b"k%d" % i, b"v%d" % i)
        async def snapshotted():  # the leader snapshots and compacts in the background
            st = (await c.statuses([lid]))[lid]
            return st if st.snapshot_index >= 500 else None
        leader_st = await eventually(snapshotted, 20)
        c.start(lagger)
        await c.wait_applied(lagger, leader_st.commit_index)
        st = (await c.statuses([lagger]))[lagger]
        assert st.snapshot_index >= 500  # it was sent the snapshot, not the compacted entries
        assert "installed a snapshot from the leader" in c.log_text(lagger)
        # a wiped data directory is refused until formatted again
        c.kill(lagger)
        wipe(c.data_dir(lagger))
        p = c.start(lagger, fmt=False)
        assert p.wait(20) == 1
        assert "not formatted" in c.log_text(lagger)
        c.format(lagger)
        c.start(lagger)
        await c.wait_applied(lagger, leader_st.commit_index)
        await kv.close()
    run(go())


def test_a_paused_leader_is_replaced_and_never_serves_a_stale_read(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, term = await c.wait_leader()
        kv = c.client()
        await kv.put(b"x", b"old")
        c.signal(lid, signal.SIGSTOP)
        others = [n for n in c.ids if n != lid]
        new, _ = await c.wait_leader(others, not_term=term)
        kv2 = c.client(others)
        await kv2.put(b"x", b"new")
        c.signal(lid, signal.SIGCONT)
        # ask the old leader alone, repeatedly, while it learns that it was deposed
        old = c.client([lid], timeout=2.0)
        seen = []
        for _ in range(20):
            try:
                seen.append(await old.get(b"x"))
            except KVError:
                seen.append("refused")
            await asyncio.sleep(0.05)
        assert b"old" not in seen, seen
        st = (await c.statuses([lid]))[lid]
        assert st.role == "FOLLOWER" and st.leader_id == new
        for k in (kv, kv2, old):
            await k.close()
    run(go())


def test_a_network_cut_isolating_the_leader_stops_its_commits_and_heals(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, term = await c.wait_leader()
        kv = c.client()
        await kv.put(b"a", b"1")
        c.isolate(lid)
        stuck = c.client([lid], timeout=1.5, attempt_timeout=1.0)
        with pytest.raises(KVError):  # the minority side cannot commit
            await stuck.put(b"a", b"minority")
        others = [n for n in c.ids if n != lid]
        new, _ = await c.wait_leader(others, not_term=term)
        kv2 = c.client(others)
        await kv2.put(b"a", b"majority")
        c.heal()
        st = (await c.statuses([new]))[new]
        await c.wait_applied(lid, st.commit_index)
        old = (await c.statuses([lid]))[lid]
        assert old.role == "FOLLOWER" and old.leader_id == new
        assert await kv2.get(b"a") == b"majority"
        for k in (kv, kv2, stuck):
            await k.close()
    run(go())


def test_add_a_fourth_node_remove_one_and_transfer_leadership(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, _ = await c.wait_leader()
        kv = c.client()
        for i in range(50):
            await kv.put(b"k%d" % i, b"v")
        c.add_node_slot(4)
        c.ids.append(4)
        c.start(4, voters=c.voters_for(4, [1, 2, 3]))
        c.run_cli("--endpoints", ",".join(c.endpoints([1, 2, 3])), "member", "add-voter", "4",
                  f"127.0.0.1:{c.proxy_ports[(lid, 4)]}")
        st = (await c.statuses([lid]))[lid]
        assert st.voters == [1, 2, 3, 4]
        await c.wait_applied(4, st.commit_index)
        # remove a follower
        victim = next(n for n in (1, 2, 3) if n != lid)
        c.run_cli("--endpoints", c.address(lid), "member", "remove", str(victim))
        st = (await c.statuses([lid]))[lid]
        assert victim not in st.voters and len(st.voters) == 3
        c.stop(victim)
        # hand leadership to node 4
        c.run_cli("--endpoints", c.address(lid), "transfer-leader", "4")
        new, _ = await c.wait_leader([n for n in c.ids if n != victim])
        assert new == 4
        kv4 = c.client([4])
        await kv4.put(b"after", b"transfer")
        assert await kv4.get(b"k49") == b"v"
        await kv.close()
        await kv4.close()
    run(go())


def _last_segment(c, nid):
    return wal.list_segments(str(c.data_dir(nid) / "wal"))[-1]


def _cut_last_record(seg: str) -> None:
    """The last record cut short, as by a crash mid-write."""
    os.truncate(seg, os.path.getsize(seg) - 5)


def _corrupt_middle_record(seg: str) -> int:
    """Flip a byte inside the middle record of ``seg``; returns where that record starts."""
    data = bytearray(Path(seg).read_bytes())
    recs = list(wal.decode_frames(bytes(data)))
    mid = recs[len(recs) // 2]
    data[mid.offset + 10] ^= 0x55
    Path(seg).write_bytes(bytes(data))
    return mid.offset


def test_a_torn_last_record_restarts_cleanly_and_mid_log_corruption_refuses(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, _ = await c.wait_leader()
        kv = c.client()
        for i in range(30):
            await kv.put(b"k%d" % i, b"v%d" % i)
        victim = next(n for n in c.ids if n != lid)
        c.kill(victim)
        seg = _last_segment(c, victim)
        _cut_last_record(seg)
        c.start(victim)
        st = (await c.statuses([lid]))[lid]
        await c.wait_applied(victim, st.commit_index)
        assert "cut a torn write off the log" in c.log_text(victim)
        # now corrupt a record in the middle of the log
        c.kill(victim)
        corrupt_at = _corrupt_middle_record(seg)
        p = c.start(victim)
        assert p.wait(20) == 1
        lines = [line for line in c.log_text(victim).splitlines() if "raft-kv: error" in line]
        assert lines and seg in lines[-1] and f"byte {corrupt_at}" in lines[-1]
        assert "Traceback" not in c.log_text(victim).split("cut a torn write")[-1]
        await kv.close()
    run(go())
