"""Decisions on tool calls waiting for approval: exactly one per wait, whoever sends it.

`approve` and `reject` may be sent at the same moment from several threads or processes. Each
decision is first written to the table `durable_swarm_decisions` of the run database, keyed by
the run and its wait: the database's primary key lets exactly one INSERT in, and every other
sender reads the winner's row and gets a `DecisionConflictError` saying what was decided, by whom
and when. Only the winning decision is then sent to the run (a DBOS message with an idempotency
key). If the winner died between the two, the next sender for that wait (or a retry) delivers
the recorded decision before being told it lost, so a decision once recorded always reaches the
run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..errors import DecisionConflictError
from ._sealing import MARKER, is_sealed, keyring, open_sealed, seal, sealed_key_id
from ._tables import engine_for, engine_with, missing_table, text_columns

__all__ = ["DECISIONS_TABLE", "DecisionLog", "DecisionRecord"]

DECISIONS_TABLE = "durable_swarm_decisions"

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {DECISIONS_TABLE} (
    run_id TEXT NOT NULL,
    wait_id INTEGER NOT NULL,
    tool_call_id TEXT NOT NULL,
    approved INTEGER NOT NULL,
    message TEXT,
    decided_by TEXT,
    decided_at VARCHAR(64) NOT NULL,
    PRIMARY KEY (run_id, wait_id)
)
"""
_UPGRADES = text_columns(DECISIONS_TABLE, "run_id", "tool_call_id", "decided_by")


@dataclass(frozen=True)
class DecisionRecord:
    """One recorded decision on a tool call."""

    run_id: str
    wait_id: int
    tool_call_id: str
    approved: bool
    message: str | None
    by: str | None
    at: str

    def conflict(self, wanted: bool) -> DecisionConflictError:
        """The error for someone whose decision (`wanted`: approve or not) lost to this one."""
        return DecisionConflictError(
            self.run_id,
            self.tool_call_id,
            approved=self.approved,
            by=self.by,
            at=self.at,
            attempted="approve" if wanted else "reject",
        )


class DecisionLog:
    """The decisions table of one run database (engines shared per database in a process).

    With an encryption key, a decision's `message` (what a person wrote) is stored sealed,
    bound to its run (`_sealing`); the rest stays readable."""

    TABLE = DECISIONS_TABLE

    def __init__(self, database_url: str) -> None:
        self._url = database_url

    def _engine(self) -> sa.Engine:
        return engine_with(self._url, DECISIONS_TABLE, _CREATE_TABLE, _UPGRADES)

    def record(self, decision: DecisionRecord) -> DecisionRecord | None:
        """Write `decision`; None if it is the first for its wait, else the one recorded first."""
        engine = self._engine()
        try:
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        f"INSERT INTO {DECISIONS_TABLE} (run_id, wait_id, tool_call_id, approved, "
                        "message, decided_by, decided_at) VALUES (:run_id, :wait_id, "
                        ":tool_call_id, :approved, :message, :by, :at)"
                    ),
                    {
                        "run_id": decision.run_id,
                        "wait_id": decision.wait_id,
                        "tool_call_id": decision.tool_call_id,
                        "approved": int(decision.approved),
                        "message": _sealed(decision.message, decision.run_id),
                        "by": decision.by,
                        "at": decision.at,
                    },
                )
            return None
        except sa.exc.IntegrityError:
            found = self.find(decision.run_id, wait_id=decision.wait_id)
            assert found is not None  # a primary key conflict: the row exists
            return found

    def find(
        self, run_id: str, *, wait_id: int | None = None, tool_call_id: str | None = None
    ) -> DecisionRecord | None:
        """The decision recorded for `run_id`'s wait `wait_id`, or the last one on the tool call
        `tool_call_id`; None if there is none."""
        where, params = "run_id = :run_id", dict[str, Any](run_id=run_id)
        if wait_id is not None:
            where, params["wait_id"] = where + " AND wait_id = :wait_id", wait_id
        if tool_call_id is not None:
            where, params["call"] = where + " AND tool_call_id = :call", tool_call_id
        query = sa.text(
            "SELECT run_id, wait_id, tool_call_id, approved, message, decided_by, decided_at "
            f"FROM {DECISIONS_TABLE} WHERE {where} ORDER BY wait_id DESC"
        )
        try:
            with engine_for(self._url).begin() as conn:
                row = conn.execute(query, params).first()
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return None  # no decision was ever recorded on this database
            raise
        if row is None:
            return None
        message = open_sealed(row[4], bind=row[0], run_id=row[0]) if is_sealed(row[4]) else row[4]
        return DecisionRecord(row[0], int(row[1]), row[2], bool(row[3]), message, row[5], row[6])

    def reseal(self, batch_size: int) -> tuple[int, dict[str, int]]:
        """Seal every decision's message with the first key (see `_rotation`): how many were
        written, and how many were left because their key is missing here, by key id."""
        ring = keyring()
        assert ring is not None
        current = f"{MARKER}.{ring.primary}.%"
        written, missing = 0, dict[str, int]()
        last: tuple[str, int] = ("", -1)
        query = sa.text(
            f"SELECT run_id, wait_id, message FROM {DECISIONS_TABLE} WHERE message IS NOT NULL "
            "AND message NOT LIKE :current AND (run_id > :run OR (run_id = :run AND "
            "wait_id > :wait)) ORDER BY run_id, wait_id LIMIT :n"
        )
        update = sa.text(
            f"UPDATE {DECISIONS_TABLE} SET message = :new WHERE run_id = :run AND "
            "wait_id = :wait AND message = :old"
        )
        while True:
            params = {"current": current, "run": last[0], "wait": last[1], "n": batch_size}
            try:
                with engine_for(self._url).begin() as conn:
                    rows = conn.execute(query, params).all()
                    for run_id, wait_id, message in rows:
                        if is_sealed(message) and not ring.has(sealed_key_id(message)):
                            key_id = sealed_key_id(message)
                            missing[key_id] = missing.get(key_id, 0) + 1
                            continue
                        plain = (
                            open_sealed(message, bind=run_id, run_id=run_id)
                            if is_sealed(message)
                            else message
                        )
                        new = seal(plain, bind=run_id)
                        values = {"new": new, "run": run_id, "wait": wait_id, "old": message}
                        written += conn.execute(update, values).rowcount
            except sa.exc.DBAPIError as e:
                if missing_table(e):
                    return written, missing
                raise
            if len(rows) < batch_size:
                return written, missing
            last = (rows[-1][0], int(rows[-1][1]))


def _sealed(message: str | None, run_id: str) -> str | None:
    """`message` as stored: sealed (bound to its run) when a key is set."""
    if message is None or keyring() is None:
        return message
    return seal(message, bind=run_id)


def payload(decision: DecisionRecord, digest: Any) -> dict[str, Any]:
    """The message that delivers `decision` to the run (bound to the call's arguments)."""
    return {
        "tool_call_id": decision.tool_call_id,
        "digest": digest,
        "approved": decision.approved,
        "message": decision.message,
        "by": decision.by,
        "at": decision.at,
    }
