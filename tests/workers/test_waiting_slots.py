"""A run waiting for a person holds no worker slot while it waits: it is parked.

A worker with concurrency 1 finds five runs queued: one asks the person a question, one waits
for an approval, three only talk to the model. It takes the first at startup; that run parks at
its question, and the worker goes on serving the queue with its one slot, so every run that
does not wait finishes without any answer, one at a time. The answers then resume the waiting
runs. An answer that arrives while the worker's one slot is busy resumes its run only once the
busy run ends. The same holds for a run waiting on a sub-agent that asks the person (both
park), also after the worker is killed while they wait (nothing of them was in it), and when
the sub-agent is answered and runs in another worker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from durable_swarm.durable import DurableClient
from durable_swarm.errors import RunNotFoundError

from .conftest import TIMEOUT, Model, WorkerProcess, wait_for

QUEUE = "slots"
T = TypeVar("T")
POLL = 0.2  # seconds between two looks of a worker at its queue


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The largest number of `(start, end)` spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    at_once = most = 0
    for _, change in edges:
        at_once += change
        most = max(most, at_once)
    return most


def user(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


def test_waiting_runs_free_their_slots_and_take_one_again_when_answered(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    url = make_database_url("slots")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": POLL}
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
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": POLL}
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
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": POLL}
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
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": POLL}
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


def test_a_sub_agent_answered_while_its_worker_is_gone_runs_elsewhere_and_resumes_its_parent(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    # The worker dies while a run's sub-agent waits for the person: nothing of either was in
    # it (both parked), so nothing is taken over. A worker of another queue is up; the answer
    # resumes the sub-agent on DBOS's own queue, which every process serves: that worker runs
    # it, and its end resumes the parent on its queue, which the next worker of that queue
    # takes. That worker's one slot serves other runs before, while the parent is parked.
    url = make_database_url("subelsewhere")
    settings = {"database_url": url, "queue": QUEUE, "concurrency": 1, "poll_interval": POLL}
    assert start_worker("subelsewhere-setup", **settings).wait_ready().terminate() == 0
    with DurableClient(url) as client:
        delegating, child, first = a_sub_agent_waits(
            start_worker, client, "subelsewhere", "e", settings
        )
        parked = [("CANCELLED", None)] * 2
        wait_for(lambda: executions_of(url, [delegating.run_id, child]) == parked, "both to park")
        first.kill()
        other = start_worker("subelsewhere-other", **{**settings, "queue": "other-queue"})
        other.wait_ready()
        second = start_worker("subelsewhere-2", **settings).wait_ready()
        echoes = [client.start("Helper", user(f"echo e{i}"), queue=QUEUE) for i in (2, 3)]
        echoes_served(echoes, "e")
        the_answer_finishes(client, delegating, child)
        assert executions_of(url, [child])[0][0] == "SUCCESS"
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
    engine = sa.create_engine(url)  # a check of what DBOS holds: read on its own table
    try:
        with engine.connect() as conn:
            rows = dict(
                (r[0], (r[1], r[2] if r[1] == "PENDING" else None))
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
