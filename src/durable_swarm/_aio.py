"""Blocking calls from code that may run inside an event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def run_coroutine(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` from sync code; inside a running loop it runs on a fresh thread."""

    async def _await() -> T:
        return await awaitable

    result: T = off_event_loop(asyncio.run)(_await())
    return result


def off_event_loop(method: F) -> F:
    """Make a blocking method callable from inside a running event loop: there it runs on a
    worker thread (DBOS refuses its blocking calls on an event loop's thread). It still blocks
    its caller, as any synchronous call does."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return method(*args, **kwargs)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(method, *args, **kwargs).result()

    return wrapper  # type: ignore[return-value]
