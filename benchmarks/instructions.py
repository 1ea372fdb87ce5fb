"""Instructions per whole run: a durable run against a bare DBOS workflow, counted by callgrind.

`runcost.py` measures CPU time, which a shared 2-core machine makes noisy (one round's ratio
spreads over 0.7-1.6x). This benchmark runs the same scenario (model -> sync tool -> model,
`openai.AsyncOpenAI` over HTTP to a `FakeOpenAIServer`, N runs at once, the same bare DBOS
workflow as baseline) in a worker process under Valgrind's callgrind, and counts the user-space
instructions the worker executes in interleaved windows of one batch each. A count does not
include time lost to other jobs, but it still depends on timing (a busy SQLite retries its
lock, a loaded event loop handles fewer events per turn): run it on a quiet machine. It leaves
out the kernel's work (system calls, the same for both kinds within 1% by `strace -c`) and how
fast each instruction runs.

A run's count is that of the threads that do the runs' work: the event loop's, DBOS's
executor, this library's pools. The threads that work while no run exists (DBOS's queue
threads, scheduler and notification listener, this library's heartbeat: found by a window with
no run) wake on their clocks, which callgrind slows far less than the code it runs, so their
share of a window depends on its length; they do no run's work here (nothing is queued or
awaited), and are left out. The "all threads" ratio keeps them, less their rate at rest.

It prints millions of instructions per run for each kind and the ratio durable / bare (median
of the rounds' own ratios), with a second bare batch per round against the first ("bare again /
bare": the measurement's own noise). The workers of the two databases run at once. Needs
Valgrind (`apt-get install valgrind`).

    .venv/bin/python benchmarks/instructions.py            # N = 20, 4 rounds
    .venv/bin/python benchmarks/instructions.py --quick    # N = 5, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import runcost
from _common import (
    databases,
    emit,
    median,
    print_table,
    result_of,
)

from durable_swarm.testing import FakeOpenAIServer

AT_REST = 0.5e6  # instructions per second: a thread doing more with no run works at rest

# --- worker process (under callgrind) ------------------------------------------------------


def _control(*args: str) -> str:
    """Run `callgrind_control <args> <this process>` and return what it printed."""
    done = subprocess.run(
        ["callgrind_control", *args, str(os.getpid())], capture_output=True, text=True
    )
    if done.returncode != 0 or "Error" in done.stdout:
        raise RuntimeError(f"callgrind_control {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def _by_thread() -> dict[int, int]:
    """Instructions each thread of this process executed since the count started, by
    Valgrind's thread number."""
    found = re.findall(r"Th\s*(\d+)\s+([\d,]+)", _control("-e"))
    return {int(thread): int(count.replace(",", "")) for thread, count in found}


def _spent(before: dict[int, int], after: dict[int, int], threads: Any = None) -> int:
    """Instructions executed between two counts, by all threads or by those `threads` admits."""
    return sum(n - before.get(t, 0) for t, n in after.items() if threads is None or threads(t))


async def worker_main(args: argparse.Namespace) -> dict[str, Any]:
    client, kinds = runcost.batches(args)
    for _ in range(args.warmup):  # uncounted: callgrind starts with its count off
        for batch in kinds.values():
            await batch()
    await asyncio.to_thread(_control, "--instr=on")
    # The threads that work with no run in the process (DBOS's queue threads, scheduler and
    # notification listener, this library's heartbeat), each waking on its clock, which
    # callgrind slows 50-fold less than the code it runs: left out of the count of a run
    # (nothing is queued or awaited here, so they do no run's work). The rest: the event
    # loop's thread, DBOS's executor, this library's pools.
    before, start = await asyncio.to_thread(_by_thread), time.perf_counter()
    await asyncio.sleep(args.idle)
    after, seconds = await asyncio.to_thread(_by_thread), time.perf_counter() - start
    at_rest = {t for t, n in after.items() if (n - before.get(t, 0)) / seconds > AT_REST}
    rest_rate = _spent(before, after) / seconds
    for batch in kinds.values():  # what the rest let lapse (the HTTP keep-alive connections)
        await batch()
    counts: dict[str, list[float]] = {kind: [] for kind in kinds}
    totals: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for _ in range(args.rounds):
        order = order[1:] + order[:1]  # rotate which kind goes first
        for kind in order:
            before, start = await asyncio.to_thread(_by_thread), time.perf_counter()
            await kinds[kind]()
            after, seconds = await asyncio.to_thread(_by_thread), time.perf_counter() - start
            counts[kind].append(_spent(before, after, lambda t: t not in at_rest) / args.n)
            totals[kind].append((_spent(before, after) - rest_rate * seconds) / args.n)
    await asyncio.to_thread(_control, "--instr=off")
    await client.close()
    return {
        "at_rest": [len(at_rest), rest_rate],
        "per_run": {kind: median(v) for kind, v in counts.items()},
        "ratios": [d / b for d, b in zip(counts["durable"], counts["bare"], strict=True)],
        "noise": [a / b for a, b in zip(counts["bare again"], counts["bare"], strict=True)],
        "all_threads": [d / b for d, b in zip(totals["durable"], totals["bare"], strict=True)],
    }


# --- parent ---------------------------------------------------------------------------------


def _start(worker_args: list[str], out: Path) -> subprocess.Popen[str]:
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    command += [sys.executable, str(Path(__file__).resolve()), "--worker", *worker_args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen[str], label: str) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=3600)
    tail = "\n".join(stderr.splitlines()[-30:])  # after Valgrind's own report
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, tail)
    return result_of(done, f"the {label} worker")


HEADERS = ["database", "durable", "bare DBOS", "durable/bare", "range", "bare again/bare"]
HEADERS += ["all threads", "left out"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 5, 1 round")
    parser.add_argument("--n", type=int, help="runs at once (default 20)")
    parser.add_argument("--rounds", type=int, help="counted rounds (default 4)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--idle", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        emit(asyncio.run(worker_main(args)))
        return
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"{' and '.join(missing)} not found: install Valgrind (apt-get install valgrind)")
    n = args.n or (5 if args.quick else 20)
    rounds = args.rounds or (1 if args.quick else 4)
    warmup = 1 if args.quick else 2
    rows = []
    with (
        FakeOpenAIServer(runcost.script) as server,
        databases(postgres=not args.no_postgres) as dbs,
        tempfile.TemporaryDirectory() as tmp,
    ):
        workers = []
        for label, db in dbs:
            worker_args = ["--db", db, "--base-url", server.base_url, "--n", str(n)]
            worker_args += ["--rounds", str(rounds), "--warmup", str(warmup), "--idle", "10"]
            workers.append((label, _start(worker_args, Path(tmp) / f"{label}.callgrind")))
        for label, process in workers:
            r = _result(process, label)
            rows.append(
                [
                    label,
                    f"{r['per_run']['durable'] / 1e6:.2f}",
                    f"{r['per_run']['bare'] / 1e6:.2f}",
                    f"{median(r['ratios']):.3f}x",
                    f"{min(r['ratios']):.3f}-{max(r['ratios']):.3f}x",
                    f"{median(r['noise']):.3f}x",
                    f"{median(r['all_threads']):.3f}x",
                    f"{r['at_rest'][0]} threads, {r['at_rest'][1] / 1e6:.1f} M/s at rest",
                ]
            )
    print_table(
        f"Instructions per run (millions, user space, every thread of the worker), model -> "
        f"sync tool -> model, {n} runs at once, median of {rounds} interleaved rounds under "
        "callgrind; baseline: a bare DBOS workflow with the same steps and openai calls",
        HEADERS,
        rows,
    )


if __name__ == "__main__":
    main()
