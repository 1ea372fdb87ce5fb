"""A run waiting for a person, parked instead of live: a prototype on bare DBOS, public API only.

The design (issue 32): a run that reaches a wait and finds no answer *parks*: it cancels itself
(`DBOSClient.cancel_workflow`, from outside its own workflow context, so the call is not recorded
as one of its steps) and its execution ends. Nothing of it stays in any process. An answerer
writes the answer and resumes the run (`DBOS.resume_workflow(id, queue_name=...)`); DBOS runs it
again from the start, replaying its K recorded steps, and this time the run finds the answer and
goes on past the wait. The look for the answer is a plain read of our own table, not a recorded
step, so the replay after the answer diverges from the first execution safely.

Our table `bench_parked(run_id, state, answer)` closes the races with compare-and-set updates on
one row (a row lock on PostgreSQL, the database lock on SQLite):

- the run: cancel itself, then `waiting -> parked` (not if a user cancelled it meanwhile), then
  look again, and if an answer came in the meantime `parked -> resuming` and resume itself;
- the answerer, in one statement: set the answer if there is none yet, and `parked -> resuming`;
  if its statement turned the state to `resuming` it resumes the run;
- so exactly one of them resumes a run, whatever the interleaving; a second answerer finds an
  answer there and is refused; a user's cancel sets `cancelled`, and a run resumed anyway (the
  cancel came between a resumer's CAS and its resume) sees it at the wait and cancels itself.

What it measures, on a SQLite file and a fresh PostgreSQL database:

1. Correctness (asserted): every run ends with its own answer exactly once (one recorded `take`
   step, taken once), including the races: an answer written between the run's look and its park,
   two answerers at once, a cancel of a parked run, and a cancel racing a resume.
2. An idle worker with N parked runs (default 2000; also `--runs 10000`) against the same worker
   with no runs at all and against N bare `DBOS.recv` waits it recovered (the baseline of
   `benchmarks/waiting.py`): resident memory, and so memory per waiting run, and idle CPU.
3. The cost paid at the answer, as a function of K recorded steps before the wait: time from the
   answerer's call to the run going on past the wait, split into pickup (resume until the
   execution starts, i.e. the queue's poll) and replay (start until past the wait); against a
   live `DBOS.recv` wait's time from `DBOS.send` to wake.

    .venv/bin/python benchmarks/parked_waits.py --quick          # 200 runs, small samples
    .venv/bin/python benchmarks/parked_waits.py                  # 2000 runs
    .venv/bin/python benchmarks/parked_waits.py --runs 10000 --backends postgres
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

import sqlalchemy as sa
from _common import current_rss_mb, databases, emit, print_table, run_worker
from dbos import DBOS, DBOSClient, SetWorkflowID

QUEUE = "bench-parked-resume"
TABLE = "bench_parked"

# Per-process bookkeeping, for timing and for the exactly-once checks (never part of the design).
ENTERED: dict[str, float] = {}  # run id -> when its latest execution started
ENTRIES: Counter[str] = Counter()  # run id -> executions started in this process
PASSED: dict[str, float] = {}  # run id -> when it went on past the wait
TAKEN: Counter[str] = Counter()  # run id -> executions of the `take` step (replays excluded)
PARKS: Counter[str] = Counter()  # run id -> times it parked
SELF_RESUMES: Counter[str] = Counter()  # run id -> times it resumed itself (answer raced the park)
# Test hook: called between the run's look and its park (to put an answer in that window).
BETWEEN_LOOK_AND_PARK: dict[str, Any] = {}


class Store:
    """Our table of waits: one row per run at a wait, `state` in waiting / parked / resuming /
    done / cancelled, `answer` set once."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_pre_ping=False)
        if url.startswith("sqlite"):

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(conn: Any, _record: Any) -> None:
                conn.execute("PRAGMA busy_timeout = 30000")

        with self.engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"CREATE TABLE IF NOT EXISTS {TABLE} (run_id TEXT PRIMARY KEY, "
                    "state TEXT NOT NULL, answer TEXT)"
                )
            )

    def _run(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.begin() as conn:
            result = conn.execute(sa.text(sql), params)
            return list(result.fetchall()) if result.returns_rows else [result.rowcount]

    def enter(self, run_id: str) -> None:
        """The run is at its wait (idempotent: a replay finds its row)."""
        self._run(
            f"INSERT INTO {TABLE} (run_id, state) VALUES (:r, 'waiting') "
            "ON CONFLICT (run_id) DO NOTHING",
            r=run_id,
        )

    def look(self, run_id: str) -> tuple[str, str | None]:
        """(state, answer): a plain read, NOT a recorded step."""
        rows = self._run(f"SELECT state, answer FROM {TABLE} WHERE run_id = :r", r=run_id)
        return (rows[0][0], rows[0][1]) if rows else ("absent", None)

    def mark_parked(self, run_id: str) -> bool:
        """CAS waiting -> parked (after the run cancelled itself); False if a user cancelled it
        (or it was parked already: a user resumed it without an answer)."""
        rows = self._run(
            f"UPDATE {TABLE} SET state = 'parked' WHERE run_id = :r "
            "AND state IN ('waiting', 'parked') RETURNING state",
            r=run_id,
        )
        return bool(rows)

    def claim_resume(self, run_id: str) -> bool:
        """CAS parked -> resuming if an answer is in: True for the one resumer that wins."""
        rows = self._run(
            f"UPDATE {TABLE} SET state = 'resuming' WHERE run_id = :r AND state = 'parked' "
            "AND answer IS NOT NULL RETURNING state",
            r=run_id,
        )
        return bool(rows)

    def answer(self, run_id: str, text: str) -> str | None:
        """Set the answer (first answer only) and, if the run is parked, claim its resume, in one
        statement. The state after it ('resuming': this caller must resume the run; 'waiting':
        the live run will see the answer), or None if refused (answered already, cancelled, done,
        or not at a wait)."""
        rows = self._run(
            f"UPDATE {TABLE} SET answer = :a, state = CASE WHEN state = 'parked' "
            "THEN 'resuming' ELSE state END WHERE run_id = :r AND answer IS NULL "
            "AND state IN ('waiting', 'parked') RETURNING state",
            r=run_id,
            a=text,
        )
        return str(rows[0][0]) if rows else None

    def cancel(self, run_id: str) -> bool:
        """A user's cancel, as the library would do it: mark the wait cancelled (honoured by a run
        resumed anyway), then cancel the workflow in DBOS."""
        rows = self._run(
            f"UPDATE {TABLE} SET state = 'cancelled' WHERE run_id = :r "
            "AND state IN ('waiting', 'parked', 'resuming') RETURNING state",
            r=run_id,
        )
        return bool(rows)

    def count(self, state: str) -> int:
        return int(self._run(f"SELECT count(*) FROM {TABLE} WHERE state = :s", s=state)[0][0])


STATE: dict[str, Any] = {}  # "store": Store, "client": DBOSClient (this process's)


def store() -> Store:
    return STATE["store"]


def park(run_id: str) -> None:
    """The run found no answer: cancel itself (through a client, so the call is no step of the
    run), mark itself parked, look again, and resume itself if an answer slipped in."""
    client: DBOSClient = STATE["client"]
    client.cancel_workflow(run_id)
    if not store().mark_parked(run_id):
        return  # cancelled by a user: stays cancelled
    PARKS[run_id] += 1
    if store().claim_resume(run_id):
        SELF_RESUMES[run_id] += 1
        client.resume_workflow(run_id, queue_name=QUEUE)


@DBOS.step(name="bench.parked.work")
async def work(i: int) -> int:
    """One recorded step before the wait (replayed from its recorded output after a park)."""
    return i * 2


@DBOS.step(name="bench.parked.take")
async def take(run_id: str) -> str:
    """Take the answer: a recorded step, so the answer is in the run's history from here on."""
    TAKEN[run_id] += 1

    def read_and_close() -> str:
        rows = store()._run(
            f"UPDATE {TABLE} SET state = 'done' WHERE run_id = :r RETURNING answer", r=run_id
        )
        return str(rows[0][0])

    return await asyncio.to_thread(read_and_close)


@DBOS.workflow(name="bench.parked.run")
async def parked_run(k: int) -> str:
    """K recorded steps, then a wait for a person that parks when there is no answer yet."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    ENTERED[run_id] = time.perf_counter()
    ENTRIES[run_id] += 1
    total = 0
    for i in range(k):
        total += await work(i)
    await asyncio.to_thread(store().enter, run_id)
    state, answer = await asyncio.to_thread(store().look, run_id)
    if state == "cancelled":  # a user's cancel raced a resume: honour it
        await asyncio.to_thread(STATE["client"].cancel_workflow, run_id)
        return "cancelled"
    if answer is None:
        if hook := BETWEEN_LOOK_AND_PARK.get(run_id):
            await asyncio.to_thread(hook)
        await asyncio.to_thread(park, run_id)
        # The execution ends here. DBOS does not record this return (the run is CANCELLED): it
        # checks the recorded outcome once, finds CANCELLED, and lets the execution go.
        return "parked"
    got = await take(run_id)
    PASSED[run_id] = time.perf_counter()
    return f"{got} after {total}"


@DBOS.workflow(name="bench.parked.recv")
async def recv_run(k: int) -> str:
    """The baseline: K recorded steps, then a live `DBOS.recv` wait."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    total = 0
    for i in range(k):
        total += await work(i)
    await DBOS.set_event_async("waiting", True)
    message = await DBOS.recv_async("input", 7 * 24 * 3600.0)
    PASSED[run_id] = time.perf_counter()
    return f"{message} after {total}"


def expected(k: int, answer: str) -> str:
    return f"{answer} after {sum(2 * i for i in range(k))}"


# --- process set-up ---------------------------------------------------------------------------


def launch(url: str, executor_id: str, queue_poll: float) -> None:
    """Bare DBOS (public configuration), our queue for resumes, our table, our client."""
    DBOS(
        config={
            "name": "bench-parked",
            "system_database_url": url,
            "executor_id": executor_id,
            # A park ends an execution with a warning from DBOS ("was cancelled during
            # execution"); the library would want DBOS to take that quietly.
            "log_level": "ERROR",
            # the library's default (DurableSwarm(poll_interval=0.1)); DBOS's own is 1 s
            "notification_listener_polling_interval_sec": queue_poll,
        }
    )
    DBOS.launch()
    DBOS.register_queue(QUEUE, polling_interval_sec=queue_poll, on_conflict="always_update")
    STATE["store"] = Store(url)
    STATE["client"] = DBOSClient(system_database_url=url)


def status_of(run_id: str) -> str:
    status = DBOS.get_workflow_status(run_id)
    return "absent" if status is None else str(status.status)


def wait_until(what: str, check: Any, timeout: float = 600.0, every: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting until {what}")
        time.sleep(every)


def start_parked(run_id: str, k: int) -> None:
    with SetWorkflowID(run_id):
        DBOS.start_workflow(parked_run, k)


def resume_as_answerer(run_id: str, text: str) -> str | None:
    """What the library's `send_input` would do for a parked run."""
    state = store().answer(run_id, text)
    if state == "resuming":
        DBOS.resume_workflow(run_id, queue_name=QUEUE)
    return state


def check_ended(run_id: str, k: int, answer: str) -> None:
    """The run succeeded with its answer, took it exactly once, recorded one `take` step."""
    wait_until(f"{run_id} succeeds", lambda: status_of(run_id) in ("SUCCESS", "ERROR"), 120)
    status = DBOS.get_workflow_status(run_id)
    assert status is not None and status.status == "SUCCESS", (run_id, status)
    assert status.output == expected(k, answer), (run_id, status.output)
    assert TAKEN[run_id] == 1, (run_id, TAKEN[run_id])
    steps = [s["function_name"] for s in DBOS.list_workflow_steps(run_id)]
    assert steps.count("bench.parked.take") == 1, (run_id, steps)
    assert steps.count("bench.parked.work") == k, (run_id, steps)
    assert not any("cancel" in name.lower() or "resume" in name.lower() for name in steps), steps


# --- the checks -------------------------------------------------------------------------------


def check_main(args: argparse.Namespace) -> None:
    launch(args.db, f"bench-park-check-{uuid.uuid4().hex[:6]}", args.queue_poll)
    s = store()
    seen: dict[str, str] = {}
    p = f"chk-{uuid.uuid4().hex[:6]}"

    # 1. The plain path: park, answer, resume, replay, past the wait.
    run = f"{p}-plain"
    start_parked(run, 5)
    wait_until("parked", lambda: s.look(run)[0] == "parked")
    seen["parked status"] = status_of(run)
    assert seen["parked status"] == "CANCELLED", seen
    assert resume_as_answerer(run, "Ada") == "resuming"
    check_ended(run, 5, "Ada")
    assert PARKS[run] == 1 and SELF_RESUMES[run] == 0

    # 2. The answer comes between the look and the park: the run resumes itself.
    run = f"{p}-between"

    def answer_in_the_window(run: str = run) -> None:
        assert s.answer(run, "Bob") == "waiting"

    BETWEEN_LOOK_AND_PARK[run] = answer_in_the_window
    start_parked(run, 3)
    check_ended(run, 3, "Bob")
    assert PARKS[run] == 1 and SELF_RESUMES[run] == 1, (PARKS[run], SELF_RESUMES[run])

    # 3. An answer while the run is live at the wait (before it parks): it takes it directly.
    run = f"{p}-live"
    s.enter(run)
    s.answer(run, "Cy")  # answered before the run even looks
    start_parked(run, 2)
    check_ended(run, 2, "Cy")
    assert PARKS[run] == 0

    # 4. Two answerers at once, many times: one answer wins, one resume.
    for i in range(args.race_rounds):
        run = f"{p}-two-{i}"
        start_parked(run, 2)
        wait_until("parked", lambda run=run: s.look(run)[0] == "parked")
        results: dict[str, str | None] = {}
        barrier = threading.Barrier(2)

        def answerer(
            name: str,
            run: str = run,
            results: dict[str, str | None] = results,
            barrier: threading.Barrier = barrier,
        ) -> None:
            barrier.wait()
            results[name] = resume_as_answerer(run, name)

        threads = [threading.Thread(target=answerer, args=(n,)) for n in ("Dee", "Eve")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [n for n, st in results.items() if st == "resuming"]
        assert len(winners) == 1 and list(results.values()).count(None) == 1, results
        check_ended(run, 2, winners[0])

    # 5. Answers racing the park itself (no hook: real timing), many times.
    for i in range(args.race_rounds):
        run = f"{p}-race-{i}"
        start_parked(run, 1)
        wait_until("at the wait", lambda run=run: s.look(run)[0] != "absent", every=0.0005)
        resume_as_answerer(run, "Fay")
        check_ended(run, 1, "Fay")
    races = [f"{p}-race-{i}" for i in range(args.race_rounds)]
    seen["race: took it live / parked then answerer resumed / resumed itself"] = (
        f"{sum(PARKS[r] == 0 for r in races)} / "
        f"{sum(PARKS[r] == 1 and SELF_RESUMES[r] == 0 for r in races)} / "
        f"{sum(SELF_RESUMES[r] == 1 for r in races)}"
    )

    # 6. A user cancels a parked run: an answer is refused, the run stays cancelled.
    run = f"{p}-cancel"
    start_parked(run, 2)
    wait_until("parked", lambda: s.look(run)[0] == "parked")
    assert s.cancel(run)
    DBOS.cancel_workflow(run)
    assert resume_as_answerer(run, "Gus") is None
    time.sleep(2 * args.queue_poll + 0.5)
    assert status_of(run) == "CANCELLED" and TAKEN[run] == 0

    # 7. A user's cancel lands between a resumer's CAS and its resume: the run, resumed anyway,
    #    sees the cancel at the wait and cancels itself again, never taking the answer.
    run = f"{p}-cancel-race"
    start_parked(run, 2)
    wait_until("parked", lambda: s.look(run)[0] == "parked")
    assert s.answer(run, "Hal") == "resuming"
    assert s.cancel(run)
    DBOS.cancel_workflow(run)
    DBOS.resume_workflow(run, queue_name=QUEUE)  # the resumer's late call
    wait_until("ran again", lambda: ENTRIES[run] == 2)
    time.sleep(2 * args.queue_poll + 0.5)
    assert status_of(run) == "CANCELLED" and TAKEN[run] == 0

    # 8. A user (or the DBOS console) resumes a parked run with no answer: it replays and parks
    #    again; a later answer still resumes it once.
    run = f"{p}-user-resume"
    start_parked(run, 4)
    wait_until("parked", lambda: s.look(run)[0] == "parked")
    DBOS.resume_workflow(run, queue_name=QUEUE)
    wait_until("parked twice", lambda: PARKS[run] == 2)
    assert resume_as_answerer(run, "Ida") == "resuming"
    check_ended(run, 4, "Ida")

    emit({"checks": 8, "two_answerer_rounds": args.race_rounds, **seen})
    os._exit(0)


# --- the idle worker and the latencies ---------------------------------------------------------


def create_main(args: argparse.Namespace) -> None:
    """Start N runs of `kind` (parked or recv) and leave them waiting; die without cleanup."""
    launch(args.db, args.executor, args.queue_poll)
    t0 = time.perf_counter()
    for i in range(args.runs):
        with SetWorkflowID(f"{args.prefix}-{i:05d}"):
            DBOS.start_workflow(parked_run if args.kind == "parked" else recv_run, 3)
    if args.kind == "parked":
        wait_until("all parked", lambda: store().count("parked") >= args.runs, 7200, 0.5)
        # nothing of a parked run is left in this process
        assert all(status_of(f"{args.prefix}-{i:05d}") == "CANCELLED" for i in range(0, 10))
    else:

        def all_waiting() -> bool:
            with store().engine.connect() as conn:
                n = conn.execute(
                    sa.text("SELECT count(*) FROM dbos.workflow_events WHERE key = 'waiting'")
                    if args.db.startswith("postgresql")
                    else sa.text("SELECT count(*) FROM workflow_events WHERE key = 'waiting'")
                ).scalar_one()
            return int(n) >= args.runs

        wait_until("all waiting in recv", all_waiting, 7200, 0.5)
    emit({"create_seconds": time.perf_counter() - t0})
    os._exit(0)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_main(args: argparse.Namespace) -> None:
    """Launch with the creator's executor id (so DBOS recovers its pending runs: the recv waits;
    parked runs are CANCELLED and not recovered), settle, then measure an idle window."""
    t0 = time.perf_counter()
    launch(args.db, args.executor, args.queue_poll)
    if args.kind == "recv":
        import gc

        def live() -> int:
            return sum(1 for o in gc.get_objects() if type(o).__name__ == "Task")

        wait_until("recovered", lambda: live() >= args.runs, 7200, 0.5)
    recovered = time.perf_counter() - t0
    time.sleep(args.settle)
    cpu0, wall0 = cpu_seconds(), time.time()
    time.sleep(args.idle)
    cpu1, wall1 = cpu_seconds(), time.time()
    result = {
        "recover_seconds": recovered,
        "rss_mb": current_rss_mb(),
        "cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0),
        "threads": threading.active_count(),
    }
    if args.kind == "parked":
        # The parked runs still answer: answer a few and check they end right.
        for i in range(min(5, args.runs)):
            run = f"{args.prefix}-{i:05d}"
            assert resume_as_answerer(run, "Zed") == "resuming"
            check_ended(run, 3, "Zed")
    emit(result)
    os._exit(0)


def latency_main(args: argparse.Namespace) -> None:
    """Answer-to-past-the-wait for parked runs with K recorded steps, and send-to-wake for live
    recv waits, one at a time, in this one process."""
    launch(args.db, f"bench-park-lat-{uuid.uuid4().hex[:6]}", args.queue_poll)
    s = store()
    out: dict[str, Any] = {}
    p = uuid.uuid4().hex[:6]
    for k in args.steps:
        runs = [f"lat-{p}-park-{k}-{i}" for i in range(args.sample)]
        for run in runs:
            start_parked(run, k)
        wait_until("parked", lambda runs=runs: all(s.look(r)[0] == "parked" for r in runs))
        total, pickup, replay = [], [], []
        for run in runs:
            before = ENTERED[run]
            t0 = time.perf_counter()
            assert resume_as_answerer(run, "Ada") == "resuming"
            wait_until("passed", lambda run=run: run in PASSED, 120, 0.0005)
            total.append(PASSED[run] - t0)
            assert ENTERED[run] != before
            pickup.append(ENTERED[run] - t0)
            replay.append(PASSED[run] - ENTERED[run])
            check_ended(run, k, "Ada")
        out[f"park-{k}"] = {"total": total, "pickup": pickup, "replay": replay}

        runs = [f"lat-{p}-recv-{k}-{i}" for i in range(args.sample)]
        for run in runs:
            with SetWorkflowID(run):
                DBOS.start_workflow(recv_run, k)
        wait_until(
            "waiting in recv",
            lambda runs=runs: all(DBOS.get_event(r, "waiting", 0) for r in runs),
        )
        time.sleep(0.5)
        woke = []
        for run in runs:
            t0 = time.perf_counter()
            DBOS.send(run, "Ada", topic="input")
            wait_until("woke", lambda run=run: run in PASSED, 120, 0.0005)
            woke.append(PASSED[run] - t0)
        for run in runs:
            wait_until("recv done", lambda run=run: status_of(run) == "SUCCESS")
            status = DBOS.get_workflow_status(run)
            assert status is not None and status.output == expected(k, "Ada")
        out[f"recv-{k}"] = {"total": woke}
    emit(out)
    os._exit(0)


# --- the parent -------------------------------------------------------------------------------


def ms(values: list[float], q: float | None = None) -> str:
    if q is None:
        return f"{1000 * statistics.median(values):.1f}"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


def idle_run(label: str, url: str, kind: str, runs: int, args: argparse.Namespace) -> Any:
    prefix = f"idle-{kind}-{uuid.uuid4().hex[:6]}"
    executor = f"bench-park-{uuid.uuid4().hex[:6]}"
    common = ["--db", url, "--runs", str(runs), "--prefix", prefix, "--executor", executor]
    common += ["--kind", kind, "--queue-poll", str(args.queue_poll)]
    created: dict[str, Any] = {}
    if runs:
        print(f"[{label}] creating {runs} {kind} runs ...", flush=True)
        created = run_worker("parked_waits.py", ["--role", "create", *common], timeout=7200)
    print(f"[{label}] idle worker with {runs} {kind} runs ...", flush=True)
    worker = ["--role", "worker", *common, "--idle", str(args.idle), "--settle", str(args.settle)]
    return {**created, **run_worker("parked_waits.py", worker, timeout=7200)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 runs, small samples")
    parser.add_argument("--runs", type=int, help="waiting runs in the idle worker (default 2000)")
    parser.add_argument("--idle", type=float, default=10.0, help="idle window, seconds")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--sample", type=int, default=10, help="answers timed per K")
    parser.add_argument("--steps", default="0,10,100,1000", help="K values, comma-separated")
    parser.add_argument("--race-rounds", type=int, default=20, help="rounds of each race check")
    parser.add_argument(
        "--queue-poll",
        type=float,
        default=0.1,
        help="polling interval of the resume queue and of DBOS's notification listener, s "
        "(default 0.1: the library's default poll_interval)",
    )
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated of: check,idle,latency,recv (recv: no recv baseline in idle)",
    )
    parser.add_argument("--role", default="parent", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--executor", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="parked", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs is None:
        args.runs = 200 if args.quick else 2000
    if args.quick:
        args.sample, args.race_rounds, args.idle = min(args.sample, 5), 5, min(args.idle, 5.0)
    args.steps = [int(k) for k in str(args.steps).split(",")]
    roles = {"check": check_main, "create": create_main, "worker": worker_main}
    if args.role == "latency":
        latency_main(args)
        return
    if args.role in roles:
        roles[args.role](args)
        return

    wanted, skip = set(args.backends.split(",")), set(args.skip.split(","))
    idle_rows, lat_rows = [], []
    wall = time.perf_counter()
    with databases(postgres="postgres" in wanted) as dbs:
        for label, url in dbs:
            if label not in wanted:
                continue
            base = ["--db", url, "--queue-poll", str(args.queue_poll)]
            if "check" not in skip:
                print(f"[{label}] correctness and races ...", flush=True)
                found = run_worker(
                    "parked_waits.py",
                    ["--role", "check", *base, "--race-rounds", str(args.race_rounds)],
                    timeout=1800,
                )
                print(f"[{label}] checks passed: {found}", flush=True)
            if "latency" not in skip:
                print(f"[{label}] answer latency by K ...", flush=True)
                lat = run_worker(
                    "parked_waits.py",
                    [
                        "--role",
                        "latency",
                        *base,
                        "--sample",
                        str(args.sample),
                        "--steps",
                        ",".join(map(str, args.steps)),
                    ],
                    timeout=3600,
                )
                for k in args.steps:
                    park, recv = lat[f"park-{k}"], lat[f"recv-{k}"]
                    lat_rows.append(
                        [
                            label,
                            k,
                            f"{ms(park['total'])} / {ms(park['total'], 1.0)}",
                            ms(park["pickup"]),
                            ms(park["replay"]),
                            f"{ms(recv['total'])} / {ms(recv['total'], 1.0)}",
                        ]
                    )
            if "idle" not in skip:
                none = idle_run(label, url, "parked", 0, args)
                parked = idle_run(label, url, "parked", args.runs, args)
                recv = (
                    {"rss_mb": float("nan"), "cpu_pct": float("nan"), "create_seconds": 0.0}
                    if "recv" in skip
                    else idle_run(label, url, "recv", args.runs, args)
                )
                n = args.runs
                idle_rows.append(
                    [
                        label,
                        n,
                        f"{none['rss_mb']:.1f}",
                        f"{parked['rss_mb']:.1f}",
                        f"{recv['rss_mb']:.1f}",
                        f"{1024 * (parked['rss_mb'] - none['rss_mb']) / n:.2f}",
                        f"{1024 * (recv['rss_mb'] - none['rss_mb']) / n:.2f}",
                        f"{none['cpu_pct']:.2f}",
                        f"{parked['cpu_pct']:.2f}",
                        f"{recv['cpu_pct']:.2f}",
                        f"{parked['create_seconds']:.0f} / {recv['create_seconds']:.0f}",
                    ]
                )
    if lat_rows:
        print_table(
            f"Cost at the answer, one answer at a time, resume queue and notifications "
            f"polled every {args.queue_poll:g} s; {args.sample} runs per K (ms)",
            [
                "db",
                "K steps",
                "parked: answer->past p50 / max",
                "pickup p50",
                "replay p50",
                "live recv: send->wake p50 / max",
            ],
            lat_rows,
        )
    if idle_rows:
        print_table(
            f"Idle worker, {args.idle:g} s window: no runs vs N parked runs vs N live "
            "DBOS.recv waits (K=3)",
            [
                "db",
                "N",
                "RSS MB none",
                "RSS parked",
                "RSS recv",
                "KB/run parked",
                "KB/run recv",
                "CPU % none",
                "CPU % parked",
                "CPU % recv",
                "create s parked / recv",
            ],
            idle_rows,
        )
    print(f"\ntotal wall time {time.perf_counter() - wall:.0f} s")


if __name__ == "__main__":
    main()
