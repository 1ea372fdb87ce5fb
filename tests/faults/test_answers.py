"""Answers are atomic too: of two answers sent to one question at the same moment (a double
click, two operators), the run takes exactly one, and the other sender is told so, with who
answered and what, instead of hearing "sent" while DBOS drops the message."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from durable_swarm import Agent, DurableSwarmError, ask_user
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

from .conftest import TIMEOUT, wait_for

TRIALS = 30
asker = Agent(name="Asker", functions=[ask_user])


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return calls(ToolCall("ask_user", {"question": "Your name?"}, id="q1"))
    return text(f"Hello {results[-1]['content']}")


def test_threads_racing_to_answer_one_question_get_exactly_one_winner(
    durable_swarm_factory: Callable[..., Any],
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    run_ids = [f"answers-{uuid.uuid4().hex[:8]}" for _ in range(TRIALS)]
    for run_id in run_ids:
        swarm.start(asker, [{"role": "user", "content": "hi"}], run_id=run_id)
    wait_for(
        lambda: all(swarm.get_run(r).status == "waiting_for_input" for r in run_ids),
        "every run to ask its question",
    )
    for run_id in run_ids:
        barrier = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def answer(
            name: str,
            run_id: str = run_id,
            barrier: threading.Barrier = barrier,
            outcomes: dict[str, str] = outcomes,
        ) -> None:
            barrier.wait()
            try:
                swarm.send_input(run_id, name, by=name)
                outcomes[name] = "sent"
            except DurableSwarmError as e:
                outcomes[name] = str(e)

        threads = [threading.Thread(target=answer, args=(name,)) for name in ("ada", "bob")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        winners = [name for name, outcome in outcomes.items() if outcome == "sent"]
        assert len(winners) == 1, (run_id, outcomes)
        (loser,) = {"ada", "bob"} - set(winners)
        assert run_id in outcomes[loser] and "answer" in outcomes[loser], outcomes
        response = swarm.handle(run_id).result()
        assert response.messages[-1]["content"] == f"Hello {winners[0]}", (run_id, outcomes)
