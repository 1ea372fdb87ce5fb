"""`Swarm`: the in-memory client, a drop-in for OpenAI's `swarm.Swarm`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import tracing
from ._signature import takes_run
from .compaction import check_compact_at
from .loop import Loop, RunRequest, turn_loop
from .runtime import InMemoryRuntime, adrive, adrive_stream, drive, drive_stream
from .sessions import MemorySessions, SessionInfo, check_session_name, session_loop
from .usage import Prices, check_prices

if TYPE_CHECKING:
    from .types import Agent

__all__ = ["Swarm"]


def _default_client() -> Any:
    from openai import OpenAI

    return OpenAI()


def run_arguments(
    agent: Agent,
    messages: list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    model_override: str | None = None,
    stream: bool = False,
    debug: bool = False,
    max_turns: float = float("inf"),
    execute_tools: bool = True,
    *,
    after_work: Any = None,
    agents: Sequence[Agent] = (),
    session: str | None = None,
    compact_at: int | str | None = None,
) -> RunRequest:
    """The arguments of `Swarm.run` and `arun` (Swarm's, in Swarm's order, then the swarm-level
    handoff options, the session and the compaction budget), as the `RunRequest` they make."""
    return RunRequest(
        agent, messages, context_variables, model_override, stream, debug, max_turns,
        execute_tools, after_work, agents, session=session, compact_at=compact_at,
    )  # fmt: skip


def streamed_run_arguments(
    agent: Agent,
    messages: list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    model_override: str | None = None,
    debug: bool = False,
    max_turns: float = float("inf"),
    execute_tools: bool = True,
) -> RunRequest:
    """The arguments of Swarm's `run_and_stream`: `run`'s without `stream` (it streams)."""
    return RunRequest(
        agent, messages, context_variables, model_override, True, debug, max_turns, execute_tools
    )


def default_model(model: str | None) -> str | None:
    """The model a swarm asks for instead of each agent's: `model`, else the environment
    variable `DURABLE_SWARM_MODEL`, else None (each agent's own `model`)."""
    return model or os.environ.get("DURABLE_SWARM_MODEL") or None


class Swarm:
    """Runs agents in memory, exactly as OpenAI's Swarm does.

    `client` is any object with `chat.completions.create(**params)` (an `openai.OpenAI`, an
    `openai.AsyncOpenAI`, or a test double); without one, `openai.OpenAI()` is created, which reads
    `OPENAI_API_KEY` and `OPENAI_BASE_URL`. `model` (else `DURABLE_SWARM_MODEL`) is asked for
    instead of every agent's own model, unless a run passes `model_override`. When a run needs
    the person (`REVERT_TO_USER`, `AskUser`, a tool that needs approval), `input_fn(prompt)` asks
    them (default: the terminal) and `approve_fn(tool_call)` decides approvals (default: a y/n
    question via `input_fn`).
    The handoffs of the latest run are in `transitions`. Each `Response` carries the run's token
    `usage` and cost; `prices` gives your own models' prices (USD per million tokens, see
    `durable_swarm.usage`), which take precedence over the public price table.

    `run(..., session="name")` continues a conversation: this swarm keeps its sessions in
    memory, for as long as the object lives (`list_sessions`, `get_session`, `clear_session`,
    `delete_session`; see `durable_swarm.sessions`). `compact_at` (tokens, or "auto") is the
    default token budget of runs, past which older messages are summarized, by a model call
    or by `compactor(messages) -> str` (see `durable_swarm.compaction`).
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str | None = None,
        input_fn: Callable[[str], str] | None = None,
        approve_fn: Callable[[dict[str, Any]], Any] | None = None,
        prices: Prices | None = None,
        compact_at: int | str | None = None,
        compactor: Callable[[list[dict[str, Any]]], str] | None = None,
    ) -> None:
        self.client = client if client else _default_client()
        self.model = default_model(model)
        self.input_fn = input_fn
        self.approve_fn = approve_fn
        self.prices = check_prices(prices)
        self.transitions: list[dict[str, Any]] = []
        self.compact_at = check_compact_at(compact_at)
        self.compactor = compactor
        self.sessions = MemorySessions()

    def _start(self, run: RunRequest) -> tuple[Loop, InMemoryRuntime]:
        """The turn loop of `run` (with this swarm's `model` unless it overrides it) and a new
        in-memory runtime for it; a driver of `durable_swarm.runtime` runs one on the other."""
        if run.run_id is not None or run.budget is not None:
            raise TypeError(
                "Swarm runs in memory and takes no `run_id` or `budget`; use DurableSwarm for "
                "named, budgeted runs."
            )
        compact_at = check_compact_at(run.compact_at) or self.compact_at
        runtime = InMemoryRuntime(self.client, self.input_fn, self.approve_fn, self.prices)
        runtime.compactor = self.compactor
        run = replace(run, model_override=run.model_override or self.model, compact_at=compact_at)
        name = None if run.session is None else check_session_name(run.session)
        runtime.trace = tracing.start_run(run.agent.name)
        self.transitions = runtime.transitions
        if name is None:
            return turn_loop(run), runtime
        run_id = self.sessions.new_run_id()

        def start(prior: list[dict[str, Any]]) -> tuple[Loop, list[dict[str, Any]]]:
            started = replace(run, messages=[*prior, *run.messages])
            return turn_loop(started), started.messages

        loop = session_loop(
            lambda: self.sessions.claim(name, run_id),
            start,
            runtime,
            lambda messages: self.sessions.finish(name, run_id, messages),
            lambda: self.sessions.release(name, run_id),
        )
        return loop, runtime

    def list_sessions(self) -> list[SessionInfo]:
        """This swarm's sessions (in memory), most recently changed first."""
        return self.sessions.list()

    def get_session(self, name: str) -> SessionInfo:
        """Session `name`: its messages and state (raises `SessionNotFoundError`)."""
        return self.sessions.get(name)

    def clear_session(self, name: str) -> None:
        """Forget session `name`'s messages (it stays, empty); refused while a run holds it."""
        self.sessions.clear(name)

    def delete_session(self, name: str) -> None:
        """Delete session `name`; refused (`SessionBusyError`) while a run holds it."""
        self.sessions.delete(name)

    @takes_run(run_arguments)
    def run(self, run: RunRequest) -> Any:
        """Run `agent` on `messages` until it answers without calling a tool.

        Returns a `Response` with only the new messages, the agent the run ended on and the
        updated context variables; with `stream=True`, a generator of Swarm's stream events whose
        last item is `{"response": Response}`. The caller's `messages` and `context_variables`
        are never modified. `after_work` (an `AfterWork`, `AfterWorkOption`, agent or callable)
        applies to agents without their own; `agents` lists agents that handoffs may name.
        """
        loop, runtime = self._start(run)
        return drive_stream(loop, runtime) if run.stream else drive(loop, runtime)

    @takes_run(streamed_run_arguments)
    def run_and_stream(self, run: RunRequest) -> Iterator[dict[str, Any]]:
        """`run(..., stream=True)` (Swarm's name for it)."""
        return drive_stream(*self._start(run))

    @takes_run(run_arguments)
    async def arun(self, run: RunRequest) -> Any:
        """`run` for async code: `await swarm.arun(...)` returns a `Response`; with `stream=True`
        it returns an async iterator of the same events as `run(..., stream=True)`.
        `async def` tools are awaited; other tools run in a worker thread."""
        loop, runtime = self._start(run)
        return adrive_stream(loop, runtime) if run.stream else await adrive(loop, runtime)

    def astream(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Async streaming without an `await` first: `async for event in swarm.astream(...)`."""
        run = RunRequest(agent, messages, context_variables, stream=True, **kwargs)
        return adrive_stream(*self._start(run))
