"""What the sweep of parked waits reads (SQLite and PostgreSQL): runs parked for people, however
many, never crowd a `missing` or `limit` wait out of the rows one sweep reads."""

from __future__ import annotations

import uuid
from typing import Any

from durable_swarm.durable._waits import WAITS_TABLE, WaitBook, person_key


def test_many_runs_parked_for_people_leave_room_for_a_missing_wait(
    durable_swarm_factory: Any,
) -> None:
    waits: WaitBook = durable_swarm_factory().runs.waits
    prefix = f"sweep-{uuid.uuid4().hex[:8]}"
    for i in range(30):  # parked for a person, no answer: only an answer moves them
        run_id = f"{prefix}-person-{i}"
        waits.arrive(run_id, person_key(1), "input")
        assert waits.begin_park(run_id, person_key(1), "input", None)
        assert waits.park(run_id, person_key(1))
    answered = f"{prefix}-answered"  # answered, but its resumer died: the sweep's to resume
    waits.arrive(answered, person_key(1), "input")
    assert waits.begin_park(answered, person_key(1), "input", None)
    assert waits.park(answered, person_key(1))
    assert waits.answer(answered, person_key(1), "input", {"text": "Ada"}) is not None
    missing = f"{prefix}-missing"
    waits.arrive(missing, "missing", "missing", {"agent": "Nobody"})
    assert waits.begin_park(missing, "missing", "missing", None)
    assert waits.park(missing, "missing")
    # every row of this test old enough for the sweep
    waits._write(  # the test ages its own rows
        f"UPDATE {WAITS_TABLE} SET updated_at = updated_at - 3600000 WHERE run_id LIKE :p",
        p=f"{prefix}-%",
    )
    found = [w for w in waits.stale(2.0, 60.0, limit=5) if w.run_id.startswith(prefix)]
    ids = [w.run_id for w in found]
    assert ids[0] == missing, ids  # missing and limit waits first
    assert answered in ids, ids  # a wait the sweep may have to resume
    assert not [i for i in ids if "-person-" in i], ids  # none that only an answer moves
