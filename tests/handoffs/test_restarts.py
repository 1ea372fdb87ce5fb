"""Waits for a person survive restarts (SQLite and PostgreSQL), with real child processes killed
with SIGKILL while a run waits:

* tool approval: the approval is given from this process while no process runs the run; a new
  child finishes it and the tool runs exactly once, with the approved arguments;
* AG2's refund example (`_agents.py`) through `initiate_swarm_chat`: killed while it waits for the
  passport number, answered from this process, finished by a new child (which waits for the
  rating, answered from this process too); the transcript equals an in-memory run's, the refund
  is paid once and no finished model call is made again;
* the durable REPL session: killed mid-conversation, started again with the same session id, it
  shows the history and goes on;
* a second answer to a question (sent while no process holds the run) never answers the next one;
* an agent's fingerprint (how recovery finds it) is the same in every process.

This process launches DBOS on the children's database only while no run can be recovered: DBOS
puts a recovered run on its internal queue, and any live process of the app on that database (this
one too, though it only answers and has no model client) may take it from there; here the run
must be finished by the child.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import DurableClient, DurableSwarmError, Swarm, initiate_swarm_chat
from durable_swarm._registry import fingerprint
from durable_swarm.durable import shutdown
from durable_swarm.testing import ScriptedClient

from . import _agents
from ._agents import WORK_DIR_ENV, lines
from ._procs import children, wait_for

pytestmark = pytest.mark.crash


@pytest.fixture(autouse=True)
def _no_dbos_here_between_tests() -> Iterator[None]:
    """No DBOS in this process while a child may recover a run (it could take the run over)."""
    shutdown()
    yield
    shutdown()


def _controller(database_url: str) -> DurableClient:
    """This process's view of the children's database: a thin client, which reads and answers
    runs but never executes one (a launched `DurableSwarm` here, without a model client, could
    take over the run of a child just killed, which it sees exit, before `second` does)."""
    return DurableClient(database_url)


def _same_messages(messages: list[dict[str, Any]]) -> list[Any]:
    """What a transcript says (roles, speakers, texts, tool calls and their ids)."""
    return [
        (
            m.get("role"),
            m.get("sender"),
            m.get("content"),
            m.get("tool_call_id"),
            [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                for c in m.get("tool_calls") or []
            ],
        )
        for m in messages
    ]


def _child_config(database_url: str) -> dict[str, Any]:
    return {
        "database_url": database_url,
        "executor_id": f"handoffs-{uuid.uuid4().hex[:8]}",
        "run_id": f"restart-{uuid.uuid4().hex[:10]}",
    }


@pytest.mark.parametrize("watched", [True, False], ids=["this-release", "previous-release"])
def test_approval_across_a_restart(
    zygote: Any, database_url: str, work: Path, watched: bool
) -> None:
    """`this-release`: the run parks at its wait (an `answer:approval` step once decided).
    `previous-release`: the run waits in a plain `DBOS.recv`, as the release before watched
    waits ran it; this release recovers it and replays that wait as it was (the decision is
    sent to it as a DBOS message too)."""
    config = _child_config(database_url)
    run_id = config["run_id"]
    with children(zygote, work, model="cashier", **config) as procs:
        start = "approval_start" if watched else "unwatched_approval_start"
        first = procs.start("first", action=start)
        second = procs.start("second", action="recover", wait_for_go=True)
        waits = wait_for(first.waits, "the approval wait", first)
        assert first.kill() == -9

        # the run waits, its process is gone: decide from this process
        swarm = _controller(database_url)
        info = swarm.get_run(run_id)
        assert info.status == "waiting_for_approval"
        call = info.waiting_for["tool_call"]
        assert call == waits[0]["waiting_for"]["tool_call"]
        assert call["function"]["name"] == "pay"
        assert json.loads(call["function"]["arguments"]) == _agents.PAY_ARGUMENTS
        with pytest.raises(DurableSwarmError, match="not 'call_wrong'"):
            swarm.approve(run_id, "call_wrong")
        swarm.approve(run_id, call["id"], by="tester")
        assert lines(work, "pay") == []  # nothing ran yet: no process holds the run

        second.go()
        second.finish()
        result = second.result()

    assert result["status"] == "succeeded"
    assert result["messages"][-1]["content"] == "Done: paid 30 to Bob"
    [paid] = lines(work, "pay")  # the tool ran exactly once, with the approved arguments
    assert paid.startswith("30 Bob ") and run_id in paid
    assert lines(work, "model") == ["Cashier", "Cashier"]  # the first call was not made again
    [decision] = result["decisions"]
    assert decision["approved"] is True
    assert decision["by"] == "tester"
    assert decision["tool_call_id"] == call["id"]
    kinds = [step.kind for step in _controller(database_url).get_run(run_id).steps]
    assert kinds.count("wait") == 1 and kinds.count("watch") == 0


def _refund_in_memory(directory: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """AG2's refund example in memory: the reference transcript."""
    directory.mkdir()
    monkeypatch.setenv(WORK_DIR_ENV, str(directory))
    answers = {_agents.PASSPORT_QUESTION: _agents.PASSPORT, _agents.RATING_QUESTION: "5"}
    swarm = Swarm(ScriptedClient(_agents.refund_model), input_fn=answers.__getitem__)
    result, context, last = initiate_swarm_chat(
        _agents.customer_service,
        _agents.REFUND_AGENTS,
        _agents.REFUND_REQUEST,
        context_variables=dict(_agents.REFUND_CONTEXT),
        swarm=swarm,
    )
    return {
        "messages": json.loads(json.dumps(result.chat_history)),
        "context_variables": context,
        "agent": last.name,
        "transitions": swarm.transitions,
    }


def test_refund_example_killed_while_waiting_for_the_person(
    zygote: Any, database_url: str, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _refund_in_memory(tmp_path / "memory", monkeypatch)
    assert expected["context_variables"] == _agents.REFUND_FINAL_CONTEXT
    monkeypatch.setenv(WORK_DIR_ENV, str(work))

    config = _child_config(database_url)
    run_id = config["run_id"]
    with children(zygote, work, model="refund", **config) as procs:
        first = procs.start("first", action="refund_start")
        second = procs.start("second", action="recover", wait_for_go=True)
        [wait] = wait_for(first.waits, "the passport question", first)
        assert wait["status"] == "waiting_for_input"
        assert wait["waiting_for"]["prompt"] == _agents.PASSPORT_QUESTION
        first.kill()

        swarm = _controller(database_url)
        info = swarm.get_run(run_id)
        assert info.status == "waiting_for_input"
        assert info.waiting_for["prompt"] == _agents.PASSPORT_QUESTION
        assert info.agent == "CustomerService"
        swarm.send_input(run_id, _agents.PASSPORT, by="customer")

        second.go()
        rating = wait_for(
            lambda: [w for w in second.waits() if w["waiting_for"]["agent"] != "CustomerService"],
            "the rating question",
            second,
        )
        assert rating[0]["waiting_for"]["prompt"] == _agents.RATING_QUESTION
        swarm = _controller(database_url)  # the run is held by `second` now: safe to launch
        swarm.send_input(run_id, _agents.RATING, by="customer")
        second.finish()
        result = second.result()

    assert result["status"] == "succeeded"
    assert result["agent"] == expected["agent"] == "SatisfactionSurveyor"
    assert result["context_variables"] == _agents.REFUND_FINAL_CONTEXT
    assert _same_messages(result["info_messages"]) == _same_messages(expected["messages"])
    assert result["transitions"] == expected["transitions"]
    rules = [(t["rule"], t["source"], t["target"]) for t in result["transitions"]]
    assert rules == _agents.REFUND_TRANSITIONS
    assert lines(work, "payments") == ["ORD-42 120"]  # the refund was paid once
    assert lines(work, "record_rating") == ["5"]
    assert lines(work, "verify_passport") == [_agents.PASSPORT]
    # each model call made once across both processes, in the order of the uninterrupted chat
    assert lines(work, "model") == _agents.REFUND_MODEL_TURNS
    assert lines(tmp_path / "memory", "model") == _agents.REFUND_MODEL_TURNS
    assert "Paid 120 EUR back for ORD-42." in [m["content"] for m in result["messages"]]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_durable_repl_session_continues_after_a_kill(
    zygote: Any, database_url: str, work: Path
) -> None:
    config = _child_config(database_url)
    with children(zygote, work, model="echo", action="repl", **config) as procs:
        first = procs.start("first", lines=["first", "second"], then="block")
        second = procs.start("second", lines=["third"], then="eof", wait_for_go=True)
        wait_for(lambda: (work / "first.blocked").exists(), "the third prompt", first)
        first.kill()
        before = _ANSI.sub("", first.output())
        second.go()
        second.finish()
        after = _ANSI.sub("", second.output())

    assert "Echo: [1] You said: first" in before
    assert "Echo: [2] You said: second" in before
    assert "(resuming session" in after
    history = after[after.index("(resuming session") :]
    shown = [line for line in history.splitlines() if line.startswith(("User: ", "Echo: "))]
    assert shown[:4] == [
        "User: first",
        "Echo: [1] You said: first",
        "User: second",
        "Echo: [2] You said: second",
    ]
    assert "Echo: [3] You said: third" in after  # it went on, with the whole history
    assert lines(work, "model") == ["Echo 1", "Echo 2", "Echo 3"]


def test_a_second_answer_to_the_same_question_never_answers_the_next_one(
    zygote: Any, database_url: str, work: Path
) -> None:
    """Two answers sent to one question while no process holds the run (a double click, two
    operators): the run takes the first; the second must be refused or dropped, never kept
    for the run's next question, which the person has not seen yet."""
    config = _child_config(database_url)
    run_id = config["run_id"]
    with children(zygote, work, model="echo", **config) as procs:
        first = procs.start("first", action="revert_start")
        second = procs.start("second", action="recover", wait_for_go=True)
        wait_for(first.waits, "the first question", first)
        first.kill()

        swarm = _controller(database_url)
        swarm.send_input(run_id, "first answer")
        with contextlib.suppress(DurableSwarmError):  # refusing it is fine too
            swarm.send_input(run_id, "second answer")

        second.go()
        wait_for(
            lambda: any(
                w["waiting_for"]["prompt"] != "[1] You said: hello" for w in second.waits()
            ),
            "the second question",
            second,
        )
        swarm = _controller(database_url)
        time.sleep(1.0)  # time enough to take a stale answer, if one is there
        info = swarm.get_run(run_id)

    said = [m["content"] for m in info.messages if m["role"] == "user"]
    assert said == ["hello", "first answer"], "the second answer answered the next question"
    assert info.status == "waiting_for_input"
    assert info.waiting_for["prompt"] == "[2] You said: first answer"


def test_an_agent_with_a_callable_system_message_keeps_its_fingerprint_across_processes(
    zygote: Any, work: Path
) -> None:
    """Recovery finds agents by name and fingerprint; a fingerprint that differs in each process
    makes every recovery warn that the agent changed (and may pick the wrong namesake)."""
    with children(
        zygote, work, run_id="-", database_url="-", executor_id="-", model="echo"
    ) as procs:
        child = procs.start("fingerprints", action="fingerprints")
        child.finish()
        theirs = child.result()
    ours = {a.name: fingerprint(a) for a in _agents.FINGERPRINTED}
    assert ours["RefundSpecialist"] == theirs["RefundSpecialist"]  # a template: stable
    assert ours == theirs
