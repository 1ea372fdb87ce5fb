"""A run waiting for a person gives its worker slot back while it waits.

A worker with concurrency 1 finds five runs queued: one asks the person a question, one waits
for an approval, three only talk to the model. It takes the first at startup; while that run
waits, the worker goes on serving the queue with its one slot, so every run that does not wait
finishes without any answer, one at a time. The answers then resume the waiting runs. The
worker polls its queue only every 600 s here: a slot freed by a run that starts to wait must
wake the queue at once, as a finished run's does. An answer that arrives while the worker's one
slot is busy resumes its run only once the busy run ends. The same holds for a run waiting on
a sub-agent that asks the person, again after the worker is killed and the next one takes
both over, and when another process takes the sub-agent over. The unit tests below drive the
library's active-run set directly: counts per queue and partition, a run DBOS executes twice
here, which run a freed slot goes to, and a run's tree (the sub-agents it starts here): joins,
late, recovered and remote sub-agents, cancelled waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from durable_swarm.durable import DurableClient, _wakeup
from durable_swarm.durable._engine import wakeups_supported as supported
from durable_swarm.durable._wakeup import Wakeups, _execution
from durable_swarm.errors import RunNotFoundError

from .conftest import TIMEOUT, Model, WorkerProcess, wait_for
from .test_wakeup import installed_wakeups, most_at_once

QUEUE = "slots"
T = TypeVar("T")
LONG_POLL = 600.0  # seconds: a run that waited for a poll would time the test out


def user(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def test_waiting_runs_free_their_slots_and_take_one_again_when_answered(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    url = make_database_url("slots")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": LONG_POLL}
    # The first worker only creates the database (a client needs DBOS's tables).
    assert start_worker("slots-setup", **settings).wait_ready().terminate() == 0
    with DurableClient(url) as client:
        asking = client.start("Helper", user("ask s1"), queue=QUEUE)
        refunding = client.start("Helper", user("refund s2"), queue=QUEUE)
        echoes = [client.start("Helper", user(f"echo s{i}"), queue=QUEUE) for i in (3, 4, 5)]
        worker = start_worker("slots", **settings).wait_ready()

        results = [h.result(timeout=TIMEOUT) for h in echoes]
        assert [r.messages[-1]["content"] for r in results] == ["echo: s3", "echo: s4", "echo: s5"]
        question = client.get_run(asking.run_id).waiting_for
        assert question is not None and question["prompt"] == "What is your name?"
        approval = wait_for(
            lambda: client.get_run(refunding.run_id).waiting_for,
            "the second run to wait for its approval",
            workers=(worker,),
        )
        # The limit still holds for the runs that execute: one at a time.
        spans = []
        for handle in echoes:
            steps = client.get_run(handle.run_id).steps
            starts = [s.started_at for s in steps if s.started_at is not None]
            ends = [s.completed_at for s in steps if s.completed_at is not None]
            spans.append((min(starts), max(ends)))
        assert most_at_once(spans) == 1

        client.send_input(asking.run_id, "Ada")
        client.approve(refunding.run_id, approval["tool_call"]["id"])
        assert asking.result(timeout=TIMEOUT).messages[-1]["content"] == "ask: Ada"
        assert refunding.result(timeout=TIMEOUT).messages[-1]["content"] == "refund: refunded 5"
    assert worker.terminate() == 0


def test_an_answer_that_arrives_while_the_worker_is_full_waits_for_a_slot(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    model: Model,
) -> None:
    url = make_database_url("full")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": LONG_POLL}
    assert start_worker("full-setup", **settings).wait_ready().terminate() == 0
    slow, model.slow_seconds = model.slow_seconds, 3.0
    try:
        with DurableClient(url) as client:
            asking = client.start("Helper", user("ask f1"), queue=QUEUE)
            time.sleep(0.05)  # queued after it, so the worker takes the question first
            busy = client.start("Helper", user("slow f2"), queue=QUEUE)
            worker = start_worker("full", **settings).wait_ready()
            wait_for(lambda: client.get_run(asking.run_id).waiting_for, "the question")
            wait_for(lambda: model.arrivals("slow", "f2", 0), "the slow run to call the model")
            assert client.get_run(busy.run_id).status == "pending"
            client.send_input(asking.run_id, "Ada")  # while the one slot is busy
            assert asking.result(timeout=TIMEOUT).messages[-1]["content"] == "ask: Ada"
            assert busy.result(timeout=TIMEOUT).messages[-1]["content"] == "slow f2"
            steps = {h.run_id: client.get_run(h.run_id).steps for h in (asking, busy)}
    finally:
        model.slow_seconds = slow
    busy_ended = max(s.completed_at for s in steps[busy.run_id] if s.completed_at is not None)
    resumed = [s for s in steps[asking.run_id] if s.kind == "model"][-1]
    assert resumed.started_at is not None and resumed.started_at >= busy_ended
    assert worker.terminate() == 0


def test_a_run_whose_sub_agent_waits_for_a_person_gives_its_slot_back(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    url = make_database_url("subagent")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": LONG_POLL}
    assert start_worker("subagent-setup", **settings).wait_ready().terminate() == 0
    with DurableClient(url) as client:
        delegating = client.start("Helper", user("delegate d1"), queue=QUEUE)
        time.sleep(0.05)  # queued after it, so the worker takes the delegation first
        echoes = [client.start("Helper", user(f"echo d{i}"), queue=QUEUE) for i in (2, 3)]
        worker = start_worker("subagent", **settings).wait_ready()
        # The parent waits for its sub-agent, which waits for the person: the one slot serves
        # the other runs meanwhile.
        echoes_served(echoes, "d")
        child = f"{delegating.run_id}-sub1"
        question = client.get_run(child).waiting_for
        assert question is not None and question["prompt"] == "What is your name?"
        the_answer_finishes(client, delegating, child)
    assert worker.terminate() == 0


def test_after_a_crash_the_waiting_sub_agent_still_leaves_the_slot_to_other_runs(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    # The worker dies while a run's sub-agent waits for the person. The next worker takes both
    # over, each on its own (the sub-agent is no longer started from its parent's task), and
    # still serves the other runs with its one slot while they wait: whichever run it takes
    # first, a run that held the slot through the wait would leave an echo unserved.
    url = make_database_url("subcrash")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": LONG_POLL}
    assert start_worker("subcrash-setup", **settings).wait_ready().terminate() == 0
    with DurableClient(url) as client:
        delegating, child, first = a_sub_agent_waits(
            start_worker, client, "subcrash", "c", settings
        )
        echoes = [client.start("Helper", user(f"echo c{i}"), queue=QUEUE) for i in (2, 3)]
        first.kill()
        second = start_worker("subcrash-2", **settings).wait_ready()
        echoes_served(echoes, "c")
        the_answer_finishes(client, delegating, child)
    assert second.terminate() == 0


def test_a_parent_whose_sub_agent_another_process_took_over_leaves_the_slot_to_other_runs(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    # The worker dies while a run's sub-agent waits for the person. A worker of another queue
    # takes the dead one's runs over: it executes the sub-agent (DBOS's internal queue carries
    # recovered runs, and every worker serves it) and puts the parent back on its queue, which
    # the next worker of that queue takes. The parent's join there waits on the other
    # process's work: that worker's one slot serves the other runs meanwhile.
    url = make_database_url("subelsewhere")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": LONG_POLL}
    assert start_worker("subelsewhere-setup", **settings).wait_ready().terminate() == 0
    with DurableClient(url) as client:
        delegating, child, first = a_sub_agent_waits(
            start_worker, client, "subelsewhere", "e", settings
        )
        first.kill()
        other = start_worker("subelsewhere-other", **{**settings, "queue": "other-queue"})
        other_id = executor_of(other.wait_ready())
        taken_over = [("ENQUEUED", None), ("PENDING", other_id)]
        wait_for(lambda: executions_of(url, [delegating.run_id, child]) == taken_over,
                 "the takeover", workers=(other,))  # fmt: skip
        second = start_worker("subelsewhere-2", **settings).wait_ready()
        wait_for(lambda: executions_of(url, [delegating.run_id])[0][1] == executor_of(second),
                 "the parent to run again", workers=(second,))  # fmt: skip
        echoes = [client.start("Helper", user(f"echo e{i}"), queue=QUEUE) for i in (2, 3)]
        echoes_served(echoes, "e")
        the_answer_finishes(client, delegating, child)
    assert second.terminate() == 0 and other.terminate() == 0


def a_sub_agent_waits(
    start_worker: Callable[..., WorkerProcess],
    client: DurableClient,
    label: str,
    tag: str,
    settings: dict[str, Any],
) -> tuple[Any, str, WorkerProcess]:
    """A run (`delegate <tag>1`) whose sub-agent has asked the person, on a worker of its own
    (`<label>-1`): the run's handle, the sub-agent's run id and the worker."""
    delegating = client.start("Helper", user(f"delegate {tag}1"), queue=QUEUE)
    first = start_worker(f"{label}-1", **settings).wait_ready()
    child = f"{delegating.run_id}-sub1"
    wait_for(lambda: question_of(client, child), "the sub-agent's question")
    return delegating, child, first


def echoes_served(echoes: list[Any], tag: str) -> None:
    """The echo runs `echo <tag>2` and `echo <tag>3` finished."""
    results = [h.result(timeout=TIMEOUT) for h in echoes]
    assert [r.messages[-1]["content"] for r in results] == [f"echo: {tag}2", f"echo: {tag}3"]


def the_answer_finishes(client: DurableClient, delegating: Any, child: str) -> None:
    """The delegating run still waits for its sub-agent `child`; the person's answer to the
    sub-agent finishes it."""
    assert client.get_run(delegating.run_id).status == "pending"
    client.send_input(child, "Ada")
    answer = delegating.result(timeout=TIMEOUT).messages[-1]["content"]
    assert answer == "delegate: ask: Ada"


def executor_of(worker: WorkerProcess) -> str:
    """The executor id a worker's startup line names."""
    found = re.search(r"as executor '([^']+)'", worker.output())
    assert found is not None, worker.output()
    return found[1]


def executions_of(url: str, run_ids: list[str]) -> list[tuple[str, str | None]]:
    """DBOS's status of each run and the executor holding it (None: queued, no executor)."""
    table = "workflow_status" if url.startswith("sqlite") else "dbos.workflow_status"
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = dict(
                (r[0], (r[1], r[2] if r[1] != "ENQUEUED" else None))
                for r in conn.execute(
                    sa.text(
                        f"SELECT workflow_uuid, status, executor_id FROM {table} "
                        "WHERE workflow_uuid IN :ids"
                    ).bindparams(sa.bindparam("ids", expanding=True)),
                    {"ids": run_ids},
                )
            )
    finally:
        engine.dispose()
    return [rows.get(run_id, ("missing", None)) for run_id in run_ids]


def question_of(client: DurableClient, run_id: str) -> Any:
    """What run `run_id` waits for (None: nothing, or no such run yet)."""
    try:
        return client.get_run(run_id).waiting_for
    except RunNotFoundError:
        return None


def in_task_of(execution: Any, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """`coroutine` as a task of `execution`'s (as DBOS runs a step of a workflow it registered:
    the task knows the execution through `_wakeup`'s context variable)."""
    context = contextvars.copy_context()
    context.run(_execution.set, execution)
    return asyncio.get_running_loop().create_task(coroutine, context=context)


async def sub_agent(active: Any, parent: Any, run_id: str) -> Any:
    """The execution of sub-agent `run_id` started by `parent`: DBOS registers it in its own
    task, whose context is a copy of its parent's."""

    async def register() -> Any:
        return active.add(run_id)

    return await in_task_of(parent, register())


async def parked_until(
    wakeups: Wakeups, run_id: str, until: asyncio.Event, joins: str | None = None
) -> None:
    """`run_id` waits (for a person, or for its sub-agent `joins` to end) until `until` is set:
    run it in a task of the run's execution (`in_task_of`)."""
    async with wakeups.parked(run_id, joins=joins):
        await until.wait()


def serving(limit: int) -> tuple[Wakeups, Any, list[str]]:
    """`installed_wakeups()` with a worker that serves queue `q`, `limit` runs at once."""
    wakeups, active, woken = installed_wakeups()
    wakeups.add("q", threading.Event(), limit=limit)
    return wakeups, active, woken


def test_the_installed_dbos_gets_the_wakeups_and_the_slot_accounting() -> None:
    # On another DBOS release `install` does nothing (waiting runs keep their slots, queues are
    # only polled): this fails until `_wakeup` is checked against that release.
    assert supported()


def test_the_active_set_counts_per_queue_and_leaves_out_the_runs_waiting_for_a_person() -> None:
    wakeups, active, woken = installed_wakeups()

    def counts() -> tuple[int, int, int, int]:
        return (
            active.count_for_queue("q"),
            active.count_for_partition("q", "p1"),
            active.count_for_partition("q", None),
            active.count_for_queue("other"),
        )

    async def scenario() -> None:
        # Each execution registers in its own task, as DBOS's workflows do; a step's task
        # inherits it.
        async def execution(run_id: str, *queue: str | None) -> Any:
            return active.add(run_id, *queue)

        a = await asyncio.create_task(execution("a", "q"))
        b = await asyncio.create_task(execution("b", "q", "p1"))
        await asyncio.create_task(execution("c", "other"))
        d = await asyncio.create_task(execution("d"))  # no queue (a sub-agent): counted nowhere
        assert counts() == (2, 1, 1, 1)

        async def wait_for_person(run_id: str, execution: Any, answer: asyncio.Event) -> None:
            async def step() -> None:
                async with wakeups.parked(run_id):
                    await answer.wait()

            # the step runs in a task of the execution's own (its context)
            await in_task_of(execution, step())

        answer_b = asyncio.Event()
        waiting_b = asyncio.create_task(wait_for_person("b", b, answer_b))
        await asyncio.sleep(0.01)
        assert woken == ["q"]  # the slot is free: its queue looks at once
        assert counts() == (1, 0, 1, 1)
        # a second wait of the same execution, or one of a run without a queue, frees nothing
        for run_id, execution_ in (("b", b), ("d", d)):
            answered = asyncio.Event()
            answered.set()
            await wait_for_person(run_id, execution_, answered)
            assert counts() == (1, 0, 1, 1) and woken == ["q"]
        # DBOS runs b a second time here (a re-dispatch on its internal queue): that execution
        # waiting frees its own slot, not the first's
        again = await asyncio.create_task(execution("b", "_dbos_internal_queue"))
        answer_again = asyncio.Event()
        waiting_again = asyncio.create_task(wait_for_person("b", again, answer_again))
        await asyncio.sleep(0.01)
        assert counts() == (1, 0, 1, 1) and active.count_for_queue("_dbos_internal_queue") == 0
        b.release()  # the first execution ends while it waits: counted once, not twice, and
        # it frees no slot (it held none)
        assert counts() == (1, 0, 1, 1) and woken == ["q", "_dbos_internal_queue"]
        answer_b.set()
        await waiting_b  # nothing left to take back
        assert counts() == (1, 0, 1, 1)
        answer_again.set()
        await waiting_again  # no limit on that queue here: back at once
        assert active.count_for_queue("_dbos_internal_queue") == 1
        again.release()
        a.release()
        assert counts() == (0, 0, 0, 1)

    asyncio.run(scenario())


def test_an_answered_run_takes_its_slot_back_only_when_the_worker_has_room() -> None:
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        first = active.add("first", "q")
        answer = asyncio.Event()
        resumed = asyncio.Event()

        async def waits() -> None:
            async with wakeups.parked("first"):
                await answer.wait()
            resumed.set()

        task = in_task_of(first, waits())
        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        second = active.add("second", "q")  # the queue gave the slot to another run
        answer.set()
        await asyncio.sleep(0.05)
        assert not resumed.is_set()  # full: the answered run waits for the slot
        assert active.count_for_queue("q") == 1
        starting = {"q": 1}  # the queue thread took a run that has not begun yet
        wakeups.starting = starting.__getitem__
        second.release()  # the slot is taken by that run: the answered one goes on waiting
        await asyncio.sleep(0.05)
        assert not resumed.is_set()
        starting["q"] = 0
        third = active.add("third", "q")  # it began...
        third.release()  # ...and ended: the slot goes to the answered run, not to a new run
        await asyncio.wait_for(resumed.wait(), 5)
        assert woken == ["q"] and active.count_for_queue("q") == 1
        await task
        first.release()
        assert woken == ["q", "q"] and active.count_for_queue("q") == 0

    asyncio.run(scenario())


def test_two_slots_freed_at_once_go_to_two_answered_runs() -> None:
    wakeups, active, woken = serving(2)

    async def scenario() -> None:
        waiting = [active.add(f"w{i}", "q") for i in (1, 2)]
        answers = [asyncio.Event(), asyncio.Event()]
        resumed = [asyncio.Event(), asyncio.Event()]

        async def waits(i: int) -> None:
            async with wakeups.parked(f"w{i + 1}"):
                await answers[i].wait()
            resumed[i].set()

        tasks = []
        for i, execution in enumerate(waiting):
            tasks.append(in_task_of(execution, waits(i)))
        await asyncio.sleep(0.01)
        busy = [active.add(f"b{i}", "q") for i in (1, 2)]  # the queue filled both slots
        for answer in answers:
            answer.set()
        await asyncio.sleep(0.05)
        assert not any(r.is_set() for r in resumed) and active.count_for_queue("q") == 2
        woken.clear()
        wakeups.hold("b2")  # one is handed back to another process: its slot still counts here
        for execution in busy:  # both end before either answered run gets to run
            execution.release()
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in resumed)), 5)
        assert woken == [] and active.count_for_queue("q") == 2
        await asyncio.gather(*tasks)

    asyncio.run(scenario())


def test_a_run_and_its_sub_agents_give_the_slot_back_only_while_none_of_them_runs() -> None:
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")

        a = await sub_agent(active, parent, "p-sub1")
        b = await sub_agent(active, parent, "p-sub2")
        assert active.count_for_queue("q") == 1
        answers = {"a": asyncio.Event(), "b": asyncio.Event()}
        resumed: list[str] = []

        async def asks(run_id: str, answer: asyncio.Event) -> None:
            async with wakeups.parked(run_id):
                await answer.wait()
            resumed.append(run_id)

        asking_a = in_task_of(a, asks("p-sub1", answers["a"]))
        await asyncio.sleep(0.01)
        assert woken == [] and active.count_for_queue("q") == 1  # the parent and b run
        joined = asyncio.Event()

        async def joins() -> None:
            async with wakeups.parked("p", joins="p-sub1"):
                await joined.wait()
            resumed.append("p")

        joining = in_task_of(parent, joins())
        await asyncio.sleep(0.01)
        assert woken == [] and active.count_for_queue("q") == 1  # b still runs
        b.release()  # the last execution that ran ends: the tree's slot is free
        assert woken == ["q"] and active.count_for_queue("q") == 0
        other = active.add("other", "q")  # the queue gives it to another run
        answers["a"].set()
        await asyncio.sleep(0.05)
        assert resumed == []  # full: the answered sub-agent waits for a slot
        other.release()  # the slot goes to the tree, not to a new run
        await asyncio.wait_for(asking_a, 5)
        assert resumed == ["p-sub1"] and woken == ["q"] and active.count_for_queue("q") == 1
        a.release()  # the joined sub-agent ends: the parent goes on with its slot
        assert woken == ["q"] and active.count_for_queue("q") == 1
        joined.set()
        await asyncio.wait_for(joining, 5)
        assert resumed == ["p-sub1", "p"] and active.count_for_queue("q") == 1
        parent.release()
        assert woken == ["q", "q"] and active.count_for_queue("q") == 0

    asyncio.run(scenario())


def test_a_sub_agent_cancelled_while_it_waits_takes_the_slot_back_and_leaves_it_to_its_parent() -> (
    None
):
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")
        child = await sub_agent(active, parent, "p-sub1")
        answer, done = asyncio.Event(), asyncio.Event()
        asking = in_task_of(child, parked_until(wakeups, "p-sub1", answer))
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub1"))

        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        other = active.add("other", "q")  # the queue gave the slot to another run
        asking.cancel()  # the sub-agent is cancelled while it waits: it ends at once...
        with contextlib.suppress(asyncio.CancelledError):
            await asking
        assert active.count_for_queue("q") == 2  # ...taking the slot back, as a root does
        child.release()  # its parent, which joins it, goes on with that slot
        done.set()
        await asyncio.wait_for(joining, 5)
        assert active.count_for_queue("q") == 2 and woken == ["q"]
        other.release()
        parent.release()
        assert active.count_for_queue("q") == 0 and woken == ["q", "q", "q"]

    asyncio.run(scenario())


def test_a_join_counts_as_running_until_its_sub_agent_is_registered() -> None:
    # DBOS registers a sub-agent in its own task, which has not begun when the parent joins it.
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")
        done, answer = asyncio.Event(), asyncio.Event()

        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub1"))
        await asyncio.sleep(0.01)
        assert woken == [] and active.count_for_queue("q") == 1  # nothing known to wait on
        child = await sub_agent(active, parent, "p-sub1")
        assert woken == [] and active.count_for_queue("q") == 1  # the sub-agent runs
        asking = in_task_of(child, parked_until(wakeups, "p-sub1", answer))

        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        answer.set()
        await asyncio.wait_for(asking, 5)  # the worker has room: back at once
        assert active.count_for_queue("q") == 1
        child.release()
        done.set()
        await asyncio.wait_for(joining, 5)
        # a join of a run that does not register here keeps the slot for a moment (see below)
        other_done = asyncio.Event()
        never = in_task_of(parent, parked_until(wakeups, "p", other_done, joins="p-sub2"))
        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 1
        other_done.set()
        await asyncio.wait_for(never, 5)
        parent.release()
        assert active.count_for_queue("q") == 0

    asyncio.run(scenario())


def test_a_join_of_a_sub_agent_running_in_another_process_gives_the_slot_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After a crash another process may take the sub-agent over: it never registers here, and
    # the parent's join waits on that process's work. Once the sub-agent has not registered
    # for `JOIN_ELSEWHERE_SECONDS`, the slot serves other runs; when the join ends, the parent
    # takes a slot back (waiting while the worker is full).
    monkeypatch.setattr(_wakeup, "JOIN_ELSEWHERE_SECONDS", 0.2)
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")
        done = asyncio.Event()
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub1"))
        await asyncio.sleep(0.05)
        assert woken == [] and active.count_for_queue("q") == 1
        await asyncio.sleep(0.3)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        other = active.add("other", "q")  # the queue gave the slot to another run
        done.set()
        await asyncio.sleep(0.05)
        assert not joining.done() and active.count_for_queue("q") == 1  # full: it waits
        other.release()  # the slot goes to the parent, not to a new run
        await asyncio.wait_for(joining, 5)
        assert woken == ["q"] and active.count_for_queue("q") == 1
        # the sub-agent registers here in the tree after all (started late): it runs, so the
        # tree takes its slot back at once, and its end hands the slot to the join
        done.clear()
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub2"))
        await asyncio.sleep(0.3)
        assert woken == ["q", "q"] and active.count_for_queue("q") == 0
        child = await sub_agent(active, parent, "p-sub2")
        assert active.count_for_queue("q") == 1
        child.release()
        assert active.count_for_queue("q") == 1  # no slot freed in between
        done.set()
        await asyncio.wait_for(joining, 5)
        assert woken == ["q", "q"] and active.count_for_queue("q") == 1
        # a join that ends within the moment frees nothing
        done.clear()
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub3"))
        await asyncio.sleep(0.05)
        done.set()
        await asyncio.wait_for(joining, 5)
        await asyncio.sleep(0.3)
        assert woken == ["q", "q"] and active.count_for_queue("q") == 1
        parent.release()
        assert active.count_for_queue("q") == 0

    asyncio.run(scenario())


def test_answered_sub_agents_of_one_tree_share_the_slot_the_first_takes_back() -> None:
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")
        children = [await sub_agent(active, parent, f"p-sub{i}") for i in (1, 2)]
        answers = [asyncio.Event(), asyncio.Event()]
        resumed: list[str] = []

        async def asks(i: int) -> None:
            async with wakeups.parked(f"p-sub{i + 1}"):
                await answers[i].wait()
            resumed.append(f"p-sub{i + 1}")

        tasks = [in_task_of(child, asks(i)) for i, child in enumerate(children)]
        forever = asyncio.Event()  # the parent joins for good here
        joining = in_task_of(parent, parked_until(wakeups, "p", forever, joins="p-sub1"))
        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        other = active.add("other", "q")
        for answer in answers:  # both answered while the worker is full: both wait in line
            answer.set()
            await asyncio.sleep(0.01)
        assert resumed == []
        other.release()  # one slot frees: the tree takes it, and both of its runs go on
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert sorted(resumed) == ["p-sub1", "p-sub2"] and active.count_for_queue("q") == 1
        joining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await joining

    asyncio.run(scenario())


def test_a_slot_handed_to_a_wait_that_is_cancelled_goes_to_the_queue() -> None:
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        first = active.add("first", "q")
        answer = asyncio.Event()
        task = in_task_of(first, parked_until(wakeups, "first", answer))
        await asyncio.sleep(0.01)
        busy = active.add("busy", "q")
        answer.set()
        await asyncio.sleep(0.01)  # answered, in line for a slot
        woken.clear()
        busy.release()  # its slot is handed to the answered run...
        task.cancel()  # ...which is cancelled before it runs: the slot is passed on
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert woken == ["q"]
        first.release()

    asyncio.run(scenario())


def test_a_sub_agent_registered_after_its_tree_gave_the_slot_back_takes_it_back() -> None:
    # A safety net: the parent lets its new sub-agents register before it joins one, so this
    # does not happen in a run; if it did, the late sub-agent still runs within its tree's slot.
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        parent = active.add("p", "q")
        done = asyncio.Event()
        first = await sub_agent(active, parent, "p-sub1")
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub1"))
        first.release()  # hands the slot to the joining parent
        await asyncio.sleep(0.01)
        assert active.count_for_queue("q") == 1
        # a wait of the parent's own that holds the tree idle, then a late sub-agent
        done.set()
        await joining
        answer = asyncio.Event()
        asking = in_task_of(parent, parked_until(wakeups, "p", answer))
        await asyncio.sleep(0.01)
        assert woken == ["q"] and active.count_for_queue("q") == 0
        late = await sub_agent(active, parent, "p-sub2")
        assert active.count_for_queue("q") == 1  # it runs: its tree holds the slot again
        late.release()
        assert woken == ["q", "q"] and active.count_for_queue("q") == 0
        answer.set()
        await asyncio.wait_for(asking, 5)
        assert active.count_for_queue("q") == 1
        parent.release()

    asyncio.run(scenario())


def test_a_join_of_a_run_recovered_on_its_own_here_does_not_hold_the_slot() -> None:
    # After a crash DBOS recovers a sub-agent from its internal queue, apart from its parent:
    # the parent's join waits on work that is not its tree's, registered before or after it.
    wakeups, active, woken = serving(1)

    async def scenario() -> None:
        recovered = active.add("p-sub1", "_dbos_internal_queue")
        parent = active.add("p", "q")
        done = asyncio.Event()

        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub1"))
        await asyncio.sleep(0.01)
        assert woken.count("q") == 1 and active.count_for_queue("q") == 0
        recovered.release()  # it ended: the parent takes a slot back (the worker has room)
        done.set()
        await asyncio.wait_for(joining, 5)
        assert active.count_for_queue("q") == 1
        done.clear()
        # registered after the join
        joining = in_task_of(parent, parked_until(wakeups, "p", done, joins="p-sub2"))
        await asyncio.sleep(0.01)
        assert woken.count("q") == 1 and active.count_for_queue("q") == 1
        later = active.add("p-sub2", "_dbos_internal_queue")
        assert woken.count("q") == 2 and active.count_for_queue("q") == 0
        later.release()
        done.set()
        await asyncio.wait_for(joining, 5)
        parent.release()
        assert active.count_for_queue("q") == 0

    asyncio.run(scenario())


def test_a_tree_that_takes_its_slot_back_lets_its_runs_in_line_go_on() -> None:
    # The tree takes its slot back outside the line (a late sub-agent registers; a wait is
    # cancelled): its answered sub-agent waiting in line goes on in that slot at once.
    async def scenario(how: str) -> None:
        wakeups, active, _ = serving(1)
        parent = active.add("p", "q")
        a = await sub_agent(active, parent, "p-a")
        b = await sub_agent(active, parent, "p-b")
        answered, joined = asyncio.Event(), asyncio.Event()

        asking_a = in_task_of(a, parked_until(wakeups, "p-a", answered))
        asking_b = in_task_of(b, parked_until(wakeups, "p-b", asyncio.Event()))
        joining = in_task_of(parent, parked_until(wakeups, "p", joined, joins="p-a"))
        await asyncio.sleep(0.01)
        assert active.count_for_queue("q") == 0
        other = active.add("other", "q")  # the queue gave the slot to another run
        answered.set()
        await asyncio.sleep(0.01)
        assert not asking_a.done()  # the worker is full: in line
        if how == "late sub-agent":
            await sub_agent(active, parent, "p-late")
        else:
            asking_b.cancel()
        await asyncio.wait_for(asking_a, 5)
        assert active.count_for_queue("q") == 2  # the tree's one slot, and the other run's
        other.release()
        for task in (asking_b, joining):
            task.cancel()
        await asyncio.gather(asking_b, joining, return_exceptions=True)

    asyncio.run(scenario("late sub-agent"))
    asyncio.run(scenario("cancelled wait"))


def test_a_slot_freed_while_an_answered_run_looks_for_room_is_not_lost() -> None:
    # A run of the queue ends on another thread just as the answered run joins the line: the
    # answered run finds room and goes on; the slot handed to it meanwhile goes to the queue.
    wakeups, active, woken = serving(2)

    async def scenario() -> None:
        waiting, other = active.add("w", "q"), active.add("other", "q")
        answer = asyncio.Event()
        task = in_task_of(waiting, parked_until(wakeups, "w", answer))
        await asyncio.sleep(0.01)
        woken.clear()

        def starting(queue: str) -> int:  # looked at after joining the line
            ends = threading.Thread(target=other.release)
            ends.start()
            ends.join()
            return 0

        wakeups.starting = starting
        answer.set()
        await asyncio.wait_for(task, 5)
        await asyncio.sleep(0.01)
        assert active.count_for_queue("q") == 1 and woken == ["q"]
        waiting.release()

    asyncio.run(scenario())
