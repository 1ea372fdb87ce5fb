"""The workers' heartbeat table: who is alive, and exactly one claimer per dead worker.

No DBOS here: `ProcessRegistry` is plain SQL on the run database, so these tests are quick and
check the race conditions directly (claims from many threads at once on PostgreSQL and SQLite).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _support.db import drop_database, new_database_name, postgres_execute, with_database
from durable_swarm.durable._ownership import (
    PROCESSES_TABLE,
    Ownership,
    ProcessRegistry,
    ProcessRow,
)

from .conftest import wait_for

DEAD_AFTER = 0.4


@pytest.fixture
def registries(make_database_url: Callable[..., str]) -> Iterator[Callable[..., ProcessRegistry]]:
    """`(executor_id, dead_after=DEAD_AFTER) -> ProcessRegistry` on one fresh database."""
    url = make_database_url("registry", create=True)
    made: list[ProcessRegistry] = []

    def make(executor_id: str, dead_after: float = DEAD_AFTER) -> ProcessRegistry:
        registry = ProcessRegistry(url, executor_id, "q", dead_after=dead_after)
        made.append(registry)
        return registry

    yield make
    for registry in made:
        registry.close()


def never_stop(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def beat_past_dead_after(registry: ProcessRegistry) -> None:
    """Keep `registry` beating until the others, silent, are past `DEAD_AFTER`."""
    deadline = time.monotonic() + DEAD_AFTER + 0.3
    while time.monotonic() < deadline:
        assert registry.beat() is not None
        time.sleep(0.05)


def claim_together(claims: list[tuple[ProcessRegistry, ProcessRow]]) -> list[str]:
    """Make every `(claimer, row)` claim at the same moment (threads); the winners' ids."""
    start = threading.Barrier(len(claims))
    won: list[str] = []

    def claim(claimer: ProcessRegistry, row: ProcessRow) -> None:
        start.wait()
        if claimer.claim(row):
            won.append(claimer.executor_id)

    threads = [threading.Thread(target=claim, args=pair) for pair in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_a_live_worker_is_not_dead_and_a_silent_one_is(
    registries: Callable[..., ProcessRegistry],
) -> None:
    alive, silent, watcher = registries("alive"), registries("silent"), registries("watcher")
    for registry in (alive, silent, watcher):
        registry.register(never_stop)
    assert watcher.dead() == []
    beat_past_dead_after(alive)
    assert [row.executor_id for row in watcher.dead()] == ["silent"]
    assert watcher.dead()[0].age_ms > DEAD_AFTER * 1000


def test_a_taker_is_alone_once_no_other_process_may_live(
    registries: Callable[..., ProcessRegistry],
) -> None:
    # (A lone taker puts a dead process's runs all on DBOS's internal queue: `recover_runs_of`.)
    taker, peer, victim = registries("taker"), registries("peer"), registries("victim")
    for registry in (taker, peer, victim):
        registry.register(never_stop)
    assert taker.others_alive()
    peer.stop()  # a clean stop: no longer alive
    beat_past_dead_after(taker)  # the victim falls silent
    assert not taker.others_alive()
    assert victim.beat() is not None  # heard from again: it may live
    assert taker.others_alive()


def test_exactly_one_of_many_concurrent_claimers_wins(
    registries: Callable[..., ProcessRegistry],
) -> None:
    victim = registries("victim")
    victim.register(never_stop)
    claimers = [registries(f"claimer-{i}") for i in range(6)]
    for claimer in claimers:
        claimer.register(never_stop)
    time.sleep(DEAD_AFTER + 0.1)
    rows = [next(r for r in c.dead() if r.executor_id == "victim") for c in claimers]
    won = claim_together(list(zip(claimers, rows, strict=True)))
    assert len(won) == 1
    winner = next(c for c in claimers if c.executor_id == won[0])
    # A claimed worker that was only paused finds out at its next heartbeat: it must stop.
    assert victim.beat() is None
    # The claim is fresh, so nobody else sees the row as dead until the claimer releases it.
    assert all(r.executor_id != "victim" for r in claimers[0].dead() + claimers[1].dead())
    winner.release(rows[0])
    assert all(r.executor_id != "victim" for r in winner.dead())


def test_a_claim_whose_claimer_died_is_taken_over(
    registries: Callable[..., ProcessRegistry],
) -> None:
    victim, first, second = registries("victim"), registries("first"), registries("second")
    for registry in (victim, first, second):
        registry.register(never_stop)
    time.sleep(DEAD_AFTER + 0.1)
    assert first.claim(next(r for r in first.dead() if r.executor_id == "victim"))
    # `first` dies before recovering the victim's runs: its claim goes stale in turn.
    row = wait_for(
        lambda: next((r for r in second.dead() if r.executor_id == "victim"), None),
        "the stale claim",
    )
    assert row.claimed_by == "first"
    assert second.claim(row)


def test_a_restarted_worker_waits_for_a_claim_in_progress_on_its_executor_id(
    registries: Callable[..., ProcessRegistry],
) -> None:
    old, claimer = registries("pinned", dead_after=5.0), registries("claimer", dead_after=5.0)
    old.register(never_stop)
    claimer.register(never_stop)
    old.stop()  # stopped: stale at once
    row = next(r for r in claimer.dead() if r.executor_id == "pinned")
    assert claimer.claim(row)
    restarted = registries("pinned", dead_after=5.0)
    registered = threading.Event()

    def register() -> None:
        restarted.register(never_stop)
        registered.set()

    thread = threading.Thread(target=register)
    thread.start()
    assert not registered.wait(0.6)  # the claimer is still putting the old runs back
    claimer.release(row)
    assert registered.wait(10)
    thread.join()
    assert restarted.beat() is not None
    assert old.beat() is None


def test_a_restart_under_the_same_executor_id_takes_the_row_over(
    registries: Callable[..., ProcessRegistry],
) -> None:
    old = registries("same")
    old.register(never_stop)
    new = registries("same")
    new.register(never_stop)
    assert new.beat() is not None
    assert old.beat() is None  # two processes with one executor id: the older one finds out


def test_two_processes_that_judge_each_other_dead_at_once_never_both_lose(
    registries: Callable[..., ProcessRegistry],
) -> None:
    # Both heartbeats look old at once (as when the database's clock jumps ahead): each process
    # sees the other dead and claims it, sequentially and concurrently; one claim at most wins.
    for trial in range(20):
        a, b = registries(f"a{trial}", dead_after=5.0), registries(f"b{trial}", dead_after=5.0)
        a.register(never_stop)
        b.register(never_stop)
        a._execute("UPDATE durable_swarm_processes SET heartbeat_at = heartbeat_at - 60000")
        row_b = next(r for r in a.dead() if r.executor_id == b.executor_id)
        row_a = next(r for r in b.dead() if r.executor_id == a.executor_id)
        if trial == 0:
            assert a.claim(row_b)
            assert not b.claim(row_a)  # b was claimed: it judges nobody
            continue
        won = claim_together([(a, row_b), (b, row_a)])
        assert len(won) == 1, trial
        loser = b if won == [a.executor_id] else a
        assert loser.beat() is None  # the loser finds out it was taken for dead


class Runs:
    """A `RunKeeper` of a test: runs PENDING under `me`, some of them executing here."""

    def __init__(self, owned: list[str]) -> None:
        self.owned = {run_id: 0 for run_id in owned}  # run id -> updated at (ms, db clock)
        self.running = set(owned)
        self.put: list[str] = []

    def recover(self, executor_id: str, *, alone: bool = False) -> int:
        return 0

    def pending(self, executor_id: str | None) -> list[tuple[str, str, int]]:
        return [(run_id, "me", updated) for run_id, updated in self.owned.items()]

    def busy(self) -> list[str]:
        return list(self.running)

    def put_back(self, run_id: str) -> bool:
        self.put.append(run_id)
        del self.owned[run_id]
        return True

    def settle(self) -> None:
        pass


def test_a_run_that_stopped_here_is_put_back_after_two_looks_and_a_busy_one_never(
    tmp_path: Path,
) -> None:
    # A run PENDING under this executor, untouched for `dead_after`, that no execution here runs
    # (it ended on a database error) is put back on its queue once two looks in a row found it
    # so (a run just taken from a queue is not running yet for a moment); a run that runs here
    # is never put back, however long it has been PENDING.
    own = Ownership(
        f"sqlite:///{tmp_path / 'runs.sqlite'}",
        "me",
        kind="test",
        heartbeat_interval=1.0,
        dead_after=6.0,
        application_version="v",
    )
    own.register()
    runs = Runs([f"r{i}" for i in range(5)])
    own._runs = runs
    own._confirmed_until = float("inf")
    for _ in range(3):
        own._heal()
    assert runs.put == []  # all of them run here
    runs.running.remove("r3")  # its execution ended on a database error: it stays PENDING here
    own._heal()
    assert runs.put == []  # seen once: it may just have been taken from a queue
    own._heal()
    assert runs.put == ["r3"]
    runs.owned["r4"] = own.registry.now_ms() or 0  # touched just now: not stalled
    runs.running.remove("r4")
    own._heal()
    own._heal()
    assert runs.put == ["r3"]
    own.registry.close()


def test_a_takeover_line_says_how_many_runs_went_back_in_plain_words() -> None:
    from durable_swarm.durable._ownership import _back

    assert _back(0) == "it left no unfinished run"
    assert _back(1) == "its 1 unfinished run is back on its queue"
    assert _back(3) == "3 of its unfinished runs are back on their queues"


def test_a_heartbeat_is_one_transaction_with_its_look_for_dead_processes(
    make_database_url: Callable[..., str],
) -> None:
    # An idle process costs the database one transaction per heartbeat: the beat and the look
    # for dead processes commit together (the idle fleet's cost, benchmarks/idle_fleet.py).
    import sqlalchemy as sa

    own = Ownership(
        make_database_url("beats", create=True),
        "me",
        kind="test",
        heartbeat_interval=0.05,
        dead_after=60.0,  # never settled here: no look for orphans, no heal of a stalled run
        application_version="v",
    )
    own.register()
    engine = own.registry._engine
    commits: list[int] = []
    beats: list[int] = []
    sa.event.listen(engine, "commit", lambda conn: commits.append(1))

    def count_beats(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().startswith(f"UPDATE {PROCESSES_TABLE} SET heartbeat_at"):
            beats.append(1)

    sa.event.listen(engine, "before_cursor_execute", count_beats)
    own.start(Runs([]))
    wait_for(lambda: len(beats) >= 5, "five heartbeats")
    own.stop()
    assert beats and len(commits) <= len(beats) + 1  # + the stop's mark
    assert own.confirmed() is False
    own.registry.close()


@pytest.mark.parametrize("cannot_add", [False, True], ids=["added", "not-added"])
def test_a_process_table_of_an_earlier_release_gets_the_slots_column(
    make_database_url: Callable[..., str],
    cannot_add: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Tables made before the processes said their recovery slots lack the column: the first
    # process of this release adds it, and the processes of the fleet agree on the smallest.
    import sqlalchemy as sa

    url = make_database_url("old-table", create=True)
    old = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with old.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {PROCESSES_TABLE} (executor_id VARCHAR(255) PRIMARY KEY, "
                "kind VARCHAR(32) NOT NULL, queue VARCHAR(255), host VARCHAR(255) NOT NULL, "
                "machine VARCHAR(64) NOT NULL, pid INTEGER NOT NULL, pid_start VARCHAR(64) NOT "
                "NULL, incarnation VARCHAR(64) NOT NULL, started_at BIGINT NOT NULL, "
                "heartbeat_at BIGINT NOT NULL, claimed_by VARCHAR(255))"
            )
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {PROCESSES_TABLE} VALUES ('old', 'worker', 'q', 'h', 'm', 1, '', "
                "'i', 1, 1, NULL)"
            )
        )
    old.dispose()
    if cannot_add:  # e.g. a role that does not own the table: the process runs without it
        from durable_swarm.durable import _ownership

        monkeypatch.setattr(
            _ownership, "_ADD_SLOTS", {"postgresql": "NOT SQL", "sqlite": "NOT SQL"}
        )
    made = [
        ProcessRegistry(url, name, "q", dead_after=60.0, slots=slots)
        for name, slots in (("eight", 8), ("five", 5), ("unsaid", None))
    ]
    if cannot_add:
        for registry in made:
            registry.register(never_stop)
        assert made[0].fleet_slots() is None and len(made[0].executors()) == 4
        assert f"could not upgrade the table {PROCESSES_TABLE}" in caplog.text
        assert "without saying its recovery slots" in caplog.text
        for registry in made:
            registry.close()
        return
    for registry in made:
        registry.register(never_stop)
    assert made[0].fleet_slots() == 5
    made[1].stop()
    assert made[2].fleet_slots() == 8
    for registry in made:
        registry.close()


@pytest.mark.postgres
def test_a_heartbeat_whose_connection_died_while_idle_beats_again_at_once(
    postgres_base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The heartbeat's pool does not check a connection before each use (a round trip, and a
    # PostgreSQL transaction, at every beat): a connection that died while idle (the server
    # restarted, or an administrator ended it) fails its next beat, and the heartbeat beats
    # again at once on a fresh connection, without saying it is failing and without losing
    # its confirmation.
    import sqlalchemy as sa

    from durable_swarm.durable._database import PRE_PING_ENV

    monkeypatch.delenv(PRE_PING_ENV, raising=False)  # the default: no check before use
    said: list[str] = []
    name = new_database_name("dswarm_workers", "died")
    postgres_execute(postgres_base_url, f'CREATE DATABASE "{name}"')
    url = with_database(postgres_base_url, name)
    own = Ownership(
        url,
        "me",
        kind="test",
        heartbeat_interval=0.2,
        dead_after=60.0,
        application_version="v",
        say=said.append,
    )
    own.register()
    beats: list[int] = []

    def count_beats(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().startswith(f"UPDATE {PROCESSES_TABLE} SET heartbeat_at"):
            beats.append(1)

    sa.event.listen(own.registry._engine, "before_cursor_execute", count_beats)
    lost: list[bool] = []  # a statement failed on a dead connection (no check caught it)
    sa.event.listen(own.registry._engine, "handle_error", lambda c: lost.append(c.is_disconnect))
    own.start(Runs([]))
    try:
        wait_for(lambda: len(beats) >= 2 and own.confirmed(), "two heartbeats")
        other = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
        with other.begin() as conn:
            ended = (
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": name},
                )
                .scalars()
                .all()
            )
        other.dispose()
        assert ended and all(ended)  # the heartbeat's idle connection, ended under it
        before = len(beats)
        wait_for(lambda: len(beats) >= before + 3, "three more heartbeats")
        assert own.confirmed()
        assert lost == [True]  # one beat failed on the dead connection, and was made again
        assert not [line for line in said if "heartbeat" in line], said
    finally:
        own.stop()
        own.registry.close()
        drop_database(postgres_base_url, name)


class RunsOnTheEngine(Runs):
    """`Runs` whose looks use the ownership thread's engine, as `_Keeper`'s `DBOSClient` does;
    records how many of the engine's connections were checked out when each look began."""

    def __init__(self, engine: Any) -> None:
        super().__init__([])
        self.engine = engine
        self.checked_out: list[int] = []

    def _look(self) -> None:
        import sqlalchemy as sa

        self.checked_out.append(self.engine.pool.checkedout())
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def pending(self, executor_id: str | None) -> list[tuple[str, str, int]]:
        self._look()
        return []

    def settle(self) -> None:
        self._look()


def test_an_idle_process_keeps_one_connection_for_its_heartbeat_and_its_looks(
    make_database_url: Callable[..., str],
) -> None:
    # The beat holds its connection for the beat only: the looks at the process's own pending
    # runs and the recovery queue (DBOS's client on the same engine) come after it went back,
    # so an idle process keeps one connection of its own, and opens none after the first.
    import sqlalchemy as sa

    own = Ownership(
        make_database_url("one-conn", create=True),
        "me",
        kind="test",
        heartbeat_interval=0.05,
        dead_after=0.3,  # a look at its own pending runs every 0.1 s
        application_version="v",
    )
    own.register()
    engine = own.registry.engine
    runs = RunsOnTheEngine(engine)
    opened: list[int] = []
    sa.event.listen(engine, "connect", lambda *args: opened.append(1))
    own.start(runs)
    try:
        wait_for(lambda: len(runs.checked_out) >= 20 and own.confirmed(), "twenty looks")
        own._orphans_at = 0.0  # and a look for runs of executors without a row, at once
        wait_for(lambda: len(runs.checked_out) >= 30, "ten more looks")
    finally:
        own.stop()
    assert set(runs.checked_out) == {0}, runs.checked_out
    assert len(opened) <= 1, f"{len(opened)} connections opened"
    own.registry.close()
