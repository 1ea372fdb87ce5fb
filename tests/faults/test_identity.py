"""Process identity: every process that launches DBOS has its own executor id and liveness row,
and recovery takes only the runs of processes known to be dead."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from durable_swarm.durable import PROCESSES_TABLE, resolve_database_url
from durable_swarm.durable._ownership import ProcessRegistry

from .conftest import Model, Proc, result, starts, wait_for

BEAT, DEAD = 0.3, 3.0


def _settled(url: str, executor_id: str) -> Callable[[], bool]:
    """True once process `executor_id` has been connected for longer than `DEAD` plus two
    heartbeats (so it has judged the others by their heartbeats)."""
    watcher = ProcessRegistry(resolve_database_url(url), "watcher", dead_after=DEAD)
    query = sa.text(
        f"SELECT heartbeat_at - started_at FROM {PROCESSES_TABLE} WHERE executor_id = :id"
    )

    def check() -> bool:
        with watcher._engine.begin() as conn:
            row = conn.execute(query, {"id": executor_id}).first()
        return row is not None and row[0] > (DEAD + 2 * BEAT) * 1000

    return check


def executor_of(proc: Proc) -> str:
    """The executor id a `_plain.py` process printed at launch."""
    return proc.wait_output("launched ").output().split("launched ", 1)[1].split()[0]


def test_two_plain_processes_on_one_database_start_each_tool_once(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("plain")
    settings = {"database_url": url, "heartbeat_interval": BEAT, "dead_after": DEAD}
    for tag in ("a1", "a2"):
        (work_dir / f"hold-{tag}").touch()
    first = start("first", "_plain.py", tags=["a1", "a2"], **settings)
    wait_for(lambda: starts(work_dir, "a1") and starts(work_dir, "a2"), "a1, a2 in their tools",
             procs=(first,))  # fmt: skip
    second = start("second", "_plain.py", tags=["b1", "b2"], **settings)
    wait_for(lambda: result(work_dir, "b1") and result(work_dir, "b2"), "b1, b2 to finish",
             procs=(first, second))  # fmt: skip
    # The second process has had the time to judge the first by its heartbeats: it stays live.
    wait_for(_settled(url, executor_of(second)), "the second process to settle", procs=(second,))
    for tag in ("a1", "a2"):
        (work_dir / f"hold-{tag}").unlink()
    wait_for(lambda: result(work_dir, "a1") and result(work_dir, "a2"), "a1, a2 to finish",
             procs=(first, second))  # fmt: skip

    for tag in ("a1", "a2", "b1", "b2"):
        assert starts(work_dir, tag) == 1, tag
        assert (model.arrivals(tag, 0), model.arrivals(tag, 1)) == (1, 1), tag
        messages = result(work_dir, tag)
        assert messages is not None and messages[-1]["content"] == f"done {tag}"
    assert "is gone" not in first.output() + second.output()
    assert first.terminate() == 0 and second.terminate() == 0
