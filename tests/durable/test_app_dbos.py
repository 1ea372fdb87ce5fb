"""An app that configures and launches DBOS itself uses durable-swarm in the same process and
database (docs/guides/dbos.md), on SQLite and PostgreSQL.

DBOS is one per process, so each case runs the app (`_app_dbos.py`) in a process of its own,
against a fake model server in this process, which counts the model calls across processes;
the app's step and the agent's tool count theirs in files.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_swarm.testing import FakeOpenAIServer, Reply, ToolCall, calls, text

from ._harness import CHILD_TIMEOUT

APP = Path(__file__).with_name("_app_dbos.py")
FINAL = "All done."


class Model:
    """The agent calls its tool `gate` once, then answers: counts the calls of each stage."""

    def __init__(self) -> None:
        self.calls: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply:
        stage = sum(1 for m in messages if m.get("role") == "tool")
        with self._lock:
            self.calls[stage] += 1
        return calls(ToolCall("gate")) if stage == 0 else text(FINAL)


@pytest.fixture
def app_url(make_database_url: Callable[[str], str], backend: str, run_id: str) -> str:
    """A fresh database for this test, as the app's own DBOS config spells it."""
    url = make_database_url("app" + run_id[-8:])
    return url if backend == "postgres" else "sqlite:///" + url


@pytest.fixture
def model() -> Iterator[tuple[Model, FakeOpenAIServer]]:
    script = Model()
    with FakeOpenAIServer(script) as server:
        yield script, server


def app_args(mode: str, url: str, work: Path, server: FakeOpenAIServer, *extra: str) -> list[str]:
    return [sys.executable, str(APP), mode, url, str(work), server.base_url, *extra]


def run_app(
    mode: str, url: str, work: Path, server: FakeOpenAIServer, *extra: str, **env: str
) -> Any:
    """Run the app to its end (with `env` added to the environment); returns the JSON it
    printed, or (if it failed and `env` has `EXPECT_FAILURE`) its stderr."""
    done = subprocess.run(
        app_args(mode, url, work, server, *extra),
        capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False, cwd=work,
        env={**os.environ, **env},
    )  # fmt: skip
    if env.get("EXPECT_FAILURE"):
        assert done.returncode != 0, done.stdout[-4000:]
        return done.stderr
    assert done.returncode == 0, done.stderr[-4000:]
    # everything in the app's database: no default run database beside it
    assert not (work / "durable_swarm.sqlite").exists()
    return json.loads(done.stdout.strip().splitlines()[-1])


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_runs_live_beside_the_apps_workflows_and_queue(app_url, model, tmp_path):
    script, server = model
    (tmp_path / "open").touch()
    seen = run_app("beside", app_url, tmp_path, server)
    assert seen["ran"] == seen["started"] == FINAL
    assert seen["queued"] == [0, 2, 4] and seen["direct"] == 20 and seen["later"] == 40
    flows = seen["workflows"]
    # the runs are in the app's database, with the app's version and executor id
    for run in ("ran", "started"):
        assert flows[run]["name"] == "durable_swarm.run" and flows[run]["status"] == "SUCCESS"
        assert flows[run]["version"] == "my-app-1"
        assert flows[run]["executor"] == "my-app-host-1"
    app_runs = [w for w in flows.values() if w["name"] == "app_double"]
    assert len(app_runs) == 5 and all(w["status"] == "SUCCESS" for w in app_runs)
    assert sum(w["queue"] == "app_queue" for w in app_runs) == 4
    assert script.calls == Counter({0: 2, 1: 2})
    # the two runs' tools (which may overlap) each ran once
    assert Counter(lines(tmp_path / "gate.log")) == Counter({"started": 2, "done": 2})


@pytest.mark.parametrize("given_id", [True, False], ids=["run_id", "no-run_id"])
def test_a_run_inside_an_app_workflow_is_its_child(app_url, model, tmp_path, given_id):
    script, server = model
    (tmp_path / "open").touch()
    extra = ("agent-run",) if given_id else ()
    seen = run_app("inside", app_url, tmp_path, server, *extra)
    assert seen["result"] == {"before": 2, "after": 4, "reply": FINAL}
    runs = {k: w for k, w in seen["workflows"].items() if w["name"] == "durable_swarm.run"}
    assert len(runs) == 1
    [(run, status)] = runs.items()
    assert status["parent"] == "app-wf" and status["status"] == "SUCCESS"
    if given_id:
        assert run == "agent-run"
    else:  # the new run's id is a step of the app's workflow (its replay names the same run)
        assert ["durable_swarm.new_run_id", None, run] in seen["steps"]
    assert ["durable_swarm.run", run, None] in seen["steps"]
    assert script.calls == Counter({0: 1, 1: 1})


@pytest.mark.crash
@pytest.mark.parametrize("given_id", [True, False], ids=["run_id", "no-run_id"])
def test_an_app_killed_during_a_tool_recovers_its_workflow_and_the_run(
    app_url, model, tmp_path, given_id
):
    script, server = model
    extra = ("agent-run",) if given_id else ()
    first = subprocess.Popen(
        app_args("inside", app_url, tmp_path, server, *extra),
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "first.err").open("w"), cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT
        while "started" not in lines(tmp_path / "gate.log"):
            assert first.poll() is None, (tmp_path / "first.err").read_text()[-4000:]
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.05)
    finally:
        first.kill()  # SIGKILL: mid-tool
        first.wait()
    (tmp_path / "open").touch()
    # the same app again (same executor id and application version): DBOS recovers app-wf
    seen = run_app("recover", app_url, tmp_path, server, *extra)
    assert seen["result"] == {"before": 2, "after": 4, "reply": FINAL}
    runs = {k: w for k, w in seen["workflows"].items() if w["name"] == "durable_swarm.run"}
    assert len(runs) == 1 and next(iter(runs.values()))["parent"] == "app-wf"
    # each finished call once: the model call that asked for the tool, the app's first step;
    # the tool that was killed ran again (it never finished), then the rest once
    assert script.calls == Counter({0: 1, 1: 1})
    assert lines(tmp_path / "gate.log") == ["started", "started", "done"]
    assert lines(tmp_path / "app_step.log") == ["1", "2"]


def test_a_worker_serves_the_librarys_queue_beside_the_apps_queue(app_url, model, tmp_path):
    """The app enqueues a run for durable-swarm's workers (`DurableClient.start(queue=...)`) and
    work on its own queue: a worker process on the app's database serves the one, the app the
    other. (The app's DBOS does not take the worker's runs: they are of the library's
    application version, not the app's.)"""
    script, server = model
    env = {**os.environ, "APP_MODEL_BASE_URL": server.base_url}
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("durable-swarm")), "worker", "_app_agents:client",
         "--queue", "agents", "--database-url", app_url, "--poll-interval", "0.1"],
        cwd=APP.parent, env=env, stdout=(tmp_path / "worker.out").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        seen = run_app("client", app_url, tmp_path, server)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(CHILD_TIMEOUT) == 0, (tmp_path / "worker.out").read_text()[-4000:]
    assert seen["queued"] == [0, 2, 4] and seen["worker"] == FINAL
    app_runs = [w for w in seen["workflows"].values() if w["name"] == "app_double"]
    assert len(app_runs) == 3 and all(w["executor"] == "my-app-host-1" for w in app_runs)
    assert "run queued-run succeeded" in (tmp_path / "worker.out").read_text()
    assert script.calls == Counter({0: 1, 1: 1})


def test_encryption_at_rest_needs_the_librarys_serializer_in_the_apps_dbos(
    app_url, model, tmp_path
):
    """The guide: with an encryption key, the app's DBOS needs durable-swarm's serializer; runs
    are refused without it rather than stored unencrypted."""
    script, server = model
    (tmp_path / "open").touch()
    secret = f"app:{base64.b64encode(os.urandom(32)).decode()}"
    keyed = {"DURABLE_SWARM_ENCRYPTION_KEY": secret}
    refused = run_app("beside", app_url, tmp_path, server, **keyed, EXPECT_FAILURE="1")
    assert "JsonSerializer()" in refused and "DurableSwarmError" in refused
    assert sum(script.calls.values()) == 0  # nothing ran
    seen = run_app("beside", app_url, tmp_path, server, **keyed, APP_JSON_SERIALIZER="1")
    assert seen["ran"] == seen["started"] == FINAL and seen["later"] == 40
    # the CLI reads the sealed run with the key
    env = {**os.environ, **keyed}
    cli = [str(Path(sys.executable).with_name("durable-swarm")), "runs", "show", "ran", "--json"]
    shown = subprocess.run(
        [*cli, "--database-url", app_url],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False, env=env,
    )  # fmt: skip
    assert shown.returncode == 0 and FINAL in shown.stdout, shown.stderr[-3000:]
