"""Contract tests of DBOS: the private reaches left in `durable/_engine.py`, and the behaviours of
DBOS's public API the library's design stands on (issue 32).

Each private reach is one DBOS has no public call for (see `_engine`'s docstring); each public
behaviour is one DBOS documents (in its docstrings and errors) but a release could change. A
DBOS release that changes one fails here, with a message that names what changed in DBOS and
what in the library depends on it, before a user meets it at run time. On SQLite and PostgreSQL
for those that need a launched DBOS and its database.
"""

from __future__ import annotations

import contextlib
import inspect
import uuid
from typing import Any

import dbos
from dbos import DBOS, SetWorkflowID

from durable_swarm.durable import _engine

# -- private reaches --------------------------------------------------------------------------


def test_contract_the_client_keeps_its_system_database() -> None:
    assert "self._sys_db" in inspect.getsource(dbos.DBOSClient.__init__), (
        "DBOSClient no longer keeps `_sys_db`: update `_engine.system_tables` (the "
        "thin client's listing and key rotation read DBOS's tables through it)"
    )


def test_contract_dbos_code_lives_where_the_engine_says() -> None:
    # `_workflow._from_dbos` tells DBOS's own database calls by the frame's file.
    assert inspect.getfile(DBOS).startswith(_engine.DBOS_DIR), (
        "DBOS's code is not under `_engine.DBOS_DIR`: update it"
    )


def test_contract_a_launched_instance(durable_swarm_factory: Any) -> None:
    durable_swarm_factory()  # DBOS launched here on this module's database
    inst = _engine.instance()
    assert inst is not None and _engine.is_launched(), (
        "DBOS's `_dbos_global_instance` or its `_launched` flag moved: update `_engine.instance` "
        "and `_engine.is_launched` (an app's own DBOS would not be found)"
    )
    tables = _engine.system_tables()
    assert tables.engine.url is not None and "workflow_status" in str(
        tables.tables.workflow_status
    ), "DBOS's `_sys_db` (its engine and tables) moved: update `_engine.system_tables`"
    assert _engine.instance_serializer() is not None, (
        "DBOS's `_serializer` moved: update `_engine.instance_serializer` (a key would refuse "
        "every app-owned DBOS)"
    )


# -- public behaviours the design stands on ---------------------------------------------------

CALLS: list[str] = []


def test_contract_a_step_preempted_by_cancellation_is_not_recorded(
    durable_swarm_factory: Any,
) -> None:
    """A parked wait is a step whose body raises `DBOSWorkflowCancelledError` after the run
    cancelled itself (`_parking.park`): DBOS must record nothing for it and run it again when
    the run is resumed, and `get_workflow_status` / `cancel_workflow` / `resume_workflow` made
    outside the run (`_engine.outside_run`) must be no steps of it."""
    durable_swarm_factory()
    CALLS.clear()
    run_id = f"contract-{uuid.uuid4().hex[:8]}"

    @DBOS.workflow(name=f"durable_swarm.contract.park.{run_id}")
    def parking() -> str:
        status = _engine.outside_run(DBOS.get_workflow_status, run_id)
        assert status is not None and status.status == "PENDING"

        def body() -> str:
            CALLS.append("body")
            if len(CALLS) == 1:
                _engine.outside_run(DBOS.cancel_workflow, run_id)
                raise _engine.DBOSWorkflowCancelledError("parked by the contract test")
            return "taken"

        return DBOS.run_step({"name": "contract:look"}, body)

    with SetWorkflowID(run_id):
        handle = DBOS.start_workflow(parking)
    with contextlib.suppress(_engine.DBOSAwaitedWorkflowCancelledError):
        handle.get_result()
    assert _engine.run_status(run_id) == "CANCELLED"
    steps = DBOS.list_workflow_steps(run_id)
    assert steps == [], (
        f"DBOS recorded {steps} for a step preempted by cancellation, or for a status read or "
        "cancel made outside the run: parked waits would not replay (see `_parking.park`)"
    )
    DBOS.resume_workflow(run_id)
    assert DBOS.retrieve_workflow(run_id).get_result() == "taken"
    assert [s["function_name"] for s in DBOS.list_workflow_steps(run_id)] == ["contract:look"]
    assert CALLS == ["body", "body"]


def test_contract_resume_puts_a_pending_or_cancelled_run_on_the_queue_given(
    durable_swarm_factory: Any,
) -> None:
    """Recovery of a dead process's runs and the resume of a parked run are
    `resume_workflows(ids, queue_name=...)` (`_dbos.recover_runs_of`, `_parking.resume`): it
    must set any run not finished to ENQUEUED on that queue."""
    durable_swarm_factory()
    run_id = f"contract-{uuid.uuid4().hex[:8]}"

    @DBOS.workflow(name=f"durable_swarm.contract.resume.{run_id}")
    def cancelled() -> None:
        _engine.outside_run(DBOS.cancel_workflow, run_id)
        raise _engine.DBOSWorkflowCancelledError("cancelled by the contract test")

    with SetWorkflowID(run_id):
        handle = DBOS.start_workflow(cancelled)
    with contextlib.suppress(_engine.DBOSAwaitedWorkflowCancelledError):
        handle.get_result()
    # a queue no process serves (none is registered under that name)
    DBOS.resume_workflows([run_id], queue_name="durable_swarm_contract_nobody")
    status = DBOS.get_workflow_status(run_id)
    assert status is not None and status.status == "ENQUEUED", status
    assert status.queue_name == "durable_swarm_contract_nobody", (
        "DBOS's resume_workflows no longer puts a run on the queue it is given: update "
        "`_dbos.recover_runs_of` and `_parking.resume`"
    )
    DBOS.cancel_workflow(run_id)


def test_contract_the_listing_queries_run_on_dbos_tables(durable_swarm_factory: Any) -> None:
    """`_listing.RunQuery` is SQL on DBOS's tables (through `_engine.system_tables`), for what
    DBOS's `list_workflows` cannot filter, count or search. Every one of its queries runs here
    on a database with one finished run of this library, so a DBOS release that renames a table
    or a column they read fails here, naming the query, instead of in a user's console."""
    from durable_swarm import Agent
    from durable_swarm.durable._listing import RunFilter
    from durable_swarm.testing import ScriptedClient

    swarm = durable_swarm_factory(ScriptedClient(["contract"]))
    run_id = f"contract-listing-{uuid.uuid4().hex[:8]}"
    agent = Agent(name="Contract")
    swarm.run(agent, [{"role": "user", "content": "find me"}], run_id=run_id)
    query = swarm.runs.query
    ids = [run_id]
    every: dict[str, Any] = {
        "run_ids": lambda: query.run_ids(RunFilter.of(agent="Contract", search="find")),
        "count": lambda: query.count(RunFilter.of(status="succeeded", search="find")),
        "parked": lambda: query.parked(ids),
        "waiting": lambda: query.waiting(ids),
        "model_usage": lambda: query.model_usage(ids),
        "status_counts": query.status_counts,
        "step_totals": query.step_totals,
        "token_totals": query.token_totals,
        "approvals": query.approvals,
        "marks": lambda: query.marks(ids),
        "summaries": lambda: query.summaries(ids),
        "usage_totals": lambda: query.usage_totals(ids),
    }
    results: dict[str, Any] = {}
    for name, call in every.items():
        try:
            results[name] = call()
        except Exception as e:  # a renamed table or column: SQLAlchemy's or the driver's error
            raise AssertionError(
                f"The listing's query `RunQuery.{name}` failed on DBOS {_engine.dbos_version()}'s "
                f"tables ({type(e).__name__}: {e}): DBOS changed a table or column it reads; "
                "update durable/_listing.py (and the column names in docs/architecture.md)"
            ) from e
    assert results["run_ids"] == [run_id], results["run_ids"]
    assert results["count"] == 1
    assert results["summaries"][run_id].agent == "Contract"
    assert results["model_usage"][run_id]["model_calls"] == 1
