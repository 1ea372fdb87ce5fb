"""What operations do every day: a deploy (SIGTERM while a tool runs, with another worker ready
to take over), and two processes started under one fixed executor id. A step never runs in two
processes at the same moment, and a finished step never runs again."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from durable_swarm.durable import DurableClient

from .conftest import TIMEOUT, Model, Proc, overlaps, starts, wait_for, worker_settings

BEAT, DEAD = 0.3, 2.0
QUEUE = "deploys"


def _in_tool(client: DurableClient, work_dir: Path, tag: str, procs: tuple[Proc, ...]) -> str:
    """Start a run that stays in its tool (until its hold file goes); its id once it is."""
    (work_dir / f"hold-{tag}").touch()
    run_id = client.start("Stepper", [{"role": "user", "content": f"step {tag}"}], queue=QUEUE)
    wait_for(lambda: starts(work_dir, tag) == 1, f"{tag} in its tool", procs=procs)
    return run_id.run_id


def test_a_deploy_lets_the_step_in_flight_finish_before_another_worker_takes_the_run(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("deploy")
    settings = worker_settings(url, QUEUE, BEAT, DEAD)
    old = start("old", "_serve.py", shutdown_grace=60.0, **settings).wait_output("serving queue")
    with DurableClient(url) as client:
        run_id = _in_tool(client, work_dir, "t1", (old,))
        new = start("new", "_serve.py", **settings).wait_output("serving queue")
        old.signal(signal.SIGTERM)
        # Marked stopped at once (as before), the new worker took the run within a second.
        time.sleep(3 * DEAD)  # the fault's window, not a check of speed
        assert old.poll() is None, old.output()  # still finishing its step
        assert starts(work_dir, "t1") == 1
        (work_dir / "hold-t1").unlink()
        assert old.proc.wait(timeout=TIMEOUT) == 0, old.output()
        answer = client.handle(run_id).result(timeout=TIMEOUT)
        assert answer.messages[-1]["content"] == "done t1"
        assert client._dbos.list_workflows(workflow_ids=[run_id])[0].executor_id != "old"
    assert starts(work_dir, "t1") == 1  # recorded by the stopping worker: never again
    assert model.arrivals("t1", 0) == 1 and model.arrivals("t1", 1) == 1
    assert overlaps(work_dir) == []
    assert new.poll() is None


def test_a_deploy_whose_grace_runs_out_hands_the_run_over_only_once_the_process_is_gone(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("grace")
    settings = worker_settings(url, QUEUE, BEAT, DEAD)
    old = start("old", "_serve.py", shutdown_grace=2.0, **settings).wait_output("serving queue")
    with DurableClient(url) as client:
        run_id = _in_tool(client, work_dir, "t2", (old,))
        start("new", "_serve.py", **settings).wait_output("serving queue")
        old.signal(signal.SIGTERM)
        assert old.proc.wait(timeout=TIMEOUT) == 1
        said = [line for line in old.output().splitlines() if "within 2 s" in line]
        assert len(said) == 1 and run_id in said[0] and "tool:step" in said[0], old.output()
        wait_for(lambda: starts(work_dir, "t2") == 2, "the new worker to run the tool again")
        (work_dir / "hold-t2").unlink()
        answer = client.handle(run_id).result(timeout=TIMEOUT)
        assert answer.messages[-1]["content"] == "done t2"
    # The old worker's tool ticked until it was killed; the new one started after that.
    assert overlaps(work_dir) == []
    assert model.arrivals("t2", 0) == 1


def test_a_second_process_under_a_live_executor_id_refuses_to_start(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("one-id")
    settings = {**worker_settings(url, QUEUE, BEAT, DEAD), "executor_id": "fixed"}
    first = start("first", "_serve.py", **settings).wait_output("serving queue")
    second = start("second", "_serve.py", **settings)
    assert second.proc.wait(timeout=TIMEOUT) != 0
    said = second.output()
    assert "Executor id 'fixed' is in use by a live process" in said, said
    assert f"host {socket.gethostname()!r}, pid {first.pid}" in said, said
    assert "last heartbeat" in said and "fresh" in said
    assert first.poll() is None

    fresh = start("fresh", "_serve.py", on_executor_id_taken="fresh", **settings)
    fresh.wait_output("serving queue")
    assert "as executor 'fixed-" in fresh.output(), fresh.output()
    waiting = start("waiting", "_serve.py", on_executor_id_taken="wait", **settings)
    with DurableClient(url) as client:
        runs = [
            client.start("Stepper", [{"role": "user", "content": f"step w{i}"}], queue=QUEUE)
            for i in range(4)
        ]
        assert [r.result(timeout=TIMEOUT).messages[-1]["content"] for r in runs] == [
            f"done w{i}" for i in range(4)
        ]
        time.sleep(3 * DEAD)  # the fault's window: a waiting process must not start meanwhile
        assert "serving queue" not in waiting.output(), waiting.output()
        assert first.terminate() == 0  # a clean stop hands the id over at once
        waiting.wait_output("serving queue")
        assert "as executor 'fixed'" in waiting.output()
        more = client.start("Stepper", [{"role": "user", "content": "step w9"}], queue=QUEUE)
        assert more.result(timeout=TIMEOUT).messages[-1]["content"] == "done w9"
    assert all(starts(work_dir, f"w{i}") == 1 for i in (0, 1, 2, 3, 9))
    assert overlaps(work_dir) == []


def test_a_restart_under_the_id_of_a_killed_process_starts_at_once_and_finishes_its_runs(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    """The holder is gone from this machine (its pid checked): no wait for its heartbeat."""
    url = make_database_url("restart")
    settings = {**worker_settings(url, QUEUE, BEAT, 600.0), "executor_id": "pinned"}
    first = start("first", "_serve.py", **settings).wait_output("serving queue")
    with DurableClient(url) as client:
        run_id = _in_tool(client, work_dir, "r1", (first,))
        first.kill()
        (work_dir / "hold-r1").unlink()
        again = start("again", "_serve.py", **settings)
        # dead_after is 600 s: only the pid check lets it start (and finish the run) before
        assert client.handle(run_id).result(timeout=TIMEOUT).messages[-1]["content"] == "done r1"
        assert "as executor 'pinned'" in again.output()
    assert starts(work_dir, "r1") == 2  # killed inside the tool: it ran again, after the kill
    assert overlaps(work_dir) == []
