"""A run waiting for a person gives its worker slot back while it waits.

A worker with concurrency 1 finds five runs queued: one asks the person a question, one waits
for an approval, three only talk to the model. It takes the first at startup; while that run
waits, the worker goes on serving the queue with its one slot, so every run that does not wait
finishes without any answer, one at a time. The answers then resume the waiting runs. The
worker polls its queue only every 600 s here: a slot freed by a run that starts to wait must
wake the queue at once, as a finished run's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_swarm.durable import DurableClient

from .conftest import TIMEOUT, WorkerProcess, wait_for
from .test_wakeup import most_at_once

QUEUE = "slots"
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


def test_the_active_set_counts_per_queue_and_leaves_out_the_runs_waiting_for_a_person() -> None:
    from types import SimpleNamespace

    from dbos._core import ActiveWorkflowById

    from durable_swarm.durable._wakeup import install

    instance = SimpleNamespace(_active_workflows_set=ActiveWorkflowById())
    wakeups = install(instance)
    assert wakeups is not None
    woken: list[str] = []
    wakeups.wake = woken.append  # type: ignore[method-assign]
    active = instance._active_workflows_set
    a = active.add("a", "q")
    b = active.add("b", "q", "p1")
    active.add("c", "other")
    active.add("d")  # no queue (DurableSwarm.run, a sub-agent): counted nowhere

    def counts() -> tuple[int, int, int, int]:
        return (
            active.count_for_queue("q"),
            active.count_for_partition("q", "p1"),
            active.count_for_partition("q", None),
            active.count_for_queue("other"),
        )

    assert counts() == (2, 1, 1, 1)
    with wakeups.parked("b"):
        assert woken == ["q"]  # the slot is free: its queue looks at once
        assert counts() == (1, 0, 1, 1)
        with wakeups.parked("b"):  # the run has one execution here: nothing more to free
            assert counts() == (1, 0, 1, 1) and woken == ["q"]
        with wakeups.parked("d"):  # a run without a queue frees no slot and wakes nothing
            assert counts() == (1, 0, 1, 1) and woken == ["q"]
        second = active.add("b", "q", "p1")  # DBOS runs it twice here a moment (a re-dispatch)
        assert counts() == (2, 1, 1, 1)
        with wakeups.parked("b"):  # and the second execution waits too
            assert counts() == (1, 0, 1, 1) and woken == ["q", "q"]
        second.release()
    assert counts() == (2, 1, 1, 1)
    a.release()
    b.release()
    assert counts() == (0, 0, 0, 1)
    assert woken == ["q", "q", "q", "q", "q"]  # each run of the queue that ends wakes it too
