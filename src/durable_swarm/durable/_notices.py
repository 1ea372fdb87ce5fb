"""Why a pending run does not move: a notice the process holding it leaves in the run database,
so `get_run`, the CLI and the console of any process can show it (`RunInfo.problem`).

Today's only notice: the run needs an agent, or a function of a handoff rule, that the process
holding it has not imported or registered. A
notice names the executor that wrote it and counts only while the run is still that executor's
(a run handed to another process leaves the old notice behind, unread, until that process posts
its own). A notice is cleared when its run goes on; every post and clear also deletes the notices
of runs that are no longer pending or queued (their process died, the run was cancelled), so the
table never holds more rows than there are waiting runs.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from ._database import is_postgres
from ._tables import engine_for, engine_with, missing_table, text_columns

__all__ = ["NOTICES_TABLE", "Notices"]

NOTICES_TABLE = "durable_swarm_notices"

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {NOTICES_TABLE} (
    run_id TEXT PRIMARY KEY,
    executor_id VARCHAR(255) NOT NULL,
    notice TEXT NOT NULL,
    noticed_at VARCHAR(64) NOT NULL
)
"""
_UPGRADES = text_columns(NOTICES_TABLE, "run_id")


class Notices:
    """The notices table of one run database."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url

    def _engine(self) -> sa.Engine:
        return engine_with(self._url, NOTICES_TABLE, _CREATE_TABLE, _UPGRADES)

    def _forget(self, conn: sa.Connection, run_id: str) -> None:
        """Delete `run_id`'s notice and those of runs that no longer wait (finished, failed,
        cancelled, gone)."""
        runs = "dbos.workflow_status" if is_postgres(self._url) else "workflow_status"
        conn.execute(
            sa.text(
                f"DELETE FROM {NOTICES_TABLE} WHERE run_id = :id OR NOT EXISTS (SELECT 1 FROM "
                f"{runs} r WHERE r.workflow_uuid = {NOTICES_TABLE}.run_id AND r.status IN "
                "('PENDING', 'ENQUEUED'))"
            ),
            {"id": run_id},
        )

    def post(self, run_id: str, executor_id: str, notice: str) -> None:
        """Leave `notice` on `run_id` (replacing an earlier one)."""
        at = datetime.now(timezone.utc).isoformat()
        with self._engine().begin() as conn:
            self._forget(conn, run_id)
            conn.execute(
                sa.text(
                    f"INSERT INTO {NOTICES_TABLE} (run_id, executor_id, notice, noticed_at) "
                    "VALUES (:id, :executor, :notice, :at)"
                ),
                {"id": run_id, "executor": executor_id, "notice": notice, "at": at},
            )

    def clear(self, run_id: str) -> None:
        """Delete `run_id`'s notice (the run goes on), and those of runs that no longer wait."""
        with self._engine().begin() as conn:
            self._forget(conn, run_id)

    def read(self, run_id: str, executor_id: str | None) -> str | None:
        """`run_id`'s notice if `executor_id` (the run's executor now) wrote it, else None."""
        query = sa.text(f"SELECT executor_id, notice FROM {NOTICES_TABLE} WHERE run_id = :id")
        try:
            with engine_for(self._url).begin() as conn:
                row = conn.execute(query, {"id": run_id}).first()
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return None  # no notice was ever left on this database
            raise
        if row is None or row[0] != executor_id:
            return None
        return str(row[1])
