"""`initiate_swarm_chat`: AG2's entry point to a swarm, on a `Swarm` or a `DurableSwarm`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .handoffs import AfterWork, AfterWorkOption
from .swarm import Swarm

__all__ = ["ChatResult", "initiate_swarm_chat"]


@dataclass
class ChatResult:
    """The outcome of `initiate_swarm_chat` (AG2's field names).

    `chat_history` holds the whole conversation (the given messages first); `summary` is the
    last message's text; `run_id` names the durable run (None in memory). `cost` has AG2's
    keys, `usage_including_cached_inference` and `usage_excluding_cached_inference` (the same
    here: there is no local response cache), each `{"total_cost": USD or None}`, plus `usage`,
    the chat's token usage (see `durable_swarm.usage.Usage`).
    """

    chat_history: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""
    cost: dict[str, Any] = field(default_factory=dict)
    human_input: list[str] = field(default_factory=list)
    run_id: str | None = None


def _user_input_fn(user_agent: Any) -> Any:
    """An in-memory input function from AG2's user agent (or a plain callable)."""
    ask = getattr(user_agent, "get_human_input", None)
    if callable(ask):
        return ask
    return user_agent if callable(user_agent) else None


def initiate_swarm_chat(
    initial_agent: Any,
    agents: Sequence[Any],
    messages: str | list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    max_rounds: int = 20,
    after_work: Any = None,
    user_agent: Any = None,
    swarm: Any = None,
    *,
    run_id: str | None = None,
    model_override: str | None = None,
) -> tuple[ChatResult, dict[str, Any], Any]:
    """Run a swarm chat from `initial_agent`; returns `(result, context_variables, last_agent)`.

    `messages` is a string (the user's first message) or a list of message dicts. `agents` are
    the swarm's agents (handoffs may name them). `max_rounds` bounds the messages the chat adds.
    `after_work` (default: `AfterWork(AfterWorkOption.TERMINATE)`) applies to agents without
    their own. It runs on `swarm`, a `Swarm` (the default, in memory) or a `DurableSwarm`, where
    the chat is a durable run (`run_id` names it; `REVERT_TO_USER` then waits for `send_input`).
    In memory, the person answers through `user_agent` (a callable, or an object with
    `get_human_input(prompt)`), else through the swarm's own `input_fn` (the terminal).
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if after_work is None:
        after_work = AfterWork(AfterWorkOption.TERMINATE)
    if swarm is None:
        swarm = Swarm(input_fn=_user_input_fn(user_agent))
    elif user_agent is not None and isinstance(swarm, Swarm):
        swarm.input_fn = _user_input_fn(user_agent) or swarm.input_fn
    durable = {}
    if hasattr(swarm, "send_input"):
        run_id = run_id or str(uuid.uuid4())
        durable = {"run_id": run_id}
    response = swarm.run(
        initial_agent,
        messages,
        context_variables,
        model_override=model_override,
        max_turns=max_rounds,
        after_work=after_work,
        agents=list(agents),
        **durable,
    )
    history = [*messages, *response.messages]
    answers = [m.get("content") or "" for m in response.messages if m.get("role") == "user"]
    usage = response.usage.to_json() if response.usage is not None else {}
    total = {"total_cost": usage.get("cost_usd")}
    result = ChatResult(
        chat_history=history,
        cost={
            "usage_including_cached_inference": dict(total),
            "usage_excluding_cached_inference": dict(total),
            "usage": usage,
        },
        summary=str(history[-1].get("content") or "") if history else "",
        human_input=answers,
        run_id=run_id,
    )
    return result, response.context_variables, response.agent
