"""`durable_swarm.errors`: every error pickles, and a failed run's error keeps its original type
name, message and run id when it is read from the database by another process."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest

import durable_swarm
from durable_swarm import Agent, errors

SAMPLES = [
    errors.DurableSwarmError("plain", run_id="r1"),
    errors.AgentNotFoundError("Triage", run_id="r2"),
    errors.SwarmNotFoundError("support", run_id="r2s", known=["default", "billing"]),
    errors.ModelResponseError("no choices", agent="Triage", run_id="r3"),
    errors.ModelCallError(
        run_id="r5",
        step=3,
        agent="Triage",
        model="tiny",
        base_url="http://127.0.0.1:1/v1",
        cause="APITimeoutError: Request timed out.",
        requests=4,
    ),
    errors.RunNotFoundError("r4"),
    errors.RunCancelledError("r4c"),
    errors.ToolResultNotSerializableError("stash", "a socket", run_id="r5"),
    errors.DatabaseUnavailableError("postgresql://h/db", "refused"),
    errors.RunError("the ledger is closed", error_type="builtins.LookupError", run_id="r6"),
    errors.ContextExpressionError("bad expression"),
    errors.SkillCompositionError("two tools named x"),
    errors.WorkspaceError("outside the workspace"),
    errors.ToolUnavailableError("the printer is off"),
    errors.MCPServerUnavailableError("ledger", "ConnectError: refused (3 attempts)"),
    errors.BudgetExceededError("max_model_calls", 3, 3, run_id="r7", agent="Triage"),
    errors.DatabaseFaultError("/tmp/runs.sqlite", "the disk is full", run_id="r8"),
    errors.DecisionConflictError(
        "r7",
        "call_1",
        approved=True,
        by="alice",
        at="2026-01-01T00:00:00+00:00",
        attempted="reject",
    ),
    errors.DuplicateAgentError("two agents named x"),
    errors.ExecutorIdInUseError("worker-1", host="box", pid=4242, heartbeat_age=1.5),
    errors.NonJsonValueError("context_variables", "context_variables['x'] is a set"),
    errors.EncryptionKeyError("the stored data was changed", key_id="k1", run_id="r9"),
    errors.GuardrailTripped("no_abuse", "input", "abusive language", agent="Support", run_id="r10"),
    errors.OutputValidationError(
        agent="Orders", output_type="Order", problems="- status: Field required", answers=3
    ),
    errors.SessionBusyError("customer-42", "r11"),
    errors.SessionNotFoundError("customer-43"),
]


def test_every_public_error_is_sampled_and_exported_at_the_top():
    names = {type(e).__name__ for e in SAMPLES}
    assert names == set(errors.__all__)
    for name in ("DurableSwarmError", "RunError", "RunNotFoundError"):
        assert getattr(durable_swarm, name) is getattr(errors, name)


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_fields(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again._kwargs() == error._kwargs()
    assert isinstance(again, errors.DurableSwarmError)


READ_IN_ANOTHER_PROCESS = """
import json, pickle, sys
from durable_swarm.durable import DurableClient
from durable_swarm.errors import RunError
with DurableClient(sys.argv[1]) as client:
    try:
        client.handle(sys.argv[2]).result(timeout=60)
    except RunError as e:
        again = pickle.loads(pickle.dumps(e))
        print(json.dumps({"class": type(again).__name__, "error_type": again.error_type,
                          "run_id": again.run_id, "message": again.message, "text": str(again)}))
"""


def test_failed_run_error_read_in_another_process_keeps_type_message_and_run_id(
    durable_swarm_factory, database_url, run_id
):
    def closed(**request: object) -> object:
        raise LookupError("the ledger is closed")

    # a model client of the app's own that fails in a way no library code knows
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=closed)))
    swarm = durable_swarm_factory(client)
    with pytest.raises(Exception, match="the ledger is closed"):
        swarm.run(Agent(name="Bookkeeper"), [], run_id=run_id)

    read = subprocess.run(
        [sys.executable, "-c", READ_IN_ANOTHER_PROCESS, database_url, run_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(read.stdout)
    assert seen["class"] == "RunError"
    assert seen["error_type"] == "builtins.LookupError"
    assert seen["run_id"] == run_id
    assert "the ledger is closed" in seen["message"]
    assert seen["text"].startswith("builtins.LookupError: ")
