"""Sessions in the run database: the conversations runs carry over (see `durable_swarm.sessions`).

Two tables of this library's own (created by their first write, see `_tables`):

- `durable_swarm_sessions`: one row per session: its conversation (`payload`, written and read
  only through `encode_payload` / `decode_payload`), the run holding it (`held_by`, NULL when
  free), how many runs added to it and the latest, when it was made and last changed.
- `durable_swarm_session_runs`: one row per run that added to a session, keyed by run id: the
  append is done once per run, whatever crashes and retries happen around it.

A run of a session is started only after its starter *claims* the session: a compare-and-set
of `held_by` from NULL (or from a holder that is no longer live: a run that failed, was
cancelled, or never started within `START_GRACE_SECONDS`) to the new run's id. The session's
messages go into the run's input, so a recovered run starts from exactly the same messages.
When the run succeeds, its last step (`session:<name>`) writes the session's new conversation
and frees it, in one transaction with the run's row in `durable_swarm_session_runs`; a
recovered run that replays it finds its own row and writes nothing again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from .._aio import off_event_loop
from ..errors import DurableSwarmError, SessionBusyError, SessionNotFoundError
from ..sessions import SessionInfo, check_session_name
from ._sealing import MARKER as SEALED_PREFIX
from ._sealing import is_sealed, keyring, open_sealed, seal, sealed_key_id
from ._tables import engine_for, engine_with, missing_table

__all__ = [
    "PAYLOAD_VERSION",
    "SESSIONS_TABLE",
    "SESSION_RUNS_TABLE",
    "SessionCommands",
    "SessionStore",
    "decode_payload",
    "encode_payload",
]

logger = logging.getLogger("durable_swarm")

SESSIONS_TABLE = "durable_swarm_sessions"
SESSION_RUNS_TABLE = "durable_swarm_session_runs"
PAYLOAD_VERSION = 1
# A hold whose run does not exist yet is its starter's, between the claim and the run's start;
# past this long, that starter died in between and the hold is taken over.
START_GRACE_SECONDS = 60.0
_LIVE = ("PENDING", "ENQUEUED", "DELAYED", "PARKED")  # PARKED: see `_waits.live_status`

_CREATE_SESSIONS = f"""
CREATE TABLE IF NOT EXISTS {SESSIONS_TABLE} (
    name TEXT PRIMARY KEY,
    payload TEXT NOT NULL,
    message_count INTEGER NOT NULL,
    held_by TEXT,
    held_at VARCHAR(64),
    runs INTEGER NOT NULL,
    version INTEGER NOT NULL,
    last_run TEXT,
    created_at VARCHAR(64) NOT NULL,
    updated_at VARCHAR(64) NOT NULL
)
"""
_CREATE_SESSION_RUNS = f"""
CREATE TABLE IF NOT EXISTS {SESSION_RUNS_TABLE} (
    run_id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    added_at VARCHAR(64) NOT NULL
)
"""


def encode_payload(messages: list[dict[str, Any]], name: str) -> str:
    """Session `name`'s conversation as stored: JSON with its `schema_version`, sealed with
    this process's encryption key when it has one (AES-GCM, bound to the session's name, see
    `_sealing`). The one place a session's messages are written (with `decode_payload`, the one
    place they are read)."""
    data = {"schema_version": PAYLOAD_VERSION, "messages": messages}
    if keyring() is not None:
        return seal(data, bind=_bind(name))
    return json.dumps(data, ensure_ascii=False, allow_nan=False)


def decode_payload(text: str, name: str) -> list[dict[str, Any]]:
    """The conversation `encode_payload` stored for session `name` (raises
    `EncryptionKeyError` for a sealed one this process has no key for, and `DurableSwarmError`
    for a payload of a newer release, or one this library did not write)."""
    data = open_sealed(text, bind=_bind(name)) if is_sealed(text) else json.loads(text)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or not isinstance(data.get("messages"), list):
        raise DurableSwarmError(
            "A session's stored conversation is not one durable-swarm wrote (no schema_version "
            "or messages). Delete the session (`durable-swarm sessions delete NAME`)."
        )
    if version > PAYLOAD_VERSION:
        raise DurableSwarmError(
            f"A session was stored by a newer durable-swarm (payload version {version}; this "
            f"one reads up to {PAYLOAD_VERSION}). Upgrade durable-swarm in this process."
        )
    return list(data["messages"])


def _bind(name: str) -> str:
    return f"session:{name}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _time(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) and text else None


class SessionStore:
    """The sessions of one run database. `status_of(run_id)` is the DBOS status name of a run
    (None: no such run), to tell a live holder from one that ended."""

    def __init__(self, database_url: str, status_of: Callable[[str], str | None]) -> None:
        self._url = database_url
        self._status_of = status_of

    def _engine(self) -> sa.Engine:
        engine_with(self._url, SESSION_RUNS_TABLE, _CREATE_SESSION_RUNS)
        return engine_with(self._url, SESSIONS_TABLE, _CREATE_SESSIONS)

    def _live(self, run_id: str, held_at: str | None) -> bool:
        """Whether the run `run_id`, holding a session since `held_at`, still holds it."""
        status = self._status_of(run_id)
        if status is not None:
            return status in _LIVE
        since = _time(held_at)
        return since is not None and datetime.now(timezone.utc) - since < timedelta(
            seconds=START_GRACE_SECONDS
        )

    def claim(self, name: str, run_id: str) -> tuple[list[dict[str, Any]], int]:
        """Hold session `name` (made if new) for the new run `run_id`; returns its messages and
        its version (counting its changes: the run adds its messages only if it is still that
        one). Raises `SessionBusyError` if a live run holds it."""
        engine, now = self._engine(), _now()
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"INSERT INTO {SESSIONS_TABLE} (name, payload, message_count, runs, "
                    "version, created_at, updated_at) VALUES (:n, :p, 0, 0, 0, :at, :at) "
                    "ON CONFLICT (name) DO NOTHING"
                ),
                {"n": name, "p": encode_payload([], name), "at": now},
            )
            row = conn.execute(
                sa.text(f"SELECT held_by, held_at FROM {SESSIONS_TABLE} WHERE name = :n"),
                {"n": name},
            ).one()
        holder, held_at = row
        if holder is not None and holder != run_id and self._live(holder, held_at):
            raise SessionBusyError(name, holder)
        condition = "held_by IS NULL" if holder is None else "held_by = :old"
        with engine.begin() as conn:  # compare-and-set: lost if another run took it meanwhile
            taken = conn.execute(
                sa.text(
                    f"UPDATE {SESSIONS_TABLE} SET held_by = :run, held_at = :at "
                    f"WHERE name = :n AND ({condition} OR held_by = :run)"
                ),
                {"run": run_id, "at": now, "n": name, "old": holder},
            )
            if taken.rowcount != 1:
                winner = conn.execute(
                    sa.text(f"SELECT held_by FROM {SESSIONS_TABLE} WHERE name = :n"), {"n": name}
                ).scalar()
                raise SessionBusyError(name, str(winner))
            payload, version = conn.execute(
                sa.text(f"SELECT payload, version FROM {SESSIONS_TABLE} WHERE name = :n"),
                {"n": name},
            ).one()
        return decode_payload(payload, name), int(version)

    def release(self, name: str, run_id: str) -> None:
        """Let go of `name` if `run_id` holds it (its run could not be started)."""
        with self._engine().begin() as conn:
            conn.execute(
                sa.text(
                    f"UPDATE {SESSIONS_TABLE} SET held_by = NULL, held_at = NULL "
                    "WHERE name = :n AND held_by = :run"
                ),
                {"n": name, "run": run_id},
            )

    def finish(
        self, name: str, run_id: str, messages: list[dict[str, Any]], version: int | None
    ) -> bool:
        """Run `run_id`, which started from version `version` of session `name`, succeeded: the
        session keeps `messages` and is free. Done once per run: False if this run already did
        it (a replayed step), True if done now. A resumed or forked run (which may no longer
        hold the session) may add its messages too, if the session is still at `version` and
        no live run holds it; else `DurableSwarmError` says the session moved on without it."""
        now = _now()
        with self._engine().begin() as conn:
            done = conn.execute(
                sa.text(f"SELECT 1 FROM {SESSION_RUNS_TABLE} WHERE run_id = :run"),
                {"run": run_id},
            ).first()
            if done is not None:
                return False
            row = conn.execute(
                sa.text(f"SELECT held_by, held_at, version FROM {SESSIONS_TABLE} WHERE name = :n"),
                {"n": name},
            ).first()
        holder, held_at, current = (row[0], row[1], int(row[2])) if row is not None else (None,) * 3
        moved = row is None or (version is not None and current != version)
        if not moved and holder not in (None, run_id) and self._live(holder, held_at):
            moved = True  # another live run holds it: it would add its own after ours
        if not moved:
            condition = "held_by IS NULL" if holder is None else "held_by = :old"
            if version is not None:
                condition += " AND version = :v"
            with self._engine().begin() as conn:  # compare-and-set on what was read
                updated = conn.execute(
                    sa.text(
                        f"UPDATE {SESSIONS_TABLE} SET payload = :p, message_count = :c, "
                        "held_by = NULL, held_at = NULL, runs = runs + 1, version = version + 1, "
                        f"last_run = :run, updated_at = :at WHERE name = :n AND {condition}"
                    ),
                    {"p": encode_payload(messages, name), "c": len(messages), "run": run_id,
                     "at": now, "n": name, "old": holder, "v": version},
                )  # fmt: skip
                if updated.rowcount == 1:
                    conn.execute(
                        sa.text(
                            f"INSERT INTO {SESSION_RUNS_TABLE} (run_id, session, added_at) "
                            "VALUES (:run, :n, :at)"
                        ),
                        {"run": run_id, "n": name, "at": now},
                    )
                    return True
        raise DurableSwarmError(
            f"Run {run_id!r} finished, but session {name!r} moved on without it (another run "
            "added to it, holds it, or it was cleared or deleted since this run started); "
            "this run's messages were not added to it. They are in the run's log: "
            f"`durable-swarm runs show {run_id}`.",
            run_id=run_id,
            session=name,
        )

    def _rows(self, where: str, params: dict[str, Any]) -> list[Any]:
        query = sa.text(
            "SELECT name, payload, held_by, held_at, runs, last_run, created_at, updated_at "
            f"FROM {SESSIONS_TABLE} {where} ORDER BY updated_at DESC, name"
        )
        try:
            with engine_for(self._url).begin() as conn:
                return list(conn.execute(query, params))
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return []  # no session was ever made on this database
            raise

    def _info(self, row: Any) -> SessionInfo:
        name, payload, holder, held_at, runs, last_run, created, updated = row
        live = holder is not None and self._live(holder, held_at)
        return SessionInfo(
            name=name,
            messages=decode_payload(payload, name),
            held_by=holder if live else None,
            runs=int(runs),
            last_run=last_run,
            created_at=_time(created),
            updated_at=_time(updated),
        )

    def list(self, limit: int | None = None) -> list[SessionInfo]:
        """The sessions, most recently changed first (at most `limit`; None: all)."""
        rows = self._rows("", {})
        return [self._info(row) for row in rows[:limit]]

    def get(self, name: str) -> SessionInfo:
        """Session `name` (raises `SessionNotFoundError`)."""
        rows = self._rows("WHERE name = :n", {"n": name})
        if not rows:
            raise SessionNotFoundError(name)
        return self._info(rows[0])

    def _change(self, name: str, doing: str, statement: str) -> None:
        """Run `statement` (an UPDATE or DELETE of the row of session `name`, to which it adds
        its condition) unless a live run holds the session: compare-and-set against the
        holder read, so a run claiming it meanwhile is never cut off."""
        rows = self._rows("WHERE name = :n", {"n": name})
        if not rows:
            raise SessionNotFoundError(name)
        holder, held_at = rows[0][2], rows[0][3]
        if holder is None or not self._live(holder, held_at):
            condition = "held_by IS NULL" if holder is None else "held_by = :old"
            with self._engine().begin() as conn:
                params = {"n": name, "p": encode_payload([], name), "at": _now(), "old": holder}
                changed = conn.execute(sa.text(f"{statement} AND {condition}"), params)
                if changed.rowcount == 1:
                    if doing == "deleted":
                        conn.execute(
                            sa.text(f"DELETE FROM {SESSION_RUNS_TABLE} WHERE session = :n"),
                            {"n": name},
                        )
                    return
                holder = conn.execute(
                    sa.text(f"SELECT held_by FROM {SESSIONS_TABLE} WHERE name = :n"), {"n": name}
                ).scalar()
            if holder is None:
                raise SessionNotFoundError(name)
        raise SessionBusyError(
            name,
            str(holder),
            message=f"Session {name!r} is held by run {holder!r}; it was not {doing}. Wait for "
            f"that run to end (or cancel it: `durable-swarm runs cancel {holder}`), then try "
            "again.",
        )

    def clear(self, name: str) -> None:
        """Empty session `name`'s conversation (the session stays)."""
        self._change(
            name,
            "cleared",
            f"UPDATE {SESSIONS_TABLE} SET payload = :p, message_count = 0, held_by = NULL, "
            "held_at = NULL, version = version + 1, updated_at = :at WHERE name = :n",
        )

    def delete(self, name: str) -> None:
        """Delete session `name` and its record of runs."""
        self._change(name, "deleted", f"DELETE FROM {SESSIONS_TABLE} WHERE name = :n")

    def reseal(self, batch_size: int) -> tuple[int, dict[str, int]]:
        """Seal every session's conversation with this process's first key (key rotation, see
        `_rotation`): how many were written, and how many were left because their key is
        missing here, by key id. A row is rewritten only if it still holds what was read (a
        run that ended meanwhile wrote it sealed already)."""
        ring = keyring()
        assert ring is not None
        current = f"{SEALED_PREFIX}.{ring.primary}.%"
        written, missing, last = 0, dict[str, int](), ""
        query = sa.text(
            f"SELECT name, payload FROM {SESSIONS_TABLE} WHERE payload NOT LIKE :current "
            "AND name > :last ORDER BY name LIMIT :n"
        )
        update = sa.text(
            f"UPDATE {SESSIONS_TABLE} SET payload = :new WHERE name = :n AND payload = :old"
        )
        while True:
            try:
                with engine_for(self._url).begin() as conn:
                    params = {"current": current, "last": last, "n": batch_size}
                    rows = conn.execute(query, params).all()
                    for name, payload in rows:
                        if is_sealed(payload) and not ring.has(sealed_key_id(payload)):
                            key_id = sealed_key_id(payload)
                            missing[key_id] = missing.get(key_id, 0) + 1
                            continue
                        new = encode_payload(decode_payload(payload, name), name)
                        values = {"new": new, "n": name, "old": payload}
                        written += conn.execute(update, values).rowcount
            except sa.exc.DBAPIError as e:
                if missing_table(e):
                    return written, missing
                raise
            if len(rows) < batch_size:
                return written, missing
            last = str(rows[-1][0])


class SessionCommands:
    """The session methods `DurableSwarm` and `DurableClient` share (over `_sessions()`).
    Each may be called from inside a running event loop (it runs on a worker thread)."""

    def _sessions(self) -> SessionStore:
        raise NotImplementedError

    @off_event_loop
    def list_sessions(self, *, limit: int | None = None) -> list[SessionInfo]:
        """The sessions in the run database, most recently changed first (at most `limit`),
        each with its messages and the run that holds it (`held_by`, None when free)."""
        return self._sessions().list(limit)

    @off_event_loop
    def get_session(self, name: str) -> SessionInfo:
        """Session `name`: the conversation its next run starts from, and its state. Raises
        `SessionNotFoundError` if no run made it."""
        return self._sessions().get(check_session_name(name))

    @off_event_loop
    def clear_session(self, name: str) -> None:
        """Empty session `name`'s conversation: its next run starts afresh (the runs' logs
        keep every message). Raises `SessionBusyError` while a run holds it."""
        self._sessions().clear(check_session_name(name))

    @off_event_loop
    def delete_session(self, name: str) -> None:
        """Delete session `name` (the runs' logs keep every message). Raises
        `SessionBusyError` while a run holds it, `SessionNotFoundError` if there is none."""
        self._sessions().delete(check_session_name(name))

    async def alist_sessions(self, *, limit: int | None = None) -> list[SessionInfo]:
        """`list_sessions` for async code."""
        return await asyncio.to_thread(lambda: self.list_sessions(limit=limit))

    async def aget_session(self, name: str) -> SessionInfo:
        """`get_session` for async code."""
        return await asyncio.to_thread(self.get_session, name)

    async def aclear_session(self, name: str) -> None:
        """`clear_session` for async code."""
        await asyncio.to_thread(self.clear_session, name)

    async def adelete_session(self, name: str) -> None:
        """`delete_session` for async code."""
        await asyncio.to_thread(self.delete_session, name)
