"""Runs that wait are parked: no process holds them while they wait.

A durable run waits for a person's answer (`input`, `approval`), for a sub-agent run to end
(`join`), for its turn under a model limit (`limit`), or for something the process that runs it
lacks (`missing`: an agent, a swarm, a key). It does not stay a live workflow meanwhile. It
*parks*: it cancels its own DBOS workflow (DBOS's public `cancel_workflow`, called outside the
run so it is not one of its steps) and its execution ends, so nothing of it stays in any
process's memory and it holds no worker slot. What ends the wait *resumes* it
(`resume_workflow` onto its queue): DBOS runs it again from the start, replaying its recorded
steps, and this time the run finds what it waited for and goes on.

The look for the answer is the body of a recorded step (`answer:<kind>`, `join:<child>`, the
model step of a limited call): when the answer is there the step returns it and DBOS records
it; when it is not, the body parks the run and raises DBOS's `DBOSWorkflowCancelledError`, with
which DBOS records nothing for the step (the step "was preempted by cancellation" and runs again
on resume). A replay after the answer therefore meets either the recorded answer or, at the
frontier, the look again.

This module keeps one row per wait in the table `durable_swarm_waits` of the run database and
closes the races with compare-and-set updates on it (a row lock on PostgreSQL, the write lock on
SQLite); its times are the database's clock, so processes on machines with skewed clocks agree.
`state`:

* `waiting`: the run is live at the wait (it arrived, or an answer came before it did);
* `parking`: the run is about to cancel itself (or did, and is about to mark itself parked);
* `parked`: the run cancelled itself and waits;
* `resuming`: whoever ends the wait won the right to resume it (exactly one does);
* `cancelled`: a person cancelled the run (`DurableSwarm.cancel`); no answer is taken;
* `cancelling`: as `cancelled`, for a wait that was `parking` when the person cancelled: its
  execution has still to see the cancel and mark it `cancelled`;
* `done`: the run went on with the answer (`leave`); a later answer is refused.

The orders that make it exact:

* the run, at the wait: `arrive`; `look` (answer there: take it); else `begin_park`
  (waiting -> parking), cancel itself, `park` (parking -> parked), then look again: if the
  wait ended in the meantime it wins `claim_resume` and resumes itself. It cancels itself
  *before* it is `parked`, so nobody resumes a live execution (its own cancel would undo that);
* whoever ends the wait (`answer`, `end_join`): one statement sets the answer and, if the run is
  parked, turns it to `resuming`; it resumes the run only if its statement did that. One that
  saw the run CANCELLED in DBOS also takes a `parking` wait (the run cancelled itself and may
  have died before marking it parked; if it lives, its own `park` then fails and it ends). An
  answer to a wait that has one already, or to a cancelled run, changes nothing and is refused;
* so exactly one of them resumes a parked run, whatever the interleaving;
* a person's cancel leaves a tombstone first, then cancels in DBOS, then marks the live waits
  cancelled (`cancel_tree`; a `parking` one `cancelling`): a run that parks checks the
  tombstone after it marked itself parked, and a resumer checks it after its resume: a cancel
  is never undone. Only a person leaves a tombstone, and only a person's resume removes it
  (`uncancel_tree`), once no wait of the run is `cancelling` (`settling_in_tree`: the
  execution that was parking would cancel the resumed run in DBOS). An execution that saw
  the tombstone, or read its wait `cancelled`, acts on it only while the tombstone is there
  (`honour_cancel`, and `_parking.cancel_self`'s cancel in DBOS), so an execution still
  winding down from the cancel cannot undo the resume.

A row of a wait the run went past stays `done` until the run is deleted; a live row is deleted
when the sweep finds its run ended, and every row with the run. A parked run is CANCELLED in
DBOS; `parked()` tells the runs that only wait from those cancelled by a person, and every reader
of the library shows them as waiting.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from ..errors import EncryptionKeyError
from ._sealing import SealedValue, is_sealed, keyring, open_sealed, seal, sealed_key_id
from ._tables import engine_for, engine_with, missing_table

__all__ = [
    "CANCELLED",
    "CANCELLED_STATES",
    "KINDS",
    "LIVE_STATES",
    "MISSING",
    "PARKED_STATES",
    "WAITS_TABLE",
    "Wait",
    "WaitBook",
    "join_key",
    "live_status",
    "parked_in",
    "person_key",
]

logger = logging.getLogger("durable_swarm")
# Set in the task of each run's execution (`_dbos.note_entered`; its steps' threads copy it):
# the waits table's statements made by a run are retried after a lost connection.
IN_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar("durable_swarm_in_run", default=False)
RETRY_SECONDS = 30.0


def _transient(error: sa.exc.DBAPIError, url: str) -> bool:
    """Whether `error` is a lost or refused connection to PostgreSQL (worth trying again), not
    a missing table or a statement the database refused."""
    if missing_table(error):
        return False
    if error.connection_invalidated:
        return True
    return url.startswith("postgresql") and isinstance(error, sa.exc.OperationalError)


WAITS_TABLE = "durable_swarm_waits"
KINDS = ("input", "approval", "join", "missing", "limit")
# The wait key of a run that misses an agent, a function, a swarm or a key (one at a time).
MISSING = "missing"
# The key of the tombstone a person's cancel leaves on a run (see `WaitBook.cancel_tree`).
CANCELLED = "cancelled"
# The states of a wait a person's cancel ended (`cancelling`: its execution has to mark it).
CANCELLED_STATES = ("cancelled", "cancelling")
LIVE_STATES = ("waiting", "parking", "parked", "resuming")
# A run CANCELLED in DBOS with a wait in one of these states only waits: it parked, or is
# parking (it cancelled itself and is about to mark its wait parked; if its process died right
# then, whoever ends the wait, or the sweep, resumes it).
PARKED_STATES = ("parking", "parked", "resuming")

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {WAITS_TABLE} (
    run_id TEXT NOT NULL,
    wait_key TEXT NOT NULL,
    kind VARCHAR(16) NOT NULL,
    state VARCHAR(16) NOT NULL,
    answer TEXT,
    queue TEXT,
    detail TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, wait_key)
)
"""


def _answer_sql(now: str) -> str:
    """The statement of whoever ends a wait: set the answer (if none yet, and the run is not
    cancelled) and take the resume if the run is parked (or parking, `:stopped`); RETURNING gives
    the row as the statement left it (no row: refused), so the caller never reads it again: a
    live run may take the answer and mark its row `done` at once. The row is made if the run has not
    arrived yet (it then finds the answer at its first look)."""
    t = WAITS_TABLE
    return f"""
INSERT INTO {t} (run_id, wait_key, kind, state, answer, updated_at)
VALUES (:run_id, :key, :kind, 'waiting', :answer, {now})
ON CONFLICT (run_id, wait_key) DO UPDATE SET
    answer = excluded.answer,
    state = CASE WHEN {t}.state = 'parked' OR (:stopped = 1 AND {t}.state = 'parking')
        THEN 'resuming' ELSE {t}.state END,
    updated_at = excluded.updated_at
WHERE {t}.answer IS NULL AND {t}.state IN ('waiting', 'parking', 'parked')
RETURNING run_id, wait_key, kind, state, answer, queue, detail, updated_at
"""


def person_key(wait_id: int) -> str:
    """The wait key of a run's `wait_id`-th wait for a person (its `waiting_for` event)."""
    return f"person:{wait_id}"


def join_key(child_run_id: str) -> str:
    """The wait key of a run's wait for its sub-agent run `child_run_id` to end."""
    return f"join:{child_run_id}"


@dataclass(frozen=True)
class Wait:
    """One row of the waits table: which run waits on what, in which state, with what answer
    (opened: a dict, or a `SealedValue` when its key is missing here; None: no answer yet),
    where it goes when resumed (`queue`, None: DBOS's own), what a `missing` or `limit` wait
    waits for (`detail`), and when it last changed (milliseconds, the database's clock)."""

    run_id: str
    key: str
    kind: str
    state: str
    answer: Any
    queue: str | None
    detail: dict[str, Any] | None
    updated_at: int

    @property
    def answered(self) -> bool:
        return self.answer is not None


class WaitBook:
    """The waits table of one run database, on the process's shared engine of it (or on
    `engine`: the ownership thread reads and sweeps it on its own).

    With an encryption key, an answer (what a person wrote, a decision) is stored sealed,
    bound to its run (`_sealing`)."""

    def __init__(self, database_url: str, engine: sa.Engine | None = None) -> None:
        self._url = database_url
        self._given = engine  # None: the process's shared engine on the database
        if database_url.startswith("postgresql"):
            self._now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
        else:
            self._now = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    def _engine(self) -> sa.Engine:
        return engine_with(self._url, WAITS_TABLE, _CREATE_TABLE, engine=self._given)

    def _reader(self) -> sa.Engine:
        return self._given or engine_for(self._url)

    def ensure(self) -> None:
        """Create the table if it is missing (a process launching DBOS on the database)."""
        self._engine()

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """`call()`; inside a run's execution (`IN_RUN`), again after a lost connection to
        PostgreSQL (for up to `RETRY_SECONDS`): a run parking or taking its answer while the
        database is cut off for a moment must not record that as its failure. The run's
        statements are safe to repeat: an insert that does nothing on a conflict, updates
        conditional on the state (a repeat that finds it moved changes nothing and says so, as
        a race would), deletes and reads. Elsewhere (a sweep in the heartbeat
        thread, an answerer, a reader) the error is raised at once."""
        deadline = time.monotonic() + RETRY_SECONDS
        pause = 0.1
        while True:
            try:
                return call()
            except sa.exc.DBAPIError as e:
                if not (IN_RUN.get() and _transient(e, self._url)):
                    raise
                if time.monotonic() + pause > deadline:
                    raise
                logger.warning(
                    "durable-swarm: the waits table is unreachable (%s); retrying", e.orig
                )
                time.sleep(pause)
                pause = min(2.0, pause * 2)

    def _write(self, sql: str | sa.TextClause, **params: Any) -> list[Any]:
        statement = sa.text(sql) if isinstance(sql, str) else sql

        def write() -> list[Any]:
            with self._engine().begin() as conn:
                result = conn.execute(statement, params)
                return list(result.fetchall()) if result.returns_rows else [result.rowcount]

        return self._retrying(write)

    def _changed(self, sql: str, **params: Any) -> bool:
        """`_write` of one conditional statement: whether it changed a row."""
        rows = self._write(sql, **params)
        return bool(rows and rows[0])

    def _read(self, sql: str, **params: Any) -> list[Any]:
        def read() -> list[Any]:
            with self._reader().connect() as conn:
                return list(conn.execute(sa.text(sql), params).fetchall())

        try:
            return self._retrying(read)
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return []  # no run ever waited on this database
            raise

    # --- the run's side ----------------------------------------------------------------------

    def arrive(
        self, run_id: str, key: str, kind: str, detail: dict[str, Any] | None = None
    ) -> None:
        """The run is at its wait `key` (a replay finds its row as it is)."""
        self._write(
            f"INSERT INTO {WAITS_TABLE} (run_id, wait_key, kind, state, detail, updated_at) "
            f"VALUES (:run_id, :key, :kind, 'waiting', :detail, {self._now}) "
            "ON CONFLICT (run_id, wait_key) DO NOTHING",
            run_id=run_id,
            key=key,
            kind=kind,
            detail=None if detail is None else json.dumps(detail),
        )

    def look(self, run_id: str, key: str) -> Wait | None:
        """The row of `run_id`'s wait `key` (a plain read, never a recorded step)."""
        rows = self._read(
            f"SELECT run_id, wait_key, kind, state, answer, queue, detail, updated_at FROM "
            f"{WAITS_TABLE} WHERE run_id = :run_id AND wait_key = :key",
            run_id=run_id,
            key=key,
        )
        return _wait(rows[0]) if rows else None

    def begin_park(
        self,
        run_id: str,
        key: str,
        kind: str,
        queue: str | None,
        detail: dict[str, Any] | None = None,
    ) -> bool:
        """The run is about to cancel itself to park at `key`: -> parking, remembering where it
        goes when resumed. Only from a wait with no answer (or none yet: a row a sweep took
        away is made again), not cancelled: False otherwise (look again)."""
        t = WAITS_TABLE
        return self._changed(
            f"INSERT INTO {t} (run_id, wait_key, kind, state, queue, detail, updated_at) "
            f"VALUES (:run_id, :key, :kind, 'parking', :queue, :detail, {self._now}) "
            f"ON CONFLICT (run_id, wait_key) DO UPDATE SET state = 'parking', queue = "
            f"excluded.queue, detail = COALESCE(excluded.detail, {t}.detail), updated_at = "
            f"excluded.updated_at WHERE {t}.answer IS NULL AND {t}.state IN ('waiting', "
            "'parking', 'parked', 'resuming')",
            run_id=run_id,
            key=key,
            kind=kind,
            queue=queue,
            detail=None if detail is None else json.dumps(detail),
        )

    def park(self, run_id: str, key: str) -> bool:
        """The run cancelled itself: parking -> parked. False if someone took the resume
        meanwhile (it saw the run cancelled), or a person cancelled it."""
        return self._changed(
            f"UPDATE {WAITS_TABLE} SET state = 'parked', updated_at = {self._now} "
            "WHERE run_id = :run_id AND wait_key = :key AND state = 'parking'",
            run_id=run_id,
            key=key,
        )

    def claim_resume(self, run_id: str, key: str) -> Wait | None:
        """parked -> resuming: the row (with its queue) for the one caller that wins, else None."""
        if not self._changed(
            f"UPDATE {WAITS_TABLE} SET state = 'resuming', updated_at = {self._now} "
            "WHERE run_id = :run_id AND wait_key = :key AND state = 'parked'",
            run_id=run_id,
            key=key,
        ):
            return None
        found = self.look(run_id, key)
        return None if found is None else replace(found, state="resuming")

    def leave(self, run_id: str, key: str) -> None:
        """The run went on past its wait `key`, with its answer: -> done. The row stays, answer
        and all, so a second person's answer, sent as the run went on, is refused and told whose
        answer the run took (deleted, the row would be made again with theirs, told sent and
        never read). It goes with the run (`_tables.forget_runs`)."""
        self._write(
            f"UPDATE {WAITS_TABLE} SET state = 'done', updated_at = {self._now} "
            "WHERE run_id = :run_id AND wait_key = :key",
            run_id=run_id,
            key=key,
        )

    # --- the side of whoever ends a wait -----------------------------------------------------

    def answer(
        self, run_id: str, key: str, kind: str, answer: dict[str, Any], *, stopped: bool = False
    ) -> Wait | None:
        """Give `run_id`'s wait `key` its answer. Returns the row as the statement left it:
        `state` "resuming" means the caller won the resume and must resume the run onto
        `queue`; "waiting" (or "parking") means the run is live and takes the answer itself.
        None: refused (the wait has an answer already, or the run was cancelled).

        `stopped`: the caller saw the run CANCELLED in DBOS. A wait still `parking` then belongs
        to a run that cancelled itself to park and has not marked it parked yet (its process
        may have died right then): the caller takes the resume (the run's own `park` then
        fails, and its execution, which does nothing more, ends)."""
        stored = seal(answer, bind=run_id) if keyring() is not None else json.dumps(answer)
        rows = self._write(
            _answer_sql(self._now),
            run_id=run_id,
            key=key,
            kind=kind,
            answer=stored,
            stopped=int(stopped),
        )
        if not rows:
            return None
        # The row as this statement left it (a read after it may find it `done` already: a
        # live run took the answer and went on; the answer was given all the same).
        return replace(_wait(rows[0], open_answer=False), answer=answer)

    def end_join(
        self, parent_run_id: str, child_run_id: str, *, stopped: bool = False
    ) -> Wait | None:
        """The sub-agent run `child_run_id` ended: if its parent parked waiting for it, the
        row with which the caller resumes the parent (None: the parent does not wait for it, or
        someone else resumes it). Only an existing row is changed. `stopped`: as for
        `answer` (the caller saw the parent CANCELLED in DBOS)."""
        key = join_key(child_run_id)
        rows = self._write(
            f"UPDATE {WAITS_TABLE} SET answer = :answer, state = CASE WHEN state = 'parked' "
            "OR (:stopped = 1 AND state = 'parking') THEN 'resuming' ELSE state END, "
            f"updated_at = {self._now} WHERE run_id = :run_id AND wait_key = :key AND "
            "answer IS NULL AND state IN ('waiting', 'parking', 'parked') RETURNING state",
            run_id=parent_run_id,
            key=key,
            answer=json.dumps({"done": True}),
            stopped=int(stopped),
        )
        if not rows or rows[0][0] != "resuming":
            return None
        found = self.look(parent_run_id, key)
        return None if found is None else replace(found, state="resuming")

    # --- people steering runs ----------------------------------------------------------------

    def tombstone(self, run_id: str) -> None:
        """A person cancels `run_id` and its sub-agent runs (`<run id>-sub<N>`, nested): the
        tombstone (the wait key `CANCELLED`) every run that parks checks after marking itself
        parked, and every resumer after its resume. Committed before DBOS's cancel; the waits
        are marked (`cancel_tree`) after it."""
        self._write(
            f"INSERT INTO {WAITS_TABLE} (run_id, wait_key, kind, state, updated_at) VALUES "
            f"(:run_id, :key, 'cancel', 'cancelled', {self._now}) ON CONFLICT (run_id, "
            "wait_key) DO NOTHING",
            run_id=run_id,
            key=CANCELLED,
        )

    def cancel_tree(self, run_id: str) -> int:
        """A person cancelled `run_id` and its sub-agent runs, in DBOS too: none of their
        waits takes an answer any more. Returns how many waits that ended.

        The tombstone (`tombstone`, again if it is not there yet), then the live waits are
        marked: `cancelled`, but for one still `parking`, which becomes `cancelling`: its
        execution is between its own cancel in DBOS and its mark, and ends it (`honour_cancel`)
        once it sees the tombstone. A person's resume waits for that (`settling_in_tree`):
        made before the execution's own cancel in DBOS, the resume would be undone by it.
        The waits are marked after DBOS's cancel, so a wait a person's cancel marked tells an
        execution that reads it that the run was cancelled in DBOS."""
        self.tombstone(run_id)
        return self._write_tree(
            f"UPDATE {WAITS_TABLE} SET state = CASE WHEN state = 'parking' THEN 'cancelling' "
            f"ELSE 'cancelled' END, updated_at = {self._now} WHERE (run_id = :run_id OR run_id "
            "LIKE :tree ESCAPE '\\') AND state IN ('waiting', 'parking', 'parked', 'resuming')",
            run_id,
        )

    def settling_in_tree(self, run_id: str) -> bool:
        """Whether a wait of `run_id` or of its sub-agent runs is `cancelling`: a person's
        cancel found its execution parking, between its own cancel in DBOS and its mark (see
        `cancel_tree`); a resume of the run waits for that execution to end it."""
        rows = self._read(
            f"SELECT 1 FROM {WAITS_TABLE} WHERE (run_id = :run_id OR run_id LIKE :tree ESCAPE "
            "'\\') AND state = 'cancelling' LIMIT 1",
            run_id=run_id,
            tree=_sub_runs(run_id),
        )
        return bool(rows)

    def claim_resume_of_end(self, run_id: str, end: str) -> bool:
        """A person resumes `run_id`, which ended (cancelled or failed) at `end` (which end:
        `RunControl._end_of`): True for the one caller that claims the resume of that end,
        False for every other caller that read the same end (two people who click resume at
        once). Without it the second resume reaches DBOS once the first execution runs, and
        DBOS queues the run again beside it: a second execution repeats the step in flight. A
        row `resume:<end>` (state `done`, deleted with the run) records the claim; a later end
        (cancelled again) is another end, so its resume claims anew."""
        return self._changed(
            f"INSERT INTO {WAITS_TABLE} (run_id, wait_key, kind, state, updated_at) VALUES "
            f"(:run_id, :key, 'resume', 'done', {self._now}) ON CONFLICT (run_id, wait_key) "
            "DO NOTHING",
            run_id=run_id,
            key=f"resume:{end}",
        )

    def tombstone_at(self, run_id: str) -> int | None:
        """When a person's cancel left its tombstone on `run_id` (ms, the database's clock),
        None if none stands (the run was not cancelled by a person, or was resumed since)."""
        rows = self._read(
            f"SELECT updated_at FROM {WAITS_TABLE} WHERE run_id = :run_id AND wait_key = :key",
            run_id=run_id,
            key=CANCELLED,
        )
        return int(rows[0][0]) if rows else None

    def uncancel_tree(self, run_id: str) -> None:
        """`run_id` (and its sub-agent runs) are resumed after a person cancelled them: their
        waits for a person or a sub-agent wait again, as live (the replay that reaches one
        parks anew until it is answered); the others go (a replay makes them again)."""
        tree = "(run_id = :run_id OR run_id LIKE :tree ESCAPE '\\')"
        self._write_tree(
            f"DELETE FROM {WAITS_TABLE} WHERE {tree} AND (wait_key = '{CANCELLED}' OR "
            "(state IN ('cancelled', 'cancelling') AND kind IN ('missing', 'limit')))",
            run_id,
        )
        self._write_tree(
            f"UPDATE {WAITS_TABLE} SET state = 'waiting', updated_at = {self._now} WHERE "
            f"{tree} AND state IN ('cancelled', 'cancelling')",
            run_id,
        )

    def honour_cancel(self, run_id: str) -> int:
        """A run (or its resumer) found a person's cancel (`cancelled`): its own live waits
        are marked cancelled, in one statement that does so only while a tombstone on it or
        on a run above it is still there. A person's resume that came in between removed the
        tombstone and set the waits waiting again (`uncancel_tree`); an execution that looked
        before that must not cancel them anew (so it never leaves a tombstone of its own:
        only a person's cancel does). Returns how many waits that ended."""
        ids = _lineage(run_id)
        query = sa.text(
            f"UPDATE {WAITS_TABLE} SET state = 'cancelled', updated_at = {self._now} WHERE "
            "run_id = :run_id AND state IN ('waiting', 'parking', 'parked', 'resuming', "
            f"'cancelling') AND EXISTS (SELECT 1 FROM {WAITS_TABLE} tomb WHERE tomb.run_id IN "
            ":ids AND tomb.wait_key = :key)"
        ).bindparams(sa.bindparam("ids", expanding=True))
        return int(self._write(query, run_id=run_id, ids=ids, key=CANCELLED)[0])

    def cancelled(self, run_id: str) -> bool:
        """Whether a person cancelled `run_id` or a run above it (a tombstone of
        `cancel_tree` on it or on an ancestor: `<a>-sub<N>` is below `<a>`)."""
        ids = _lineage(run_id)
        query = sa.text(
            f"SELECT 1 FROM {WAITS_TABLE} WHERE run_id IN :ids AND wait_key = :key"
        ).bindparams(sa.bindparam("ids", expanding=True))
        try:
            with self._reader().connect() as conn:
                return conn.execute(query, {"ids": ids, "key": CANCELLED}).first() is not None
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return False
            raise

    def _write_tree(self, sql: str, run_id: str) -> int:
        try:
            with self._engine().begin() as conn:
                params = {"run_id": run_id, "tree": _sub_runs(run_id)}
                return int(conn.execute(sa.text(sql), params).rowcount)
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return 0
            raise

    # --- readers -----------------------------------------------------------------------------

    def parked(self, run_ids: Sequence[str]) -> dict[str, Wait]:
        """The parked waits (`PARKED_STATES`) of those of `run_ids` that have one, by run id:
        those runs, CANCELLED in DBOS, only wait (a run has one wait at a time; the latest if
        one was left behind)."""
        if not run_ids:
            return {}
        try:
            with self._reader().connect() as conn:
                return parked_in(conn, run_ids)
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return {}
            raise

    def live_run_ids(self) -> set[str]:
        """Every run that has a live wait now (of those DBOS shows CANCELLED, the parked ones;
        what retention must never take for finished)."""
        rows = self._read(
            f"SELECT DISTINCT run_id FROM {WAITS_TABLE} WHERE state IN ('waiting', 'parking', "
            "'parked', 'resuming')"
        )
        return {row[0] for row in rows}

    def is_parked(self, run_id: str) -> bool:
        """Whether `run_id` is parked at a wait (CANCELLED in DBOS, but waiting)."""
        return run_id in self.parked([run_id])

    def answer_of(self, run_id: str, key: str) -> Any:
        """The answer stored for `run_id`'s wait `key` (None: none yet, or no such wait)."""
        found = self.look(run_id, key)
        return None if found is None else found.answer

    # --- the sweep (`_parking.sweep`) --------------------------------------------------------

    def now_ms(self) -> int | None:
        """The database's clock, in milliseconds (None: the database does not answer)."""
        try:
            with self._reader().connect() as conn:
                return int(conn.execute(sa.text(f"SELECT {self._now}")).scalar_one())
        except sa.exc.DBAPIError:
            return None

    def stale(self, passing_s: float, others_s: float, limit: int = 500) -> list[Wait]:
        """The live waits a sweep looks at: `missing` and `limit` ones untouched for
        `passing_s` seconds, and any other untouched for `others_s` (by the database's clock),
        but for a parked wait for a person with no answer yet (only its answer moves it, and
        its answerer resumes it: thousands of runs waiting for people must not crowd the
        others out of the `limit` rows read). `missing` and `limit` ones first. Answers are not
        opened."""
        rows = self._read(
            f"SELECT run_id, wait_key, kind, state, answer, queue, detail, updated_at FROM "
            f"{WAITS_TABLE} WHERE state IN ('waiting', 'parking', 'parked', 'resuming') AND "
            f"updated_at <= {self._now} - CASE WHEN kind IN ('missing', 'limit') THEN "
            ":passing ELSE :others END AND NOT (state = 'parked' AND answer IS NULL AND kind "
            "IN ('input', 'approval')) ORDER BY CASE WHEN kind IN ('missing', 'limit') THEN 0 "
            "ELSE 1 END, updated_at LIMIT :n",
            passing=int(passing_s * 1000),
            others=int(others_s * 1000),
            n=limit,
        )
        return [_wait(row, open_answer=False) for row in rows]

    def touch(self, wait: Wait) -> Wait | None:
        """A sweep's compare-and-set on `wait` as it read it (its state and time): the row,
        now `resuming`, for the one sweeper that wins, else None (it moved meanwhile)."""
        if not self._changed(
            f"UPDATE {WAITS_TABLE} SET state = 'resuming', updated_at = {self._now} WHERE "
            "run_id = :run_id AND wait_key = :key AND state = :state AND updated_at = :at",
            run_id=wait.run_id,
            key=wait.key,
            state=wait.state,
            at=wait.updated_at,
        ):
            return None
        found = self.look(wait.run_id, wait.key)
        return None if found is None else replace(found, state="resuming")

    def drop_if(self, wait: Wait) -> None:
        """Delete `wait`'s row if it is still as `wait` has it (its run ended, or the run got
        past a `missing` or `limit` wait that was resumed)."""
        self._write(
            f"DELETE FROM {WAITS_TABLE} WHERE run_id = :run_id AND wait_key = :key AND "
            "state = :state AND updated_at = :at",
            run_id=wait.run_id,
            key=wait.key,
            state=wait.state,
            at=wait.updated_at,
        )

    def reseal(self) -> tuple[int, dict[str, int]]:
        """Seal every stored answer with the first key (see `_rotation`): how many were
        written, and how many were left because their key is missing here, by key id."""
        ring = keyring()
        assert ring is not None
        written, missing = 0, dict[str, int]()
        rows = self._read(
            f"SELECT run_id, wait_key, answer FROM {WAITS_TABLE} WHERE answer IS NOT NULL"
        )
        for run_id, key, stored in rows:
            if is_sealed(stored) and sealed_key_id(stored) == ring.primary:
                continue
            if is_sealed(stored) and not ring.has(sealed_key_id(stored)):
                key_id = sealed_key_id(stored)
                missing[key_id] = missing.get(key_id, 0) + 1
                continue
            plain = (
                open_sealed(stored, bind=run_id, run_id=run_id)
                if is_sealed(stored)
                else json.loads(stored)
            )
            written += self._write(
                f"UPDATE {WAITS_TABLE} SET answer = :new WHERE run_id = :run_id AND "
                "wait_key = :key AND answer = :old",
                new=seal(plain, bind=run_id),
                run_id=run_id,
                key=key,
                old=stored,
            )[0]
        return written, missing


def live_status(
    status_of: Callable[[str], str | None], waits: WaitBook
) -> Callable[[str], str | None]:
    """`status_of(run_id)` (a DBOS status), with "PARKED" for a run that is CANCELLED in DBOS
    but parked at a wait: for the readers that must count such a run as live (a session's
    holder, say)."""

    def status(run_id: str) -> str | None:
        found = status_of(run_id)
        if found == "CANCELLED" and waits.is_parked(run_id):
            return "PARKED"
        return found

    return status


def _sub_runs(run_id: str) -> str:
    """The LIKE pattern (escape character a backslash) of `run_id`'s sub-agent runs' ids."""
    escaped = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}-sub%"


def _lineage(run_id: str) -> list[str]:
    """`run_id` and the runs above it (`<a>-sub<N>` is a sub-agent run of `<a>`)."""
    ids = [run_id]
    while "-sub" in ids[-1]:
        ids.append(ids[-1].rpartition("-sub")[0])
    return ids


def parked_in(conn: sa.Connection, run_ids: Sequence[str]) -> dict[str, Wait]:
    """`WaitBook.parked` on an open connection to the run database (answers not opened:
    `answer` is True for an answered wait). Raises the database's error if the table does not
    exist yet."""
    found: dict[str, Wait] = {}
    ids = list(dict.fromkeys(run_ids))
    for start in range(0, len(ids), 500):
        query = sa.text(
            f"SELECT run_id, wait_key, kind, state, answer, queue, detail, updated_at FROM "
            f"{WAITS_TABLE} WHERE run_id IN :ids AND state IN ('parking', 'parked', "
            "'resuming') ORDER BY updated_at"
        ).bindparams(sa.bindparam("ids", expanding=True))
        for row in conn.execute(query, {"ids": ids[start : start + 500]}).fetchall():
            found[row[0]] = _wait(row, open_answer=False)  # the latest, if several
    return found


def _wait(row: Any, *, open_answer: bool = True) -> Wait:
    run_id, key, kind, state, stored, queue, detail, updated = row
    answer: Any = None
    if stored is not None:
        if not open_answer:
            answer = True  # answered; its content is not read here
        elif is_sealed(stored):
            try:
                answer = open_sealed(stored, bind=run_id, run_id=run_id)
            except EncryptionKeyError:  # its key is missing here: the run waits for it
                answer = SealedValue({}, sealed_key_id(stored))
        else:
            answer = json.loads(stored)
    return Wait(
        run_id,
        key,
        kind,
        state,
        answer,
        queue,
        json.loads(detail) if detail else None,
        int(updated),
    )
