"""A fork server for the tests' child processes: `python -m _support.zygote <module>` (cwd tests/),
where `<module>` (e.g. `durable._child`) has a `run(config)` function.

Importing `openai`, `dbos` and this library costs a second or two per process; crash and restart
tests start dozens of children, so this process imports everything once (and launches nothing: no
threads, so forking is safe) and forks one child per request. Each child is a real, separate
process that runs `<module>.run(config)` and that a test can SIGKILL at any point.

Protocol, one JSON object per line on stdin, one answer line on stdout:
* `{"op": "spawn", "config": {...}, "log": path, "exit_file": path}` -> the child's pid. Its
  output goes to `log` (unbuffered, so what a child printed before it was killed is there); when
  it ends, its exit code (negative: killed by that signal) is written to `exit_file`.
* `{"op": "kill", "pid": N}` -> `ok`: SIGKILL that child if it has not been reaped yet (only this
  process's own, unreaped children are ever signalled, so a recycled pid is never hit).
End of stdin: SIGKILL the remaining children and exit.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

import openai  # noqa: F401  (imported once, here, for every child)

import durable_swarm.durable  # noqa: F401


def _child_main(run: Callable[[dict[str, Any]], Any], request: dict[str, Any]) -> None:
    for fd in (0, 1):
        os.close(fd)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if log not in (1, 2):
        os.close(log)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    code = 0
    try:
        run(request["config"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _write_exit(path: str, code: int) -> None:
    with open(path + ".partial", "w") as f:
        f.write(str(code))
    os.replace(path + ".partial", path)


def main(module: str) -> None:
    run = importlib.import_module(module).run
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    children: dict[int, str] = {}  # pid -> exit file, until reaped
    pending = b""

    def answer(text: str) -> None:
        os.write(stdout, (text + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _write_exit(children.pop(pid), os.waitstatus_to_exitcode(status))

    while True:
        ready, _, _ = select.select([stdin], [], [], 0.01)
        reap()
        if not ready:
            continue
        data = os.read(stdin, 65536)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    _child_main(run, request)
                children[pid] = request["exit_file"]
                answer(str(pid))
            elif request["op"] == "kill":
                reap()
                if request["pid"] in children:
                    os.kill(request["pid"], signal.SIGKILL)
                answer("ok")
            else:
                answer(f"unknown op {request['op']!r}")
    for pid in list(children):
        os.kill(pid, signal.SIGKILL)
    while children:
        pid, status = os.waitpid(-1, 0)
        _write_exit(children.pop(pid), os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1])
