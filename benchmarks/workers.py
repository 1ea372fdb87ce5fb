"""Worker throughput against the CPU-bound ceiling: how much of what its CPU allows a worker gets.

Every part is a process of its own: the model (`FakeOpenAIServer`, no latency, scenario model ->
`lookup` tool -> model, the real `openai` client over HTTP), a thin client (`DurableClient`) that
keeps the queue filled (it enqueues runs by agent name whenever fewer than `60 x workers` wait,
so the queue never empties), and 1 or 2 workers started with the real worker machinery
(`run_worker`, what `durable-swarm worker _workers_app:client` does: default concurrency 10,
poll interval 0.5 s). For each database (SQLite, PostgreSQL), number of workers (1, 2) and
feeding mode (below), on a queue of its own:

* after a warm-up, over a window of W seconds: runs finished per second (SUCCESS rows of the
  queue), and CPU seconds per run (user + system from /proc) of the workers, the database (the
  PostgreSQL backends connected to the benchmark's database plus the server's background
  processes; for SQLite the database work is inside the workers), the model server and the
  client; also the CPU the rest of the machine used meanwhile ("others", in cores: the machine
  is shared, and that load takes cores from the ceiling);
* how full the workers' slots were (runs in flight / (workers x concurrency), mean of samples
  at random 0.2-0.6 s intervals, out of step with the polls), and the cores the machine left
  idle ("idle": CPU nobody used, so a shortfall with idle cores is the workers' own, one
  without is contention);
* the CPU-bound ceiling: `min(workers / worker CPU per run, cores / total CPU per run)` (a
  worker is one Python process: at most one core of work, less where the GIL is contended);
  and the fraction of it achieved.

Feeding modes: `worker` (this library's worker: DBOS's queue thread, which looks at the queue
every poll interval, so a freed slot waits for the next look) and `bare` (the upper baseline:
bare DBOS processes, with the library's DBOS configuration, each keeping `concurrency` bare DBOS
workflows with the same steps and `openai` calls in flight by itself: no queue, no claims, no
client, so a finished run is replaced at once and no slot ever waits; what DBOS workers can get
out of this machine at best). The modes and worker counts are interleaved and repeated; the
table shows medians. "switches" is the machine's context switches per finished run (all
processes): every SQL statement and HTTP call is a round trip between processes, and every
thread hand-off inside a worker one more switch.

    .venv/bin/python benchmarks/workers.py            # window 15 s, 3 repeats
    .venv/bin/python benchmarks/workers.py --quick    # window 2 s, 1 repeat (a smoke run)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    BARE_CLIENT,
    BENCH_DIR,
    TICK,
    cpu_seconds,
    databases,
    launch_bare_dbos,
    make_async_client,
    median,
    print_table,
    start_bare_run,
    tool_script,
)

MESSAGES = [{"role": "user", "content": "Look one thing up, please."}]
PG_BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum launcher")
MODES = ("worker", "bare")


# --- child processes -------------------------------------------------------------------------


def serve_model() -> None:
    """The model server: prints its URL, serves until its stdin closes."""
    from durable_swarm.testing import FakeOpenAIServer

    with FakeOpenAIServer(tool_script(1)) as server:
        print(f"URL {server.base_url}", flush=True)
        sys.stdin.read()


def fill_queue(db: str, queue: str, low: int, high: int) -> None:
    """The thin client: keep between `low` and `high` runs waiting on `queue` (until killed)."""
    import sqlalchemy as sa

    from durable_swarm.durable import DurableClient
    from durable_swarm.durable._database import create_engine

    engine = create_engine(db, pool_size=1)
    table = "dbos.workflow_status" if engine.dialect.name == "postgresql" else "workflow_status"
    waiting = sa.text(f"SELECT count(*) FROM {table} WHERE queue_name = :q AND status = 'ENQUEUED'")
    ready = False
    with DurableClient(db) as client:
        while True:
            with engine.connect() as conn:
                count = int(conn.execute(waiting, {"q": queue}).scalar() or 0)
            if count < low:
                for _ in range(high - count):
                    client.start("bench", MESSAGES, queue=queue)
            if not ready:
                print("READY", flush=True)
                ready = True
            time.sleep(0.1)  # the client's own pace; the backlog covers it many times over


def serve_bare(db: str, prefix: str, concurrency: int) -> None:
    """A bare DBOS process keeping `concurrency` bare runs (ids `<prefix>-...`) in flight by
    itself until SIGTERM, then letting those in flight finish (so none is left pending)."""
    import asyncio
    import signal
    import threading
    import uuid

    import dbos._dbos as dbos_internals
    from dbos import DBOS

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    BARE_CLIENT["client"] = make_async_client(os.environ["DSW_BENCH_MODEL_URL"])
    launch_bare_dbos(db, f"{prefix}-{os.getpid()}")

    async def lane() -> None:
        while not stopping.is_set():
            handle = await start_bare_run(MESSAGES, "lookup", f"{prefix}-{uuid.uuid4()}")
            await handle.get_result()

    async def lanes() -> None:
        await asyncio.gather(*(lane() for _ in range(concurrency)))

    loop = dbos_internals._dbos_global_instance._background_event_loop.target_loop()
    running = asyncio.run_coroutine_threadsafe(lanes(), loop)
    print("serving queue (bare DBOS, fed in-process)", flush=True)
    stopping.wait()
    running.result(timeout=25)
    DBOS.destroy()


def serve_worker(db: str, queue: str, concurrency: int) -> None:
    """A worker (`run_worker`, as `durable-swarm worker` runs it) on `queue`."""
    from durable_swarm.durable import run_worker

    os.chdir(BENCH_DIR)
    run_worker("_workers_app:client", queue=queue, database_url=db, concurrency=concurrency)


# --- measuring -------------------------------------------------------------------------------


def machine_switches() -> int:
    """Context switches the whole machine has made since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("ctxt "):
            return int(line.split()[1])
    return 0


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores, idle and iowait excluded)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


class Database:
    """The benchmark's view of the run database: run counts, and its server processes."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        from durable_swarm.durable._database import create_engine

        self._sa = sa
        self.engine = create_engine(url, pool_size=1)
        self.postgres = self.engine.dialect.name == "postgresql"
        self.table = "dbos.workflow_status" if self.postgres else "workflow_status"

    def counts(self, queue: str, *, by_prefix: bool = False) -> dict[str, int]:
        """Runs by status: those of `queue`, or (`by_prefix`) those whose id starts with
        `<queue>-` (bare runs, which have no queue)."""
        where = "workflow_uuid LIKE :q" if by_prefix else "queue_name = :q"
        query = self._sa.text(
            f"SELECT status, count(*) FROM {self.table} WHERE {where} GROUP BY status"
        )
        key = f"{queue}-%" if by_prefix else queue
        with self.engine.connect() as conn:
            return {str(s): int(n) for s, n in conn.execute(query, {"q": key})}

    def server_pids(self) -> set[int]:
        """PostgreSQL: the backends of this database (but the benchmark's own) and the
        server's background processes; SQLite: none."""
        if not self.postgres:
            return set()
        query = self._sa.text(
            "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() AND "
            "pid <> pg_backend_pid()) OR backend_type IN :background"
        ).bindparams(self._sa.bindparam("background", expanding=True))
        with self.engine.connect() as conn:
            return {int(row[0]) for row in conn.execute(query, {"background": PG_BACKGROUND})}

    def close(self) -> None:
        self.engine.dispose()


class Child:
    """A child process of this script (`--role ...`), its output in a file."""

    def __init__(self, name: str, args: list[str], log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        cmd = [sys.executable, str(BENCH_DIR / "workers.py"), *args]
        self._out = open(self.log, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        )
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log.read_text()

    def wait_for_line(self, marker: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.output().splitlines():
                if marker in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not print {marker!r}:\n{self.output()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@contextmanager
def model_server(log_dir: Path) -> Iterator[Child]:
    model = Child("model", ["--role", "model"], log_dir, {})
    try:
        model.wait_for_line("URL ")
        yield model
    finally:
        if model.proc.stdin is not None:
            model.proc.stdin.close()
        model.stop()


def measure(
    db: Database,
    url: str,
    model: Child,
    workers: int,
    mode: str,
    queue: str,
    log_dir: Path,
    warmup: float,
    window: float,
    concurrency: int,
) -> dict[str, Any]:
    """One measurement: `workers` workers in `mode` on a fresh `queue` (`bare`: bare DBOS
    processes feeding themselves runs whose ids start with `<queue>-`)."""
    base_url = model.wait_for_line("URL ").split()[1]
    bare = mode == "bare"
    started: list[Child] = []
    try:
        for i in range(workers):  # first: on PostgreSQL, a worker's DBOS creates the database
            args = ["--role", "bare" if bare else "worker", "--db", url, "--queue", queue]
            args += ["--concurrency", str(concurrency)]
            started.append(
                Child(f"worker-{queue}-{i}", args, log_dir, {"DSW_BENCH_MODEL_URL": base_url})
            )
        for worker in started:
            worker.wait_for_line("serving queue")
        roles = {"workers": [w.pid for w in started], "client": []}
        if not bare:
            client = Child(
                f"client-{queue}",
                ["--role", "client", "--db", url, "--queue", queue, "--low",
                 str(60 * workers), "--high", str(120 * workers)],
                log_dir,
                {},
            )  # fmt: skip
            started.append(client)
            client.wait_for_line("READY")
            roles["client"] = [client.pid]
        time.sleep(warmup)
        roles["model"] = [model.pid]
        roles["database"] = sorted(db.server_pids())
        before = {pid: cpu_seconds(pid) for pids in roles.values() for pid in pids}
        ours_before = cpu_seconds(os.getpid()) or 0.0
        busy_before = machine_busy_seconds()
        switches_before = machine_switches()
        first = db.counts(queue, by_prefix=bare)
        t0 = time.perf_counter()
        backlog, in_flight = [], []
        while (elapsed := time.perf_counter() - t0) < window:
            time.sleep(min(random.uniform(0.2, 0.6), window - elapsed))  # not in step with polls
            sample = db.counts(queue, by_prefix=bare)
            backlog.append(sample.get("ENQUEUED", 0))
            in_flight.append(sample.get("PENDING", 0))
        last = db.counts(queue, by_prefix=bare)
        seconds = time.perf_counter() - t0
        busy = machine_busy_seconds() - busy_before
        switches = machine_switches() - switches_before
        own = (cpu_seconds(os.getpid()) or 0.0) - ours_before
        roles["database"] = sorted(set(roles["database"]) | db.server_pids())
        cpu: dict[str, float] = {}
        for role, pids in roles.items():
            total = 0.0
            for pid in pids:
                now = cpu_seconds(pid)
                if now is not None:
                    total += now - (before.get(pid) or 0.0)
            cpu[role] = total
    finally:
        for child in reversed(started):
            child.stop()
    runs = last.get("SUCCESS", 0) - first.get("SUCCESS", 0)
    failed = last.get("ERROR", 0)
    if runs <= 0 or failed:
        raise RuntimeError(
            f"queue {queue}: {runs} runs finished in the window, {failed} failed; see {log_dir}"
        )
    per_run = {role: seconds_ / runs for role, seconds_ in cpu.items()}
    total = sum(per_run.values())
    cores = len(os.sched_getaffinity(0))
    worker_bound = workers / per_run["workers"]
    machine_bound = cores / total
    ceiling = min(worker_bound, machine_bound)
    throughput = runs / seconds
    return {
        "throughput": throughput,
        "per_run": per_run,
        "total": total,
        "ceiling": ceiling,
        "bound": "worker" if worker_bound <= machine_bound else "machine",
        "fraction": throughput / ceiling,
        "others": max(0.0, busy - sum(cpu.values()) - own) / seconds,
        "idle": max(0.0, cores - busy / seconds),
        "min_backlog": min(backlog) if backlog else 0,
        "slots": statistics.fmean(in_flight) / (workers * concurrency) if in_flight else 0.0,
        "switches": switches / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="window 2 s, 1 repeat")
    parser.add_argument("--window", type=float, help="seconds measured (default 15)")
    parser.add_argument("--warmup", type=float, help="seconds before the window (default 4)")
    parser.add_argument("--repeats", type=int, help="measurements of each kind (default 3)")
    parser.add_argument(
        "--concurrency", type=int, default=10, help="runs per worker at once (default 10)"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--role", choices=["model", "client", "worker", "bare"], help=argparse.SUPPRESS
    )
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--low", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--high", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "model":
        serve_model()
        return
    if args.role == "client":
        fill_queue(args.db, args.queue, args.low, args.high)
        return
    if args.role == "worker":
        serve_worker(args.db, args.queue, args.concurrency)
        return
    if args.role == "bare":
        serve_bare(args.db, args.queue, args.concurrency)
        return

    window = args.window or (2.0 if args.quick else 15.0)
    warmup = args.warmup or (1.0 if args.quick else 4.0)
    repeats = args.repeats or (1 if args.quick else 3)
    results: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="durable-swarm-bench-workers-") as tmp,
        databases(postgres=not args.no_postgres) as dbs,
        model_server(Path(tmp)) as model,
    ):
        handles = {label: Database(url) for label, url in dbs}
        try:
            for repeat in range(repeats):
                for label, url in dbs:
                    for workers in (1, 2):
                        for mode in MODES if repeat % 2 == 0 else reversed(MODES):
                            queue = f"bench-{label}-{repeat}-{workers}-{mode}"
                            r = measure(
                                handles[label], url, model, workers, mode, queue, Path(tmp),
                                warmup, window, args.concurrency,
                            )  # fmt: skip
                            results.setdefault((label, workers, mode), []).append(r)
                            print(
                                f"  {label} {workers} worker(s) {mode}: "
                                f"{r['throughput']:.1f} runs/s, {100 * r['fraction']:.0f}% of "
                                f"{r['ceiling']:.1f} ({r['bound']}-bound), min backlog "
                                f"{r['min_backlog']}, slots busy {100 * r['slots']:.0f}%, "
                                f"idle {r['idle']:.2f} cores",
                                flush=True,
                            )
        finally:
            for handle in handles.values():
                handle.close()

    rows = []
    for (label, workers, mode), rs in results.items():
        ms = {role: 1000 * median([r["per_run"][role] for r in rs]) for role in rs[0]["per_run"]}
        rows.append(
            [
                label,
                workers,
                mode,
                median([r["throughput"] for r in rs]),
                f"{ms['workers']:.1f}",
                f"{ms['database']:.1f}",
                f"{ms['model']:.1f}",
                f"{ms['client']:.1f}",
                f"{1000 * median([r['total'] for r in rs]):.1f}",
                f"{median([r['ceiling'] for r in rs]):.1f} ({rs[0]['bound']})",
                f"{100 * median([r['fraction'] for r in rs]):.0f}%",
                f"{100 * median([r['slots'] for r in rs]):.0f}%",
                median([r["others"] for r in rs]),
                median([r["idle"] for r in rs]),
                f"{median([r['switches'] for r in rs]):.0f}",
            ]
        )
    rows.sort(key=lambda row: (row[0], row[1], row[2]))
    print_table(
        f"Worker throughput: runs/s and CPU ms per run (window {window:g} s, median of "
        f"{repeats}; {len(os.sched_getaffinity(0))} cores; worker = this library's worker, "
        "bare = bare DBOS processes fed in-process, no queue)",
        ["db", "workers", "feed", "runs/s", "worker", "database", "model", "client",
         "total", "ceiling runs/s", "achieved", "slots busy", "others", "idle", "switches"],
        rows,
    )  # fmt: skip
    for label, _ in dbs:
        for workers in (1, 2):
            ours_runs = results.get((label, workers, "worker"))
            bare = results.get((label, workers, "bare"))
            if ours_runs and bare:
                ours, best = (median([r["fraction"] for r in rs]) for rs in (ours_runs, bare))
                print(
                    f"{label}, {workers} worker(s): the worker reaches {100 * ours:.0f}% of the "
                    f"CPU-bound ceiling; bare DBOS fed in-process {100 * best:.0f}%"
                )


if __name__ == "__main__":
    main()
