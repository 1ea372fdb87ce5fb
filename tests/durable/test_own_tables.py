"""The library's own tables hold ids of any length, as DBOS's run ids and a model's tool call ids
have none, and tables made by earlier releases (ids of at most 255 characters, which PostgreSQL
enforces) are widened at first use. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from durable_swarm import DurableSwarmError
from durable_swarm.durable._decisions import DECISIONS_TABLE, DecisionLog, DecisionRecord
from durable_swarm.durable._tables import _made, engine_for
from durable_swarm.testing import ScriptedClient, text

_OLD = {
    DECISIONS_TABLE: f"""CREATE TABLE {DECISIONS_TABLE} (
        run_id VARCHAR(255) NOT NULL, wait_id INTEGER NOT NULL,
        tool_call_id VARCHAR(255) NOT NULL, approved INTEGER NOT NULL, message TEXT,
        decided_by VARCHAR(255), decided_at VARCHAR(64) NOT NULL,
        PRIMARY KEY (run_id, wait_id))""",
}


def test_tables_of_earlier_releases_take_long_ids(durable_swarm_factory) -> None:
    url = durable_swarm_factory(ScriptedClient(lambda m, t: text("ok"))).database_url
    engine = engine_for(url)
    with engine.begin() as conn:
        for table, ddl in _OLD.items():
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
            conn.execute(sa.text(ddl))
            _made.discard((url, table))  # as in a process that has not used them yet

    run_id, call_id = "r" * 300, "c" * 300
    decision = DecisionRecord(run_id, 3, call_id, True, "fine", "b" * 300, "2026-11-27T00:00:00Z")
    assert DecisionLog(url).record(decision) is None
    assert DecisionLog(url).find(run_id, tool_call_id=call_id) == decision

    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            kinds = conn.execute(
                sa.text(
                    "SELECT table_name, column_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND column_name IN "
                    "('run_id', 'tool_call_id', 'decided_by') AND table_name = :d"
                ),
                {"d": DECISIONS_TABLE},
            ).all()
        assert {kind for _, _, kind in kinds} == {"text"}, kinds
        assert len(kinds) == 3


def test_a_decision_holding_a_nul_byte_is_refused_before_anything_is_stored(
    durable_swarm_factory,
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(lambda m, t: text("ok")))
    for call, message, by in (("call-1", "no\x00way", None), ("call-1", "fine", "ada\x00")):
        with pytest.raises(DurableSwarmError, match=r"NUL character .*nothing was sent"):
            swarm.reject("some-run", call, message, by=by)
    with pytest.raises(DurableSwarmError, match=r"NUL character .*nothing was sent"):
        swarm.approve("some-run", "call\x00-1")
    assert DecisionLog(swarm.database_url).find("some-run", tool_call_id="call-1") is None
