"""Child processes for the tests that kill processes: the client of the fork server
(`zygote.py`), the children it forks and a group of them per test (`wait_for` is in `wait.py`);
and `ScriptProcess`, a script run as a process of its own (workers, plain `DurableSwarm`
processes), with `script_processes` to start a test's or a module's and kill them at the end.

A test directory subclasses `Child` for what its own `_child.run(config)` leaves behind (results,
stream events, waits...) and wraps `children()` / `wait_for` with its own names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .wait import TIMEOUT, scaled, wait_for

TESTS_DIR = Path(__file__).resolve().parents[1]


class Zygote:
    """The fork server (`python -m _support.zygote <child_module>`) of a test session."""

    def __init__(self, log: Path, child_module: str, drop_env: Iterable[str] = ()) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 (closed in close())
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DURABLE_SWARM_LOG_LEVEL": "ERROR"}
        for name in drop_env:
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "_support.zygote", child_module],
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
            self.proc.stdin.close()  # it kills its remaining children and exits
        try:
            self.proc.wait(timeout=scaled(TIMEOUT))
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()


class Child:
    """A child process forked by the zygote, running `run(config)`; its output is in
    `<work>/<name>.log`. `config` also gets `name` and `work_dir`."""

    def __init__(self, zygote: Zygote, name: str, work: Path, config: dict[str, Any]) -> None:
        self.zygote = zygote
        self.name = name
        self.work = work
        self.log_path = work / f"{name}.log"
        self.exit_path = work / f"{name}.exit"
        self.result_path = work / f"{name}.result.json"
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
        text = self.log_path.read_text() if self.log_path.exists() else ""
        return text[-6000:]

    def kill(self) -> int:
        """SIGKILL (no cleanup of any kind runs in the child); its exit code once reaped."""
        if self.poll() is None:
            self.zygote.request({"op": "kill", "pid": self.pid})
        wait_for(lambda: self.poll() is not None, f"child {self.name} to die")
        code = self.poll()
        assert code is not None
        return code

    def finish(self, timeout: float = TIMEOUT) -> None:
        """Wait for the child to exit by itself; fail with its output if it does not, or if its
        exit code is not 0."""
        wait_for(lambda: self.poll() is not None, f"child {self.name} to finish", timeout=timeout)
        code = self.poll()
        assert code == 0, f"child {self.name} exited with {code}:\n{self.output()}"

    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.result_path.read_text())
        return result


class Children:
    """Starts the children of one test (`child_class`, each configured with `base` and then its
    own config); `stop_all()` kills those still running."""

    def __init__(
        self, zygote: Zygote, work: Path, base: dict[str, Any], child_class: type[Child] = Child
    ) -> None:
        self.zygote = zygote
        self.work = work
        self.base = base
        self.child_class = child_class
        self.children: list[Child] = []

    def start(self, name: str, **config: Any) -> Any:
        child = self.child_class(self.zygote, name, self.work, {**self.base, **config})
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.children:
            child.kill()


@contextmanager
def children(
    zygote: Zygote, work: Path, base: dict[str, Any], child_class: type[Child] = Child
) -> Iterator[Children]:
    """The children of one test, all killed at its end."""
    group = Children(zygote, work, base, child_class)
    try:
        yield group
    finally:
        group.stop_all()


CHILD_ENV = {"DURABLE_SWARM_LOG_LEVEL": "ERROR"}  # what a child adds to this process's environment


class ScriptProcess:
    """`python <script> <config as JSON>` (run from the script's folder), or `python -m <module>
    <config as JSON>` for a module name (run from `tests/`), in a process (and session) of its
    own with `env` added, its output in `<log_dir>/<name>.log`. `wrap` prefixes the command
    (e.g. `unshare ...`)."""

    def __init__(
        self,
        name: str,
        script: Path | str,
        log_dir: Path,
        env: dict[str, str],
        config: Any,
        wrap: list[str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._wrapped = bool(wrap)
        run = [str(script)] if isinstance(script, Path) else ["-m", script]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [*(wrap or []), sys.executable, *run, json.dumps(config)],
                cwd=script.parent if isinstance(script, Path) else TESTS_DIR,
                env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The pid of the Python process (under a `wrap` command, that command's child)."""
        if not self._wrapped:
            return self.proc.pid
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        found = children.read_text().split() if children.exists() else []
        return int(found[0]) if found else self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def output(self) -> str:
        return self.log_path.read_text()

    def signal(self, number: int) -> None:
        """Send signal `number` to the Python process, if it still runs."""
        if self.proc.poll() is None:
            os.kill(self.pid, number)

    def wait_output(self, text: str) -> Any:
        """Wait until the process printed `text` (fail early if it exits); returns `self`."""
        wait_for(lambda: text in self.output(), f"{self.name} to print {text!r}", processes=(self,))
        return self

    def terminate(self) -> int:
        """SIGTERM (a clean shutdown; a stopped process is continued first); the exit code."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=scaled(TIMEOUT))
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: the process dies on the spot, nothing of it runs any more."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=scaled(TIMEOUT))


@contextmanager
def script_processes(
    log_dir: Path, env: dict[str, str], make: Callable[..., ScriptProcess] = ScriptProcess
) -> Iterator[Callable[..., Any]]:
    """`start(name, script, config, **options) -> make(name, script, log_dir, env, config,
    **options)`; every process started is killed at the end."""
    started: list[ScriptProcess] = []

    def start(name: str, script: Path | str, config: Any, **options: Any) -> Any:
        process = make(name, script, log_dir, env, config, **options)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()
