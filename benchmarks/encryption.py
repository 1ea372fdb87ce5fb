"""The cost of encryption at rest per checkpoint: the same durable run with and without a key.

Scenario: an agent calls a tool T times (one call per turn, T = 20; --quick: 5), then answers;
each tool result and the context carry a few hundred bytes, so every checkpoint stores a
payload worth encrypting. Per database (SQLite, PostgreSQL), runs alternate between no key and
a key (AES-256-GCM), `--rounds` of each (default 15; --quick: 3). It prints the median wall time
and CPU time (this process) per checkpoint (a model or tool step) of each, and keyed/plain as a
ratio; the CPU time the run log's serializer took per checkpoint inside those runs (thread
time, every thread: where the encryption happens), and what it adds as a share of a
checkpoint's CPU; then the serializer alone: the time to write and to read one step's payload,
plain and sealed. On a shared 2-core machine the whole-run CPU ratio is noisier than the share
the serializer adds, which is measured directly.

    .venv/bin/python benchmarks/encryption.py
    .venv/bin/python benchmarks/encryption.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import threading
import time
from typing import Any

from _common import databases, median, print_table

from durable_swarm import Agent, DurableSwarm, Result
from durable_swarm.durable import _sealing, shutdown
from durable_swarm.durable._log import JsonSerializer
from durable_swarm.testing import AsyncScriptedClient, Reply, ToolCall, calls, text

MESSAGES = [{"role": "user", "content": "Take notes on the ledger, please. " * 8}]
KEY = f"bench:{base64.b64encode(os.urandom(32)).decode()}"


class SerializerClock:
    """Thread CPU time spent in the run log's serializer, in every thread (DBOS writes step
    outputs from its executor threads)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()
        for name in ("serialize", "deserialize"):
            original = getattr(JsonSerializer, name)

            def timed(serializer: Any, data: Any, original: Any = original) -> Any:
                started = time.thread_time()
                try:
                    return original(serializer, data)
                finally:
                    with self._lock:
                        self.seconds += time.thread_time() - started

            setattr(JsonSerializer, name, timed)

    def take(self) -> float:
        with self._lock:
            seconds, self.seconds = self.seconds, 0.0
        return seconds


CLOCK = SerializerClock()


def note(i: int) -> Result:
    """Take note number i."""
    return Result(value=f"noted {i}: " + "ledger line " * 30, context_variables={"last": i})


AGENT = Agent(name="encryption", model="bench-model", instructions="Note.", functions=[note])


def script(turns: int) -> Any:
    def reply(messages: list[dict[str, Any]], tools: Any) -> Reply:
        done = sum(1 for m in messages if m.get("role") == "tool")
        return calls(ToolCall("note", {"i": done})) if done < turns else text("All noted.")

    return reply


async def one_run(swarm: DurableSwarm, run_id: str) -> tuple[float, float, int]:
    """Wall and CPU seconds of one run, and its checkpoints."""
    wall, cpu = time.perf_counter(), time.process_time()
    CLOCK.take()
    response = await swarm.arun(AGENT, MESSAGES, run_id=run_id)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert response.messages[-1]["content"] == "All noted.", response.messages[-1]
    steps = (await swarm.aget_run(run_id)).steps
    return wall, cpu, sum(1 for s in steps if s.kind in ("model", "tool"))


async def measure(url: str, label: str, turns: int, rounds: int) -> dict[str, list[float]]:
    swarm = DurableSwarm(client=AsyncScriptedClient(script(turns)), database_url=url).launch()
    found: dict[str, list[float]] = {
        f"{kind} {what}": [] for kind in ("plain", "key") for what in ("wall", "cpu", "serializer")
    }
    for warm in range(2):  # warm up both paths
        for key in (None, KEY):
            _sealing.configure(key)
            await one_run(swarm, f"enc-warm-{label}-{warm}-{key is not None}")
    for i in range(rounds):
        for key in (None, KEY) if i % 2 == 0 else (KEY, None):
            _sealing.configure(key)
            wall, cpu, checkpoints = await one_run(swarm, f"enc-{label}-{i}-{key is not None}")
            kind = "key" if key else "plain"
            found[f"{kind} wall"].append(wall / checkpoints)
            found[f"{kind} cpu"].append(cpu / checkpoints)
            found[f"{kind} serializer"].append(CLOCK.take() / checkpoints)
    _sealing.configure(None)
    return found


def serializer_cost(samples: int) -> list[list[str]]:
    """Microseconds to write and read one tool step's payload, plain and sealed."""
    serializer = JsonSerializer()
    payload = {
        "message": {
            "role": "tool",
            "tool_call_id": "call_1",
            "tool_name": "note",
            "content": "noted 1: " + "ledger line " * 30,
        },
        "context_changes": {"set": {"last": 1}},
    }
    rows = []
    for key in (None, KEY):
        _sealing.configure(key)
        stored = serializer.serialize(payload)
        start = time.perf_counter()
        for _ in range(samples):
            serializer.serialize(payload)
        write = (time.perf_counter() - start) / samples * 1e6
        start = time.perf_counter()
        for _ in range(samples):
            serializer.deserialize(stored)
        read = (time.perf_counter() - start) / samples * 1e6
        rows.append(["sealed" if key else "plain", f"{write:.1f}", f"{read:.1f}", len(stored)])
    _sealing.configure(None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 5, 3 rounds")
    parser.add_argument("--turns", type=int, help="tool calls per run (default 20)")
    parser.add_argument("--rounds", type=int, help="runs of each kind (default 15)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    turns = args.turns or (5 if args.quick else 20)
    rounds = args.rounds or (3 if args.quick else 15)
    rows, shares = [], []
    with databases(postgres=not args.no_postgres) as dbs:
        for label, url in dbs:
            found = asyncio.run(measure(url, label, turns, rounds))
            plain_wall, key_wall = median(found["plain wall"]), median(found["key wall"])
            plain_cpu, key_cpu = median(found["plain cpu"]), median(found["key cpu"])
            rows.append([
                label,
                f"{plain_wall * 1e3:.2f}", f"{key_wall * 1e3:.2f}", f"{key_wall / plain_wall:.3f}x",
                f"{plain_cpu * 1e3:.2f}", f"{key_cpu * 1e3:.2f}", f"{key_cpu / plain_cpu:.3f}x",
            ])  # fmt: skip
            plain_ser, key_ser = median(found["plain serializer"]), median(found["key serializer"])
            shares.append([
                label, f"{plain_ser * 1e3:.3f}", f"{key_ser * 1e3:.3f}",
                f"{(key_ser - plain_ser) * 1e3:.3f}", f"{(key_ser - plain_ser) / plain_cpu:.1%}",
                f"{(plain_cpu + key_ser - plain_ser) / plain_cpu:.3f}x",
            ])  # fmt: skip
            shutdown()
    print_table(
        f"Per checkpoint (a model or tool step), median of {rounds} runs of {turns} tool calls "
        "each: without a key and with one (AES-256-GCM); keyed/plain as a ratio.",
        ["database", "plain ms", "key ms", "wall ratio", "plain CPU ms", "key CPU ms", "CPU ratio"],
        rows,
    )
    print_table(
        "The run log's serializer inside those runs: CPU ms per checkpoint (thread time), what "
        "the key adds, as a share of a plain checkpoint's CPU, and the CPU ratio it makes.",
        ["database", "plain ms", "key ms", "added ms", "share", "CPU ratio"],
        shares,
    )
    print_table(
        "The serializer alone: one tool step's payload (microseconds per call; stored bytes).",
        ["payload", "write us", "read us", "bytes"],
        serializer_cost(2000 if args.quick else 20000),
    )


if __name__ == "__main__":
    main()
