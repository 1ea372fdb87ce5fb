"""A run killed (SIGKILL) right after a guardrail's verdict was recorded, recovered by a new
process: the guardrail is not asked again, no finished model call is made again, and the run
ends as an uninterrupted one does. On SQLite and PostgreSQL.

A child process (`_crash_child.py`) runs `Refunder` (`_refunds.py`), whose model is a fake server
in this process, counting requests per (user message, stage). Guardrails and tools append one
line per execution to files. Two kill points:

* `passed`: the tool guardrail `limit` passed `refund(50)` and the tool runs, held by a file the
  test removes before recovering: the unfinished tool runs again, the verdict is read back;
* `tripped`: `limit` blocked `refund(500)` and the next model call (reading the rejection) is
  held at the server: that call is made again, the tripped verdict is read back;
* `parallel`: `Hasty`'s input guardrail, asked while the first model call runs, recorded its
  verdict while that call is held at the server: the recovered run finds the verdict at the
  step id drawn for it, and only the model call is made again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _support.procs import CHILD_ENV, ScriptProcess
from _support.wait import wait_for
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply

from . import _refunds
from ._refunds import executions

pytestmark = pytest.mark.crash

TIMEOUT = 90.0  # generous: the machine is small and shared
Key = tuple[str, int]


class HeldModel:
    """`_refunds.reply`, counting requests per key; the first request of the key `hold` waits
    at the server (long enough to be killed during it); a repeat is answered at once."""

    def __init__(self, hold: Key | None) -> None:
        self.hold = hold
        self.arrivals: Counter[Key] = Counter()
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        key = _refunds.key(messages)
        with self._lock:
            self.arrivals[key] += 1
            first = self.arrivals[key] == 1
        answer = _refunds.reply(messages, tools)
        return Fault.delay(300.0, answer) if first and key == self.hold else answer

    def arrived(self, key: Key) -> int:
        with self._lock:
            return self.arrivals[key]


class Process(ScriptProcess):
    """A `guardrails._crash_child` process; `kill()` sends SIGKILL."""

    def __init__(self, name: str, work: Path, config: dict[str, Any]) -> None:
        self.result_path = work / f"{name}.result.json"
        config = {**config, "result": str(self.result_path)}
        super().__init__(name, "guardrails._crash_child", work, CHILD_ENV, config)

    def finish(self) -> dict[str, Any]:
        try:
            code = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not finish:\n{self.output()}") from None
        assert code == 0, f"{self.name} exited with {code}:\n{self.output()[-6000:]}"
        return json.loads(self.result_path.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def children_database_url(make_database_url) -> str:
    """The database the child processes share (this process never launches DBOS on it)."""
    return make_database_url("children")


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """The test's processes, all killed at the end whatever happens."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


def uninterrupted(durable_swarm_factory, said: str, agent: Any = None) -> list[dict[str, Any]]:
    """The run's messages without a crash, in this process (on the module's own database)."""
    with FakeOpenAIServer(_refunds.reply) as server:
        swarm = durable_swarm_factory(server.client())
        run = f"uninterrupted-{uuid.uuid4().hex[:8]}"
        messages = [{"role": "user", "content": said}]
        return swarm.run(agent or _refunds.refunder, messages, run_id=run).messages


def test_killed_after_a_passed_verdict_while_the_tool_runs(
    children_database_url, durable_swarm_factory, tmp_path, work_dir, processes
):
    said = "refund 50"
    expected = uninterrupted(durable_swarm_factory, said)
    work = tmp_path / "children"
    work.mkdir()
    (work / "hold").touch()  # `refund` waits while it exists
    model = HeldModel(hold=None)
    with FakeOpenAIServer(model) as server:
        first, second = start(processes, work, server, children_database_url, said)
        wait_for(lambda: executions(work, "refund") == ["50"], "the tool to run", processes=[first])
        kill(first)
        (work / "hold").unlink()
        (work / "go").touch()  # the second process recovers the run
        result = second.finish()

    assert result == {"status": "succeeded", "messages": expected}
    assert executions(work, "screen") == [said]  # the input guardrail: asked once
    assert executions(work, "limit") == ['{"amount": 50}']  # the tool guardrail: asked once
    assert executions(work, "refund") == ["50", "50"]  # the tool was in flight: at least once
    assert executions(work, "polite") == ["Done: refunded 50"]
    assert (model.arrived((said, 0)), model.arrived((said, 1))) == (1, 1)
    assert server.request_count == 2


def test_killed_after_a_tripped_verdict_while_the_model_reads_the_rejection(
    children_database_url, durable_swarm_factory, tmp_path, work_dir, processes
):
    said = "refund 500"
    expected = uninterrupted(durable_swarm_factory, said)
    work = tmp_path / "children"
    work.mkdir()
    model = HeldModel(hold=(said, 1))
    with FakeOpenAIServer(model) as server:
        first, second = start(processes, work, server, children_database_url, said)
        wait_for(
            lambda: model.arrived((said, 1)) == 1, "the model call after the verdict",
            processes=[first],
        )  # fmt: skip
        kill(first)
        (work / "go").touch()
        result = second.finish()

    assert result == {"status": "succeeded", "messages": expected}
    assert "blocked by guardrail limit" in result["messages"][1]["content"]
    assert executions(work, "screen") == [said]
    assert executions(work, "limit") == ['{"amount": 500}']  # the trip was read back
    assert executions(work, "refund") == []
    # the finished model call once; the one in flight at the kill once more
    assert (model.arrived((said, 0)), model.arrived((said, 1))) == (1, 2)
    assert server.request_count == 3


def test_killed_after_a_parallel_verdict_while_the_first_model_call_runs(
    children_database_url, durable_swarm_factory, tmp_path, work_dir, processes
):
    said = "refund 50"
    expected = uninterrupted(durable_swarm_factory, said, _refunds.hasty)
    work = tmp_path / "children"
    work.mkdir()
    model = HeldModel(hold=(said, 0))
    with FakeOpenAIServer(model) as server:
        first, second = start(processes, work, server, children_database_url, said, agent="hasty")
        wait_for(
            lambda: model.arrived((said, 0)) == 1 and executions(work, "screen") == [said],
            "the guardrail's verdict beside the held model call", processes=[first],
        )  # fmt: skip
        wait_for(lambda: verdict_recorded(children_database_url), "the verdict's step")
        kill(first)
        (work / "go").touch()
        result = second.finish()

    assert result == {"status": "succeeded", "messages": expected}
    assert executions(work, "screen") == [said]  # the parallel guardrail: asked once
    assert executions(work, "refund") == ["50"]
    assert (model.arrived((said, 0)), model.arrived((said, 1))) == (2, 1)
    assert server.request_count == 3


def verdict_recorded(url: str) -> bool:
    """Whether a `guardrail:screen` step of a run is recorded in the database at `url`."""
    from durable_swarm.durable import DurableClient

    client = DurableClient(url)
    try:
        return any(
            step.kind == "guardrail" and step.output
            for run in client.list_runs()
            for step in client.get_run(run.run_id).steps
        )
    finally:
        client.close()


def start(
    processes: list[Process],
    work: Path,
    server: FakeOpenAIServer,
    url: str,
    said: str,
    agent: str = "refunder",
) -> tuple[Process, Process]:
    config = {
        "agent": agent,
        "database_url": url,
        "base_url": server.base_url,
        "executor_id": f"guard-{uuid.uuid4().hex[:8]}",
        "run_id": f"guard-crash-{uuid.uuid4().hex[:10]}",
        "work_dir": str(work),
        "text": said,
        "go": str(work / "go"),
    }
    first = Process("first", work, {**config, "action": "run"})
    second = Process("second", work, {**config, "action": "recover"})
    processes += [first, second]
    return first, second


def kill(process: Process) -> None:
    process.kill()
    assert process.proc.returncode == -signal.SIGKILL
