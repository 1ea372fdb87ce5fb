"""A CPU profile of every thread of this process, with the standard library only.

cProfile sees only the thread it runs in, but a durable run spends its CPU in two places: the event
loop (workflows, our loop, the openai client) and DBOS's executor threads (database calls through
sqlalchemy). `CpuSampler` looks at every thread's stack at a fixed interval and weighs each look by
the CPU time the thread used since the previous one (Linux per-thread CPU clocks), so idle and
blocked threads count for nothing. Each sample's CPU goes to the innermost frame that belongs to a
known library ("owner": stdlib frames such as json or asyncio helpers count for the library that
called them); CPU with no library frame on the stack is the event loop's or the thread pool's own.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from types import CodeType
from typing import Any

# Which library a code file belongs to (first match wins).
OWNERS = [
    ("durable_swarm (ours)", ("/durable_swarm/",)),
    ("dbos", ("/dbos/",)),
    ("sqlalchemy + sqlite3/psycopg", ("/sqlalchemy/", "/sqlite3/", "/psycopg")),
    (
        "openai + httpx/aiohttp + pydantic",
        ("/openai/", "/httpx", "/httpcore/", "/aiohttp/", "/anyio/", "/pydantic", "/h11/"),
    ),
]
EVENT_LOOP = "asyncio event loop (callbacks, no library frame)"
THREAD_POOL = "thread plumbing (no library frame)"


def owner(filename: str) -> str | None:
    for name, markers in OWNERS:
        if any(marker in filename for marker in markers):
            return name
    return None


def _thread_group(name: str) -> str:
    if name == "MainThread":
        return "event loop (MainThread)"
    if name.startswith("dbos-executor"):
        return "DBOS executor threads (database calls)"
    return "other threads (DBOS background, listeners)"


class CpuSampler:
    """Use as `with CpuSampler() as sampler: ...`, then `sampler.report()`."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.stacks: Counter[tuple[CodeType, ...]] = Counter()
        self.by_group: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_forever, name="cpu-sampler")

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample_forever(self) -> None:
        me = threading.get_ident()
        last: dict[int, float] = {}
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                try:
                    cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))
                except (OSError, OverflowError):
                    continue  # the thread just ended
                used, last[ident] = cpu - last.get(ident, cpu), cpu
                if used <= 0:
                    continue
                stack = []
                f: Any = frame
                while f is not None:
                    stack.append(f.f_code)
                    f = f.f_back
                self.stacks[tuple(stack)] += used
                self.by_group[_thread_group(names.get(ident, "?"))] += used

    def report(self, top: int = 25) -> dict[str, Any]:
        """CPU seconds by thread group, by owner, and the top library functions (inclusive)."""
        by_owner: Counter[str] = Counter()
        inclusive: Counter[tuple[str, str, str]] = Counter()
        for stack, used in self.stacks.items():
            owners = [owner(code.co_filename) for code in stack]  # innermost first
            found = next((o for o in owners if o), None)
            if found is None:
                files = " ".join(code.co_filename for code in stack)
                found = EVENT_LOOP if "asyncio" in files else THREAD_POOL
            by_owner[found] += used
            seen = set()
            for code, code_owner in zip(stack, owners, strict=True):
                key = (_short(code.co_filename), code.co_name, code_owner or "")
                if code_owner and key not in seen:
                    seen.add(key)
                    inclusive[key] += used
        return {
            "total": sum(self.by_group.values()),
            "by_group": dict(self.by_group),
            "by_owner": dict(by_owner),
            "top": [(f"{f}:{name}", o, s) for (f, name, o), s in inclusive.most_common(top)],
        }


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/src/"):
        if marker in filename:
            return filename.split(marker)[-1]
    return filename
