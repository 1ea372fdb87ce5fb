"""Runs as the HTTP API shows them: plain JSON built from `RunInfo` and `StepRecord`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..durable._listing import PendingApproval
from ..durable._runs import RunInfo, StepRecord, encrypted_text
from ..durable._sealing import SealedValue

__all__ = ["approval_json", "run_detail", "run_summary", "step_json", "tool_arguments"]


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_summary(info: RunInfo, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A run as a row of the runs list: ids, status, agent, times, model calls and tokens so far,
    and `usage`/`cost_usd` (sub-agents included) once the run has recorded them."""
    return {
        "run_id": info.run_id,
        "status": info.status,
        "agent": info.agent,
        "created_at": _time(info.created_at),
        "updated_at": _time(info.updated_at),
        "model_calls": (usage or {}).get("model_calls", 0),
        "tokens": (usage or {}).get("tokens", 0),
        "parent": info.parent,
        "forked_from": info.forked_from,
        "waiting_for": info.waiting_for,
        "error": info.error,
        "usage": info.usage.to_json() if info.usage is not None else None,
        "cost_usd": info.cost_usd,
        "encrypted": info.encrypted,
    }


def tool_arguments(info: RunInfo) -> dict[str, str]:
    """Each tool call's arguments (the JSON text the model sent), by tool call id."""
    found: dict[str, str] = {}
    for message in info.messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            found[str(call.get("id"))] = str(function.get("arguments", ""))
    waiting_call = (info.waiting_for or {}).get("tool_call") or {}
    if waiting_call:
        found[str(waiting_call.get("id"))] = str(
            (waiting_call.get("function") or {}).get("arguments", "")
        )
    return found


def step_json(step: StepRecord, arguments: dict[str, str] | None = None) -> dict[str, Any]:
    """One step of the timeline: kind, name, arguments, result, tokens, duration, error, and
    `adds_message`: whether the step added a message to the conversation (a model call's
    assistant message, whose content and tool calls are its `result`, or a tool's message,
    whose content is its `result`)."""
    output = step.output if isinstance(step.output, dict) else {}
    found = output.get("message")
    message: dict[str, Any] | None = found if isinstance(found, dict) else None
    args: Any = None
    result: Any = step.output
    tokens = None
    if step.kind == "model" and message is not None:
        result = {"content": message.get("content"), "tool_calls": message.get("tool_calls")}
        usage = output.get("usage")
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    elif step.kind == "tool" and message is not None:
        args = (arguments or {}).get(str(message.get("tool_call_id")))
        result = message.get("content")
    elif step.kind == "compact" and "summary" in output:  # what the model saw instead
        result = output["summary"]
        usage = output.get("usage")
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    name = step.name
    if step.kind == "compact" and "summarized" in output:
        name = f"{step.name}: {output['summarized']} messages summarized"
    elif step.kind == "session":
        name = f"added to session {step.name}"
    if isinstance(step.output, SealedValue):  # its key is missing here: no contents to show
        result = encrypted_text(step.output.key_id)
    if step.kind == "wait" and "text" in output:
        name, result = "answer", output["text"]
    elif step.kind == "wait" and "approved" in output:
        name, result = "decision", _decision_text(output)
    elif step.kind == "guardrail" and "tripped" in output:
        args, result = _guardrail_checked(output), _verdict_text(output)
    return {
        "step": step.step,
        "kind": step.kind,
        "name": name,
        "adds_message": step.kind in ("model", "tool") and message is not None,
        "arguments": args,
        "result": result,
        "tokens": tokens,
        "duration_ms": step.duration_ms,
        "error": step.error,
        "started_at": _time(step.started_at),
        "completed_at": _time(step.completed_at),
        "child_run_id": step.child_run_id,
    }


def _guardrail_checked(verdict: dict[str, Any]) -> str:
    """What a guardrail checked: `input`, `output`, `tool_call <tool>`, `tool_result <tool>`."""
    return " ".join(str(x) for x in (verdict.get("kind"), verdict.get("tool")) if x)


def _verdict_text(verdict: dict[str, Any]) -> str:
    if not verdict.get("tripped"):
        return "passed"
    return f"tripped: {verdict.get('reason') or 'no reason given'}"


def _decision_text(decision: dict[str, Any]) -> str:
    verdict = "approved" if decision.get("approved") else "rejected"
    who = f" by {decision['by']}" if decision.get("by") else ""
    why = f": {decision['message']}" if decision.get("message") else ""
    return f"{verdict}{who}{why}"


def run_detail(
    info: RunInfo, usage: dict[str, int] | None = None, recovery_attempts: int | None = None
) -> dict[str, Any]:
    """The whole run: its summary, messages, context, steps, transitions, decisions, guardrail
    verdicts, and what it waits for. `recovery_attempts` above 1 means a process took the run
    over after a crash."""
    arguments = tool_arguments(info)
    return {
        **run_summary(info, usage),
        "messages": info.messages,
        "context_variables": info.context_variables,
        "steps": [step_json(s, arguments) for s in info.steps],
        "usage_by_agent": {name: u.to_json() for name, u in info.usage_by_agent.items()},
        "transitions": info.transitions,
        "decisions": info.decisions,
        "guardrails": info.guardrails,
        "children": info.children,
        "input_messages": info.input_messages,
        "recovery_attempts": recovery_attempts,
        "rate_limit": _rate_limit(info.rate_limit),
    }


def _rate_limit(waiting: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the run's model call waits for under a model limit, times as ISO text."""
    if not waiting:
        return None
    return {**waiting, "until": _time(waiting.get("until"))}


def approval_json(approval: PendingApproval) -> dict[str, Any]:
    """A pending approval: run, tool call, tool, the exact arguments, and since when.

    `arguments` is the exact JSON text the model sent; `parsed_arguments` the same decoded
    (None when it is not valid JSON)."""
    try:
        parsed = json.loads(approval.arguments)
    except ValueError:
        parsed = None
    return {
        "run_id": approval.run_id,
        "tool_call_id": approval.tool_call_id,
        "tool": approval.tool,
        "arguments": approval.arguments,
        "parsed_arguments": parsed,
        "agent": approval.agent,
        "since": _time(approval.since),
    }
