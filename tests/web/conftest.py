"""Fixtures of the console tests: a host process running the agents, and `durable-swarm serve`
processes (one open, one with a token) answering about the same database, per backend."""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _support.procs import wait_for

HERE = Path(__file__).resolve().parent
TOKEN = "s3cret-console-token"
_ids = itertools.count(1)


def _env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DURABLE_SWARM_DATABASE", "DBOS_"))
    }
    env.pop("DURABLE_SWARM_TOKEN", None)
    return env


class Child:
    """A child process whose output goes to a log file (read when it fails)."""

    def __init__(self, name: str, argv: list[str], log: Path, **popen: Any) -> None:
        self.name, self.log = name, log
        self._file = log.open("w")
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE if popen.pop("pipe", False) else self._file,
            stderr=self._file, text=True, env=_env(), **popen,
        )  # fmt: skip

    def poll(self) -> int | None:
        return self.process.poll()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._file.close()


class Host(Child):
    """`_host.py`: runs the agents; `start(prefix)` starts one batch of runs (see _host.py)."""

    def __init__(self, url: str, log: Path) -> None:
        super().__init__(
            "host", [sys.executable, str(HERE / "_host.py"), url], log, pipe=True,
            stdin=subprocess.PIPE, cwd=str(HERE),
        )  # fmt: skip
        self._expect("ready")

    def _expect(self, line: str) -> None:
        assert self.process.stdout is not None
        got = self.process.stdout.readline().strip()
        assert got == line, f"host said {got!r}, not {line!r}:\n{self.output()[-4000:]}"

    def start(self, within: str = "") -> str:
        """Start a batch; its prefix begins with `within` (which may hold "/")."""
        prefix = f"{within}w{next(_ids)}-{uuid.uuid4().hex[:6]}"
        assert self.process.stdin is not None
        self.process.stdin.write(prefix + "\n")
        self.process.stdin.flush()
        self._expect(f"started {prefix}")
        return prefix

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        super().stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(url: str, *args: str) -> list[str]:
    """`durable-swarm serve` on `url` (as the installed command runs it)."""
    return [sys.executable, "-m", "durable_swarm", "serve", "--database-url", url, *args]


class Console(Child):
    """A `durable-swarm serve` process; `http` is an httpx client on it."""

    def __init__(
        self, url: str, log: Path, token: str | None = None, *extra: str, made: bool = False
    ) -> None:
        """`token` None: `--no-token`, unless `made` (then `serve` makes one: see `link`)."""
        self.port = free_port()
        args = ["--port", str(self.port), *(["--token", token] if token else [])]
        args += ([] if token or made else ["--no-token"]) + list(extra)
        super().__init__("console", serve_argv(url, *args), log)
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.base, timeout=60)
        wait_for(self._up, "the console to answer", processes=[self])

    def _up(self) -> bool:
        try:
            self.http.get("/static/app.css")
        except httpx.TransportError:
            return False
        return True

    def link(self) -> str:
        """The link with the token `serve` made and printed (`made=True`)."""
        found = re.search(r"(http://\S+/\?token=\S+)", self.output())
        assert found, f"no link in the console's output:\n{self.output()}"
        return found.group(1)

    def stop(self) -> None:
        self.http.close()
        super().stop()


@pytest.fixture(scope="module")
def host(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """The process running the agents on this module's database."""
    url = database_url if "://" in database_url else f"sqlite:///{database_url}"
    child = Host(url, tmp_path_factory.mktemp("host") / "host.log")
    yield child
    child.stop()


@pytest.fixture(scope="module")
def db_url(database_url: str, host: Host) -> str:
    """This module's database URL (it exists: the host created it)."""
    return database_url if "://" in database_url else f"sqlite:///{database_url}"


@pytest.fixture(scope="module")
def console(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`durable-swarm serve` without a token, on this module's database."""
    child = Console(db_url, tmp_path_factory.mktemp("console") / "console.log")
    yield child
    child.stop()


@pytest.fixture(scope="module")
def locked_console(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`durable-swarm serve --token TOKEN` on this module's database."""
    child = Console(db_url, tmp_path_factory.mktemp("locked") / "console.log", token=TOKEN)
    yield child
    child.stop()


@pytest.fixture(scope="module")
def token_console(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`durable-swarm serve` with no token option: it makes one (see `Console.link`)."""
    child = Console(db_url, tmp_path_factory.mktemp("made") / "console.log", made=True)
    yield child
    child.stop()


def run_status(console: Console, run_id: str) -> str:
    response = console.http.get(f"/api/runs/{run_id}")
    return str(response.json()["status"]) if response.status_code == 200 else ""


def wait_status(console: Console, host: Host, run_id: str, *statuses: str) -> dict[str, Any]:
    """Poll the API until the run has one of `statuses`; return the run."""
    wait_for(
        lambda: run_status(console, run_id) in statuses,
        f"run {run_id} to be {statuses}",
        processes=[host, console],
    )
    return dict(console.http.get(f"/api/runs/{run_id}").json())


@pytest.fixture
def batch(host: Host, console: Console) -> str:
    """A fresh batch of runs (see _host.py), with its waits in place; returns the prefix."""
    prefix = host.start()
    wait_status(console, host, f"{prefix}-ok", "succeeded")
    wait_status(console, host, f"{prefix}-ask", "waiting_for_input")
    wait_status(console, host, f"{prefix}-pay", "waiting_for_approval")
    wait_status(console, host, f"{prefix}-sub", "succeeded")
    return prefix
