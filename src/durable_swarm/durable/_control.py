"""Reading and steering runs: one implementation for `DurableSwarm` and `DurableClient`.

Both work through a DBOS *source*: the `DBOS` class itself in a process that runs agents, or a
`DBOSClient` (wrapped in `ClientSource`) in a thin client that runs nothing. Everything here only
reads the log or writes messages and commands to the database.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from .._aio import off_event_loop
from ..errors import DurableSwarmError
from ..usage import Budget, check_budget
from ._decisions import DecisionLog, DecisionRecord, payload
from ._engine import SetWorkflowID, SystemTables, system_tables
from ._limits import limiter_for
from ._listing import PendingApproval, RunFilter, RunQuery
from ._log import BUDGET_TOPIC, PARKED_WAITS, WAITING_EVENT
from ._parking import resume_won
from ._retention import Retention, RetentionReport, expire, purge
from ._rotation import DEFAULT_BATCH, RotationReport, rotate
from ._runs import DBOS_STATUSES, RunInfo, read_run, step_record, summarize, tally_steps
from ._sealing import require
from ._sweeper import RetentionLedger, RetentionStatus
from ._waits import WaitBook, person_key

__all__ = ["FINISHED", "LIVE", "ClientSource", "RunCommands", "RunControl"]

LIVE = ("pending", "waiting_for_input", "waiting_for_approval")
FINISHED = ("succeeded", "failed", "cancelled")


# Runs being given a new budget wait here (no process serves this queue) until it is sent.
_HOLD_QUEUE = "durable_swarm.hold"

logger = logging.getLogger("durable_swarm")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _parks(info: RunInfo) -> bool:
    """Whether `info`'s current wait for a person parks: its log holds DBOS's patch marker
    `PARKED_WAITS` after the event that says what the run waits for (see `_log`)."""
    marker = f"DBOS.patch-{PARKED_WAITS}"
    for step in reversed(info.steps):
        if step.name == marker:
            return True
        if step.kind == "event":
            return False
    return False


def _answer_key(run_id: str, waiting: dict[str, Any]) -> str | None:
    """One answer per wait: a second answer to the same question is dropped by DBOS instead of
    answering the run's next question."""
    wait_id = waiting.get("wait_id")
    return f"{run_id}:answer:{wait_id}" if wait_id is not None else None


# How long a person's resume of a cancelled run waits for its waits to settle (`_settled_first`).
SETTLE_SECONDS = 10.0
# How long a person's resume that lost the claim to another (both read the same end of the
# run) waits for the other's resume to show before it resumes the run itself: longer than the
# winner may wait for the run's waits to settle first.
RESUME_CLAIM_SECONDS = SETTLE_SECONDS + 10.0


def _end_of(
    info: RunInfo, cancelled_at: int | None
) -> tuple[tuple[int | None, int] | None, list[str]]:
    """The end of `info`'s run a resume continues, as its caller saw it: (`cancelled_at`, the
    time of a person's tombstone read just before `info`; the last update of its DBOS status,
    as `info` read it), and the claim keys of it in the order they are claimed: the DBOS time,
    then `cancel:<tombstone time>`. The tombstone names one cancel however often DBOS's time
    moves after it (an execution that was parking cancels the run in DBOS again a moment
    later), so two callers of one cancel share a key whatever DBOS time each read. None if the
    run has no time."""
    if info.updated_at is None:
        return None, []
    read = (cancelled_at, round(info.updated_at.timestamp() * 1000))
    keys = [str(read[1])] + ([f"cancel:{cancelled_at}"] if cancelled_at is not None else [])
    return read, keys


class ClientSource:
    """A `DBOSClient` with the few `DBOS` class methods `RunControl` uses that it lacks."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_workflow_status(self, run_id: str) -> Any:
        found = self._client.list_workflows(workflow_ids=[run_id])
        return found[0] if found else None

    def get_all_events(self, run_id: str) -> dict[str, Any]:
        return {WAITING_EVENT: self._client.get_event(run_id, WAITING_EVENT, timeout_seconds=0)}

    @property
    def system_tables(self) -> SystemTables:
        """DBOS's system tables behind the client (its engine and table definitions)."""
        return system_tables(self._client)


def _system_tables(source: Any) -> SystemTables:
    """DBOS's system tables of `source`: a client's, else the DBOS instance's of this process."""
    found = getattr(source, "system_tables", None)
    if isinstance(found, SystemTables):
        return found
    return system_tables()


class RunControl:
    """Runs as their log tells them, and the commands that steer them (see `DurableSwarm`)."""

    def __init__(self, source: Any, database_url: str) -> None:
        self.source = source
        self._url = database_url
        self.database_url = database_url
        self._query: RunQuery | None = None
        self.decisions = DecisionLog(database_url)
        self.waits = WaitBook(database_url)
        self.limits = limiter_for(database_url)

    # --- reading ---------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunInfo:
        """The whole run (raises `RunNotFoundError` for an unknown id); a pending run that
        cannot move on says why in `problem` (e.g. the agent it waits for), and one whose model
        call waits for its turn under a model limit says which in `rate_limit`."""
        info = read_run(run_id, self.source, self.waits)
        if info.status == "pending" and info.rate_limit is None:
            info.rate_limit = self.limits.waiting_of(run_id)
        return info

    @property
    def query(self) -> RunQuery:
        """SQL listing over the run database (filters, search, counts, paging)."""
        if self._query is None:
            self._query = RunQuery(_system_tables(self.source))
        return self._query

    def list_runs(self, runs: RunFilter, limit: int | None = 50, offset: int = 0) -> list[RunInfo]:
        """The runs `runs` finds, newest first: `limit` runs (None: all) after skipping
        `offset`."""
        if (limit is not None and limit < 0) or offset < 0:
            raise DurableSwarmError(
                f"`limit` and `offset` must not be negative (got limit={limit}, offset={offset})."
            )
        ids = self.query.run_ids(runs, limit, offset)
        if not ids:
            return []
        rows = {
            wf.workflow_id: wf
            for wf in self.source.list_workflows(
                workflow_ids=ids, load_input=True, load_output=True
            )
        }
        live = DBOS_STATUSES["pending"]  # the statuses in which a run may wait
        statuses = {run_id: getattr(rows.get(run_id), "status", None) for run_id in ids}
        parked = self.query.parked([r for r, status in statuses.items() if status == "CANCELLED"])
        pending = [r for r, status in statuses.items() if status in live or r in parked]
        waiting = self.query.waiting(pending)
        return [
            summarize(rows[run_id], waiting.get(run_id), parked.get(run_id))
            for run_id in ids
            if run_id in rows
        ]

    def count_runs(self, runs: RunFilter) -> int:
        """How many runs `runs` finds (without a limit)."""
        return self.query.count(runs)

    def list_approvals(self, *, limit: int | None = None) -> list[PendingApproval]:
        """The tool calls runs wait for a person to approve, longest waiting first."""
        return self.query.approvals(limit=limit)

    def rotate_keys(
        self, *, batch_size: int = DEFAULT_BATCH, say: Callable[[str], None] | None = None
    ) -> RotationReport:
        """Re-seal every run's stored payloads with the first encryption key of this process
        (see `durable._rotation`): in batches, safe while workers run, resumable."""
        return rotate(_system_tables(self.source), self._url, batch_size=batch_size, say=say)

    def read_usage(self, runs: list[RunInfo]) -> None:
        """Fill in the usage of listed runs that have not finished (read from their steps)."""
        for info in runs:
            if info.usage is None:
                steps = [step_record(s) for s in self.source.list_workflow_steps(info.run_id)]
                tally = tally_steps(steps)
                info.usage, info.usage_by_agent = tally.total, dict(tally.by_agent)

    # --- the person in the loop ----------------------------------------------------------

    def _waiting(self, run_id: str, kind: str) -> tuple[dict[str, Any], bool, bool]:
        """What `run_id` waits for (it must wait for `kind`), whether its wait parks (a run of
        an earlier release waits on a DBOS message instead), and whether it is CANCELLED in
        DBOS (parked, or parking)."""
        info = self.get_run(run_id)
        # answering a question this process cannot read would answer blind (an approval is
        # bound to the exact arguments it cannot see): refused, as for any sealed content
        require(info.waiting_for, run_id, "what it waits for")
        wanted = "waiting_for_input" if kind == "input" else "waiting_for_approval"
        if info.status != wanted or not info.waiting_for:
            raise DurableSwarmError(
                f"Run {run_id!r} is not waiting for {kind} (its status is {info.status!r}); "
                "nothing was sent. Check get_run(run_id).status and .waiting_for."
            )
        wait_id = info.waiting_for.get("wait_id")
        if wait_id is not None and self.waits.answer_of(run_id, person_key(wait_id)) is not None:
            raise DurableSwarmError(
                f"Run {run_id!r} was already given an answer to this {kind} request; nothing "
                "was sent. The run goes on with the first answer as soon as it reads it."
            )
        stopped = self.source.get_workflow_status(run_id)
        return info.waiting_for, _parks(info), getattr(stopped, "status", None) == "CANCELLED"

    def _deliver(
        self,
        run_id: str,
        waiting: tuple[dict[str, Any], bool, bool],
        kind: str,
        message: dict[str, Any],
    ) -> bool:
        """Give the wait `waiting` of `run_id` its answer `message` and resume the run if it
        parked (see `durable._waits`). False if the wait had an answer already (or the run was
        cancelled meanwhile): nothing changed. A run of an earlier release, which waits on a
        DBOS message instead, is sent one too (one per wait: DBOS keeps the first)."""
        since = time.monotonic()
        waits_for, parks, stopped = waiting
        wait_id = waits_for.get("wait_id")
        won = None
        if wait_id is not None:
            wait_key = person_key(int(wait_id))
            won = self.waits.answer(run_id, wait_key, kind, message, stopped=stopped)
        if not parks and (won is not None or wait_id is None):
            message_id = _answer_key(run_id, waits_for)
            self.source.send(run_id, message, kind, idempotency_key=message_id)
        if won is None:
            return wait_id is None
        if won.state == "resuming":
            resume_won(self.source, won, since, self.waits)
        return True

    def send_input(self, run_id: str, text: str, *, by: str | None = None) -> None:
        """Answer the question `run_id` waits on.

        Of answers sent to one question at the same moment, the first stored is the run's; the
        others raise `DurableSwarmError` naming who answered first (DBOS keeps one message per
        idempotency key and drops the rest without a word)."""
        waiting = self._waiting(run_id, "input")
        message = {"text": str(text), "by": by, "at": _now()}
        if self._deliver(run_id, waiting, "input", message):
            return
        try:
            stored = self.waits.answer_of(run_id, person_key(int(waiting[0]["wait_id"])))
        except Exception as e:  # the first answer is stored: only whose it is stays unknown
            logger.warning("Run %s was answered; reading the answer back failed (%s).", run_id, e)
            stored = {}
        if not isinstance(stored, dict):
            stored = {}
        if stored != message:
            raise DurableSwarmError(
                f"Run {run_id!r} was answered by {stored.get('by') or 'someone (no name given)'} "
                f"at {stored.get('at')} just before you; your answer was not sent. The run goes "
                f"on with theirs ({str(stored.get('text'))!r:.80})."
            )

    def decide(
        self, run_id: str, tool_call_id: str, approved: bool, message: str | None, by: str | None
    ) -> None:
        """Approve or reject the tool call `run_id` waits on (bound to its exact arguments).

        Of concurrent decisions on one wait, exactly one takes effect (see `durable._decisions`);
        the others raise `DecisionConflictError` with what was decided, by whom and when. So
        does a decision on a call decided earlier. A call the run does not wait for raises
        `DurableSwarmError`; nothing is sent then.
        """
        for name, value in (("message", message), ("by", by), ("tool call id", tool_call_id)):
            if isinstance(value, str) and "\x00" in value:
                raise DurableSwarmError(
                    f"The {name} of this decision on tool call {tool_call_id!r} of run "
                    f"{run_id!r} contains a NUL character (\\x00), which the database cannot "
                    "store; nothing was sent. Remove it and decide again."
                )
        try:
            waiting = self._waiting(run_id, "approval")
        except DurableSwarmError:
            self._decided_before(run_id, tool_call_id, approved)
            raise
        pending = (waiting[0].get("tool_call") or {}).get("id")
        if pending != tool_call_id:
            self._decided_before(run_id, tool_call_id, approved)
            raise DurableSwarmError(
                f"Run {run_id!r} waits for approval of tool call {pending!r}, not "
                f"{tool_call_id!r}; nothing was sent."
            )
        mine = DecisionRecord(
            run_id, int(waiting[0].get("wait_id") or 0), tool_call_id, approved, message, by, _now()
        )
        earlier = self.decisions.record(mine)
        # The recorded decision is sent even by a loser: if the winner died before sending it,
        # this delivers it (a second send of one wait's decision is dropped by its key).
        decision = payload(earlier or mine, waiting[0].get("digest"))
        self._deliver(run_id, waiting, "approval", decision)
        if earlier is not None:
            raise earlier.conflict(approved)

    def _decided_before(self, run_id: str, tool_call_id: str, approved: bool) -> None:
        """Raise `DecisionConflictError` if `tool_call_id` of `run_id` was decided already."""
        earlier = self.decisions.find(run_id, tool_call_id=tool_call_id)
        if earlier is not None:
            raise earlier.conflict(approved)

    # --- steering ----------------------------------------------------------------------------

    def cancel(self, run_id: str) -> None:
        """Cancel a run and its sub-agents. A run (or sub-agent) parked at a wait takes no
        answer any more; one executing stops at its next step (see `durable._waits`)."""
        self._cancel(self.get_run(run_id))

    def _cancel(self, info: RunInfo) -> None:
        run_id = info.run_id
        # the waits' tombstone first, then DBOS, then the waits (see `cancel_tree`)
        self.waits.tombstone(run_id)
        self.source.cancel_workflow(run_id, cancel_children=True)
        self.waits.cancel_tree(run_id)

    def resume(self, run_id: str, budget: Budget | None = None) -> str:
        """Continue a cancelled run, or a failed one from the step that failed. With `budget`,
        the run goes on under that budget from its next check (a run stopped by its budget
        checks again at once: it is rewound to where it looked for a raised budget).

        A run that has not ended (pending, waiting) is not started again: its process runs it,
        or a live process takes it over once that process is known dead (a second execution
        beside the first would repeat the step in flight). Only the raised budget is sent."""
        cancelled_at = self.waits.tombstone_at(run_id)  # read before the run (`_end_of`)
        info = self.get_run(run_id)
        if info.status == "succeeded":
            raise DurableSwarmError(
                f"Run {run_id!r} already succeeded; nothing was changed. To run it again from "
                "a step, fork it (fork(run_id, step))."
            )
        raised = check_budget(budget)
        note = {"budget": raised.to_json(), "at": _now()} if raised is not None else None
        if info.status not in ("failed", "cancelled") or not self._claim_resume(info, cancelled_at):
            # not ended, or someone resumed it from this same end a moment ago: it goes on
            if note is not None:
                self.source.send(run_id, note, BUDGET_TOPIC)
            return run_id
        if info.status == "failed":
            failed = [s for s in info.steps if s.error is not None]
            start = failed[0].step if failed else None
            if failed and failed[0].kind == "budget":
                # Back to where the run looked for a raised budget, just before the refusal.
                refused = failed[0].step
                start = max(s.step for s in info.steps if s.kind == "wait" and s.step < refused)
            if note is None:
                self.source.rewind_workflow(run_id, start_step=start)
                return run_id
            # A rewind drops unread messages, so the run is held on a queue nobody serves until
            # the new budget is in its mailbox, then released.
            self.source.rewind_workflow(run_id, start_step=start, queue_name=_HOLD_QUEUE)
        if note is not None:
            self.source.send(run_id, note, BUDGET_TOPIC)
        if info.status == "cancelled":
            self._settled_first(run_id)
        self.waits.uncancel_tree(run_id)  # its waits wait again (a replay parks at them)
        self.source.resume_workflow(run_id)
        return run_id

    def _settled_first(self, run_id: str) -> None:
        """Wait (up to `SETTLE_SECONDS`) while the person's cancel of `run_id` stands and a
        wait of it or of a sub-agent run is `cancelling` (`WaitBook.settling_in_tree`): the
        execution that was parking when the person cancelled would undo a resume made before
        its own cancel in DBOS (DBOS's cancel is unconditional), leaving the run cancelled at a
        wait that says waiting, which nobody resumes. A park takes a few statements; a wait
        still cancelling after that long was left by a process that died or froze (the resume
        goes ahead: a replay parks anew). Another resumer that removed the tombstone ends the
        wait here too (the run is theirs to resume)."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.waits.settling_in_tree(run_id) and self.waits.cancelled(run_id):
            if time.monotonic() > deadline:
                logger.warning(
                    "run %r: a wait of it is still parking %.0f s after its cancel (its "
                    "process died or froze meanwhile?); resuming the run anyway",
                    run_id,
                    SETTLE_SECONDS,
                )
                return
            time.sleep(0.05)

    def _claim_resume(self, info: RunInfo, cancelled_at: int | None) -> bool:
        """Whether this caller resumes `info`'s ended run: of several that read the same end
        at once, the one that claims it (`WaitBook.claim_resume_of_end`, each key of
        `_end_of`, in order; `cancelled_at`: the time of the person's tombstone, read before
        `info`). Another waits up to `RESUME_CLAIM_SECONDS` for the claimer's resume to show
        (the run leaves its end) and then leaves it to that one; if it never shows (the
        claimer's process died, or its call failed), this caller resumes the run after all."""
        read, keys = _end_of(info, cancelled_at)
        if read is None or all(self.waits.claim_resume_of_end(info.run_id, k) for k in keys):
            return True
        deadline = time.monotonic() + RESUME_CLAIM_SECONDS
        while time.monotonic() < deadline:
            status = self.source.get_workflow_status(info.run_id)
            state = getattr(status, "status", None)
            now = (self.waits.tombstone_at(info.run_id), getattr(status, "updated_at", None))
            if state not in ("CANCELLED", "ERROR") or now != read:
                return False  # resumed by the claimer
            time.sleep(0.05)
        logger.warning(
            "run %r: a resume claimed %.0f s ago never reached DBOS (its caller stopped?); "
            "resuming it here",
            info.run_id,
            RESUME_CLAIM_SECONDS,
        )
        return True

    def fork(self, run_id: str, step: int, new_run_id: str | None = None) -> str:
        """A new run copying `run_id`'s steps before `step`; returns its id."""
        info = self.get_run(run_id)
        last = max((s.step for s in info.steps), default=0)
        if step < 1 or step > last + 1:
            raise DurableSwarmError(
                f"Cannot fork run {run_id!r} at step {step}: it has steps 1 to {last}; nothing "
                "was changed. Pick a step in that range (see get_run(run_id).steps)."
            )
        if new_run_id:
            with SetWorkflowID(new_run_id):
                handle = self.source.fork_workflow(run_id, step)
        else:
            handle = self.source.fork_workflow(run_id, step)
        return str(handle.get_workflow_id())

    # --- deleting ----------------------------------------------------------------------------

    def delete(self, run_id: str, *, force: bool = False) -> list[str]:
        """Delete a run and its sub-agent runs from the database; returns the deleted ids.

        A live run (pending or waiting for a person) is refused unless `force`: then it is
        cancelled first, so no process records anything more for it."""
        info = self.get_run(run_id)
        if info.status in LIVE and not force:
            raise DurableSwarmError(
                f"Run {run_id!r} is {info.status}: it is live, so it was not deleted. Cancel it "
                f"first (`durable-swarm runs cancel {run_id}`), or delete it anyway with "
                "`--force` (force=True)."
            )
        if info.status in LIVE:
            self._cancel(info)
        return purge(self.source, self.database_url, [run_id])

    def prune(self, older_than: Any, *, dry_run: bool = False) -> list[RunInfo]:
        """Delete every finished run (succeeded, failed, cancelled) created before
        `older_than` (a datetime or ISO string), with its sub-agent runs; live runs are never
        touched. Returns the runs deleted (with `dry_run`, those that would be)."""
        runs = self.list_runs(RunFilter.of(FINISHED, until=older_than), limit=None)
        if runs and not dry_run:
            purge(self.source, self.database_url, [r.run_id for r in runs])
        return runs

    # --- retention -------------------------------------------------------------------------

    def apply_retention(
        self, policy: Retention, *, dry_run: bool = False, now: datetime | None = None
    ) -> RetentionReport:
        """Apply `policy` once, now (see `RunCommands.apply_retention`)."""
        report = expire(self.source, self.database_url, policy, now=now, dry_run=dry_run)
        if not dry_run:
            RetentionLedger(self.database_url).add_deleted(report.counts)
        return report

    def retention_status(self) -> RetentionStatus:
        """The policies in force on this database and what they deleted so far."""
        return RetentionLedger(self.database_url).status()


class RunCommands(abc.ABC):
    """The reading and steering methods `DurableSwarm` and `DurableClient` share, written once
    over their `runs` (a `RunControl`). Each may be called from inside a running event loop
    (it then runs on a worker thread; it still blocks its caller)."""

    @property
    @abc.abstractmethod
    def runs(self) -> RunControl:
        """Reading and steering runs on this object's run database."""

    @off_event_loop
    def list_runs(
        self,
        *,
        status: str | list[str] | None = None,
        agent: str | None = None,
        search: str | None = None,
        since: Any = None,
        until: Any = None,
        limit: int | None = 50,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs, newest first: optionally only those with `status` (one or several of this
        library's status names), on `agent` (the agent a run ended on, else the one it started
        with), with `search` in their messages (case-insensitive text), or created between
        `since` and `until` (datetimes or ISO strings). One page of `limit` runs (None: all)
        after skipping `offset`; one SQL query finds the page, whatever the number of runs.

        Each entry is a summary from the run's status row, without its messages: a succeeded
        run's `usage` and `cost_usd` come from its stored result, a run in progress, waiting or
        failed has None there; `get_run(run_id)` rebuilds messages and usage from its steps.

        Raises `DurableSwarmError` for an unknown status, a time that is not a datetime or ISO
        text, or a negative `limit` or `offset`."""
        runs = RunFilter.of(status, agent, search, since, until)
        return self.runs.list_runs(runs, limit, offset)

    @off_event_loop
    def count_runs(
        self,
        *,
        status: str | list[str] | None = None,
        agent: str | None = None,
        search: str | None = None,
        since: Any = None,
        until: Any = None,
    ) -> int:
        """How many runs `list_runs` with the same filters finds (for paging)."""
        return self.runs.count_runs(RunFilter.of(status, agent, search, since, until))

    @off_event_loop
    def list_approvals(self, *, limit: int | None = None) -> list[PendingApproval]:
        """The tool calls runs wait for a person to approve (`PendingApproval`: run id, tool
        call id, tool, the exact arguments, since when), longest waiting first."""
        return self.runs.list_approvals(limit=limit)

    # --- the person in the loop ----------------------------------------------------------

    @off_event_loop
    def send_input(self, run_id: str, text: str, *, by: str | None = None) -> None:
        """Answer the question a run waits on (`waiting_for_input`); the process holding the
        run (a worker, a `DurableSwarm`) resumes it, or the next one to take it. A run that is
        not waiting for input raises `DurableSwarmError` and nothing is sent."""
        self.runs.send_input(run_id, text, by=by)

    @off_event_loop
    def approve(self, run_id: str, tool_call_id: str, *, by: str | None = None) -> None:
        """Approve the tool call a run waits on; it runs with exactly the arguments shown in
        `get_run(run_id).waiting_for`. The decision, who and when are recorded in the run.

        Raises `DecisionConflictError` if the call was already decided (concurrent decisions:
        exactly one wins), and `DurableSwarmError` if the run does not wait for this call."""
        self.runs.decide(run_id, tool_call_id, True, None, by)

    @off_event_loop
    def reject(
        self,
        run_id: str,
        tool_call_id: str,
        message: str | None = None,
        *,
        by: str | None = None,
    ) -> None:
        """Reject the tool call a run waits on; the model reads `message` as the tool's result.
        Raises as `approve` does."""
        self.runs.decide(run_id, tool_call_id, False, message, by)

    # --- steering and deleting -----------------------------------------------------------

    @off_event_loop
    def cancel(self, run_id: str) -> None:
        """Cancel a run and its sub-agents: they stop at their next step, status `cancelled`."""
        self.runs.cancel(run_id)

    @off_event_loop
    def delete_run(self, run_id: str, *, force: bool = False) -> list[str]:
        """Delete a run and its sub-agent runs from the database; returns the deleted ids.
        A live run (pending, waiting for a person) is refused with `DurableSwarmError` unless
        `force`, which cancels it first."""
        return self.runs.delete(run_id, force=force)

    @off_event_loop
    def prune_runs(self, older_than: Any, *, dry_run: bool = False) -> list[RunInfo]:
        """Delete every finished run (succeeded, failed, cancelled) created before
        `older_than` (a datetime or ISO string), with its sub-agent runs; live runs are never
        touched. Returns the runs deleted (with `dry_run`, the ones that would be)."""
        return self.runs.prune(older_than, dry_run=dry_run)

    # --- retention -------------------------------------------------------------------------

    @off_event_loop
    def apply_retention(
        self,
        retention: Retention | Mapping[str, Any] | str | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        """Apply a retention policy once, now, in this process: delete every finished run past
        its age (with its sub-agent runs, steps, stream, events, messages, decisions and
        notices), batch by batch; never a run in flight. Returns what was deleted (with
        `dry_run`: what would be, and nothing is deleted).

        `retention`: a `Retention`, a dict or text (see `DurableSwarm`'s `retention`); default
        this swarm's policy, else the one the database's sweeping processes recorded. `now`:
        the time ages are counted to (default: the current time).

        Raises `DurableSwarmError` for a bad policy, or when there is none to apply."""
        policy = Retention.of(retention) or self._retention_policy()
        return self.runs.apply_retention(policy, dry_run=dry_run, now=now)

    @off_event_loop
    def retention_status(self) -> RetentionStatus:
        """Retention on this run database: the processes applying a policy (their policy,
        when they last swept and how many runs that deleted) and the runs deleted so far, by
        status."""
        return self.runs.retention_status()

    def _retention_policy(self) -> Retention:
        """The policy to apply when none is given: this object's own (a `DurableSwarm`'s
        `retention`), else the one policy recorded on the database."""
        own = getattr(self, "retention", None)
        if isinstance(own, Retention):
            return own
        policies = self.runs.retention_status().policies
        if len(policies) == 1:
            return Retention.of(policies[0])  # type: ignore[return-value]
        found = "none is recorded" if not policies else f"several are: {'; '.join(policies)}"
        raise DurableSwarmError(
            f"No retention policy to apply: none was given and {found} on this database. "
            "Give one, e.g. retention={'succeeded': '30d', 'failed': '90d'} (CLI: --policy "
            "succeeded=30d,failed=90d)."
        )
