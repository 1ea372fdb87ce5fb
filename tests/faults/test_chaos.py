"""Chaos: eight concurrent runs while workers are SIGKILLed at random moments eight times (each
replaced by a new one): every run succeeds with the uninterrupted transcript and its steps
recorded once, and nothing is left pending."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from durable_swarm.durable import DurableClient

from .conftest import TIMEOUT, Model, Proc, starts, wait_for, worker_settings

BEAT, DEAD = 0.3, 2.0
QUEUE = "chaos"
KILLS = 8


def test_runs_survive_random_kills(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
    backend: str,
) -> None:
    url = make_database_url("chaos")
    model.delay = 0.3  # each run takes a few tenths of a second per model call
    settings = worker_settings(url, QUEUE, BEAT, DEAD)
    chance = random.Random(f"chaos-{backend}")
    workers = [start(f"w{i}", "_serve.py", **settings) for i in range(2)]
    for worker in workers:
        worker.wait_output("serving queue")
    tags = [f"x{i}" for i in range(8)]
    with DurableClient(url) as client:
        runs = {
            tag: client.start("Stepper", [{"role": "user", "content": f"step {tag}"}], queue=QUEUE)
            for tag in tags
        }
        for _ in range(KILLS):
            time.sleep(chance.uniform(0.1, 0.8))  # a random moment (the fault, not a check)
            victim = chance.choice([w for w in workers if w.poll() is None])
            victim.signal(signal.SIGKILL)
            victim.kill()
            workers.append(start(f"w{len(workers)}", "_serve.py", **settings))
            workers[-1].wait_output("serving queue")
        for tag, handle in runs.items():
            answer = handle.result(timeout=TIMEOUT * 2)
            assert [m.get("role") for m in answer.messages] == ["assistant", "tool", "assistant"]
            assert answer.messages[1]["content"] == f"stepped {tag}"
            assert answer.messages[-1]["content"] == f"done {tag}"
            info = client.get_run(handle.run_id)
            assert info.status == "succeeded"
            assert [(s.kind, s.name) for s in info.steps if s.kind in ("model", "tool")] == [
                ("model", "Stepper"),
                ("tool", "step"),
                ("model", "Stepper"),
            ]
        wait_for(lambda: client._dbos.list_workflows(status=["PENDING", "ENQUEUED"]) == [],
                 "nothing pending")  # fmt: skip
    for tag in tags:
        assert starts(work_dir, tag) >= 1
    print(
        f"chaos ({backend}): {KILLS} kills; tool starts "
        f"{sum(starts(work_dir, t) for t in tags)} for {len(tags)} runs; model requests "
        f"{sum(model.arrivals(t, s) for t in tags for s in (0, 1))} for {2 * len(tags)} calls"
    )
