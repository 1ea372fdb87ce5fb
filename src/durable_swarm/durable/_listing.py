"""Listing runs in SQL: filters, text search, counts and paging on DBOS's system tables.

DBOS's `list_workflows` filters by its own columns only; a run's agent, what it waits for and the
text of its messages live in JSON payloads (this library's serializer writes every payload as
`{"schema_version": N, "value": ...}`). This module filters, counts and pages runs in one SQL
query on DBOS's tables (through DBOS's own SQLAlchemy engine and table definitions, which
`_engine.system_tables` hands out, on SQLite and PostgreSQL alike), so a page of the runs list
costs the same with a hundred runs or a hundred thousand. The rows of a page are then read
through DBOS's public `list_workflows`, as everything else reads them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from ..errors import DurableSwarmError, EncryptionKeyError
from ..usage import Tally
from ._engine import SystemTables
from ._log import MESSAGE_STEPS, WAITING_EVENT, WORKFLOW_NAME, JsonSerializer
from ._runs import DBOS_STATUSES, RunInfo, encrypted_text, problem_of, run_status, time_of
from ._sealing import SealedValue, is_sealed, keyring, sealed_key_id
from ._tables import missing_table
from ._waits import PARKED_STATES, WAITS_TABLE, Wait, parked_in

__all__ = ["PendingApproval", "RunFilter", "RunMark", "RunQuery"]

# The steps whose stored output holds a person's answer (`answer:<kind>`; `DBOS.recv` in logs of
# earlier releases).
_ANSWER_STEPS = ("answer:%", "DBOS.recv")
# The library's table of parked waits (see `durable._waits`), read beside DBOS's.
_WAITS = sa.table(WAITS_TABLE, sa.column("run_id"), sa.column("state"), sa.column("kind"))
_PERSON = ("input", "approval")
KINDS_ALL = ("input", "approval", "join", "missing", "limit")
# How long a listing reads no waits table after finding none (it appears with the first park).
_NO_WAITS_SECONDS = 10.0
_SET_EVENT_STEP = "DBOS.setEvent"


@dataclass
class PendingApproval:
    """A tool call a run waits for a person to approve or reject.

    `arguments` is the exact JSON text of the arguments the model sent (an approval is bound to
    them); `since` is when the run started waiting.
    """

    run_id: str
    tool_call_id: str
    tool: str
    arguments: str
    agent: str | None
    since: datetime | None


@dataclass(frozen=True)
class RunMark:
    """What changes when a run moves, read without its payloads: its DBOS status, when its
    status row last changed, how many steps it has recorded and the highest step number. Two
    equal marks of one run mean nothing was recorded in between (steps are only ever added; a
    wait set or answered is a step too)."""

    status: str
    updated_at: int | None
    steps: int
    last_step: int


def _epoch_ms(value: Any, what: str) -> int:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise DurableSwarmError(
                f"`{what}` must be a datetime or an ISO 8601 string like 2026-01-31T12:00:00, "
                f"not {value!r}."
            ) from None
    if not isinstance(value, datetime):
        raise DurableSwarmError(
            f"`{what}` must be a datetime or an ISO 8601 string, not {value!r}."
        )
    return int(value.timestamp() * 1000)


def _check_statuses(status: str | Sequence[str] | None) -> tuple[str, ...]:
    """The status names asked for (raises `DurableSwarmError` for an unknown one)."""
    wanted = (status,) if isinstance(status, str) else tuple(status or ())
    unknown = [s for s in wanted if s not in DBOS_STATUSES]
    if unknown:
        raise DurableSwarmError(
            f"Unknown run status {unknown[0]!r}; use one of {', '.join(DBOS_STATUSES)}."
        )
    return wanted


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing or a count finds: those with one of `status` (this library's status
    names; none: any), on `agent` (the agent a run ended on, else the one it started with),
    with `search` in a message's content (case-insensitive), created at or after `since_ms` and
    at or before `until_ms` (milliseconds since the epoch). Build it with `RunFilter.of`."""

    status: tuple[str, ...] = ()
    agent: str | None = None
    search: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def of(
        cls,
        status: str | Sequence[str] | None = None,
        agent: str | None = None,
        search: str | None = None,
        since: Any = None,
        until: Any = None,
    ) -> RunFilter:
        """The filter of `list_runs`'s keywords (`since`/`until`: datetimes or ISO strings).

        Raises:
            DurableSwarmError: an unknown status, or a time that is not a datetime or ISO text.
        """
        return cls(
            _check_statuses(status),
            agent or None,
            search or None,
            None if since is None else _epoch_ms(since, "since"),
            None if until is None else _epoch_ms(until, "until"),
        )


@dataclass(frozen=True)
class _Parked:
    """The kind of a run's parked wait, as a status count reads it (see `run_status`)."""

    kind: str
    detail: dict[str, Any] | None = None


def _like_pattern(text: str, *, in_json: bool = True) -> str:
    """A LIKE pattern finding `text` in a string, or inside stored JSON (`in_json`: where it
    appears JSON-escaped)."""
    escaped = json.dumps(text)[1:-1] if in_json else text
    for char in ("\\", "%", "_"):
        escaped = escaped.replace(char, "\\" + char)
    return f"%{escaped}%"


def _missing_key(sealed: str | None) -> str | None:
    """The id of the key that sealed a payload (from the start of its sealed text), if this
    process has not got it."""
    if not sealed or not is_sealed(sealed) or sealed.count(".") < 2:
        return None
    key_id = sealed_key_id(sealed)
    ring = keyring()
    return None if ring is not None and ring.has(key_id) else key_id


class RunQuery:
    """SQL over the run database's DBOS tables (see the module docstring).

    `tables` are DBOS's system tables of a launched DBOS or of a `DBOSClient`
    (`_engine.system_tables`).
    """

    def __init__(self, tables: SystemTables) -> None:
        self._engine = tables.engine
        self._tables = tables.tables
        self._postgres = tables.postgres
        self._serializer = JsonSerializer()
        self._no_waits_until = 0.0  # no waits table (no run parked here yet) until then

    def _rows(self, query: Callable[[], Any]) -> list[Any]:
        """`query()` built and run; built again without the waits table if it does not exist
        yet (a database no run ever parked on, read by a client that creates nothing)."""
        try:
            with self._engine.connect() as conn:
                return list(conn.execute(query()).all())
        except sa.exc.DBAPIError as e:
            if not (self._waits_table and missing_table(e)):
                raise
        self._no_waits_until = time.monotonic() + _NO_WAITS_SECONDS
        with self._engine.connect() as conn:
            return list(conn.execute(query()).all())

    @property
    def _waits_table(self) -> bool:
        """Whether to read the waits table (it was missing a moment ago: not for a while)."""
        return time.monotonic() >= self._no_waits_until

    def _parked(self, ws: Any, kinds: Sequence[str]) -> Any:
        """Whether the run of `ws`'s row is parked at a wait of one of `kinds` (it is then
        CANCELLED in DBOS, yet waits)."""
        if not self._waits_table:
            return sa.false()
        return (
            sa.select(sa.literal(1))
            .select_from(_WAITS)
            .where(
                _WAITS.c.run_id == ws.c.workflow_uuid,
                _WAITS.c.state.in_(PARKED_STATES),
                _WAITS.c.kind.in_(list(kinds)),
            )
            .exists()
        )

    def _parked_waits(self, run_ids: Sequence[str]) -> dict[str, Wait]:
        """The parked waits of those of `run_ids` that have one (see `durable._waits`)."""
        if not run_ids or not self._waits_table:
            return {}
        try:
            with self._engine.connect() as conn:
                return parked_in(conn, run_ids)
        except sa.exc.DBAPIError as e:
            if not missing_table(e):
                raise
            self._no_waits_until = time.monotonic() + _NO_WAITS_SECONDS
            return {}

    def _json_text(self, column: Any, *path: str | int) -> Any:
        """The text at `path` inside the JSON document `column` (NULL when absent)."""
        if self._postgres:
            return sa.func.jsonb_extract_path_text(sa.cast(column, JSONB), *map(str, path))
        json_path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        return sa.func.json_extract(column, json_path)

    def _waits_for(self, ev: Any, kind: str) -> Any:
        """The `waiting_for` event `ev` says the run waits for `kind` (`input`, `approval`).
        A LIKE on the stored text (as the serializer writes it) spares parsing the JSON of
        every other run's event."""
        stored = json.dumps({"kind": kind})[1:-1]
        return sa.and_(
            ev.c.value.like(f"%{stored}%"),
            self._json_text(ev.c.value, "value", "kind") == kind,
        )

    def _filtered(self, columns: list[Any], runs: RunFilter) -> Any:
        t = self._tables
        ws, wi, wo, ev = t.workflow_status, t.workflow_input, t.workflow_output, t.workflow_events
        ours = ws.c.name == WORKFLOW_NAME
        inputs = sa.func.coalesce(wi.c.inputs, ws.c.inputs)
        output = sa.func.coalesce(wo.c.output, ws.c.output)
        joined = (
            ws.outerjoin(wi, wi.c.workflow_uuid == ws.c.workflow_uuid)
            .outerjoin(wo, wo.c.workflow_uuid == ws.c.workflow_uuid)
            .outerjoin(
                ev, sa.and_(ev.c.workflow_uuid == ws.c.workflow_uuid, ev.c.key == WAITING_EVENT)
            )
        )
        where: list[Any] = [ours]
        if runs.status:
            kind = self._json_text(ev.c.value, "value", "kind")
            live = ws.c.status.in_(DBOS_STATUSES["pending"])
            # a parked run is CANCELLED in DBOS, yet waits (see `durable._waits`)
            cancelled = ws.c.status == "CANCELLED"
            parked_person = sa.and_(cancelled, self._parked(ws, _PERSON))
            waits = sa.or_(live, parked_person)
            by_status = {
                "pending": sa.or_(
                    sa.and_(live, kind.is_(None)),
                    sa.and_(cancelled, self._parked(ws, ("join", "missing", "limit"))),
                ),
                "waiting_for_input": sa.and_(waits, self._waits_for(ev, "input")),
                "waiting_for_approval": sa.and_(waits, self._waits_for(ev, "approval")),
                "cancelled": sa.and_(cancelled, sa.not_(self._parked(ws, KINDS_ALL))),
            }
            where.append(
                sa.or_(*(by_status.get(s, ws.c.status.in_(DBOS_STATUSES[s])) for s in runs.status))
            )
        if runs.agent:
            # The agent a run ended on (its result), else the one it started with (its input).
            # CASE keeps the JSON parsing to this library's runs.
            current = sa.case(
                (
                    ours,
                    sa.func.coalesce(
                        self._json_text(output, "value", "agent", "name"),
                        self._json_text(inputs, "value", "args", 0, "agent", "name"),
                    ),
                )
            )
            where.append(current == runs.agent)
        if runs.search:
            where.append(self._search(ws, inputs, output, runs.search))
        if runs.since_ms is not None:
            where.append(ws.c.created_at >= runs.since_ms)
        if runs.until_ms is not None:
            where.append(ws.c.created_at <= runs.until_ms)
        return sa.select(*columns).select_from(joined).where(*where)

    def _any_content(self, document: Any, path: tuple[str | int, ...], pattern: str) -> Any:
        """Whether a message in the JSON array at `path` of `document` has `pattern` in its
        content."""
        if self._postgres:
            array = sa.func.jsonb_extract_path(sa.cast(document, JSONB), *map(str, path))
            items = sa.func.jsonb_array_elements(array).table_valued("value")
            content: Any = items.c.value.op("->>")("content")
        else:
            json_path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            items = sa.func.json_each(document, json_path).table_valued("value")
            content = sa.func.json_extract(items.c.value, "$.content")
        return (
            sa.select(sa.literal(1))
            .select_from(items)
            .where(content.ilike(pattern, escape="\\"))
            .exists()
        )

    def _search(self, ws: Any, inputs: Any, output: Any, text: str) -> Any:
        """Runs with `text` in a message's content: in their input, their result, a model or
        tool step, or a person's answer. A plain LIKE on the stored JSON picks the candidates
        cheaply; the JSON check keeps only those where the text is in a message."""
        op = self._tables.operation_outputs
        raw, plain = _like_pattern(text), _like_pattern(text, in_json=False)
        step_text = sa.func.coalesce(
            self._json_text(op.c.output, "value", "message", "content"),
            self._json_text(op.c.output, "value", "text"),
        )
        in_steps = (
            sa.select(sa.literal(1))
            .where(
                op.c.workflow_uuid == ws.c.workflow_uuid,
                sa.or_(*(op.c.function_name.like(p) for p in (*MESSAGE_STEPS, *_ANSWER_STEPS))),
                op.c.output.ilike(raw, escape="\\"),
                step_text.ilike(plain, escape="\\"),
            )
            .exists()
        )
        in_input = sa.and_(
            inputs.ilike(raw, escape="\\"),
            self._any_content(inputs, ("value", "args", 0, "messages"), plain),
        )
        in_output = sa.and_(
            output.ilike(raw, escape="\\"),
            self._any_content(output, ("value", "messages"), plain),
        )
        return sa.case((ws.c.name == WORKFLOW_NAME, sa.or_(in_input, in_output, in_steps)))

    def _page(self, runs: RunFilter, limit: int | None, offset: int) -> Any:
        ws = self._tables.workflow_status
        query = self._filtered([ws.c.workflow_uuid], runs).order_by(
            ws.c.created_at.desc(), ws.c.workflow_uuid.desc()
        )
        if limit is not None:
            query = query.limit(limit)
        if offset:
            query = query.offset(offset)
        return query

    def run_ids(self, runs: RunFilter, limit: int | None = 50, offset: int = 0) -> list[str]:
        """The ids of the runs `runs` finds, newest first, one page of them."""
        return [row[0] for row in self._rows(lambda: self._page(runs, limit, offset))]

    def count(self, runs: RunFilter) -> int:
        """How many runs `runs` finds."""
        rows = self._rows(lambda: self._filtered([sa.func.count()], runs))
        return int(rows[0][0])

    def parked(self, run_ids: list[str]) -> dict[str, Wait]:
        """The parked waits of those of `run_ids` that have one, by run id."""
        return self._parked_waits(run_ids)

    def waiting(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What each of these runs waits for, by run id (runs waiting for nothing left out)."""
        if not run_ids:
            return {}
        ev = self._tables.workflow_events
        query = sa.select(ev.c.workflow_uuid, ev.c.value).where(
            ev.c.workflow_uuid.in_(run_ids), ev.c.key == WAITING_EVENT
        )
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        found = {run_id: self._serializer.deserialize(value) for run_id, value in rows}
        return {run_id: value for run_id, value in found.items() if value}

    def model_usage(self, run_ids: list[str]) -> dict[str, dict[str, int]]:
        """Each run's model calls and tokens so far: `{"model_calls": n, "tokens": n}`."""
        usage = {run_id: {"model_calls": 0, "tokens": 0} for run_id in run_ids}
        if not run_ids:
            return usage
        op = self._tables.operation_outputs
        query = sa.select(op.c.workflow_uuid, op.c.output).where(
            op.c.workflow_uuid.in_(run_ids), op.c.function_name.like(MESSAGE_STEPS[0])
        )
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        for run_id, output in rows:
            usage[run_id]["model_calls"] += 1
            value = self._serializer.deserialize(output) if output else None
            tokens = (value or {}).get("usage") if isinstance(value, dict) else None
            if isinstance(tokens, dict) and isinstance(tokens.get("total_tokens"), int):
                usage[run_id]["tokens"] += tokens["total_tokens"]
        return usage

    def status_counts(self) -> dict[str, int]:
        """How many runs have each status (every status named, zeros included)."""
        t = self._tables
        ws, ev = t.workflow_status, t.workflow_events
        kind = self._json_text(ev.c.value, "value", "kind")

        def query() -> Any:
            parked: Any = sa.null()
            if self._waits_table:
                parked = (
                    sa.select(sa.func.max(_WAITS.c.kind))
                    .where(_WAITS.c.run_id == ws.c.workflow_uuid, _WAITS.c.state.in_(PARKED_STATES))
                    .scalar_subquery()
                )
            each = (
                sa.select(ws.c.status.label("s"), kind.label("k"), parked.label("p"))
                .select_from(
                    ws.outerjoin(
                        ev,
                        sa.and_(
                            ev.c.workflow_uuid == ws.c.workflow_uuid, ev.c.key == WAITING_EVENT
                        ),
                    )
                )
                .where(ws.c.name == WORKFLOW_NAME)
                .subquery()
            )
            return sa.select(each.c.s, each.c.k, each.c.p, sa.func.count()).group_by(
                each.c.s, each.c.k, each.c.p
            )

        counts = dict.fromkeys(DBOS_STATUSES, 0)
        for dbos_status, waits_for, parked_kind, n in self._rows(query):
            waiting = {"kind": waits_for} if waits_for else None
            parked = _Parked(parked_kind) if parked_kind else None
            counts[run_status(dbos_status, waiting, parked)] += int(n)
        return counts

    def step_totals(self) -> list[tuple[str, int, int, float]]:
        """Per step name (`model:Agent`, `tool:name`, ...) of every run: how many steps, how
        many failed, and their total duration in seconds."""
        t = self._tables
        ws, op = t.workflow_status, t.operation_outputs
        duration = op.c.completed_at_epoch_ms - op.c.started_at_epoch_ms
        query = (
            sa.select(
                op.c.function_name,
                sa.func.count(),
                sa.func.count(op.c.error),
                sa.func.coalesce(sa.func.sum(duration), 0),
            )
            .select_from(op.join(ws, ws.c.workflow_uuid == op.c.workflow_uuid))
            .where(ws.c.name == WORKFLOW_NAME)
            .group_by(op.c.function_name)
        )
        with self._engine.connect() as conn:
            return [
                (name, int(n), int(errors), float(ms) / 1000)
                for name, n, errors, ms in conn.execute(query)
            ]

    def token_totals(self) -> dict[str, int]:
        """Tokens of every recorded model call: prompt, completion and total."""
        t = self._tables
        ws, op = t.workflow_status, t.operation_outputs
        kinds = ("prompt_tokens", "completion_tokens", "total_tokens")
        if self._postgres:  # parse each output once, not once per count
            usage: Any = sa.func.jsonb_extract_path(sa.cast(op.c.output, JSONB), "value", "usage")
        else:
            usage = sa.func.json_extract(op.c.output, "$.value.usage")
        usages = (
            sa.select(usage.label("usage"))
            .select_from(op.join(ws, ws.c.workflow_uuid == op.c.workflow_uuid))
            .where(
                ws.c.name == WORKFLOW_NAME,
                op.c.function_name.like(MESSAGE_STEPS[0]),
                op.c.output.is_not(None),
            )
            .subquery()
        )
        sums = [
            sa.func.coalesce(
                sa.func.sum(sa.cast(self._json_text(usages.c.usage, k), sa.BigInteger)), 0
            )
            for k in kinds
        ]
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(*sums)).one()
        return {k: int(v) for k, v in zip(kinds, row, strict=True)}

    def approvals(self, *, limit: int | None = None) -> list[PendingApproval]:
        """The tool calls runs wait for a person to approve, longest waiting first."""
        t = self._tables
        ws, ev, op = t.workflow_status, t.workflow_events, t.operation_outputs
        since = (
            sa.select(sa.func.max(op.c.completed_at_epoch_ms))
            .where(op.c.workflow_uuid == ws.c.workflow_uuid, op.c.function_name == _SET_EVENT_STEP)
            .scalar_subquery()
        )

        def query() -> Any:
            live = sa.or_(
                ws.c.status.in_(DBOS_STATUSES["pending"]),
                sa.and_(ws.c.status == "CANCELLED", self._parked(ws, ("approval",))),
            )
            found = (
                sa.select(ws.c.workflow_uuid, ev.c.value, sa.func.coalesce(since, ws.c.updated_at))
                .select_from(
                    ws.join(
                        ev,
                        sa.and_(
                            ev.c.workflow_uuid == ws.c.workflow_uuid, ev.c.key == WAITING_EVENT
                        ),
                    )
                )
                .where(ws.c.name == WORKFLOW_NAME, live, self._waits_for(ev, "approval"))
                .order_by(ws.c.created_at, ws.c.workflow_uuid)
            )
            return found if limit is None else found.limit(limit)

        rows = self._rows(query)
        found = []
        for run_id, value, since_ms in rows:
            waiting = self._serializer.deserialize(value) or {}
            call = waiting.get("tool_call") or {}
            function = call.get("function") or {}
            if isinstance(waiting, SealedValue):  # its key is missing here: shown as such
                function = {"name": "encrypted", "arguments": encrypted_text(waiting.key_id)}
            found.append(
                PendingApproval(
                    run_id=run_id,
                    tool_call_id=str(call.get("id")),
                    tool=str(function.get("name")),
                    arguments=str(function.get("arguments", "")),
                    agent=waiting.get("agent"),
                    since=time_of(since_ms),
                )
            )
        return found

    # --- cheap reads for the console: no payloads -------------------------------------------

    def marks(self, run_ids: Sequence[str]) -> dict[str, RunMark]:
        """Each run's `RunMark`, by run id, in one query (unknown ids are left out)."""
        if not run_ids:
            return {}
        ws, op = self._tables.workflow_status, self._tables.operation_outputs
        steps = (
            sa.select(
                op.c.workflow_uuid,
                sa.func.count().label("n"),
                sa.func.max(op.c.function_id).label("last"),
            )
            .where(op.c.workflow_uuid.in_(list(run_ids)))
            .group_by(op.c.workflow_uuid)
            .subquery()
        )
        query = (
            sa.select(ws.c.workflow_uuid, ws.c.status, ws.c.updated_at, steps.c.n, steps.c.last)
            .select_from(ws.outerjoin(steps, steps.c.workflow_uuid == ws.c.workflow_uuid))
            .where(ws.c.workflow_uuid.in_(list(run_ids)))
        )
        with self._engine.connect() as conn:
            return {
                run_id: RunMark(status, updated, int(n or 0), int(last or 0))
                for run_id, status, updated, n, last in conn.execute(query)
            }

    def summaries(self, run_ids: Sequence[str]) -> dict[str, RunInfo]:
        """Each run as a row of a listing, by run id, in one query that reads only a few fields
        inside the stored input and result (never the messages): status, agent (the one it
        ended on, else the one it started with), times, parent, fork origin, what it waits
        for, its error and, once it finished, its usage. Steps and messages are left empty.
        Unknown ids are left out."""
        if not run_ids:
            return {}
        t = self._tables
        ws, wi, wo, ev = t.workflow_status, t.workflow_input, t.workflow_output, t.workflow_events
        inputs = sa.func.coalesce(wi.c.inputs, ws.c.inputs)
        output = sa.func.coalesce(wo.c.output, ws.c.output)
        spec: tuple[str | int, ...] = ("value", "args", 0)
        query = (
            sa.select(
                ws.c.workflow_uuid,
                ws.c.status,
                ws.c.created_at,
                ws.c.updated_at,
                ws.c.forked_from,
                sa.func.coalesce(wo.c.error, ws.c.error),
                self._json_text(output, "value", "agent", "name"),
                self._json_text(inputs, *spec, "agent", "name"),
                self._json_text(inputs, *spec, "parent"),
                self._json_text(output, "value", "usage"),
                ev.c.value,
                sa.func.substr(self._json_text(inputs, "sealed"), 1, 80),
            )
            .select_from(
                ws.outerjoin(wi, wi.c.workflow_uuid == ws.c.workflow_uuid)
                .outerjoin(wo, wo.c.workflow_uuid == ws.c.workflow_uuid)
                .outerjoin(
                    ev,
                    sa.and_(ev.c.workflow_uuid == ws.c.workflow_uuid, ev.c.key == WAITING_EVENT),
                )
            )
            .where(ws.c.workflow_uuid.in_(list(run_ids)))
        )
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        parked = self._parked_waits([row[0] for row in rows if row[1] == "CANCELLED"])
        found = {}
        for (
            run_id,
            status,
            created,
            updated,
            forked,
            error,
            ended_on,
            started_on,
            parent,
            usage,
            waits,
            sealed,
        ) in rows:
            waits_now = status in DBOS_STATUSES["pending"] or run_id in parked
            waiting = self._deserialized(waits) if waits_now else None
            locked = waiting.key_id if isinstance(waiting, SealedValue) else _missing_key(sealed)
            tally = None
            if usage:
                try:
                    tally = Tally.from_json(json.loads(usage))
                except (ValueError, TypeError, KeyError, AttributeError):
                    tally = None
            found[run_id] = RunInfo(
                run_id=run_id,
                status=run_status(status, waiting or None, parked.get(run_id)),
                problem=problem_of(parked.get(run_id)),
                agent=ended_on or started_on,
                waiting_for=waiting or None,
                error=self._error_text(error),
                created_at=time_of(created),
                updated_at=time_of(updated),
                forked_from=forked,
                parent=parent,
                usage=tally.total if tally else None,
                usage_by_agent=dict(tally.by_agent) if tally else {},
                encrypted=locked,
            )
        return found

    def _deserialized(self, stored: str | None) -> Any:
        if not stored:
            return None
        try:
            return self._serializer.deserialize(stored)
        except (ValueError, TypeError):
            return None

    def _error_text(self, stored: str | None) -> str | None:
        """A stored error as `get_run` shows it (its text); a payload this library cannot read
        is shown as stored."""
        if not stored:
            return None
        try:
            error = self._serializer.deserialize(stored)
        except (ValueError, TypeError):
            return stored
        except EncryptionKeyError as e:
            return str(e)
        if isinstance(error, EncryptionKeyError) and error.key_id:
            return encrypted_text(error.key_id)
        return None if error is None else str(error)

    def usage_totals(self, run_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Each run's model calls and tokens so far, like `model_usage`, but summed by the
        database (the model calls' outputs are not read here)."""
        usage = {run_id: {"model_calls": 0, "tokens": 0} for run_id in run_ids}
        if not run_ids:
            return usage
        op = self._tables.operation_outputs
        tokens = sa.cast(
            self._json_text(op.c.output, "value", "usage", "total_tokens"), sa.BigInteger
        )
        query = (
            sa.select(op.c.workflow_uuid, sa.func.count(), sa.func.sum(tokens))
            .where(op.c.workflow_uuid.in_(list(run_ids)), op.c.function_name.like(MESSAGE_STEPS[0]))
            .group_by(op.c.workflow_uuid)
        )
        with self._engine.connect() as conn:
            for run_id, n, total in conn.execute(query):
                usage[run_id] = {"model_calls": int(n), "tokens": int(total or 0)}
        return usage
