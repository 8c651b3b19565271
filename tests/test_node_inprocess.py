"""RaftNode clusters in one process and one event loop, over the in-memory transport
(``raft.testing.memory``): the runtime's own behaviour (group commit, early send, snapshot
scheduling, snapshots streamed to a joining node, membership) without ports or processes."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import threading
from typing import Any, AsyncIterator, BinaryIO, Callable

from raft.config import NodeOptions
from raft.messages import Entry, MessageType, Ready
from raft.node import RaftNode
from raft.storage import DiskStorage, MemoryStorage, format_storage
from raft.testing.memory import MemoryNetwork
from tests.eventually import eventually

OPTIONS = NodeOptions(tick_ms=10, heartbeat_interval_ms=20, election_timeout_ms=150, fsync=False)
VOTERS = {1: "mem:1", 2: "mem:2", 3: "mem:3"}


class ListMachine:
    """Applies entries to a list: two nodes agree iff their lists are equal."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def apply(self, entry: Entry) -> Any:
        self.items.append(entry.data.decode())
        return entry.index

    def snapshot(self) -> Callable[[BinaryIO], None]:
        data = json.dumps(self.items).encode()
        return lambda f: f.write(data)  # type: ignore[func-returns-value]

    def restore(self, source: BinaryIO) -> None:
        self.items = json.loads(source.read())


class RecordingStorage(MemoryStorage):
    """Counts what each save persisted; ``hold`` blocks saves of entries until released."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.saving = threading.Event()

    def save(self, rd: Ready) -> None:
        if rd.entries:
            self.saving.set()
            self.hold.wait(10)
            self.batches.append(len(rd.entries))


@contextlib.asynccontextmanager
async def cluster(options: NodeOptions = OPTIONS) -> AsyncIterator[tuple[MemoryNetwork, dict[int, RaftNode]]]:
    net = MemoryNetwork()
    nodes = {i: RaftNode(i, VOTERS, ListMachine(), storage=RecordingStorage(),
                         transport=net.transport(i), options=options, seed=i) for i in VOTERS}
    try:
        for n in nodes.values():
            await n.start()
        yield net, nodes
    finally:
        for n in nodes.values():
            n.storage.hold.set()
            await n.stop(transfer=False)


def in_loop(test: Callable[..., Any]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))
    return run


async def leader_of(nodes: dict[int, RaftNode]) -> RaftNode:
    return await eventually(lambda: next((n for n in nodes.values() if n.is_leader), None),
                            what="a leader")


@in_loop
async def test_concurrent_proposals_share_one_write():
    async with cluster() as (_, nodes):
        leader = await leader_of(nodes)
        futures = [leader.propose_nowait(b"%d" % i) for i in range(300)]
        results = await asyncio.gather(*futures)
        assert results == [f.index for f in futures]
        batches = leader.storage.batches
        assert max(batches) >= 100, batches  # group commit: one write for many proposals
        assert len(batches) < 30, batches


@in_loop
async def test_the_leader_sends_appends_before_its_own_write_completes():
    async with cluster() as (net, nodes):
        leader = await leader_of(nodes)
        await leader.propose(b"warm-up")
        appended: set[int] = set()
        net.on_send.append(lambda m: m.type == MessageType.APPEND and m.frm == leader.id
                           and m.entries and appended.add(m.to))
        leader.storage.hold.clear()
        leader.storage.saving.clear()
        fut = leader.propose_nowait(b"x")
        await eventually(lambda: leader.storage.saving.is_set(), what="the leader's write started")
        await eventually(lambda: len(appended) == 2, what="appends to both followers")
        assert not leader.storage.hold.is_set() and not fut.done()  # its own write still held
        leader.storage.hold.set()
        assert await fut == fut.index


@in_loop
async def test_snapshots_are_taken_on_schedule_and_streamed_to_a_joining_node(tmp_path):
    options = NodeOptions(tick_ms=10, heartbeat_interval_ms=20, election_timeout_ms=150,
                          fsync=False, snapshot_entries=20, snapshot_trailing_entries=0,
                          snapshot_chunk_bytes=64)
    async with cluster(options) as (net, nodes):
        leader = await leader_of(nodes)
        for i in range(50):
            await leader.propose(b"item-%d" % i)
        await eventually(lambda: all(n.latest_snapshot.index >= 20 for n in nodes.values()),
                         what="every node snapshotted after 20 entries")
        assert leader.log_start > 1  # the log was compacted behind the snapshot
        data_dir = str(tmp_path / "n4")
        format_storage(data_dir, "default", 4)
        sm = ListMachine()
        joiner = RaftNode(4, VOTERS, sm, address="mem:4", options=options,
                          transport=net.transport(4), storage=DiskStorage(data_dir, 4, fsync=False))
        await joiner.start()
        try:
            await leader.add_voter(4, "mem:4")
            await eventually(lambda: sm.items == nodes[leader.id].sm.items,
                             what="the new node caught up")
            assert joiner.latest_snapshot.index >= 20  # it came as a snapshot (many chunks)
            assert net.sent[MessageType.SNAPSHOT] > 5
            names = os.listdir(os.path.join(data_dir, "snapshots"))
            assert [n for n in names if n.endswith(".snap")] and not [n for n in names if n.endswith(".tmp")]
        finally:
            await joiner.stop(transfer=False)


@in_loop
async def test_membership_changes_reach_every_node():
    async with cluster() as (net, nodes):
        leader = await leader_of(nodes)
        follower = next(i for i in nodes if i != leader.id)
        await leader.remove_member(follower)
        rest = [n for n in nodes.values() if n.id != follower]
        await eventually(lambda: all(follower not in n.status().voters for n in rest),
                         what="the removed voter gone everywhere")
        assert follower not in leader.transport.peers
        assert await leader.propose(b"after") > 0  # two voters still commit



@in_loop
async def test_observers_beyond_the_cap_are_refused_with_resource_exhausted():
    """Observe is open to anyone reaching the port: past MAX_OBSERVERS the leader takes on no
    more progress entries or transport links, and says why in one line."""
    import grpc

    from raft.admin import AdminService
    from raft.core import MAX_OBSERVERS
    from raft.proto import raft_pb2 as rpb

    class Refused(Exception):
        pass

    class Context:
        def set_trailing_metadata(self, md: Any) -> None:
            pass

        async def abort(self, code: grpc.StatusCode, details: str) -> None:
            raise Refused(code, details)

    async with cluster() as (net, nodes):
        leader = await leader_of(nodes)
        admin = AdminService(leader)

        async def observe(nid: int) -> rpb.ObserveResponse:
            return await admin.Observe(rpb.ObserveRequest(node_id=nid, address=f"mem:{nid}",
                                                          cluster_id=leader.cluster_id), Context())
        for nid in range(100, 100 + MAX_OBSERVERS):
            assert (await observe(nid)).leader_id == leader.id
        try:
            await observe(99)
            raise AssertionError("observer 65 was taken on")
        except Refused as e:
            code, details = e.args
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.startswith(f"the leader replicates to at most {MAX_OBSERVERS} observers")
        assert 99 not in leader.transport.peers and 99 not in leader.addresses
        assert (await observe(100)).leader_id == leader.id  # one already observing may ask again


class FormattedStorage(MemoryStorage):
    """Memory storage of a data directory with an id, formatted with ``voters`` (KIP-853) or none."""

    def __init__(self, directory_id: str, voters: tuple[Any, ...] = ()) -> None:
        self.directory_id = directory_id
        self.voters = voters

    def recover(self) -> Any:
        from raft.storage.base import RecoveredState
        return RecoveredState(bootstrap=self.voters)


@in_loop
async def test_add_voter_promotes_only_the_learner_on_its_directory_and_says_when_it_stays_a_learner():
    """KIP-853's AddVoter in two steps: if the new node's disk is formatted again once it is a
    learner, the replica that then catches up is another one, and must not be promoted (it
    could not count: the voter set would need a replica that no longer exists). The error says
    the node stays a learner, and remove_member removes it by its directory."""
    from raft.config import Voter
    from raft.errors import LeftAsLearner, NotCaughtUp
    from raft.messages import ConfChangeType

    net = MemoryNetwork()

    def node(nid: int, storage: MemoryStorage) -> RaftNode:
        return RaftNode(nid, None, ListMachine(), storage=storage, transport=net.transport(nid),
                        options=OPTIONS, address=f"mem:{nid}", seed=nid)
    leader = node(1, FormattedStorage("dir-1", (Voter(1, "mem:1", "dir-1"),)))
    new = node(2, FormattedStorage("dir-2"))
    replaced: list[RaftNode] = []
    try:
        await leader.start()
        await new.start()
        await eventually(lambda: leader.is_leader, what="node 1 leading")
        await leader.propose(b"a")
        leader.observe(2, "mem:2")
        change = leader._change

        async def then_format_it_again(kind: ConfChangeType, *args: Any) -> int:
            index = await change(kind, *args)
            if kind == ConfChangeType.ADD_LEARNER:  # node 2's disk is lost and formatted again
                await new.stop(transfer=False)
                replaced.append(node(2, FormattedStorage("dir-2-formatted-again")))
                await replaced[0].start()
                await leader.propose(b"b")
            return index
        leader._change = then_format_it_again  # type: ignore[method-assign]
        try:
            await leader.add_voter(2, "mem:2", directory_id="dir-2", timeout=1.5, observer_timeout=5)
            raise AssertionError("the replica formatted again was promoted")
        except LeftAsLearner as e:
            assert isinstance(e.cause, NotCaughtUp)
            assert re.fullmatch(r"node 2 was added as a learner \(directory dir-2\) but not made a voter: node 2 did "
                                r"not catch up within \ds; it stays a learner until add_voter makes it a voter or "
                                r"remove_member removes it", str(e)), str(e)
        await eventually(lambda: replaced[0].applied == leader.applied, what="the other replica caught up")
        m = leader.membership
        assert (m.voters, m.learners, m.directory(2)) == ({1}, {2}, "dir-2")
        await leader.remove_member(2, directory_id="dir-2")
        assert leader.membership.members == {1}
        assert await leader.propose(b"c") > 0
    finally:
        for n in (leader, new, *replaced):
            await n.stop(transfer=False)
