"""Helpers for the `durable-swarm` command's tests.

Every command runs in a child process (DBOS is one per process). Importing the library takes
seconds on a busy machine, so most tests run several commands in one child (`_batch.py`, which
calls `durable_swarm.cli.main` for each with its own environment and captured output); a few
run the installed `durable-swarm` script and `python -m durable_swarm` themselves. The runs
they inspect are made by a small durable app in another child (`_runs_app.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
APP = HERE / "_runs_app.py"
BATCH = HERE / "_batch.py"
TIMEOUT = 120
# Variables that would point the command elsewhere, or change its output.
_SCRUBBED = (
    "DURABLE_SWARM_DATABASE_URL",
    "DBOS_SYSTEM_DATABASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "NO_COLOR",
    "FORCE_COLOR",
    "DURABLE_SWARM_DEBUG",
)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: ours without the variables that would change it."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


@dataclass
class Result:
    """What one command did."""

    status: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout as JSON."""
        return json.loads(self.stdout)

    def json_lines(self) -> list[Any]:
        """stdout as JSON lines."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


class Batch:
    """Commands running in one child process (see `start_batch`)."""

    def __init__(self, process: subprocess.Popen[str], results_file: Path) -> None:
        self.process, self.results_file = process, results_file

    def results(self) -> list[Result]:
        """Wait for the commands; return their results in order."""
        _, err = self.process.communicate(timeout=TIMEOUT)
        assert self.process.returncode == 0, f"the batch runner failed:\n{err}"
        return [Result(**r) for r in json.loads(self.results_file.read_text())]


def start_batch(tmp_path: Path, db: Path | str | None, *commands: Any) -> Batch:
    """Start running `commands` (each an argv list, or a dict with `argv`, `env`, `stdin`) in one
    child process, with `db` as DURABLE_SWARM_DATABASE_URL."""
    jobs = []
    for command in commands:
        job = dict(command) if isinstance(command, dict) else {"argv": list(command)}
        env = {"DURABLE_SWARM_DATABASE_URL": str(db)} if db is not None else {}
        job["env"] = {**env, **job.get("env", {})}
        jobs.append(job)
    jobs_file = tmp_path / f"jobs-{os.urandom(4).hex()}.json"
    results_file = jobs_file.with_suffix(".results.json")
    jobs_file.write_text(json.dumps(jobs))
    process = subprocess.Popen(
        [sys.executable, str(BATCH), str(jobs_file), str(results_file)],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Batch(process, results_file)


def cli_batch(tmp_path: Path, db: Path | str | None, *commands: Any) -> list[Result]:
    """Run `commands` in one child process (see `start_batch`); return their results."""
    return start_batch(tmp_path, db, *commands).results()


def _cli_argv(module: bool) -> list[str]:
    if module:
        return [sys.executable, "-m", "durable_swarm"]
    return [str(Path(sys.executable).with_name("durable-swarm"))]


def cli_parallel(*commands: tuple[list[str], bool], db: Path | str | None = None) -> list[Result]:
    """Run each `(argv, module)` at once, through the installed `durable-swarm` script (or
    `python -m durable_swarm` when `module`), one process each; return their results."""
    extra = {"DURABLE_SWARM_DATABASE_URL": str(db)} if db is not None else {}
    processes = [
        subprocess.Popen(
            [*_cli_argv(module), *argv],
            env=child_env(**extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv, module in commands
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=TIMEOUT)
        results.append(Result(process.returncode, out, err))
    return results


def run_script(script: Path, *args: str) -> Any:
    """Run a Python script in a child process until it exits (status 0 asserted); return the
    JSON of the last line it prints."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def runs_app(url: Path | str, command: str, *targets: str, fixed: bool = False) -> Any:
    """Run the test app (`create` the runs, or `work` on them); return the statuses it prints."""
    flags = ["--fixed"] if fixed else []
    return run_script(APP, str(url), command, *targets, *flags)


def start_worker(url: Path | str, *targets: str, fixed: bool = False) -> subprocess.Popen[str]:
    """`runs_app(url, "work", ...)` in the background; `.communicate()` waits for it."""
    argv = [sys.executable, str(APP), str(url), "work", *targets]
    if fixed:
        argv.append("--fixed")
    return subprocess.Popen(
        argv,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(worker: subprocess.Popen[str]) -> Any:
    """Wait for a background worker; return the statuses it printed."""
    out, err = worker.communicate(timeout=TIMEOUT)
    assert worker.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def copy_db(source: Path, target: Path) -> Path:
    """A consistent copy of a SQLite run database (through SQLite, so the WAL is included)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return target


def digest(path: Path) -> dict[str, str]:
    """A fingerprint of every table's rows: equal digests mean nothing changed."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            table: hashlib.sha256(
                "\n".join(sorted(map(repr, db.execute(f"SELECT * FROM {table}")))).encode()
            ).hexdigest()
            for table in tables
        }
    finally:
        db.close()


EXPECTED = {
    "run-ok": "succeeded",
    "run-failed": "failed",
    "run-input": "waiting_for_input",
    "run-approval": "waiting_for_approval",
}
