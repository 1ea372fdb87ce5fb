"""A parent with three parallel sub-agents, killed mid-way (SIGKILL) and recovered by a new
process: the final answer is the same as an uninterrupted run's, and every child step that had
finished before the kill is done exactly once.

A child process (`_crash_child.py`) runs `Lead` (`_fanout.py`), whose model is a fake server in
this process: its counts of requests per (agent, stage) survive the kill. Held requests wait at
the server, so the test kills the process while those model calls are in flight. `fetch`
appends one line per execution to a file. The second process has the same executor id, so DBOS
recovers the dead one's pending runs (the parent and the unfinished children) at launch.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _support.procs import CHILD_ENV, ScriptProcess
from _support.wait import wait_for as support_wait_for
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply

from . import _fanout
from ._fanout import LEAD_ANSWER, LEAD_TASK, TOPICS, WORKERS, fetch_log

pytestmark = pytest.mark.crash

TESTS_DIR = Path(__file__).resolve().parents[1]
TIMEOUT = 90.0  # generous: the machine is small and shared
Key = tuple[str, int]


class HeldModel:
    """`_fanout.reply`, counting requests per (agent, stage); the first request of each key in
    `hold` waits at the server (long enough to be killed during it); a repeat is answered at
    once."""

    def __init__(self, hold: set[Key]) -> None:
        self.hold = hold
        self.arrivals: Counter[Key] = Counter()
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        key = _fanout.key(messages)
        with self._lock:
            self.arrivals[key] += 1
            first = self.arrivals[key] == 1
        answer = _fanout.reply(messages, tools)
        return Fault.delay(300.0, answer) if first and key in self.hold else answer

    def arrived(self, key: Key) -> int:
        with self._lock:
            return self.arrivals[key]


ALL_KEYS = [("Lead", 0), ("Lead", 3)] + [(w, s) for w in WORKERS for s in (0, 1)]


class Process(ScriptProcess):
    """An `agents._crash_child` process; `kill()` sends SIGKILL."""

    def __init__(self, name: str, work: Path, config: dict[str, Any]) -> None:
        self.result_path = work / f"{name}.result.json"
        self.progress_path = work / f"{name}.progress.json"
        config = {**config, "result": str(self.result_path), "progress": str(self.progress_path)}
        super().__init__(name, "agents._crash_child", work, CHILD_ENV, config)

    def progress(self) -> dict[str, str]:
        try:
            return json.loads(self.progress_path.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {}

    def finish(self) -> dict[str, Any]:
        try:
            code = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not finish:\n{self.output()}") from None
        assert code == 0, f"{self.name} exited with {code}:\n{self.output()[-6000:]}"
        return json.loads(self.result_path.read_text())  # type: ignore[no-any-return]


def wait_for(condition: Callable[[], Any], what: str, process: Process) -> None:
    """Poll `condition`; fail early if `process` exits meanwhile."""
    support_wait_for(condition, what, timeout=TIMEOUT, processes=[process])


@contextmanager
def processes() -> Iterator[list[Process]]:
    """The test's processes, all killed at the end whatever happens."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in started:
            process.kill()


@pytest.fixture(scope="module")
def children_database_url(make_database_url: Callable[[str], str]) -> str:
    """The database the child processes share (this process never launches DBOS on it)."""
    return make_database_url("children")


@pytest.fixture
def uninterrupted(durable_swarm_factory, work_dir) -> dict[str, Any]:
    """The run without interruption, in this process (on the module's own database)."""
    with FakeOpenAIServer(_fanout.reply) as server:
        swarm = durable_swarm_factory(server.client())
        run_id = f"uninterrupted-{uuid.uuid4().hex[:8]}"
        response = swarm.run(_fanout.lead, LEAD_TASK, run_id=run_id)
        children = [swarm.get_run(child).messages for child in swarm.get_run(run_id).children]
        requests = server.request_count
    return {"messages": response.messages, "children": children, "requests": requests}


SCENARIOS = {
    # Alpha finished; Beta's tool finished and its last model call is in flight; Gamma's first
    # model call is in flight.
    "children-in-flight": (
        {("Beta", 1), ("Gamma", 0)},
        lambda progress, run_id: progress.get(f"{run_id}-sub1") == "succeeded",
    ),
    # every child finished; the parent's last model call (the join's summary) is in flight.
    "parent-in-flight": ({("Lead", 3)}, lambda progress, run_id: True),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_parallel_sub_agents_killed_and_recovered(
    children_database_url, tmp_path, uninterrupted, scenario
):
    hold, also = SCENARIOS[scenario]
    work = tmp_path / "children"
    work.mkdir()
    run_id = f"fanout-crash-{uuid.uuid4().hex[:10]}"
    model = HeldModel(hold)
    with FakeOpenAIServer(model) as server, processes() as started:
        config = {
            "database_url": children_database_url,
            "base_url": server.base_url,
            "executor_id": f"fanout-{uuid.uuid4().hex[:8]}",
            "run_id": run_id,
            "work_dir": str(work),
        }
        go = work / "go"
        first = Process("first", work, {**config, "action": "run"})
        second = Process("second", work, {**config, "action": "recover", "go": str(go)})
        started += [first, second]
        wait_for(
            lambda: all(model.arrived(k) for k in hold) and also(first.progress(), run_id),
            f"the kill point ({scenario})",
            first,
        )
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL
        assert not first.result_path.exists()

        go.touch()  # the second process recovers the run
        result = second.finish()

    assert result["status"] == "succeeded"
    assert result["messages"] == uninterrupted["messages"]
    assert result["messages"][-1]["content"] == LEAD_ANSWER
    children = [f"{run_id}-sub{i}" for i in (1, 2, 3)]
    assert list(result["children"]) == children
    for child, name, expected in zip(children, WORKERS, uninterrupted["children"], strict=True):
        info = result["children"][child]
        assert (info["status"], info["parent"], info["agent"]) == ("succeeded", run_id, name)
        assert info["messages"] == expected
    # every model call that had finished was made once; each one in flight once more
    for key in ALL_KEYS:
        assert model.arrived(key) == (2 if key in hold else 1), key
    assert server.request_count == uninterrupted["requests"] + len(hold)
    # every tool ran exactly once (none was in flight at the kill)
    assert sorted(fetch_log(work)) == sorted(TOPICS.values())
