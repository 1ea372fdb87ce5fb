"""Crashes of session runs, with real processes killed by SIGKILL: a run of a session killed in
the middle is recovered by a new process, still holds its session meanwhile (another run of it
is refused), and adds its messages exactly once; a run killed right after its compaction step
was recorded is recovered without asking for the summary again. Finished model calls are never
repeated (requests counted at the fake server, in this process). On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _support.procs import ScriptProcess, script_processes
from _support.wait import wait_for
from durable_swarm import DurableClient, SessionBusyError
from durable_swarm.testing import FakeOpenAIServer

from ._model import SUMMARY, SessionModel, is_summary_request
from .test_compaction import BUDGET, earlier_turns

pytestmark = pytest.mark.crash


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.fixture(scope="module")
def children_database_url(make_database_url: Callable[[str], str]) -> str:
    """Runs made by the children only (this process never launches DBOS on it)."""
    return make_database_url("session-children")


@pytest.fixture
def model() -> Iterator[tuple[SessionModel, FakeOpenAIServer]]:
    script = SessionModel()
    with FakeOpenAIServer(script) as server:
        yield script, server


@pytest.fixture
def start(tmp_path: Path, children_database_url: str, model) -> Iterator[Callable[..., Any]]:
    """`start(name, **config)`: a child process (`sessions._child`) on the children's database,
    sharing one executor id (so a new child recovers what a killed one left)."""
    executor = f"sessions-{uuid.uuid4().hex[:8]}"
    base = {"database_url": children_database_url, "base_url": model[1].base_url,
            "executor_id": executor}  # fmt: skip
    with script_processes(tmp_path, {"DURABLE_SWARM_LOG_LEVEL": "ERROR"}) as begin:

        def start(name: str, **config: Any) -> ScriptProcess:
            config = {**base, "result": str(tmp_path / f"{name}.json"), **config}
            process = begin(name, "sessions._child", config)
            process.result_path = Path(config["result"])
            return process

        yield start


def finished(process: ScriptProcess) -> dict[str, Any]:
    wait_for(process.result_path.exists, f"{process.name} to finish", processes=(process,))
    return dict(json.loads(process.result_path.read_text()))


def test_a_killed_session_run_recovers_holds_its_session_and_adds_once(
    start, model, children_database_url
):
    script, _ = model
    session, run_id = f"crash-{uuid.uuid4().hex[:8]}", f"crash-run-{uuid.uuid4().hex[:8]}"
    first = start("first", action="run", run_id=f"{run_id}-0", session=session,
                  messages=[user("hello")])  # fmt: skip
    assert finished(first)["status"] == "succeeded"
    script.hold("look up tea", after="tool")  # the model call after the tool, in flight
    doomed = start("doomed", action="run", run_id=run_id, session=session,
                   messages=[user("look up tea")])  # fmt: skip
    wait_for(lambda: script.arrived("look up tea", "tool") == 1, "the held call",
             processes=(doomed,))  # fmt: skip
    doomed.kill()
    with DurableClient(children_database_url) as client:
        # the dead run still holds the session: another run of it is refused
        with pytest.raises(SessionBusyError) as refused:
            client.start("Clerk", [user("me too")], session=session)
        assert refused.value.run_id == run_id
        assert client.get_session(session).held_by == run_id

        recovered = finished(start("recover", action="recover", run_id=run_id))
        assert recovered["status"] == "succeeded"
        # the finished model call (the tool call) was not asked again; the killed one was
        assert script.arrived("look up tea", "user") == 1
        assert script.arrived("look up tea", "tool") == 2
        stored = client.get_session(session)
        assert stored.runs == 2 and stored.held_by is None and stored.last_run == run_id
        assert [m["role"] for m in stored.messages] == [
            "user", "assistant", "user", "assistant", "tool", "assistant",
        ]  # fmt: skip
        assert stored.messages[2:] == [user("look up tea"), *recovered["messages"]]
        steps = [s for s in client.get_run(run_id).steps if s.kind == "session"]
        assert len(steps) == 1 and steps[0].output["added"] is True


def test_a_run_killed_after_its_compaction_does_not_pay_for_it_again(
    start, model, children_database_url
):
    script, server = model
    session, run_id = f"compact-{uuid.uuid4().hex[:8]}", f"compact-run-{uuid.uuid4().hex[:8]}"
    script.hold("look up tea")  # the first model call after the compaction step
    doomed = start("doomed", action="run", run_id=run_id, session=session, compact_at=BUDGET,
                   messages=[*earlier_turns(), user("look up tea")])  # fmt: skip
    wait_for(lambda: script.arrived("look up tea") == 1, "the held call", processes=(doomed,))
    doomed.kill()
    summaries = [r for r in server.requests if is_summary_request(r["messages"])]
    assert len(summaries) == 1

    recovered = finished(start("recover", action="recover", run_id=run_id, compact_at=BUDGET))
    assert recovered["status"] == "succeeded"
    summaries = [r for r in server.requests if is_summary_request(r["messages"])]
    assert len(summaries) == 1  # the recorded compaction was not asked for again
    asks = [r["messages"] for r in server.requests if not is_summary_request(r["messages"])]
    assert SUMMARY in asks[-1][1]["content"]  # the recovered run used the recorded summary
    with DurableClient(children_database_url) as client:
        info = client.get_run(run_id)
        assert [s.kind for s in info.steps].count("compact") == 1
        assert info.messages == [*earlier_turns(), user("look up tea"), *recovered["messages"]]
        stored = client.get_session(session)
        assert stored.compacted and stored.runs == 1
