"""Fixtures for worker and thin-client tests: databases, the fake model, worker processes.

* `backend` ("sqlite" / "postgres") is the shared module-scoped parameter (`tests/_support/db.py`);
  PostgreSQL comes from `DURABLE_SWARM_TEST_POSTGRES_URL` (the tests skip without it or with the
  server down, unless `DURABLE_SWARM_REQUIRE_POSTGRES=1`, where they fail). `make_database_url`
  is this directory's own (`sqlite:///` URLs, `create=`); each database has a unique name and is
  dropped at the end.
* The model is a `FakeOpenAIServer` in the test process answering from `Model`, so request
  counts survive the workers that are killed.
* Workers are real processes (`_serve.py` -> `run_worker("_app:swarm", ...)`); the test process
  itself is a thin client and never imports the app module `_app`.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("DURABLE_SWARM_LOG_LEVEL", "ERROR")

from _support import procs
from _support.db import drop_database, new_database_name, postgres_execute, with_database
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply, ToolCall, calls, text

HERE = Path(__file__).resolve().parent
TIMEOUT = 60.0  # generous: the machine is small and shared
HOLD_SECONDS = 300.0


@pytest.fixture(scope="module")
def make_database_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., str]]:
    """`(label, create=False) -> URL` of a new database of this backend, dropped at the end.

    DBOS creates the database when a worker launches; `create=True` makes an empty one now.
    """
    base = request.getfixturevalue("postgres_base_url") if backend == "postgres" else None
    created: list[str] = []
    folder = tmp_path_factory.mktemp("workers-db")

    def make(label: str, create: bool = False) -> str:
        if base is None:
            path = folder / f"{label}-{uuid.uuid4().hex[:6]}.sqlite"
            if create:
                path.touch()
            return "sqlite:///" + str(path)
        name = new_database_name("dswarm_workers", label)
        created.append(name)
        if create:
            postgres_execute(base, f'CREATE DATABASE "{name}"')
        return with_database(base, name)

    yield make
    for name in created:
        assert base is not None
        drop_database(base, name)


def _user_text(messages: list[dict[str, Any]]) -> str:
    return next(str(m.get("content")) for m in messages if m.get("role") == "user")


class Model:
    """The fake model: answers from the first user message, `<command> <tag>`.

    * `echo <words>`: answers `echo: <words>` (streamed when the request asks for it).
    * `slow <tag>`: answers after `slow_seconds` (for concurrency).
    * `handoff <tag>`: calls `transfer_to_closer`, then answers `closed <tag>`.
    * `work <tag>`: calls `record(tag)`, then answers `done <tag>`; the first request of that
      second call is held at the server for minutes (so a test can kill the worker making it),
      later ones are answered at once.
    * `spread <tag>`: as `work`, but the later answers of the second call take
      `spread_seconds` (runs that keep a slot busy for a while once recovered).
    * `refund <tag>`: calls `refund(amount=5)` (needs approval), then repeats the tool's result.
    * `ask <tag>`: calls `ask_user`, then greets with the tool's result (the person's answer).
    * `delegate <tag>`: has the sub-agent `Asker` work on `ask <tag>`, then repeats its answer.

    `arrivals(command, tag, stage)` counts requests; stage = tool results in the request.
    """

    def __init__(self) -> None:
        self.slow_seconds = 0.4
        self.spread_seconds = 1.0
        self._lock = threading.Lock()
        self._arrivals: dict[tuple[str, str, int], int] = {}

    def arrivals(self, command: str, tag: str, stage: int) -> int:
        with self._lock:
            return self._arrivals.get((command, tag, stage), 0)

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Reply | Fault:
        command, _, tag = _user_text(messages).partition(" ")
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        stage = len(results)
        with self._lock:
            key = (command, tag, stage)
            self._arrivals[key] = first = self._arrivals.get(key, 0) + 1
        if command == "echo":
            return text(f"echo: {tag}")
        if command == "slow":
            return Fault.delay(self.slow_seconds, text(f"slow {tag}"))
        if stage == 0:
            step = {
                "handoff": ToolCall("transfer_to_closer"),
                "work": ToolCall("record", {"tag": tag}),
                "spread": ToolCall("record", {"tag": tag}),
                "refund": ToolCall("refund", {"amount": 5}),
                "ask": ToolCall("ask_user", {"question": "What is your name?"}),
                "delegate": ToolCall("delegate_to_asker", {"task": f"ask {tag}"}),
            }[command]
            return calls(step)
        if command in ("work", "spread") and first == 1:
            return Fault.delay(HOLD_SECONDS, text(f"done {tag}"))
        if command == "spread":
            return Fault.delay(self.spread_seconds, text(f"done {tag}"))
        answers = {"handoff": f"closed {tag}", "work": f"done {tag}"}
        return text(answers.get(command, f"{command}: {results[-1]}"))


@pytest.fixture(scope="module")
def model(backend: str) -> Model:
    """The fake model's script (its request counts), one per module and backend."""
    return Model()


@pytest.fixture(scope="module")
def server(model: Model) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server all of this module's workers call."""
    with FakeOpenAIServer(model) as fake:
        yield fake


@pytest.fixture(scope="module")
def work_dir(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the app's tools (and its imports) leave their marks, per module and backend."""
    return tmp_path_factory.mktemp(f"workers-work-{backend}")


def tool_lines(work_dir: Path, name: str) -> list[str]:
    """The lines `<name>.log` holds (one per tool execution, or per import of the app)."""
    path = work_dir / f"{name}.log"
    return path.read_text().splitlines() if path.exists() else []


def wait_for(
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float = TIMEOUT,
    workers: tuple[WorkerProcess, ...] = (),
) -> Any:
    """Poll `condition` until it is truthy; fail early if one of `workers` exits meanwhile."""
    return procs.wait_for(condition, what, timeout=timeout, processes=workers, interval=0.05)


class WorkerProcess(procs.ScriptProcess):
    """A worker process serving `_app:swarm` (`run_worker`), with its output in a log file."""

    def __init__(
        self, name: str, script: Path, log_dir: Path, env: dict[str, str], config: Any
    ) -> None:
        super().__init__(name, script, log_dir, env, {"target": "_app:swarm", **config})

    def wait_ready(self) -> WorkerProcess:
        """Wait for the startup line (the worker serves its queue from then on)."""
        wait_for(lambda: "serving queue" in self.output(), f"{self.name} to start", workers=(self,))
        return self


@pytest.fixture(scope="module")
def start_worker(
    server: FakeOpenAIServer, work_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., WorkerProcess]]:
    """`(name, database_url=..., queue=..., concurrency=..., ...) -> WorkerProcess` (started,
    not yet ready); every worker still running at the module's end is killed."""
    log_dir = tmp_path_factory.mktemp("workers-logs")
    env = {"DSW_FAKE_URL": server.base_url, "DSW_WORK_DIR": str(work_dir)}
    with procs.script_processes(log_dir, env, WorkerProcess) as start:
        yield lambda name, **config: start(name, HERE / "_serve.py", config)
