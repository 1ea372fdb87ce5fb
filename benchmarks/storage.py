"""How a long run's stored log grows: a durable run against a bare DBOS workflow storing only its
messages.

Scenario: an agent calls a tool T times (one call per turn), then answers; every tool call adds
a 100-byte entry to the context variables, so the context grows with the run. Per database
(SQLite, PostgreSQL) and per T (default 100, 200, 400; --quick: 20, 40) it prints the bytes
the run's steps hold in DBOS's `operation_outputs` table, and the same for the baseline: a bare
DBOS workflow with as many steps, each storing only the message the durable step produced (what
any durable chat must store). Linear growth keeps durable/bare flat as T doubles; storing the
whole context at every tool step made it grow with T (quadratic bytes).

    .venv/bin/python benchmarks/storage.py
    .venv/bin/python benchmarks/storage.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import sqlalchemy as sa
from _common import databases, print_table
from dbos import DBOS, SetWorkflowID

from durable_swarm import Agent, DurableSwarm, Result
from durable_swarm.durable import shutdown
from durable_swarm.testing import AsyncScriptedClient, Reply, ToolCall, calls, text

MESSAGES = [{"role": "user", "content": "Take notes, please."}]
PLAN: dict[str, list[Any]] = {"outputs": []}


def note(i: int) -> Result:
    """Take note number i (adds it to the context)."""
    return Result(value=f"noted {i}", context_variables={f"note{i}": "n" * 100})


AGENT = Agent(name="storage", model="bench-model", instructions="Note.", functions=[note])


def script(turns: int) -> Any:
    def reply(messages: list[dict[str, Any]], tools: Any) -> Reply:
        done = sum(1 for m in messages if m.get("role") == "tool")
        return calls(ToolCall("note", {"i": done})) if done < turns else text("All noted.")

    return reply


@DBOS.workflow(name="bench.storage.bare")
async def bare_workflow(turns: int) -> None:
    """As many steps as the durable run, each storing just the message it produced."""
    for output in PLAN["outputs"]:

        def step(output: Any = output) -> Any:
            return output

        await DBOS.run_step_async({"name": "step"}, step)


def stored_bytes(url: str, run_id: str) -> int:
    """Bytes of the step outputs stored for `run_id`."""
    postgres = url.startswith("postgresql")
    table = "dbos.operation_outputs" if postgres else "operation_outputs"
    length = "octet_length" if postgres else "length"
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            query = (
                f"SELECT coalesce(sum({length}(output)), 0) FROM {table} WHERE workflow_uuid = :id"
            )
            return int(conn.execute(sa.text(query), {"id": run_id}).scalar_one())
    finally:
        engine.dispose()


async def measure(url: str, turns: int) -> tuple[int, int]:
    swarm = DurableSwarm(client=AsyncScriptedClient(script(turns)), database_url=url).launch()
    run_id = f"storage-{turns}"
    response = await swarm.arun(AGENT, MESSAGES, run_id=run_id)
    assert response.messages[-1]["content"] == "All noted.", response.messages[-1]
    assert len(response.context_variables) == turns
    steps = (await swarm.aget_run(run_id)).steps
    PLAN["outputs"] = [s.output["message"] for s in steps if s.kind in ("model", "tool")]
    bare_id = f"storage-bare-{turns}"
    with SetWorkflowID(bare_id):
        handle = await DBOS.start_workflow_async(bare_workflow, turns)
    await handle.get_result()
    return stored_bytes(url, run_id), stored_bytes(url, bare_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 20 and 40")
    parser.add_argument("--turns", type=int, nargs="+", help="tool calls per run")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    turns_list = args.turns or ([20, 40] if args.quick else [100, 200, 400])
    rows = []
    with databases(postgres=not args.no_postgres) as dbs:
        for label, url in dbs:
            for turns in turns_list:
                durable, bare = asyncio.run(measure(url, turns))
                rows.append([label, turns, f"{durable / 1e3:.0f}", f"{bare / 1e3:.0f}",
                             f"{durable / bare:.2f}x"])  # fmt: skip
            shutdown()
    print_table(
        "Stored step outputs (KB) of one run; baseline: a bare DBOS workflow storing only the "
        "run's messages. Linear growth: durable/bare stays flat as T doubles.",
        ["database", "tool calls T", "durable KB", "bare KB", "durable/bare"],
        rows,
    )


if __name__ == "__main__":
    main()
