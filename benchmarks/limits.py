"""What a model limit costs a model call that never has to wait: the admission (one transaction
that locks the key's row and counts its window) and the end of the call (one update).

N one-call runs, one after the other, against a `FakeOpenAIServer` with no latency, in a fresh
process per configuration: without limits, and with `{"*": ModelLimits(requests_per_minute=1e9,
tokens_per_minute=1e12, concurrent=1000)}` (every limit checked, none reached). For each
database (SQLite, PostgreSQL when reachable) it prints the wall time and CPU per run and their
ratio to the run without limits.

    .venv/bin/python benchmarks/limits.py            # N = 200
    .venv/bin/python benchmarks/limits.py --n 50
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import databases, emit, print_table, run_worker

MODES = ("none", "limited")


def child(url: str, mode: str, n: int) -> None:
    from durable_swarm import Agent, DurableSwarm, ModelLimits
    from durable_swarm.testing import FakeOpenAIServer

    limits = {"*": ModelLimits(requests_per_minute=1e9, tokens_per_minute=1e12, concurrent=1000)}
    with FakeOpenAIServer() as server:
        swarm = DurableSwarm(
            server.client(max_retries=0), database_url=url, limits=limits if mode != "none" else {}
        )
        agent = Agent(name="Bench")
        for i in range(5):  # warm-up: launch, tables, connections
            swarm.run(agent, [{"role": "user", "content": f"warm {i}"}])
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            swarm.run(agent, [{"role": "user", "content": f"hi {i}"}])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    emit({"wall_ms": wall * 1000 / n, "cpu_ms": cpu * 1000 / n})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--child", nargs=3, metavar=("URL", "MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, mode, n = args.child
        child(url, mode, int(n))
        return
    rows = []
    with databases() as dbs:
        for label, url in dbs:
            results = {}
            for mode in MODES:
                db_url = url if label == "postgres" else url.replace(".sqlite", f"-{mode}.sqlite")
                results[mode] = run_worker("limits.py", ["--child", db_url, mode, str(args.n)])
            base = results["none"]
            for mode in MODES:
                r = results[mode]
                rows.append(
                    [
                        label,
                        mode,
                        f"{r['wall_ms']:.2f}",
                        f"{r['cpu_ms']:.2f}",
                        f"{r['wall_ms'] / base['wall_ms']:.2f}x",
                        f"{r['cpu_ms'] / base['cpu_ms']:.2f}x",
                    ]
                )
    print_table(
        f"One model call per run, {args.n} runs one after the other (per run)",
        ["database", "limits", "wall ms", "CPU ms", "wall ratio", "CPU ratio"],
        rows,
    )


if __name__ == "__main__":
    sys.exit(main())
