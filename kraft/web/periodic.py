"""A periodic background task of the console: what it samples while it runs (the live charts'
metrics, consumer groups' lag) is one task each, started with the app and cancelled with it."""
from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import ClassVar


class Periodic(abc.ABC):
    """Calls ``step`` every ``every`` seconds from ``start`` until ``close``: at once and then
    after each wait, or (``WAIT_FIRST``) only after a first wait. A step says its own failures
    (an exception would end the task)."""

    every: float
    TASK_NAME: ClassVar[str]
    WAIT_FIRST: ClassVar[bool] = False
    _task: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def step(self) -> None:
        """One sample."""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.TASK_NAME)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        if self.WAIT_FIRST:
            await asyncio.sleep(self.every)
        while True:
            await self.step()
            await asyncio.sleep(self.every)
