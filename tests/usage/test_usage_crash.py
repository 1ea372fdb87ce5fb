"""Usage and budgets across a real crash: a child process runs `Spender` (`_crash_child.py`),
is killed with SIGKILL while a model call is in flight (held at the fake server, which runs in
this process so its counts survive), and a new process with the same executor id recovers the
run. The recovered run's usage is what the server sent for the calls it finished, and a budget
still stops it before the request that would go past it: the crash cannot reset it. A third
process resumes it with a higher budget and it finishes."""

from __future__ import annotations

import json
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _support.procs import CHILD_ENV, ScriptProcess, wait_for
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply, ToolCall, calls, text

pytestmark = pytest.mark.crash

TESTS_DIR = Path(__file__).resolve().parents[1]
TIMEOUT = 90.0
STAGES = 5  # four tool-calling answers, then the final one
HELD = 1  # the second model call is in flight when the first process is killed


def usage_of(stage: int) -> dict[str, int]:
    return {"prompt_tokens": 100 + stage, "completion_tokens": 10 + stage}


class Model:
    """Answers by stage (assistant messages so far), each with its own usage; the first request
    of stage `HELD` waits at the server long enough to be killed during it."""

    def __init__(self) -> None:
        self.arrivals: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        stage = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.arrivals[stage] += 1
            first = self.arrivals[stage] == 1
        answer = (
            text("finished", usage=usage_of(stage))
            if stage == STAGES - 1
            else calls(ToolCall("look", {"topic": str(stage)}), usage=usage_of(stage))
        )
        return Fault.delay(300.0, answer) if first and stage == HELD else answer

    def arrived(self, stage: int) -> int:
        with self._lock:
            return self.arrivals[stage]


class Child(ScriptProcess):
    """A `usage._crash_child` process; `result()` waits for it and reads what it left."""

    def __init__(self, name: str, work: Path, config: dict[str, Any]) -> None:
        self.result_path = work / f"{name}.result.json"
        config = {**config, "result": str(self.result_path)}
        super().__init__(name, "usage._crash_child", work, CHILD_ENV, config)

    def result(self) -> dict[str, Any]:
        code = self.proc.wait(timeout=TIMEOUT)
        assert code == 0, f"{self.name} exited with {code}:\n{self.output()[-6000:]}"
        data: dict[str, Any] = json.loads(self.result_path.read_text())
        return data


@contextmanager
def crash_setup(database_url: str, tmp_path: Path) -> Iterator[tuple[Any, Model, FakeOpenAIServer]]:
    model = Model()
    started: list[Child] = []
    base = {
        "database_url": database_url,
        "executor_id": f"usage-crash-{uuid.uuid4().hex[:8]}",
        "run_id": f"usage-crash-{uuid.uuid4().hex[:10]}",
    }

    def start(name: str, **config: Any) -> Child:
        child = Child(name, tmp_path, {**base, "base_url": server.base_url, **config})
        started.append(child)
        return child

    with FakeOpenAIServer(model) as server:
        try:
            yield start, model, server
        finally:
            for child in started:
                child.kill()


def crash_then_recover(start: Any, model: Model, **config: Any) -> dict[str, Any]:
    first = start("first", action="run", **config)
    wait_for(lambda: model.arrived(HELD), "the held model call", processes=[first])
    first.kill()
    assert first.proc.returncode == -signal.SIGKILL
    return start("second", action="recover", trace_file=config.get("trace_file")).result()


@pytest.fixture(scope="module")
def crash_database_url(make_database_url: Any) -> str:
    return make_database_url("usage_crash")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_usage_after_a_crash_is_what_the_server_sent(crash_database_url, tmp_path, stream):
    with crash_setup(crash_database_url, tmp_path) as (start, model, server):
        result = crash_then_recover(start, model, stream=stream, budget=None)
        assert server.request_count == STAGES + 1  # + the one in flight at the kill
    assert result["status"] == "succeeded"
    sent = [usage_of(stage) for stage in range(STAGES)]
    inputs = sum(u["prompt_tokens"] for u in sent)
    outputs = sum(u["completion_tokens"] for u in sent)
    assert result["usage"] == {
        "input_tokens": inputs,
        "output_tokens": outputs,
        "total_tokens": inputs + outputs,
        "cached_tokens": None,
        "model_calls": STAGES,
        "cost_usd": pytest.approx((inputs + outputs) * 1000 / 1e6),
    }


def test_a_budget_still_holds_after_a_crash_and_resume_finishes(crash_database_url, tmp_path):
    with crash_setup(crash_database_url, tmp_path) as (start, model, server):
        result = crash_then_recover(start, model, stream=False, budget={"max_model_calls": 3})
        assert result["status"] == "failed"
        assert "max_model_calls=3 reached (3)" in result["error"]
        assert [model.arrived(s) for s in range(STAGES)] == [1, 2, 1, 0, 0]
        assert result["usage"]["model_calls"] == 3

        resumed = start("third", action="resume", budget={"max_model_calls": 10}).result()
        assert resumed["status"] == "succeeded"
        assert [model.arrived(s) for s in range(STAGES)] == [1, 2, 1, 1, 1]
        assert resumed["usage"]["model_calls"] == STAGES
        assert server.request_count == STAGES + 1


def test_one_trace_across_a_crash_without_spans_for_replayed_steps(crash_database_url, tmp_path):
    traces = tmp_path / "spans.jsonl"
    with crash_setup(crash_database_url, tmp_path) as (start, model, _):
        result = crash_then_recover(start, model, stream=False, budget=None, trace_file=str(traces))
        assert result["status"] == "succeeded"
    spans = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len({s["trace_id"] for s in spans}) == 1  # both processes, one trace
    names = Counter(s["name"] for s in spans)
    # every model and tool call once: the finished ones of the killed process are not spanned
    # again when the new process replays them; the call in flight is made (and spanned) again
    assert names["chat priced-model"] == STAGES
    assert names["execute_tool look"] == STAGES - 1
    # the killed process's run span never ended; the recovered execution's is its child
    (resumed,) = [s for s in spans if s["name"] == "invoke_agent Spender"]
    first_chat = next(s for s in spans if s["name"].startswith("chat"))
    assert resumed["parent_id"] == first_chat["parent_id"]
