"""Fixtures of the fault tests: real processes (plain `DurableSwarm` ones and workers) on one
database, the fake model they share, and the faults (SIGKILL, SIGSTOP/SIGCONT, a database cut
by a loopback TCP proxy, a read-only or full SQLite file; `_rofs.py`: a FUSE filesystem that
turns read-only).

Every test here is marked `faults` (run by `make test-faults`, which CI runs after `make test`).
The model answers `step <tag>` with a call of `step(tag)`, then `done <tag>`; `arrivals(tag,
stage)` counts its requests (stage = tool results in the request), so a test can tell that a
finished model call was never made again; `hold(tag, stage)` keeps such a call in the model.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

os.environ.setdefault("DURABLE_SWARM_LOG_LEVEL", "ERROR")

from _support import procs
from _support.db import drop_database, new_database_name, with_database
from _support.logs import read_lines
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply, ToolCall, calls, text

from ._proxy import TcpProxy

HERE = Path(__file__).resolve().parent
TIMEOUT = procs.TIMEOUT


# `make test-faults` runs two pytest processes (`--dist loadgroup`): one runs every fault test,
# one at a time, as timing-sensitive tests need; the other the missing-agent test alone, which
# spends its minutes waiting out its horizon (idle processes: it takes little CPU from the rest).
ALONGSIDE = "test_missing_agents.py"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        if path.parent == HERE:
            item.add_marker(pytest.mark.faults)
            group = "idle-horizon" if path.name == ALONGSIDE else "one-at-a-time"
            item.add_marker(pytest.mark.xdist_group(group))


class Model:
    """`step <tag>`: a call of `step(tag)`, then `done <tag>`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrivals: dict[tuple[str, int], int] = {}
        self._first: dict[tuple[str, int], float] = {}  # when each first arrived (time.time())
        self.delay = 0.0  # seconds before each answer
        self._gates: dict[tuple[str, int], threading.Event] = {}

    def hold(self, tag: str, stage: int) -> None:
        """Keep the answers to `(tag, stage)` until `release(tag, stage)`. The fake server
        answers one request at a time: every other request waits too."""
        self._gates[(tag, stage)] = threading.Event()

    def release(self, tag: str, stage: int) -> None:
        """Answer `(tag, stage)` again (the held request, and every later one)."""
        self._gates[(tag, stage)].set()

    def arrivals(self, tag: str, stage: int) -> int:
        with self._lock:
            return self._arrivals.get((tag, stage), 0)

    def first_arrival(self, tag: str, stage: int) -> float | None:
        """When the first request of `(tag, stage)` arrived (`time.time()`), if one did."""
        with self._lock:
            return self._first.get((tag, stage))

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        user = next(str(m.get("content")) for m in messages if m.get("role") == "user")
        tag = user.partition(" ")[2]
        stage = sum(1 for m in messages if m.get("role") == "tool")
        with self._lock:
            self._arrivals[(tag, stage)] = self._arrivals.get((tag, stage), 0) + 1
            self._first.setdefault((tag, stage), time.time())
            gate = self._gates.get((tag, stage))
        if gate is not None:
            gate.wait(TIMEOUT)
        reply = calls(ToolCall("step", {"tag": tag})) if stage == 0 else text(f"done {tag}")
        return Fault.delay(self.delay, reply) if self.delay else reply


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def server(model: Model) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model) as fake:
        yield fake


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def worker_settings(database_url: str, queue: str, beat: float, dead: float) -> dict[str, Any]:
    """`run_worker` settings of a fault test's workers (fast heartbeats and queue polls)."""
    return {
        "database_url": database_url,
        "queue": queue,
        "heartbeat_interval": beat,
        "dead_after": dead,
        "poll_interval": 0.1,
    }


def step_lines(work_dir: Path) -> list[tuple[str, str, int]]:
    """`(start|tick|end, tag, pid)` for every line the `step` tool wrote."""
    return [(kind, tag, pid) for kind, tag, pid, _ in timed_step_lines(work_dir)]


def timed_step_lines(work_dir: Path) -> list[tuple[str, str, int, float]]:
    """`(start|tick|end, tag, pid, time.time())` for every line the `step` tool wrote."""
    parts = [line.split() for line in read_lines(work_dir / "step.log")]
    # (a last line still being written is left for the next read)
    return [(p[0], p[1], int(p[2]), float(p[3])) for p in parts if len(p) == 4]


def overlaps(work_dir: Path) -> list[str]:
    """Every pair of executions of the tool `step` for one tag, in two processes, that were
    alive at the same moment: each execution spans its `start` line to its last line (`tick`
    lines come every 0.1 s while it runs, `end` when it returns; a killed one writes nothing
    more), in the order the lines were appended to the log."""
    bodies: list[tuple[str, int, int, int]] = []  # (tag, pid, first line, last line)
    current: dict[tuple[str, int], int] = {}  # (tag, pid) -> index into bodies
    for index, (kind, tag, pid) in enumerate(step_lines(work_dir)):
        if kind == "start":
            current[(tag, pid)] = len(bodies)
            bodies.append((tag, pid, index, index))
        elif (tag, pid) in current:
            at = current[(tag, pid)]
            bodies[at] = (*bodies[at][:3], index)
    found = []
    for i, (tag, pid, first, last) in enumerate(bodies):
        for other, other_pid, other_first, other_last in bodies[i + 1 :]:
            if other == tag and other_pid != pid and other_first <= last and first <= other_last:
                found.append(f"{tag}: process {pid} (lines {first}-{last}) and {other_pid} "
                             f"(lines {other_first}-{other_last})")  # fmt: skip
    return found


def starts(work_dir: Path, tag: str) -> int:
    """How many times the tool `step` started for `tag`."""
    return sum(1 for kind, t, _ in step_lines(work_dir) if kind == "start" and t == tag)


def result(work_dir: Path, tag: str) -> list[dict[str, Any]] | None:
    """The messages of run `tag` as its starting process saw them finish (None until then)."""
    path = work_dir / f"result-{tag}.json"
    return json.loads(path.read_text()) if path.exists() else None


class Proc(procs.ScriptProcess):
    """A real child process (`_plain.py`, `_serve.py`...) with its output in a log file."""

    def __init__(
        self,
        name: str,
        script: str,
        log_dir: Path,
        env: dict[str, str],
        config: Any,
        isolated: bool = False,
    ):
        # `isolated`: in a pid namespace of its own, as if on another machine (no process can
        # check its pid: only its heartbeat tells whether it lives).
        wrap = ["unshare", "--pid", "--fork", "--kill-child"] if isolated else []
        super().__init__(name, HERE / script, log_dir, env, config, wrap)


def wait_for(
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float = TIMEOUT,
    procs: tuple[Proc, ...] = (),
) -> Any:
    """Poll `condition` until it is truthy; fail early if one of `procs` exits meanwhile."""
    return _wait(condition, what, timeout=timeout, processes=procs, interval=0.05)


_wait = procs.wait_for


@pytest.fixture
def start(
    server: FakeOpenAIServer, work_dir: Path, tmp_path: Path
) -> Iterator[Callable[..., Proc]]:
    """`(name, script, **config) -> Proc`: `_plain.py` (a plain DurableSwarm process) or
    `_serve.py` (a worker); every process still running at the test's end is killed."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    env = {"DSW_FAKE_URL": server.base_url, "DSW_WORK_DIR": str(work_dir)}
    with procs.script_processes(log_dir, env, Proc) as begin:
        yield lambda name, script, isolated=False, **config: begin(
            name, script, config, isolated=isolated
        )


@pytest.fixture
def cut_database(postgres_base_url: str) -> Iterator[tuple[str, str, TcpProxy]]:
    """`(direct URL, URL through the proxy, proxy)` of a new PostgreSQL database."""
    name = new_database_name("dswarm_faults", "cut")
    parts = urlsplit(postgres_base_url)
    proxy = TcpProxy(parts.port or 5432, parts.hostname or "127.0.0.1")
    through = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}")
    try:
        yield with_database(postgres_base_url, name), with_database(through.geturl(), name), proxy
    finally:
        proxy.close()
        drop_database(postgres_base_url, name)
