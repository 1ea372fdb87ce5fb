"""Decisions are atomic: of concurrent approve/approve or approve/reject calls on one tool call
(threads or processes), exactly one takes effect and every other caller is told what was
decided, by whom and when."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import Agent
from durable_swarm.errors import DecisionConflictError, DurableSwarmError
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import tool

from ._decider import decision
from .conftest import HERE, TIMEOUT, wait_for

TRIALS = 50
executed: list[str] = []


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    executed.append(str(amount))
    return f"paid {amount}"


payer = Agent(name="Payer", functions=[pay])


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return calls(ToolCall("pay", {"amount": 5}, id="c1"))
    return text(f"result: {results[-1]['content']}")


def _waiting_runs(swarm: Any, label: str) -> list[str]:
    run_ids = [f"{label}-{uuid.uuid4().hex[:8]}" for _ in range(TRIALS)]
    for run_id in run_ids:
        swarm.start(payer, [{"role": "user", "content": "pay"}], run_id=run_id)
    wait_for(
        lambda: all(swarm.get_run(r).status == "waiting_for_approval" for r in run_ids),
        "every run to wait for approval",
    )
    return run_ids


def _check(swarm: Any, run_id: str, outcomes: dict[str, Any]) -> None:
    """Exactly one winner; every loser was told the winner's decision; the run did it."""
    winners = [name for name, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1, (run_id, outcomes)
    winner = winners[0]
    for name, outcome in outcomes.items():
        if name != winner:
            assert outcome["by"] == winner, (run_id, outcomes)
            assert outcome["approved"] == name_approves(winner), (run_id, outcomes)
    response = swarm.handle(run_id).result()
    paid = response.messages[-1]["content"] == "result: paid 5"
    assert paid == name_approves(winner), (run_id, response.messages[-1])


def name_approves(name: str) -> bool:
    return name.startswith("approve")


@pytest.mark.parametrize("pair", [("approve-a", "approve-b"), ("approve-a", "reject-b")])
def test_threads_racing_to_decide_one_call_get_exactly_one_winner(
    durable_swarm_factory: Callable[..., Any], pair: tuple[str, str]
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    run_ids = _waiting_runs(swarm, "threads")
    for run_id in run_ids:
        barrier = threading.Barrier(len(pair))
        outcomes: dict[str, Any] = {}

        def decide(
            name: str,
            run_id: str = run_id,
            barrier: threading.Barrier = barrier,
            outcomes: dict[str, Any] = outcomes,
        ) -> None:
            barrier.wait()
            outcomes[name] = decision(swarm, run_id, name_approves(name), name)

        threads = [threading.Thread(target=decide, args=(name,)) for name in pair]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        _check(swarm, run_id, outcomes)
    # A late decision on a call decided earlier is told, too; an unknown call is an error.
    with pytest.raises(DecisionConflictError, match="was already"):
        swarm.reject(run_ids[0], "c1", by="late")
    with pytest.raises(DurableSwarmError, match="not waiting for approval"):
        swarm.approve(run_ids[0], "nope")


def test_processes_racing_to_decide_one_call_get_exactly_one_winner(
    durable_swarm_factory: Callable[..., Any], database_url: str, tmp_path: Path
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    run_ids = _waiting_runs(swarm, "procs")
    names = ["approve-a", "reject-b"]

    def config(name: str) -> str:
        return json.dumps(
            {
                "dir": str(tmp_path),
                "name": name,
                "approve": name_approves(name),
                "racers": len(names),
                "runs": run_ids,
                "database_url": database_url,
            }
        )

    racers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_decider.py"), config(name)],
            cwd=HERE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    results = {}
    for name, racer in zip(names, racers, strict=True):
        out, _ = racer.communicate(timeout=TIMEOUT * 4)
        assert racer.returncode == 0, out
        results[name] = json.loads(out.strip().splitlines()[-1])
    for run_id in run_ids:
        _check(swarm, run_id, {name: results[name][run_id] for name in names})
