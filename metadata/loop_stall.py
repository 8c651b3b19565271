"""A probe of event-loop stalls: a task that asks to wake every ``interval_s`` and records how
late it wakes. A controller does everything (Raft ticks, heartbeats, writes) on one asyncio
loop, so the longest lateness is the longest time one piece of work kept every request
waiting. docs/operations.md ("Bounded work per request") bounds it; the controller logs a
warning for each stall over ``warn_ms`` and tests and ``bench/`` read ``max_stall_ms``.

A loop is also late when its thread was ready but the machine gave it no CPU (more runnable
threads than cores): Linux counts that time per thread (``/proc/thread-self/schedstat``, the
run-queue wait), so each stall says how much of it was that wait, and ``max_work_stall_ms``
leaves it out: what the process itself kept the loop from. Of that, the time the loop's thread
ran is work done on the loop; the rest it slept: the interpreter lock held by another thread,
or blocking I/O."""
from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("kraft.loop")

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def schedstat_ms() -> tuple[float, float]:
    """This thread's time on a CPU, and waiting for one while ready to run, in ms ((0, 0) where
    the kernel does not say: no schedstat)."""
    try:
        ran, waited = _SCHEDSTAT.read_bytes().split()[:2]
        return int(ran) / 1e6, int(waited) / 1e6
    except (OSError, ValueError):
        return 0.0, 0.0


class ThreadSchedstat:
    """``schedstat_ms`` of the thread that made it, from a file kept open: the probe reads it
    at every wake (50 a second in a controller), and opening the file each time cost 25 us
    against 2.4 us for ``pread`` of the open one (docs/brokers.md, "The brokers' idle CPU")."""

    def __init__(self) -> None:
        try:  # /proc/thread-self names the opening thread's file, which stays that thread's
            self._fd: int | None = os.open(_SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self._fd = None

    def ms(self) -> tuple[float, float]:
        if self._fd is None:
            return 0.0, 0.0
        try:
            ran, waited = os.pread(self._fd, 128, 0).split()[:2]
            return int(ran) / 1e6, int(waited) / 1e6
        except (OSError, ValueError):
            return 0.0, 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LoopStallProbe:
    def __init__(self, interval_s: float = 0.01, *, warn_ms: float | None = None, name: str = "event loop") -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self.name = name
        self.max_stall_ms = 0.0
        self.max_work_stall_ms = 0.0
        self._task: asyncio.Task | None = None

    def start(self) -> "LoopStallProbe":
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-stall-probe")
        return self

    async def _run(self) -> None:
        schedstat = ThreadSchedstat()  # the loop's thread's
        try:
            ran, waited = schedstat.ms()  # read once per wake: the end of one interval starts the next
            while True:
                due = time.perf_counter() + self.interval_s
                await asyncio.sleep(self.interval_s)
                late_ms = (time.perf_counter() - due) * 1000
                now_ran, now_waited = schedstat.ms()
                cpu_wait_ms = min(max(now_waited - waited, 0.0), max(late_ms, 0.0))
                self.max_stall_ms = max(self.max_stall_ms, late_ms)
                self.max_work_stall_ms = max(self.max_work_stall_ms, late_ms - cpu_wait_ms)
                if self.warn_ms is not None and late_ms > self.warn_ms:
                    log.warning("the %s was blocked for %.0f ms (%.0f ms of it running on the loop, %.0f ms "
                                "waiting for a CPU)", self.name, late_ms, now_ran - ran, cpu_wait_ms)
                ran, waited = now_ran, now_waited
        finally:
            schedstat.close()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def __aenter__(self) -> "LoopStallProbe":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
