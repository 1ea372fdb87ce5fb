"""Blocking calls from code that may run inside an event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
import types
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Sync tools and sync model clients block for as long as they take (a model call: seconds), so
# they get threads of their own: DBOS's executor stays small, for database calls only.
BLOCKING_THREADS = 64
_blocking: concurrent.futures.ThreadPoolExecutor | None = None
_blocking_lock = threading.Lock()


def blocking_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool for sync tools and sync model calls made from async code
    (`BLOCKING_THREADS` threads at most, started on demand)."""
    global _blocking
    with _blocking_lock:
        if _blocking is None:
            _blocking = concurrent.futures.ThreadPoolExecutor(
                BLOCKING_THREADS, thread_name_prefix="durable-swarm-blocking"
            )
        return _blocking


async def run_in(
    executor: concurrent.futures.Executor | None,
    func: Callable[..., T],
    /,
    *args: Any,
    **kwargs: Any,
) -> T:
    """`asyncio.to_thread` on `executor` (None: the event loop's default): `func` runs in one of
    its threads with the caller's context variables, and the caller awaits it."""
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def in_thread(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`run_in(blocking_executor(), func, ...)`."""
    return await run_in(blocking_executor(), func, *args, **kwargs)


# Functions (a bound method's, for a model client's `create`) -> whether they are `async def`:
# asked at every model call, and unwrapping decorators is not free.
_ASYNC_FUNCTIONS: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def is_async_callable(func: Any) -> bool:
    """Whether `func` is an `async def` function, also behind decorators that keep
    `__wrapped__` (`functools.wraps`, as on `openai.AsyncOpenAI`'s `create`) or a
    `functools.partial` (`inspect.iscoroutinefunction` alone misses the decorated ones).
    The answer for a function (or a bound method's function) is remembered."""
    function = getattr(func, "__func__", func)
    if type(function) is not types.FunctionType:
        return inspect.iscoroutinefunction(inspect.unwrap(func))
    known = _ASYNC_FUNCTIONS.get(function)
    if known is None:
        known = _ASYNC_FUNCTIONS[function] = inspect.iscoroutinefunction(inspect.unwrap(function))
    return known


def run_coroutine(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` from sync code; inside a running loop it runs on a fresh thread."""

    async def _await() -> T:
        return await awaitable

    result: T = off_event_loop(asyncio.run)(_await())
    return result


def in_event_loop() -> bool:
    """Whether the calling thread runs an event loop (asked without leaving an exception
    context behind, so errors raised after it carry no chained `no running event loop`)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def off_event_loop(method: F) -> F:
    """Make a blocking method callable from inside a running event loop: there it runs on a
    worker thread (DBOS refuses its blocking calls on an event loop's thread). It still blocks
    its caller, as any synchronous call does."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not in_event_loop():
            return method(*args, **kwargs)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(method, *args, **kwargs).result()

    return wrapper  # type: ignore[return-value]
