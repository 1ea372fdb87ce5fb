"""The workers' heartbeat table: who is alive, and exactly one claimer per dead worker.

No DBOS here: `ProcessRegistry` is plain SQL on the run database, so these tests are quick and
check the race conditions directly (claims from many threads at once on PostgreSQL and SQLite).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from durable_swarm.durable._ownership import (
    HEAL_RUNS_PER_BEAT,
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
    deadline = time.monotonic() + DEAD_AFTER + 0.3
    while time.monotonic() < deadline:
        assert alive.beat() is not None
        time.sleep(0.05)
    assert [row.executor_id for row in watcher.dead()] == ["silent"]
    assert watcher.dead()[0].age_ms > DEAD_AFTER * 1000


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


def test_a_process_owning_thousands_of_runs_lists_them_less_often(tmp_path: Path) -> None:
    # Thousands of runs waiting for people: all owned here, all running (waiting), none
    # stalled. Listing them at every heartbeat costs what it lists; the heal looks every
    # `owned / HEAL_RUNS_PER_BEAT` heartbeats instead, and at every one while a run it found
    # stalled waits for its second look.
    own = Ownership(
        f"sqlite:///{tmp_path / 'runs.sqlite'}",
        "me",
        kind="test",
        heartbeat_interval=1.0,
        dead_after=6.0,
        application_version="v",
    )
    owned = [f"r{i}" for i in range(3 * HEAL_RUNS_PER_BEAT)]
    looks: list[int] = []
    beat = 0

    def pending_of(
        executor_id: str, version: str, *, untouched_for: float
    ) -> list[tuple[str, str | None]]:
        looks.append(beat)
        return [(run_id, f"token-{run_id}") for run_id in owned]

    running = list(owned)
    handed: list[tuple[str, str | None]] = []
    own.registry.pending_of = pending_of  # type: ignore[method-assign]
    own._running = lambda: running

    def hand_back(run_id: str, token: str | None) -> bool:  # back on its queue
        handed.append((run_id, token))
        owned.remove(run_id)
        return True

    own._hand_back = hand_back
    own._confirmed_until = float("inf")
    for beat in range(9):  # noqa: B007 (pending_of reads it)
        own._heal()
    assert looks == [0, 4, 8]  # 3000 owned: every fourth heartbeat
    running.remove("r7")  # its execution ended on a database error: it stays PENDING here
    for beat in range(9, 20):  # noqa: B007
        own._heal()
    assert looks == [0, 4, 8, 12, 13, 14, 17]  # found at 12, handed back at 13
    assert handed == [("r7", "token-r7")]  # fenced by the token of the execution it saw
    own.registry.close()


def test_a_takeover_line_says_how_many_runs_went_back_in_plain_words() -> None:
    from durable_swarm.durable._ownership import _back

    assert _back(0) == "it left no unfinished run"
    assert _back(1) == "its 1 unfinished run is back on its queue"
    assert _back(3) == "3 of its unfinished runs are back on their queues"
