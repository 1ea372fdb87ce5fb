"""Shared pieces of the benchmarks: databases to run on, the scenario, worker processes, tables.

Every benchmark runs on a SQLite file in a temporary directory and on a fresh PostgreSQL database
`bench_<random>` (server from `DURABLE_SWARM_TEST_POSTGRES_URL`, default
`postgresql://postgres@127.0.0.1:5432/postgres`), created by DBOS at launch and dropped at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dbos import DBOS, SetWorkflowID

from durable_swarm import Agent
from durable_swarm.testing import Reply, ToolCall, calls, text

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULT_PREFIX = "RESULT "


# --- databases -----------------------------------------------------------------------------


TICK = os.sysconf("SC_CLK_TCK")  # clock ticks per second, the unit of /proc/PID/stat


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def postgres_server_url() -> str:
    """The PostgreSQL server the tests use (its maintenance database)."""
    return os.environ.get("DURABLE_SWARM_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _postgres_reachable(url: str) -> str | None:
    """None if PostgreSQL answers at `url`, else why not."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"


def _drop_postgres_database(server_url: str, database: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@contextlib.contextmanager
def databases(*, postgres: bool = True) -> Iterator[list[tuple[str, str]]]:
    """`[(label, url), ...]`: a temporary SQLite file, and a fresh PostgreSQL database if the
    server is reachable (otherwise a note is printed). Both are removed on exit."""
    dbs: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="durable-swarm-bench-") as tmp:
        dbs.append(("sqlite", "sqlite:///" + str(Path(tmp) / "bench.sqlite")))
        server = postgres_server_url()
        database = f"bench_{secrets.token_hex(4)}"
        if postgres:
            problem = _postgres_reachable(server)
            if problem is None:
                dbs.append(("postgres", _with_database(server, database)))
            else:
                print(f"note: PostgreSQL skipped, {server} unreachable ({problem})")
        try:
            yield dbs
        finally:
            if any(label == "postgres" for label, _ in dbs):
                _drop_postgres_database(server, database)


# --- the scenario ----------------------------------------------------------------------------


async def lookup(i: int) -> str:
    """A tool that does nothing but answer (async, so no worker-thread hop is measured)."""
    return f"result {i}: " + "x" * 40


def make_agent(sync: bool = False) -> Agent:
    """The benchmark agent; defined the same way in every process (recovery finds it by name).
    `sync=True`: agent "bench_sync", whose tool is `lookup_sync`."""
    if sync:
        return Agent(name="bench_sync", model="bench-model", instructions="Answer.",
                     functions=[lookup_sync])  # fmt: skip
    return Agent(name="bench", model="bench-model", instructions="Answer.", functions=[lookup])


def tool_script(tool_steps: int) -> Any:
    """A stateless script: the model calls the agent's one tool (`lookup` or `lookup_sync`) until
    `tool_steps` tool results are in the conversation, then answers. A run makes
    `tool_steps + 1` model calls."""

    def script(messages: list[dict[str, Any]], tools: Any) -> Reply:
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < tool_steps:
            return calls(ToolCall(tools[0]["function"]["name"], {"i": done}))
        return text(f"Done after {done} lookups.")

    return script


def lookup_sync(i: int) -> str:
    """`lookup` as a sync function (as most tools are)."""
    return f"result {i}: " + "x" * 40


# The `openai` client the bare runs use, and optionally the agent name they put in each assistant
# message as Swarm's `sender` (default "bench", `make_agent()`'s name); set by the process before it
# starts or recovers them.
BARE_CLIENT: dict[str, Any] = {}


@DBOS.workflow(name="bench.bare_run")
async def bare_run(messages: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    """The baseline of a whole run: model, tool, model as bare DBOS steps making the same
    `openai` calls as the durable run (`tool`: "lookup", an async step, or "lookup_sync", a
    sync one): the same request bodies, byte for byte (Swarm's request: the tool's description,
    `tool_choice`, `parallel_tool_calls`, `stream`, and the `sender`/`tool_name` keys Swarm
    leaves in the history), so the `openai` client does the same work for both."""
    client = BARE_CLIENT["client"]
    history = [{"role": "system", "content": "Answer."}, *messages]
    function = lookup_sync if tool == "lookup_sync" else lookup
    schema = {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}
    description = function.__doc__
    tools = [
        {
            "type": "function",
            "function": {"name": tool, "description": description, "parameters": schema},
        }
    ]

    async def model_step() -> dict[str, Any]:
        completion = await client.chat.completions.create(
            model="bench-model",
            stream=False,
            messages=history,
            parallel_tool_calls=True,
            tool_choice=None,
            tools=tools,
        )
        message: dict[str, Any] = json.loads(completion.choices[0].message.model_dump_json())
        message["sender"] = BARE_CLIENT.get("sender", "bench")
        return message

    first = await DBOS.run_step_async({"name": "model"}, model_step)
    history.append(first)
    call = first["tool_calls"][0]
    arguments = json.loads(call["function"]["arguments"])

    def tool_message(result: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call["id"], "tool_name": tool, "content": result}

    async def async_tool_step() -> dict[str, Any]:
        return tool_message(await lookup(**arguments))

    def sync_tool_step() -> dict[str, Any]:
        return tool_message(lookup_sync(**arguments))

    step = sync_tool_step if tool == "lookup_sync" else async_tool_step
    history.append(await DBOS.run_step_async({"name": "tool"}, step))
    history.append(await DBOS.run_step_async({"name": "model"}, model_step))
    return {"messages": history[2:]}


def launch_bare_dbos(db: str, executor_id: str) -> None:
    """DBOS as an app without durable-swarm would launch it: the library's DBOS configuration
    (JSON serializer, executor threads, application version), executor `executor_id`, no
    process registry; a restart with the same executor id recovers its pending workflows at
    launch."""
    from durable_swarm.durable._dbos import _config

    DBOS(config=_config(db, executor_id, 0.1))  # type: ignore[arg-type]
    DBOS.launch()


async def start_bare_run(messages: list[dict[str, Any]], tool: str, run_id: str) -> Any:
    """Start a bare run under `run_id`; its handle."""
    with SetWorkflowID(run_id):
        return await DBOS.start_workflow_async(bare_run, messages, tool)


def check_response(response: Any, tool_steps: int) -> None:
    """A run ended as the scenario says (a benchmark of broken runs would measure nothing)."""
    last = response.messages[-1]["content"]
    if last != f"Done after {tool_steps} lookups.":
        raise RuntimeError(f"unexpected final message {last!r}")


def make_async_client(base_url: str, http: str = "httpx", *, max_retries: int = 2) -> Any:
    """`openai.AsyncOpenAI` for the fake server, on openai's default httpx transport or on aiohttp
    (`openai.DefaultAioHttpClient`, needs `openai[aiohttp]`)."""
    import openai

    kwargs: dict[str, Any] = {"max_retries": max_retries, "timeout": 3600}
    if http == "aiohttp":
        kwargs["http_client"] = openai.DefaultAioHttpClient(timeout=3600)
    return openai.AsyncOpenAI(base_url=base_url, api_key="fake-key", **kwargs)


def aiohttp_available() -> bool:
    """Whether openai's aiohttp transport (`openai[aiohttp]`, i.e. httpx-aiohttp) is installed."""
    return importlib.util.find_spec("httpx_aiohttp") is not None


# --- measuring -----------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (getrusage ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """Resident set size now (from /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# --- worker processes ----------------------------------------------------------------------


def emit(result: dict[str, Any]) -> None:
    """Report a worker's result to the parent (one JSON line on stdout)."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def run_worker(script: str, args: Sequence[str], *, timeout: float = 1800) -> dict[str, Any]:
    """Run `python benchmarks/<script> <args>` and return the result it `emit`ted."""
    cmd = [sys.executable, str(BENCH_DIR / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return result_of(proc, f"worker {' '.join(args)}")


def result_of(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    """The result a finished worker process `emit`ted; else an error naming `what` failed."""
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])  # type: ignore[no-any-return]
    raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


# --- output --------------------------------------------------------------------------------


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table; floats get 2 decimals unless already formatted."""
    cells = [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
