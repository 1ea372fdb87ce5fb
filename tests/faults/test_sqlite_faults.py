"""SQLite done right: WAL and a busy timeout; a read-only database gives an error naming the
file and the cause; a disk that fills up mid-run, or a lock another process holds for longer than
the busy timeout mid-run, too, and the interrupted run finishes once the fault is removed (it is
never left pending in a live process).

Real faults: the database lives on a small tmpfs (a full disk), in a folder bind-mounted onto
itself so it can be remounted read-only. Linux refuses that while a process has a file open for
writing there, and a filesystem the kernel turns read-only after an error (ext4's
errors=remount-ro) stays so until it is unmounted, so here the read-only case is a database
read-only from the start; a database turning read-only mid-run (and writable again) is in
`test_sqlite_read_only.py`, on a FUSE filesystem. Needs root (mount); skipped otherwise (the
lock needs nothing special).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from durable_swarm.durable import DurableClient

from .conftest import TIMEOUT, Model, Proc, result, starts, wait_for

BEAT, DEAD = 0.3, 3.0


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 8 MB tmpfs with a folder `db` bind-mounted onto itself (remountable read-only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "disk"
    root.mkdir()
    _mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(root))
    folder = root / "db"
    folder.mkdir()
    _mount("--bind", str(folder), str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        subprocess.run(["umount", "-l", str(root)], check=False)


def _read_only(folder: Path, on: bool) -> None:
    _mount("-o", f"remount,{'ro' if on else 'rw'},bind", str(folder))


def _fill(folder: Path) -> Path:
    """Fill the disk of `folder` up to the last byte; returns the filler file."""
    filler = folder.parent / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_the_database_is_in_wal_mode(start: Callable[..., Proc], disk: Path) -> None:
    url = str(disk / "runs.sqlite")
    proc = start("plain", "_plain.py", database_url=url, heartbeat_interval=BEAT, dead_after=DEAD)
    proc.wait_output("launched ")
    with sqlite3.connect(url) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_read_only_database_is_refused_with_its_file_and_cause(
    start: Callable[..., Proc], disk: Path, work_dir: Path
) -> None:
    url = str(disk / "runs.sqlite")
    settings = {"database_url": url, "heartbeat_interval": BEAT, "dead_after": DEAD}
    start("first", "_plain.py", **settings).wait_output("launched ").terminate()
    _read_only(disk, True)
    refused = start("refused", "_plain.py", tags=["ro"], **settings)
    assert refused.proc.wait(timeout=TIMEOUT) != 0
    assert f"Cannot open the run database '{url}'" in refused.output()
    assert "read-only" in refused.output()
    _read_only(disk, False)
    again = start("again", "_plain.py", tags=["ro"], **settings)
    wait_for(lambda: (work_dir / "result-ro.json").exists(), "the run", procs=(again,))


def test_a_run_interrupted_by_a_full_disk_finishes_once_there_is_room(
    start: Callable[..., Proc], disk: Path, work_dir: Path
) -> None:
    url = str(disk / "runs.sqlite")
    (work_dir / "hold-f1").touch()
    proc = start("plain", "_plain.py", database_url=url, tags=["f1"], heartbeat_interval=BEAT,
                 dead_after=DEAD)  # fmt: skip
    wait_for(lambda: starts(work_dir, "f1") == 1, "the run in its tool", procs=(proc,))
    filler = _fill(disk)
    (work_dir / "hold-f1").unlink()  # the tool ends: its result cannot be written
    wait_for(lambda: f"the run database '{url}' refused a write: the disk is full" in proc.output(),
             "an error naming the file and the cause", procs=(proc,))  # fmt: skip
    filler.unlink()
    with DurableClient(url) as client:
        answer = client.handle("f1").result(timeout=TIMEOUT)
        assert answer.messages[-1]["content"] == "done f1"
        assert client.get_run("f1").status == "succeeded"
    assert proc.poll() is None  # the process lived through it
    # The run waited for room and went back on its queue by itself: the sweep for runs left
    # behind by a database error had nothing to pick up.
    assert "had stopped on a database error" not in proc.output()


def test_a_run_held_up_by_a_lock_finishes_once_it_is_released(
    start: Callable[..., Proc], model: Model, tmp_path: Path, work_dir: Path
) -> None:
    path = tmp_path / "locked.sqlite"
    (work_dir / "hold-k1").touch()
    proc = start("plain", "_plain.py", database_url=str(path), tags=["k1"], heartbeat_interval=BEAT,
                 dead_after=DEAD)  # fmt: skip
    wait_for(lambda: starts(work_dir, "k1") == 1, "the run in its tool", procs=(proc,))
    holder = sqlite3.connect(path, timeout=TIMEOUT, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process takes the write lock and keeps it
        (work_dir / "hold-k1").unlink()  # the tool ends: its result waits for the lock
        locked = (f"in the run database '{path}' failed (the database is locked by another "
                  "process for longer than the busy timeout")  # fmt: skip
        wait_for(lambda: locked in proc.output(), "an error naming the file and the cause",
                 procs=(proc,))  # fmt: skip
        assert result(work_dir, "k1") is None
        with DurableClient(str(path)) as client:  # readers are not blocked (WAL)
            assert client.get_run("k1").status == "pending"
    finally:
        holder.rollback()
        holder.close()
    wait_for(lambda: result(work_dir, "k1"), "the run to finish", procs=(proc,))
    assert result(work_dir, "k1")[-1]["content"] == "done k1"
    with DurableClient(str(path)) as client:
        assert client.get_run("k1").status == "succeeded"
    assert model.arrivals("k1", 0) == 1  # its finished model call was not made again
    assert starts(work_dir, "k1") == 1  # the tool's result waited for the lock: not lost
    assert proc.poll() is None
