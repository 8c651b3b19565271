"""A consumer group member as its own process, for tests that kill one with SIGKILL: it prints
``assigned [...]`` on each assignment and one JSON line per record it processed, and commits
after processing (auto commit), so what it printed is at least what it committed.

    python -m tests.group_member BOOTSTRAP GROUP TOPIC [strategy]
"""
from __future__ import annotations

import asyncio
import json
import sys

from clients import Consumer


async def main(bootstrap: str, group: str, topic: str, strategy: str) -> None:
    def assigned(tps):
        print(json.dumps({"assigned": sorted(tps)}), flush=True)

    async with Consumer(bootstrap, group_id=group, auto_offset_reset="earliest", session_timeout_ms=3000,
                        heartbeat_interval_ms=300, auto_commit_interval_ms=200, fetch_max_wait_ms=100,
                        partition_assignment_strategy=strategy) as c:
        await c.subscribe([topic], on_assigned=assigned)
        while True:
            for r in await c.poll(200):
                print(json.dumps({"p": r.partition, "o": r.offset, "v": r.value.decode()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4], sys.argv[4] if len(sys.argv) > 4 else "range"))
