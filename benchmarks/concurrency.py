"""Many durable runs at once from async code, against a model with 100 ms latency.

N runs are started together (`asyncio.gather` of `DurableSwarm.arun`) in a fresh worker process,
with `openai.AsyncOpenAI` talking HTTP to a `FakeOpenAIServer` hosted by this (parent) process.
Scenario: model -> tool -> model, i.e. 2 sequential model calls per run, so with every run fully
parallel the ideal wall time is 2 x latency and the ideal throughput N / (2 x latency).

For each N (default 100 and 1000; --quick: 20 and 100), each openai transport (its default httpx,
and aiohttp via `openai.DefaultAioHttpClient` when `openai[aiohttp]` is installed) and each
database (SQLite, PostgreSQL), plus plain in-memory `Swarm.arun` as the ceiling without
durability, it prints: wall time, throughput, throughput as a fraction of ideal, CPU per run,
and peak RSS of the worker process (getrusage ru_maxrss: the high-water mark of the whole process,
interpreter, imports and a 5-run warm-up included; the growth during the N runs is shown too).
Each configuration runs in its own process, so neither peak RSS nor DBOS's one-per-process
instance carries over between them.

Then one durable run at the largest N (--quick: the smallest) is profiled, on SQLite (or
--profile-db postgres), with `_profile.CpuSampler` (CPU of every thread, by owning library), and
the hotspots are printed.

    .venv/bin/python benchmarks/concurrency.py              # N = 100 and 1000
    .venv/bin/python benchmarks/concurrency.py --quick      # N = 20 and 100, one transport
    .venv/bin/python benchmarks/concurrency.py --n 500 --http aiohttp --no-postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time
from typing import Any

from _common import (
    aiohttp_available,
    check_response,
    current_rss_mb,
    databases,
    emit,
    make_agent,
    make_async_client,
    peak_rss_mb,
    print_table,
    run_worker,
    tool_script,
)
from _profile import CpuSampler

from durable_swarm.testing import FakeOpenAIServer

MESSAGES = [{"role": "user", "content": "Look one thing up, please."}]
MODEL_CALLS_PER_RUN = 2
WARMUP_RUNS = 5


# --- worker process ------------------------------------------------------------------------


async def run_batch(swarm: Any, agent: Any, n: int) -> None:
    responses = await asyncio.gather(*(swarm.arun(agent, MESSAGES) for _ in range(n)))
    for response in responses:
        check_response(response, tool_steps=1)


async def worker_main(args: argparse.Namespace) -> dict[str, Any]:
    from durable_swarm import DurableSwarm, Swarm

    client = make_async_client(args.base_url, args.http, max_retries=args.max_retries)
    if args.db == "memory":
        swarm: Any = Swarm(client=client)
    else:
        swarm = DurableSwarm(client=client, database_url=args.db).launch()
    agent = make_agent()
    await run_batch(swarm, agent, WARMUP_RUNS)

    rss_before = current_rss_mb()
    sampler = CpuSampler() if args.profile else None
    cpu, main_cpu, wall = time.process_time(), time.thread_time(), time.perf_counter()
    with sampler or contextlib.nullcontext():
        await run_batch(swarm, agent, args.n[0])
    wall = time.perf_counter() - wall
    cpu, main_cpu = time.process_time() - cpu, time.thread_time() - main_cpu
    result = {
        "wall": wall,
        "cpu": cpu,
        "main_cpu": main_cpu,
        "peak_rss": peak_rss_mb(),
        "rss_growth": current_rss_mb() - rss_before,
        "threads": threading.active_count(),
    }
    if sampler:
        result["profile"] = sampler.report(args.top)
    await client.close()
    return result


# --- parent ---------------------------------------------------------------------------------


def measure(
    server: FakeOpenAIServer,
    db: str,
    n: int,
    http: str,
    args: argparse.Namespace,
    *,
    profile: bool = False,
) -> dict[str, Any]:
    """One configuration in a fresh worker process, with the model's request count per run."""
    server.reset()
    worker_args = ["--worker", "--db", db, "--n", str(n), "--base-url", server.base_url]
    worker_args += ["--http", http, "--max-retries", str(args.max_retries), "--top", str(args.top)]
    result = run_worker("concurrency.py", worker_args + (["--profile"] if profile else []))
    result["requests_per_run"] = server.stats["requests"] / (n + WARMUP_RUNS)
    return result


def print_profile(result: dict[str, Any], n: int, http: str, db: str) -> None:
    prof = result["profile"]
    total = prof["total"]
    print(
        f"\nProfile: N={n} durable runs on {db}, openai on {http}: wall {result['wall']:.2f} s, "
        f"process CPU {result['cpu']:.2f} s ({1e3 * result['cpu'] / n:.1f} ms/run), "
        f"of which sampled {total:.2f} s."
    )
    print_table(
        "CPU by thread",
        ["thread", "CPU s", "share"],
        [
            [group, secs, f"{100 * secs / total:.0f}%"]
            for group, secs in sorted(prof["by_group"].items(), key=lambda kv: -kv[1])
        ],
    )
    print_table(
        "CPU by owner (innermost library frame; stdlib helpers count for their caller)",
        ["owner", "CPU s", "share", "ms/run"],
        [
            [owner, secs, f"{100 * secs / total:.0f}%", f"{1e3 * secs / n:.2f}"]
            for owner, secs in sorted(prof["by_owner"].items(), key=lambda kv: -kv[1])
        ],
    )
    print_table(
        "Top library functions by inclusive CPU (all threads)",
        ["function", "owner", "CPU s", "share"],
        [[name, owner, secs, f"{100 * secs / total:.0f}%"] for name, owner, secs in prof["top"]],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="N = 20 and 100, one transport (aiohttp if installed)"
    )
    parser.add_argument("--n", type=int, nargs="+", help="numbers of concurrent runs")
    parser.add_argument("--latency", type=float, default=0.1, help="model latency (s)")
    parser.add_argument(
        "--http",
        nargs="+",
        choices=["httpx", "aiohttp"],
        help="openai transports to measure (default: httpx, and aiohttp when openai[aiohttp] "
        "is installed); the profiled run uses the last one",
    )
    parser.add_argument("--max-retries", type=int, default=2, help="openai client max_retries")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled run")
    parser.add_argument(
        "--profile-db", choices=["sqlite", "postgres"], default="sqlite", help="profiled database"
    )
    parser.add_argument("--top", type=int, default=25, help="functions shown in the profile")
    # worker process options (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.http = args.http[0]
        emit(asyncio.run(worker_main(args)))
        return

    ns = args.n or ([20, 100] if args.quick else [100, 1000])
    transports = args.http or ["httpx", *(["aiohttp"] if aiohttp_available() else [])]
    if args.quick and not args.http:
        transports = transports[-1:]  # the faster transport only
    if "aiohttp" in transports and not aiohttp_available():
        parser.error("--http aiohttp needs openai[aiohttp] (pip install httpx-aiohttp)")
    if args.http is None and "aiohttp" not in transports:
        print("note: openai[aiohttp] is not installed: measuring the httpx transport only")
    ideal_wall = MODEL_CALLS_PER_RUN * args.latency
    rows = []
    with (
        FakeOpenAIServer(tool_script(1), latency=args.latency) as server,
        databases(postgres=not args.no_postgres) as dbs,
    ):
        for n in ns:
            for http in transports:
                for label, db in [("memory", "memory"), *dbs]:
                    r = measure(server, db, n, http, args)
                    print(f"  N={n} {http} {label}: {r['wall']:.2f} s", flush=True)
                    rows.append(
                        [
                            n,
                            http,
                            label,
                            r["wall"],
                            f"{n / r['wall']:.0f}",
                            f"{n / ideal_wall:.0f}",
                            f"{100 * ideal_wall / r['wall']:.1f}%",
                            f"{1e3 * r['cpu'] / n:.1f}",
                            f"{r['peak_rss']:.0f}",
                            f"{r['rss_growth']:.0f}",
                            r["threads"],
                            f"{r['requests_per_run']:.2f}",
                        ]
                    )
        print_table(
            f"{MODEL_CALLS_PER_RUN} model calls per run, latency {args.latency * 1e3:.0f} ms, "
            f"ideal wall {ideal_wall:.2f} s. Peak RSS = getrusage ru_maxrss of the worker "
            "process; RSS growth = during the N runs.",
            [
                "N",
                "client",
                "database",
                "wall s",
                "runs/s",
                "ideal runs/s",
                "of ideal",
                "CPU ms/run",
                "peak RSS MB",
                "RSS growth MB",
                "threads",
                "requests/run",
            ],
            rows,
        )
        urls = dict(dbs)
        if not args.no_profile and args.profile_db in urls:
            n, http = (min(ns) if args.quick else max(ns)), transports[-1]
            result = measure(server, urls[args.profile_db], n, http, args, profile=True)
            print_profile(result, n, http, args.profile_db)


if __name__ == "__main__":
    main()
