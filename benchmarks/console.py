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

With `--viewers 50,200` it measures live viewers instead: the same 20 real runs (8 of them
waiting for a person, so nothing changes), a real `durable-swarm serve` child process counting
every SQL statement it sends (SQLAlchemy engine events, `_console_serve.py`), and N concurrent
Server-Sent Events clients spread over the 8 waiting runs. Once every client has its run's
status, it counts for `--seconds` (default 10): statements per second, per idle viewer, and on
PostgreSQL the database's transactions per second (`pg_stat_database`, this database only), the
console's CPU and its peak RSS. `--baseline-src DIR` measures another checkout's `src` the same
way (before: `git archive main src | tar -x -C /tmp/main`, then `--baseline-src /tmp/main/src`).

    .venv/bin/python benchmarks/console.py --viewers 50,200 --backends sqlite,postgres \
        --baseline-src /tmp/main/src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
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
        first = http.get("/api/runs")
        unchanged = {"If-None-Match": first.headers.get("etag", "")}
        again = http.get("/api/runs", headers=unchanged)
        print(f"{label}: GET /api/runs answers {len(first.content):,} bytes; again with its "
              f"ETag: {again.status_code}, {len(again.content):,} bytes")  # fmt: skip
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("runs list, first page + total", lambda: runs_page(client)),
            ("  GET /api/runs (the app)", lambda: http.get("/api/runs").raise_for_status()),
            ("  the same, unchanged (304)", lambda: http.get("/api/runs", headers=unchanged)),
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


# --- live viewers ------------------------------------------------------------------------------

SERVE_CHILD = Path(__file__).resolve().with_name("_console_serve.py")
WAITING = [f"t-{kind}-{n}" for kind in ("ask", "pay") for n in range(TEMPLATES["ask"])]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConsoleChild:
    """`durable-swarm serve` in a child process counting its SQL statements."""

    def __init__(self, url: str, src: str | None, workdir: str) -> None:
        self.port = _free_port()
        self.count_file = os.path.join(workdir, f"count-{self.port}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_SWARM_TOKEN")}
        argv = [sys.executable, str(SERVE_CHILD), self.count_file, "--database-url", url]
        argv += ["--port", str(self.port)]
        if src is None:  # this checkout: no token, caps above the viewers
            argv += ["--no-token", "--max-streams", "100000", "--max-streams-per-client", "100000"]
        else:
            env["PYTHONPATH"] = src
        self.log = open(os.path.join(workdir, f"console-{self.port}.log"), "w")  # noqa: SIM115
        self.process = subprocess.Popen(argv, env=env, stdout=self.log, stderr=self.log)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(self.base + "/static/app.css", timeout=5)
                break
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the console did not start: see {self.log.name}") from None
                time.sleep(0.2)

    def statements(self) -> int:
        try:
            return int(Path(self.count_file).read_text() or 0)
        except (OSError, ValueError):
            return 0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


async def _viewer(http: httpx.AsyncClient, run_id: str, ready: asyncio.Event) -> None:
    async with http.stream("GET", f"/api/runs/{quote(run_id, safe='')}/events") as response:
        if response.status_code != 200:
            raise RuntimeError(f"stream refused: {response.status_code} {await response.aread()!r}")
        async for line in response.aiter_lines():
            if line == "event: status":
                ready.set()


def _pg_transactions(url: str) -> int | None:
    if not url.startswith("postgresql"):
        return None
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else None


async def _watch(child: ConsoleChild, url: str, viewers: int, seconds: float) -> list[Any]:
    limits = httpx.Limits(max_connections=viewers + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(30, read=None)
    async with httpx.AsyncClient(base_url=child.base, limits=limits, timeout=timeout) as http:
        ready = [asyncio.Event() for _ in range(viewers)]
        tasks = [
            asyncio.create_task(_viewer(http, WAITING[i % len(WAITING)], ready[i]))
            for i in range(viewers)
        ]
        started = time.monotonic()
        while sum(r.is_set() for r in ready) < viewers and time.monotonic() - started < 120:
            failed = [t for t in tasks if t.done() and t.exception()]
            if failed:
                raise RuntimeError(str(failed[0].exception()))
            await asyncio.sleep(0.2)
        settled = time.monotonic() - started
        served = sum(r.is_set() for r in ready)
        await asyncio.sleep(2)
        q0, x0, c0 = child.statements(), _pg_transactions(url), child.cpu_seconds()
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        q1, x1, c1 = child.statements(), _pg_transactions(url), child.cpu_seconds()
        t1 = time.monotonic()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = t1 - t0
    per_second = (q1 - q0) / elapsed
    xacts = f"{((x1 or 0) - (x0 or 0) - 1) / elapsed:.1f}" if x0 is not None else "-"
    return [
        viewers,
        min(viewers, len(WAITING)),
        f"{served}/{viewers} in {settled:.1f} s",
        f"{per_second:.1f}",
        f"{per_second / viewers:.3f}",
        xacts,
        f"{100 * (c1 - c0) / elapsed:.0f}%",
        f"{child.peak_rss_mb():.0f}",
    ]  # fmt: skip


def measure_viewers(
    label: str, url: str, counts: list[int], seconds: float, baseline: str | None
) -> list[list[Any]]:
    make_templates(url)
    rows = []
    versions = [("main", baseline)] if baseline else []
    versions.append(("this", None))
    with tempfile.TemporaryDirectory(prefix="console-viewers-") as workdir:
        for version, src in versions:
            for viewers in counts:
                child = ConsoleChild(url, src, workdir)
                try:
                    row = asyncio.run(_watch(child, url, viewers, seconds))
                finally:
                    child.stop()
                rows.append([version, *row])
                print(f"{label} {version} {viewers} viewers: {row}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 runs, 5 repeats")
    parser.add_argument("--runs", type=int, help="runs in the database (default 100,000)")
    parser.add_argument("--repeat", type=int, help="timings per query (default 20)")
    parser.add_argument("--backends", default="postgres", help="postgres and/or sqlite")
    parser.add_argument("--viewers", help="measure live viewers instead, e.g. 50,200")
    parser.add_argument("--seconds", type=float, default=10.0, help="viewers: counting time")
    parser.add_argument("--baseline-src", help="viewers: also measure this checkout's src")
    args = parser.parse_args()
    if args.viewers:
        counts = [int(n) for n in args.viewers.split(",")]
        wanted_backends = set(args.backends.split(","))
        with databases(postgres="postgres" in wanted_backends) as dbs:
            for label, url in dbs:
                if label not in wanted_backends:
                    continue
                rows = measure_viewers(label, url, counts, args.seconds, args.baseline_src)
                print_table(
                    f"Idle live viewers ({label}): SQL statements sent by `serve` while "
                    f"nothing changes, counted for {args.seconds:g} s",
                    ["code", "viewers", "runs", "first status", "statements/s",
                     "per viewer/s", "pg xacts/s", "CPU", "peak RSS MB"],
                    rows,
                )  # fmt: skip
        return
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
