"""How long a ``kraft`` call takes before it does anything: ``kraft --help`` (start-up and
imports alone) and a ``topics list`` round trip against three local controllers, each run as
its own process the way an operator runs it, wall time and CPU (user+sys) per run. Prints
one JSON line per command, with the median over ``--runs``.

    python -m bench.cli_startup                       # this checkout
    python -m bench.cli_startup --checkout /tmp/old   # another checkout, for a before/after pair

Targets (issue 25): ``kraft --help`` <= 0.3 s and ``topics list`` <= 0.6 s on an idle 2-core
machine."""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO, emit

#: What the installed ``kraft`` script runs.
KRAFT = "import sys; from kraft.cli import main; sys.argv[0] = 'kraft'; sys.exit(main())"
TARGETS = {"--help": 0.3, "topics list": 0.6}


def timed(checkout: Path, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ``kraft ARGS`` process importing from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", KRAFT, *args], cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"kraft {' '.join(args)} failed: {p.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(checkout: Path, name: str, args: list[str], runs: int) -> None:
    timed(checkout, args)  # warm the page cache and the .pyc files
    samples = [timed(checkout, args) for _ in range(runs)]
    walls = [w for w, _ in samples]
    emit({"bench": "cli_startup", "checkout": str(checkout), "command": f"kraft {name}", "runs": runs,
          "median_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
          "cpu_median_s": round(statistics.median(c for _, c in samples), 3), "target_s": TARGETS[name],
          "load1": round(os.getloadavg()[0], 2)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--checkout", type=Path, default=REPO, help="the source tree whose kraft is timed")
    a = ap.parse_args()
    checkout = a.checkout.resolve()
    measure(checkout, "--help", ["--help"], a.runs)

    from kraft.dev_quorum import DevQuorum, consecutive_ports
    q = DevQuorum(base_port=consecutive_ports(3), brokers=0)  # as the other benchmarks start theirs
    try:
        q.start()
        asyncio.run(q.wait_for_leader())
        measure(checkout, "topics list", ["topics", "--bootstrap-controller", q.bootstrap, "list"], a.runs)
    finally:
        q.stop()


if __name__ == "__main__":
    main()
