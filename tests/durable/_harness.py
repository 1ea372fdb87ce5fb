"""Helpers for tests that run durable runs in child processes and kill them.

* `Zygote` (`_zygote.py`) forks the children; `Child` is one of them (SIGKILL, exit code, the
  result and stream events it wrote); `processes()` kills whatever a test left running.
* `ScenarioModel` is the fake server's script for `_scenarios`, with faults and holds.
* `wait_for` polls a condition (never fixed sleeps), failing early if a child died.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from durable_swarm import Response
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply

from . import _scenarios

TESTS_DIR = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 90.0  # generous: the machine is small and shared


def jsonable(value: Any) -> Any:
    """`value` as it looks after a JSON round trip (Responses and agents by name)."""

    def default(obj: Any) -> Any:
        if isinstance(obj, Response):
            return {
                "messages": obj.messages,
                "agent": getattr(obj.agent, "name", obj.agent),
                "context_variables": obj.context_variables,
            }
        return getattr(obj, "name", repr(obj))

    return json.loads(json.dumps(value, default=default))


def wait_for(
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float = CHILD_TIMEOUT,
    children: tuple[Child, ...] = (),
) -> Any:
    """Poll `condition` until it is truthy; fail early if one of `children` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for child in children:
            if child.poll() is not None:
                raise AssertionError(
                    f"child {child.name} exited ({child.poll()}) while waiting for "
                    f"{what}:\n{child.output()}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class Zygote:
    """The fork server (`_zygote.py`) that starts this session's child processes."""

    def __init__(self, log: Path) -> None:
        self._log = open(log, "w")  # noqa: SIM115 (closed in close())
        self.log_path = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DURABLE_SWARM_LOG_LEVEL": "ERROR"}
        env.pop(_scenarios.HANG_ENV, None)
        env.pop(_scenarios.WORK_DIR_ENV, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "durable._zygote"],
            cwd=TESTS_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        self._lock = threading.Lock()

    def request(self, request: dict[str, Any]) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                answer = self.proc.stdout.readline().decode().strip()
            except OSError as e:
                answer = f"({e})"
        if not answer:
            raise AssertionError(f"the fork server died:\n{self.log_path.read_text()[-4000:]}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # it kills its remaining children and exits
        try:
            self.proc.wait(timeout=CHILD_TIMEOUT)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()


class Child:
    """A child process (forked by the zygote) running `_child.run(config)`."""

    def __init__(self, zygote: Zygote, name: str, work: Path, config: dict[str, Any]) -> None:
        self.zygote = zygote
        self.name = name
        self.work = work
        self.result_path = work / f"{name}.result.json"
        self.events_path = work / f"{name}.events.jsonl"
        self.log_path = work / f"{name}.log"
        self.exit_path = work / f"{name}.exit"
        config = {
            **config,
            "name": name,
            "work_dir": str(work),
            "result": str(self.result_path),
            "events": str(self.events_path),
            "log": str(self.log_path),
            "exit_file": str(self.exit_path),
        }
        self.pid = int(zygote.request({"op": "spawn", "config": config}))

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        return int(self.exit_path.read_text()) if self.exit_path.exists() else None

    def output(self) -> str:
        text = self.log_path.read_text() if self.log_path.exists() else ""
        return text[-6000:]

    def kill(self) -> None:
        """SIGKILL the child (no cleanup of any kind runs in it) and wait until it is gone."""
        if self.poll() is None:
            self.zygote.request({"op": "kill", "pid": self.pid})
        wait_for(lambda: self.poll() is not None, f"child {self.name} to die")

    def finish(self, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
        """Wait for the child to exit normally and return the result it wrote."""
        wait_for(lambda: self.poll() is not None, f"child {self.name} to finish", timeout=timeout)
        code = self.poll()
        assert code == 0, f"child {self.name} exited with {code}:\n{self.output()}"
        return self.result()

    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.result_path.read_text())
        return result

    def events(self) -> list[Any]:
        """The stream events the child wrote so far (JSON lines; complete lines only)."""
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines]


class Processes:
    """Starts children for one test and kills any still running at its end."""

    def __init__(self, zygote: Zygote, work: Path, base: dict[str, Any]) -> None:
        self.zygote = zygote
        self.work = work
        self.base = base
        self.children: list[Child] = []

    def start(self, name: str, **config: Any) -> Child:
        child = Child(self.zygote, name, self.work, {**self.base, **config})
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.children:
            child.kill()


@contextmanager
def processes(zygote: Zygote, work: Path, **base: Any) -> Iterator[Processes]:
    """Children for one test (configured with `base`), all killed at the end."""
    procs = Processes(zygote, work, base)
    try:
        yield procs
    finally:
        procs.stop_all()


class ScenarioModel:
    """The fake server's script for the scenario, with faults and points where it holds.

    `break_from(stage, fault)` serves `fault` to every request of that stage and later, until
    `repair()`. `hold(stage)` makes the first request of that stage wait `seconds` at the server
    before its (same) answer, so a test can kill the caller while the call is in flight; later
    requests of the stage (the retry after recovery) are answered at once. `slow_stream(stage)`
    spaces the chunks of the first streamed answer of that stage. `arrived(stage)` counts
    requests per stage.
    """

    def __init__(self) -> None:
        self.server: FakeOpenAIServer | None = None
        self._lock = threading.Lock()
        self._arrivals: dict[int, int] = {}
        self._held: dict[int, float] = {}
        self._slow: dict[int, float] = {}
        self._broken: tuple[int, Fault] | None = None

    def break_from(self, stage: int, fault: Fault) -> None:
        """Answer every request of `stage` and later with `fault` (until `repair()`)."""
        self._broken = (stage, fault)

    def repair(self) -> None:
        self._broken = None

    def hold(self, stage: int, seconds: float = 300.0) -> None:
        self._held[stage] = seconds

    def slow_stream(self, stage: int, chunk_delay: float) -> None:
        self._slow[stage] = chunk_delay

    def arrived(self, stage: int) -> int:
        with self._lock:
            return self._arrivals.get(stage, 0)

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Reply | Fault:
        answer = _scenarios.reply(messages, tools)
        stage = _scenarios.stage(messages)
        with self._lock:
            self._arrivals[stage] = first = self._arrivals.get(stage, 0) + 1
        if self._broken is not None and stage >= self._broken[0]:
            return self._broken[1]
        if self.server is not None and stage in self._slow:
            self.server.set_latency(0.0, chunk_delay=self._slow[stage] if first == 1 else 0.0)
        if first == 1 and stage in self._held:
            return Fault.delay(self._held[stage], answer)
        return answer


@contextmanager
def scenario_server(model: ScenarioModel | None = None) -> Iterator[FakeOpenAIServer]:
    """A FakeOpenAIServer (in this process, so its counts survive the children)."""
    model = model or ScenarioModel()
    server = FakeOpenAIServer(model)
    model.server = server
    with server:
        yield server
