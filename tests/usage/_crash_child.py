"""A child process of the usage crash tests: `python -m usage._crash_child CONFIG_JSON` (working
directory `tests/`).

It builds a `DurableSwarm` on `database_url` with `executor_id` and `PRICES`, talking to the fake
server at `base_url`, then does `action`:

* `run`: start `Spender` as run `run_id` (with `budget` and `stream`) and wait to be killed;
* `recover`: launch (DBOS recovers this executor's pending runs) and wait for `run_id` to end;
* `resume`: `resume(run_id, budget=...)` and wait for it to end.

After `recover` and `resume`, the run's status, error and usage are written to `result` (JSON).
With `trace_file`, the process traces (OpenTelemetry SDK) and writes each span as it ends to
that file, one JSON line per span, so the spans of a killed process are kept.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

from durable_swarm import Agent, Budget, DurableSwarm

PRICES = {"priced-model": {"input": 1000.0, "output": 1000.0}}
FINISHED = ("succeeded", "failed", "cancelled")


def look(topic: str) -> str:
    """Look something up."""
    return f"found {topic}"


spender = Agent(name="Spender", model="priced-model", functions=[look])


def wait_until_finished(swarm: DurableSwarm, run_id: str) -> None:
    deadline = time.monotonic() + 120
    while swarm.get_run(run_id).status not in FINISHED:
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


def trace_to(path: str) -> None:
    """Trace this process; every span is written to `path` (a JSON line) as soon as it ends."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class LineExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            with open(path, "a") as f:
                for span in spans:
                    line = {
                        "name": span.name,
                        "trace_id": f"{span.context.trace_id:032x}",
                        "span_id": f"{span.context.span_id:016x}",
                        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    }
                    f.write(json.dumps(line) + "\n")
                    f.flush()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LineExporter()))
    trace.set_tracer_provider(provider)


def main(config: dict[str, Any]) -> None:
    if config.get("trace_file"):
        trace_to(config["trace_file"])
    client = openai.OpenAI(base_url=config["base_url"], api_key="fake-key")
    swarm = DurableSwarm(
        client,
        database_url=config["database_url"],
        executor_id=config["executor_id"],
        prices=PRICES,
    )
    run_id = config["run_id"]
    budget = Budget(**config["budget"]) if config.get("budget") else None
    if config["action"] == "run":
        user = [{"role": "user", "content": "spend"}]
        swarm.start(spender, user, run_id=run_id, budget=budget, stream=config["stream"])
        time.sleep(600)  # killed by the test long before
        return
    if config["action"] == "recover":
        swarm.launch()
    else:
        swarm.resume(run_id, budget=budget)
    wait_until_finished(swarm, run_id)
    info = swarm.get_run(run_id)
    result = {"status": info.status, "error": info.error, "usage": info.usage, "steps": []}
    result["steps"] = [[s.step, s.kind, s.name] for s in info.steps]
    tmp = Path(config["result"] + ".partial")
    tmp.write_text(json.dumps(result, default=lambda u: u.to_json()))
    os.replace(tmp, config["result"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
