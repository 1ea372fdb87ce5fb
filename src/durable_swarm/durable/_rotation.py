"""Key rotation: re-seal the stored payloads of runs with the current first key.

`rotate` walks every table that holds a run's payloads (and the sessions' conversations), in
batches of `batch_size` rows (one transaction each), and writes each payload again sealed with
the first key of the keyring:
those sealed with an older key, and those written before a key was set (plain JSON). It is
safe while workers run and resumable: each row is rewritten only if it still holds the text
that was read (a compare-and-set; a row changed meanwhile is left to the next pass), and a row
already sealed with the first key is never read again, so running it again after a stop goes on
where it stopped. Payloads sealed with a key this process has not got are counted and left
alone.

Most of these tables are DBOS's: DBOS has no public call to rewrite a stored payload, so
`_rewrite_dbos_payloads` is this library's one write to them (the column list of DBOS 3.4's
system database in `DBOS_PAYLOAD_COLUMNS`, checked by a contract test that names what changed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ..errors import DurableSwarmError, EncryptionKeyError
from ._decisions import DecisionLog
from ._engine import SystemTables
from ._log import WORKFLOW_NAME, JsonSerializer
from ._sealing import MARKER, SealedValue, keyring
from ._sessions import SESSIONS_TABLE, SessionStore

__all__ = ["DBOS_PAYLOAD_COLUMNS", "RotationReport", "rotate"]

# DBOS's tables that hold payloads written by the serializer: the table, its key columns,
# the column naming the run, and the payload columns.
DBOS_PAYLOAD_COLUMNS: tuple[tuple[str, tuple[str, ...], str, tuple[str, ...]], ...] = (
    ("workflow_status", ("workflow_uuid",), "workflow_uuid", ("inputs", "output", "error")),
    ("workflow_input", ("workflow_uuid",), "workflow_uuid", ("inputs",)),
    ("workflow_output", ("workflow_uuid",), "workflow_uuid", ("output", "error")),
    (
        "operation_outputs",
        ("workflow_uuid", "function_id"),
        "workflow_uuid",
        ("output", "error"),
    ),
    ("notifications", ("message_uuid",), "destination_uuid", ("message",)),
    ("workflow_events", ("workflow_uuid", "key"), "workflow_uuid", ("value",)),
    (
        "workflow_events_history",
        ("workflow_uuid", "key", "function_id"),
        "workflow_uuid",
        ("value",),
    ),
    ("streams", ("workflow_uuid", "key", "offset"), "workflow_uuid", ("value",)),
)
DEFAULT_BATCH = 500
# A payload of no content: nothing to seal.
_EMPTY = ('{"schema_version": 3, "value": null}',)


@dataclass
class RotationReport:
    """What `rotate` did: payloads re-sealed with the first key (`resealed`), left alone because
    they changed while being read (`changed`, taken by the next pass) or because this process
    has not got their key (`missing_keys`: key id -> how many)."""

    key_id: str
    resealed: int = 0
    changed: int = 0
    missing_keys: dict[str, int] = field(default_factory=dict)
    by_table: dict[str, int] = field(default_factory=dict)


def rotate(
    tables: SystemTables,
    database_url: str,
    *,
    batch_size: int = DEFAULT_BATCH,
    say: Callable[[str], None] | None = None,
) -> RotationReport:
    """Re-seal every stored payload of this library's runs with the first key of this
    process's keyring (see the module docstring); `say` hears a line per batch written.

    Raises:
        DurableSwarmError: no key is set, or `batch_size` is not positive.
        EncryptionKeyError: a payload's key id is here but does not open it (wrong key, or
            changed bytes): nothing of that batch is written.
    """
    ring = keyring()
    if ring is None:
        raise DurableSwarmError(
            "No encryption key is set: set DURABLE_SWARM_ENCRYPTION_KEY to the new key list "
            "(the new key first, the old ones after it) and run the rotation again."
        )
    if batch_size < 1:
        raise DurableSwarmError(f"The batch size must be at least 1 (got {batch_size}).")
    report = RotationReport(ring.primary)
    serializer = JsonSerializer()
    current = f'%"sealed": "{MARKER}.{ring.primary}.%'

    def reseal(table: str, run_id: str, text: str) -> str | None:
        try:
            value = serializer.deserialize(text)
        except EncryptionKeyError as e:
            raise EncryptionKeyError(e.reason, key_id=e.key_id, run_id=run_id) from None
        except ValueError:
            return None  # not this library's payload
        locked = value if isinstance(value, SealedValue) else None
        if isinstance(value, EncryptionKeyError) and value.key_id:
            locked = SealedValue({}, value.key_id)
        if locked is not None:
            report.missing_keys[locked.key_id] = report.missing_keys.get(locked.key_id, 0) + 1
            return None
        if value is None:
            return None
        return serializer.serialize(value)

    def done(table: str, written: int, changed: int) -> None:
        report.resealed += written
        report.changed += changed
        report.by_table[table] = report.by_table.get(table, 0) + written
        if say is not None and written:
            say(f"{table}: {written} payloads re-sealed with key {ring.primary!r}")

    _rewrite_dbos_payloads(tables, batch_size, current, reseal, done)
    written, missing = DecisionLog(database_url).reseal(batch_size)
    done(DecisionLog.TABLE, written, 0)
    for key_id, n in missing.items():
        report.missing_keys[key_id] = report.missing_keys.get(key_id, 0) + n
    written, missing = SessionStore(database_url, lambda run_id: None).reseal(batch_size)
    done(SESSIONS_TABLE, written, 0)
    for key_id, n in missing.items():
        report.missing_keys[key_id] = report.missing_keys.get(key_id, 0) + n
    return report


def _rewrite_dbos_payloads(
    system: SystemTables,
    batch_size: int,
    current: str,
    reseal: Callable[[str, str, str], str | None],
    done: Callable[[str, int, int], None],
) -> None:
    """The private touch: rewrite payload columns of DBOS's tables (`DBOS_PAYLOAD_COLUMNS`) of
    this library's runs, in key order, a batch per transaction, each row only if it still holds
    what was read. `current` is a LIKE pattern of a payload that needs nothing; `reseal(table,
    run_id, text)` gives the new text (None: leave it)."""
    tables = system.tables
    status = tables.workflow_status
    ours = sa.select(status.c.workflow_uuid).where(status.c.name == WORKFLOW_NAME)
    for name, keys, run_column, columns in DBOS_PAYLOAD_COLUMNS:
        table = getattr(tables, name, None)
        if table is None:
            continue
        for column_name in columns:
            column = table.c[column_name]
            key_columns = [table.c[k] for k in keys]
            last: tuple[Any, ...] | None = None
            while True:
                query = (
                    sa.select(*key_columns, table.c[run_column], column)
                    .where(
                        table.c[run_column].in_(ours),
                        column.is_not(None),
                        column.not_like(current),
                        column.not_in(_EMPTY),
                    )
                    .order_by(*key_columns)
                    .limit(batch_size)
                )
                if last is not None:
                    query = query.where(sa.tuple_(*key_columns) > sa.tuple_(*last))
                with system.engine.begin() as conn:
                    rows = conn.execute(query).all()
                    written = changed = 0
                    for row in rows:
                        *key, run_id, text = row
                        new = reseal(name, run_id, text)
                        if new is None:
                            continue
                        match = [c == v for c, v in zip(key_columns, key, strict=True)]
                        update = (
                            sa.update(table)
                            .where(*match, column == text)
                            .values({column_name: new})
                        )
                        if conn.execute(update).rowcount:
                            written += 1
                        else:
                            changed += 1
                done(name, written, changed)
                if len(rows) < batch_size:
                    break
                last = tuple(rows[-1][: len(keys)])
