"""Micro-benchmark of the pure Raft core: a fault-free 3-node cluster in one process, with
in-memory persistence and a trivial state machine, so only the consensus logic is measured.

    python -m bench.core [--entries N] [--value 256]

Prints one JSON line per mode, with entries committed and applied on all three nodes per
second of CPU time:
  batched: each proposal carries 100 entries;
  single:  each proposal carries one entry and runs its full round (append, acknowledge,
           commit, apply) before the next is proposed.
"""
from __future__ import annotations

import argparse
import json
import time

from raft.core import CoreConfig, RaftCore
from raft.messages import Membership, Role


class Cluster:
    def __init__(self) -> None:
        members = Membership(frozenset({1, 2, 3}))
        cfg = CoreConfig(pre_vote=False, check_quorum=False)
        self.nodes = {i: RaftCore(i, cfg, seed=1, membership=members) for i in (1, 2, 3)}
        self.applied = {i: 0 for i in self.nodes}
        leader = self.nodes[1]
        while leader.role != Role.LEADER:
            leader.tick()
            self.settle()

    def settle(self) -> None:
        nodes, applied = self.nodes, self.applied
        moving = True
        while moving:
            moving = False
            for nid, core in nodes.items():
                if core.has_ready():
                    rd = core.ready()
                    applied[nid] += len(rd.committed)  # "apply": count them
                    core.advance(rd)  # in-memory storage: durable at once
                    for m in rd.messages:
                        nodes[m.to].step(m)
                    moving = True


def run(mode: str, total: int, value: int) -> dict:
    c = Cluster()
    leader = c.nodes[1]
    data = b"v" * value
    batch = [data] * 100
    base = min(c.applied.values())
    t0 = time.process_time()
    if mode == "batched":
        for _ in range(total // 100):
            leader.propose(batch)
            c.settle()
    else:
        for _ in range(total):
            leader.propose([data])
            c.settle()
    # followers learn the last commit with the next message: one heartbeat round
    leader.tick()
    c.settle()
    elapsed = time.process_time() - t0
    done = min(c.applied.values()) - base
    assert done >= total, (done, total)
    return {"bench": f"core-{mode}", "nodes": 3, "value_bytes": value, "entries": done,
            "cpu_s": round(elapsed, 3), "entries_per_s": round(done / elapsed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--value", type=int, default=256)
    a = ap.parse_args()
    print(json.dumps(run("batched", a.entries, a.value)), flush=True)
    print(json.dumps(run("single", a.entries // 10, a.value)), flush=True)


if __name__ == "__main__":
    main()
