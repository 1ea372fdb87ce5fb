"""Guardrails: checks that stop a run, or one tool call, before it does harm.

A guardrail is a function (sync or `async def`) or an `Agent`, put on an agent:

- `Agent(input_guardrails=[...])` check the user's input when the run starts; one that trips ends
  the run with `GuardrailTripped` before any tool runs. `@guardrail(run_in_parallel=True)` is
  asked while the first model call runs (less latency); if it trips, that answer is discarded,
  but it was paid for (and, in a durable run, recorded as a step). A streamed run asks parallel
  guardrails first: a streamed answer cannot be taken back once shown.
- `Agent(output_guardrails=[...])` check the run's final answer (the last assistant message,
  when it calls no tool); one that trips ends the run with `GuardrailTripped`.
- `Agent(tool_guardrails=[...])` (or `@tool(guardrails=[...])` on one tool) check each tool call:
  `@guardrail` (`when="before"`) on its arguments before the tool runs, `@guardrail(when="after")`
  on its result. One that trips does not end the run: the model reads a rejection as the tool's
  result, and the tool does not run (before) or its result is withheld (after).

A guardrail function receives the value it checks as its first parameter (the input text, the
answer text, the arguments as a dict, the result text), and, by name, any of `context_variables`
(a copy), `agent` (the `Agent`), `messages` (the conversation so far, a copy), `tool` (the tool's
name) and `arguments` (the tool's arguments, for a result check). It returns a verdict: a
`GuardrailResult`, None or False (passes), True (trips), or a non-empty string (trips with that
reason). An agent used as a guardrail is run on the value as a conversation of its own and must
answer with one JSON object `{"tripped": true|false, "reason": "..."}`; an answer without one
trips (a guardrail fails closed).

Each verdict is a loop effect (`CheckGuardrail`): a step of its own in a `DurableSwarm`
(`guardrail:<name>`), so a recovered run never asks a guardrail again.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic_core import to_jsonable_python

from ._aio import in_thread, run_coroutine
from ._messages import tool_message
from .errors import DurableSwarmError, GuardrailTripped
from .tools import is_agent, tool_name, tool_spec

if TYPE_CHECKING:
    from .loop import ModelCall, RunState
    from .tools import ToolOutcome

__all__ = [
    "CheckGuardrail",
    "Guardrail",
    "GuardrailResult",
    "GuardrailTripped",
    "Parallel",
    "as_guardrail",
    "guardrail",
]

When = Literal["before", "after"]
# What a guardrail checks, as stored in its verdict.
INPUT, OUTPUT, TOOL_CALL, TOOL_RESULT = "input", "output", "tool_call", "tool_result"
_WHAT = {
    INPUT: "user's input",
    OUTPUT: "final answer",
    TOOL_CALL: "tool call's arguments",
    TOOL_RESULT: "tool call's result",
}
# Names a guardrail function may take besides the value it checks.
_EXTRAS = ("context_variables", "agent", "messages", "tool", "arguments")


@dataclass(frozen=True)
class GuardrailResult:
    """A guardrail's verdict: `tripped` (stop) or not, and why."""

    tripped: bool
    reason: str = ""

    @classmethod
    def passed(cls) -> GuardrailResult:
        """The verdict that lets the run go on."""
        return cls(False)

    @classmethod
    def trip(cls, reason: str) -> GuardrailResult:
        """The verdict that stops the run (or the tool call), saying why."""
        return cls(True, reason)


@dataclass(frozen=True)
class Guardrail:
    """A check on an agent's input, final answer or tool calls (see the module docstring).

    Attributes:
        check: the function that gives the verdict, or an `Agent` that answers with one.
        name: the name shown in errors, the run's log and its timeline (default: the
            function's or agent's name).
        run_in_parallel: input guardrails only: asked while the first model call runs; that
            call's answer is discarded if the guardrail trips (but paid for).
        when: tool guardrails only: `"before"` checks the arguments before the tool runs,
            `"after"` checks its result.
    """

    check: Any
    name: str = ""
    run_in_parallel: bool = False
    when: When = "before"

    def __post_init__(self) -> None:
        if not (is_agent(self.check) or callable(self.check)):
            raise TypeError(
                f"A guardrail is a function or an Agent, got {type(self.check).__name__} "
                f"{self.check!r:.80}"
            )
        if self.when not in ("before", "after"):
            raise ValueError(f'Guardrail(when=...) is "before" or "after", got {self.when!r}')
        if not self.name:
            default = self.check.name if is_agent(self.check) else tool_name(self.check)
            object.__setattr__(self, "name", str(default))


F = Callable[..., Any]


@overload
def guardrail(func: F, /) -> Guardrail: ...


@overload
def guardrail(
    *, name: str | None = None, run_in_parallel: bool = False, when: When = "before"
) -> Callable[[F], Guardrail]: ...


def guardrail(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    run_in_parallel: bool = False,
    when: When = "before",
) -> Guardrail | Callable[[F], Guardrail]:
    """Make a function (or an `Agent`) a `Guardrail`; usable bare (`@guardrail`) or called
    (`@guardrail(when="after")`). The options are `Guardrail`'s."""

    def make(check: F) -> Guardrail:
        return Guardrail(check, name or "", run_in_parallel, when)

    return make if func is None else make(func)


def as_guardrail(item: Any) -> Guardrail:
    """`item` as a `Guardrail` (a function or an agent gets the defaults)."""
    return item if isinstance(item, Guardrail) else Guardrail(item)


def _guardrails(items: Any) -> list[Guardrail]:
    return [as_guardrail(item) for item in items or ()]


# --- the effect ----------------------------------------------------------------------------------


@dataclass
class CheckGuardrail:
    """Effect: ask `guardrail` for its verdict on `value` (what `kind` names); the result is
    the verdict as JSON (`Verdict.to_json`)."""

    guardrail: Guardrail
    kind: str
    agent: Any
    value: Any
    context_variables: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    call: dict[str, Any] | None = None

    def extra(self, name: str) -> Any:
        """What a guardrail function gets for its parameter `name` (one of `_EXTRAS`): copies,
        so a guardrail cannot change the run."""
        if name == "context_variables":
            return copy.deepcopy(self.context_variables)
        if name == "messages":
            return copy.deepcopy(self.messages)
        if name == "agent":
            return self.agent
        if self.call is None:
            return None
        return self.call["function"]["name"] if name == "tool" else _arguments(self.call)

    def verdict(self, result: GuardrailResult) -> dict[str, Any]:
        """The verdict as stored in the run's log (and shown in its timeline): the guardrail,
        what it checked, for which agent (and tool call), whether it tripped and why; with a
        tripped tool guardrail, the tool message the model reads instead."""
        data: dict[str, Any] = {
            "guardrail": self.guardrail.name,
            "kind": self.kind,
            "agent": self.agent.name,
            "tripped": result.tripped,
            "reason": result.reason,
        }
        if self.call is not None:
            data["tool_call_id"] = self.call.get("id")
            data["tool"] = self.call["function"]["name"]
            if result.tripped:
                data["message"] = tool_message(self.call, rejection(self.kind, self.call, data))
        return data


@dataclass
class Parallel:
    """Effect: perform `effects` (a model call, then input guardrails) at the same time; the
    result is their results, in order."""

    effects: list[Any]


def rejection(kind: str, call: dict[str, Any], verdict: dict[str, Any]) -> str:
    """What the model reads when a tool guardrail trips."""
    name, why = call["function"]["name"], verdict.get("reason") or "no reason given"
    if kind == TOOL_CALL:
        return (
            f"Error: the call to {name} was blocked by guardrail {verdict['guardrail']} and did "
            f"not run: {why}"
        )
    return f"Error: the result of {name} was withheld by guardrail {verdict['guardrail']}: {why}"


def _arguments(call: dict[str, Any]) -> Any:
    """A tool call's arguments as the model sent them: a dict when they are a JSON object,
    else the raw text."""
    raw = call["function"].get("arguments") or ""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw
    return parsed


# --- performing a check (both runtimes) -----------------------------------------------------------


def _call(func: Callable[..., Any], effect: CheckGuardrail) -> Any:
    """`func` called with the value it checks (its first parameter not named in `_EXTRAS`) and
    the extras it names (all of them with `**kwargs`)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return func(effect.value)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        names = list(_EXTRAS)
    else:
        names = [p.name for p in params if p.name in _EXTRAS]
    named = {name: effect.extra(name) for name in names}
    takes_value = any(
        p.name not in _EXTRAS and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in params
    ) or any(p.kind is p.VAR_POSITIONAL for p in params)
    return func(effect.value, **named) if takes_value else func(**named)


def result_of(value: Any, name: str) -> GuardrailResult:
    """A guardrail function's return value as a `GuardrailResult` (see the module docstring)."""
    if isinstance(value, GuardrailResult):
        return value
    if value is None or value is False or value == "":
        return GuardrailResult.passed()
    if value is True:
        return GuardrailResult.trip(f"guardrail {name} tripped")
    if isinstance(value, str):
        return GuardrailResult.trip(value)
    raise DurableSwarmError(
        f"Guardrail {name!r} returned {type(value).__name__} {value!r:.80}; a guardrail returns "
        "a GuardrailResult, None or False (passes), True (trips) or a reason string (trips). "
        "Fix the guardrail function."
    )


_VERDICT = re.compile(r"\{.*\}", re.S)


def agent_task(effect: CheckGuardrail) -> list[dict[str, Any]]:
    """The conversation a guardrail agent is run on: the value, and how to answer."""
    value = effect.value
    if not isinstance(value, str):  # arguments, a result, or a typed output (a model, ...)
        value = json.dumps(to_jsonable_python(value))
    what = _WHAT[effect.kind]
    return [
        {
            "role": "user",
            "content": (
                f"Check this {what} (agent {effect.agent.name}) as the guardrail "
                f"{effect.guardrail.name}. Answer with one JSON object and nothing else: "
                '{"tripped": true or false, "reason": "why"}; "tripped" is true when it must '
                f"be stopped.\n\n{value}"
            ),
        }
    ]


def agent_result(answer: str, name: str) -> GuardrailResult:
    """A guardrail agent's verdict from its final answer; an answer without one trips."""
    found = _VERDICT.search(answer or "")
    try:
        data = json.loads(found.group(0)) if found else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("tripped"), bool):
        return GuardrailResult(data["tripped"], str(data.get("reason") or ""))
    return GuardrailResult.trip(
        f"guardrail agent {name} answered without a verdict: {(answer or '')[:200]!r}"
    )


AskAgent = Callable[[Any, list[dict[str, Any]]], str]
AskAgentAsync = Callable[[Any, list[dict[str, Any]]], Awaitable[str]]


def check(effect: CheckGuardrail, ask_agent: AskAgent) -> dict[str, Any]:
    """Perform `effect` now; `ask_agent(agent, messages)` runs a guardrail agent and returns
    its final answer. Returns the verdict as JSON."""
    g = effect.guardrail
    if is_agent(g.check):
        return effect.verdict(agent_result(ask_agent(g.check, agent_task(effect)), g.name))
    value = _call(g.check, effect)
    if inspect.isawaitable(value):
        value = run_coroutine(value)
    return effect.verdict(result_of(value, g.name))


async def acheck(effect: CheckGuardrail, ask_agent: AskAgentAsync) -> dict[str, Any]:
    """`check` for async code: an `async def` guardrail is awaited, others run in a thread."""
    g = effect.guardrail
    if is_agent(g.check):
        return effect.verdict(agent_result(await ask_agent(g.check, agent_task(effect)), g.name))
    if inspect.iscoroutinefunction(g.check):
        value = await _call(g.check, effect)
    else:
        value = await in_thread(_call, g.check, effect)
        if inspect.isawaitable(value):
            value = await value
    return effect.verdict(result_of(value, g.name))


# --- what the turn loop yields --------------------------------------------------------------------


def _tripped(verdict: dict[str, Any], run_id: str | None) -> GuardrailTripped:
    return GuardrailTripped(
        verdict["guardrail"],
        verdict["kind"],
        verdict.get("reason") or "",
        agent=verdict.get("agent"),
        run_id=run_id,
    )


def _enforce(checks: list[CheckGuardrail], run_id: str | None) -> Generator[Any, Any, None]:
    """Ask each check in turn; the first that trips ends the run."""
    for effect in checks:
        verdict = yield effect
        if verdict.get("tripped"):
            raise _tripped(verdict, run_id)


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def check_input(
    state: RunState, run_id: str | None, stream: bool
) -> Generator[Any, Any, list[CheckGuardrail]]:
    """Ask the starting agent's input guardrails about the user's input (the last user
    message); returns those to ask alongside the first model call (none when streaming)."""
    guards = _guardrails(getattr(state.agent, "input_guardrails", None))
    if not guards:
        return []
    text = _last_user_text(state.history)
    checks = [
        CheckGuardrail(g, INPUT, state.agent, text, state.context, state.history) for g in guards
    ]
    parallel = not stream  # a streamed answer cannot be taken back: ask them all first
    yield from _enforce(
        [c for c in checks if not (parallel and c.guardrail.run_in_parallel)], run_id
    )
    return [c for c in checks if parallel and c.guardrail.run_in_parallel]


def alongside(
    call: ModelCall, checks: list[CheckGuardrail], run_id: str | None
) -> Generator[Any, Any, dict[str, Any]]:
    """The model call, with `checks` asked at the same time; its answer is discarded (the run
    ends with `GuardrailTripped`) if one trips."""
    if not checks:
        message: dict[str, Any] = yield call
        return message
    message, *verdicts = yield Parallel([call, *checks])
    for verdict in verdicts:
        if verdict.get("tripped"):
            raise _tripped(verdict, run_id)
    return message


def remaining(checks: list[CheckGuardrail], run_id: str | None) -> Generator[Any, Any, None]:
    """Ask parallel input guardrails that had no model call to go with (`max_turns=0`)."""
    yield from _enforce(checks, run_id)


def _tool_checks(
    state: RunState, call: dict[str, Any], function: Any, when: When, kind: str, value: Any
) -> list[CheckGuardrail]:
    own = getattr(tool_spec(function), "guardrails", ()) if function is not None else ()
    guards = _guardrails([*(getattr(state.agent, "tool_guardrails", None) or ()), *own])
    return [
        CheckGuardrail(g, kind, state.agent, value, state.context, state.history, call)
        for g in guards
        if g.when == when
    ]


def _first_trip(checks: list[CheckGuardrail]) -> Generator[Any, Any, dict[str, Any] | None]:
    for effect in checks:
        verdict: dict[str, Any] = yield effect
        if verdict.get("tripped"):
            return verdict
    return None


def before_tools(
    state: RunState, batch: list[tuple[dict[str, Any], Any]]
) -> Generator[Any, Any, dict[int, dict[str, Any]]]:
    """Check the arguments of every tool call of a message before any runs; returns, by the
    call's `id()`, the rejection message of each call a guardrail blocked."""
    blocked: dict[int, dict[str, Any]] = {}
    for call, function in batch:
        if function is None:
            continue
        checks = _tool_checks(state, call, function, "before", TOOL_CALL, _arguments(call))
        verdict = yield from _first_trip(checks)
        if verdict is not None:
            blocked[id(call)] = verdict["message"]
    return blocked


def after_tool(
    state: RunState, call: dict[str, Any], function: Any, outcome: ToolOutcome
) -> Generator[Any, Any, ToolOutcome]:
    """Check a tool's result; a tripped guardrail replaces it with a rejection (and drops the
    handoff and context updates the result carried). A question to the person is not checked."""
    if function is None or outcome.ask is not None:
        return outcome
    checks = _tool_checks(
        state, call, function, "after", TOOL_RESULT, outcome.message.get("content")
    )
    verdict = yield from _first_trip(checks)
    if verdict is None:
        return outcome
    outcome.message, outcome.agent, outcome.updates = verdict["message"], None, {}
    return outcome


def check_output(
    state: RunState, new_messages: list[dict[str, Any]], run_id: str | None
) -> Generator[Any, Any, None]:
    """Ask the answering agent's output guardrails about the run's final answer: its typed
    output when it has an `output_type` (the validated value, see `durable_swarm.output`), else
    its last assistant message, when that calls no tool (a run cut short by `max_turns` has
    none)."""
    guards = _guardrails(getattr(state.agent, "output_guardrails", None))
    if not guards:
        return
    final = new_messages[-1] if new_messages else {}
    if state.output_agent is state.agent and state.output is not None:
        value: Any = state.output
    elif final.get("role") != "assistant" or final.get("tool_calls"):
        return
    else:
        value = final.get("content") or ""
    checks = [
        CheckGuardrail(g, OUTPUT, state.agent, value, state.context, state.history) for g in guards
    ]
    yield from _enforce(checks, run_id)
