"""A long tool result is stored once, in its step's output: the run's final result names that step
instead of repeating the text, and every reader (the live result, `get_run`, a thin client's
result, a replay) gets the text back whole. SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3

from durable_swarm import Agent
from durable_swarm.durable import DurableClient
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "hi"}]
BIG = "stored-once:" + "z" * 200_000


def copies_in_database(url: str, needle: str) -> int:
    """How many stored values, in every text column of every table, contain `needle`."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            columns = conn.execute(
                "SELECT table_schema, table_name, column_name FROM information_schema.columns "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                "AND data_type IN ('text', 'character varying', 'json', 'jsonb', 'bytea')"
            ).fetchall()
            found = 0
            for schema, table, column in columns:
                row = conn.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" '
                    f'WHERE position(%s in "{column}"::text) > 0',
                    (needle,),
                ).fetchone()
                found += row[0] if row else 0
            return found
    conn = sqlite3.connect(url)
    try:
        found = 0
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for column in [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]:
                found += conn.execute(
                    f'SELECT count(*) FROM "{table}" WHERE instr(CAST("{column}" AS TEXT), ?) > 0',
                    (needle,),
                ).fetchone()[0]
        return found
    finally:
        conn.close()


def test_a_long_tool_result_is_stored_once_and_read_back_whole(
    durable_swarm_factory, database_url, run_id
):
    def dump() -> str:
        """Dump a lot."""
        return BIG

    client = ScriptedClient(
        lambda messages, tools: (
            text("short answer") if messages[-1]["role"] == "tool" else calls(ToolCall("dump"))
        )
    )
    swarm = durable_swarm_factory(client)
    agent = Agent(name="StoredOnce", functions=[dump])

    response = swarm.run(agent, USER, run_id=run_id)

    assert response.messages[1]["content"] == BIG
    assert copies_in_database(database_url, "stored-once:zzzz") == 1
    info = swarm.get_run(run_id)
    assert info.messages[2]["content"] == BIG  # the input message comes first
    assert info.new_messages == response.messages
    assert swarm.run(agent, USER, run_id=run_id).messages == response.messages  # read again
    with DurableClient(database_url) as thin:
        assert thin.handle(run_id).result(timeout=60).messages == response.messages
    # A replay (fork after the tool step) reads the stored output, not the tool.
    tool_step = next(s for s in info.steps if s.kind == "tool")
    forked = swarm.fork(run_id, tool_step.step + 1).result()
    assert forked.messages[1]["content"] == BIG
