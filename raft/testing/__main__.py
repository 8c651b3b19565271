"""Run many seeded simulations: ``python -m raft.testing --seeds 20000``.

Each seed draws its own fault mix; a failing seed prints the one command that replays it,
with ``--trace`` for the timeline of elections, crashes and partitions.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

from .sim import run_seed


def _one(args: tuple[int, int]) -> tuple[int, str]:
    seed, steps = args
    try:
        run_seed(seed, steps)
        return seed, ""
    except Exception as e:  # a violation, or a crash of the core: both fail the seed
        return seed, f"{type(e).__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raft.testing", description=__doc__)
    ap.add_argument("--seeds", type=int, default=500, help="how many seeds to run")
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--seed", type=int, help="run just this seed")
    ap.add_argument("--steps", type=int, default=3000, help="events per seed before healing")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--trace", action="store_true", help="print the timeline (with --seed)")
    a = ap.parse_args(argv)

    if a.seed is not None:
        sim = None
        try:
            sim = run_seed(a.seed, a.steps, trace=print if a.trace else None)
        except Exception as e:
            print(f"seed {a.seed} FAILED: {type(e).__name__}: {e}")
            return 1
        print(f"seed {a.seed} passed: {sim.stats}")
        return 0

    seeds = range(a.first, a.first + a.seeds)
    t0 = time.monotonic()
    failures: list[tuple[int, str]] = []
    work = [(s, a.steps) for s in seeds]
    with mp.Pool(a.jobs) as pool:
        for done, (seed, err) in enumerate(pool.imap_unordered(_one, work, chunksize=8), 1):
            if err:
                failures.append((seed, err))
                print(f"seed {seed} FAILED: {err}\n  replay: python -m raft.testing "
                      f"--seed {seed} --steps {a.steps} --trace", flush=True)
            if done % 1000 == 0:
                print(f"... {done}/{len(work)} seeds, {time.monotonic() - t0:.0f}s", flush=True)
    if failures:
        print(f"{len(failures)} of {len(work)} seeds failed")
        return 1
    print(f"{len(work)} seeds passed ({a.steps} steps each, {time.monotonic() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
