"""How fast a restarted process finishes runs that a killed one left pending.

For each database (SQLite, PostgreSQL):
  1. a child process starts N durable runs (`astart`, model -> tool -> model) against a
     `FakeOpenAIServer` whose answers take an hour, so every run blocks in its first model call;
     once it counts N pending runs (DBOS `list_workflows`) and the server holds N requests in
     flight, it is killed with SIGKILL;
  2. a new process with a fast server (no latency) launches: it finds the killed process dead
     (its pid is gone) and puts its pending runs back on their queues, which DBOS's queue thread
     dequeues; it measures the seconds from just before launch until none is unfinished, and
     checks that all N succeeded. Each recovered run makes 2 model calls (the interrupted one
     again, then the next), so the fast server must see 2N requests.

The baseline, on fresh databases of its own: bare DBOS recovery, i.e. N bare DBOS workflows making
the same steps and `openai` calls (`_common.bare_run`) in a process that launches DBOS itself (same
configuration, a fixed executor id, no durable-swarm), recovered by DBOS's own launch in a new
process with that executor id. The table prints each against bare. `--per-run` adds durable runs
put back on their queues by DBOS's own recovery, one transaction per run (before batching).

Phases, from the recovering process: `re-enqueue` (until the last pending run is back on a queue:
DBOS's launch recovery for bare runs, the takeover of the dead process for durable ones), the
first / median / last dequeue (DBOS's `dequeued_at`) and completion (`completed_at`), each from
just before launch; and the recovering process's CPU time per recovered run (user + system; the
fake model server and the database run in other processes).

    .venv/bin/python benchmarks/recovery.py            # N = 1000
    .venv/bin/python benchmarks/recovery.py --quick    # N = 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

from _common import (
    BARE_CLIENT,
    BENCH_DIR,
    aiohttp_available,
    databases,
    emit,
    launch_bare_dbos,
    make_agent,
    make_async_client,
    median,
    print_table,
    result_of,
    run_worker,
    start_bare_run,
    tool_script,
)

from durable_swarm.testing import FakeOpenAIServer

MESSAGES = [{"role": "user", "content": "Look one thing up, please."}]
READY = "READY"
UNFINISHED = ["PENDING", "ENQUEUED"]
BARE_EXECUTOR = "bench-bare-executor"


def list_runs(status: str | list[str], kind: str) -> list[Any]:
    from dbos import DBOS

    from durable_swarm.durable._log import WORKFLOW_NAME

    name = "bench.bare_run" if kind == "bare" else WORKFLOW_NAME
    return DBOS.list_workflows(status=status, name=name, load_input=False, load_output=False)


def count_runs(status: str | list[str], kind: str) -> int:
    return len(list_runs(status, kind))


class PhaseClock:
    """When the recovering process finished putting the pending runs back on a queue (benchmark
    instrumentation: wraps the call that does it, DBOS's launch recovery for bare runs or the
    library's takeover of a dead process for durable ones), and the CPU that took."""

    def __init__(self) -> None:
        self.done: float | None = None
        self.cpu = 0.0

    def wrap(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu += time.thread_time() - cpu
                self.done = time.time()

        return timed

    def install(self, kind: str) -> None:
        if kind == "bare":
            import dbos._dbos as dbos_module

            dbos_module.startup_recovery_thread = self.wrap(dbos_module.startup_recovery_thread)
        else:
            import durable_swarm.durable._dbos as ours

            ours.recover_runs_of = self.wrap(ours.recover_runs_of)


# --- child processes -----------------------------------------------------------------------


async def start_and_block(args: argparse.Namespace) -> None:
    """Start N runs that block in their first model call; report when all are pending."""
    from durable_swarm import DurableSwarm

    client = make_async_client(args.base_url, args.http, max_retries=0)
    BARE_CLIENT["client"] = client
    if args.kind == "bare":
        await asyncio.to_thread(launch_bare_dbos, args.db, BARE_EXECUTOR)
    else:
        swarm = DurableSwarm(client=client, database_url=args.db).launch()
        agent = make_agent()
    started = time.perf_counter()
    if args.kind == "bare":
        ids = [f"bare-{i}" for i in range(args.n)]
        await asyncio.gather(*(start_bare_run(MESSAGES, "lookup", run_id) for run_id in ids))
    else:
        await asyncio.gather(*(swarm.astart(agent, MESSAGES) for _ in range(args.n)))
    while (pending := await asyncio.to_thread(count_runs, "PENDING", args.kind)) < args.n:
        await asyncio.sleep(0.1)
    print(f"{READY} {pending} {time.perf_counter() - started:.3f}", flush=True)
    await asyncio.sleep(3600)  # the parent kills us


def recover(args: argparse.Namespace) -> dict[str, Any]:
    """Launch (the pending runs are recovered) and wait until none is left unfinished."""
    from durable_swarm import DurableSwarm

    client = make_async_client(args.base_url, args.http)
    BARE_CLIENT["client"] = client
    swarm = DurableSwarm(client=client, database_url=args.db)
    make_agent()  # recovery finds the agent by name in the registry, as an app would
    if args.kind == "per-run":  # the library before batching: DBOS's recovery, a run at a time
        import durable_swarm.durable._dbos as ours

        ours.BATCHED_RECOVERY_DBOS = ()
    clock = PhaseClock()
    clock.install(args.kind)
    cpu = time.process_time()
    epoch, started = time.time(), time.perf_counter()
    if args.kind == "bare":
        launch_bare_dbos(args.db, BARE_EXECUTOR)
    else:
        swarm.launch()
    launched = time.perf_counter() - started
    while count_runs(UNFINISHED, args.kind):
        time.sleep(0.2)  # a listing costs CPU in the measured process: not too often
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    runs = list_runs("SUCCESS", args.kind)
    me = executor_of_this_process(args.kind)

    def spread(stamps: list[int | None]) -> list[float]:
        values = sorted((stamp / 1000 - epoch) for stamp in stamps if stamp)
        return [values[0], median(values), values[-1]] if values else [0.0, 0.0, 0.0]

    return {
        "seconds": seconds,
        "launch": launched,
        "succeeded": len(runs),
        "reenqueued": (clock.done - epoch) if clock.done else 0.0,
        "reenqueue_cpu": clock.cpu,
        "dequeued": spread([run.dequeued_at for run in runs]),
        "completed": spread([run.completed_at for run in runs]),
        "cpu": cpu,
        "mine": sum(1 for run in runs if run.executor_id == me),
    }


def executor_of_this_process(kind: str) -> str:
    if kind == "bare":
        return BARE_EXECUTOR
    from durable_swarm.durable._dbos import executor_id

    return executor_id()


# --- parent ---------------------------------------------------------------------------------


def leave_pending(db: str, n: int, kind: str, args: argparse.Namespace) -> float:
    """Step 1: N runs blocked in a child process, then SIGKILL. Returns the child's start time."""
    with FakeOpenAIServer(tool_script(1), latency=3600) as slow:
        cmd = [sys.executable, str(BENCH_DIR / "recovery.py"), "--child", "start", "--db", db]
        cmd += ["--n", str(n), "--base-url", slow.base_url, "--http", args.http, "--kind", kind]
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            for line in child.stdout:
                if line.startswith(READY):
                    _, pending, start_seconds = line.split()
                    break
            else:
                raise RuntimeError(f"the child exited ({child.wait()}) before starting {n} runs")
            deadline = time.monotonic() + 120
            while slow.stats["in_flight"] < n and time.monotonic() < deadline:
                time.sleep(0.05)
            if int(pending) != n or slow.stats["in_flight"] != n:
                raise RuntimeError(
                    f"expected {n} pending runs each waiting for the model, got {pending} "
                    f"pending and {slow.stats['in_flight']} model calls in flight"
                )
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    return float(start_seconds)


def recover_measured(
    label: str, db: str, n: int, kind: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Leave N runs of `kind` pending on `db`, then time their recovery in a new process."""
    start_seconds = leave_pending(db, n, kind, args)
    print(f"  {label}: {n} {kind} runs pending, killed", flush=True)
    with FakeOpenAIServer(tool_script(1)) as fast:
        worker_args = ["--child", "recover", "--db", db, "--n", str(n), "--kind", kind]
        worker_args += ["--base-url", fast.base_url, "--http", args.http]
        r = run_worker("recovery.py", worker_args)
        model_calls = fast.stats["answered"]
    if r["succeeded"] != n or model_calls != 2 * n:
        raise RuntimeError(
            f"{label}: {r['succeeded']} of {n} {kind} runs succeeded after recovery, with "
            f"{model_calls} model calls (expected {2 * n})"
        )
    return {**r, "start": start_seconds, "model_calls": model_calls}


def recover_spread(label: str, db: str, n: int, takers: int, args: argparse.Namespace) -> Any:
    """Leave N durable runs pending on `db` (started without a queue, as an app's own runs are),
    then start `takers` recovering processes at once, each with N / 10 slots
    (`DURABLE_SWARM_RECOVERY_SLOTS`); returns their results and the seconds until the last of
    them saw no run unfinished."""
    leave_pending(db, n, "durable", args)
    print(f"  {label}: {n} durable runs pending, killed; {takers} takers", flush=True)
    with FakeOpenAIServer(tool_script(1)) as fast:
        worker_args = ["--child", "recover", "--db", db, "--n", str(n), "--kind", "durable"]
        worker_args += ["--base-url", fast.base_url, "--http", args.http]
        cmd = [sys.executable, str(BENCH_DIR / "recovery.py"), *worker_args]
        env = {**os.environ, "DURABLE_SWARM_RECOVERY_SLOTS": str(max(1, n // 10))}
        children = [
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            for _ in range(takers)
        ]
        results = []
        for child in children:
            out, err = child.communicate(timeout=1800)
            results.append(result_of(subprocess.CompletedProcess(cmd, child.returncode, out, err),
                                     "a recovering process"))  # fmt: skip
        model_calls = fast.stats["answered"]
    finished = max(r["succeeded"] for r in results)
    if finished != n or model_calls != 2 * n or sum(r["mine"] for r in results) != n:
        raise RuntimeError(
            f"{label}: {finished} of {n} runs succeeded with {takers} takers "
            f"({[r['mine'] for r in results]} each), {model_calls} model calls (expected {2 * n})"
        )
    return results, max(r["seconds"] for r in results)


def spread_table(n: int, args: argparse.Namespace, bare: dict[str, float]) -> None:
    """Durable runs of a dead process recovered by 1 and by 3 processes at once, against bare
    DBOS recovering the same number of runs in one process."""
    rows = []
    for takers in (1, 3):  # fresh databases for each
        with databases(postgres=not args.no_postgres) as dbs:
            for label, db in dbs:
                if args.no_sqlite and label == "sqlite":
                    continue
                results, seconds = recover_spread(label, db, n, takers, args)
                shares = sorted((r["mine"] for r in results), reverse=True)
                rows.append(
                    [
                        label,
                        takers,
                        n,
                        " / ".join(str(s) for s in shares),
                        f"{100 * shares[0] / n:.0f}%",
                        f"{seconds:.2f}",
                        f"{bare[label]:.2f}",
                        f"{seconds / (bare[label] / takers):.2f}x",
                        f"{1000 * sum(r['cpu'] for r in results) / n:.1f}",
                    ]
                )
    print_table(
        "Spread: a dead process's runs (started without a queue) recovered by several live "
        f"processes at once; each takes only its free slots ({max(1, n // 10)} each, "
        "DURABLE_SWARM_RECOVERY_SLOTS). Goal: none over ~40% with 3, and no slower than "
        "bare / takers. "
        f"{os.cpu_count()} CPU cores here, shared with the model server and the database.",
        [
            "database",
            "takers",
            "N",
            "runs per taker",
            "largest share",
            "recover all s",
            "bare, 1 process s",
            "vs bare / takers",
            "CPU ms/run (all takers)",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 50")
    parser.add_argument("--n", type=int, help="runs left pending (default 1000)")
    parser.add_argument(
        "--http",
        choices=["httpx", "aiohttp"],
        default="httpx",
        help="openai transport (default httpx, openai's own)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument(
        "--per-run",
        action="store_true",
        help="also durable runs put back on their queues by DBOS's own recovery, one "
        "transaction per run (this library before it batched them)",
    )
    parser.add_argument(
        "--no-spread",
        action="store_true",
        help="skip the table of 1 and 3 processes taking over a dead process's runs",
    )
    parser.add_argument("--child", choices=["start", "recover"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="durable", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.http == "aiohttp" and not aiohttp_available():
        parser.error("--http aiohttp needs openai[aiohttp] (pip install httpx-aiohttp)")
    n = args.n or (50 if args.quick else 1000)
    if args.child == "start":
        asyncio.run(start_and_block(args))
        return
    if args.child == "recover":
        emit(recover(args))
        return

    results: dict[tuple[str, str], dict[str, Any]] = {}
    kinds = ("bare", "durable", "per-run") if args.per_run else ("bare", "durable")
    for kind in kinds:  # each kind on fresh databases of its own
        with databases(postgres=not args.no_postgres) as dbs:
            for label, db in dbs:
                if not (args.no_sqlite and label == "sqlite"):
                    results[label, kind] = recover_measured(label, db, n, kind, args)
    rows = []
    for (label, kind), r in sorted(
        results.items(), key=lambda item: (item[0][0], kinds.index(item[0][1]))
    ):
        bare = results[label, "bare"]
        rows.append(
            [
                label,
                kind,
                n,
                f"{r['start']:.2f}",
                f"{r['launch']:.2f}",
                f"{r['reenqueued']:.2f}",
                " / ".join(f"{t:.2f}" for t in r["dequeued"]),
                " / ".join(f"{t:.2f}" for t in r["completed"]),
                f"{r['seconds']:.2f}",
                f"{r['seconds'] / bare['seconds']:.2f}x",
                f"{1000 * r['cpu'] / n:.1f}",
                f"{1000 * r['reenqueue_cpu'] / n:.2f}",
                f"{r['cpu'] / bare['cpu']:.2f}x",
                r["model_calls"],
            ]
        )
    print_table(
        f"Recovery of runs left pending by SIGKILL (openai on {args.http}; model without latency)."
        " Baseline: bare DBOS recovery (bare DBOS workflows with the same steps and openai calls,"
        " recovered by DBOS's launch)",
        [
            "database",
            "runs",
            "N",
            "start N s",
            "launch s",
            "re-enqueued s",
            "dequeued s (first / median / last)",
            "completed s (first / median / last)",
            "recover all s",
            "vs bare",
            "CPU ms/run",
            "re-enqueue CPU ms/run",
            "CPU vs bare",
            "model calls",
        ],
        rows,
    )
    print(
        "\nstart N s: the killed process starting its N runs; launch s: the launch in the new "
        "process; re-enqueued s: until the last pending run was back on a queue; dequeued / "
        "completed: when DBOS's queue thread took the runs and when they finished; recover all s: "
        "until no run is unfinished (all from just before launch). CPU: the recovering process's "
        "(user + system) per recovered run; re-enqueue CPU: the part spent putting runs back on "
        "a queue."
    )
    if not args.no_spread:
        bare = {label: r["seconds"] for (label, kind), r in results.items() if kind == "bare"}
        spread_table(n, args, bare)


if __name__ == "__main__":
    main()
