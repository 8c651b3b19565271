"""The randomized whole-cluster simulation: 500 seeds in the default suite; `make sim
SEEDS=20000` runs as many as you like. A failure names the command that replays it."""
import dataclasses
import multiprocessing as mp
import os
import random

from raft.messages import Membership
from raft.testing.__main__ import _one
from raft.testing.sim import SimConfig, Simulation, run_seed

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "500"))
STEPS = 3000


def test_randomized_simulation_keeps_raft_safe_and_live():
    # spawn, not fork: earlier tests in this process have started gRPC threads, and a forked
    # child of a gRPC process is not safe
    with mp.get_context("spawn").Pool(os.cpu_count() or 1) as pool:
        results = pool.map(_one, [(s, STEPS) for s in range(SEEDS)], chunksize=10)
    failures = [f"seed {s}: {err}\n  replay: python -m raft.testing --seed {s} --steps {STEPS} --trace"
                for s, err in results if err]
    assert not failures, "\n".join(failures)


def test_a_seed_replays_identically():
    a, b = run_seed(1234, 1500), run_seed(1234, 1500)
    assert a.stats == b.stats and a.now == b.now
    assert {n: c.core.log.last_index() for n, c in a.nodes.items()} == \
        {n: c.core.log.last_index() for n, c in b.nodes.items()}


def test_the_checker_catches_a_broken_core():
    """Sabotage: a core that acknowledges appends without checking the previous entry must be
    caught by the safety checks (a test of the tests)."""
    from raft import log as raft_log
    original = raft_log.RaftLog.match_term
    raft_log.RaftLog.match_term = lambda self, index, term: True
    try:
        caught = 0
        for seed in range(40):
            try:
                run_seed(seed, 3000)
            except AssertionError:
                caught += 1
        assert caught > 0
    finally:
        raft_log.RaftLog.match_term = original


def _wipe_runs(seeds: range) -> tuple[int, int]:
    """Three voters, one of which loses its disk and is formatted again (a new directory id)
    early in each run, among the other faults of the seed: (runs that failed, wipes)."""
    failed = wipes = 0
    for seed in seeds:
        cfg = dataclasses.replace(SimConfig.randomized(random.Random(seed ^ 0x5EED)), nodes=3, spare_nodes=0,
                                  conf_change_every_ms=0, wipe_every_ms=300)
        sim = Simulation(seed, cfg)
        try:
            sim.run(STEPS)
            sim.heal()
            sim.await_progress(100 * cfg.election_ticks * cfg.tick_ms)
        except AssertionError:
            failed += 1
        wipes += sim.stats["wipes"]
    return failed, wipes


def test_a_voter_formatted_again_never_counts_as_the_voter_it_was():
    """KIP-853: with directory ids in the membership, wiped voters break no safety property;
    counting them as the voters they were (sabotage: every directory matches) breaks election
    safety or leader completeness, and the checker sees it (a test of the test)."""
    assert _wipe_runs(range(60)) == (0, 60)
    original = Membership.matches
    Membership.matches = lambda self, node_id, directory: True
    try:
        failed, wipes = _wipe_runs(range(60))
    finally:
        Membership.matches = original
    assert failed > 0 and wipes == 60


def test_disks_are_wiped_in_runs_whose_membership_changes():
    """Wipes and membership changes in the same runs: a wiped learner or voter removed and
    added back with its new directory, then perhaps wiped again, all checked for safety and
    for progress once healed (``run_seed`` raises otherwise)."""
    both = [s for s in range(60) if (st := run_seed(s, STEPS).stats)["wipes"] and st["conf_changes"]]
    assert len(both) >= 5, both


def test_faults_happen_in_the_randomized_runs():
    totals = {"elections": 0, "crashes": 0, "snapshots": 0, "conf_changes": 0, "transfers": 0,
              "reads": 0, "lost": 0, "wipes": 0}
    for seed in range(60):
        sim = run_seed(seed, STEPS)
        for k in totals:
            totals[k] += sim.stats[k]
    assert all(v > 0 for v in totals.values()), totals
