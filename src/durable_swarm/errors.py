"""Every exception durable-swarm raises (besides Python's own `TypeError`/`ValueError` where
Python or pydantic checks an argument, and `TimeoutError` for a wait that ran out). An argument
the library checks itself (a `Budget` limit, a price, a handoff rule, a run's input) is refused
with `DurableSwarmError` or one of its subclasses, saying what to pass instead.

Each says what happened, which run/step/agent/tool, and what to do. Each pickles (`__reduce__`
rebuilds it from its keyword fields), so it crosses process boundaries intact; a run's error read
back from the database is rebuilt as the same class when it is one of these, else as `RunError`
carrying the original type name, message and run id.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = [
    "AgentNotFoundError",
    "BudgetExceededError",
    "ContextExpressionError",
    "DatabaseFaultError",
    "DatabaseUnavailableError",
    "DecisionConflictError",
    "DuplicateAgentError",
    "DurableSwarmError",
    "EncryptionKeyError",
    "ExecutorIdInUseError",
    "GuardrailTripped",
    "MCPServerUnavailableError",
    "ModelCallError",
    "ModelResponseError",
    "NonJsonValueError",
    "OutputValidationError",
    "RunCancelledError",
    "RunError",
    "RunNotFoundError",
    "SessionBusyError",
    "SessionNotFoundError",
    "SkillCompositionError",
    "SwarmNotFoundError",
    "ToolResultNotSerializableError",
    "ToolUnavailableError",
    "WorkspaceError",
]


def _rebuild(cls: type[DurableSwarmError], kwargs: dict[str, Any]) -> DurableSwarmError:
    return cls(**kwargs)


class DurableSwarmError(Exception):
    """Base class of this library's errors. Keeps its keyword arguments as attributes."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self._fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self._kwargs()))

    def _kwargs(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this error: those its class's `__init__` takes,
        from its message and keyword fields (all of them where `__init__` takes `**fields`)."""
        known = {"message": self.message, **self._fields}
        parameters = inspect.signature(type(self).__init__).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return known
        return {p.name: known[p.name] for p in parameters if p.name in known}


class AgentNotFoundError(DurableSwarmError):
    """A run names an agent that no code in this process has created."""

    run_id: str | None

    def __init__(self, name: str, *, run_id: str | None = None, message: str | None = None):
        where = f" by run {run_id!r}" if run_id else ""
        super().__init__(
            message
            or f"Agent {name!r} is needed{where} but no agent of that name exists in this process. "
            f"Import the module that defines `Agent(name={name!r}, ...)` before recovering or "
            "resuming the run; the run stays pending and loses nothing until then.",
            run_id=run_id,
        )
        self.agent_name = name

    def _kwargs(self) -> dict[str, Any]:
        return {"name": self.agent_name, "run_id": self.run_id, "message": self.message}


class SwarmNotFoundError(DurableSwarmError):
    """A run belongs to a swarm (a `DurableSwarm`'s `name`) that this process has not created."""

    run_id: str | None

    def __init__(
        self,
        name: str,
        *,
        run_id: str | None = None,
        known: list[str] | None = None,
        message: str | None = None,
    ):
        where = f" by run {run_id!r}" if run_id else ""
        here = ", ".join(repr(n) for n in known or []) or "none but 'default'"
        super().__init__(
            message
            or f"Swarm {name!r} is needed{where} but no DurableSwarm of that name lives in this "
            f"process (it has {here}). Create DurableSwarm(..., name={name!r}) with the model "
            "client the run should use, in this process or a worker, and keep it referenced; "
            "the run stays pending and loses nothing until then.",
            run_id=run_id,
        )
        self.swarm_name = name
        self.known = list(known or [])

    def _kwargs(self) -> dict[str, Any]:
        return {
            "name": self.swarm_name,
            "run_id": self.run_id,
            "known": self.known,
            "message": self.message,
        }


class ModelResponseError(DurableSwarmError):
    """The model endpoint answered with something that is not a usable chat completion."""

    agent: str | None
    run_id: str | None

    def __init__(self, message: str, *, agent: str | None = None, run_id: str | None = None):
        super().__init__(message, agent=agent, run_id=run_id)


class DatabaseFaultError(DurableSwarmError):
    """The run database refused a write in the middle of a run (read-only file, full disk,
    locked database, lost connection); the run lost nothing."""

    url: str
    cause: str
    run_id: str | None

    def __init__(self, url: str, cause: str, *, run_id: str | None = None):
        super().__init__(
            f"Run {run_id!r} stopped: the run database {url!r} refused a write: {cause}. "
            "Nothing is lost: the run is retried once the fault is fixed (free disk space, make "
            "the file writable, stop the process holding the lock, restore the connection), or "
            "ends failed with this error and resume(run_id) continues it.",
            url=url,
            cause=cause,
            run_id=run_id,
        )


class DecisionConflictError(DurableSwarmError):
    """A tool call waiting for approval was already decided by someone else; this decision was
    not applied."""

    run_id: str
    tool_call_id: str
    approved: bool
    by: str | None
    at: str
    attempted: str

    def __init__(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        approved: bool,
        by: str | None,
        at: str,
        attempted: str,
    ):
        decided = "approved" if approved else "rejected"
        super().__init__(
            f"Tool call {tool_call_id!r} of run {run_id!r} was already {decided} by "
            f"{by or 'someone (no name given)'} at {at}; your {attempted} was not applied. "
            "Check get_run(run_id) for where the run is now.",
            run_id=run_id,
            tool_call_id=tool_call_id,
            approved=approved,
            by=by,
            at=at,
            attempted=attempted,
        )


class EncryptionKeyError(DurableSwarmError):
    """A stored payload is encrypted and cannot be opened here: the key it was sealed with
    (`key_id`) is not among this process's keys, the key of that id is not the one that sealed
    it, the stored bytes were changed, or encryption was asked for without the `cryptography`
    package. Nothing is shown or used in its place."""

    run_id: str | None
    key_id: str | None
    reason: str

    def __init__(
        self,
        reason: str,
        *,
        key_id: str | None = None,
        run_id: str | None = None,
        message: str | None = None,
    ):
        where = f" of run {run_id!r}" if run_id else ""
        needs = f" It needs the key {key_id!r}." if key_id else ""
        super().__init__(
            message
            or f"Cannot open the encrypted data{where}: {reason}.{needs} Set "
            "DURABLE_SWARM_ENCRYPTION_KEY (a comma-separated list of id:key, the key that "
            "encrypts first) or pass encryption_key=... with every key still in use "
            "(docs/guides/encryption.md).",
            reason=reason,
            key_id=key_id,
            run_id=run_id,
        )


class RunCancelledError(DurableSwarmError):
    """The run was cancelled before it finished (waiting for its result ends with this)."""

    run_id: str

    def __init__(self, run_id: str):
        super().__init__(
            f"Run {run_id!r} was cancelled before it finished. Its finished steps are kept: "
            f"continue it with `durable-swarm runs resume {run_id}` or "
            f"DurableSwarm.resume({run_id!r}), or read it with get_run({run_id!r}).",
            run_id=run_id,
        )


class RunNotFoundError(DurableSwarmError, KeyError):
    """No run with this id exists in the database."""

    run_id: str

    def __init__(self, run_id: str, *, message: str | None = None):
        super().__init__(
            message
            or f"No run with id {run_id!r} exists in this database. Check the id (list runs "
            "with `durable-swarm runs list` or `DurableSwarm.list_runs()`) and the database URL.",
            run_id=run_id,
        )

    def __str__(self) -> str:
        return self.message


class ToolResultNotSerializableError(DurableSwarmError, TypeError):
    """A tool returned (or left in context_variables) a value that cannot be stored as JSON."""

    tool: str
    detail: str
    run_id: str | None

    def __init__(self, tool: str, detail: str, *, run_id: str | None = None):
        super().__init__(
            f"Tool {tool!r} in run {run_id or '?'} produced a value that cannot be stored as "
            f"JSON ({detail}). Return a str, a Result, an Agent, or JSON-compatible data, and keep "
            "context_variables JSON-compatible (str, numbers, bools, None, lists, dicts).",
            tool=tool,
            detail=detail,
            run_id=run_id,
        )


class DatabaseUnavailableError(DurableSwarmError, ConnectionError):
    """The run database cannot be reached or opened."""

    url: str
    cause: str

    def __init__(self, url: str, cause: str):
        """`url` is shown as given: pass it through `display_url` (password hidden)."""
        super().__init__(
            f"Cannot open the run database {url!r}: {cause}. Check that the server is running "
            "and the URL is right (argument `database_url`, or DURABLE_SWARM_DATABASE_URL). "
            "Nothing was written.",
            url=url,
            cause=cause,
        )


class ExecutorIdInUseError(DurableSwarmError):
    """Another live process holds this executor id: it wrote a heartbeat under it recently and
    is not known to have exited. Two processes under one id would both run its runs' steps, so
    the second refuses to start (see `on_executor_id_taken` for the alternatives)."""

    executor_id: str
    host: str
    pid: int
    heartbeat_age: float

    def __init__(self, executor_id: str, *, host: str, pid: int, heartbeat_age: float):
        super().__init__(
            f"Executor id {executor_id!r} is in use by a live process (host {host!r}, pid "
            f"{pid}, last heartbeat {heartbeat_age:.1f} s ago); this process did not start, "
            "so no run's step runs twice. Stop that process first, give this one another id "
            "(or none: a fresh one is made), or pass on_executor_id_taken='fresh' "
            "(--on-executor-id-taken fresh) to take a fresh id, or 'wait' to start once that "
            "process has stopped.",
            executor_id=executor_id,
            host=host,
            pid=pid,
            heartbeat_age=heartbeat_age,
        )


class RunError(DurableSwarmError):
    """An error recorded in a run's log, raised again when the run's result is read.

    `error_type` is the qualified name of the original exception class (e.g.
    `openai.APIConnectionError`), `message` its message and `run_id` the run that failed; all
    three survive pickling and reading the run from another process.
    """

    error_type: str
    run_id: str | None

    def __init__(self, message: str, *, error_type: str = "Exception", run_id: str | None = None):
        super().__init__(message, error_type=error_type, run_id=run_id)

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"


class ContextExpressionError(DurableSwarmError, ValueError):
    """A `ContextExpression` that cannot be parsed (raised when it is defined), or that cannot be
    evaluated on a run's context (a minus sign before something that is not a number): the run
    then fails with this error, naming the expression and the variable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class SkillCompositionError(DurableSwarmError, ValueError):
    """Tools that cannot be offered together: one tool name for two different tools (from
    functions, skills or MCP servers), or one name for two different skills or servers. The
    message names both sides and how to resolve the clash."""


class WorkspaceError(DurableSwarmError, ValueError):
    """A file tool refused a request: a path outside the workspace, a missing or binary file,
    a size limit. File tools turn it into an `"Error: ..."` answer for the model."""


class ModelCallError(DurableSwarmError):
    """A durable run's model call failed for good: its retries are spent, or the endpoint
    refused the request (bad request, bad key, unknown model). The run is `failed` and keeps
    every finished step; fix the cause, then resume it."""

    run_id: str
    step: int | None
    agent: str
    model: str | None
    base_url: str | None
    cause: str
    requests: int

    def __init__(
        self,
        *,
        run_id: str,
        step: int | None,
        agent: str,
        model: str | None,
        base_url: str | None,
        cause: str,
        requests: int,
        message: str | None = None,
    ):
        where = f"step {step} (model:{agent})" if step is not None else f"its model:{agent} step"
        tries = "1 request" if requests == 1 else f"{requests} requests"
        super().__init__(
            message
            or f"Run {run_id!r} failed at {where}: the call to model {model!r} at "
            f"{base_url or 'the client given to DurableSwarm'} failed after {tries}: "
            f"{cause.rstrip('.')}. Fix the cause (is the server up, the model name right, the "
            f"key valid?), then resume the run from this step: `durable-swarm runs resume "
            f"{run_id}` or `DurableSwarm(...).resume({run_id!r})`.",
            run_id=run_id,
            step=step,
            agent=agent,
            model=model,
            base_url=base_url,
            cause=cause,
            requests=requests,
        )


class ToolUnavailableError(DurableSwarmError, ConnectionError):
    """A tool could not reach what it depends on (after its own retries).

    Unlike an error inside a tool, which becomes a message the model reads, this fails the run
    at the tool's step: nothing is recorded for the step, so resuming the run tries it again.
    """


class MCPServerUnavailableError(ToolUnavailableError):
    """An MCP server could not be reached (not started, refused, or gone) after retries."""

    server: str
    cause: str

    def __init__(self, server: str, cause: str, *, message: str | None = None):
        super().__init__(
            message
            or f"MCP server {server!r} could not be reached: {cause}. Check that the server "
            "starts (its command, or its URL and that it is up); a durable run stopped at this "
            "step and loses nothing: resume it with resume(run_id) once the server is back.",
            server=server,
            cause=cause,
        )


class BudgetExceededError(DurableSwarmError):
    """A run reached a limit of its `Budget`; it stopped before its next model call.

    `limit` names the limit (`max_model_calls`, `max_total_tokens` or `max_cost_usd`), `allowed`
    its value and `reached` the run's figure (None when a cost could not be known).
    """

    limit: str
    allowed: float | int
    reached: float | int | None
    run_id: str | None
    agent: str | None
    model: str | None

    def __init__(
        self,
        limit: str,
        allowed: float | int,
        reached: float | int | None,
        *,
        run_id: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        message: str | None = None,
    ):
        where = f"Run {run_id!r}" if run_id else "The run"
        who = f" (agent {agent!r})" if agent else ""
        if message is None and model is not None:
            message = (
                f"{where}{who} has {limit}={allowed} but the price of model {model!r} is "
                "unknown, so the call was not made. Give its price to new runs "
                "(DurableSwarm(prices={model: {'input': ..., 'output': ...}}), USD per million "
                "tokens), or resume this one with a budget without max_cost_usd."
            )
        elif message is None and reached is None:
            message = (
                f"{where}{who} has {limit}={allowed} but the cost of its earlier model calls is "
                "unknown (a price or the usage was missing), so no further call was made. "
                "Resume it with a budget without max_cost_usd."
            )
        elif message is None:
            message = (
                f"{where}{who} stopped before its next model call: budget {limit}={allowed} "
                f"reached ({reached}). Resume it with a higher budget to go on."
            )
        super().__init__(
            message, limit=limit, allowed=allowed, reached=reached, run_id=run_id, agent=agent,
            model=model,
        )  # fmt: skip


class GuardrailTripped(DurableSwarmError):
    """A guardrail stopped a run: an input guardrail on the user's input, or an output guardrail
    on the final answer (a tripped tool guardrail does not end the run; the model reads why).

    `guardrail` is its name, `kind` what it checked (`input` or `output`), `reason` its reason,
    `agent` the agent it guards and `run_id` the durable run it ended (None in memory).
    """

    guardrail: str
    kind: str
    reason: str
    agent: str | None
    run_id: str | None

    def __init__(
        self,
        guardrail: str,
        kind: str,
        reason: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        message: str | None = None,
    ):
        what = {"input": "the user's input", "output": "the final answer"}.get(kind, kind)
        who = f" of agent {agent!r}" if agent else ""
        where = f" ended run {run_id!r}" if run_id else " ended the run"
        message = message or (
            f"Guardrail {guardrail!r} tripped on {what}{who} and{where}: "
            f"{reason or 'no reason given'}. This is a verdict, not a fault: change the input "
            "(or the guardrail) and start a new run."
        )
        super().__init__(
            message, guardrail=guardrail, kind=kind, reason=reason, agent=agent, run_id=run_id
        )


class DuplicateAgentError(DurableSwarmError, ValueError):
    """Two different agent definitions share one name where a name must pick one agent: among a
    run's agents (the starting agent, `agents=` and the agents its handoff rules name), or in this
    process's registry when a run names the agent without a definition that matches."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class NonJsonValueError(DurableSwarmError, TypeError):
    """A run's input holds a value a durable run cannot store (not JSON, or too large): `where`
    is the argument (`messages` or `context_variables`), `problem` names the key and the value.
    Nothing was stored."""

    where: str
    problem: str

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(
            f"Cannot start a durable run: {problem}. A durable run stores only JSON (str, finite "
            "numbers, bools, None, lists, dicts with str keys): convert the value (a datetime to "
            "an ISO string, a set to a list, bytes to text) or leave it out. Nothing was stored.",
            where=where,
            problem=problem,
        )


class SessionBusyError(DurableSwarmError):
    """Another run holds the session: two runs of one session never run at once (their
    messages would interleave). `session` is its name, `run_id` the run holding it."""

    session: str
    run_id: str

    def __init__(self, session: str, run_id: str, *, message: str | None = None) -> None:
        super().__init__(
            message
            or f"Session {session!r} is busy: run {run_id!r} holds it until that run ends (two "
            "runs of one session never run at once). Wait for that run to finish (e.g. "
            f"handle({run_id!r}).result(), or `durable-swarm runs show {run_id}`) and start "
            f"yours again, cancel it (`durable-swarm runs cancel {run_id}`), or use another "
            "session name. Nothing was started.",
            session=session,
            run_id=run_id,
        )


class SessionNotFoundError(DurableSwarmError, KeyError):
    """No session of this name exists (a session is made by the first run that names it)."""

    session: str

    def __init__(self, session: str, *, message: str | None = None) -> None:
        super().__init__(
            message
            or f"No session named {session!r} exists here. List them with list_sessions() or "
            "`durable-swarm sessions list`; a session is made by the first run that names it "
            "(run(..., session=NAME)).",
            session=session,
        )

    def __str__(self) -> str:
        return self.message


class OutputValidationError(DurableSwarmError):
    """An agent with an `output_type` gave no answer that validates: its last `answers` answers
    were invalid (the first, then each of its `output_retries` retries, each sent back with what
    did not validate). `problems` lists what did not validate in the last one, one per line."""

    agent: str
    output_type: str
    problems: str
    answers: int
    run_id: str | None

    def __init__(
        self,
        *,
        agent: str,
        output_type: str,
        problems: str,
        answers: int,
        run_id: str | None = None,
        message: str | None = None,
    ):
        where = f" in run {run_id!r}" if run_id else ""
        super().__init__(
            message
            or f"Agent {agent!r}{where} gave no valid {output_type} in {answers} answers "
            f"(output_retries={answers - 1}); the last one failed with:\n{problems}\nSay in "
            "the agent's instructions what to answer, raise its output_retries, or try the "
            "other output_mode ('tool' or 'json_schema'). Every answer is in the run's log.",
            agent=agent,
            output_type=output_type,
            problems=problems,
            answers=answers,
            run_id=run_id,
        )
