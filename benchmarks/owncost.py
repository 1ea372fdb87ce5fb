"""The durable run's own Python per run, with DBOS and the HTTP call taken out.

`runcost.py` measures a whole run (DBOS, the database driver, the `openai` client and ours) on a
machine whose load makes one round's ratio spread widely. This one measures only what the
library itself adds, in one thread, without I/O: the same scenario as `runcost.py` (model -> sync
tool -> model) run through the facade's input checks, the turn loop, the durable runtime's step
bodies and bookkeeping, the log serializer (every step output, the workflow's input and output),
and the response, with DBOS's step calls replaced by a direct call plus serialization and the
model client by one that returns ready `ChatCompletion`s. The baseline is `_common.bare_run`'s
own body under the same stubs. It prints microseconds of CPU per run (median of interleaved
rounds) for both, and the serializer's share.

    .venv/bin/python benchmarks/owncost.py            # 15 rounds of 300 runs
    .venv/bin/python benchmarks/owncost.py --quick    # 5 rounds of 100 runs
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _common
import runcost
from _common import median, print_table
from openai.types.chat import ChatCompletion

from durable_swarm.durable import _workflow
from durable_swarm.durable._log import JsonSerializer
from durable_swarm.durable._spec import RunSpec
from durable_swarm.durable._swarm import DurableSwarm, _response
from durable_swarm.loop import RunRequest


def _completion(message: dict[str, Any], finish: str, tokens: int) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-own",
            "object": "chat.completion",
            "created": 0,
            "model": "bench-model",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 9, "total_tokens": tokens + 9},
        }
    )


CALL = {"id": "call_own", "type": "function"}
CALL["function"] = {"name": "lookup_sync", "arguments": '{"i": 0}'}
FIRST = _completion({"role": "assistant", "content": None, "tool_calls": [CALL]}, "tool_calls", 30)
SECOND = _completion({"role": "assistant", "content": runcost.ANSWER}, "stop", 60)


class _Completions:
    async def create(self, **request: Any) -> ChatCompletion:
        return SECOND if any(m.get("role") == "tool" for m in request["messages"]) else FIRST


class _Chat:
    completions = _Completions()


class Client:
    """A model client without HTTP: the script's two answers, ready made."""

    chat = _Chat()


SERIALIZER = JsonSerializer()
SERIALIZED = [0.0]  # CPU seconds spent in the serializer


def _store(value: Any) -> None:
    start = time.thread_time()
    SERIALIZER.serialize(value)
    SERIALIZED[0] += time.thread_time() - start


class StubDBOS:
    """DBOS's step calls as a direct call whose output is serialized, as DBOS records it."""

    step_id = 1

    @staticmethod
    async def run_step_async(options: Any, func: Callable[..., Any], *args: Any) -> Any:
        output = func(*args)
        if inspect.isawaitable(output):
            output = await output
        _store(output)
        return output

    @staticmethod
    def run_step(options: Any, func: Callable[..., Any], *args: Any) -> Any:
        output = func(*args)
        _store(output)
        return output


async def _sync_step(options: Any, body: Callable[[], Any], executor: Any) -> Any:
    output = body()
    _store(output)
    return output


def stub_out_dbos() -> None:
    """Route the durable runtime's and the bare workflow's steps through `StubDBOS`."""
    _workflow.DBOS = StubDBOS  # type: ignore[assignment]
    _workflow.sync_step = _sync_step  # type: ignore[assignment]
    _common.DBOS = StubDBOS  # type: ignore[assignment]


async def main(args: argparse.Namespace) -> None:
    stub_out_dbos()
    client = Client()
    _common.BARE_CLIENT.update(client=client, sender=runcost.AGENT.name)
    bare_body = inspect.unwrap(_common.bare_run)  # the workflow function without DBOS
    with tempfile.TemporaryDirectory() as tmp:  # never launched: nothing is written there
        swarm = DurableSwarm(client=client, database_url=f"sqlite:///{Path(tmp) / 'own.sqlite'}")
        swarm.launch = lambda: swarm  # type: ignore[method-assign]

        async def durable() -> None:
            request = RunRequest(runcost.AGENT, runcost.MESSAGES)
            run_id, spec = swarm._spec(request)
            stored = spec.to_json()
            _store([stored])  # the workflow's input, read back as the workflow does
            output = await _workflow._run(run_id, RunSpec.from_json(stored))
            _store(output)
            response = _response(run_id, output)
            _workflow.HOST.forget(run_id)
            if response.messages[-1]["content"] != runcost.ANSWER:
                raise RuntimeError("unexpected answer")

        async def bare() -> None:
            _store([runcost.MESSAGES, "lookup_sync"])
            output = await bare_body(runcost.MESSAGES, "lookup_sync")
            _store(output)
            if output["messages"][-1]["content"] != runcost.ANSWER:
                raise RuntimeError("unexpected answer")

        kinds: dict[str, Callable[[], Awaitable[None]]] = {"durable": durable, "bare": bare}
        cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        serialized: dict[str, list[float]] = {kind: [] for kind in kinds}
        for round_ in range(args.rounds + 1):  # the first round warms up
            for kind, batch in kinds.items():
                SERIALIZED[0] = 0.0
                start = time.thread_time()
                for _ in range(args.runs):
                    await batch()
                if round_:
                    cpu[kind].append((time.thread_time() - start) / args.runs)
                    serialized[kind].append(SERIALIZED[0] / args.runs)
    rows = [
        [kind, f"{1e6 * median(cpu[kind]):.0f}", f"{1e6 * median(serialized[kind]):.0f}"]
        for kind in kinds
    ]
    added = 1e6 * (median(cpu["durable"]) - median(cpu["bare"]))
    print_table(
        f"Own Python per run (us of CPU), model -> sync tool -> model, DBOS and HTTP stubbed out, "
        f"median of {args.rounds} rounds of {args.runs} runs; the durable run adds {added:.0f} us",
        ["kind", "CPU us/run", "of it serializer"],
        rows,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds of 100 runs")
    parsed = parser.parse_args()
    parsed.rounds, parsed.runs = (5, 100) if parsed.quick else (15, 300)
    asyncio.run(main(parsed))
