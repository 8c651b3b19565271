"""A readable simulated scenario: a 3-node cluster elects a leader, commits entries, loses
its leader, elects another and carries on. ``python -m raft.testing.demo``"""
from __future__ import annotations

from ..messages import Role
from .sim import SimConfig, Simulation


def main() -> None:
    cfg = SimConfig(nodes=3, propose_every_ms=0, latency_ms=(1, 3), fsync_ms=(1, 2))
    sim = Simulation(7, cfg, trace=print)
    print("3 nodes, simulated network (1-3 ms) and disks (1-2 ms fsync); ticks of 10 ms\n")

    def run_until(cond, limit_ms: int = 5000) -> None:
        start = sim.now
        while not cond() and sim.now - start < limit_ms:
            sim.step()
        if not cond():
            raise SystemExit("the scenario did not progress; this is a bug")

    run_until(lambda: bool(sim.leaders()))
    leader = sim.leaders()[0]
    for k in range(5):
        leader.core.propose([b"set x=%d" % k])
        leader.observe()
    target = leader.core.log.last_index()
    run_until(lambda: all(n.sm.index >= target for n in sim.nodes.values()))
    sim.log(f"entries 1..{target} committed and applied on all three nodes "
            f"(commit index {leader.core.log.committed})")

    sim.log(f"node {leader.id} (the leader) crashes")
    leader.crash()
    old_term = leader.core.term
    run_until(lambda: any(n.core.term > old_term for n in sim.leaders()))
    new = sim.leaders()[0]
    new.core.propose([b"set y=1"])
    new.observe()
    target = new.core.log.last_index()
    run_until(lambda: all(n.sm.index >= target for n in sim.nodes.values() if n.alive))
    sim.log(f"node {new.id} leads term {new.core.term}; entry {target} committed by the two survivors")

    sim._restart(leader.id)
    run_until(lambda: leader.sm.index >= target)
    sim.log(f"node {leader.id} restarted and caught up to index {leader.sm.index} "
            f"as a {leader.core.role.name.lower()}")
    assert leader.core.role == Role.FOLLOWER
    print("\nno safety property was violated: every step above was checked")


if __name__ == "__main__":
    main()
