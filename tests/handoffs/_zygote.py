"""A fork server for the restart tests' children: `python -m handoffs._zygote` (cwd tests/).

Importing `openai`, `dbos` and this library costs a couple of CPU seconds per process; this
process imports everything once (and launches nothing, so it has no threads and forking is
safe), then forks one child per request. Each child is a real, separate process that runs
`_child.run(config)` and that a test can SIGKILL at any point.

Protocol: one JSON object per line on stdin, one answer line on stdout.
* `{"op": "spawn", "config": {...}, "log": path, "exit_file": path}` -> the child's pid; its
  output goes to `log` and its exit code (negative: killed by that signal) to `exit_file`.
* `{"op": "kill", "pid": N}` -> `ok`: SIGKILL that child unless it was reaped already (so a
  recycled pid is never hit).
End of stdin: SIGKILL the children still running, and exit.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import sys
import traceback
from typing import Any

import openai  # noqa: F401  (imported once here, for every child)

import durable_swarm.durable  # noqa: F401

from . import _child


def _child_main(request: dict[str, Any]) -> None:
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(0)
    # unbuffered: what a child printed before it was killed is in its log
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    code = 0
    try:
        _child.run(request["config"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _write_exit(path: str, code: int) -> None:
    with open(path + ".partial", "w") as f:
        f.write(str(code))
    os.replace(path + ".partial", path)


def main() -> None:
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    running: dict[int, str] = {}  # pid -> exit file, until reaped
    pending = b""

    def answer(text: str) -> None:
        os.write(stdout, (text + "\n").encode())

    def reap() -> None:
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _write_exit(running.pop(pid), os.waitstatus_to_exitcode(status))

    while True:
        ready, _, _ = select.select([stdin], [], [], 0.01)
        reap()
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    _child_main(request)
                running[pid] = request["exit_file"]
                answer(str(pid))
            elif request["op"] == "kill":
                if request["pid"] in running:
                    os.kill(request["pid"], signal.SIGKILL)
                answer("ok")
            else:
                answer(f"unknown op {request['op']!r}")
    for pid, exit_file in running.items():
        os.kill(pid, signal.SIGKILL)
        _write_exit(exit_file, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


if __name__ == "__main__":
    main()
