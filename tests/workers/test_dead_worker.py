"""A worker killed with runs in flight: another worker (another executor id) finishes them.

Worker A takes three runs; each has made its first model call and its tool call, and its second
model call is held at the fake server. Worker B starts (nothing for it on the queue), then A is
SIGKILLed. B finds A's heartbeat stale, claims A, puts A's runs back on the queue and finishes
them: the finished model calls and tools are not done again, only the call that A had in flight.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import procs
from durable_swarm.durable import PROCESSES_TABLE, DurableClient
from durable_swarm.durable._log import WORKFLOW_NAME
from durable_swarm.durable._ownership import ProcessRegistry
from durable_swarm.testing import FakeOpenAIServer

from .conftest import HERE, TIMEOUT, Model, WorkerProcess, tool_lines, wait_for

QUEUE = "dead"
TAGS = ["d1", "d2", "d3"]


def test_a_dead_workers_runs_are_finished_by_another_worker(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("dead")
    settings = {
        "database_url": url,
        "queue": QUEUE,
        "concurrency": 5,
        "heartbeat_interval": 0.2,
        "dead_after": 1.5,
        "poll_interval": 0.1,
    }
    a = start_worker("a", executor_id="worker-a", **settings).wait_ready()
    with DurableClient(url) as client:
        handles = [
            client.start("Helper", [{"role": "user", "content": f"work {tag}"}], queue=QUEUE)
            for tag in TAGS
        ]
        wait_for(
            lambda: all(model.arrivals("work", tag, 1) == 1 for tag in TAGS),
            "A to have every run's second model call in flight",
            workers=(a,),
        )
        b = start_worker("b", executor_id="worker-b", **settings).wait_ready()
        assert all(client.get_run(h.run_id).status == "pending" for h in handles)
        a.kill()

        answers = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
        assert answers == [f"done {tag}" for tag in TAGS]
        for handle in handles:
            info = client.get_run(handle.run_id)
            assert info.status == "succeeded"
            assert [(s.kind, s.name) for s in info.steps if s.kind in ("model", "tool")] == [
                ("model", "Helper"),
                ("tool", "record"),
                ("model", "Helper"),
            ]
        statuses = client._dbos.list_workflows(workflow_ids=[h.run_id for h in handles])
        assert {s.executor_id for s in statuses} == {"worker-b"}

    for tag in TAGS:
        assert model.arrivals("work", tag, 0) == 1  # finished before the kill: never again
        assert model.arrivals("work", tag, 1) == 2  # in flight at the kill: sent again by B
    records = tool_lines(work_dir, "record")
    assert sorted(line.split()[0] for line in records) == TAGS  # each tool ran once, in A
    assert {line.split()[1] for line in records} == {str(a.proc.pid)}
    assert "process 'worker-a' is gone (process " in b.output()
    assert "3 of its unfinished runs are back on their queues" in b.output()

    # A's row is gone (claimed, then released); B's is live, and marked stopped at SIGTERM.
    assert b.terminate() == 0
    watcher = ProcessRegistry(url, "watcher", QUEUE, dead_after=60.0)
    try:
        assert [row.executor_id for row in watcher.dead()] == ["worker-b"]
        assert watcher.dead()[0].heartbeat_at == 0
        assert PROCESSES_TABLE == "durable_swarm_processes"
    finally:
        watcher.close()


def test_a_dead_workers_runs_go_back_in_batches(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    model: Model,
    work_dir: Path,
) -> None:
    # Five runs of A, held in their second model call; B takes them over in batches of two runs
    # per call of DBOS's `resume_workflows` (three batches, the last one short). Each run once,
    # finished by B, nothing finished before done again.
    tags = [f"b{i}" for i in range(5)]
    url = make_database_url("batches")
    settings = _quick_workers(url)
    a = start_worker("a", executor_id="worker-a", **settings).wait_ready()
    with DurableClient(url) as client:
        handles = _held_runs(client, model, tags, a)
        b = start_worker("b", executor_id="worker-b", recovery={"batch": 2}, **settings)
        b.wait_ready()
        a.kill()
        _finished_once_by(client, handles, tags, "worker-b")
    assert "5 of its unfinished runs are back on their queues" in b.output()
    assert re.findall(r"recovery batch: (\d+) runs", b.output()) == ["2", "2", "1"]
    _each_step_once(model, work_dir, tags)
    assert b.terminate() == 0


def test_a_worker_restarted_under_its_executor_id_finishes_its_runs(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    model: Model,
    work_dir: Path,
) -> None:
    # A worker with a pinned executor id is killed with five runs in flight and started again
    # under the same id: DBOS's launch recovery of its own runs puts them back on their queue.
    tags = [f"s{i}" for i in range(5)]
    url = make_database_url("restart")
    settings = {**_quick_workers(url), "executor_id": "worker-pinned"}
    first = start_worker("first", **settings).wait_ready()
    with DurableClient(url) as client:
        handles = _held_runs(client, model, tags, first)
        first.kill()
        again = start_worker("again", **settings).wait_ready()
        _finished_once_by(client, handles, tags, "worker-pinned")
    _each_step_once(model, work_dir, tags)
    assert again.terminate() == 0


def _quick_workers(url: str) -> dict[str, Any]:
    """Settings of workers on `url` that take five runs at once and judge each other fast."""
    return {
        "database_url": url,
        "queue": QUEUE,
        "concurrency": 5,
        "heartbeat_interval": 0.2,
        "dead_after": 1.5,
        "poll_interval": 0.1,
    }


def _held_runs(client: DurableClient, model: Model, tags: list[str], worker: WorkerProcess) -> Any:
    """Start a run per tag on the queue; return their handles once `worker` has every run's
    second model call in flight."""
    handles = [
        client.start("Helper", [{"role": "user", "content": f"work {tag}"}], queue=QUEUE)
        for tag in tags
    ]
    wait_for(
        lambda: all(model.arrivals("work", tag, 1) == 1 for tag in tags),
        "every run's second model call in flight",
        workers=(worker,),
    )
    return handles


def _finished_once_by(client: DurableClient, handles: Any, tags: list[str], executor: str) -> None:
    """Every run answered, and succeeded under `executor`."""
    answers = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert answers == [f"done {tag}" for tag in tags]
    statuses = client._dbos.list_workflows(workflow_ids=[h.run_id for h in handles])
    assert {(s.status, s.executor_id) for s in statuses} == {("SUCCESS", executor)}


def _each_step_once(model: Model, work_dir: Path, tags: list[str]) -> None:
    """The model call finished before the kill was not made again, the one in flight was made
    once more, and each run's tool ran once."""
    for tag in tags:
        assert model.arrivals("work", tag, 0) == 1
        assert model.arrivals("work", tag, 1) == 2
    records = [line.split()[0] for line in tool_lines(work_dir, "record")]
    assert sorted(tag for tag in records if tag in tags) == tags


def test_a_dead_processs_runs_spread_over_the_live_workers(
    start_worker: Callable[..., WorkerProcess],
    make_database_url: Callable[..., str],
    model: Model,
    server: FakeOpenAIServer,
    work_dir: Path,
    tmp_path: Path,
) -> None:
    # A plain DurableSwarm process (no queue: its runs are an app's own) starts 36 runs, each
    # held in its second model call, and is SIGKILLed. Three workers of 3 slots each are up.
    # Its runs go back on the recovery queue, and each worker takes only its free slots: each
    # finishes a share of them (the recovered call takes 1 s, so no worker can empty the queue
    # alone), where DBOS's internal queue gave all of them to the first worker that looked.
    tags = [f"sp{i}" for i in range(36)]
    url = make_database_url("spread")
    settings = {**_quick_workers(url), "concurrency": 3}
    workers = [start_worker(name, executor_id=f"worker-{name}", **settings) for name in "xyz"]
    for worker in workers:
        worker.wait_ready()
    env = {"DSW_FAKE_URL": server.base_url, "DSW_WORK_DIR": str(work_dir)}
    with procs.script_processes(tmp_path, env) as start:
        config = {"database_url": url, "executor_id": "plain-app", "tags": tags}
        starter = start("starter", HERE / "_starter.py", {**config, "command": "spread"})
        wait_for(
            lambda: all(model.arrivals("spread", tag, 1) == 1 for tag in tags),
            "every run's second model call in flight",
            workers=(starter, *workers),
        )
        starter.kill()
    with DurableClient(url) as client:
        runs = client._dbos.list_workflows(name=WORKFLOW_NAME)
        wait_for(
            lambda: all(
                r.status == "SUCCESS"
                for r in client._dbos.list_workflows(workflow_ids=[r.workflow_id for r in runs])
            ),
            "the workers to finish the dead process's runs",
            workers=tuple(workers),
        )
        finished = client._dbos.list_workflows(workflow_ids=[r.workflow_id for r in runs])
    assert len(finished) == len(tags)
    shares = Counter(r.executor_id for r in finished)
    assert set(shares) == {"worker-x", "worker-y", "worker-z"}, shares
    assert max(shares.values()) <= len(tags) // 2, shares
    for tag in tags:
        assert model.arrivals("spread", tag, 0) == 1  # finished before the kill: never again
        assert model.arrivals("spread", tag, 1) == 2  # in flight at the kill: sent once more
    records = [line.split()[0] for line in tool_lines(work_dir, "record")]
    assert sorted(t for t in records if t in tags) == sorted(tags)
    for worker in workers:
        assert worker.terminate() == 0
