"""Fan-out: a parent that delegates to N sub-agents at once, against a model with 100 ms latency.

The parent's first model call asks for all N sub-agents in one message (`agent.as_tool()`); each
sub-agent answers with one model call; the parent's second call sums up. With the children fully
parallel the ideal wall time is 3 model calls (parent, one child, parent) = 3 x latency, whatever
N is; run one after another it would be (2 + N) x latency ("sequential" below).

For N = 1, 4 and 16, durable on SQLite and on PostgreSQL (each child a child workflow, started
together and joined in order), plus the in-memory `Swarm` for reference (it runs the sub-agents
of a message one after another). The model is a `FakeOpenAIServer` in this process, reached over
HTTP by `openai.OpenAI`; each database runs in a fresh worker process (DBOS is one per process),
which makes one warm-up run, then `--runs` measured runs per N. The table shows the median wall
time, the fastest and the slowest run. What to expect: starting each child workflow is a database
write, so children start a few tens of ms apart; on SQLite, whose writers take turns on one lock
(DBOS opens every transaction with BEGIN IMMEDIATE), 16 children sometimes stall each other in
SQLite's busy wait, which shows in the slowest run.

    .venv/bin/python benchmarks/fanout.py            # 5 runs per configuration
    .venv/bin/python benchmarks/fanout.py --quick    # 1 run per configuration
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _common import databases, emit, print_table, run_worker

from durable_swarm import Agent, DurableSwarm, Swarm
from durable_swarm.testing import FakeOpenAIServer, Reply, ToolCall, calls, text

FANOUTS = (1, 4, 16)
TASK = [{"role": "user", "content": "Ask every worker, then sum up."}]


def make_parent(n: int) -> Agent:
    """A parent with `n` sub-agents (defined the same way in every process)."""
    workers = [
        Agent(name=f"worker{i}", model="bench-model", instructions=f"You are worker{i}.")
        for i in range(n)
    ]
    return Agent(
        name=f"lead{n}",
        model="bench-model",
        instructions="You are lead.",
        functions=[w.as_tool() for w in workers],
    )


def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """The parent calls every sub-agent it is offered, then sums up; a worker answers."""
    system = str(messages[0]["content"])
    if system.startswith("You are worker"):
        return text(f"{system[8:-1]} done")
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return calls(*(ToolCall(t["function"]["name"], {"task": "work"}) for t in tools or []))
    return text(f"{len(results)} workers done")


def check(response: Any, n: int) -> None:
    """A run ended as the scenario says (a benchmark of broken runs would measure nothing)."""
    last = response.messages[-1]["content"]
    if last != f"{n} workers done":
        raise RuntimeError(f"unexpected final message {last!r}")


# --- worker process ------------------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key="fake-key", timeout=600)
    if args.db == "memory":
        swarm: Any = Swarm(client)
    else:
        swarm = DurableSwarm(client, database_url=args.db).launch()
    walls: dict[str, list[float]] = {}
    for n in args.n:
        parent = make_parent(n)
        check(swarm.run(parent, TASK), n)  # warm-up
        walls[str(n)] = []
        for _ in range(args.runs):
            start = time.perf_counter()
            response = swarm.run(parent, TASK)
            walls[str(n)].append(time.perf_counter() - start)
            check(response, n)
    return {"walls": walls}


# --- parent ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 measured run per configuration")
    parser.add_argument("--runs", type=int, help="measured runs per configuration (default 5)")
    parser.add_argument("--latency", type=float, default=0.1, help="model latency (s)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    # worker process options (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, nargs="+", default=list(FANOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.runs = args.runs or (1 if args.quick else 5)
    if args.worker:
        emit(worker_main(args))
        return

    ideal = 3 * args.latency
    rows = []
    with (
        FakeOpenAIServer(script, latency=args.latency) as server,
        databases(postgres=not args.no_postgres) as dbs,
    ):
        for label, db in [("memory", "memory"), *dbs]:
            server.reset()
            worker_args = ["--worker", "--db", db, "--base-url", server.base_url]
            worker_args += ["--runs", str(args.runs), "--n", *map(str, FANOUTS)]
            result = run_worker("fanout.py", worker_args)
            runs = sum(1 + args.runs for _ in FANOUTS)
            requests = server.request_count
            expected = sum((1 + args.runs) * (2 + n) for n in FANOUTS)
            if requests != expected:
                raise RuntimeError(f"{label}: {requests} model requests, expected {expected}")
            for n in FANOUTS:
                walls = result["walls"][str(n)]
                wall = statistics.median(walls)
                sequential = (2 + n) * args.latency
                rows.append(
                    [
                        n,
                        label,
                        wall,
                        min(walls),
                        max(walls),
                        ideal,
                        f"{1e3 * (wall - ideal):.0f}",
                        f"{100 * ideal / wall:.0f}%",
                        sequential,
                    ]
                )
            print(f"  {label}: done ({runs} runs, {requests} model requests)", flush=True)
    print_table(
        f"Fan-out to N sub-agents, model latency {args.latency * 1e3:.0f} ms, median of "
        f"{args.runs} run(s). ideal = 3 model calls (parent, one child, parent); sequential = "
        "(2 + N) model calls. 'over ideal' and 'of ideal' use the median.",
        [
            "N",
            "mode",
            "wall s",
            "min s",
            "max s",
            "ideal s",
            "over ideal ms",
            "of ideal",
            "sequential s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
