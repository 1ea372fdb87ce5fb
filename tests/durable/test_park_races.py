"""The races around a parked run (SQLite and PostgreSQL): a person's cancel is never undone by a
resume won before it; a person's resume of a cancelled waiting run, then the answer, resumes it
once; and the ownership gate lets only the newest execution of a run here begin a step, and
none of a process taken for dead whose run went elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from _support.wait import wait_for
from durable_swarm import Agent, ask_user
from durable_swarm.durable import _dbos, _parking, _workflow
from durable_swarm.durable._engine import DBOS, DBOSWorkflowCancelledError
from durable_swarm.durable._waits import WaitBook, person_key
from durable_swarm.errors import RunCancelledError
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

ASKER = Agent(name="park-race-asker", instructions="Ask.", functions=[ask_user])


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1].get("role") == "tool":
        return text(f"Hello {messages[-1]['content']}.")
    return calls(ToolCall("ask_user", {"question": "Name?"}))


def _parked(swarm: Any, run_id: str) -> None:
    # `parked`, not `parking`: the run has cancelled itself and marked its wait (an answer to a
    # wait still `parking` leaves the resume to the run, which is about to look again).
    wait_for(
        lambda: (
            getattr(swarm.runs.waits.parked([run_id]).get(run_id), "state", None) == "parked"
            and DBOS.get_workflow_status(run_id).status == "CANCELLED"
        ),
        "the run to park",
    )


def _cancelled_at_its_wait(durable_swarm_factory: Any, run_id: str) -> Any:
    """A swarm whose run `run_id` asked its question, parked, and was cancelled by a person."""
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(ASKER, [{"role": "user", "content": "hi"}], run_id=run_id)
    _parked(swarm, run_id)
    swarm.cancel(run_id)
    with contextlib.suppress(RunCancelledError):
        handle.result()
    return swarm


def _parking_again(durable_swarm_factory: Any, run_id: str) -> tuple[Any, WaitBook, Any]:
    """A swarm whose run `run_id` parked at its question, then an execution of it parking
    there again (as a replay that finds no answer does): its wait is marked parking, its own
    cancel in DBOS still to come. Returns the swarm, its waits and the wait."""
    swarm = durable_swarm_factory(ScriptedClient(_script))
    swarm.start(ASKER, [{"role": "user", "content": "hi"}], run_id=run_id)
    _parked(swarm, run_id)
    waits: WaitBook = swarm.runs.waits
    wait = waits.parked([run_id])[run_id]
    assert waits.begin_park(run_id, wait.key, wait.kind, wait.queue, wait.detail)
    return swarm, waits, wait


def test_a_cancel_after_someone_won_the_resume_is_not_undone(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(ASKER, [{"role": "user", "content": "hi"}], run_id=run_id)
    _parked(swarm, run_id)
    waits: WaitBook = swarm.runs.waits
    # An answerer wins the resume (its statement turns the wait to `resuming`) ...
    won = waits.answer(run_id, person_key(1), "input", {"text": "Ada", "by": None, "at": ""})
    assert won is not None and won.state == "resuming"
    # ... a person cancels the run before the answerer resumes it ...
    swarm.cancel(run_id)
    # ... and the answerer's resume comes after: the run stays cancelled.
    _parking.resume(DBOS, won, waits)
    with pytest.raises(RunCancelledError):
        handle.result()
    assert swarm.get_run(run_id).status == "cancelled"
    assert DBOS.get_workflow_status(run_id).status == "CANCELLED"


def test_a_resumed_cancelled_run_waits_again_and_one_answer_finishes_it(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = _cancelled_at_its_wait(durable_swarm_factory, run_id)
    swarm.resume(run_id)  # its wait waits again, live: an answer now does not resume it twice
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."
    info = swarm.get_run(run_id)
    assert [s.kind for s in info.steps].count("wait") == 1
    assert [s.kind for s in info.steps].count("model") == 2


def test_an_execution_winding_down_from_a_cancel_does_not_undo_the_resume_after_it(
    durable_swarm_factory: Any, run_id: str
) -> None:
    """A person cancels a run and resumes it at once, while the execution they cancelled is
    still winding down: what that execution does after seeing the cancel (mark its wait
    cancelled, make sure DBOS shows it cancelled) must not cancel the resumed run."""
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(ASKER, [{"role": "user", "content": "hi"}], run_id=run_id)
    _parked(swarm, run_id)
    waits: WaitBook = swarm.runs.waits
    swarm.cancel(run_id)
    assert waits.cancelled(run_id)  # the execution looks now and sees the cancel ...
    with contextlib.suppress(RunCancelledError):
        handle.result()
    swarm.resume(run_id)  # ... the person resumes the run ...
    # ... and the execution acts on what it saw only now: nothing changes.
    assert waits.honour_cancel(run_id) == 0
    with pytest.raises(DBOSWorkflowCancelledError):
        asyncio.run(_parking.cancel_self(waits, run_id, "a test"))
    with pytest.raises(DBOSWorkflowCancelledError):  # it read its wait cancelled, at a look
        asyncio.run(_workflow.cancelled(run_id))
    assert not waits.cancelled(run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    _parked(swarm, run_id)
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."


def test_a_resume_right_after_a_cancel_waits_for_the_execution_that_was_parking(
    durable_swarm_factory: Any, run_id: str
) -> None:
    """A person cancels a run while an execution of it is parking (its wait marked parking,
    its own cancel in DBOS still to come) and resumes it at once: the resume waits until that
    execution has cancelled itself and seen the cancel. Made before, the resume would be undone
    by that execution's cancel, leaving the run cancelled at a wait that says waiting, which no
    answer resumes (seen in CI: `result()` raised RunCancelledError after the answer)."""
    import threading

    swarm, waits, wait = _parking_again(durable_swarm_factory, run_id)
    swarm.cancel(run_id)  # a person cancels ...
    assert swarm.get_run(run_id).status == "cancelled"
    resumer = threading.Thread(target=swarm.resume, args=(run_id,), name="resumer")
    resumer.start()  # ... and resumes at once
    resumer.join(1.0)
    assert resumer.is_alive(), "the resume did not wait for the execution that was parking"
    # The execution goes on: its own cancel in DBOS, its mark (refused: the wait is
    # `cancelling`), its look at the tombstone, which it honours.
    DBOS.cancel_workflow(run_id)
    assert not waits.park(run_id, wait.key)
    assert waits.cancelled(run_id) and waits.honour_cancel(run_id) == 1
    resumer.join(30)
    assert not resumer.is_alive()
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    _parked(swarm, run_id)
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."


def test_two_resumes_around_the_parking_executions_own_cancel_make_one(
    durable_swarm_factory: Any, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two people resume a run cancelled while an execution of it was parking: the first
    claims the cancel's end and waits for that execution; the execution's own cancel in DBOS
    then moves the run's DBOS time, which the second reads. The second still loses the claim
    (the end is the person's cancel, by its tombstone) and leaves the resume to the first."""
    import threading

    from durable_swarm.durable._control import RunControl

    settled: list[str] = []
    settle = RunControl._settled_first

    def counted(self: RunControl, run: str) -> None:
        settled.append(threading.current_thread().name)  # only a caller that won gets here
        settle(self, run)

    monkeypatch.setattr(RunControl, "_settled_first", counted)
    swarm, waits, wait = _parking_again(durable_swarm_factory, run_id)
    swarm.cancel(run_id)
    first = threading.Thread(target=swarm.resume, args=(run_id,), name="first")
    first.start()
    wait_for(lambda: settled == ["first"], "the first resume to claim and wait")
    before = DBOS.get_workflow_status(run_id).updated_at
    time.sleep(1.1)  # SQLite's clock here counts whole seconds
    DBOS.cancel_workflow(run_id)  # the parking execution's own cancel
    assert DBOS.get_workflow_status(run_id).updated_at != before  # a new DBOS time
    second = threading.Thread(target=swarm.resume, args=(run_id,), name="second")
    second.start()
    time.sleep(0.5)  # the second reads the run and tries to claim
    assert not waits.park(run_id, wait.key)  # the execution goes on: its mark is refused ...
    assert waits.honour_cancel(run_id) == 1  # ... and it honours the cancel
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert settled == ["first"]
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    _parked(swarm, run_id)
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."


def test_a_cancelled_run_whose_execution_died_parking_waits_for_a_person_to_resume_it(
    durable_swarm_factory: Any, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel marks a wait that is parking `cancelling` (its execution has still to see the
    cancel). If that execution died there, the sweep resumes nothing, however old the wait;
    a person's resume waits `SETTLE_SECONDS` for the execution, then resumes the run, which
    asks again and finishes on one answer."""
    from durable_swarm.durable import _control
    from durable_swarm.durable._waits import WAITS_TABLE

    monkeypatch.setattr(_control, "SETTLE_SECONDS", 0.5)
    swarm, waits, wait = _parking_again(durable_swarm_factory, run_id)
    swarm.cancel(run_id)  # the execution that was parking dies before its mark
    assert getattr(waits.look(run_id, wait.key), "state", None) == "cancelling"
    assert swarm.get_run(run_id).status == "cancelled"
    waits._write(  # the test ages its own rows
        f"UPDATE {WAITS_TABLE} SET updated_at = updated_at - 3600000 WHERE run_id = :r",
        r=run_id,
    )
    assert _parking.sweep(DBOS) == 0
    assert DBOS.get_workflow_status(run_id).status == "CANCELLED"
    swarm.resume(run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    _parked(swarm, run_id)
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."


def test_a_late_execution_still_honours_a_cancel_that_stands(
    durable_swarm_factory: Any, run_id: str
) -> None:
    """While a person's cancel stands (on the run or a run above it), `honour_cancel` ends the
    run's own live waits, such as one it reached after the cancel marked the others."""
    swarm = durable_swarm_factory(ScriptedClient(_script))
    waits: WaitBook = swarm.runs.waits
    child = f"{run_id}-sub1"
    waits.arrive(child, person_key(1), "input")
    assert waits.honour_cancel(child) == 0  # nobody cancelled: nothing changes
    waits.cancel_tree(run_id)  # the parent's cancel, before the sub-agent reached a wait ...
    waits.arrive(child, person_key(2), "input")  # ... which it reaches now
    assert waits.honour_cancel(child) == 1
    for key in (person_key(1), person_key(2)):
        assert getattr(waits.look(child, key), "state", None) == "cancelled"
    assert not waits.cancelled("other-run") and waits.cancelled(child)


class _Ownership:
    """What `_dbos.admit` reads of this process's ownership (a stand-in)."""

    def __init__(self) -> None:
        self.lost = 0
        self.executor_id = "me"
        self.is_stopping = False
        self.ok = True

    def confirmed(self) -> bool:
        return self.ok


def test_only_the_newest_execution_of_a_run_here_begins_a_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_dbos, "_ownership", _Ownership())
    stale = _dbos.Execution("run-a", 0)
    newest = _dbos.Execution("run-a", 0)
    monkeypatch.setitem(_dbos._newest, "run-a", newest)
    token = _dbos._execution.set(newest)
    try:
        assert _dbos.admit("run-a") == _dbos.Admission.GO
    finally:
        _dbos._execution.reset(token)
    own = _dbos._ownership
    own.ok = False  # paused: the slow path decides once it is confirmed again

    def confirm(seconds: float) -> None:
        own.ok = True

    monkeypatch.setattr(_dbos.time, "sleep", confirm)
    token = _dbos._execution.set(stale)
    try:
        assert _dbos.admit("run-a") == _dbos.Admission.LOST  # a second execution beside it
    finally:
        _dbos._execution.reset(token)


def test_an_execution_of_a_process_taken_for_dead_begins_no_step_of_a_run_gone_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = _Ownership()
    monkeypatch.setattr(_dbos, "_ownership", own)
    execution = _dbos.Execution("run-b", 0)
    monkeypatch.setitem(_dbos._newest, "run-b", execution)
    own.lost = 1  # taken for dead since it began: its runs were taken over

    class Status:
        status, executor_id = "PENDING", "someone-else"

    monkeypatch.setattr(_dbos, "outside_run", lambda call, run_id: Status())
    token = _dbos._execution.set(execution)
    try:
        assert _dbos.admit("run-b") == _dbos.Admission.LOST
        Status.executor_id = "me"  # taken from the queue after the takeover: still its own
        assert _dbos.admit("run-b") == _dbos.Admission.GO
        assert execution.epoch == 1
    finally:
        _dbos._execution.reset(token)


class _TakenAtOnce(WaitBook):
    """A waits table whose live run takes an answer and goes on (`leave`) the moment the answer
    is stored, before its answerer does anything more."""

    def _write(self, sql: str, **params: Any) -> list[Any]:
        rows = super()._write(sql, **params)
        if params.get("answer") is not None and params.get("kind") == "input":
            super().leave(params["run_id"], params["key"])
        return rows


def test_an_answer_a_live_run_takes_at_once_counts_as_given(
    durable_swarm_factory: Any, run_id: str
) -> None:
    # The fleet chaos test saw it: the answer was stored, the live run took it and left its
    # wait, and the answerer, reading the row again, was told someone else had answered.
    waits = _TakenAtOnce(durable_swarm_factory().database_url)
    waits.arrive(run_id, person_key(1), "input")
    given = waits.answer(run_id, person_key(1), "input", {"text": "ann", "by": "ann", "at": ""})
    assert given is not None and given.state == "waiting"  # the live run takes it itself
    assert given.answer == {"text": "ann", "by": "ann", "at": ""}


def test_an_answer_after_the_run_went_on_is_refused_and_names_the_first(
    durable_swarm_factory: Any, run_id: str
) -> None:
    waits: WaitBook = durable_swarm_factory().runs.waits
    waits.arrive(run_id, person_key(1), "input")
    first = {"text": "ann", "by": "ann", "at": "t1"}
    assert waits.answer(run_id, person_key(1), "input", first) is not None
    waits.leave(run_id, person_key(1))  # the run went on with ann's answer
    # bob read the question before the run went on, and answers after: refused, never a new
    # row with his answer that he is told was sent and that nobody reads
    assert waits.answer(run_id, person_key(1), "input", {"text": "bob", "by": "bob"}) is None
    assert waits.answer_of(run_id, person_key(1)) == first
    assert run_id not in waits.live_run_ids()


def test_two_people_resuming_a_cancelled_run_at_once_run_its_next_step_once(
    durable_swarm_factory: Any, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both read the run cancelled; one resumes it, and the other's resume comes once the run
    # executes its next tool. That one must not queue the run again beside the execution
    # (DBOS would start a second one, which runs the tool in flight a second time).
    import threading

    first_released, second_in, second_released = (threading.Event() for _ in range(3))
    first_in, late_read = threading.Event(), threading.Event()
    seconds: list[int] = []

    def first() -> str:
        """Waits until the test lets it end."""
        first_in.set()
        first_released.wait(60)
        return "first done"

    def second() -> str:
        """Counts its executions; waits until the test lets it end."""
        seconds.append(1)
        second_in.set()
        second_released.wait(60)
        return "second done"

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        done = [m for m in messages if m.get("role") == "tool"]
        if not done:
            return calls(ToolCall("first", id="c1"))
        return calls(ToolCall("second", id="c2")) if len(done) == 1 else text("finished")

    agent = Agent(name="park-race-stepper", functions=[first, second])
    swarm = durable_swarm_factory(ScriptedClient(script))
    handle = swarm.start(agent, [{"role": "user", "content": "go"}], run_id=run_id)
    assert first_in.wait(60)
    swarm.cancel(run_id)
    first_released.set()
    with pytest.raises(RunCancelledError):
        handle.result()
    # The cancelled execution may still be winding down after DBOS reports the cancel; this
    # test is about two resumes, so it waits until that execution has ended here.
    wait_for(lambda: run_id not in _dbos._executions, "the cancelled execution to end")

    from durable_swarm.durable._control import RunControl

    read = RunControl.get_run

    def read_then_wait(self: RunControl, run: str) -> Any:
        info = read(self, run)
        if threading.current_thread().name == "late-resumer":
            late_read.set()  # it read the run cancelled, before anyone resumed it
            assert second_in.wait(60)  # and resumes once the first resume's run is in `second`
        return info

    monkeypatch.setattr(RunControl, "get_run", read_then_wait)
    late = threading.Thread(target=swarm.resume, args=(run_id,), name="late-resumer")
    late.start()
    assert late_read.wait(60)
    resumed = swarm.resume(run_id)
    late.join(60)
    assert not late.is_alive()
    # A second execution would reach `second` within a poll of the queue: give it that long.
    deadline = time.monotonic() + 3.0
    while len(seconds) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seconds == [1], f"`second` ran {len(seconds)} times"
    second_released.set()
    assert resumed.result().messages[-1]["content"] == "finished"
    assert seconds == [1]
    assert swarm.get_run(run_id).status == "succeeded"


def test_a_run_resumed_while_its_cancelled_tool_still_runs_goes_on_once(
    durable_swarm_factory: Any, run_id: str
) -> None:
    """A person cancels a run in a tool and resumes it while that tool still runs in the
    execution they cancelled. The tool runs again in the resumed execution (its result was
    never recorded: steps run at least once), and the cancelled execution records nothing and
    goes no further (DBOS refuses its checkpoint: the cancel took the run from it), so every
    later step runs once."""
    import threading

    released = threading.Event()
    firsts: list[int] = []
    seconds: list[int] = []
    model_calls: list[int] = []

    def first() -> str:
        """Its first execution waits until the test lets it end."""
        firsts.append(1)
        if len(firsts) == 1:
            released.wait(60)
        return "first done"

    def second() -> str:
        """Counts its executions."""
        seconds.append(1)
        return "second done"

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        model_calls.append(1)
        done = [m for m in messages if m.get("role") == "tool"]
        if not done:
            return calls(ToolCall("first", id="c1"))
        return calls(ToolCall("second", id="c2")) if len(done) == 1 else text("finished")

    agent = Agent(name="park-race-winding", functions=[first, second])
    swarm = durable_swarm_factory(ScriptedClient(script))
    swarm.start(agent, [{"role": "user", "content": "go"}], run_id=run_id)
    wait_for(lambda: firsts, "the tool to start")
    swarm.cancel(run_id)
    resumed = swarm.resume(run_id)  # the cancelled execution is still in `first`
    wait_for(lambda: len(firsts) == 2, "the resumed execution to run the tool again")
    released.set()  # the cancelled execution's tool ends now: its result is refused
    answer = resumed.result()
    wait_for(lambda: run_id not in _dbos._executions, "both executions to end")
    assert answer.messages[-1]["content"] == "finished"
    tool_results = [m["content"] for m in answer.messages if m.get("role") == "tool"]
    assert tool_results == ["first done", "second done"]
    assert (len(firsts), len(seconds), len(model_calls)) == (2, 1, 3)
    assert swarm.get_run(run_id).status == "succeeded"
    # DBOS's task of the cancelled execution outlives the execution by a moment (it handles
    # the refused checkpoint): let it end before this test's DBOS is destroyed.
    time.sleep(1.0)
    assert (len(firsts), len(seconds), len(model_calls)) == (2, 1, 3)


def test_a_resume_claimed_by_a_caller_that_never_resumed_is_made_by_the_next(
    durable_swarm_factory: Any, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone claimed the resume of this end and stopped before DBOS's resume (its process
    # died): the next person's resume waits `RESUME_CLAIM_SECONDS` for it, then resumes.
    from durable_swarm.durable import _control

    monkeypatch.setattr(_control, "RESUME_CLAIM_SECONDS", 0.5)
    swarm = _cancelled_at_its_wait(durable_swarm_factory, run_id)
    assert swarm.get_run(run_id).status == "cancelled"
    from durable_swarm.durable._control import _end_of

    cancelled_at = swarm.runs.waits.tombstone_at(run_id)
    _, keys = _end_of(swarm.get_run(run_id), cancelled_at)
    assert keys[-1].startswith("cancel:")  # a person's cancel: its tombstone
    for key in keys:  # the caller that died claimed them
        assert swarm.runs.waits.claim_resume_of_end(run_id, key)
        assert not swarm.runs.waits.claim_resume_of_end(run_id, key)
    swarm.resume(run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question again")
    swarm.send_input(run_id, "Ada")
    assert swarm.handle(run_id).result().messages[-1]["content"] == "Hello Ada."
