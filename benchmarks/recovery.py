"""How fast a restarted process finishes runs that a killed one left pending.

For each database (SQLite, PostgreSQL):
  1. a child process starts N durable runs (`astart`, model -> tool -> model) against a
     `FakeOpenAIServer` whose answers take an hour, so every run blocks in its first model call;
     once it counts N pending runs (DBOS `list_workflows`) and the server holds N requests in
     flight, it is killed with SIGKILL;
  2. a new process with a fast server (no latency) launches DBOS, which recovers the pending runs
     at launch; it measures the seconds from just before launch until none is pending, and
     checks that all N succeeded. Each recovered run makes 2 model calls (the interrupted one
     again, then the next), so the fast server must see 2N requests.

The baseline, on fresh databases of its own: the same for N bare DBOS workflows making the same
steps and `openai` calls (`_common.bare_run`); the table prints durable / bare.

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
    make_agent,
    make_async_client,
    print_table,
    run_worker,
    start_bare_run,
    tool_script,
)

from durable_swarm.testing import FakeOpenAIServer

MESSAGES = [{"role": "user", "content": "Look one thing up, please."}]
READY = "READY"
UNFINISHED = ["PENDING", "ENQUEUED"]


def count_runs(status: str | list[str], kind: str) -> int:
    from dbos import DBOS

    from durable_swarm.durable._log import WORKFLOW_NAME

    name = "bench.bare_run" if kind == "bare" else WORKFLOW_NAME
    runs = DBOS.list_workflows(status=status, name=name, load_input=False, load_output=False)
    return len(runs)


# --- child processes -----------------------------------------------------------------------


async def start_and_block(args: argparse.Namespace) -> None:
    """Start N runs that block in their first model call; report when all are pending."""
    from durable_swarm import DurableSwarm

    client = make_async_client(args.base_url, args.http, max_retries=0)
    BARE_CLIENT["client"] = client
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
    """Launch (DBOS recovers the pending runs) and wait until none is left unfinished."""
    from durable_swarm import DurableSwarm

    client = make_async_client(args.base_url, args.http)
    BARE_CLIENT["client"] = client
    swarm = DurableSwarm(client=client, database_url=args.db)
    make_agent()  # recovery finds the agent by name in the registry, as an app would
    started = time.perf_counter()
    swarm.launch()
    launched = time.perf_counter() - started
    while count_runs(UNFINISHED, args.kind):
        time.sleep(0.2)  # a listing costs CPU in the measured process: not too often
    seconds = time.perf_counter() - started
    succeeded = count_runs("SUCCESS", args.kind)
    return {"seconds": seconds, "launch": launched, "succeeded": succeeded}


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
    for kind in ("bare", "durable"):  # each kind on fresh databases of its own
        with databases(postgres=not args.no_postgres) as dbs:
            for label, db in dbs:
                results[label, kind] = recover_measured(label, db, n, kind, args)
    rows = []
    for (label, kind), r in results.items():
        if kind == "durable":
            bare = results[label, "bare"]
            rows.append(
                [
                    label,
                    n,
                    f"{r['start']:.2f} / {bare['start']:.2f}",
                    f"{r['launch']:.2f} / {bare['launch']:.2f}",
                    f"{r['seconds']:.2f} / {bare['seconds']:.2f}",
                    f"{r['seconds'] / bare['seconds']:.2f}x",
                    f"{n / r['seconds']:.0f}",
                    r["model_calls"],
                ]
            )
    print_table(
        f"Recovery of runs left pending by SIGKILL (openai on {args.http}; model without latency)."
        " Baseline: bare DBOS workflows with the same steps and openai calls ('a / b': durable, "
        "then bare)",
        [
            "database",
            "N",
            "start N s",
            "launch s",
            "recover all s",
            "durable/bare",
            "runs/s",
            "model calls",
        ],
        rows,
    )
    print(
        "\nstart N s: the killed process starting its N runs; launch s: DBOS.launch() in the new "
        "process; recover all s: from just before launch until no run is pending (launch included)."
    )


if __name__ == "__main__":
    main()
