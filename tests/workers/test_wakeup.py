"""A worker takes the next queued run as soon as one of its runs finishes, not at its next poll.

The worker polls its queue only every 600 s here, far longer than the test may take: it gets
its first runs at startup (it looks at its queue once as soon as its ownership is confirmed),
and every later run only because a finished run woke its queue. DBOS's concurrency limit still
holds: no more runs at once than the worker's concurrency.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace

from durable_swarm.durable import DurableClient
from durable_swarm.durable._wakeup import install

from .conftest import TIMEOUT, WorkerProcess, wait_for

QUEUE = "wake"
CONCURRENCY = 2
RUNS = 6
LONG_POLL = 600.0  # seconds: a run that waited for a poll would time the test out


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The largest number of `(start, end)` spans that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    at_once = most = 0
    for _, change in edges:
        at_once += change
        most = max(most, at_once)
    return most


def test_a_freed_slot_takes_the_next_queued_run_without_waiting_for_a_poll(
    start_worker: Callable[..., WorkerProcess], make_database_url: Callable[..., str]
) -> None:
    url = make_database_url("wakeup")
    settings = {
        "database_url": url,
        "queue": QUEUE,
        "concurrency": CONCURRENCY,
        "poll_interval": LONG_POLL,
    }
    # The first worker only creates the database (a client needs DBOS's tables).
    first = start_worker("wake-setup", **settings).wait_ready()
    assert first.terminate() == 0
    with DurableClient(url) as client:
        handles = [
            client.start("Helper", [{"role": "user", "content": f"handoff h{i}"}], queue=QUEUE)
            for i in range(RUNS)
        ]
        worker = start_worker("wake", **settings).wait_ready()

        def all_finished() -> bool:
            return all(client.get_run(h.run_id).status == "succeeded" for h in handles)

        wait_for(all_finished, f"{RUNS} runs to finish", timeout=TIMEOUT, workers=(worker,))
        runs = [client.get_run(h.run_id) for h in handles]
    assert [r.messages[-1]["content"] for r in runs] == [f"closed h{i}" for i in range(RUNS)]
    spans = []
    for run in runs:
        starts = [s.started_at for s in run.steps if s.started_at is not None]
        ends = [s.completed_at for s in run.steps if s.completed_at is not None]
        assert [s.kind for s in run.steps].count("model") == 2, run.steps
        spans.append((min(starts), max(ends)))
    assert most_at_once(spans) <= CONCURRENCY


def test_a_hold_is_used_up_by_the_next_release_of_its_run_even_without_a_queue() -> None:
    # A run started without a queue (DurableSwarm.run, a sub-agent) and handed back is held;
    # its release wakes nothing and uses the hold up, so a later release of the same run (taken
    # again from DBOS's queue, finishing here) wakes its queue as any other.
    from dbos._core import ActiveWorkflowById

    instance = SimpleNamespace(_active_workflows_set=ActiveWorkflowById())
    wakeups = install(instance)
    assert wakeups is not None
    woken: list[str] = []
    wakeups.wake = woken.append  # type: ignore[method-assign]
    active = instance._active_workflows_set
    wakeups.hold("r1")
    active.add("r1").release()  # started without a queue, handed back
    active.add("r1", "_dbos_internal_queue").release()  # taken again from the queue, done
    assert woken == ["_dbos_internal_queue"]
    wakeups.hold("r2")
    wakeups.release_hold("r2")  # the hand-back did not happen
    active.add("r2", "q").release()
    assert woken == ["_dbos_internal_queue", "q"]
