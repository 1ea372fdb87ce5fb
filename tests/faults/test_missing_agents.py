"""Missing agents wait: a run whose agent no live process has stays pending with a reason any
process can read, on the queue path and on the recovery path, and finishes once a process that
has the agent runs.

Both runs must still be pending, not failed, 60 s after their reasons appear;
`DURABLE_SWARM_TEST_MISSING_HORIZON` may shorten that horizon for a quick look by hand.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from durable_swarm.durable import DurableClient

from .conftest import TIMEOUT, Model, Proc, result, starts, wait_for

HORIZON = float(os.environ.get("DURABLE_SWARM_TEST_MISSING_HORIZON", "60"))
BEAT, DEAD = 0.3, 3.0
QUEUE = "haunted"


def test_a_run_whose_agent_no_process_has_waits_then_finishes(
    start: Callable[..., Proc],
    make_database_url: Callable[[str], str],
    model: Model,
    work_dir: Path,
) -> None:
    url = make_database_url("ghost")
    timing = {"database_url": url, "heartbeat_interval": BEAT, "dead_after": DEAD}
    serving = {**timing, "queue": QUEUE, "poll_interval": 0.1}
    plain = start("plain", "_serve.py", **serving)
    plain.wait_output("serving queue")
    # Recovery path: a process that has Ghost dies inside Ghost's tool.
    (work_dir / "hold-rec").touch()
    haunted = start("haunted", "_plain.py", agent="Ghost", tags=["rec"], **timing)
    wait_for(lambda: starts(work_dir, "rec") == 1, "Ghost's tool", procs=(haunted,))
    haunted.signal(signal.SIGKILL)
    haunted.kill()
    (work_dir / "hold-rec").unlink()
    with DurableClient(url) as client:
        # Queue path: a thin client puts a run for Ghost on the worker's queue.
        queued = client.start("Ghost", [{"role": "user", "content": "step q"}], queue=QUEUE)

        def problems() -> dict[str, str | None]:
            return {r: client.get_run(r).problem for r in ("rec", queued.run_id)}

        found = wait_for(lambda: all(problems().values()) and problems(), "the notices",
                         procs=(plain,))  # fmt: skip
        for problem in found.values():
            assert 'waiting for agent "Ghost": import it in a worker' in (problem or "")
        deadline = time.monotonic() + HORIZON
        while time.monotonic() < deadline:
            for run_id in ("rec", queued.run_id):
                assert client.get_run(run_id).status == "pending", run_id
            time.sleep(0.5)
        assert model.arrivals("q", 0) == 0  # nothing ran without the agent
        assert 'waiting for agent "Ghost"' in plain.output()

        # A process that has Ghost starts: both runs finish.
        start("ghostly", "_serve.py", target="_ghost:client", **serving).wait_output(
            "serving queue"
        )
        answer = queued.result(timeout=TIMEOUT * 2)
        assert answer.messages[-1]["content"] == "done q"
        wait_for(lambda: client.get_run("rec").status == "succeeded", "the recovered run",
                 timeout=TIMEOUT * 2)  # fmt: skip
        assert client.get_run("rec").messages[-1]["content"] == "done rec"
        assert client.get_run("rec").problem is None
    assert starts(work_dir, "q") == 1
    assert starts(work_dir, "rec") == 2  # in flight at the kill: tools run at least once
    assert model.arrivals("rec", 0) == 1  # the finished model call was not made again
    assert result(work_dir, "rec") is None  # its first process died before the end
