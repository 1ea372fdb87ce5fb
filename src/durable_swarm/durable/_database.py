"""The run database: which one (URL resolution), how it is shown to people, how it is opened.

Every part of the library that picks, names or connects to the run database goes through here:
`resolve_database_url` for the order of precedence, `display_url` wherever a URL reaches an error
message or the terminal (a password never does), and `create_engine` for the SQLAlchemy engines
this library opens itself beside DBOS's own (the worker table, the CLI's read-only checks).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import DurableSwarmError

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "DEFAULT_SQLITE_FILE",
    "create_engine",
    "describe_fault",
    "display_url",
    "is_postgres",
    "prepare_sqlite",
    "resolve_database_url",
    "sqlite_path",
    "transient_fault",
]

DEFAULT_SQLITE_FILE = "durable_swarm.sqlite"
_SQLITE_PREFIX = "sqlite:///"
_HIDDEN = "***"


def resolve_database_url(database_url: str | None = None) -> str:
    """The run database: the argument, else `DURABLE_SWARM_DATABASE_URL`, else
    `DBOS_SYSTEM_DATABASE_URL`, else `durable_swarm.sqlite` in the working directory.

    A bare file path means a SQLite file; `postgresql://...` (or `postgres://...`) selects
    PostgreSQL. SQLite paths are made absolute so a later `chdir` cannot switch databases.
    Returns `sqlite:///<absolute path>` or `postgresql://...`; raises `DurableSwarmError` for any
    other scheme.
    """
    url = (
        database_url
        or os.environ.get("DURABLE_SWARM_DATABASE_URL")
        or os.environ.get("DBOS_SYSTEM_DATABASE_URL")
        or DEFAULT_SQLITE_FILE
    )
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql"):
        return url
    if url.startswith(_SQLITE_PREFIX):
        path = url[len(_SQLITE_PREFIX) :]
    elif "://" in url:
        raise DurableSwarmError(
            f"Unsupported database URL {display_url(url)!r}: use a SQLite file path, "
            "`sqlite:///path`, or `postgresql://user@host:port/database`."
        )
    else:
        path = url
    return _SQLITE_PREFIX + str(Path(path).expanduser().resolve())


def is_postgres(url: str) -> bool:
    """Whether the resolved `url` names a PostgreSQL database."""
    return url.startswith("postgresql")


def sqlite_path(url: str) -> Path | None:
    """The file of a resolved SQLite `url`, or None for a server database."""
    return Path(url[len(_SQLITE_PREFIX) :]) if url.startswith(_SQLITE_PREFIX) else None


def display_url(url: str) -> str:
    """`url` as shown to people: a SQLite file's path, or the URL with its password (in the
    user part or a `password=` query parameter) replaced by `***`. Never fails."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    try:
        parts = urlsplit(url)
    except ValueError:
        return _HIDDEN if "@" in url or "password" in url.lower() else url
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{_HIDDEN}@{host}"
    query = parts.query
    if "password" in query.lower():
        pairs = parse_qsl(query, keep_blank_values=True)
        hidden = [(k, _HIDDEN if k.lower() == "password" else v) for k, v in pairs]
        query = urlencode(hidden, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# Set to 1 to have the pools of a process's background work (DBOS's and the heartbeat's) check
# each PostgreSQL connection with a round trip before use (see `checks_connections`).
PRE_PING_ENV = "DURABLE_SWARM_POOL_PRE_PING"


def checks_connections() -> bool:
    """Whether the pools a process uses all the time (DBOS's own, when the library launches
    DBOS, and the heartbeat's) check each connection before use. Off by default: the check is
    a round trip, and a transaction in PostgreSQL's count, at every use, about half of what an
    idle worker costs the database. Without it a connection that died (a database restart)
    fails its next statement instead: SQLAlchemy then replaces the pool's connections, DBOS
    retries its calls, and the heartbeat beats again at once. `DURABLE_SWARM_POOL_PRE_PING=1`
    turns the check back on (for a network that drops idle connections unseen)."""
    return os.environ.get(PRE_PING_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def create_engine(
    url: str, *, connect_timeout: int = 10, pool_size: int | None = None, pre_ping: bool = True
) -> sa.Engine:
    """A SQLAlchemy engine on the resolved run database `url`, with this library's settings:
    SQLite waits up to 30 s for a lock; PostgreSQL uses the psycopg (3) driver, a pool of
    `pool_size` connections (SQLAlchemy's default if None), checked before use unless
    `pre_ping` is False, and gives up connecting after `connect_timeout` seconds. Raises
    `sqlalchemy.exc.ArgumentError` for a malformed URL and `ModuleNotFoundError` without the
    psycopg driver."""
    import sqlalchemy as sa

    if sqlite_path(url) is not None:
        return sa.create_engine(url, connect_args={"timeout": 30})
    address = sa.engine.make_url(url)
    if address.drivername in ("postgresql", "postgres"):
        address = address.set(drivername="postgresql+psycopg")
    pool: dict[str, Any] = {} if pool_size is None else {"pool_size": pool_size}
    return sa.create_engine(
        address, pool_pre_ping=pre_ping, connect_args={"connect_timeout": connect_timeout}, **pool
    )


_FAULTS = [
    ("readonly", "the database file (or its folder) is read-only"),
    ("read-only", "the database file (or its folder) is read-only"),
    ("disk is full", "the disk is full"),
    ("no space left", "the disk is full"),
    ("database is locked", "the database is locked by another process for longer than the busy "
     "timeout (30 s)"),
    ("unable to open", "the database file cannot be opened"),
    ("disk i/o error", "the disk failed to read or write"),
]  # fmt: skip


def _writable(path: Path) -> bool:
    return os.access(path.parent, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def describe_fault(error: BaseException, url: str | None = None) -> str:
    """What a database error means for a person: the cause (read-only file, full disk, locked
    database...) followed by the driver's own words. With the SQLite `url`, a file or folder
    that cannot be written is named as the cause whatever the driver said."""
    words = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    lowered = words.lower()
    path = sqlite_path(url) if url else None
    if path is not None and path.parent.exists() and not _writable(path):
        lowered = "read-only"
    for needle, cause in _FAULTS:
        if needle in lowered:
            return f"{cause} ({words})"
    return f"{type(getattr(error, 'orig', None) or error).__name__}: {words}"


def transient_fault(error: BaseException) -> bool:
    """Whether the database `error` (a SQLAlchemy error) is a fault of the database's state
    that goes away once fixed, so the statement may succeed later: a read-only file, a full
    disk, a lock held too long, a failing disk, or a lost or refused connection. A wrong
    statement or value (a bug, the same every time) is not."""
    import sqlalchemy as sa

    if not isinstance(error, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return False
    if getattr(error, "connection_invalidated", False):
        return True
    words = str(getattr(error, "orig", None) or error).lower()
    if any(needle in words for needle, _ in _FAULTS):
        return True
    return "sqlite" not in type(getattr(error, "orig", None) or error).__module__


def prepare_sqlite(url: str) -> None:
    """Put the SQLite database of `url` in WAL mode (readers never block the writer, and a
    crash never leaves a half-written page); the mode is stored in the file, once.

    Switching needs a moment with no other transaction open, and SQLite answers "locked" at once
    (without waiting) while another process is in one, so the switch is tried again for up to
    30 s; if other processes keep the file busy all that time, the database is left in its
    current mode (a later launch switches it) with a warning. Raises `sqlite3.Error` for any
    other fault (e.g. a read-only file). No-op for PostgreSQL."""
    import sqlite3
    import time

    path = sqlite_path(url)
    if path is None:
        return
    deadline = time.monotonic() + 30
    while True:
        db = sqlite3.connect(path, timeout=30)
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            if time.monotonic() >= deadline:
                logging.getLogger("durable_swarm").warning(
                    "SQLite database %s stayed busy for 30 s: left in its current journal mode "
                    "(WAL is set by a later launch)",
                    path,
                )
                return
        finally:
            db.close()
        time.sleep(0.05)
