"""Deciding for a run: the tool calls waiting for approval, and the commands a person sends a
run (answer, approve, reject, cancel, resume, fork), exactly as the CLI sends them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..errors import DurableSwarmError
from ._console import ClientDep
from ._errors import BadRequest
from ._views import approval_json

inbox = APIRouter(tags=["approvals"])
"""`/api/approvals`: the tool calls waiting for a person."""

commands = APIRouter(tags=["actions"])
"""The `POST /api/runs/<run_id>/<command>` routes."""

_FINISHED = ("succeeded", "failed", "cancelled")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputBody(_Strict):
    """The person's answer to the question a run waits on."""

    text: str


class ApproveBody(_Strict):
    """Approve the tool call a run waits on (its id, from `waiting_for.tool_call.id`)."""

    tool_call_id: str = Field(min_length=1)


class RejectBody(_Strict):
    """Reject the tool call a run waits on; the model reads `message` as the tool's result."""

    tool_call_id: str = Field(min_length=1)
    message: str | None = None


class ForkBody(_Strict):
    """Fork a run: a new run copying the steps before `step`."""

    step: int = Field(strict=True)  # `true` is not step 1


@inbox.get("/api/approvals")
def approvals(
    client: ClientDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    """Tool calls waiting for a person's approval, longest waiting first:
    `{"approvals": [...], "total": N}` (the first `limit` of them)."""
    found = client.list_approvals(limit=limit)
    total = client.count_runs(status="waiting_for_approval") if len(found) == limit else None
    return {
        "approvals": [approval_json(a) for a in found],
        "total": len(found) if total is None else total,
    }


@commands.post("/api/runs/{run_id:path}/input")
def send_input(run_id: str, body: InputBody, client: ClientDep) -> dict[str, Any]:
    """Answer the question the run waits on (409 when it does not wait for one)."""
    client.send_input(run_id, body.text, by="console")
    return {"run_id": run_id, "sent": "input"}


@commands.post("/api/runs/{run_id:path}/approve")
def approve(run_id: str, body: ApproveBody, client: ClientDep) -> dict[str, Any]:
    """Approve the tool call the run waits on, with exactly the arguments it shows."""
    client.approve(run_id, body.tool_call_id, by="console")
    return {"run_id": run_id, "sent": "approval", "tool_call_id": body.tool_call_id}


@commands.post("/api/runs/{run_id:path}/reject")
def reject(run_id: str, body: RejectBody, client: ClientDep) -> dict[str, Any]:
    """Reject the tool call the run waits on; the model reads `message`."""
    client.reject(run_id, body.tool_call_id, body.message, by="console")
    return {"run_id": run_id, "sent": "rejection", "tool_call_id": body.tool_call_id}


@commands.post("/api/runs/{run_id:path}/cancel")
def cancel(run_id: str, client: ClientDep) -> dict[str, Any]:
    """Cancel the run and its sub-agents (409 when it had already finished)."""
    client.cancel(run_id)
    status = client.get_run(run_id).status
    if status != "cancelled":
        raise DurableSwarmError(
            f"Run {run_id!r} had already {status} (or did just now): nothing was cancelled."
        )
    return {"run_id": run_id, "cancelled": True}


@commands.post("/api/runs/{run_id:path}/resume")
def resume(run_id: str, client: ClientDep) -> dict[str, Any]:
    """Continue a cancelled run, or a failed one from the step that failed (409 for a run
    that has not ended: it goes on where it is)."""
    status = client.get_run(run_id).status
    if status not in _FINISHED:
        raise DurableSwarmError(
            f"Run {run_id!r} is {status}: it has not ended, so it goes on where it is; "
            "nothing was resumed."
        )
    client.resume(run_id)  # a succeeded run raises, saying to fork it instead
    return {"run_id": run_id, "resumed": True}


@commands.post("/api/runs/{run_id:path}/fork")
def fork(run_id: str, body: ForkBody, client: ClientDep) -> dict[str, Any]:
    """A new run copying this run's steps before `step`: `{"run_id": <new id>}`."""
    last = max((s.step for s in client.get_run(run_id).steps), default=0)
    if body.step < 1 or body.step > last + 1:
        raise BadRequest(
            f"Cannot fork run {run_id!r} at step {body.step}: it has steps 1 to {last}. "
            "Nothing was changed.",
        )
    return {"run_id": client.fork(run_id, body.step).run_id, "forked_from": run_id}
