"""Helpers for tests that run durable runs in child processes and kill them.

* `_support.procs` has the fork server's client (`Zygote`, running `durable._child`) and the
  children; `Child` here adds the result and stream events a child wrote; `processes()` kills
  whatever a test left running.
* `ScenarioModel` is the fake server's script for `_scenarios`, with faults and holds.
* `wait_for` polls a condition (never fixed sleeps), failing early if a child died.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _support import procs
from _support.procs import TIMEOUT as CHILD_TIMEOUT
from durable_swarm import Response
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply

from . import _scenarios


def jsonable(value: Any) -> Any:
    """`value` as it looks after a JSON round trip (Responses and agents by name)."""

    def default(obj: Any) -> Any:
        if isinstance(obj, Response):
            return {
                "messages": obj.messages,
                "agent": getattr(obj.agent, "name", obj.agent),
                "context_variables": obj.context_variables,
            }
        return getattr(obj, "name", repr(obj))

    return json.loads(json.dumps(value, default=default))


def wait_for(
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float = CHILD_TIMEOUT,
    children: tuple[Child, ...] = (),
) -> Any:
    """Poll `condition` until it is truthy; fail early if one of `children` exits meanwhile."""
    return procs.wait_for(condition, what, timeout=timeout, processes=children)


class Zygote(procs.Zygote):
    """The fork server that starts this session's child processes (running `durable._child`)."""

    def __init__(self, log: Path) -> None:
        super().__init__(
            log, "durable._child", drop_env=(_scenarios.HANG_ENV, _scenarios.WORK_DIR_ENV)
        )


Processes = procs.Children


class Child(procs.Child):
    """A child process running `durable._child.run(config)`: with the result and stream events
    it wrote."""

    def __init__(self, zygote: procs.Zygote, name: str, work: Path, config: dict[str, Any]) -> None:
        self.events_path = work / f"{name}.events.jsonl"
        config = {
            **config,
            "result": str(work / f"{name}.result.json"),
            "events": str(self.events_path),
        }
        super().__init__(zygote, name, work, config)

    def finish(self, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:  # type: ignore[override]
        """Wait for the child to exit normally and return the result it wrote."""
        super().finish(timeout)
        return self.result()

    def events(self) -> list[Any]:
        """The stream events the child wrote so far (JSON lines; complete lines only)."""
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines]


@contextmanager
def processes(zygote: procs.Zygote, work: Path, **base: Any) -> Iterator[Processes]:
    """Children for one test (configured with `base`), all killed at the end."""
    with procs.children(zygote, work, base, Child) as group:
        yield group


class ScenarioModel:
    """The fake server's script for the scenario, with faults and points where it holds.

    `break_from(stage, fault)` serves `fault` to every request of that stage and later, until
    `repair()`. `hold(stage)` makes the first request of that stage wait `seconds` at the server
    before its (same) answer, so a test can kill the caller while the call is in flight; later
    requests of the stage (the retry after recovery) are answered at once. `slow_stream(stage)`
    spaces the chunks of the first streamed answer of that stage. `arrived(stage)` counts
    requests per stage.
    """

    def __init__(self) -> None:
        self.server: FakeOpenAIServer | None = None
        self._lock = threading.Lock()
        self._arrivals: dict[int, int] = {}
        self._held: dict[int, float] = {}
        self._slow: dict[int, float] = {}
        self._broken: tuple[int, Fault] | None = None

    def break_from(self, stage: int, fault: Fault) -> None:
        """Answer every request of `stage` and later with `fault` (until `repair()`)."""
        self._broken = (stage, fault)

    def repair(self) -> None:
        self._broken = None

    def hold(self, stage: int, seconds: float = 300.0) -> None:
        self._held[stage] = seconds

    def slow_stream(self, stage: int, chunk_delay: float) -> None:
        self._slow[stage] = chunk_delay

    def arrived(self, stage: int) -> int:
        with self._lock:
            return self._arrivals.get(stage, 0)

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Reply | Fault:
        answer = _scenarios.reply(messages, tools)
        stage = _scenarios.stage(messages)
        with self._lock:
            self._arrivals[stage] = first = self._arrivals.get(stage, 0) + 1
        if self._broken is not None and stage >= self._broken[0]:
            return self._broken[1]
        if self.server is not None and stage in self._slow:
            self.server.set_latency(0.0, chunk_delay=self._slow[stage] if first == 1 else 0.0)
        if first == 1 and stage in self._held:
            return Fault.delay(self._held[stage], answer)
        return answer


@contextmanager
def scenario_server(model: ScenarioModel | None = None) -> Iterator[FakeOpenAIServer]:
    """A FakeOpenAIServer (in this process, so its counts survive the children)."""
    model = model or ScenarioModel()
    server = FakeOpenAIServer(model)
    model.server = server
    with server:
        yield server
