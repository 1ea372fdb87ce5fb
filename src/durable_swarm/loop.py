"""The turn loop: one deterministic generator shared by every runtime.

The loop decides the next action from the run's state and *yields* each effect it needs to a
driver, which performs it through a runtime and sends the result back:

- `ModelCall`: the next assistant message;
- `ToolInvocation`: one tool call;
- `WaitForInput`: an answer from the person, or their decision on a tool call;
- `Transition`: a record of a handoff (which rule fired, from which agent to which, and why);
- `ListTools`: the tool list of a `ToolSource` (an MCP server), asked once per run and kept;
- `CheckGuardrail`: a guardrail's verdict, and `Parallel`: input guardrails asked while the first
  model call runs (see `durable_swarm.guardrails`, which holds their logic).
- `Summarize`: a summary of the older messages, when the run would pass its `compact_at`
  budget (see `durable_swarm.compaction`).

The loop performs no effect itself and draws no randomness; what it decides depends only on the
run's input and the results sent back (the one clock it reads is the timestamp of Swarm's debug
lines, printed with `debug=True`, which decides nothing). So the in-memory runtime (`Swarm`) and
the durable one (`DurableSwarm`, where each effect is a DBOS step or a durable wait) cannot drift
apart: replaying the recorded outputs through the same loop rebuilds the same state.

Each turn: context conditions, then the model's reply and its tool calls (a function returning an
agent, or an `OnCondition` transfer), else the agent's after-work, else the swarm's after-work;
without any of these, a reply without tool calls ends the run, as in Swarm. The final answer of
an agent with an `output_type` is validated here, on the recorded reply (`durable_swarm.output`):
valid, it is `RunState.output`; invalid, the error goes back to the model for another reply.
"""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _registry, guardrails, output
from ._response import Response
from .compaction import Summarize, Window
from .errors import DurableSwarmError, OutputValidationError
from .guardrails import CheckGuardrail, Parallel
from .handoffs import (
    AfterWork,
    AfterWorkOption,
    OnCondition,
    OnContextCondition,
    UpdateSystemMessage,
    call_flexibly,
    holds,
)
from .human import Decision
from .tools import (
    ToolOutcome,
    ToolSource,
    is_agent,
    model_tool_schema,
    tool_message,
    tool_name,
    tool_spec,
)
from .util import debug_print

if TYPE_CHECKING:
    from .usage import Budget

MAX_CONTEXT_HOPS = 10


@dataclass
class ModelCall:
    """Effect: ask the model for the next assistant message (`request` is the create() params)."""

    agent: Any
    request: dict[str, Any]
    debug: bool = False


@dataclass
class ToolInvocation:
    """Effect: run one tool call of the assistant's message against the run's context.

    `batch` holds every call of the message with its function, so a runtime may start the
    sub-agents of a message together (fan-out) and join them in order."""

    agent: Any
    call: dict[str, Any]
    function: Callable[..., Any] | None
    context_variables: dict[str, Any] = field(default_factory=dict)
    debug: bool = False
    batch: list[tuple[dict[str, Any], Callable[..., Any] | None]] = field(default_factory=list)


@dataclass
class WaitForInput:
    """Effect: wait for the person. `kind` is `"input"` (the result is their answer, a str) or
    `"approval"` (the result is their decision on `call`, see `human.Decision`)."""

    kind: str
    agent: Any
    prompt: str = ""
    call: dict[str, Any] | None = None


@dataclass
class Transition:
    """Effect: record a handoff or an after-work decision: `rule` fired, `source` -> `target`."""

    source: str | None
    target: str | None
    rule: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """As stored in a run's log."""
        return {
            "source": self.source,
            "target": self.target,
            "rule": self.rule,
            "reason": self.reason,
        }


@dataclass
class ListTools:
    """Effect: the tools `source` (a `ToolSource`, e.g. an MCP server) offers, as JSON. Asked
    once per run and source; the run keeps offering that list even if the server changes."""

    agent: Any
    source: ToolSource


Effect = (
    ModelCall
    | ToolInvocation
    | WaitForInput
    | Transition
    | ListTools
    | CheckGuardrail
    | Parallel
    | Summarize
)
Loop = Generator[Effect, Any, Response]


@dataclass(frozen=True)
class RunRequest:
    """One run's input, built once by the facade that starts it (`Swarm.run`,
    `DurableSwarm.start`, ... take these as arguments) and read by the turn loop and the durable
    runtime.

    The first eight fields are Swarm's `run` arguments, in Swarm's order; `after_work` and
    `agents` are the swarm-level handoff options (see `turn_loop`); `run_id` names a durable run
    (None: a new one) and `budget` limits it (None: the swarm's default); an in-memory `Swarm`
    refuses both. `session` names the conversation the run continues (its facade puts the
    session's messages before `messages`), `compact_at` its token budget (see
    `durable_swarm.compaction`). `messages` and `context_variables` are the caller's objects:
    whoever stores or changes them copies them.
    """

    agent: Any
    messages: list[dict[str, Any]]
    context_variables: dict[str, Any] | None = None
    model_override: str | None = None
    stream: bool = False
    debug: bool = False
    max_turns: float = float("inf")
    execute_tools: bool = True
    after_work: Any = None
    agents: Sequence[Any] = ()
    run_id: str | None = None
    budget: Budget | None = None
    session: str | None = None
    compact_at: int | str | None = None


@dataclass
class RunState:
    """What the loop knows: the active agent, the whole history and the context."""

    agent: Any
    history: list[dict[str, Any]]
    context: dict[str, Any]
    agents: dict[str, Any] = field(default_factory=dict)
    tool_lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The tool list of each `ToolSource` (by name), as listed the first time the run met it."""
    output: Any = None
    """The validated, typed final answer of `output_agent` (an agent with an `output_type`),
    set when its answer validates; None until then and after any later model answer."""
    output_agent: Any = None
    output_failures: int = 0
    """How many answers did not validate since the last one that did (`Agent.output_retries`)."""


def known_agents(agent: Any, agents: Sequence[Any] = (), after_work: Any = None) -> dict[str, Any]:
    """A run's agents by name: the starting agent, `agents`, the after-work agent and every agent
    their handoff rules name, transitively. Two different definitions under one name raise
    `DuplicateAgentError` naming both, before the run does anything."""
    seen: set[int] = set()
    found: list[Any] = []
    todo = [agent, *agents, after_work]
    while todo:
        item = todo.pop(0)
        if isinstance(item, AfterWork):
            item = item.agent
        if not is_agent(item) or id(item) in seen:
            continue
        seen.add(id(item))
        found.append(item)
        for rule in getattr(item, "handoffs", None) or []:
            todo.append(rule.agent if isinstance(rule, AfterWork) else rule.target)
    return _registry.unique_by_name(found, "in this run")


def _rules(agent: Any, kind: type) -> list[Any]:
    return [h for h in getattr(agent, "handoffs", None) or [] if isinstance(h, kind)]


def agent_functions(
    agent: Any,
    context: dict[str, Any],
    tool_lists: dict[str, list[dict[str, Any]]] | None = None,
) -> list[Callable[..., Any]]:
    """The tools offered to `agent` now: its functions, its skills' tools, the tools of its
    `ToolSource`s as listed in `tool_lists` (by source name), and the transfers of its
    `OnCondition` rules that are available in `context`."""
    functions = [f for f in agent.functions if not isinstance(f, ToolSource)]
    skills = getattr(agent, "skills", None)
    if skills:
        from .toolkit import skill_tools

        functions += skill_tools(skills, functions)
    sources = [f for f in agent.functions if isinstance(f, ToolSource)]
    conditions = _rules(agent, OnCondition)
    if sources:  # their tools may not take a transfer's name, available now or not
        from .toolkit import source_tools

        functions += source_tools(sources, tool_lists or {}, functions, handoffs=conditions)
    functions += [rule.transfer_function() for rule in conditions if holds(rule.available, context)]
    return functions


def _instructions(agent: Any, history: Sequence[dict[str, Any]], context: dict[str, Any]) -> str:
    updates = [
        u
        for u in [
            *(getattr(agent, "update_agent_state_before_reply", None) or []),
            agent.instructions,
        ]
        if isinstance(u, UpdateSystemMessage)
    ]
    instructions = agent.instructions
    if updates:
        text = updates[-1].render(agent, history, context)
    elif callable(instructions):
        try:
            takes_context = bool(inspect.signature(instructions).parameters)
        except (TypeError, ValueError):
            takes_context = True
        ctx = defaultdict(str, context)
        text = str(instructions(ctx) if takes_context else instructions())
    else:
        text = str(instructions)
    skills = getattr(agent, "skills", None)
    if skills:
        from .toolkit import skill_instructions

        text = "\n\n".join(t for t in (text, skill_instructions(skills)) if t)
    return text


def _list_tools(state: RunState) -> Generator[Effect, Any, None]:
    """Ask each `ToolSource` of the active agent that this run has not met yet for its tools."""
    for source in state.agent.functions:
        if isinstance(source, ToolSource) and source.name not in state.tool_lists:
            state.tool_lists[source.name] = yield ListTools(state.agent, source)


def build_request(state: RunState, model_override: str | None, stream: bool) -> dict[str, Any]:
    """The `chat.completions.create` parameters for the active agent's turn (as Swarm sends)."""
    agent = state.agent
    tools = [model_tool_schema(f) for f in agent_functions(agent, state.context, state.tool_lists)]
    request: dict[str, Any] = {
        "model": model_override or agent.model,
        "messages": [
            {"role": "system", "content": _instructions(agent, state.history, state.context)},
            *state.history,
        ],
        "tools": tools or None,
        "tool_choice": agent.tool_choice,
        "stream": stream,
    }
    if tools:
        request["parallel_tool_calls"] = agent.parallel_tool_calls
    return output.ask_for_output(agent, request)


def _find_agent(state: RunState, name: str) -> Any:
    if name in AfterWorkOption.__members__:
        return AfterWorkOption[name]
    return state.agents.get(name) or _registry.resolve(name)


def _context_handoffs(state: RunState) -> Generator[Effect, Any, None]:
    """Apply the active agent's `OnContextCondition` rules (first that holds wins), repeatedly."""
    for _ in range(MAX_CONTEXT_HOPS):
        rule = next(
            (
                r
                for r in _rules(state.agent, OnContextCondition)
                if holds(r.available, state.context) and holds(r.condition, state.context)
            ),
            None,
        )
        if rule is None:
            return
        target = rule.target
        if isinstance(target, str):
            target = _find_agent(state, target)
        elif not is_agent(target) and callable(target):
            target = call_flexibly(target, state.agent, state.history, state.context)
        if not is_agent(target) or target is state.agent:
            return
        yield Transition(state.agent.name, target.name, "context_condition", repr(rule.condition))
        state.agent = target
    raise DurableSwarmError(
        f"Context-condition handoffs went round {MAX_CONTEXT_HOPS} times without a model turn "
        f"(last agent {state.agent.name!r}). Check the OnContextCondition rules for a cycle."
    )


def _run_tools(
    state: RunState, calls: list[dict[str, Any]], debug: bool
) -> Generator[Effect, Any, tuple[Any, str]]:
    """Run the message's tool calls in order; return the last handoff: (target, tool name).
    The context updates of returned `Result`s are merged after the last call, in call order."""
    functions = {
        tool_name(f): f for f in agent_functions(state.agent, state.context, state.tool_lists)
    }
    batch = [(call, functions.get(call["function"]["name"])) for call in calls]
    blocked = yield from guardrails.before_tools(state, batch)  # {} without tool guardrails
    batch = [(call, function) for call, function in batch if id(call) not in blocked]
    target: tuple[Any, str] = (None, "")
    updates: dict[str, Any] = {}
    for call in calls:
        if id(call) in blocked:
            state.history.append(blocked[id(call)])
            continue
        function = functions.get(call["function"]["name"])
        if function is not None and tool_spec(function).needs_approval:
            decision = Decision.from_json((yield WaitForInput("approval", state.agent, call=call)))
            if not decision.approved:
                state.history.append(tool_message(call, decision.tool_message(call)))
                continue
        outcome: ToolOutcome = yield ToolInvocation(
            state.agent, call, function, state.context, debug, batch
        )
        outcome = yield from guardrails.after_tool(state, call, function, outcome)
        message = outcome.message
        if outcome.ask is not None:
            answer = yield WaitForInput("input", state.agent, prompt=outcome.ask, call=call)
            message = {**message, "content": str(answer)}
        state.history.append(message)
        state.context = outcome.context_variables
        updates.update(outcome.updates)
        if outcome.agent is not None:
            target = (outcome.agent, call["function"]["name"])
    state.context.update(updates)
    return target


def _check_output(
    state: RunState, message: dict[str, Any], run_id: str | None
) -> output.Checked | None:
    """Check a final answer against the active agent's `output_type` (None: nothing to check);
    append what answers it (see `output.check`). A valid answer becomes `state.output`; an
    invalid one is sent back, up to the agent's `output_retries` times since the last valid one,
    then the run fails with `OutputValidationError`."""
    state.output = state.output_agent = None
    checked = output.check(state.agent, message)
    if checked is None:
        return None
    state.history.extend(checked.replies)
    if checked.ok:
        state.output, state.output_agent, state.output_failures = checked.value, state.agent, 0
        return checked
    state.output_failures += 1
    retries = getattr(state.agent, "output_retries", 2)
    if state.output_failures > retries:
        raise OutputValidationError(
            agent=state.agent.name,
            output_type=output.shape_of(state.agent.output_type).name,
            problems=checked.error,
            answers=state.output_failures,
            run_id=run_id,
        )
    return checked


def _after_work(state: RunState, swarm_after_work: Any) -> tuple[Any, str, str]:
    own = _rules(state.agent, AfterWork)
    if own:
        return own[-1].agent, "after_work", f"{state.agent.name} answered without a tool call"
    if swarm_after_work is not None:
        target = swarm_after_work
        target = target.agent if isinstance(target, AfterWork) else target
        return target, "swarm_after_work", f"{state.agent.name} answered without a tool call"
    return None, "", ""


def _hand_over(
    state: RunState, target: Any, rule: str, reason: str, turns_left: bool = True
) -> Generator[Effect, Any, bool]:
    """Move the run on to `target` (agent, name, option or callable); False ends the run.
    Once `max_turns` is spent (`turns_left` false) nobody is asked for input any more."""
    if target is None:
        return rule == "tool"
    if isinstance(target, str):
        target = _find_agent(state, target)
    if not is_agent(target) and not isinstance(target, AfterWorkOption) and callable(target):
        target = call_flexibly(target, state.agent, state.history, state.context)
        return (yield from _hand_over(state, target, rule, reason, turns_left))
    if isinstance(target, AfterWorkOption):
        yield Transition(state.agent.name, None, rule, f"{target.value} ({reason})")
        if target is AfterWorkOption.REVERT_TO_USER and not turns_left:
            return False
        if target is AfterWorkOption.REVERT_TO_USER:
            last = state.history[-1].get("content") if state.history else ""
            answer = yield WaitForInput("input", state.agent, prompt=str(last or ""))
            state.history.append({"role": "user", "content": str(answer)})
        return target is not AfterWorkOption.TERMINATE
    if target is not state.agent:
        yield Transition(state.agent.name, target.name, rule, reason)
        state.agent = target
    return True


def turn_loop(run: RunRequest) -> Loop:
    """Swarm's run loop (with handoff rules) as a generator of effects; returns the `Response`.

    `max_turns` counts the messages this run appends (Swarm's behaviour, which evals rely on).
    Several tool calls in one message run in order; the last handoff wins. `after_work` is the
    swarm-level after-work for agents without their own; `agents` name the agents that string
    targets may refer to, with the agents the handoff rules name (others are found in the
    registry); two different agents under one name raise `DuplicateAgentError`. The loop does
    not read `budget` (the durable facade stores it with the run); `run_id` only names the run
    in a `GuardrailTripped` error. Input guardrails are asked before anything else (or with the
    first model call), output guardrails once the run has its final answer.
    """
    debug, max_turns = run.debug, run.max_turns
    state = RunState(
        run.agent,
        copy.deepcopy(list(run.messages)),
        copy.deepcopy(run.context_variables or {}),
        known_agents(run.agent, run.agents, run.after_work),
    )
    init_len = len(state.history)
    window = Window(run.compact_at)  # what the model sees of the history (all, if no budget)
    parallel = yield from guardrails.check_input(state, run.run_id, run.stream)
    while len(state.history) - init_len < max_turns and state.agent:
        yield from _context_handoffs(state)
        yield from _list_tools(state)
        request = build_request(state, run.model_override, run.stream)
        request = yield from window.fit(state.agent, state.history, request)
        debug_print(debug, "Getting chat completion for...:", request["messages"])
        call = ModelCall(state.agent, request, debug)
        message = yield from guardrails.alongside(call, parallel, run.run_id)
        parallel = []
        del request, call  # not kept alive while the run waits for a person below
        debug_print(debug, "Received completion:", message)
        state.history.append(message)
        if not run.execute_tools:
            break
        checked = _check_output(state, message, run.run_id)
        if checked is not None and not checked.ok:
            continue  # the error is in the history: the same agent answers again
        if checked is not None:
            target, rule, reason = _after_work(state, run.after_work)
        elif message.get("tool_calls"):
            target, tool = yield from _run_tools(state, message["tool_calls"], debug)
            rule, reason = "tool", f"function {tool} returned it"
        else:
            target, rule, reason = _after_work(state, run.after_work)
        turns_left = len(state.history) - init_len < max_turns
        if not (yield from _hand_over(state, target, rule, reason, turns_left)):
            debug_print(debug, "Ending turn.")
            break
    yield from guardrails.remaining(parallel, run.run_id)  # no model call to go with
    # The final answer (or the typed output) is checked by the output guardrails.
    yield from guardrails.check_output(state, state.history[init_len:], run.run_id)
    return Response(
        messages=state.history[init_len:],
        agent=state.agent,
        context_variables=state.context,
        output=state.output if state.output_agent is state.agent else None,
    )
