"""Running a coroutine to completion from synchronous code, inside or outside an event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def run_coroutine(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` from sync code; inside a running loop it runs on a fresh thread."""

    async def _await() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _await()).result()
