"""The one way tests wait: on the condition itself, never on a sleep long enough "usually"."""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable


async def eventually(check: Callable[[], Any], timeout: float = 10.0, *, interval: float = 0.05,
                     what: str = "") -> Any:
    """Call ``check`` (plain or async) until it returns something truthy, and return that; after
    ``timeout`` seconds fail with ``what`` and the last value seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what or getattr(check, '__name__', 'condition')} "
                                 f"(last: {value!r})")
        await asyncio.sleep(interval)
