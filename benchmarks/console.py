"""The console's runs list with many runs in the database: how long a page takes to answer.

For each database (PostgreSQL, the target; `--backends sqlite,postgres` adds a SQLite file):

1. Real runs are made with `DurableSwarm` and the real `openai` client on the fake server: 12
   that succeed (a model call, a tool call, a final answer), 4 waiting for a person's answer and
   4 waiting for an approval.
2. Their rows in DBOS's tables (status, inputs, outputs, steps, events) are copied in SQL until
   the database holds N runs (default 100,000; `--quick`: 10,000), each copy with its own run
   id and creation time: the rows the console reads are exactly what real runs wrote. Then
   `ANALYZE` (what autovacuum does for a database in use after such a load).
3. With DBOS shut down, a thin `DurableClient` (what `durable-swarm serve` uses) answers what the
   console asks, each query repeated (median and worst reported): the first page of the runs
   list as `GET /api/runs` builds it (50 runs, the total count, model calls and tokens of the
   page), filtered by status, agent and text search, a deep page, the approvals inbox (its first
   100, as `GET /api/approvals` gives them), one run's page, and `/metrics`. `GET /api/runs`
   is also timed over the app itself (in process, through FastAPI's test client: routing,
   validation and JSON included).

Nothing is asserted; the figures are printed as a table. The databases are removed at the end.

    .venv/bin/python benchmarks/console.py            # 100,000 runs on PostgreSQL
    .venv/bin/python benchmarks/console.py --quick    # 10,000 runs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from _common import databases, print_table
from fastapi.testclient import TestClient

from durable_swarm import Agent, DurableSwarm, ask_user
from durable_swarm.durable import DurableClient, shutdown
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls, text
from durable_swarm.toolkit import tool
from durable_swarm.web import create_app
from durable_swarm.web._metrics import metrics_text

TEMPLATES = {"ok": 12, "ask": 4, "pay": 4}
APPROVAL = "waiting_for_approval"
# The tables holding a run's rows (each names its run in `workflow_uuid`).
RUN_TABLES = (
    "workflow_status",
    "workflow_input",
    "workflow_output",
    "operation_outputs",
    "workflow_events",
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


@tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount (a person approves it)."""
    return f"Refunded {amount}"


def script(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    said = next(str(m["content"]) for m in messages if m["role"] == "user")
    if last["role"] == "tool":
        return text(f"Done: {last['content']}")
    if "weather" in said:
        return calls(ToolCall("get_weather", {"city": "Paris"}))
    if "order" in said:
        return calls(ToolCall("ask_user", {"question": "Which order?"}))
    return calls(ToolCall("refund", {"amount": 42}))


QUESTIONS = {"ok": "weather in Paris?", "ask": "where is my order?", "pay": "refund me"}


def make_templates(url: str) -> list[str]:
    """The real runs the copies are made of; returns their ids once each has settled."""
    agent = Agent(name="Support", functions=[get_weather, ask_user, refund])
    ids = []
    with FakeOpenAIServer(script) as server:
        swarm = DurableSwarm(server.client(), database_url=url)
        for kind, count in TEMPLATES.items():
            for n in range(count):
                run_id = f"t-{kind}-{n}"
                content = f"{QUESTIONS[kind]} (ticket {n})"
                swarm.start(agent, [{"role": "user", "content": content}], run_id=run_id)
                ids.append(run_id)
        wanted = {"ok": "succeeded", "ask": "waiting_for_input", "pay": "waiting_for_approval"}
        deadline = time.monotonic() + 300
        for run_id in ids:
            while (status := swarm.get_run(run_id).status) != wanted[run_id.split("-")[1]]:
                if time.monotonic() > deadline or status in ("succeeded", "failed"):
                    raise RuntimeError(f"template run {run_id} is {status}")
                time.sleep(0.05)
    shutdown()
    return ids


def copy_runs(client: DurableClient, templates: list[str], total: int) -> None:
    """Copy the template runs' rows until the database holds `total` runs."""
    engine, tables = client.runs.query._engine, client.runs.query._tables
    copies = max(0, (total - 1) // len(templates))  # copies of each template, plus itself
    nums = sa.Table("bench_numbers", sa.MetaData(), sa.Column("g", sa.Integer, primary_key=True))
    with engine.begin() as conn:
        nums.create(conn)
        conn.execute(nums.insert(), [{"g": g} for g in range(1, copies + 1)])
        for name in RUN_TABLES:
            table = getattr(tables, name)
            columns = []
            for column in table.c:
                if column.name == "workflow_uuid":
                    value: Any = column + "-c" + sa.cast(nums.c.g, sa.Text)
                elif column.name == "created_at":
                    value = column - nums.c.g * 1000  # one run a second, going back in time
                else:
                    value = column
                columns.append(value)
            select = (
                sa.select(*columns)
                .select_from(table.join(nums, sa.true()))
                .where(table.c.workflow_uuid.in_(templates))
            )
            conn.execute(sa.insert(table).from_select([c.name for c in table.c], select))
        nums.drop(conn)
    with engine.connect() as conn:  # fresh statistics, as autovacuum gives a database in use
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median and worst wall time of `fn` in milliseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def runs_page(client: DurableClient, **filters: Any) -> Any:
    """What `GET /api/runs` asks the client: a page, its model calls and tokens, the total."""
    offset = filters.pop("offset", 0)
    runs = client.list_runs(**filters, limit=50, offset=offset)
    client.runs.query.model_usage([r.run_id for r in runs])
    return runs, client.count_runs(**filters)


def measure(label: str, url: str, total: int, repeat: int) -> list[list[Any]]:
    started = time.perf_counter()
    templates = make_templates(url)
    with DurableClient(url) as client:
        copy_runs(client, templates, total)
        filled = time.perf_counter() - started
        count = client.count_runs()
        print(f"{label}: {count:,} runs in the database (made and copied in {filled:.0f} s)")
        http = TestClient(create_app(client))
        deep = min(50_000, total // 2)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("runs list, first page + total", lambda: runs_page(client)),
            ("  GET /api/runs (the app)", lambda: http.get("/api/runs").raise_for_status()),
            ("  status=succeeded", lambda: runs_page(client, status="succeeded")),
            ("  status=waiting_for_approval", lambda: runs_page(client, status=APPROVAL)),
            ("  agent=Support", lambda: runs_page(client, agent="Support")),
            ("  search 'ticket 3'", lambda: runs_page(client, search="ticket 3")),
            (f"  page at offset {deep:,}", lambda: runs_page(client, offset=deep)),
            ("approvals inbox (100)", lambda: http.get("/api/approvals").raise_for_status()),
            ("one run's page", lambda: http.get("/api/runs/t-ok-0").raise_for_status()),
            ("/metrics", lambda: metrics_text(client.runs.query)),
        ]  # fmt: skip
        rows = []
        for name, fn in cases:
            median, worst = timed(fn, repeat)
            rows.append([name, f"{median:.1f}", f"{worst:.1f}"])
        search = runs_page(client, search="ticket 3")
        print(f"{label}: the search finds {search[1]:,} runs; the approvals inbox holds "
              f"{len(client.list_approvals()):,}")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 runs, 5 repeats")
    parser.add_argument("--runs", type=int, help="runs in the database (default 100,000)")
    parser.add_argument("--repeat", type=int, help="timings per query (default 20)")
    parser.add_argument("--backends", default="postgres", help="postgres and/or sqlite")
    args = parser.parse_args()
    total = args.runs or (10_000 if args.quick else 100_000)
    repeat = args.repeat or (5 if args.quick else 20)
    wanted = set(args.backends.split(","))
    with databases(postgres="postgres" in wanted) as dbs:
        for label, url in dbs:
            if label not in wanted:
                continue
            rows = measure(label, url, total, repeat)
            print_table(
                f"Console queries with {total:,} runs ({label}), {repeat} timings each",
                ["query", "median ms", "worst ms"],
                rows,
            )


if __name__ == "__main__":
    main()
