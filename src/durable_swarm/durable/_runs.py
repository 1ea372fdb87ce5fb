"""What a run looks like from its log: status, agent, messages, context, steps, what it waits for.

Everything here is read from DBOS's tables (workflow status, step outputs, events), so it works in
any process on the same database, including one that has none of the agents' code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._messages import final_answer, tool_message
from ..errors import EncryptionKeyError, RunNotFoundError
from ..human import Decision, arguments_digest
from ..usage import Tally, Usage
from ._log import (
    WAITING_EVENT,
    StoredResult,
    call_usage,
    context_after,
    raise_unread,
    spec_of,
    step_kind,
    unread_sealed,
)
from ._sealing import SealedValue
from ._spec import RunSpec

__all__ = [
    "DBOS_STATUSES",
    "STATUSES",
    "RunInfo",
    "StepRecord",
    "encrypted_text",
    "problem_of",
    "rate_limit_of",
    "read_run",
    "run_status",
    "step_outputs",
    "step_record",
    "summarize",
    "tally_steps",
    "time_of",
]

# This library's statuses by the DBOS statuses they come from: a run waits when it is pending,
# running or back on its queue (a wait outlives its process), and its `waiting_for` event is set.
DBOS_STATUSES = {
    "pending": ("PENDING", "ENQUEUED", "DELAYED"),
    "waiting_for_input": ("PENDING", "ENQUEUED", "DELAYED"),
    "waiting_for_approval": ("PENDING", "ENQUEUED", "DELAYED"),
    "succeeded": ("SUCCESS",),
    "failed": ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"),
    "cancelled": ("CANCELLED",),
}
STATUSES = tuple(DBOS_STATUSES)
_SETTLED = ("pending", "succeeded", "failed", "cancelled")  # the statuses a wait does not set
_STATUS_OF = {
    dbos: name for name, found in DBOS_STATUSES.items() if name in _SETTLED for dbos in found
}
# How often `_consistent_read` reads a moving run again before it gives the last read (a wait
# answered and the next one set between two reads each time, many times in a row).
_READ_ATTEMPTS = 20


@dataclass
class StepRecord:
    """One checkpoint of a run.

    `kind` is `model`, `tool`, `handoff`, `guardrail` (a guardrail's verdict), `wait` (a
    person's answer or decision), `subagent` (a
    child run started; `child_run_id` names it), `join` (its result read), or DBOS bookkeeping
    (`event`, `timer`, `stream`, `dbos`). `output` is the step's recorded JSON output.
    """

    step: int
    kind: str
    name: str
    output: Any = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    child_run_id: str | None = None

    @property
    def duration_ms(self) -> float | None:
        """How long the step took, when it finished."""
        if self.started_at and self.completed_at:
            return (self.completed_at - self.started_at).total_seconds() * 1000
        return None


@dataclass
class RunInfo:
    """A run as its log tells it.

    `status` is one of `pending`, `waiting_for_input`, `waiting_for_approval`, `succeeded`,
    `failed`, `cancelled`. `agent` is the name of the agent the run is on (or ended on);
    `messages` are the conversation's messages so far, inputs included; `waiting_for` describes
    the question or tool call the run waits on; `error` the recorded failure, if any.
    `guardrails` are the verdicts of the guardrails it asked (`guardrail`, `kind`, `agent`,
    `tripped`, `reason`, and a tool guardrail's `tool` and `tool_call_id`).
    `usage` is the token usage and cost of the run's model calls, its finished sub-agents'
    included (None in a listing of a run that has not finished: `get_run` reads its steps);
    `usage_by_agent` is the same per agent name, sub-agents' agents shown on their own.
    `swarm` is the name of the swarm the run belongs to, whose model client and limits it runs
    with ("default" for runs of releases that did not record it; None if its input is unknown).
    `rate_limit` says, while the run is pending, which model limit (`ModelLimits`) its model
    call waits for: `{"key", "agent", "until", "paused_because"}` (`until`: when it looks
    again, a UTC datetime; `paused_because`: the 429 that paused the key, if one did); None
    when it waits for none (only `get_run` reads it).
    `output` is a finished run's structured output (its agent's `output_type`) as stored: JSON
    data, not the typed value (`handle(run_id).result().output` is that).
    `encrypted` is the id of the encryption key its contents need when this process has not got
    it (None: nothing is hidden); its messages, context, step contents and error are then not
    shown, while its status, agents, times, usage and costs are.
    """

    run_id: str
    status: str
    agent: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    context_variables: dict[str, Any] = field(default_factory=dict)
    waiting_for: dict[str, Any] | None = None
    error: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    steps: list[StepRecord] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    input_messages: int = 0
    forked_from: str | None = None
    parent: str | None = None
    problem: str | None = None
    usage: Usage | None = None
    usage_by_agent: dict[str, Usage] = field(default_factory=dict)
    swarm: str | None = None
    rate_limit: dict[str, Any] | None = None
    output: Any = None
    encrypted: str | None = None

    @property
    def cost_usd(self) -> float | None:
        """What the run's model calls cost in USD; None when unknown (a model without a known
        price, a server that reported no usage) or not read yet."""
        return self.usage.cost_usd if self.usage is not None else None

    @property
    def children(self) -> list[str]:
        """The run ids of this run's sub-agents, in the order they were started."""
        return list(dict.fromkeys(s.child_run_id for s in self.steps if s.child_run_id))

    @property
    def new_messages(self) -> list[dict[str, Any]]:
        """The messages this run added (what `Response.messages` holds)."""
        return self.messages[self.input_messages :]


def time_of(epoch_ms: int | None) -> datetime | None:
    """The UTC time of a DBOS timestamp (milliseconds since the epoch); None for none."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc) if epoch_ms else None


def run_status(dbos_status: str, waiting: dict[str, Any] | None, parked: Any = None) -> str:
    """This library's status name for a DBOS status, what the run waits for (the
    `waiting_for` event) and its parked wait (`durable._waits.Wait`, if it has one): a run not
    finished waits when the event is set. A parked run is CANCELLED in DBOS, yet only waits:
    for a person (`waiting_for_input`, `waiting_for_approval`), else it is `pending` (it waits
    for a sub-agent run, or for something a process has to provide)."""
    if parked is not None and dbos_status == "CANCELLED":
        if parked.kind not in ("input", "approval"):
            return "pending"
        kind = (waiting or {}).get("kind") or parked.kind
        return "waiting_for_approval" if kind == "approval" else "waiting_for_input"
    if waiting and dbos_status in DBOS_STATUSES["pending"]:
        return "waiting_for_approval" if waiting.get("kind") == "approval" else "waiting_for_input"
    return _STATUS_OF.get(dbos_status, "pending")


def rate_limit_of(parked: Any) -> dict[str, Any] | None:
    """What a run parked for its turn under a model limit waits for (see `RunInfo.rate_limit`),
    as its `limit` wait says; None for any other run."""
    if parked is None or parked.kind != "limit":
        return None
    found = dict((parked.detail or {}).get("rate_limit") or {})
    until = found.get("until")
    if isinstance(until, str):
        try:
            found["until"] = datetime.fromisoformat(until)
        except ValueError:
            found["until"] = None
    return {k: found.get(k) for k in ("key", "agent", "until", "paused_because")}


def problem_of(parked: Any) -> str | None:
    """What a parked run misses (an agent, a swarm, a key), as its `missing` wait says."""
    if parked is None or parked.kind != "missing":
        return None
    notice = (parked.detail or {}).get("notice")
    return str(notice) if notice else None


def _error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, EncryptionKeyError) and error.key_id:
        return encrypted_text(error.key_id)
    return str(error)


def encrypted_text(key_id: str) -> str:
    """What is shown in place of contents sealed with the key `key_id`, missing here."""
    return f"encrypted (needs key {key_id!r})"


def _locked_key(*values: Any) -> str | None:
    """The key id of the first of `values` read without its key (a `SealedValue`)."""
    for value in values:
        if isinstance(value, SealedValue):
            return value.key_id
        if isinstance(value, EncryptionKeyError) and value.key_id:
            return value.key_id
    return None


def summarize(status: Any, waiting: dict[str, Any] | None = None, parked: Any = None) -> RunInfo:
    """A `RunInfo` from the workflow's status row alone (no steps): what `list_runs` shows.
    `parked`: the run's parked wait (`durable._waits.Wait`), if it has one."""
    spec = spec_of(status)
    output = status.output if isinstance(status.output, dict) else {}
    agent = (output.get("agent") or spec.get("agent") or {}).get("name")
    tally = Tally.from_json(output["usage"]) if "usage" in output else None
    state = run_status(status.status, waiting, parked)
    return RunInfo(
        run_id=status.workflow_id,
        status=state,
        agent=agent,
        waiting_for=waiting,
        problem=problem_of(parked),
        rate_limit=rate_limit_of(parked),
        error=_error_text(status.error),
        created_at=time_of(status.created_at),
        updated_at=time_of(status.updated_at),
        forked_from=status.forked_from,
        parent=spec.get("parent"),
        input_messages=len(spec.get("messages") or []),
        usage=tally.total if tally else None,
        usage_by_agent=dict(tally.by_agent) if tally else {},
        swarm=RunSpec.swarm_of(spec) if spec else None,
        encrypted=_locked_key(status.input, status.output, status.error)
        or unread_sealed(status.input)
        or None,
    )


def tally_steps(steps: list[StepRecord]) -> Tally:
    """The usage recorded by a run's steps: its model calls and its joined sub-agents."""
    tally = Tally()
    for step in steps:
        out = step.output if isinstance(step.output, dict) else {}
        if step.kind in ("model", "compact") and ("message" in out or isinstance(out, SealedValue)):
            tally.add(step.name, call_usage(out))
        elif step.kind in ("join", "guardrail") and out.get("usage"):
            tally.merge(Tally.from_json(out["usage"]))
    return tally


def step_record(step: Any) -> StepRecord:
    """A `StepRecord` from one of DBOS's `list_workflow_steps` rows."""
    kind, short = step_kind(step["function_name"])
    return StepRecord(
        step=step["function_id"],
        kind=kind,
        name=short,
        output=step["output"],
        error=_error_text(step["error"]),
        started_at=time_of(step["started_at_epoch_ms"]),
        completed_at=time_of(step["completed_at_epoch_ms"]),
        child_run_id=step.get("child_workflow_id"),
    )


def step_outputs(source: Any, run_id: str) -> list[tuple[int, Any]]:
    """`(step number, output)` of every step of a run, from DBOS or a thin client's source."""
    return [(s["function_id"], s["output"]) for s in source.list_workflow_steps(run_id)]


def _waiting(source: Any, run_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = source.get_all_events(run_id).get(WAITING_EVENT) or None
    return found


def _consistent_read(
    run_id: str, source: Any, waits: Any
) -> tuple[Any, dict[str, Any] | None, list[Any], Any]:
    """A run's status row, what it waits for, its steps and its parked wait (for a run DBOS
    shows CANCELLED), as they were at one moment.

    They are several reads, and the run moves meanwhile: a wait answered between the read of
    the `waiting_for` event and the read of the steps would show the old question beside the
    steps that came after it. So the event is read again after the others, and the whole read
    repeated until both reads agree (a run never returns to a wait it left: each wait has its
    own `wait_id`); steps added while the run waits on one question belong to that wait.
    """
    for _ in range(_READ_ATTEMPTS):
        waiting = _waiting(source, run_id)
        status = source.get_workflow_status(run_id)
        if status is None:
            raise RunNotFoundError(run_id)
        steps = source.list_workflow_steps(run_id)
        parked = waits.parked([run_id]).get(run_id) if status.status == "CANCELLED" else None
        if _waiting(source, run_id) == waiting:
            break
    return status, waiting, steps, parked


def _unanswered(calls: list[dict[str, Any]], answered: Any) -> list[dict[str, Any]]:
    """`calls` without the one whose id is `answered`."""
    return [c for c in calls if c.get("id") != answered] if answered else calls


def _guarded(
    messages: list[dict[str, Any]], blocked: dict[str, dict[str, Any]], verdict: dict[str, Any]
) -> None:
    """A tool guardrail's verdict: a withheld result replaced by its rejection, a blocked
    call's rejection kept in `blocked` until `_place_blocked` puts it in call order (the loop
    checks every call of a message before it runs any)."""
    rejection, call_id = verdict.get("message"), verdict.get("tool_call_id")
    if not verdict.get("tripped") or not isinstance(rejection, dict):
        return
    if verdict.get("kind") != "tool_result":
        blocked[str(call_id)] = dict(rejection)
        return
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "tool" and messages[i].get("tool_call_id") == call_id:
            messages[i] = dict(rejection)
            return


def _place_blocked(
    messages: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    blocked: dict[str, dict[str, Any]],
    upto: Any = None,
) -> list[dict[str, Any]]:
    """Append the rejections of the blocked calls that come before the call `upto` (every one
    when None) in the message's call order; returns the calls still open."""
    for call in list(calls):
        call_id = str(call.get("id"))
        if upto is not None and (call_id == str(upto) or call_id not in blocked):
            break
        if call_id in blocked:
            messages.append(blocked.pop(call_id))
            calls = _unanswered(calls, call.get("id"))
    return calls


def read_run(run_id: str, source: Any, waits: Any) -> RunInfo:
    """The whole run: status plus the messages, context and agent rebuilt from its steps.

    `source` reads the log: DBOS in a process that launched it, or any object with DBOS's
    `get_workflow_status`, `get_all_events` and `list_workflow_steps` (a thin client's adapter).
    `waits` (a `durable._waits.WaitBook` on the run database) tells a parked run, which waits,
    from a cancelled one. What the run waits for and its steps are read as they were at one
    moment (see `_consistent_read`).
    """
    status, waiting, steps, parked = _consistent_read(run_id, source, waits)
    raise_unread(run_id, status.input, status.output, status.error, waiting)
    raise_unread(run_id, *(s["output"] for s in steps), *(s["error"] for s in steps))
    info = summarize(status, waiting, parked)
    spec = spec_of(status)
    info.steps = [step_record(s) for s in steps]
    messages = list(spec.get("messages") or [])
    context = dict(spec.get("context_variables") or {})
    agent = (spec.get("agent") or {}).get("name")
    asked: dict[str, Any] | None = None  # a tool message waiting for the person's answer
    updates: dict[str, Any] = {}  # the current message's `Result` updates, merged after it
    calls: list[dict[str, Any]] = []  # the last assistant message's calls not answered yet
    blocked: dict[str, dict[str, Any]] = {}  # rejections of calls a guardrail blocked
    for step in info.steps:
        out = step.output if isinstance(step.output, dict) else {}
        if step.kind in ("model", "handoff") and updates:
            context, updates = {**context, **updates}, {}
        if step.kind in ("model", "tool") and "message" in out:
            upto = out["message"].get("tool_call_id") if step.kind == "tool" else None
            calls = _place_blocked(messages, calls, blocked, upto)
            messages.append(dict(out["message"]))
            asked = messages[-1] if out.get("ask") else None
            if step.kind == "model":
                calls = [c for c in out["message"].get("tool_calls") or [] if isinstance(c, dict)]
            calls = _unanswered(calls, out["message"].get("tool_call_id"))
        if step.kind == "tool":
            context = context_after(dict(context), out)
            updates.update(out.get("updates") or {})
        if step.kind == "join" and isinstance(out.get("messages"), list) and calls:
            # A sub-agent's answer (not a step of its own): for the call its result names, or,
            # logged before results named it, the first call still open.
            answered = out.get("tool_call_id") or calls[0].get("id")
            call = next((c for c in calls if c.get("id") == answered), None)
            if call is not None:
                calls = _place_blocked(messages, calls, blocked, answered)
                messages.append(tool_message(call, final_answer(out["messages"])))
                calls = _unanswered(calls, answered)
        if step.kind == "guardrail" and out:
            info.guardrails.append(out)
            _guarded(messages, blocked, out)
        if step.kind == "handoff":
            info.transitions.append(out)
            agent = out.get("target") or agent
        if step.kind == "wait" and isinstance(out, dict) and "budget" not in out:
            if "text" in out and asked is not None:
                asked["content"], asked = out["text"], None
            elif "text" in out:
                messages.append({"role": "user", "content": out["text"]})
            else:
                info.decisions.append(out)
                rejected = [
                    c
                    for c in calls
                    if c.get("id") == out.get("tool_call_id")
                    and out.get("digest") in (None, arguments_digest(c))  # the loop ignores others
                ]
                calls = _place_blocked(messages, calls, blocked, out.get("tool_call_id"))
                if rejected and not out.get("approved"):  # the loop answers the model for it
                    text = Decision.from_json(out).tool_message(rejected[0])
                    messages.append(tool_message(rejected[0], text))
                    calls = _unanswered(calls, out.get("tool_call_id"))
    _place_blocked(messages, calls, blocked)
    # `updates` still pending belong to a message whose calls have not all run: not merged yet
    if isinstance(status.output, dict):
        stored = StoredResult.read(status.output, lambda: [(s.step, s.output) for s in info.steps])
        messages = list(spec.get("messages") or []) + stored.messages
        context = stored.context_variables
        agent = (stored.agent or {}).get("name", agent)
        info.output = stored.output
    info.messages, info.context_variables, info.agent = messages, context, agent
    info.encrypted = info.encrypted or _locked_key(waiting, *(s.output for s in info.steps))
    tally = tally_steps(info.steps)
    info.usage, info.usage_by_agent = tally.total, dict(tally.by_agent)
    return info
