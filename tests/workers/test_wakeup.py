"""A worker takes the next queued run as soon as one of its runs finishes, not at its next poll.

The worker polls its queue only every 600 s here, far longer than the test may take: it gets
its first runs at startup (it looks at its queue once as soon as its ownership is confirmed),
and every later run only because a finished run woke its queue. DBOS's concurrency limit still
holds: no more runs at once than the worker's concurrency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from durable_swarm.durable import DurableClient
from durable_swarm.durable._engine import gate_queues
from durable_swarm.durable._engine import install_wakeups as install
from durable_swarm.durable._wakeup import Wakeups

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


def installed_wakeups() -> tuple[Wakeups, Any, list[str]]:
    """Wake-ups installed on a stand-in DBOS instance (a fresh active-run set): the wake-ups,
    the set, and the queues woken so far (recorded instead of waking threads)."""
    from dbos._core import ActiveWorkflowById

    instance = SimpleNamespace(_active_workflows_set=ActiveWorkflowById())
    wakeups = install(instance)
    assert wakeups is not None
    woken: list[str] = []
    wakeups.wake = woken.append  # type: ignore[method-assign]
    return wakeups, instance._active_workflows_set, woken


def test_a_hold_is_used_up_by_the_next_release_of_its_run_even_without_a_queue() -> None:
    # A run started without a queue (DurableSwarm.run, a sub-agent) and handed back is held;
    # its release wakes nothing and uses the hold up, so a later release of the same run (taken
    # again from DBOS's queue, finishing here) wakes its queue as any other.
    wakeups, active, woken = installed_wakeups()
    wakeups.hold("r1")
    active.add("r1").release()  # started without a queue, handed back
    active.add("r1", "_dbos_internal_queue").release()  # taken again from the queue, done
    assert woken == ["_dbos_internal_queue"]
    wakeups.hold("r2")
    wakeups.release_hold("r2")  # the hand-back did not happen
    active.add("r2", "q").release()
    assert woken == ["_dbos_internal_queue", "q"]


def test_a_queue_thread_looks_at_its_queue_only_once_the_wakeups_are_open() -> None:
    # DBOS starts its queue threads during its launch, before the ownership gate wraps its
    # dequeue: until `open`, a poll's timeout must not let the thread look at its queue.
    from dbos._core import ActiveWorkflowById

    instance = SimpleNamespace(_active_workflows_set=ActiveWorkflowById())
    wakeups = install(instance)
    assert wakeups is not None
    stop = threading.Event()
    waker = wakeups.add("q", stop)
    looked = threading.Event()

    def queue_thread() -> None:
        if not waker.wait(0.01):  # DBOS's loop: wait one poll, then look unless stopping
            looked.set()

    thread = threading.Thread(target=queue_thread)
    thread.start()
    assert not looked.wait(0.3)  # thirty polls' time, and no look
    wakeups.wake("q")  # a finished run before the gate is in place wakes nothing either
    assert not looked.wait(0.1)
    wakeups.open()
    assert looked.wait(5)
    thread.join()
    # once open, a poll's timeout ends the wait as DBOS expects; a stop ends it with True
    assert waker.wait(0.01) is False
    stop.set()
    assert waker.wait(5) is True
    late = wakeups.add("later", threading.Event())  # a queue listened to after the opening
    assert late.wait(0) is False  # looks at once


def test_runs_taken_but_not_begun_count_against_the_workers_concurrency() -> None:
    # DBOS counts a run against its queue's per-worker concurrency only once it begins here, and
    # only as of the start of its poll; a wake-up right after a claim must not take the freed
    # slots twice. The gate passes the larger of DBOS's count and (taken, not begun) + begun.
    seen: list[tuple[Any, ...]] = []

    def plain(queue: Any, *args: Any, **kwargs: Any) -> tuple[list[str], None]:
        seen.append(("plain", args, kwargs))
        return ["r1"], None

    def partitioned(queue: Any, *args: Any, **kwargs: Any) -> list[str]:
        seen.append(("partitioned", args, kwargs))
        return ["r2"]

    sys_db = SimpleNamespace(
        start_queued_workflows=plain, start_queued_partitioned_workflows=partitioned
    )
    ownership = SimpleNamespace(confirmed=lambda: True, registry=SimpleNamespace(incarnation="one"))
    begun = {"q": 2, "other": 0}
    active = SimpleNamespace(count_for_queue=begun.__getitem__)
    taken: list[tuple[list[str], str]] = []
    starting = {"q": 3, "other": 0}
    gate_queues(
        SimpleNamespace(_sys_db=sys_db, _active_workflows_set=active),
        ownership,  # type: ignore[arg-type]
        lambda ids, queue: taken.append((list(ids), queue)),
        bool,
        starting.__getitem__,
    )
    queue = SimpleNamespace(name="q", _worker_concurrency=10)
    assert sys_db.start_queued_workflows(queue, "exec", "v1", None, 2, owner_xid="x") == (
        ["r1"],
        None,
    )
    assert seen[-1] == ("plain", ("exec", "v1", None, 5), {"owner_xid": "x"})  # 2 begun + 3
    sys_db.start_queued_workflows(queue, "exec", "v1", None, 7)  # DBOS counted more: kept
    assert seen[-1] == ("plain", ("exec", "v1", None, 7), {})
    sys_db.start_queued_workflows(queue, "exec", "v1", None)
    assert seen[-1] == ("plain", ("exec", "v1", None), {"local_running_count": 5})
    assert sys_db.start_queued_partitioned_workflows(queue, "exec", "v1", 8) == ["r2"]
    assert seen[-1] == ("partitioned", ("exec", "v1", 5), {})  # 10 - (2 begun + 3 not yet)
    calls = len(seen)
    begun["q"] = 7
    assert sys_db.start_queued_partitioned_workflows(queue, "exec", "v1", 8) == []
    assert len(seen) == calls  # no room left: no claim at all
    other = SimpleNamespace(name="other", _worker_concurrency=None)
    sys_db.start_queued_partitioned_workflows(other, "exec", "v1", 3)
    assert seen[-1] == ("partitioned", ("exec", "v1", 3), {})  # no per-worker limit
    assert taken == [(["r1"], "q"), (["r1"], "q"), (["r1"], "q"), (["r2"], "q"), (["r2"], "other")]


def test_starting_on_counts_the_runs_taken_from_a_queue_until_they_begin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from durable_swarm.durable import _dbos

    try:
        _dbos.note_taken(["a", "b"], "q")
        _dbos.note_taken(["c"])  # started without a queue
        assert (_dbos.starting_on("q"), _dbos.starting_on("other")) == (2, 0)
        _dbos.note_entered("a")
        assert _dbos.starting_on("q") == 1
        # a taken run that never begins (cancelled right after its claim) stops counting
        monkeypatch.setattr(_dbos, "STARTING_SECONDS", 0.0)
        assert _dbos.starting_on("q") == 0
    finally:
        for run_id in ("a", "b", "c"):
            _dbos.note_entered(run_id)


def test_a_queue_with_limits_shared_across_processes_gets_no_wake_ups() -> None:
    # DBOS claims from a queue with a global concurrency or a rate limit in a stricter
    # transaction and backs its polls off while claims conflict; a wake-up would bypass that.
    from dbos._core import ActiveWorkflowById

    from durable_swarm.durable._engine import _shares_budget

    assert _shares_budget(SimpleNamespace(_concurrency=5, _limiter=None))
    assert _shares_budget(SimpleNamespace(_concurrency=None, _limiter={"limit": 1, "period": 1}))
    assert not _shares_budget(SimpleNamespace(_concurrency=None, _worker_concurrency=10))
    instance = SimpleNamespace(_active_workflows_set=ActiveWorkflowById())
    wakeups = install(instance)
    assert wakeups is not None
    shared = wakeups.add("shared", threading.Event(), wakeable=False)
    own = wakeups.add("own", threading.Event())
    wakeups.open()
    assert shared.wait(5) is False and own.wait(5) is False  # the opening look, at once
    wakeups.wake("shared")
    wakeups.wake("own")
    assert own.wait(5) is False  # woken at once
    started = time.monotonic()
    assert shared.wait(0.3) is False
    assert time.monotonic() - started >= 0.25  # not woken: its poll's timeout ended the wait
