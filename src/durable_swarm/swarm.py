"""`Swarm`: the in-memory client, a drop-in for OpenAI's `swarm.Swarm`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from .loop import turn_loop
from .runtime import InMemoryRuntime, adrive, adrive_stream, drive, drive_stream
from .types import Agent

__all__ = ["Swarm"]


def _default_client() -> Any:
    from openai import OpenAI

    return OpenAI()


class Swarm:
    """Runs agents in memory, exactly as OpenAI's Swarm does.

    `client` is any object with `chat.completions.create(**params)` (an `openai.OpenAI`, an
    `openai.AsyncOpenAI`, or a test double); without one, `openai.OpenAI()` is created, which reads
    `OPENAI_API_KEY` and `OPENAI_BASE_URL`.
    """

    def __init__(self, client: Any = None) -> None:
        self.client = client if client else _default_client()

    def run(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        model_override: str | None = None,
        stream: bool = False,
        debug: bool = False,
        max_turns: float = float("inf"),
        execute_tools: bool = True,
    ) -> Any:
        """Run `agent` on `messages` until it answers without calling a tool.

        Returns a `Response` with only the new messages, the agent the run ended on and the
        updated context variables; with `stream=True`, a generator of Swarm's stream events whose
        last item is `{"response": Response}`. The caller's `messages` and `context_variables`
        are never modified.
        """
        loop = turn_loop(
            agent, messages, context_variables, model_override, stream, debug, max_turns,
            execute_tools,
        )
        runtime = InMemoryRuntime(self.client)
        return drive_stream(loop, runtime) if stream else drive(loop, runtime)

    def run_and_stream(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        model_override: str | None = None,
        debug: bool = False,
        max_turns: float = float("inf"),
        execute_tools: bool = True,
    ) -> Iterator[dict[str, Any]]:
        """`run(..., stream=True)` (Swarm's name for it)."""
        return self.run(  # type: ignore[no-any-return]
            agent, messages, context_variables, model_override, True, debug, max_turns,
            execute_tools,
        )

    async def arun(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        model_override: str | None = None,
        stream: bool = False,
        debug: bool = False,
        max_turns: float = float("inf"),
        execute_tools: bool = True,
    ) -> Any:
        """`run` for async code: `await swarm.arun(...)` returns a `Response`; with `stream=True`
        it returns an async iterator of the same events as `run(..., stream=True)`.
        `async def` tools are awaited; other tools run in a worker thread."""
        loop = turn_loop(
            agent, messages, context_variables, model_override, stream, debug, max_turns,
            execute_tools,
        )
        runtime = InMemoryRuntime(self.client)
        if stream:
            return adrive_stream(loop, runtime)
        return await adrive(loop, runtime)

    def astream(
        self,
        agent: Agent,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Async streaming without an `await` first: `async for event in swarm.astream(...)`."""
        loop = turn_loop(agent, messages, context_variables, stream=True, **kwargs)
        return adrive_stream(loop, InMemoryRuntime(self.client))

