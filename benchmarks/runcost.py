"""CPU per whole run: a durable run against a bare DBOS workflow making the same calls.

Scenario: model -> sync tool -> model, with `openai.AsyncOpenAI` over HTTP to a
`FakeOpenAIServer` (no latency) hosted by the parent process, so the worker's CPU is the run's
own: our code, DBOS, the database driver, and the `openai` client. Per database (SQLite,
PostgreSQL), one worker process measures, in interleaved rounds, the process CPU of:

  * durable: N runs at once (`asyncio.gather` of `DurableSwarm.arun`);
  * bare:    N bare DBOS workflows at once, each making the same three steps itself: an async
             step awaiting the same `openai` call, a sync step running the same sync tool, the
             second model call; started with its own id and awaited like a durable run.

It prints the median CPU per run of each kind and the ratio durable / bare (the baseline is the
bare DBOS workflow, measured in the same process, in the same rounds). Goal: <= 1.05x. A second
batch of bare workflows in each round, measured against the first ("bare again / bare"), shows
the noise of the measurement itself: a ratio that far from 1.00x says nothing.

One process's median can sit a few percent off another's for the same code (each process has
its own hash seed, heap and thread timing), so `--processes K` repeats the measurement in K
fresh worker processes per database and prints each one's median ratio and the median over all
their rounds.

    .venv/bin/python benchmarks/runcost.py                 # N = 50, 15 rounds, 3 processes
    .venv/bin/python benchmarks/runcost.py --quick         # N = 20, 5 rounds, 1 process
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from _common import (
    BARE_CLIENT,
    databases,
    emit,
    lookup_sync,
    make_async_client,
    median,
    print_table,
    run_worker,
    start_bare_run,
)

from durable_swarm import Agent
from durable_swarm.testing import FakeOpenAIServer, Reply, ToolCall, calls, text

MESSAGES = [{"role": "user", "content": "Look one thing up, please."}]
ANSWER = "Done after 1 lookup."


def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """The model calls `lookup_sync` once, then answers."""
    if any(m.get("role") == "tool" for m in messages):
        return text(ANSWER)
    return calls(ToolCall("lookup_sync", {"i": 0}))


AGENT = Agent(name="runcost", model="bench-model", instructions="Answer.", functions=[lookup_sync])


async def start_bare() -> dict[str, Any]:
    handle = await start_bare_run(MESSAGES, "lookup_sync", str(uuid.uuid4()))
    result: dict[str, Any] = await handle.get_result()
    return result


# --- worker process ------------------------------------------------------------------------


def batches(args: argparse.Namespace) -> tuple[Any, dict[str, Callable[[], Awaitable[None]]]]:
    """The worker's model client (on `args.base_url`) and its batches by kind: `args.n` durable
    runs (on `args.db`) or bare workflows at once, each checked for the scenario's answer."""
    from durable_swarm import DurableSwarm

    client = make_async_client(args.base_url)
    BARE_CLIENT["client"] = client
    BARE_CLIENT["sender"] = AGENT.name
    swarm = DurableSwarm(client=client, database_url=args.db).launch()

    async def durable_batch() -> None:
        responses = await asyncio.gather(*(swarm.arun(AGENT, MESSAGES) for _ in range(args.n)))
        for response in responses:
            if response.messages[-1]["content"] != ANSWER:
                raise RuntimeError(f"unexpected answer {response.messages[-1]['content']!r}")

    async def bare_batch() -> None:
        results = await asyncio.gather(*(start_bare() for _ in range(args.n)))
        for result in results:
            if result["messages"][-1]["content"] != ANSWER:
                raise RuntimeError(f"unexpected answer {result['messages'][-1]['content']!r}")

    return client, {
        "durable": durable_batch,
        "bare": bare_batch,
        "bare again": bare_batch,  # the same work twice: the measurement's own noise
    }


async def worker_main(args: argparse.Namespace) -> dict[str, Any]:
    client, kinds = batches(args)
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    wall: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for round_ in range(args.warmup + args.rounds):
        order = order[1:] + order[:1]  # rotate which kind goes first
        for kind in order:
            gc.collect()
            c, w = time.process_time(), time.perf_counter()
            await kinds[kind]()
            c, w = time.process_time() - c, time.perf_counter() - w
            if round_ >= args.warmup:
                cpu[kind].append(c / args.n)
                wall[kind].append(w)
    await client.close()
    return {
        "cpu": {kind: median(v) for kind, v in cpu.items()},
        "wall": {kind: median(v) for kind, v in wall.items()},
        "ratios": [d / b for d, b in zip(cpu["durable"], cpu["bare"], strict=True)],
        "noise": [a / b for a, b in zip(cpu["bare again"], cpu["bare"], strict=True)],
    }


# --- parent ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 20, 5 rounds")
    parser.add_argument("--n", type=int, help="runs at once (default 50)")
    parser.add_argument("--rounds", type=int, help="measured rounds per process (default 15)")
    parser.add_argument("--processes", type=int, help="worker processes per database (default 3)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        emit(asyncio.run(worker_main(args)))
        return
    n = args.n or (20 if args.quick else 50)
    rounds = args.rounds or (5 if args.quick else 15)
    processes = args.processes or (1 if args.quick else 3)
    warmup = 1 if args.quick else 3
    rows = []
    with FakeOpenAIServer(script) as server, databases(postgres=not args.no_postgres) as dbs:
        for label, db in dbs:
            worker_args = ["--worker", "--db", db, "--base-url", server.base_url, "--n", str(n)]
            worker_args += ["--rounds", str(rounds), "--warmup", str(warmup)]
            results = [run_worker("runcost.py", worker_args) for _ in range(processes)]
            ratios = [x for r in results for x in r["ratios"]]
            rows.append(
                [
                    label,
                    f"{1e3 * median([r['cpu']['durable'] for r in results]):.2f}",
                    f"{1e3 * median([r['cpu']['bare'] for r in results]):.2f}",
                    f"{median(ratios):.2f}x",
                    " ".join(f"{median(r['ratios']):.2f}x" for r in results),
                    f"{min(ratios):.2f}-{max(ratios):.2f}x",
                    f"{median([x for r in results for x in r['noise']]):.2f}x",
                    f"{median([r['wall']['durable'] for r in results]):.2f}",
                    f"{median([r['wall']['bare'] for r in results]):.2f}",
                ]
            )
    print_table(
        f"CPU per run (ms), model -> sync tool -> model, {n} runs at once, {processes} worker "
        f"process(es) x {rounds} interleaved rounds, medians; baseline: a bare DBOS workflow with "
        "the same steps and openai calls. Goal: durable/bare <= 1.05x",
        [
            "database",
            "durable",
            "bare DBOS",
            "durable/bare",
            "per process",
            "range",
            "bare again/bare",
            "durable wall s",
            "bare wall s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
