"""Contract tests of the private DBOS reaches left in `durable/_engine.py` (issue 32).

Each reach is one DBOS has no public call for (see `_engine`'s docstring). A DBOS release that
moves one of them fails here, with a message that names what changed in DBOS and what in
`_engine.py` depends on it, before a user meets it at run time. On SQLite and PostgreSQL for
the reaches that read a launched instance or its database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import dbos
import dbos._core as dbos_core
import dbos._dbos as dbos_internals
import dbos._queue as dbos_queue
from dbos import DBOS, Queue

from durable_swarm.durable import _engine


def _params(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


# -- reaches that need no launched DBOS ---------------------------------------------------------


def test_contract_dbos_module_instance_and_launch_recovery() -> None:
    assert hasattr(dbos_internals, "_dbos_global_instance"), (
        "dbos._dbos no longer has `_dbos_global_instance`: update `_engine.instance`"
    )
    recovery = getattr(dbos_internals, "startup_recovery_thread", None)
    assert callable(recovery), (
        "dbos._dbos no longer has `startup_recovery_thread`: `_engine.batched_launch_recovery` "
        "falls back to DBOS's own recovery; drop or update it"
    )
    assert _params(recovery)[:2] == ["dbos", "pending_workflows"], (
        f"DBOS's startup_recovery_thread takes {_params(recovery)}, not (dbos, "
        "pending_workflows): update `_engine.batched_launch_recovery`"
    )
    assert "startup_recovery_thread" in inspect.getsource(DBOS._launch), (
        "DBOS's launch no longer submits `startup_recovery_thread`: the batched launch "
        "recovery of `_engine.batched_launch_recovery` would never run"
    )
    assert callable(getattr(DBOS, "_recover_pending_workflows", None)), (
        "DBOS has no `_recover_pending_workflows` any more: update `_engine.recover_runs_of`"
    )


def test_contract_public_names_replacing_private_ones() -> None:
    # GlobalParams, dbos._error and dbos._serialization were replaced by these public names.
    assert isinstance(DBOS.executor_id, str) and isinstance(DBOS.application_version, str)
    for name in (
        "DBOSBaseException",
        "DBOSWorkflowCancelledError",
        "DBOSWorkflowConflictIDError",
        "DBOSAwaitedWorkflowCancelledError",
        "DBOSMaxStepRetriesExceeded",
    ):
        assert hasattr(dbos.error, name), f"dbos.error no longer exports {name}: update _engine"
    assert "Serializer" in dbos.__all__, "dbos no longer exports Serializer: update _engine"


def test_contract_execution_token_and_internal_queue() -> None:
    from dbos._context import current_owner_xid
    from dbos._utils import INTERNAL_QUEUE_NAME

    assert _params(current_owner_xid)[0] == "workflow_id", (
        "DBOS's current_owner_xid changed its signature: update `_engine.execution_token`"
    )
    assert isinstance(INTERNAL_QUEUE_NAME, str) and INTERNAL_QUEUE_NAME, (
        "dbos._utils.INTERNAL_QUEUE_NAME is gone: update `_engine.recovery_queue`"
    )


def test_contract_queue_limits_are_kept_where_the_engine_reads_them() -> None:
    source = inspect.getsource(Queue.__init__)
    for field in ("_worker_concurrency", *_engine._SHARED_LIMITS):
        assert f"self.{field}" in source, (
            f"DBOS's Queue no longer keeps `{field}`: update `_engine.worker_concurrency` and "
            "`_engine._SHARED_LIMITS` (the ownership gate and the wake-ups read them)"
        )


def test_contract_the_queue_thread_the_wakeups_replace() -> None:
    thread = getattr(dbos_queue, "queue_worker_thread", None)
    assert callable(thread), (
        "dbos._queue.queue_worker_thread is gone: the wake-ups (`_engine.install_wakeups`) "
        "cannot be installed; `wakeups_supported()` must say False"
    )
    assert _params(thread) == ["stop_event", "dbos", "queue"], (
        f"DBOS's queue_worker_thread takes {_params(thread)}: update `_engine`'s replacement"
    )
    # The waker stands in for the stop event: it offers is_set, wait and set only.
    body = inspect.getsource(thread)
    used = {m for m in ("is_set", "wait", "set", "clear") if f"stop_event.{m}(" in body}
    assert used <= {"is_set", "wait"}, (
        f"DBOS's queue thread now calls stop_event.{sorted(used)}: `_wakeup._Waker` lacks it"
    )
    assert "start_queued_workflows" in inspect.getsource(dbos_queue), (
        "DBOS's queue thread no longer claims through start_queued_workflows: the ownership "
        "gate (`_engine.gate_queues`) would not see its claims"
    )


def test_contract_the_active_run_set_the_wakeups_extend() -> None:
    assert _engine.wakeups_supported(), (
        f"DBOS {_engine.dbos_version()}: its active-run set (`dbos._core.ActiveWorkflowById`) "
        "or queue thread differ from what `_engine._active_runs` extends; update it (and "
        "`_wakeup.SUPPORTED_DBOS`) before taking this DBOS, or workers only poll"
    )
    for name in ("ActiveWorkflowById", "ActiveWorkflowEntry"):
        assert inspect.isclass(getattr(dbos_core, name, None)), f"dbos._core.{name} is gone"
    entry_init = _params(dbos_core.ActiveWorkflowEntry.__init__)
    assert entry_init == ["self", "active", "key", "bucket"], (
        f"DBOS's ActiveWorkflowEntry takes {entry_init}: update `_engine._active_runs`"
    )
    add = _params(dbos_core.ActiveWorkflowById.add)
    assert add == ["self", "key", "queue_name", "queue_partition_key"], (
        f"DBOS's ActiveWorkflowById.add takes {add}: update `_engine._active_runs`"
    )
    # An execution leaves the set only through its entry's release (which `_active_runs`
    # overrides to count it out), never by DBOS removing the key behind the entry's back.
    core_source = inspect.getsource(dbos_core)
    assert core_source.count("._remove(") == 1 and "entry.release()" in core_source, (
        "DBOS's _core removes active runs other than through ActiveWorkflowEntry.release: "
        "`_engine._active_runs` would miss a run leaving (a slot never freed); update it"
    )


def test_contract_the_claims_the_ownership_gate_wraps() -> None:
    from dbos._sys_db import SystemDatabase

    plain = _params(SystemDatabase.start_queued_workflows)
    assert plain[:6] == [
        "self",
        "queue",
        "executor_id",
        "app_version",
        "queue_partition_key",
        "local_running_count",
    ], f"DBOS's start_queued_workflows takes {plain}: update `_engine.gate_queues`"
    partitioned = _params(SystemDatabase.start_queued_partitioned_workflows)
    assert partitioned[:5] == ["self", "queue", "executor_id", "app_version", "max_tasks"], (
        f"DBOS's start_queued_partitioned_workflows takes {partitioned}: update "
        "`_engine.gate_queues`"
    )
    reenqueue = _params(SystemDatabase.reenqueue_for_recovery)
    assert reenqueue[:2] == ["self", "workflow_id"], (
        f"DBOS's reenqueue_for_recovery takes {reenqueue}: update `_engine.reenqueue_run`"
    )


def test_contract_dbos_code_lives_where_the_engine_says() -> None:
    # `_workflow._from_dbos` tells DBOS's own database calls by the frame's file.
    from dbos._sys_db import SystemDatabase

    assert inspect.getfile(SystemDatabase).startswith(_engine.DBOS_DIR), (
        "DBOS's system database code is not under `_engine.DBOS_DIR`: update it"
    )


def test_contract_the_client_keeps_its_system_database() -> None:
    assert "self._sys_db" in inspect.getsource(dbos.DBOSClient.__init__), (
        "DBOSClient no longer keeps `_sys_db`: update `_engine.client_system_database`"
    )


# -- reaches on a launched DBOS and its database (SQLite and PostgreSQL) ------------------------


def test_contract_a_launched_instance(durable_swarm_factory: Any) -> None:
    durable_swarm_factory()  # DBOS launched here on this module's database
    inst = _engine.instance()
    assert inst is not None and _engine.is_launched(), (
        "DBOS's `_dbos_global_instance` or its `_launched` flag moved: update `_engine.instance` "
        "and `_engine.is_launched`"
    )
    for field in ("_sys_db", "_active_workflows_set", "_background_event_loop", "_serializer"):
        assert hasattr(inst, field), f"a launched DBOS has no `{field}`: update `_engine`"
    assert isinstance(inst.background_thread_stop_events, list), (
        "DBOS's `background_thread_stop_events` is gone: the wake-ups' wakers are not stopped"
    )
    assert callable(getattr(inst._background_event_loop, "submit_coroutine", None)), (
        "DBOS's background loop has no `submit_coroutine`: update `_engine.on_dbos_loop`"
    )
    assert isinstance(_engine.active_run_ids(), list)
    assert _engine.wakeups_of() is not None, "the wake-ups were not installed on this DBOS"
    sys_db = _engine.system_database()
    assert _engine.batched_recovery(sys_db), (
        "DBOS's system database lacks what `_engine._reenqueue` uses (tables, engine, app_name, "
        "_now_ms_sql, _name_filter, sharded): update it or drop the batched recovery"
    )
    assert _engine.notification_poll_interval(sys_db, default=-1.0) > 0, (
        "DBOS's `_notification_listener_polling_interval_sec` is gone: the wait watcher polls "
        "at its default"
    )


def test_contract_the_columns_the_engine_reads_and_writes(durable_swarm_factory: Any) -> None:
    durable_swarm_factory()
    runs = _engine.system_database().tables.workflow_status
    used = (
        "workflow_uuid",
        "status",
        "executor_id",
        "owner_xid",
        "queue_name",
        "started_at_epoch_ms",
        "updated_at",
        "application_version",
        "application_name",
    )
    missing = [c for c in used if c not in runs.c]
    assert not missing, (
        f"DBOS's workflow_status has no column {missing}: update `_engine._reenqueue` and "
        "`_engine.owner_of`"
    )
    assert _engine.run_status("no-such-run") is None
    assert _engine.owner_of("no-such-run") is None
