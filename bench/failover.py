"""Failover time of the example KV cluster: ``kill -9`` the leader, then time until the first
write commits on a new leader. Repeated ``--kills`` times (the killed node restarts and catches
up in between). Prints one JSON line with p50_s and max_s.

    python -m bench.failover --kills 10
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from raft.examples.kv.client import KVClient, KVError

from .common import KVProcesses, emit


async def run(kills: int, args: tuple[str, ...]) -> dict:
    c = KVProcesses(3, args)
    times: list[float] = []
    try:
        for k in range(kills):
            leader = await c.leader()
            kv = KVClient([c.endpoint(i) for i in c.ids], timeout=30)
            await kv.put(b"before", b"%d" % k)
            await kv.close()
            others = [i for i in c.ids if i != leader]
            kv = KVClient([c.endpoint(i) for i in others], timeout=30, attempt_timeout=0.5)
            t0 = time.perf_counter()
            c.kill(leader)
            while True:
                try:
                    await kv.put(b"after", b"%d" % k)
                    break
                except KVError:
                    continue
            times.append(time.perf_counter() - t0)
            await kv.close()
            c.start(leader)
            await asyncio.sleep(1.0)  # let it rejoin before the next round
    finally:
        c.close()
    times.sort()
    return {"system": "pykraft-kv", "bench": "failover", "kills": kills,
            "p50_s": round(statistics.median(times), 3), "max_s": round(times[-1], 3),
            "min_s": round(times[0], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    a = ap.parse_args()
    emit(asyncio.run(run(a.kills, ())))


if __name__ == "__main__":
    main()
