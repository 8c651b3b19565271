"""The longest event-loop stall while a controller's Raft node restores a big metadata
snapshot, with the restore on the loop (as before ``StateMachine.prepare_restore``: the
protocol's default, which runs the whole ``restore`` on the loop) and off it (the metadata
state machine decodes in the node's apply thread and only swaps the image in on the loop), in
the same run. Prints JSON lines:

  build       the synthetic image (bench.metadata_image: topics of 100 partitions, RF 3)
  snapshot    its snapshot file's size
  restore     per mode and path: seconds the restore took and the longest stall of the event
              loop meanwhile (LoopStallProbe); ``start``: a controller starting from its stored
              snapshot, ``install``: a new follower receiving it from that leader

    python -m bench.restore_stall --partitions 1000000

Both nodes are RaftNodes in this process over the in-memory transport, so the probe sees every
stall either causes.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import time
import zlib
from typing import BinaryIO, Callable

from metadata import records as R
from metadata.loop_stall import LoopStallProbe
from metadata.snapshot import read_info, write_snapshot
from metadata.state_machine import MetadataStateMachine
from raft.config import NodeOptions
from raft.messages import BytesSnapshotSource, HardState, Membership, SnapshotMeta
from raft.node import RaftNode
from raft.state_machine import StateMachine
from raft.storage import MemoryStorage, RecoveredState
from raft.testing.memory import MemoryNetwork

from .metadata_image import build, emit

OPTIONS = NodeOptions(tick_ms=10, heartbeat_interval_ms=50, election_timeout_ms=500, fsync=False,
                      snapshot_trailing_entries=0)


class OnLoopRestore(MetadataStateMachine):
    """The restore as it was: the whole decode in ``restore``, on the event loop."""

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        return StateMachine.prepare_restore(self, source)  # reads the bytes; restore on the loop

    def restore(self, source: BinaryIO) -> None:
        MetadataStateMachine.prepare_restore(self, source)()


class StoredSnapshot(MemoryStorage):
    """A single controller's storage holding the snapshot, as after a restart."""

    def __init__(self, snapshot: bytes) -> None:
        info = read_info(io.BytesIO(snapshot))
        meta = SnapshotMeta(info.last_offset, 1, Membership(frozenset({1})), len(snapshot), zlib.crc32(snapshot))
        self.state = RecoveredState(HardState(1, 1, info.last_offset), meta, BytesSnapshotSource(meta, snapshot))

    def recover(self) -> RecoveredState:
        return self.state


async def restore(snapshot: bytes, machine: type[MetadataStateMachine]) -> dict[str, dict[str, float]]:
    """The leader's restore at start, then a follower's install from it."""
    net = MemoryNetwork()
    leader_sm = machine("bench-cluster")
    leader = RaftNode(1, {1: "mem:1"}, leader_sm, storage=StoredSnapshot(snapshot),
                      transport=net.transport(1), options=OPTIONS, seed=1)
    follower_sm = machine("bench-cluster")
    follower = RaftNode(2, {1: "mem:1"}, follower_sm, address="mem:2", storage=MemoryStorage(),
                        transport=net.transport(2), options=OPTIONS, seed=2)
    out = {}
    try:
        async with LoopStallProbe() as probe:
            t0 = time.perf_counter()
            await leader.start()
            took = time.perf_counter() - t0
            await asyncio.sleep(0.1)  # a few more turns of the probe after the swap
        out["start"] = {"restore_s": round(took, 2), "max_stall_ms": round(probe.max_stall_ms, 1)}
        await follower.start()
        await leader.wait_for_leader()
        await leader.propose(R.encode_batch([R.no_op()]))  # an entry of its term: it may change members
        async with LoopStallProbe() as probe:
            t0 = time.perf_counter()
            await leader.add_learner(2, "mem:2", timeout=600)
            await follower.wait_applied(leader.latest_snapshot.index, timeout=600)
            took = time.perf_counter() - t0
            await asyncio.sleep(0.1)
        out["install"] = {"restore_s": round(took, 2), "max_stall_ms": round(probe.max_stall_ms, 1)}
        assert follower_sm.image.partition_count() == leader_sm.image.partition_count()
        return out
    finally:
        await follower.stop(transfer=False)
        await leader.stop(transfer=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=100)
    args = ap.parse_args()
    image = build(max(1, args.partitions // 100), 100, args.brokers)
    buf = io.BytesIO()
    write_snapshot(image, buf, created_ms=1)
    snapshot = buf.getvalue()
    del image, buf
    emit(phase="snapshot", partitions=args.partitions, snapshot_bytes=len(snapshot))
    for mode, machine in (("on-loop", OnLoopRestore), ("off-loop", MetadataStateMachine)):
        for path, figures in asyncio.run(restore(snapshot, machine)).items():
            emit(phase="restore", mode=mode, path=path, partitions=args.partitions, **figures)


if __name__ == "__main__":
    main()
