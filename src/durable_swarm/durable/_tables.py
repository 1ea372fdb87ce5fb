"""This library's own small tables in the run database, beside DBOS's: one engine per database
per process; a table is created by its first write (processes creating it together may race:
retried), and reading a table not created yet reads nothing (a read never changes the
database)."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from ._database import create_engine

__all__ = ["engine_for", "engine_with", "missing_table"]

_engines: dict[str, sa.Engine] = {}
_made: set[tuple[str, str]] = set()
_lock = threading.Lock()


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


def engine_with(database_url: str, table: str, ddl: str) -> sa.Engine:
    """The shared engine on `database_url`, with `table` created by `ddl` if it is missing
    (for writes)."""
    engine = engine_for(database_url)
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
            _made.add((database_url, table))
        return engine
