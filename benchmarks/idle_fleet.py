"""What an idle fleet costs the database: N idle workers against N bare DBOS processes.

Each fleet on a fresh PostgreSQL database of its own (server from
`DURABLE_SWARM_TEST_POSTGRES_URL`, default `postgresql://postgres@127.0.0.1:5432/postgres`):

* `ours`: N `durable-swarm worker _workers_app` processes (the real command; no run is ever
  queued, so they only heartbeat, watch and poll), each on queue `idle`, poll interval 0.5 s;
* `bare`: N bare DBOS processes with the library's DBOS configuration (as `launch_bare_dbos`),
  each listening to one queue `idle` registered with the same polling interval;
* `bare-defaults`: the same, but with DBOS's own pool settings (each connection checked with a
  round trip before use, which the library turns off: see `checks_connections`)
(one fleet after the other: two fleets of 10 would pass PostgreSQL's default 100 connections).

After a warm-up, over a window of W seconds: transactions per second of each database
(`pg_stat_database.xact_commit + xact_rollback`; the measuring connection is on the server's
maintenance database, so its own transactions are not counted), connections to it
(`pg_stat_activity`, mean of samples once a second), and CPU of each process (user + system
from /proc, in % of one core). With `--sqlite`, a third fleet of N idle workers on one SQLite
file, for its CPU figure.

DBOS's schedule thread looks at the database every second for its first 60 s, then every 30 s:
the default warm-up (65 s) measures the steady state, `--quick` the first minute.

    .venv/bin/python benchmarks/idle_fleet.py            # N 10, warm-up 65 s, window 30 s
    .venv/bin/python benchmarks/idle_fleet.py --quick    # N 3, warm-up 3 s, window 6 s
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    _drop_postgres_database,
    _postgres_reachable,
    _with_database,
    cpu_seconds,
    postgres_server_url,
    print_table,
)

QUEUE = "idle"
POLL = 0.5
READY = "serving queue"


def serve_bare(db: str, *, pool_defaults: bool = False) -> None:
    """A bare DBOS process, configured as `launch_bare_dbos` does (with DBOS's own pool
    settings if `pool_defaults`), listening to queue `idle` only (until SIGTERM)."""
    import signal
    import threading

    from dbos import DBOS

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    from durable_swarm.durable._dbos import _config

    config = _config(db, f"bare-{os.getpid()}", 0.1)
    if pool_defaults:
        config.pop("db_engine_kwargs", None)
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.listen_queues([QUEUE])
    DBOS.launch()
    DBOS.register_queue(QUEUE, polling_interval_sec=POLL, on_conflict="always_update")
    print(f"{READY} (bare DBOS)", flush=True)
    stopping.wait()
    DBOS.destroy()


def start_fleet(
    kind: str, url: str, n: int, log_dir: Path
) -> list[tuple[subprocess.Popen[Any], Path]]:
    """Start `n` idle processes of `kind` ("ours", "bare" or "bare-defaults") on `url`; wait
    until all serve."""
    env = {**os.environ, "DSW_BENCH_MODEL_URL": "http://127.0.0.1:9/v1"}  # never called
    worker = shutil.which("durable-swarm", path=str(Path(sys.executable).parent))
    procs = []
    for i in range(n):
        if kind == "ours":
            cmd = [worker or "durable-swarm", "worker", "_workers_app", "--database-url", url,
                   "--queue", QUEUE, "--poll-interval", str(POLL)]  # fmt: skip
        else:
            cmd = [sys.executable, str(BENCH_DIR / "idle_fleet.py"), "--role", kind, "--db", url]
        log = log_dir / f"{kind}-{i}.log"
        with open(log, "w") as out:
            procs.append(
                (
                    subprocess.Popen(
                        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=BENCH_DIR
                    ),
                    log,
                )
            )
        if i == 0:  # the first creates the database (DBOS does, at launch)
            _wait_ready(procs)
    _wait_ready(procs)
    return procs


def _wait_ready(procs: list[tuple[subprocess.Popen[Any], Path]], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    for proc, log in procs:
        while READY not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{log.name} did not start:\n{log.read_text()}")
            time.sleep(0.1)


def stop_fleet(procs: list[tuple[subprocess.Popen[Any], Path]]) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc, _ in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(
    fleets: list[tuple[str, str, str | None]], n: int, warmup: float, window: float, log_dir: Path
) -> dict[str, dict[str, Any]]:
    """Start every fleet `(label, kind, PostgreSQL database or None for SQLite)`, wait
    `warmup`, then measure them all over one window: per fleet, CPU % per process and, on
    PostgreSQL, tx/s and connections of its database."""
    import psycopg

    server = postgres_server_url()
    started: dict[str, list[tuple[subprocess.Popen[Any], Path]]] = {}
    with tempfile.TemporaryDirectory(prefix="durable-swarm-bench-idle-") as tmp:
        try:
            for label, kind, database in fleets:
                url = (
                    _with_database(server, database)
                    if database
                    else "sqlite:///" + str(Path(tmp) / f"{label}.sqlite")
                )
                started[label] = start_fleet(kind, url, n, log_dir)
            time.sleep(warmup)
            with psycopg.connect(server, autocommit=True) as conn:

                def xacts(database: str) -> int:
                    row = conn.execute(
                        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                        "WHERE datname = %s",
                        (database,),
                    ).fetchone()
                    return int(row[0]) if row else 0

                def connections(database: str) -> int:
                    rows = conn.execute(
                        "SELECT application_name, count(*) FROM pg_stat_activity "
                        "WHERE datname = %s GROUP BY 1",
                        (database,),
                    ).fetchall()
                    last_by_app[database] = {str(app or "(none)"): int(k) for app, k in rows}
                    return sum(int(k) for _, k in rows)

                last_by_app: dict[str, dict[str, int]] = {}

                dbs = {label: database for label, _, database in fleets if database}
                pids = {label: [p.pid for p, _ in procs] for label, procs in started.items()}
                cpu0 = {pid: cpu_seconds(pid) or 0.0 for ps in pids.values() for pid in ps}
                x0 = {label: xacts(database) for label, database in dbs.items()}
                t0 = time.perf_counter()
                samples: dict[str, list[int]] = {label: [] for label in dbs}
                while time.perf_counter() - t0 < window:
                    for label, database in dbs.items():
                        samples[label].append(connections(database))
                    time.sleep(min(1.0, max(0.0, window - (time.perf_counter() - t0))))
                x1 = {label: xacts(database) for label, database in dbs.items()}
                seconds = time.perf_counter() - t0
                cpu = {
                    label: [(cpu_seconds(pid) or 0.0) - cpu0[pid] for pid in ps]
                    for label, ps in pids.items()
                }
        finally:
            for procs in started.values():
                stop_fleet(procs)
            for _, _, database in fleets:
                if database:
                    _drop_postgres_database(server, database)
    results: dict[str, dict[str, Any]] = {}
    for label in started:
        results[label] = {"cpu": 100 * statistics.fmean(cpu[label]) / seconds}
        if label in dbs:
            results[label].update(
                tx=(x1[label] - x0[label]) / seconds,
                connections=statistics.fmean(samples[label]),
                by_app=last_by_app.get(dbs[label], {}),
                max_connections=max(samples[label]),
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 processes, warm-up 3 s, window 6 s")
    parser.add_argument("-n", "--processes", type=int, help="fleet size (default 10)")
    parser.add_argument("--warmup", type=float, help="seconds before the window (default 65)")
    parser.add_argument("--window", type=float, help="seconds measured (default 30)")
    parser.add_argument("--sqlite", action="store_true", help="also idle CPU on SQLite")
    parser.add_argument("--role", choices=["bare", "bare-defaults"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        serve_bare(args.db, pool_defaults=args.role == "bare-defaults")
        return
    warmup = args.warmup or (3.0 if args.quick else 65.0)
    window = args.window or (6.0 if args.quick else 30.0)
    n = args.processes or (3 if args.quick else 10)
    problem = _postgres_reachable(postgres_server_url())
    if problem is not None:
        print(f"note: PostgreSQL unreachable ({problem}); nothing to measure")
        return
    token = secrets.token_hex(4)
    fleets: list[tuple[str, str, str | None]] = [
        ("ours", "ours", f"bench_idle_ours_{token}"),
        ("bare", "bare", f"bench_idle_bare_{token}"),
        ("bare-defaults", "bare-defaults", f"bench_idle_bared_{token}"),
    ]
    if args.sqlite:
        fleets.append(("sqlite", "ours", None))
    with tempfile.TemporaryDirectory(prefix="durable-swarm-bench-idle-logs-") as tmp:
        # One fleet at a time: two fleets of 10 hold over 100 connections, PostgreSQL's default
        # max_connections.
        measured = {}
        for fleet in fleets:
            measured.update(measure([fleet], n, warmup, window, Path(tmp)))
            r = measured[fleet[0]]
            extra = (
                f"{r['tx']:.1f} tx/s, {r['connections']:.1f} connections "
                f"(at the end, by application_name: {r['by_app']}), "
                if fleet[2]
                else ""
            )
            print(f"  {fleet[0]}: {extra}{r['cpu']:.2f}% CPU per process", flush=True)
    sqlite = measured.pop("sqlite", None)
    results = measured
    rows = [
        [kind, r["tx"], f"{r['tx'] / n:.2f}",
         f"{r['connections']:.1f} (max {r['max_connections']})",
         f"{r['connections'] / n:.1f}", f"{r['cpu']:.2f}"]
        for kind, r in results.items()
    ]  # fmt: skip
    print_table(
        f"Idle fleet of {n} on PostgreSQL (warm-up {warmup:g} s, window {window:g} s, poll "
        f"interval {POLL:g} s; ours = durable-swarm workers, bare = bare DBOS, one queue each)",
        ["fleet", "tx/s", "tx/s each", "connections", "each", "CPU % of a core each"],
        rows,
    )
    ours = results["ours"]
    for label in ("bare", "bare-defaults"):
        bare = results[label]
        print(
            f"ours / {label}: transactions {ours['tx'] / bare['tx']:.2f}x, connections "
            f"{ours['connections'] / bare['connections']:.2f}x, "
            f"CPU {ours['cpu'] / bare['cpu']:.2f}x"
        )
    if sqlite is not None:
        print(f"SQLite, {n} idle workers on one file: {sqlite['cpu']:.2f}% CPU of a core each")


if __name__ == "__main__":
    main()
