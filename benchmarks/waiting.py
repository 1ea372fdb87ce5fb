"""Many durable runs waiting for a person: what one idle worker costs, and how fast an answer
resumes a run.

For each database (a SQLite file, and a fresh PostgreSQL database if the server is reachable):

1. A *creator* process starts N runs (default 10,000; `--quick`: 100) with `DurableSwarm.astart`;
   each run's first model call asks the person (`ask_user`), so it waits for input: it parks
   (`durable_swarm.durable._waits`: its execution ends, DBOS shows it CANCELLED, the library's
   waits table holds its wait). Once every run waits, the creator dies (`os._exit`, no cleanup).
2. An *idle worker* process with the creator's executor id starts: DBOS recovers whatever was
   left pending at launch (a parked run is not: nothing of it is loaded). After a short settle,
   the worker measures itself over an idle window (default 10 s) while all N wait: process CPU
   seconds (all threads, getrusage, and each thread's own from its CPU clock, to show which
   thread costs what), resident memory, threads, and database statements per second, counted
   inside the worker by a SQLAlchemy `before_cursor_execute` hook (on both databases); on
   PostgreSQL also the database's committed transactions per second from `pg_stat_database`.
3. A *sender* process answers a random sample of the runs (in random order), one at a time, with
   `send_input` and times the call itself, then from its return until the run stops waiting for
   input ("resumed": a process took it from DBOS's queue, replayed its log to the wait and took
   the answer) and until the run succeeded (its next model call and end).

Two baselines, measured in the same run on fresh databases: the same three steps for N bare DBOS
workflows that each set the same event and wait in `DBOS.recv_async` (no agent, no model),
answered with `DBOS.send` (`bare`: DBOS recovers each at launch and it waits live); and the same
idle worker on a database with no run at all (`none`), against which the memory each waiting
run holds in the worker is computed: (RSS with N waiting - RSS with none) / N. Nothing is
asserted; the databases are removed at the end.

    .venv/bin/python benchmarks/waiting.py             # 10,000 runs: minutes, run it rarely
    .venv/bin/python benchmarks/waiting.py --quick     # 100 runs (a smoke run)
    .venv/bin/python benchmarks/waiting.py --runs 2000 --backends sqlite --poll-interval 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import threading
import time
import uuid
from typing import Any

from _common import current_rss_mb, databases, emit, print_table, run_worker
from dbos import DBOS, SetWorkflowID

from durable_swarm import Agent, DurableClient, DurableSwarm, ask_user
from durable_swarm.testing import Reply, ScriptedClient, ToolCall, calls, text

QUESTION = "What is your name?"
# Before the idle window. PostgreSQL's per-database counters lag: a backend flushes its counts
# when it has been idle for up to 10 s, so the recovery's transactions must be flushed first.
SETTLE_SECONDS = {"sqlite": 3.0, "postgresql": 12.0}


def make_agent() -> Agent:
    """The benchmark agent; defined the same way in every process (recovery finds it by name)."""
    return Agent(name="waiter", model="bench-model", instructions="Ask.", functions=[ask_user])


def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """Ask the person first; greet them once the answer is in."""
    if messages[-1].get("role") == "tool":
        return text(f"Hello {messages[-1]['content']}.")
    return calls(ToolCall("ask_user", {"question": QUESTION}))


@DBOS.workflow(name="bench.waiting.bare")
async def bare_wait() -> str:
    """The baseline: what a durable wait does, on bare DBOS (publish the wait, recv, clear)."""
    await DBOS.set_event_async("waiting_for", {"kind": "input", "prompt": QUESTION})
    while not isinstance(message := await DBOS.recv_async("input", 7 * 24 * 3600.0), dict):
        pass
    await DBOS.set_event_async("waiting_for", None)
    return str(message.get("text", ""))


def run_ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


def sys_db() -> Any:
    """DBOS's system database object in this process (internal; for counting only)."""
    import dbos._dbos as dbos_internals

    return dbos_internals._dbos_global_instance._sys_db  # type: ignore[union-attr]


def count_waiting(kind: str, url: str) -> int:
    """Runs that wait: bare ones whose `waiting_for` event was set (every run waits once and is
    never answered here), durable ones whose wait is parked."""
    import sqlalchemy as sa

    if kind == "durable":
        from durable_swarm.durable._tables import engine_for
        from durable_swarm.durable._waits import WAITS_TABLE

        with engine_for(url).connect() as conn:
            query = sa.text(f"SELECT COUNT(*) FROM {WAITS_TABLE} WHERE state = 'parked'")
            try:
                return int(conn.execute(query).scalar_one())
            except sa.exc.DBAPIError:
                return 0  # no run parked yet (no table)
    db = sys_db()
    events = db.tables.workflow_events
    with db.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(events).where(events.c.key == "waiting_for")
        return int(conn.execute(query).scalar_one())


# --- the creator ------------------------------------------------------------------------------


async def create_main(args: argparse.Namespace) -> None:
    # It never receives anything, so its own polling for messages is slowed right down.
    swarm = DurableSwarm(
        ScriptedClient(script), database_url=args.db, executor_id=args.executor, poll_interval=30
    ).launch()
    agent = make_agent()
    messages = [{"role": "user", "content": "Hi."}]
    start = time.perf_counter()
    for run_id in run_ids(args.prefix, 0 if args.kind == "none" else args.runs):
        if args.kind == "bare":
            with SetWorkflowID(run_id):
                await DBOS.start_workflow_async(bare_wait)
        else:
            await swarm.astart(agent, messages, run_id=run_id)
    started = time.perf_counter() - start
    if args.kind == "none":
        emit({"start_seconds": started, "all_waiting_seconds": 0.0})
        os._exit(0)
    deadline = time.monotonic() + max(600.0, args.runs * 0.2)
    while (waiting := await asyncio.to_thread(count_waiting, args.kind, args.db)) < args.runs:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {waiting} of {args.runs} runs wait")
        await asyncio.sleep(1.0)
    emit({"start_seconds": started, "all_waiting_seconds": time.perf_counter() - start})
    os._exit(0)  # a crash, as far as the runs are concerned: they wait in the database


# --- the idle worker --------------------------------------------------------------------------


class StatementCounter:
    """Counts every SQL statement this process sends, on every SQLAlchemy engine."""

    def __init__(self) -> None:
        import sqlalchemy as sa

        self.count = 0
        self._lock = threading.Lock()
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: Any) -> None:
        with self._lock:
            self.count += 1


def pg_transactions(url: str) -> int | None:
    """Committed + rolled back transactions of the database so far (PostgreSQL only)."""
    if not url.startswith("postgresql"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else None


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each live thread of this process, by thread name (numbered pool
    threads grouped under one name), from Linux per-thread CPU clocks."""
    found: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ProcessLookupError):
            continue  # it ended meanwhile
        name = re.sub(r"\d+", "N", thread.name)
        found[name] = found.get(name, 0.0) + seconds
    return found


def waiting_runs(kind: str, url: str) -> int:
    """How many runs wait: in DBOS's `recv` in this process (bare), or parked in the database
    (durable: none of them is in this process)."""
    if kind == "bare":
        return len(sys_db().notifications_map.snapshot())
    if kind == "none":
        return 0
    return count_waiting(kind, url)


def worker_main(args: argparse.Namespace) -> None:
    counter = StatementCounter()
    make_agent()
    swarm = DurableSwarm(
        ScriptedClient(script),
        database_url=args.db,
        executor_id=args.executor,
        poll_interval=args.poll_interval,
    )
    start = time.perf_counter()
    swarm.launch()  # DBOS recovers this executor's pending runs
    deadline = time.monotonic() + max(600.0, args.runs * 0.5)
    wanted = 0 if args.kind == "none" else args.runs
    while (waiters := waiting_runs(args.kind, args.db)) < wanted:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {waiters} of {args.runs} runs were recovered")
        time.sleep(0.2)
    recovered = time.perf_counter() - start
    settle = SETTLE_SECONDS["postgresql" if args.db.startswith("postgresql") else "sqlite"]
    time.sleep(settle if args.settle is None else args.settle)

    xact0, queries0, cpu0, wall0 = (
        pg_transactions(args.db),
        counter.count,
        cpu_seconds(),
        time.time(),
    )
    threads0 = thread_cpu()
    time.sleep(args.idle)
    threads1 = thread_cpu()
    xact1, queries1, cpu1, wall1 = (
        pg_transactions(args.db),
        counter.count,
        cpu_seconds(),
        time.time(),
    )
    window = wall1 - wall0
    idle = {
        "recover_seconds": recovered,
        "cpu_seconds": cpu1 - cpu0,
        "window": window,
        "rss_mb": current_rss_mb(),
        "threads": threading.active_count(),
        "statements_per_s": (queries1 - queries0) / window,
        # minus the two transactions of our own measurement
        "xact_per_s": None if xact0 is None or xact1 is None else (xact1 - xact0 - 1) / window,
        "waiters": waiting_runs(args.kind, args.db),
        # each thread's share of a core over the window, largest first
        "thread_cpu_pct": dict(
            sorted(
                (
                    (name, round(100 * (seconds - threads0.get(name, 0.0)) / window, 2))
                    for name, seconds in threads1.items()
                ),
                key=lambda item: -item[1],
            )
        ),
    }

    if args.kind == "none":
        emit({**idle, "send": [], "resumed": [], "finished": []})
        return
    # A random sample in random order (the order runs were created in could favour the first).
    sample = random.Random(0).sample(run_ids(args.prefix, args.runs), min(args.sample, args.runs))
    sender = run_worker(
        "waiting.py",
        [
            "--role",
            "sender",
            "--db",
            args.db,
            "--kind",
            args.kind,
            "--runs-json",
            json.dumps(sample),
        ],
        timeout=args.sample * 300,
    )
    emit({**idle, **sender})


# --- the sender -------------------------------------------------------------------------------


def sender_main(args: argparse.Namespace) -> None:
    """Answer the sampled runs one at a time. Durable runs are answered as an app's API process
    answers them: through a thin `DurableClient`, which launches no DBOS (a process that
    launched DBOS without the agents would serve DBOS's queue too, and a run resumed there
    would park for its missing agent until a worker's sweep moves it on)."""
    if args.kind == "bare":
        DurableSwarm(
            database_url=args.db, executor_id=f"bench-sender-{uuid.uuid4().hex[:6]}"
        ).launch()
    client = DurableClient(args.db) if args.kind != "bare" else None
    send, resumed, finished = [], [], []
    for run_id in json.loads(args.runs_json):
        t0 = time.perf_counter()
        if client is None:
            DBOS.send(run_id, {"text": "Ada"}, topic="input")
        else:
            client.send_input(run_id, "Ada")
        t1 = time.perf_counter()
        if client is None:
            while DBOS.get_all_events(run_id).get("waiting_for"):
                time.sleep(0.001)
            t2 = time.perf_counter()
            while (status := DBOS.get_workflow_status(run_id)) is None or (
                status.status != "SUCCESS"
            ):
                if status is not None and status.status not in ("PENDING", "ENQUEUED"):
                    raise SystemExit(f"run {run_id} ended {status.status}")
                time.sleep(0.001)
        else:
            while (info := client.get_run(run_id)).status == "waiting_for_input":
                time.sleep(0.001)
            t2 = time.perf_counter()
            while info.status != "succeeded":
                if info.status not in ("pending", "queued", "running", "waiting_for_input"):
                    raise SystemExit(f"run {run_id} ended {info.status}")
                time.sleep(0.001)
                info = client.get_run(run_id)
        t3 = time.perf_counter()
        send.append(t1 - t0)
        resumed.append(t2 - t1)
        finished.append(t3 - t1)
    if client is None:
        if (output := DBOS.get_workflow_status(run_id).output) != "Ada":  # type: ignore[union-attr]
            raise SystemExit(f"unexpected end of bare run {run_id}: {output!r}")
    elif (last := client.get_run(run_id)).messages[-1]["content"] != "Hello Ada.":
        raise SystemExit(f"unexpected end of run {run_id}: {last.messages[-1]}")
    emit({"send": send, "resumed": resumed, "finished": finished})
    os._exit(0)  # no DBOS shutdown wait


# --- the parent -------------------------------------------------------------------------------


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def measure(label: str, url: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"wait-{kind}-{uuid.uuid4().hex[:6]}"
    executor = f"bench-waiting-{uuid.uuid4().hex[:6]}"
    common = ["--db", url, "--runs", str(args.runs), "--prefix", prefix, "--executor", executor]
    common += ["--kind", kind]
    print(f"[{label}] creating {args.runs} waiting {kind} runs ...", flush=True)
    created = run_worker("waiting.py", ["--role", "create", *common], timeout=7200)
    print(
        f"[{label}] all waiting after {created['all_waiting_seconds']:.0f} s; "
        "starting the idle worker ...",
        flush=True,
    )
    worker_args = ["--role", "worker", *common, "--idle", str(args.idle)]
    worker_args += ["--sample", str(args.sample), "--poll-interval", str(args.poll_interval)]
    if args.settle is not None:
        worker_args += ["--settle", str(args.settle)]
    result = run_worker("waiting.py", worker_args, timeout=7200)
    return {**created, **result}


def ratio(durable: float | None, bare: float | None, fmt: str = ".2f") -> str:
    """`durable (x ratio to bare)`, as printed in the table."""
    if durable is None:
        return "-"
    if not bare:
        return f"{durable:{fmt}}"
    return f"{durable:{fmt}} ({durable / bare:.2f}x)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 runs instead of 10,000")
    parser.add_argument("--runs", type=int, help="how many waiting runs (default 10,000)")
    parser.add_argument("--idle", type=float, default=10.0, help="idle window, seconds")
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds between recovery and the idle window (default 3 on SQLite, 12 on "
        "PostgreSQL; `--quick`: 1)",
    )
    parser.add_argument("--sample", type=int, default=20, help="runs answered for latency")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.1,
        help="DurableSwarm(poll_interval=) of the worker",
    )
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated")
    parser.add_argument(
        "--kinds",
        default="none,bare,durable",
        help="comma-separated of none, bare, durable; 'durable' alone skips the baselines",
    )
    parser.add_argument("--role", default="parent", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--executor", help=argparse.SUPPRESS)
    parser.add_argument("--runs-json", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="durable", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs is None:
        args.runs = 100 if args.quick else 10_000
    if args.quick and args.settle is None:
        args.settle = 1.0

    if args.role == "create":
        asyncio.run(create_main(args))
        return
    if args.role == "worker":
        worker_main(args)
        return
    if args.role == "sender":
        sender_main(args)
        return

    wanted = set(args.backends.split(","))
    rows = []
    wall = time.perf_counter()
    results: dict[tuple[str, str], dict[str, Any]] = {}
    kinds = [kind for kind in ("none", "bare", "durable") if kind in args.kinds.split(",")]
    for kind in kinds:  # each kind on fresh databases of its own
        with databases(postgres="postgres" in wanted) as dbs:
            for label, url in dbs:
                if label in wanted:
                    results[label, kind] = measure(label, url, kind, args)
    for label in ("sqlite", "postgres"):
        if (label, "bare") in results and (label, "durable") not in results:
            print(f"[{label}] bare: {json.dumps(results[label, 'bare'])}")
        if (label, "durable") in results and (label, "bare") not in results:
            r = results[label, "durable"]
            top = list(r["thread_cpu_pct"].items())[:6]
            empty = results.get((label, "none"))
            held = ""
            if empty is not None:
                kb = 1024 * (r["rss_mb"] - empty["rss_mb"]) / args.runs
                held = (
                    f"RSS {r['rss_mb']:.1f} MB against {empty['rss_mb']:.1f} MB with no run "
                    f"({kb:.2f} KB per waiting run), idle CPU with no run "
                    f"{100 * empty['cpu_seconds'] / empty['window']:.2f}% of a core; "
                )
            print(
                f"[{label}] durable, no bare baseline: {held}idle CPU "
                f"{100 * r['cpu_seconds'] / r['window']:.2f}% of a core, "
                f"{r['statements_per_s']:.0f} statements/s, resumed in "
                f"{ms(r['resumed'], 0.5)}/{ms(r['resumed'], 1.0)} ms (p50/max), by thread: "
                + ", ".join(f"{name} {pct:.2f}%" for name, pct in top)
            )
        elif (label, "durable") in results:
            r, bare = results[label, "durable"], results[label, "bare"]
            empty = results.get((label, "none"))
            per_run = "-"
            if empty is not None:
                kb = 1024 * (r["rss_mb"] - empty["rss_mb"]) / args.runs
                bare_kb = 1024 * (bare["rss_mb"] - empty["rss_mb"]) / args.runs
                per_run = f"{kb:.2f} / {bare_kb:.1f}"
            rows.append(
                [
                    label,
                    args.runs,
                    f"{r['all_waiting_seconds']:.0f} / {bare['all_waiting_seconds']:.0f}",
                    ratio(r["recover_seconds"], bare["recover_seconds"], ".1f"),
                    ratio(
                        100 * r["cpu_seconds"] / r["window"],
                        100 * bare["cpu_seconds"] / bare["window"],
                        ".1f",
                    ),
                    ratio(r["rss_mb"], bare["rss_mb"], ".0f"),
                    per_run,
                    "-" if empty is None else f"{100 * empty['cpu_seconds'] / empty['window']:.1f}",
                    f"{r['threads']} / {bare['threads']}",
                    ratio(r["statements_per_s"], bare["statements_per_s"], ".0f"),
                    ratio(r["xact_per_s"], bare["xact_per_s"], ".0f"),
                    f"{ms(r['send'], 0.5)} / {ms(bare['send'], 0.5)}",
                    f"{ms(r['resumed'], 0.5)}/{ms(r['resumed'], 0.9)}/{ms(r['resumed'], 1.0)}"
                    f" / {ms(bare['resumed'], 0.5)}",
                    f"{ms(r['finished'], 0.5)}",
                ]
            )
            print(f"[{label}] done: {json.dumps({'durable': r, 'bare': bare})}", flush=True)
            for kind, found in (("durable", r), ("bare", bare)):
                top = list(found["thread_cpu_pct"].items())[:6]
                where = ", ".join(f"{name} {pct:.2f}%" for name, pct in top)
                print(f"[{label}] {kind} idle CPU by thread (% of a core): {where}")
    if not rows:  # no baseline: no ratios to print
        print(f"\ntotal wall time {time.perf_counter() - wall:.0f} s")
        return
    print_table(
        f"{args.runs} runs waiting for input; one idle worker (poll_interval "
        f"{args.poll_interval} s), idle window {args.idle:.0f} s, {args.sample} answers. "
        "Baselines: as many bare DBOS workflows waiting in DBOS.recv (ratios: durable / bare; "
        "'a / b': durable, then bare), and the same worker with no run at all ('no runs')",
        [
            "db",
            "runs",
            "create s",
            "recover s",
            "idle CPU % of a core",
            "RSS MB",
            "KB per waiting run / bare",
            "idle CPU %, no runs",
            "threads",
            "SQL stmts/s",
            "pg xact/s",
            "send ms p50",
            "resumed ms p50/p90/max / bare p50",
            "finished ms p50",
        ],
        rows,
    )
    print(f"\ntotal wall time {time.perf_counter() - wall:.0f} s")


if __name__ == "__main__":
    main()
