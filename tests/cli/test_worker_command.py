"""`durable-swarm worker`: serves a queue for thin clients, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_swarm.cli import main
from durable_swarm.durable import DurableClient
from durable_swarm.testing import FakeOpenAIServer, text

APP_DIR = Path(__file__).resolve().parents[1] / "workers"  # holds _app.py (agents Helper, Closer)
COMMAND = [sys.executable, "-m", "durable_swarm"]


def _answer(messages: list[dict[str, Any]], tools: Any) -> Any:
    return text(f"served: {messages[-1]['content']}")


def test_worker_command_serves_a_queue_for_a_thin_client(tmp_path: Path) -> None:
    database = str(tmp_path / "runs.sqlite")
    with FakeOpenAIServer(_answer) as server:
        env = {
            **os.environ,
            "DSW_FAKE_URL": server.base_url,
            "DSW_WORK_DIR": str(tmp_path),
            "DURABLE_SWARM_LOG_LEVEL": "ERROR",
        }
        worker = subprocess.Popen(
            [
                *COMMAND,
                "worker",
                "_app:swarm",
                "--queue",
                "cli-q",
                "--database-url",
                database,
                "--poll-interval",
                "0.25",
            ],
            cwd=APP_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert worker.stdout is not None
            banner = worker.stdout.readline()
            assert "serving queue 'cli-q'" in banner, banner
            assert "polling every 0.25 s when idle" in banner, banner
            with DurableClient(database) as client:
                handle = client.start("Helper", [{"role": "user", "content": "hi"}], queue="cli-q")
                response = handle.result(timeout=60)
            assert response.messages[-1]["content"] == "served: hi"
            assert response.agent == "Helper"
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_worker_command_rejects_a_poll_interval_that_is_not_a_positive_number() -> None:
    for bad in ("0", "-1", "soon"):
        result = subprocess.run(
            [*COMMAND, "worker", "_app:swarm", "--poll-interval", bad],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2
        assert "--poll-interval" in result.stderr and repr(bad) in result.stderr, result.stderr


def test_worker_command_rejects_a_negative_or_wordy_shutdown_grace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SystemExit) as exited:
            main(["worker", "_app:swarm", "--shutdown-grace", bad])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--shutdown-grace" in err and repr(bad) in err, err


def test_worker_command_reports_a_bad_limit_before_it_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = str(tmp_path / "never.sqlite")
    argv = ["worker", "_app:swarm", "--database-url", url, "--limit", "*:concurrent=2"]
    assert main([*argv, "--limit", "gpt-4o:rpm=fast"]) == 1
    err = capsys.readouterr().err
    assert "'rpm=fast' in 'gpt-4o:rpm=fast' is not rpm=N" in err, err
    assert not Path(url).exists()  # nothing was launched


def test_worker_command_reports_a_bad_target(tmp_path: Path) -> None:
    result = subprocess.run(
        [*COMMAND, "worker", "no_such_module_here", "--database-url", str(tmp_path / "x.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Cannot import module 'no_such_module_here'" in result.stderr
    assert "Traceback" not in result.stderr


GOES_ON = """
import os, signal, sys, threading, time
from durable_swarm.durable import run_worker

threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
run_worker("_app:swarm", queue="on-q", database_url=sys.argv[1], shutdown_grace=1.0)
time.sleep(3.0)  # well past the grace: the program goes on after the worker stopped
print("still here", flush=True)
"""


def test_a_program_that_goes_on_after_run_worker_returns_is_not_ended_by_the_grace(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DSW_FAKE_URL": "http://127.0.0.1:9/v1", "DSW_WORK_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", GOES_ON, str(tmp_path / "runs.sqlite")],
        cwd=APP_DIR, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "still here" in result.stdout and "did not finish" not in result.stdout, result.stdout


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", True])
def test_run_worker_rejects_a_shutdown_grace_that_is_not_seconds(bad: Any) -> None:
    from durable_swarm.durable import run_worker
    from durable_swarm.errors import DurableSwarmError

    with pytest.raises(DurableSwarmError, match="shutdown_grace must be a number of seconds"):
        run_worker("_app:swarm", shutdown_grace=bad)
