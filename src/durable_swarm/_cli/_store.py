"""Opening the run database for an operator command, without side effects on it.

A command never launches DBOS (that would make it a worker, recovering and dequeuing runs it has
no agents for): it reads and steers runs through a `DurableClient`, a thin client on DBOS's
`DBOSClient`. The database must already exist: a missing SQLite file or PostgreSQL database is
reported, never created.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..durable._client import DurableClient
from ..durable._database import create_engine, display_url, sqlite_path
from ..durable._engine import RUNS_TABLE, RUNS_TABLE_POSTGRES
from ..errors import DatabaseUnavailableError

__all__ = ["CliError", "check_database", "confirm_deletion", "open_swarm"]


class CliError(Exception):
    """A problem the command reports in one line on stderr, with a non-zero exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


_HOW_TO_PICK = (
    "Pass --database-url (or set DURABLE_SWARM_DATABASE_URL) to the database your app uses"
)


def check_database(url: str) -> None:
    """Raise `CliError` unless `url` is an existing run database; create or change nothing."""
    path = sqlite_path(url)
    if path is not None:
        _check_sqlite(path)
    else:
        _check_postgres(url)


def _check_sqlite(path: Path) -> None:
    if not path.is_file():
        where = "it is a directory" if path.is_dir() else "the file does not exist"
        raise CliError(
            f"No run database at {path}: {where}, and nothing was created. {_HOW_TO_PICK} "
            "(by default `durable_swarm.sqlite` in the directory the app runs in)."
        )
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (RUNS_TABLE,)
        ).fetchone()
    except sqlite3.DatabaseError as e:
        raise CliError(
            f"{path} is not a run database ({e}); nothing was changed. {_HOW_TO_PICK}."
        ) from e
    finally:
        db.close()
    if not found:
        raise CliError(
            f"{path} is not a run database (it has no DBOS tables); nothing was changed. "
            f"{_HOW_TO_PICK}."
        )


def _check_postgres(url: str) -> None:
    import sqlalchemy as sa

    shown = display_url(url)
    try:
        engine = create_engine(url, connect_timeout=5)
    except ModuleNotFoundError as e:
        raise CliError(
            f"PostgreSQL needs the psycopg driver ({e}): pip install 'durable-swarm[postgres]'."
        ) from e
    except Exception as e:
        cause = str(e).replace(url, shown)
        raise CliError(f"Malformed database URL {shown!r}: {cause}. {_HOW_TO_PICK}.", 2) from e
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.text(f"SELECT to_regclass('{RUNS_TABLE_POSTGRES}')")).scalar()
    except Exception as e:
        cause = " ".join(str(getattr(e, "orig", None) or e).split())
        missing = re.search(r'database "([^"]+)" does not exist', cause)
        if missing:
            raise CliError(
                f"No run database at {shown}: the server has no database {missing.group(1)!r}, "
                f"and nothing was created. {_HOW_TO_PICK}."
            ) from e
        raise DatabaseUnavailableError(shown, cause) from e
    finally:
        engine.dispose()
    if found is None:
        raise CliError(
            f"{shown} is not a run database (it has no DBOS tables); nothing was changed. "
            f"{_HOW_TO_PICK}."
        )


@contextmanager
def open_swarm(url: str, *, check: bool = True) -> Iterator[DurableClient]:
    """A thin client on the existing run database `url` (closed when the block ends).
    `check=False` skips the existence check."""
    if check:
        check_database(url)
    client = DurableClient(url)  # raises DatabaseUnavailableError
    try:
        yield client
    finally:
        client.close()


def confirm_deletion(command: str, what: str, where: str, *, yes: bool, first: str) -> bool:
    """Whether `command` goes on deleting `what` from `where`: `--yes`, else the person's y/N
    on a terminal; off a terminal without `--yes`, a `CliError` saying to add it (or to look
    with `--dry-run` first: `first` says what that shows)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise CliError(
            f"{command} would delete {what}; not on a terminal, so nothing was deleted. "
            f"Add --yes to confirm (or --dry-run to {first} first).",
            2,
        )
    try:
        answer = input(f"Delete {what} from {where}? [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    if answer in ("y", "yes"):
        return True
    print("Nothing was deleted.")
    return False
