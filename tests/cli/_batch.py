"""Runs several `durable-swarm` commands in one child process, so the slow imports happen once.

    python _batch.py JOBS.json RESULTS.json

JOBS.json is a list of `{"argv": [...], "env": {"NAME": "value" or null}, "stdin": "..."}`.
Each command runs through `durable_swarm.cli.main` with its own environment and stdin, its file
descriptors 1 and 2 captured (so what its child processes print is captured too, and stdout is
not a terminal, as in a pipe). RESULTS.json gets `{"status", "stdout", "stderr"}` per command.
DBOS is shut down after each command, as if each had its own process.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile

from durable_swarm.cli import main
from durable_swarm.durable import shutdown


def _read(capture) -> str:
    capture.seek(0)
    return capture.read().decode("utf-8", errors="replace")


def run(job: dict) -> dict:
    """Run one command; return its exit status and what it wrote."""
    saved_env = dict(os.environ)
    for name, value in (job.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved_fds = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        stdin, sys.stdin = sys.stdin, io.StringIO(job.get("stdin", ""))
        try:
            status = main(job["argv"])
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            sys.stdin = stdin
            os.environ.clear()
            os.environ.update(saved_env)
            shutdown()
        return {"status": status, "stdout": _read(out), "stderr": _read(err)}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        jobs = json.load(f)
    results = [run(job) for job in jobs]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f)
