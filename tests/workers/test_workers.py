"""A worker process serves runs that thin clients in other processes start by agent name.

One worker (`_app:swarm`, concurrency 2) serves the queue `main` for the whole module; the test
process is the thin client (it never imports `_app`), and one test runs the client in a process
of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from durable_swarm import DurableSwarmError, RunNotFoundError
from durable_swarm.durable import DurableClient
from durable_swarm.testing import FakeOpenAIServer

from .conftest import HERE, TIMEOUT, Model, WorkerProcess, tool_lines, wait_for

QUEUE = "main"
CONCURRENCY = 2


@pytest.fixture(scope="module")
def database_url(make_database_url: Callable[..., str]) -> str:
    return make_database_url("main")


@pytest.fixture(scope="module")
def worker(start_worker: Callable[..., WorkerProcess], database_url: str) -> WorkerProcess:
    """The module's worker, started on a database that does not exist yet (it creates it)."""
    return start_worker(
        "w1",
        database_url=database_url,
        queue=QUEUE,
        concurrency=CONCURRENCY,
        heartbeat_interval=0.5,
        poll_interval=0.1,
    ).wait_ready()


@pytest.fixture(scope="module")
def client(worker: WorkerProcess, database_url: str) -> Iterator[DurableClient]:
    with DurableClient(database_url) as thin:
        yield thin


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def test_the_startup_line_says_where_and_what(worker: WorkerProcess, database_url: str) -> None:
    line = next(x for x in worker.output().splitlines() if "serving queue" in x)
    assert f"serving queue {QUEUE!r}" in line
    assert f"concurrency {CONCURRENCY}" in line
    assert "as executor 'worker-" in line
    assert "agents: Asker, Closer, Helper" in line
    shown = database_url.removeprefix("sqlite:///")
    assert shown in line


def test_a_client_starts_a_run_by_agent_name_and_reads_its_result(
    client: DurableClient, work_dir: Path
) -> None:
    handle = client.start("Helper", user("handoff a1"), {"customer": "ada"}, queue=QUEUE)
    response = handle.result(timeout=TIMEOUT)
    assert response.agent == "Closer"  # the agent's name: the client has no agent objects
    assert response.context_variables == {"customer": "ada"}
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.messages[-1]["content"] == "closed a1"
    assert response.messages[-1]["sender"] == "Closer"
    info = client.get_run(handle.run_id)
    assert info.status == "succeeded"
    assert info.agent == "Closer"
    assert [(s.kind, s.name) for s in info.steps if s.kind in ("model", "tool")] == [
        ("model", "Helper"),
        ("tool", "transfer_to_closer"),
        ("model", "Closer"),
    ]
    assert info.messages[0] == {"role": "user", "content": "handoff a1"}
    assert str(os.getpid()) not in tool_lines(work_dir, "imported")


def test_a_client_reads_the_event_stream_of_a_streamed_run(client: DurableClient) -> None:
    handle = client.start("Helper", user("echo streamed words"), queue=QUEUE, stream=True)
    events = list(handle.events())
    assert events[0] == {"delim": "start"}
    assert {"delim": "end"} in events
    streamed = "".join(e.get("content") or "" for e in events if "content" in e)
    assert streamed == "echo: streamed words"
    response = events[-1]["response"]
    assert response.messages[-1]["content"] == "echo: streamed words"
    assert response.agent == "Helper"


def test_run_ids_attach_instead_of_running_twice(client: DurableClient, model: Model) -> None:
    run_id = f"attach-{time.time_ns()}"
    first = client.start("Helper", user("echo once"), queue=QUEUE, run_id=run_id).result(
        timeout=TIMEOUT
    )
    again = client.start("Helper", user("echo twice"), queue=QUEUE, run_id=run_id)
    assert again.run_id == run_id
    assert again.result(timeout=TIMEOUT).messages == first.messages
    assert model.arrivals("echo", "twice", 0) == 0


def test_attaching_to_a_resumed_run_enqueues_nothing(client: DurableClient) -> None:
    """A resumed run sits on DBOS's internal queue: starting its id again attaches without
    asking DBOS to enqueue it on another queue (which DBOS refuses with a warning)."""
    run_id = f"resumed-{time.time_ns()}"
    client.start("Helper", user("ask r1"), queue=QUEUE, run_id=run_id)
    wait_for(lambda: client.get_run(run_id).waiting_for, "the run to ask its question")
    client.cancel(run_id)
    client.resume(run_id)
    wait_for(lambda: client.get_run(run_id).waiting_for, "the resumed run to ask again")
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("dbos").addHandler(handler)
    try:
        again = client.start("Helper", user("ask r2"), queue=QUEUE, run_id=run_id)
    finally:
        logging.getLogger("dbos").removeHandler(handler)
    assert again.run_id == run_id
    assert warnings == []
    client.send_input(run_id, "Ada")
    assert again.result(timeout=TIMEOUT).messages[-1]["content"] == "ask: Ada"
    assert client.get_run(run_id).messages[0] == {"role": "user", "content": "ask r1"}


def test_a_client_answers_a_question_and_approves_a_tool_call(
    client: DurableClient, work_dir: Path
) -> None:
    asking = client.start("Helper", user("ask b1"), queue=QUEUE)
    refunding = client.start("Helper", user("refund b2"), queue=QUEUE)
    waiting = wait_for(
        lambda: client.get_run(asking.run_id).waiting_for, "the run to ask its question"
    )
    assert waiting["prompt"] == "What is your name?"
    with pytest.raises(DurableSwarmError, match="not waiting for approval"):
        client.approve(asking.run_id, "call_x")
    client.send_input(asking.run_id, "Ada", by="tester")
    assert asking.result(timeout=TIMEOUT).messages[-1]["content"] == "ask: Ada"

    waiting = wait_for(lambda: client.get_run(refunding.run_id).waiting_for, "the approval wait")
    assert client.get_run(refunding.run_id).status == "waiting_for_approval"
    call_id = waiting["tool_call"]["id"]
    with pytest.raises(DurableSwarmError, match="not 'call_other'"):
        client.approve(refunding.run_id, "call_other")
    client.approve(refunding.run_id, call_id, by="tester")
    assert refunding.result(timeout=TIMEOUT).messages[-1]["content"] == "refund: refunded 5"
    assert tool_lines(work_dir, "refund") == ["5"]
    assert client.get_run(refunding.run_id).decisions[0]["by"] == "tester"


def test_the_worker_runs_at_most_its_concurrency_at_once(
    client: DurableClient, server: FakeOpenAIServer, model: Model
) -> None:
    server.reset()
    handles = [client.start("Helper", user(f"slow c{i}"), queue=QUEUE) for i in range(6)]
    answers = [h.result(timeout=TIMEOUT).messages[-1]["content"] for h in handles]
    assert answers == [f"slow c{i}" for i in range(6)]
    assert server.stats["max_in_flight"] == CONCURRENCY  # several at once, never more


def test_a_thin_client_in_a_process_of_its_own_imports_no_agent_code(
    worker: WorkerProcess, database_url: str, work_dir: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "_thin_client.py"), database_url, QUEUE],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["app_imported"] is False
    assert result["status"] == "succeeded"
    assert result["agent"] == "Helper"
    assert result["messages"][-1]["content"] == "echo: from a thin client"
    assert "".join(e.get("content") or "" for e in result["events"]) == "echo: from a thin client"
    assert tool_lines(work_dir, "imported") == [str(worker.proc.pid)]  # only the worker


def test_unknown_run_ids_are_reported(client: DurableClient) -> None:
    for call in (
        client.get_run,
        client.handle,
        client.cancel,
        lambda run_id: client.send_input(run_id, "hi"),
        lambda run_id: client.approve(run_id, "call_1"),
    ):
        with pytest.raises(RunNotFoundError, match="no-such-run"):
            call("no-such-run")


def test_bad_arguments_start_nothing(client: DurableClient) -> None:
    with pytest.raises(DurableSwarmError, match="agent's name"):
        client.start(None, user("echo x"), queue=QUEUE)  # type: ignore[arg-type]
    with pytest.raises(DurableSwarmError, match="list of message dicts"):
        client.start("Helper", "echo x", queue=QUEUE)  # type: ignore[arg-type]


def test_a_run_of_an_unknown_agent_waits_and_can_be_cancelled(
    client: DurableClient, worker: WorkerProcess
) -> None:
    # Last in the module: a run waiting for its agent's code holds a slot of the worker.
    handle = client.start("Nobody", user("echo lost"), queue=QUEUE)
    wait_for(lambda: "Agent 'Nobody' is needed" in worker.output(), "the worker to report it")
    assert "Import the module that defines" in worker.output()
    info = client.get_run(handle.run_id)
    assert info.status == "pending"
    assert info.agent == "Nobody"
    with pytest.raises(TimeoutError, match="did not finish"):
        handle.result(timeout=0.3)
    client.cancel(handle.run_id)
    assert client.get_run(handle.run_id).status == "cancelled"


def test_sigterm_stops_the_worker_cleanly(worker: WorkerProcess, database_url: str) -> None:
    assert worker.terminate() == 0
    assert "stopped" in worker.output().splitlines()[-1]
