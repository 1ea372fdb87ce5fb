"""This library's own small tables in the run database, beside DBOS's: one engine per database
per process; a table is created by its first write (processes creating it together may race:
retried), and reading a table not created yet reads nothing (a read never changes the
database)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

import sqlalchemy as sa

from ._database import create_engine

__all__ = [
    "RUN_TABLES",
    "engine_for",
    "engine_with",
    "forget_runs",
    "missing_table",
    "text_columns",
]

logger = logging.getLogger("durable_swarm")
_engines: dict[str, sa.Engine] = {}
_made: set[tuple[str, str]] = set()
_lock = threading.Lock()

# Every table of this library that keeps rows for a run, with its run id column: deleting a run
# (`runs delete`, `runs prune`, retention) deletes its rows here too. A new such table is added
# here (tests/durable/test_retention.py checks the known ones are).
RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("durable_swarm_decisions", "run_id"),
    ("durable_swarm_notices", "run_id"),  # written by releases before parked waits
    ("durable_swarm_session_runs", "run_id"),
    ("durable_swarm_waits", "run_id"),
)


def engine_for(database_url: str) -> sa.Engine:
    """The shared engine on `database_url` (for reads)."""
    with _lock:
        engine = _engines.get(database_url)
        if engine is None:
            engine = _engines[database_url] = create_engine(database_url, pool_size=2)
        return engine


def missing_table(error: sa.exc.DBAPIError) -> bool:
    """Whether `error` says the table read does not exist (yet)."""
    text = str(error.orig).lower()
    return "no such table" in text or ("does not exist" in text and "relation" in text)


def engine_with(
    database_url: str,
    table: str,
    ddl: str,
    upgrades: Mapping[str, str] | None = None,
    *,
    engine: sa.Engine | None = None,
) -> sa.Engine:
    """The shared engine on `database_url` (or `engine`, another engine on it), with `table`
    created by `ddl` if it is missing (for writes), then brought up to date by
    `upgrades[<dialect name>]` if given (a statement that changes nothing on a table already up
    to date)."""
    engine = engine or engine_for(database_url)
    with _lock:
        if (database_url, table) not in _made:
            for attempt in range(3):
                try:
                    with engine.begin() as conn:
                        conn.execute(sa.text(ddl))
                    break
                except sa.exc.DBAPIError:
                    if attempt == 2:
                        raise
            upgrade = (upgrades or {}).get(engine.dialect.name)
            if upgrade:
                upgrade_table(engine.begin, engine.dialect.name, table, upgrade)
            _made.add((database_url, table))
        return engine


def upgrade_table(
    begin: Callable[[], AbstractContextManager[sa.Connection]],
    dialect: str,
    table: str,
    statement: str,
    *,
    done: Callable[[], bool] | None = None,
    without: str = "it keeps working as it is",
) -> bool:
    """Best effort: run the upgrade `statement` of `table` in a transaction of `begin()`
    (under a 5 s lock timeout on PostgreSQL, so that it never holds up the table's users
    behind a long transaction). One that cannot be made now (the table belongs to another role,
    or a long transaction holds it) is logged, saying what works `without` it, and tried again
    by the next process; `done()`, asked after a failure, tells an upgrade another process
    made just now (not logged). Returns whether the table is upgraded."""
    try:
        with begin() as conn:
            if dialect == "postgresql":
                conn.execute(sa.text("SET LOCAL lock_timeout = '5s'"))
            conn.execute(sa.text(statement))
        return True
    except sa.exc.DBAPIError as e:
        if done is not None and done():
            return True
        logger.warning(
            "durable-swarm: could not upgrade the table %s (%s); %s. Run a process once as "
            "the table's owner to upgrade it.",
            table,
            str(e.orig).strip().splitlines()[0] if e.orig else e,
            without,
        )
        return False


def text_columns(table: str, *columns: str) -> dict[str, str]:
    """The upgrade (for `engine_with`) of `table`'s `columns` from VARCHAR(255), as earlier
    releases made them, to TEXT: PostgreSQL enforces the length, and DBOS's run ids and a
    model's tool call ids have none. SQLite does not enforce it, so it needs nothing."""
    names = ", ".join(f"'{c}'" for c in columns)
    alter = ", ".join(f"ALTER COLUMN {c} TYPE TEXT" for c in columns)
    return {
        "postgresql": f"""
DO $$ BEGIN
    IF EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = '{table}'
            AND column_name IN ({names}) AND data_type = 'character varying'
    ) THEN
        ALTER TABLE {table} {alter};
    END IF;
END $$
"""
    }


def forget_runs(database_url: str, run_ids: list[str]) -> None:
    """Delete the rows of `run_ids` from every table of `RUN_TABLES` (a table not created yet
    holds none)."""
    if not run_ids:
        return
    engine = engine_for(database_url)
    for table, column in RUN_TABLES:
        query = sa.text(f"DELETE FROM {table} WHERE {column} IN :ids").bindparams(
            sa.bindparam("ids", expanding=True)
        )
        try:
            with engine.begin() as conn:  # one transaction per table: PostgreSQL aborts a
                conn.execute(query, {"ids": list(run_ids)})  # transaction at a missing table
        except sa.exc.DBAPIError as e:
            if not missing_table(e):
                raise
