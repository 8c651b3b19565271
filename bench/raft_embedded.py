"""The library embedded in an application: a 3-node cluster in 3 processes, and N writes kept
in flight from inside the leader for S seconds (the workload of
``../shared/anchors/pysyncobj_bench.py``). Prints one JSON line in the anchors' format.

    python -m bench.raft_embedded --clients 64 --seconds 10 --value 256
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from typing import BinaryIO, Callable

import grpc

from raft import Role
from raft.proto import raft_pb2 as rpb
from raft.proto import raft_pb2_grpc
from raft.config import NodeOptions
from raft.node import RaftNode
from raft.state_machine import StateMachine
from raft.storage import format_storage

from .common import emit, free_ports, load_parser, summary


class Register(StateMachine):
    """A minimal state machine: a dict of the last value per key."""

    def __init__(self) -> None:
        self.d: dict[bytes, bytes] = {}

    def apply(self, entry) -> None:
        self.d[entry.data[:16]] = entry.data

    def snapshot(self) -> Callable[[BinaryIO], None]:
        count = b"%d" % len(self.d)

        def write(f: BinaryIO) -> None:
            f.write(count)
        return write

    def restore(self, source: BinaryIO) -> None:
        self.d = {}


def _options(fsync: bool) -> NodeOptions:
    return NodeOptions(fsync=fsync)


def follower(nid: int, voters: str, base: str, fsync: bool, stop) -> None:
    async def go() -> None:
        node = RaftNode(nid, voters, Register(), data_dir=os.path.join(base, f"n{nid}"),
                        options=_options(fsync))
        await node.start()
        await asyncio.to_thread(stop.wait)  # a multiprocessing event: waited on in a thread
        await node.stop(transfer=False)
    asyncio.run(go())


async def lead(voters: str, base: str, fsync: bool, clients: int, seconds: float, value: int) -> dict:
    node = RaftNode(1, voters, Register(), data_dir=os.path.join(base, "n1"), options=_options(fsync))
    leading = asyncio.Event()
    node.on_role_change(lambda role, _leader, _term: leading.set() if role == Role.LEADER else None)
    await node.start()
    leader = await node.wait_for_leader(30)
    if leader != 1:  # have the leader hand over, through its admin service
        async with grpc.aio.insecure_channel(node.addresses[leader]) as ch:
            await raft_pb2_grpc.RaftAdminStub(ch).TransferLeadership(rpb.TransferRequest(target=1), timeout=10)
    if not node.is_leader:
        await asyncio.wait_for(leading.wait(), 30)
    payload = b"v" * value
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def writer(w: int) -> None:
        i = 0
        key = b"%016d" % w
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await node.propose(key + payload)
            lat.append(time.perf_counter() - t)
            i += 1
    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(clients)))
    elapsed = time.perf_counter() - t0
    await node.stop(transfer=False)
    return summary("pykraft-embedded" + ("" if fsync else "-nofsync"), clients, value, lat, elapsed)


def main() -> None:
    ap = load_parser(__doc__)
    ap.add_argument("--no-fsync", action="store_true", help="like PySyncObj's default in-memory journal")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="raftembedded")
    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    for nid in (1, 2, 3):
        format_storage(os.path.join(base, f"n{nid}"), "bench", nid)
    # spawn, not fork: gRPC's runtime is up in this process (common.channels starts it at import)
    # and does not survive a fork.
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=follower, args=(nid, voters, base, not a.no_fsync, stop)) for nid in (2, 3)]
    for p in procs:
        p.start()
    try:
        emit(asyncio.run(lead(voters, base, not a.no_fsync, a.clients, a.seconds, a.value)))
    finally:
        stop.set()
        for p in procs:
            p.join(10)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
