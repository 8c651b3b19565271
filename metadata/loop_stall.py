"""A probe of event-loop stalls: a task that asks to wake every ``interval_s`` and records how
late it wakes. A controller does everything (Raft ticks, heartbeats, writes) on one asyncio
loop, so the longest lateness is the longest time one piece of work kept every request
waiting. docs/operations.md ("Bounded work per request") bounds it; the controller logs a
warning for each stall over ``warn_ms`` and tests and ``bench/`` read ``max_stall_ms``."""
from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("kraft.loop")


class LoopStallProbe:
    def __init__(self, interval_s: float = 0.01, *, warn_ms: float | None = None, name: str = "event loop") -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.name = name
        self.max_stall_ms = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> "LoopStallProbe":
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-stall-probe")
        return self

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            late_ms = (time.perf_counter() - due) * 1000
            self.max_stall_ms = max(self.max_stall_ms, late_ms)
            if self.warn_ms is not None and late_ms > self.warn_ms:
                log.warning("the %s was blocked for %.0f ms", self.name, late_ms)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def __aenter__(self) -> "LoopStallProbe":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
