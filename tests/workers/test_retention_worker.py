"""A real `durable-swarm worker` process applies its `--retention` policy in the background, on
SQLite and PostgreSQL: finished runs go once past their age (by the real clock), runs waiting for
a person stay whatever their age, a sub-agent run goes with its parent and never before, each
batch is logged; `/metrics`, the console's Retention page and `durable-swarm retention show`
tell what was deleted and which policy the worker applies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from durable_swarm import RunNotFoundError
from durable_swarm.cli import main
from durable_swarm.durable import DurableClient
from durable_swarm.testing import FakeOpenAIServer

from .conftest import HERE, TIMEOUT, wait_for

QUEUE = "retention"
POLICY = "succeeded=2s,cancelled=2s"


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


@pytest.fixture
def worker(
    make_database_url: Callable[..., str], server: FakeOpenAIServer, work_dir: Path
) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    url = make_database_url("retention")
    log = work_dir / f"retention-worker-{time.monotonic_ns()}.log"
    env = {
        **os.environ,
        "DSW_FAKE_URL": server.base_url,
        "DSW_WORK_DIR": str(work_dir),
        "DURABLE_SWARM_LOG_LEVEL": "ERROR",
    }
    env.pop("DURABLE_SWARM_RETENTION", None)
    command = [
        sys.executable, "-m", "durable_swarm", "worker", "_app:swarm", "--queue", QUEUE,
        "--database-url", url, "--poll-interval", "0.1", "--retention", POLICY,
        "--retention-interval", "0.3s", "--retention-batch-size", "2",
    ]  # fmt: skip
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        wait_for(lambda: "serving queue" in log.read_text() or process.poll() is not None,
                 "the worker to start")  # fmt: skip
        assert process.poll() is None, log.read_text()
        yield url, process, log
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _gone(client: DurableClient, run_id: str) -> bool:
    try:
        client.get_run(run_id)
    except RunNotFoundError:
        return True
    return False


def _status(client: DurableClient, run_id: str) -> str | None:
    """The run's status (None: it does not exist yet, as a sub-agent run before its parent
    started it)."""
    try:
        return client.get_run(run_id).status
    except RunNotFoundError:
        return None


def test_a_worker_applies_its_retention_policy_in_the_background(
    worker: tuple[str, subprocess.Popen[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, process, log = worker
    assert (
        "retention: deletes succeeded after 2s, cancelled after 2s; keeps failed runs for good "
        "(batches of 2, every 0.3 s)" in log.read_text()
    )
    with DurableClient(url) as client:
        echoes = [client.start("Helper", user(f"echo {n}"), queue=QUEUE) for n in range(3)]
        asking = client.start("Helper", user("ask a"), queue=QUEUE).run_id
        parent = client.start("Helper", user("delegate b"), queue=QUEUE).run_id
        cancelled = client.start("Helper", user("ask c"), queue=QUEUE).run_id
        child = f"{parent}-sub1"
        for handle in echoes:
            assert handle.result(timeout=TIMEOUT).messages[-1]["content"].startswith("echo:")
        for run_id in (asking, child, cancelled):
            wait_for(lambda r=run_id: _status(client, r) == "waiting_for_input", f"{run_id} waits")
        client.cancel(cancelled)
        finished = time.monotonic()
        done = [h.run_id for h in echoes] + [cancelled]
        wait_for(lambda: all(_gone(client, r) for r in done), "the finished runs to go")
        assert time.monotonic() - finished > 1.0  # not before their age (2 s from finishing)
        # Runs waiting for a person stay, older than the age as they are.
        time.sleep(1.0)
        assert _status(client, asking) == "waiting_for_input"
        assert _status(client, parent) == "pending" and _status(client, child) == (
            "waiting_for_input"
        )

        client.send_input(asking, "Ada")
        client.send_input(child, "Grace")
        wait_for(lambda: _gone(client, asking), "the answered run to go once past its age")
        deadline = time.monotonic() + TIMEOUT
        while not _gone(client, child):  # the sub-agent run never goes before its parent
            assert time.monotonic() < deadline, "the sub-agent run never went"
            time.sleep(0.02)
        assert _gone(client, parent), "the sub-agent run went before its parent"
        status = client.retention_status()
        assert status.deleted == {"succeeded": 6, "failed": 0, "cancelled": 1}
        (sweeper,) = status.sweepers
        assert sweeper.policy == "succeeded=2s,cancelled=2s,batch_size=2,interval=0.3s"

        pytest.importorskip("fastapi", reason="the console needs the 'web' extra")
        from fastapi.testclient import TestClient

        from durable_swarm.web import create_app

        with TestClient(create_app(client)) as http:
            metrics = http.get("/metrics").text
            page = http.get("/retention").text
            api = http.get("/api/retention").json()
    deleted = {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "durable_swarm_retention_deleted_runs"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert deleted == {"succeeded": 6.0, "failed": 0.0, "cancelled": 1.0}
    assert "durable_swarm_retention_last_sweep_timestamp_seconds{executor_id=" in metrics
    assert "deletes succeeded after 2s, cancelled after 2s" in page
    assert api["deleted"] == {"succeeded": 6, "failed": 0, "cancelled": 1}
    assert api["policies"] == [sweeper.policy]

    output = log.read_text()
    assert process.poll() is None, output  # the worker serves on
    batches = [line for line in output.splitlines() if "retention: deleted" in line]
    assert batches and all(
        line.startswith("durable-swarm worker: retention: deleted") for line in batches
    )
    # Batches of at most 2 runs (each line lists its batch's runs; a parent's sub-agent runs
    # count in its batch's figures, not as runs of their own).
    listed = [line.rsplit(": ", 1)[1].split(", ") for line in batches]
    assert all(1 <= len(ids) <= 2 for ids in listed), batches

    assert main(["retention", "show", "--database-url", url]) == 0
    shown = capsys.readouterr().out
    assert "policy: deletes succeeded after 2s, cancelled after 2s" in shown
    assert f"process {sweeper.executor_id}: seen" in shown
    assert "deleted so far: 6 succeeded, 0 failed, 1 cancelled" in shown
    assert "Due now (0 runs):" in shown
