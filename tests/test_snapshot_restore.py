"""A snapshot from the leader is restored in two phases (raft/state_machine.py,
``prepare_restore``): decoded in a worker thread while the event loop goes on ticking and
answering, then swapped in on the loop, with the log's order kept: entries that arrive while
the snapshot decodes are applied only after the swap. The broker's metadata fetcher loads a
controller's snapshot the same way."""
from __future__ import annotations

import asyncio
import io
import json
import threading
import uuid
from typing import Any, BinaryIO, Callable

import pytest

from brokerd.metadata_fetcher import MetadataFetcher
from metadata import records as R
from metadata.delta import MetadataChanges, MetadataDelta
from metadata.image import MetadataImage
from metadata.loop_stall import LoopStallProbe
from metadata.placement import UsableBroker, place_replicas
from metadata.snapshot import write_snapshot
from metadata.state_machine import MetadataStateMachine
from protos import controller_pb2 as cpb
from raft.config import NodeOptions
from raft.messages import Entry, MessageType
from raft.node import RaftNode
from raft.state_machine import StateMachine
from raft.errors import StorageError
from raft.storage import MemoryStorage
from raft.testing.memory import MemoryNetwork
from tests.eventually import eventually
from tests.test_node_inprocess import VOTERS, cluster, in_loop, leader_of

#: Big enough that decoding it on the loop stalls it for well over a second here.
PARTITIONS = 100_000
#: Bounds the probe's max_work_stall_ms: a stall the process made, without the time a loaded
#: machine gave the loop's thread no CPU (266 ms of that once failed a run at load 15).
STALL_LIMIT_MS = 250


def stalled(probe: LoopStallProbe) -> str:
    return (f"the loop stalled for {probe.max_work_stall_ms:.0f} ms of its own "
            f"({probe.max_stall_ms:.0f} ms with the waits for a CPU)")


class GatedMachine(StateMachine):
    """Keeps applied entries in a list, and a log of what happened in which order; its
    decode waits in the worker thread until the test releases it."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.calls: list[tuple[str, Any]] = []  # ("apply", item) or ("restore", items)
        self.decoding = threading.Event()
        self.release = threading.Event()

    def apply(self, entry: Entry) -> Any:
        self.items.append(entry.data.decode())
        self.calls.append(("apply", self.items[-1]))
        return entry.index

    def snapshot(self) -> Callable[[BinaryIO], None]:
        data = json.dumps(self.items).encode()

        def write(f: BinaryIO) -> None:
            f.write(data)
        return write

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        items = json.loads(source.read())
        self.decoding.set()
        assert self.release.wait(20), "the test never released the decode"

        def swap() -> None:
            self.items = items
            self.calls.append(("restore", list(items)))
        return swap

    def restore(self, source: BinaryIO) -> None:
        self.prepare_restore(source)()


@in_loop
async def test_entries_that_arrive_while_a_snapshot_decodes_are_applied_after_it_in_order():
    """A joiner's first snapshot decodes while the quorum writes on; the entries the leader
    sends meanwhile wait for the swap, and a second snapshot (the leader compacted past them)
    is installed after the first, never across it."""
    options = NodeOptions(tick_ms=10, heartbeat_interval_ms=20, election_timeout_ms=150, fsync=False,
                          snapshot_entries=20, snapshot_trailing_entries=5)
    async with cluster(options) as (net, nodes):
        leader = await leader_of(nodes)
        for i in range(30):
            await leader.propose(b"item-%d" % i)
        await eventually(lambda: leader.latest_snapshot.index >= 20, what="the leader snapshotted")
        sm = GatedMachine()
        joiner = RaftNode(4, VOTERS, sm, address="mem:4", options=options, storage=MemoryStorage(),
                          transport=net.transport(4))
        await joiner.start()
        appends: list[int] = []
        net.on_send.append(lambda m: m.type == MessageType.APPEND and m.to == 4 and m.entries
                           and sm.decoding.is_set() and appends.append(m.entries[-1].index))
        try:
            await leader.add_learner(4, "mem:4")
            await eventually(sm.decoding.is_set, what="the joiner decoding the leader's snapshot")
            # Meanwhile the quorum goes on, and the leader snapshots again (another install may
            # come): the joiner's loop takes entries in, but applies nothing before the swap.
            for i in range(30, 60):
                await leader.propose(b"item-%d" % i)
            await eventually(lambda: appends, what="entries sent to the joiner while it decodes")
            await eventually(lambda: joiner.leader_id == leader.id, what="the joiner's loop running")
            assert sm.calls == [] and joiner.applied == 0
            # The leader's log now starts after what it sent: the joiner needs a second snapshot.
            await eventually(lambda: leader.log_start > max(appends) + 1, what="the leader compacted its log")
            sm.release.set()
            expected = nodes[leader.id].sm.items
            await eventually(lambda: sm.items == expected, what="the joiner caught up")
        finally:
            sm.release.set()
            await joiner.stop(transfer=False)
    # Replayed, the joiner's calls only ever move it along the leader's history: a snapshot
    # first, then each entry once and in order, or a later snapshot.
    assert sm.calls[0][0] == "restore", sm.calls
    assert [kind for kind, _ in sm.calls].count("restore") == 2, sm.calls
    state: list[str] = []
    for kind, what in sm.calls:
        if kind == "restore":
            assert len(what) >= len(state), sm.calls
            state = what
        else:
            state.append(what)
        assert state == expected[:len(state)], sm.calls


class UnreadableSnapshots(GatedMachine):
    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        raise ValueError("not a snapshot of this machine")


@in_loop
async def test_a_snapshot_from_the_leader_that_cannot_be_restored_stops_the_node_saying_so():
    options = NodeOptions(tick_ms=10, heartbeat_interval_ms=20, election_timeout_ms=150, fsync=False,
                          snapshot_entries=20, snapshot_trailing_entries=0)
    async with cluster(options) as (net, nodes):
        leader = await leader_of(nodes)
        for i in range(30):
            await leader.propose(b"item-%d" % i)
        await eventually(lambda: leader.latest_snapshot.index >= 20, what="the leader snapshotted")
        joiner = RaftNode(4, VOTERS, UnreadableSnapshots(), address="mem:4", options=options,
                          storage=MemoryStorage(), transport=net.transport(4))
        await joiner.start()
        try:
            await leader.add_learner(4, "mem:4")
            error = await asyncio.wait_for(joiner.wait_stopped(), 10)
        finally:
            await joiner.stop(transfer=False)
    assert not isinstance(error, StorageError)  # the disk is fine: it was not "persisting the log"
    assert str(error).startswith("node 4 stopped: restoring the leader's snapshot at index "), error
    assert str(error).endswith("failed: not a snapshot of this machine"), error


def big_image(partitions: int) -> MetadataImage:
    """Topics of 100 partitions over 30 brokers, replicated 3 times, built with the records a
    controller writes."""
    brokers = [UsableBroker(b, f"rack{b % 3}") for b in range(30)]
    records = [R.feature_level("metadata.version", 1)]
    records += [R.register_broker(b.id, uuid.UUID(int=b.id + 1), 1, [R.endpoint("PLAINTEXT", f"b{b.id}", 9092)],
                                  rack=b.rack, fenced=False) for b in brokers]
    for t in range(partitions // 100):
        tid = uuid.UUID(int=(t + 1) << 64)
        records.append(R.topic(f"topic-{t:05d}", tid))
        records += [R.partition(tid, p, reps) for p, reps in enumerate(place_replicas(brokers, 100, 3, start=t))]
    delta = MetadataDelta(MetadataImage.empty("restore-test"))
    delta.replay_batch(records, 1, 1)
    return delta.apply()


@pytest.fixture(scope="module")
def big_snapshot() -> bytes:
    buf = io.BytesIO()
    write_snapshot(big_image(PARTITIONS), buf, created_ms=1)
    return buf.getvalue()


@in_loop
async def test_a_follower_restores_a_big_metadata_snapshot_without_stalling_its_event_loop(big_snapshot):
    options = NodeOptions(tick_ms=10, heartbeat_interval_ms=20, election_timeout_ms=150, fsync=False,
                          snapshot_trailing_entries=0)
    net = MemoryNetwork()
    leader_sm = MetadataStateMachine("restore-test")
    leader_sm.restore(io.BytesIO(big_snapshot))
    leader = RaftNode(1, {1: "mem:1"}, leader_sm, storage=MemoryStorage(), transport=net.transport(1),
                      options=options, seed=1)
    follower_sm = MetadataStateMachine("restore-test")
    follower = RaftNode(2, {1: "mem:1"}, follower_sm, address="mem:2", storage=MemoryStorage(),
                        transport=net.transport(2), options=options, seed=2)
    await leader.start()
    await follower.start()
    try:
        await leader.wait_for_leader()
        await leader.propose(R.encode_batch([R.no_op()]))
        await leader.snapshot_now()
        async with LoopStallProbe() as probe:
            await leader.add_learner(2, "mem:2")
            await eventually(lambda: follower.applied >= leader.latest_snapshot.index, timeout=60,
                             what="the follower installed the leader's snapshot")
            await asyncio.sleep(0.05)  # one more turn of the probe after the swap
        assert follower_sm.image.partition_count() == PARTITIONS
        assert probe.max_work_stall_ms < STALL_LIMIT_MS, stalled(probe)
    finally:
        await follower.stop(transfer=False)
        await leader.stop(transfer=False)


class SnapshotServingClient:
    """What a broker's MetadataFetcher asks of the controller: its log is compacted, so it
    serves the snapshot, in chunks."""

    def __init__(self, snapshot: bytes) -> None:
        self.snapshot = snapshot

    async def fetch_metadata(self, request: cpb.FetchMetadataRequest, **_: Any) -> cpb.FetchMetadataResponse:
        return cpb.FetchMetadataResponse(error_code=cpb.OFFSET_OUT_OF_RANGE, snapshot_offset=1, high_watermark=2)

    async def fetch_snapshot(self, request: cpb.FetchSnapshotRequest, **_: Any) -> cpb.FetchSnapshotResponse:
        data = self.snapshot[request.position:request.position + request.max_bytes]
        return cpb.FetchSnapshotResponse(size=len(self.snapshot), data=data)


@in_loop
async def test_a_broker_loads_a_big_metadata_snapshot_and_its_changes_off_the_event_loop(big_snapshot):
    fetcher = MetadataFetcher(SnapshotServingClient(big_snapshot), broker_id=1,  # type: ignore[arg-type]
                              image=MetadataImage.empty("restore-test"))
    seen: list[MetadataChanges | None] = []
    fetcher.listeners.append(lambda image, changes: seen.append(changes))
    async with LoopStallProbe() as probe:
        await fetcher.fetch_once()
        await asyncio.sleep(0.05)
    assert fetcher.image.partition_count() == PARTITIONS
    # The listeners (the replica manager) get what changed, worked out in the thread too.
    assert seen and seen[0] is not None and len(seen[0].topics_created) == PARTITIONS // 100
    assert probe.max_work_stall_ms < STALL_LIMIT_MS, stalled(probe)
