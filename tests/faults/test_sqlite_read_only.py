"""A SQLite database that turns read-only in the middle of a run: the run's checkpoint is
refused with an error naming the database file and the cause, and once the file is writable
again the run finishes where it stopped, in the process that started it.

A real fault: the database lives on a FUSE filesystem of its own (`_rofs.py`, a process) that
answers every change with EROFS while a switch file exists, also on files opened before, as a
disk does when the kernel remounts it read-only after an error. (A bind mount cannot be remounted
read-only while a process has a file open for writing there, and chmod does not stop root.)
SQLite's WAL works on it (its -shm file, a shared memory map, stays writable: see `_rofs.py`).
Needs /dev/fuse, libfuse 3, the `mfusepy` package and root (no fusermount3 here): skipped
otherwise, and failed instead when `DURABLE_SWARM_REQUIRE_FUSE=1` (CI).

The run is held in its second model call (its first call and its tool are recorded); the
filesystem turns read-only; the call's answer cannot be recorded. Once writable again, the run
finishes with the transcript of an uninterrupted run, and neither its finished model call nor
its finished tool runs again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from durable_swarm.durable import DurableClient

from .conftest import HERE, TIMEOUT, Model, Proc, result, starts, wait_for, worker_settings

BEAT, DEAD = 0.3, 3.0
QUEUE = "read-only"
REQUIRE_FUSE_ENV = "DURABLE_SWARM_REQUIRE_FUSE"


def _fuse_missing() -> str | None:
    """Why a FUSE filesystem cannot be mounted here (None if it can)."""
    if not Path("/dev/fuse").exists():
        return "there is no /dev/fuse"
    if os.geteuid() != 0:
        return "mounting a FUSE filesystem without fusermount3 needs root"
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        return "the mfusepy package is not installed (pip install -e '.[dev]')"
    except OSError as e:  # mfusepy found no libfuse
        return f"{e} (apt-get install libfuse3-3)"
    return None


@dataclass
class Switchable:
    """A folder on the FUSE filesystem, and its switch."""

    folder: Path
    switch: Path

    def read_only(self, on: bool) -> None:
        if on:
            self.switch.touch()
        else:
            self.switch.unlink()


@pytest.fixture
def switchable(tmp_path: Path) -> Iterator[Switchable]:
    missing = _fuse_missing()
    if missing is not None:
        if os.environ.get(REQUIRE_FUSE_ENV) == "1":
            pytest.fail(f"FUSE is required ({REQUIRE_FUSE_ENV}=1) but {missing}")
        pytest.skip(f"no FUSE filesystem: {missing}")
    source, folder = tmp_path / "source", tmp_path / "db"
    source.mkdir()
    folder.mkdir()
    log = tmp_path / "rofs.log"
    switch = tmp_path / "read-only"
    command = [sys.executable, str(HERE / "_rofs.py"), str(source), str(folder), str(switch)]
    with open(log, "w") as out:
        fs = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.ismount(folder) or fs.poll() is not None, "the FUSE mount")
        assert fs.poll() is None, f"the FUSE filesystem exited:\n{log.read_text()}"
        yield Switchable(folder, switch)
    finally:
        fs.terminate()
        try:
            fs.wait(timeout=TIMEOUT)
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def _refused_while_read_only(
    switchable: Switchable, model: Model, proc: Proc, url: str, tag: str
) -> None:
    """Turn the filesystem read-only while run `tag` is in its second model call; wait for the
    error; check that the run is still pending; make the filesystem writable again."""
    wait_for(lambda: model.arrivals(tag, 1) == 1, "the run's second model call", procs=(proc,))
    switchable.read_only(True)
    model.release(tag, 1)  # its answer cannot be recorded
    refused = (f"Run '{tag}' stopped: the run database '{url}' refused a write: the database "
               "file (or its folder) is read-only")  # fmt: skip
    wait_for(lambda: refused in proc.output(), "an error naming the run, the file and the cause",
             procs=(proc,))  # fmt: skip
    with DurableClient(url) as client:  # the database can still be read
        assert client.get_run(tag).status == "pending"
    switchable.read_only(False)


def _finished_once(
    messages: list[dict[str, Any]], model: Model, proc: Proc, work_dir: Path, tag: str
) -> None:
    assert [m.get("content") for m in messages] == [None, f"stepped {tag}", f"done {tag}"]
    assert [c["function"]["name"] for c in messages[0]["tool_calls"]] == ["step"]
    assert model.arrivals(tag, 0) == 1  # its finished model call was not made again
    assert starts(work_dir, tag) == 1  # nor its finished tool
    assert proc.poll() is None  # the process lived through it
    # The run waited for the database and went back on its queue by itself: the sweep for runs
    # left behind by a database error had nothing to pick up.
    assert "had stopped on a database error" not in proc.output()


def test_a_run_stopped_by_a_read_only_database_finishes_once_it_is_writable(
    switchable: Switchable, start: Callable[..., Proc], model: Model, work_dir: Path
) -> None:
    url = str(switchable.folder / "runs.sqlite")
    model.hold("r1", 1)
    proc = start("plain", "_plain.py", database_url=url, tags=["r1"], heartbeat_interval=BEAT,
                 dead_after=DEAD)  # fmt: skip
    _refused_while_read_only(switchable, model, proc, url, "r1")
    assert result(work_dir, "r1") is None
    messages = wait_for(lambda: result(work_dir, "r1"), "the run to finish", procs=(proc,))
    with DurableClient(url) as client:
        assert client.get_run("r1").status == "succeeded"
    _finished_once(messages, model, proc, work_dir, "r1")


def test_a_workers_run_stopped_by_a_read_only_database_finishes_once_it_is_writable(
    switchable: Switchable, start: Callable[..., Proc], model: Model, work_dir: Path
) -> None:
    url = str(switchable.folder / "runs.sqlite")
    model.hold("w1", 1)
    worker = start("worker", "_serve.py", **worker_settings(url, QUEUE, BEAT, DEAD))
    worker.wait_output("serving queue")
    with DurableClient(url) as client:
        client.start("Stepper", [{"role": "user", "content": "step w1"}], queue=QUEUE, run_id="w1")
    _refused_while_read_only(switchable, model, worker, url, "w1")
    with DurableClient(url) as client:
        response = client.handle("w1").result(timeout=TIMEOUT)
        assert client.get_run("w1").status == "succeeded"
    _finished_once(response.messages, model, worker, work_dir, "w1")
