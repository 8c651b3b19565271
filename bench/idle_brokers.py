"""What the dev cluster's servers cost with no client at all: each broker's and controller's CPU
(user + system, /proc) over a quiet window, with a topic of ``--partitions`` partitions,
replication factor 3, in place.

    python -m bench.idle_brokers --seconds 30
    python -m bench.idle_brokers --base main --rounds 4 --seconds 20   # main's tree and this one in turn
    python -m bench.idle_brokers --seconds 20 --profile /tmp/idle      # py-spy --idle off and perf meanwhile

Why: the brokers' idle CPU (followers' long polls, heartbeats and metadata fetches to the
controllers, timers) is part of every per-core figure of issue 31 and what an idle consumer's
cost is measured against (``bench.idle_fetch``); ``bench.kafka_consume`` measures it for a few
seconds only, after a produce phase whose flushes and compactions may still run.

JSON lines: one per window with ``brokers_cores`` (the three brokers' CPU per second of wall
time), ``brokers_user_cores``, ``controllers_cores`` and each node's ``cores`` by id; with
``--base``, every row tagged ``tree`` and ``round`` and a ``summary`` of the medians and
paired ratios (this / base, round by round).
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import emit, three_brokers
from .kafka_clients import alternate, base_tree, create_topics, stop_cluster
from .kafka_consume import user_system


def _profile(pids: list[int], out: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy's Python frames (``--idle`` left out: only what runs; it does not stop the
    process) per node, and ``perf`` over them all (native and kernel frames), for ``seconds``."""
    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    procs = [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw",
                               "--duration", str(round(seconds)), "-o", str(out / f"idle-{pid}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]
    if shutil.which("perf"):
        procs.append(subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-o", str(out / "perf.data"),
                                       "-p", ",".join(map(str, pids)), "--", "sleep", str(seconds)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def window(pids: dict[int, int], seconds: float) -> dict[int, tuple[float, float]]:
    """Each node's (user, system) CPU seconds over ``seconds`` of wall time from now."""
    before = {nid: user_system(pid) for nid, pid in pids.items()}
    time.sleep(seconds)
    after = {nid: user_system(pid) for nid, pid in pids.items()}
    return {nid: (after[nid][0] - before[nid][0], after[nid][1] - before[nid][1]) for nid in pids}


def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="idlebrokers"))
    cluster = three_brokers(base)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        create_topics(cluster.kafka_bootstrap_servers, ["idle"], args.partitions)
        time.sleep(args.settle)  # the start's own work (elections, first fetches, compiled imports) done
        brokers = {nid: p.pid for nid, p in cluster.broker_procs.items()}
        controllers = {nid: p.pid for nid, p in cluster.procs.items()}
        for w in range(args.windows):
            spies = _profile([*brokers.values(), *controllers.values()], Path(args.profile), args.seconds) \
                if args.profile and w == 0 else []
            cpu = window({**brokers, **controllers}, args.seconds)
            for s in spies:
                s.wait(timeout=60)

            def cores(ids: dict[int, int], cpu: dict[int, tuple[float, float]] = cpu, part: int = 2) -> float:
                return round(sum(sum(cpu[n]) if part == 2 else cpu[n][part] for n in ids) / args.seconds, 4)
            emit({"phase": "idle", "window": w, "seconds": args.seconds, "partitions": args.partitions,
                  "brokers_cores": cores(brokers), "brokers_user_cores": cores(brokers, part=0),
                  "controllers_cores": cores(controllers),
                  "cores": {str(n): round(sum(cpu[n]) / args.seconds, 4) for n in cpu},
                  **({"profiled": True} if spies else {})})
    finally:
        stop_cluster(cluster, base, keep=False)


COMPARED = ("brokers_cores", "brokers_user_cores", "controllers_cores")


def summary(rows: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Per figure of ``COMPARED``: both trees' medians over every window and the median and
    range of the paired ratios (this / base, same round and window)."""
    by = {(row["tree"], row["round"], row["window"]): row for row in rows if row.get("phase") == "idle"}
    out: dict[str, Any] = {"summary": f"this / base, {rounds} rounds"}
    for name in COMPARED:
        pairs = [(b[name], t[name]) for (tree, r, w), b in by.items() if tree == "base"
                 if (t := by.get(("this", r, w))) and b.get(name) and t.get(name)]
        if pairs:
            ratios = sorted(t / b for b, t in pairs)
            out[name] = {"base": statistics.median(b for b, _ in pairs), "this": statistics.median(t for _, t in pairs),
                         "paired_ratio": round(statistics.median(ratios), 3),
                         "range": [round(ratios[0], 3), round(ratios[-1], 3)], "pairs": len(pairs)}
    return out


def compare(args: argparse.Namespace) -> None:
    """This harness on ``--base``'s tree and on this one in turn (base, this, this, base, ...)."""
    base = base_tree(args.base)
    passed = ["--seconds", str(args.seconds), "--windows", str(args.windows), "--partitions", str(args.partitions),
              "--settle", str(args.settle)]
    try:
        rows = alternate("bench.idle_brokers", base, passed, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    emit(summary(rows, args.rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30, help="seconds per measured window")
    ap.add_argument("--windows", type=int, default=1, help="measured windows, one after another")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--settle", type=float, default=5, help="seconds after the topic's creation before measuring")
    ap.add_argument("--profile", metavar="DIR", help="py-spy (per node) and perf during the first window")
    ap.add_argument("--base", help="a commit: its tree and this one run in turn (see compare)")
    ap.add_argument("--rounds", type=int, default=3, help="with --base: runs of each tree")
    args = ap.parse_args()
    if args.base:
        compare(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
