"""Retention on SQLite and PostgreSQL: a policy deletes exactly the finished runs past their age
(by finish time), with their sub-agent runs and every row kept for them (steps, stream, events,
messages, decisions, notices), while runs in flight are kept whatever their age; a dry run
deletes nothing and reports what would go; the background sweeper applies a swarm's policy, one
process of the database at a time; bad policies give clear errors.

Ages are counted to an injected `now` (tests move time forward instead of waiting), except
where the point is the real clock (a run finishing while the sweep runs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS

from _support.db import use_database
from durable_swarm import Agent, DurableSwarm, DurableSwarmError, RunNotFoundError, ask_user
from durable_swarm.durable import Retention
from durable_swarm.durable._decisions import DECISIONS_TABLE
from durable_swarm.durable._retention import RetentionReport, expire
from durable_swarm.durable._sweeper import RetentionLedger, Sweeper
from durable_swarm.durable._tables import RUN_TABLES, engine_for, missing_table
from durable_swarm.durable._waits import WAITS_TABLE, WaitBook
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import tool

POLICY = {"succeeded": "30d", "failed": "90d", "cancelled": "7d"}
GATE = threading.Event()  # holds the `hold` tool until a test opens it
FLAKED: list[bool] = []


def hold() -> str:
    """Wait for the test to let the run go on."""
    assert GATE.wait(120), "the test never opened the gate"
    return "held"


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount (a person approves it first)."""
    return f"paid {amount}"


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    content = str(last.get("content"))
    if last["role"] == "tool":
        return text(f"after: {content}")
    if content == "find it":  # the sub-agent's task
        return text("found")
    command = content.split()[0]
    if command == "boom":
        raise ValueError("the model broke")
    if command == "flaky":  # fails once, then (resumed) waits for the gate
        if not FLAKED:
            FLAKED.append(True)
            raise ValueError("the model broke")
        assert GATE.wait(120), "the test never opened the gate"
    step = {
        "ask": ToolCall("ask_user", {"question": "Name?"}),
        "hold": ToolCall("hold"),
        "pay": ToolCall("pay", {"amount": 3}),
        "delegate": ToolCall("delegate_to_retention-helper", {"task": "find it"}),
    }.get(command)
    return calls(step) if step else text(f"ok: {content}")


HELPER = Agent(name="retention-helper")
AGENT = Agent(name="retention-agent", functions=[ask_user, hold, pay, HELPER.as_tool()])


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


@pytest.fixture
def swarm(make_database_url: Callable[[str], str], run_id: str) -> Iterator[DurableSwarm]:
    """A swarm on a database of its own (a sweep sees every run of its database)."""
    url = make_database_url(f"ret{run_id[-8:]}")
    use_database(url)
    GATE.clear()
    yield DurableSwarm(ScriptedClient(_script), database_url=url, model_retries=0)
    GATE.set()


def _wait(swarm: DurableSwarm, run_id: str, status: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while swarm.get_run(run_id).status != status:
        assert time.monotonic() < deadline, f"run {run_id} never became {status}"
        time.sleep(0.02)


def _finish(swarm: DurableSwarm, run_id: str, content: str) -> None:
    if content.startswith("boom"):
        with pytest.raises(Exception, match="the model broke"):
            swarm.run(AGENT, user(content), run_id=run_id)
    else:
        swarm.run(AGENT, user(content), run_id=run_id)


def _ids(swarm: DurableSwarm) -> set[str]:
    return {r.run_id for r in swarm.list_runs(limit=None)}


def _later(days: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(days=days)


@pytest.fixture
def mixed(swarm: DurableSwarm) -> Iterator[tuple[DurableSwarm, dict[str, str]]]:
    """Runs of every kind: two succeeded (one with a sub-agent run), failed, cancelled, one
    waiting for input, one waiting for approval, and one in flight inside a tool."""
    runs = {"ok": "ok one", "parent": "delegate", "failed": "boom", "ask": "ask", "pay": "pay"}
    for name in ("ok", "parent", "failed"):
        _finish(swarm, name, runs[name])
    swarm.start(AGENT, user("ask"), run_id="ask")
    swarm.start(AGENT, user("ask"), run_id="cancelled")
    swarm.start(AGENT, user("pay"), run_id="pay")
    swarm.start(AGENT, user("hold"), run_id="busy")
    _wait(swarm, "cancelled", "waiting_for_input")
    swarm.cancel("cancelled")
    for run_id, status in (("ask", "waiting_for_input"), ("pay", "waiting_for_approval")):
        _wait(swarm, run_id, status)
    _wait(swarm, "cancelled", "cancelled")
    # A run cancelled as it reached its wait may still be finishing its park (its wait live
    # for a moment, which retention rightly leaves alone): wait until it has ended.
    deadline = time.monotonic() + 60
    while "cancelled" in WaitBook(swarm.database_url).live_run_ids():
        assert time.monotonic() < deadline, "the cancelled run never left its wait"
        time.sleep(0.02)
    yield swarm, runs


def test_a_policy_deletes_exactly_the_finished_runs_past_their_age(mixed: Any) -> None:
    swarm, _ = mixed
    assert _ids(swarm) == {
        "ok", "parent", "parent-sub1", "failed", "ask", "cancelled", "pay", "busy",
    }  # fmt: skip
    # 8 days on: only the cancelled run is past its age (7 days).
    report = swarm.apply_retention(POLICY, now=_later(8))
    assert [r.run_id for r in report.runs] == ["cancelled"]
    assert report.counts == {"succeeded": 0, "failed": 0, "cancelled": 1}
    # 31 days on: the succeeded runs too (the sub-agent run with its parent), not the failed.
    report = swarm.apply_retention(POLICY, now=_later(31))
    assert sorted(r.run_id for r in report.runs) == ["ok", "parent"]
    assert report.counts == {"succeeded": 3, "failed": 0, "cancelled": 0}
    assert next(r for r in report.runs if r.run_id == "parent").sub_runs == {
        "parent-sub1": "succeeded"
    }
    assert _ids(swarm) == {"failed", "ask", "pay", "busy"}
    # A year on: the failed run goes; runs in flight stay, whatever their age.
    report = swarm.apply_retention(POLICY, now=_later(365))
    assert [r.run_id for r in report.runs] == ["failed"]
    assert _ids(swarm) == {"ask", "pay", "busy"}
    assert swarm.get_run("ask").status == "waiting_for_input"
    assert swarm.get_run("pay").status == "waiting_for_approval"
    assert swarm.get_run("busy").status == "pending"
    for run_id in ("ok", "parent", "parent-sub1", "failed", "cancelled"):
        with pytest.raises(RunNotFoundError):
            swarm.get_run(run_id)
    assert swarm.retention_status().deleted == {"succeeded": 3, "failed": 1, "cancelled": 1}
    # The runs kept go on as usual.
    swarm.send_input("ask", "Ada")
    GATE.set()
    _wait(swarm, "ask", "succeeded")
    _wait(swarm, "busy", "succeeded")


def test_a_status_left_out_is_kept_for_good(mixed: Any) -> None:
    swarm, _ = mixed
    report = swarm.apply_retention({"cancelled": "1h"}, now=_later(3650))
    assert [r.run_id for r in report.runs] == ["cancelled"]
    assert {"ok", "parent", "parent-sub1", "failed"} <= _ids(swarm)


def test_a_dry_run_deletes_nothing_and_reports_what_would_go(mixed: Any) -> None:
    swarm, _ = mixed
    before = _ids(swarm)
    report = swarm.apply_retention(POLICY, now=_later(365), dry_run=True)
    assert report.dry_run
    assert _ids(swarm) == before
    assert report.counts == {"succeeded": 3, "failed": 1, "cancelled": 1}
    assert sorted(r.run_id for r in report.runs) == ["cancelled", "failed", "ok", "parent"]
    finished = {r.run_id: swarm.get_run(r.run_id).updated_at for r in report.runs}
    oldest, newest = report.span("succeeded")
    assert oldest is not None and newest is not None and oldest <= newest
    assert abs((oldest - finished["ok"]).total_seconds()) < 1.5  # "ok" finished first
    assert abs((newest - finished["parent"]).total_seconds()) < 1.5
    data = report.to_json()
    assert data["statuses"]["failed"]["runs"] == 1 and data["deleted"] == 5
    assert swarm.retention_status().deleted == {"succeeded": 0, "failed": 0, "cancelled": 0}
    # Nothing is past its age yet today.
    assert swarm.apply_retention(POLICY, dry_run=True).runs == []


def _rows(url: str, run_ids: list[str]) -> dict[str, int]:
    """Rows held for `run_ids` in DBOS's tables and this library's."""
    engine = engine_for(url)
    schema = "dbos." if engine.dialect.name == "postgresql" else ""
    dbos_tables = {
        "workflow_status": "workflow_uuid",
        "workflow_input": "workflow_uuid",
        "workflow_output": "workflow_uuid",
        "operation_outputs": "workflow_uuid",
        "workflow_events": "workflow_uuid",
        "workflow_events_history": "workflow_uuid",
        "streams": "workflow_uuid",
        "notifications": "destination_uuid",
    }
    tables = {f"{schema}{t}": c for t, c in dbos_tables.items()} | dict(RUN_TABLES)
    counts = {}
    for table, column in tables.items():
        query = sa.text(f"SELECT COUNT(*) FROM {table} WHERE {column} IN :ids").bindparams(
            sa.bindparam("ids", expanding=True)
        )
        try:
            with engine.connect() as conn:
                counts[table] = int(conn.execute(query, {"ids": run_ids}).scalar_one())
        except sa.exc.DBAPIError as e:  # one of ours not made yet (no run used it): no rows
            if not missing_table(e):
                raise
            counts[table] = 0
    return counts


def test_every_row_of_a_deleted_run_goes(swarm: DurableSwarm) -> None:
    assert {DECISIONS_TABLE, WAITS_TABLE} <= {t for t, _ in RUN_TABLES}
    list(swarm.run(AGENT, user("streamed"), run_id="streamed", stream=True))  # a stream
    swarm.run(AGENT, user("delegate"), run_id="parent")  # a sub-agent run
    swarm.start(AGENT, user("pay"), run_id="paid")  # a decision and a message
    _wait(swarm, "paid", "waiting_for_approval")
    call_id = swarm.get_run("paid").waiting_for["tool_call"]["id"]
    swarm.approve("paid", call_id, by="tester")
    _wait(swarm, "paid", "succeeded")
    swarm.run(AGENT, user("session"), run_id="sessioned", session="retention-test")
    swarm.start(AGENT, user("ask"), run_id="kept")
    _wait(swarm, "kept", "waiting_for_input")
    # (its status says it waits a moment before its wait's row is written: wait for the row)
    deadline = time.monotonic() + 60
    while _rows(swarm.database_url, ["kept"])[WAITS_TABLE] == 0:
        assert time.monotonic() < deadline, "the waiting run's row in the waits table"
        time.sleep(0.05)
    WaitBook(swarm.database_url).arrive("paid", "person:9", "input")  # a wait left behind
    ids = ["streamed", "parent", "parent-sub1", "paid", "sessioned"]
    before = _rows(swarm.database_url, ids)
    for table in ("operation_outputs", "streams", "workflow_events"):
        assert any(n for t, n in before.items() if t.endswith(table)), (table, before)
    # the waits table: paid's approval (done: the run went on with it) and the one left behind
    assert before[DECISIONS_TABLE] == 1 and before[WAITS_TABLE] == 2
    assert before["durable_swarm_session_runs"] == 1  # the session's record of its run
    kept_before = _rows(swarm.database_url, ["kept"])

    report = swarm.apply_retention({"succeeded": "1d"}, now=_later(2))
    assert report.counts["succeeded"] == 5
    assert _rows(swarm.database_url, ids) == dict.fromkeys(before, 0)
    assert _rows(swarm.database_url, ["kept"]) == kept_before  # the waiting run is whole


def test_delete_and_prune_take_a_runs_own_rows_too(swarm: DurableSwarm) -> None:
    for run_id in ("deleted", "pruned"):
        swarm.start(AGENT, user("pay"), run_id=run_id)
        _wait(swarm, run_id, "waiting_for_approval")
        swarm.reject(run_id, swarm.get_run(run_id).waiting_for["tool_call"]["id"], "no")
        _wait(swarm, run_id, "succeeded")
        WaitBook(swarm.database_url).arrive(run_id, "person:9", "input")  # left behind
    assert _rows(swarm.database_url, ["deleted", "pruned"])[DECISIONS_TABLE] == 2
    assert swarm.delete_run("deleted") == ["deleted"]
    assert [r.run_id for r in swarm.prune_runs(_later(1))] == ["pruned"]
    assert set(_rows(swarm.database_url, ["deleted", "pruned"]).values()) == {0}


def test_a_run_finishing_during_the_sweep_is_not_deleted_early(swarm: DurableSwarm) -> None:
    for n in range(3):
        swarm.run(AGENT, user(f"ok {n}"), run_id=f"old-{n}")
    swarm.start(AGENT, user("hold"), run_id="finishing")
    _wait(swarm, "finishing", "pending")
    time.sleep(1.1)  # finish times are whole seconds on SQLite under Python 3.11
    cutoff = datetime.now(timezone.utc)  # the old runs finished before it; "finishing" runs
    policy = Retention(succeeded="1h", batch_size=1)

    def first_batch_done(report: RetentionReport) -> None:
        if not GATE.is_set():  # "finishing" finishes between two batches of the sweep
            GATE.set()
            _wait(swarm, "finishing", "succeeded")

    report = expire(
        DBOS, swarm.database_url, policy, now=cutoff + timedelta(hours=1), on_batch=first_batch_done
    )
    assert sorted(r.run_id for r in report.runs) == ["old-0", "old-1", "old-2"]
    assert _ids(swarm) == {"finishing"}  # past the cutoff: not an hour old yet


def test_a_run_resumed_while_the_sweep_looks_is_kept(swarm: DurableSwarm) -> None:
    FLAKED.clear()
    with pytest.raises(Exception, match="the model broke"):
        swarm.run(AGENT, user("flaky"), run_id="failed")
    policy = Retention(failed="1h")
    original = swarm.runs.source.list_workflows
    resumed: list[str] = []

    def list_then_resume(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        if kwargs.get("workflow_ids") == ["failed"] and not resumed:
            # Between listing the batch and deleting it, someone resumes the run.
            swarm.resume("failed")
            resumed.append("failed")
            found = original(*args, **kwargs)
        return found

    class Source:
        def __getattr__(self, name: str) -> Any:
            return list_then_resume if name == "list_workflows" else getattr(DBOS, name)

    report = expire(Source(), swarm.database_url, policy, now=_later(1))
    assert resumed == ["failed"]
    assert report.runs == [] and report.kept == ["failed"]
    assert swarm.get_run("failed").status == "pending"  # in flight again, and whole
    GATE.set()
    _wait(swarm, "failed", "succeeded")


def test_the_background_sweeper_applies_the_swarms_policy(
    swarm: DurableSwarm, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(3):
        swarm.run(AGENT, user(f"ok {n}"), run_id=f"done-{n}")
    swarm.start(AGENT, user("ask"), run_id="waiting")
    _wait(swarm, "waiting", "waiting_for_input")
    clock = [datetime.now(timezone.utc)]
    policy = Retention(succeeded="1d", batch_size=2, interval=0.1)
    sweeper = Sweeper(DBOS, swarm.database_url, policy, "test-sweeper", clock=lambda: clock[0])
    caplog.set_level("INFO", logger="durable_swarm.retention")
    sweeper.start()
    try:
        time.sleep(0.5)  # a few sweeps: nothing is a day old
        assert _ids(swarm) == {"done-0", "done-1", "done-2", "waiting"}
        clock[0] += timedelta(days=2)
        deadline = time.monotonic() + 30
        while _ids(swarm) != {"waiting"}:
            assert time.monotonic() < deadline, _ids(swarm)
            time.sleep(0.05)
        ledger = RetentionLedger(swarm.database_url)
        (record,) = ledger.sweepers()
        assert record.executor_id == "test-sweeper" and record.policy == policy.to_text()
        assert ledger.deleted()["succeeded"] == 3
        batches = [r.getMessage() for r in caplog.records if "retention: deleted" in r.getMessage()]
        assert batches[0].startswith("retention: deleted 2 finished runs") and len(batches) == 2
    finally:
        sweeper.stop()
    assert RetentionLedger(swarm.database_url).sweepers() == []  # a stopped sweeper says so


def test_one_process_of_a_database_sweeps_at_a_time(swarm: DurableSwarm) -> None:
    ledger = RetentionLedger(swarm.database_url)
    assert ledger.take_lease("a", 30)
    assert not ledger.take_lease("b", 30)
    assert ledger.take_lease("a", 30)  # renewed by its holder
    ledger.drop_lease("a")
    assert ledger.take_lease("b", 0.05)
    time.sleep(0.1)
    assert ledger.take_lease("a", 30)  # b's lease ran out (b died)
    swarm.run(AGENT, user("ok"), run_id="done")
    policy = Retention(succeeded="1s")
    other = Sweeper(DBOS, swarm.database_url, policy, "b", clock=lambda: _later(1))
    assert other.sweep() is None  # "a" holds the lease: "b" deletes nothing
    assert _ids(swarm) == {"done"}
    ledger.drop_lease("a")
    assert other.sweep() is not None and _ids(swarm) == set()


def test_a_swarm_with_a_policy_sweeps_once_launched(swarm: DurableSwarm) -> None:
    swarm.run(AGENT, user("ok"), run_id="done")
    time.sleep(1.2)  # older than 1 s by the real clock
    DurableSwarm(database_url=swarm.database_url, retention="succeeded=1s,interval=0.2s").launch()
    deadline = time.monotonic() + 30
    while _ids(swarm):
        assert time.monotonic() < deadline, "the swarm's sweeper never deleted the run"
        time.sleep(0.05)
    (record,) = swarm.retention_status().sweepers
    assert record.policy == "succeeded=1s,batch_size=100,interval=0.2s"


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"succeeded": "30 days"}, "Retention 'succeeded': '30 days' is not a duration; write a "
         'number and a unit: s, m, h, d or w (e.g. "90m", "12h", "30d", "2w"), above zero.'),
        ({"failed": "0d"}, "Retention 'failed': '0d' is not a duration"),
        ({"failed": 30}, "Retention 'failed': 30 is not a duration"),
        ({"succeded": "30d"}, "Retention 'succeded' is not a key of a policy; use succeeded, "
         "failed, cancelled, batch_size, interval."),
        ({"pending": "1d"}, "Retention 'pending': runs in flight (pending, waiting for a person) "
         "are never deleted"),
        ({"waiting_for_input": "1d"}, "Retention 'waiting_for_input': runs in flight"),
        ({"batch_size": "0"}, "Retention 'batch_size': '0' is not a whole number of runs"),
        ({"interval": "soon"}, "Retention 'interval': 'soon' is not a duration"),
        ("succeeded:30d", "Retention 'succeeded:30d' is not KEY=VALUE"),
        (["succeeded"], "retention must be a Retention, a dict"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_a_clear_error(policy: Any, message: str) -> None:
    with pytest.raises(DurableSwarmError) as raised:
        Retention.of(policy)
    assert str(raised.value).startswith(message), str(raised.value)


def test_durations_and_the_policy_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = Retention.of("succeeded=30d, failed=2w ,cancelled=12h,batch_size=5,interval=90m")
    assert policy == Retention(
        succeeded=timedelta(days=30), failed="14d", cancelled="720m", batch_size=5, interval=5400
    )
    assert policy.to_text() == "succeeded=30d,failed=2w,cancelled=12h,batch_size=5,interval=5400s"
    assert Retention.of(policy.to_text()) == policy
    assert Retention(succeeded="45s", failed="never").ages == {"succeeded": timedelta(seconds=45)}
    assert "keeps failed, cancelled runs for good" in Retention(succeeded="1d").describe()
    monkeypatch.setenv("DURABLE_SWARM_RETENTION", "failed=3x")
    with pytest.raises(DurableSwarmError, match=r"^DURABLE_SWARM_RETENTION: Retention 'failed'"):
        Retention.from_env()
    monkeypatch.setenv("DURABLE_SWARM_RETENTION", "failed=3d")
    assert DurableSwarm(database_url="unused.sqlite").retention == Retention(failed="3d")
    assert DurableSwarm(database_url="unused.sqlite", retention={"cancelled": "1h"}).retention == (
        Retention(cancelled="1h")
    )
