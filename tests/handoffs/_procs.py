"""Child processes for the restart tests: forked by the fork server (`_zygote.py`), running
`_child.run(config)`; a test starts them, lets them go, kills them, waits for them, reads them."""

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

TESTS_DIR = Path(__file__).resolve().parents[1]
TIMEOUT = 90.0  # generous: the machine is small and shared


class Zygote:
    """The fork server that starts the children of a test session."""

    def __init__(self, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 (closed in close())
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DURABLE_SWARM_LOG_LEVEL": "ERROR"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "handoffs._zygote"],
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
                answer = ""
                print(f"fork server: {e}")
        if not answer:
            raise AssertionError(f"the fork server died:\n{self.log_path.read_text()[-4000:]}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # it kills the children still running, and exits
        try:
            self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()


class Child:
    """One child process; its output is in `<work>/<name>.log`."""

    def __init__(self, zygote: Zygote, name: str, work: Path, config: dict[str, Any]) -> None:
        self.zygote = zygote
        self.name = name
        self.work = work
        self.log_path = work / f"{name}.log"
        self.exit_path = work / f"{name}.exit"
        self.result_path = work / f"{name}.result.json"
        self.waits_path = work / f"{name}.waiting.jsonl"
        request = {
            "op": "spawn",
            "config": {**config, "name": name, "work_dir": str(work)},
            "log": str(self.log_path),
            "exit_file": str(self.exit_path),
        }
        self.pid = int(zygote.request(request))

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        return int(self.exit_path.read_text()) if self.exit_path.exists() else None

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def go(self) -> None:
        """Let a child started with `wait_for_go=True` touch the database."""
        (self.work / f"{self.name}.go").write_text("go")

    def waits(self) -> list[dict[str, Any]]:
        """The waits the child saw so far (complete lines only)."""
        if not self.waits_path.exists():
            return []
        return [json.loads(x) for x in self.waits_path.read_text().split("\n")[:-1]]

    def kill(self) -> int:
        """SIGKILL (no cleanup of any kind runs in the child); its exit code once reaped."""
        if self.poll() is None:
            self.zygote.request({"op": "kill", "pid": self.pid})
        deadline = time.monotonic() + TIMEOUT
        while (code := self.poll()) is None:
            assert time.monotonic() < deadline, f"{self.name} was not reaped"
            time.sleep(0.01)
        return code

    def finish(self, timeout: float = TIMEOUT) -> None:
        """Wait for the child to exit by itself; fail with its output if it does not."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} still running after {timeout} s:\n{self.output()[-6000:]}"
                )
            time.sleep(0.02)
        assert code == 0, f"{self.name} exited with {code}:\n{self.output()[-6000:]}"

    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.result_path.read_text())
        return result


def wait_for(
    condition: Callable[[], Any], what: str, *children: Child, timeout: float = TIMEOUT
) -> Any:
    """Poll `condition` until it is truthy; fail early, with its output, if one of `children`
    exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for child in children:
            if child.poll() is not None:
                raise AssertionError(
                    f"{child.name} exited ({child.poll()}) while waiting for {what}:\n"
                    f"{child.output()[-6000:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


class Children:
    """Starts the children of one test; kills those still running when the test ends."""

    def __init__(self, zygote: Zygote, work: Path, base: dict[str, Any]) -> None:
        self.zygote = zygote
        self.work = work
        self.base = base
        self.started: list[Child] = []

    def start(self, name: str, **config: Any) -> Child:
        child = Child(self.zygote, name, self.work, {**self.base, **config})
        self.started.append(child)
        return child


@contextmanager
def children(zygote: Zygote, work: Path, **base: Any) -> Iterator[Children]:
    procs = Children(zygote, work, base)
    try:
        yield procs
    finally:
        for child in procs.started:
            child.kill()
