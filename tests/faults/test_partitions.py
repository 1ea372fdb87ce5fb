"""Ownership that survives partitions, pauses and clock jumps, with real faults: a loopback TCP
proxy that cuts two workers off from PostgreSQL for longer than the dead-worker timeout, SIGSTOP /
SIGCONT of a worker inside a tool, and the database's clock jumping ahead."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from _support.db import drop_database, new_database_name, postgres_execute, with_database
from durable_swarm.durable import DurableClient, resolve_database_url
from durable_swarm.durable._ownership import PROCESSES_TABLE, ProcessRegistry
from durable_swarm.testing import FakeOpenAIServer

from ._proxy import TcpProxy
from .conftest import TIMEOUT, Model, Proc, starts, step_lines, wait_for, worker_settings

BEAT, DEAD = 0.3, 2.0
QUEUE = "faults"


def _ask(client: DurableClient, tag: str) -> str:
    handle = client.start("Stepper", [{"role": "user", "content": f"step {tag}"}], queue=QUEUE)
    return handle.run_id


def _answers(client: DurableClient, runs: dict[str, str]) -> dict[str, str]:
    return {
        tag: str(client.handle(run_id).result(timeout=TIMEOUT * 2).messages[-1]["content"])
        for tag, run_id in runs.items()
    }


def _all_beating(url: str, count: int) -> Callable[[], bool]:
    """True once `count` processes have a fresh heartbeat and none is claimed."""
    watcher = ProcessRegistry(resolve_database_url(url), "watcher", dead_after=DEAD)

    def check() -> bool:
        rows = watcher._rows("1 = 1")
        fresh = [r for r in rows if r.age_ms < 1000 * BEAT * 3 and r.claimed_by is None]
        return len(fresh) == count

    return check


def _two_workers(start: Callable[..., Proc], url: str, isolated: bool = False) -> tuple[Proc, Proc]:
    """Two workers serving on `url`, ready (`isolated`: each in a pid namespace of its own, as
    on two machines, where only heartbeats tell liveness)."""
    settings = worker_settings(url, QUEUE, BEAT, DEAD)
    a = start("a", "_serve.py", isolated=isolated, **settings).wait_output("serving queue")
    b = start("b", "_serve.py", isolated=isolated, **settings).wait_output("serving queue")
    return a, b


def _in_tools(
    client: DurableClient, work_dir: Path, tags: list[str], workers: tuple[Proc, Proc]
) -> dict[str, str]:
    """Start one run per tag, each kept in its tool until its hold file goes; returns them
    (tag -> run id) once all are in their tools."""
    for tag in tags:
        (work_dir / f"hold-{tag}").touch()
    runs = {tag: _ask(client, tag) for tag in tags}
    wait_for(lambda: all(starts(work_dir, t) == 1 for t in tags), "every run in its tool",
             procs=workers)  # fmt: skip
    return runs


def test_workers_cut_off_together_declare_nobody_dead_and_finish_every_run(
    start: Callable[..., Proc],
    cut_database: tuple[str, str, TcpProxy],
    model: Model,
    work_dir: Path,
) -> None:
    direct, proxied, proxy = cut_database
    a, b = _two_workers(start, proxied, isolated=True)
    tags = [f"c{i}" for i in range(8)]
    with DurableClient(direct) as client:
        runs = _in_tools(client, work_dir, tags, (a, b))
        for round_ in range(3):
            proxy.cut()
            time.sleep(DEAD + 1.5)  # the outage itself: longer than the dead-worker timeout
            proxy.restore()
            wait_for(_all_beating(direct, 2), f"both workers back after cut {round_ + 1}",
                     procs=(a, b))  # fmt: skip
            if round_ == 1:
                for tag in tags:
                    (work_dir / f"hold-{tag}").unlink()
                assert _answers(client, runs) == {t: f"done {t}" for t in tags}
        later = {f"l{i}": _ask(client, f"l{i}") for i in range(4)}  # they still serve
        assert _answers(client, later) == {t: f"done {t}" for t in later}
    said = "\n".join(f"--- {w.name}:\n{w.output()}" for w in (a, b))
    for tag in tags:
        assert starts(work_dir, tag) == 1, f"{tag} ({runs[tag]}) ran twice:\n{said}"
        assert model.arrivals(tag, 0) == 1, tag  # no finished model call was made again
    for worker in (a, b):
        assert worker.poll() is None
        assert "is gone" not in worker.output() and "taken for dead" not in worker.output()


def _freeze_off_the_write_lock(worker: Proc, url: str) -> None:
    """SIGSTOP `worker` at a moment it does not hold the SQLite file's write lock (on
    PostgreSQL, at once). Frozen in the middle of a write, a process keeps every other one from
    writing until it thaws (see the README's Known limits): a test of the takeover of a frozen
    worker's runs needs it frozen between writes, as it is most of the time."""
    for _ in range(200):
        worker.signal(signal.SIGSTOP)
        if "://" in url:
            return
        probe = sqlite3.connect(url, timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return
        except sqlite3.OperationalError:
            worker.signal(signal.SIGCONT)  # it (or the other worker) was writing: again
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError(f"{worker.name} held the SQLite write lock at every try")


def _pause_the_holder(
    client: DurableClient, workers: tuple[Proc, Proc], work_dir: Path, tag: str, url: str
) -> tuple[Proc, Proc, dict[str, str]]:
    """Run `tag` is kept in its tool, and the worker running it is frozen until the other
    took it over: `(frozen worker, the other, {tag: run id})`."""
    a, b = workers
    runs = _in_tools(client, work_dir, [tag], workers)
    holder_pid = next(pid for _, t, pid in step_lines(work_dir) if t == tag)
    paused, other = (a, b) if holder_pid == a.pid else (b, a)
    _freeze_off_the_write_lock(paused, url)
    wait_for(lambda: "is gone (silent for" in other.output(), "the other worker to take over",
             procs=(other,))  # fmt: skip
    return paused, other, runs


def test_a_paused_worker_records_nothing_for_runs_it_lost_and_strands_nothing(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("paused")
    workers = _two_workers(start, url)
    with DurableClient(url) as client:
        paused, other, runs = _pause_the_holder(client, workers, work_dir, "p1", url)
        wait_for(lambda: starts(work_dir, "p1") == 2, "p1 again in the other worker",
                 procs=(other,))  # fmt: skip
        during = {f"d{i}": _ask(client, f"d{i}") for i in range(4)}  # while it is frozen
        assert _answers(client, during) == {t: f"done {t}" for t in during}
        (work_dir / "hold-p1").unlink()
        assert _answers(client, runs) == {"p1": "done p1"}
        paused.signal(signal.SIGCONT)
        after = {f"a{i}": _ask(client, f"a{i}") for i in range(6)}  # as it thaws
        assert _answers(client, after) == {t: f"done {t}" for t in after}
        wait_for(lambda: "was taken for dead" in paused.output(), "the thawed worker to notice",
                 procs=(paused,))  # fmt: skip
        info = client.get_run(runs["p1"])
        assert [(s.kind, s.name) for s in info.steps if s.kind in ("model", "tool")] == [
            ("model", "Stepper"),
            ("tool", "step"),
            ("model", "Stepper"),
        ]
        statuses = client._dbos.list_workflows(status=["PENDING", "ENQUEUED"])
        assert statuses == []  # nothing stranded
    assert model.arrivals("p1", 1) == 1  # the frozen worker's late tool result was not recorded
    for tag in [*during, *after]:
        assert starts(work_dir, tag) == 1, tag
    assert paused.poll() is None and other.poll() is None


@pytest.fixture
def jumping_clock(postgres_base_url: str) -> Iterator[tuple[str, Callable[[int], None]]]:
    """`(URL, jump)` of a new PostgreSQL database whose clock (`clock_timestamp()`, the clock
    liveness is measured by) `jump(ms)` moves ahead, as a server's clock stepped by NTP does."""
    name = new_database_name("dswarm_faults", "clock")
    url = with_database(postgres_base_url, name)
    postgres_execute(postgres_base_url, f'CREATE DATABASE "{name}"')
    setup = [
        "CREATE SCHEMA clockshift",
        "CREATE TABLE clockshift.offset_ms (ms BIGINT NOT NULL)",
        "INSERT INTO clockshift.offset_ms VALUES (0)",
        "CREATE FUNCTION clockshift.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE "
        "AS $$ SELECT pg_catalog.clock_timestamp() + "
        "(SELECT ms FROM clockshift.offset_ms) * interval '1 millisecond' $$",
        f'ALTER DATABASE "{name}" SET search_path = clockshift, pg_catalog, "$user", public',
    ]
    for sql in setup:
        postgres_execute(url, sql)

    def jump(ms: int) -> None:
        postgres_execute(url, f"UPDATE clockshift.offset_ms SET ms = ms + {int(ms)}")

    try:
        yield url, jump
    finally:
        drop_database(postgres_base_url, name)


def test_a_database_clock_jumping_ahead_takes_no_live_worker_for_dead(
    start: Callable[..., Proc],
    jumping_clock: tuple[str, Callable[[int], None]],
    model: Model,
    work_dir: Path,
) -> None:
    url, jump = jumping_clock
    a, b = _two_workers(start, url, isolated=True)
    tags = [f"j{i}" for i in range(4)]
    watcher = ProcessRegistry(resolve_database_url(url), "watcher", dead_after=DEAD)
    try:
        with DurableClient(url) as client:
            runs = _in_tools(client, work_dir, tags, (a, b))
            # Both workers judge others by heartbeat once connected for DEAD: wait for that.
            wait_for(lambda: watcher._rows(f"started_at < {watcher._now} - {int(DEAD * 2000)}"),
                     "the workers to settle", procs=(a, b))  # fmt: skip
            jump(30_000)  # far beyond the dead-worker timeout
            for worker in (a, b):
                worker.wait_output("the clock of the run database jumped ahead by about 30 s")
            for tag in tags:
                (work_dir / f"hold-{tag}").unlink()
            assert _answers(client, runs) == {t: f"done {t}" for t in tags}
            later = {f"k{i}": _ask(client, f"k{i}") for i in range(4)}
            assert _answers(client, later) == {t: f"done {t}" for t in later}
    finally:
        watcher.close()
    for tag in tags:
        assert starts(work_dir, tag) == 1, tag  # no run was taken from a live worker
        assert model.arrivals(tag, 0) == 1, tag
    for worker in (a, b):
        assert worker.poll() is None
        assert "is gone" not in worker.output() and "taken for dead" not in worker.output()


def test_a_thawed_worker_begins_no_step_before_its_ownership_is_confirmed(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    # A worker frozen past its dead-worker timeout is taken for dead; runs queued meanwhile wait
    # for it alone. Thawed, its queue thread may take runs at once (DBOS's, with nothing to ask
    # first), but no step body of theirs begins before its heartbeat found it taken for dead and
    # it registered again: every run's first model call reaches the model after that.
    url = make_database_url("thawed")
    workers = _two_workers(start, url)
    watcher = ProcessRegistry(resolve_database_url(url), "watcher", dead_after=DEAD)
    try:
        with DurableClient(url) as client:
            paused, other, first = _pause_the_holder(client, workers, work_dir, "t1", url)
            (work_dir / "hold-t1").unlink()
            assert _answers(client, first) == {"t1": "done t1"}
            # Queued runs wait for the frozen worker alone: the other one stops.
            assert other.terminate() == 0
            queued = {f"q{i}": _ask(client, f"q{i}") for i in range(4)}
            paused.signal(signal.SIGCONT)
            wait_for(lambda: "was taken for dead" in paused.output(), "the thawed worker to notice",
                     procs=(paused,))  # fmt: skip
            assert _answers(client, queued) == {t: f"done {t}" for t in queued}
            executor = re.search(r"as executor '([^']+)'", paused.output())
            assert executor is not None
            with watcher._engine.begin() as conn:
                registered_again = conn.execute(
                    sa.text(f"SELECT started_at FROM {PROCESSES_TABLE} WHERE executor_id = :e"),
                    {"e": executor[1]},
                ).scalar_one()
            first_steps = {tag: model.first_arrival(tag, 0) for tag in queued}
            ran_by = {
                tag: client._dbos.list_workflows(workflow_ids=[run_id])[0].executor_id
                for tag, run_id in queued.items()
            }
    finally:
        watcher.close()
    for tag, started in first_steps.items():
        assert ran_by[tag] == executor[1], tag
        assert started is not None and started * 1000 >= registered_again, (tag, started)


def test_a_worker_stopped_while_cut_off_exits_with_a_clear_message_and_strands_nothing(
    start: Callable[..., Proc],
    cut_database: tuple[str, str, TcpProxy],
    model: Model,
    work_dir: Path,
) -> None:
    """SIGTERM while the database is unreachable: the worker cannot record its run's tool result
    nor mark itself stopped (DBOS retries a lost connection for good), so it must not hang; it
    exits after its shutdown grace, naming the run it leaves, and another worker finishes it
    once the database is back."""
    direct, proxied, proxy = cut_database
    settings = worker_settings(proxied, QUEUE, BEAT, DEAD)
    cut_off = start("cut", "_serve.py", shutdown_grace=3.0, **settings)
    cut_off.wait_output("serving queue")
    with DurableClient(direct) as client:
        runs = _in_tools(client, work_dir, ["s1"], (cut_off, cut_off))
        proxy.cut()
        (work_dir / "hold-s1").unlink()  # the tool returns; its result cannot be recorded
        wait_for(lambda: any(t == "s1" for kind, t, _ in step_lines(work_dir) if kind == "end"),
                 "the tool to return", procs=(cut_off,))  # fmt: skip
        cut_off.signal(signal.SIGTERM)
        code = cut_off.proc.wait(timeout=TIMEOUT)
        out = cut_off.output()
        assert code == 1, out
        said = [line for line in out.splitlines() if "did not finish within 3 s" in line]
        assert len(said) == 1 and runs["s1"] in said[0] and "status 1" in said[0], out
        proxy.restore()
        other = start("other", "_serve.py", **worker_settings(direct, QUEUE, BEAT, DEAD))
        other.wait_output("serving queue")
        assert _answers(client, runs) == {"s1": "done s1"}
        assert client._dbos.list_workflows(status=["PENDING", "ENQUEUED"]) == []
    assert model.arrivals("s1", 0) == 1  # the recorded model call was not made again


def test_a_worker_whose_run_is_in_a_long_tool_stops_within_its_grace_and_loses_nothing(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    """SIGTERM while a run is inside a tool that goes on: the worker does not wait for the tool
    (the interpreter would, at exit); it exits after its grace, naming the run, and the worker
    restarted under the same executor id finishes it (the unrecorded tool call runs again)."""
    url = make_database_url("grace")
    settings = {**worker_settings(url, QUEUE, BEAT, DEAD), "executor_id": "grace-worker"}
    first = start("first", "_serve.py", shutdown_grace=2.0, **settings)
    first.wait_output("serving queue")
    with DurableClient(url) as client:
        runs = _in_tools(client, work_dir, ["g1"], (first, first))
        first.signal(signal.SIGTERM)
        assert first.proc.wait(timeout=TIMEOUT) == 1
        said = [line for line in first.output().splitlines() if "within 2 s" in line]
        assert len(said) == 1 and runs["g1"] in said[0], first.output()
        (work_dir / "hold-g1").unlink()
        again = start("again", "_serve.py", **settings)
        again.wait_output("serving queue")
        assert _answers(client, runs) == {"g1": "done g1"}
        assert client._dbos.list_workflows(status=["PENDING", "ENQUEUED"]) == []
    assert starts(work_dir, "g1") == 2  # at least once: its first call ended unrecorded
    assert model.arrivals("g1", 0) == 1
    assert again.terminate() == 0  # nothing in flight: a prompt, clean stop


def test_a_worker_whose_output_is_gone_still_stops_within_its_grace(
    start: Callable[..., Proc],
    server: FakeOpenAIServer,
    make_database_url: Callable[[str], str],
    work_dir: Path,
) -> None:
    """The reader of the worker's output went away (`worker | tee` after Ctrl-C stops both):
    the line naming what it leaves cannot be written, and the worker still exits after its
    grace (still in its shutdown: its own 'stopped' line fails first)."""
    url = make_database_url("pipe")
    config = {**worker_settings(url, QUEUE, BEAT, DEAD), "shutdown_grace": 2.0}
    env = {**os.environ, "DSW_FAKE_URL": server.base_url, "DSW_WORK_DIR": str(work_dir)}
    worker = subprocess.Popen(
        [sys.executable, "_serve.py", json.dumps(config)], cwd=Path(__file__).parent, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        assert b"serving queue" in worker.stdout.readline()
        with DurableClient(url) as client:
            (work_dir / "hold-o1").touch()
            run_id = _ask(client, "o1")
            wait_for(lambda: starts(work_dir, "o1") == 1, "o1 in its tool")
            worker.stdout.close()
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=TIMEOUT) == 1
            (work_dir / "hold-o1").unlink()
            again = start("again", "_serve.py", **worker_settings(url, QUEUE, BEAT, DEAD))
            again.wait_output("serving queue")
            assert _answers(client, {"o1": run_id}) == {"o1": "done o1"}
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
