"""What one checkpoint costs: a durable run against the same run in memory and a bare DBOS workflow.

The model is an in-process scripted client (no HTTP, no latency), so the figures are our overhead
only. Scenario: the model calls a tool K times (default 10), one call per turn, then
answers: K + 1 model calls and K tool calls, i.e. 2K + 1 effects (steps when durable).

Per run (median of many sequential runs, after a warm-up), on SQLite and on PostgreSQL, in two
variants: an async model client with an async tool (`AsyncScriptedClient`, `lookup`), and a sync
client with a sync tool (`ScriptedClient`, `lookup_sync`):
  * memory:  `Swarm.arun`, the same run without checkpoints;
  * durable: `DurableSwarm.arun`, per checkpoint = (durable - memory) / steps, where memory is
             the in-memory run of the same variant;
  * bare:    a bare DBOS workflow (same config, same JSON serializer, same input) running as many
             `DBOS.run_step_async` steps, each a *sync* function returning the output a durable
             step recorded (a sync step: DBOS checks, runs and records it in one executor
             thread); per step = time / steps. The baseline of the sync variant;
  * bare async: the same with `async def` steps (DBOS hops to a thread for the check and for the
             record: dearer than a sync step). The baseline of the async variant, whose durable
             steps are async DBOS steps too; the ratio to a bare sync step is printed beside.
The goal is durable per checkpoint <= 1.10 x bare per step. Kinds are interleaved round by round,
so machine noise hits them alike; the median of each round's own ratio is printed too, and the
same ratio in process CPU (every thread) instead of wall time. After the timed rounds, 50 runs of
each kind (5 with `--quick`) are counted: SQL statements, event-loop callbacks and garbage
collections (`counting`), to show where a durable run does more than a bare one.

Then the cost of OpenTelemetry tracing: an SDK tracer provider is set (a batch span processor
whose exporter drops the spans, so export I/O is not counted) and memory and durable runs are
measured again, on fresh databases, with their spans (a run span, one per model and tool call)
recorded, and interleaved with the same runs whose spans the sampler drops: "added" is the
difference between the two. Tracing can only be switched on once per process, hence after the
rest; the untraced figures above are shown beside them.

    .venv/bin/python benchmarks/overhead.py            # 200 runs of each kind per database
    .venv/bin/python benchmarks/overhead.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from _common import check_response, databases, make_agent, median, print_table, tool_script
from dbos import DBOS
from sqlalchemy import event
from sqlalchemy.engine import Engine

from durable_swarm import DurableSwarm, Swarm, tracing
from durable_swarm.durable import shutdown
from durable_swarm.testing import AsyncScriptedClient, ScriptedClient

MESSAGES = [{"role": "user", "content": "Look things up, please."}]

# What the bare workflows replay: the step outputs (and result) of one recorded durable run of
# each variant ("sync": sync client and tool, replayed as sync steps; "async": as async steps).
PLANS: dict[str, dict[str, Any]] = {
    variant: {"steps": [], "result": None} for variant in ("sync", "async")
}


@DBOS.workflow(name="bench.bare")
async def bare_workflow(spec: dict[str, Any]) -> Any:
    """As many sync steps as a durable run of the sync variant, each returning what the durable
    step returned."""
    for name, output in PLANS["sync"]["steps"]:

        def step(output: dict[str, Any] = output) -> dict[str, Any]:
            return output

        await DBOS.run_step_async({"name": name}, step)
    return PLANS["sync"]["result"]


@DBOS.workflow(name="bench.bare_async")
async def bare_async_workflow(spec: dict[str, Any]) -> Any:
    """The same with async steps, for a durable run of the async variant."""
    for name, output in PLANS["async"]["steps"]:

        async def step(output: dict[str, Any] = output) -> dict[str, Any]:
            return output

        await DBOS.run_step_async({"name": name}, step)
    return PLANS["async"]["result"]


@DBOS.workflow(name="bench.empty")
async def empty_workflow(spec: dict[str, Any]) -> Any:
    """No steps: the fixed cost of starting and finishing a workflow."""
    return PLANS["async"]["result"]


# (memory kind, durable kind, the bare kind that is its baseline): same client, tool and steps.
VARIANTS = [("memory_sync", "durable_sync", "bare"), ("memory", "durable", "bare_async")]


async def start_bare(workflow: Any, spec: dict[str, Any]) -> Any:
    handle = await DBOS.start_workflow_async(workflow, spec)
    return await handle.get_result()


def record_plan(swarm: DurableSwarm, run_id: str, variant: str) -> tuple[dict[str, Any], int]:
    """Fill `PLANS[variant]` from a finished durable run; returns its input spec and its number
    of steps."""
    status = DBOS.get_workflow_status(run_id)
    assert status is not None
    steps = [(f"{s.kind}:{s.name}", s.output) for s in swarm.get_run(run_id).steps]
    PLANS[variant]["steps"], PLANS[variant]["result"] = steps, status.output
    return status.input["args"][0], len(steps)


def finished(swarm: Any, response: Any, tool_steps: int) -> None:
    """Check a run's answer, and drop the requests the scripted client recorded: the test double
    keeps every request it is sent, and that growing heap makes later garbage collections
    dearer for the kinds that use it (not for bare DBOS), which skewed the ratios."""
    check_response(response, tool_steps)
    swarm.client.requests.clear()


async def timed_with_cpu(run: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (every thread: the event loop, DBOS's
    executor, the library's pools) of one run."""
    wall, cpu = time.perf_counter(), time.process_time()
    await run()
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure_traced(url: str, tool_steps: int, runs: int, warmup: int) -> dict[str, Any]:
    """Median seconds per run of memory and durable runs with a tracer provider set, each with
    its spans recorded and dropped by the sampler (interleaved rounds, so load hits both)."""
    script = tool_script(tool_steps)
    agent = make_agent()
    memory = Swarm(client=AsyncScriptedClient(script))
    durable = DurableSwarm(client=AsyncScriptedClient(script), database_url=url).launch()

    async def run_memory() -> None:
        finished(memory, await memory.arun(agent, MESSAGES), tool_steps)

    async def run_durable() -> None:
        finished(durable, await durable.arun(agent, MESSAGES), tool_steps)

    kinds = {
        "memory": (run_memory, True),
        "memory_dropped": (run_memory, False),
        "durable": (run_durable, True),
        "durable_dropped": (run_durable, False),
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for round_ in range(warmup + runs):
        order = order[1:] + order[:1]
        for kind in order:
            run, SAMPLER.record = kinds[kind]
            elapsed, _ = await timed_with_cpu(run)
            if round_ >= warmup:
                times[kind].append(elapsed)
        if round_ % 20 == 0:
            gc.collect()
    return {kind: median(values) for kind, values in times.items()}


class _Sampler:
    """Records every span, or (`record = False`) drops every span, switchable between runs."""

    def __init__(self) -> None:
        self.record = True

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry.sdk.trace.sampling import Decision, SamplingResult

        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.record else Decision.DROP)

    def get_description(self) -> str:
        return "switchable"


SAMPLER = _Sampler()


def trace_everything() -> None:
    """Switch tracing on for this process: an SDK provider (with `SAMPLER`) whose exporter drops
    the spans it is given."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=SAMPLER)
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    assert tracing.enabled()


@contextlib.contextmanager
def counting() -> Iterator[Counter[str]]:
    """Counts what the process does inside the block: SQL statements sent by any thread
    (a SQLAlchemy `before_cursor_execute` hook), event-loop callbacks run (asyncio's
    `Handle._run`, wrapped for the block) and garbage collections of any generation
    (`gc.callbacks`)."""
    counts: Counter[str] = Counter()

    def statement(*args: Any) -> None:
        counts["sql"] += 1

    def collection(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            counts["collections"] += 1

    original = asyncio.events.Handle._run

    def run(handle: asyncio.Handle) -> None:
        counts["callbacks"] += 1
        original(handle)

    event.listen(Engine, "before_cursor_execute", statement)
    gc.callbacks.append(collection)
    asyncio.events.Handle._run = run  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
        gc.callbacks.remove(collection)
        event.remove(Engine, "before_cursor_execute", statement)


async def count_kinds(
    kinds: dict[str, Callable[[], Awaitable[Any]]], runs: int
) -> dict[str, dict[str, float]]:
    """Per kind, `runs` runs one after another, counted (`counting`): SQL statements and loop
    callbacks per run, collections per 100 runs."""
    counted = {}
    for kind, run in kinds.items():
        gc.collect()
        with counting() as counts:
            for _ in range(runs):
                await run()
        counted[kind] = {
            "sql": counts["sql"] / runs,
            "callbacks": counts["callbacks"] / runs,
            "collections": 100 * counts["collections"] / runs,
        }
    return counted


async def measure_database(
    url: str, tool_steps: int, runs: int, warmup: int, count_runs: int
) -> dict[str, Any]:
    """Median seconds per run of each kind on one database (interleaved rounds), then what
    `count_runs` runs of each kind do, counted (`count_kinds`)."""
    script = tool_script(tool_steps)
    agent = make_agent()
    memory = Swarm(client=AsyncScriptedClient(script))
    durable = DurableSwarm(client=AsyncScriptedClient(script), database_url=url).launch()
    # The same runs with a sync client and a sync tool: every durable step a sync DBOS step.
    sync_agent = make_agent(sync=True)
    memory_sync = Swarm(client=ScriptedClient(script))
    durable_sync = DurableSwarm(client=ScriptedClient(script), database_url=url)

    effects = 2 * tool_steps + 1
    specs: dict[str, dict[str, Any]] = {}
    for variant, swarm, variant_agent in (
        ("async", durable, agent),
        ("sync", durable_sync, sync_agent),
    ):
        first = await swarm.arun(variant_agent, MESSAGES, run_id=f"bench-plan-{variant}")
        finished(swarm, first, tool_steps)
        specs[variant], steps = await asyncio.to_thread(
            record_plan, swarm, f"bench-plan-{variant}", variant
        )
        assert steps == effects, f"expected {effects} steps, the {variant} run logged {steps}"

    async def run_memory() -> None:
        finished(memory, await memory.arun(agent, MESSAGES), tool_steps)

    async def run_durable() -> None:
        finished(durable, await durable.arun(agent, MESSAGES), tool_steps)

    async def run_memory_sync() -> None:
        finished(memory_sync, await memory_sync.arun(sync_agent, MESSAGES), tool_steps)

    async def run_durable_sync() -> None:
        finished(durable_sync, await durable_sync.arun(sync_agent, MESSAGES), tool_steps)

    kinds: dict[str, Callable[[], Awaitable[Any]]] = {
        "memory": run_memory,
        "durable": run_durable,
        "memory_sync": run_memory_sync,
        "durable_sync": run_durable_sync,
        "bare": lambda: start_bare(bare_workflow, specs["sync"]),
        "bare_async": lambda: start_bare(bare_async_workflow, specs["async"]),
        "empty": lambda: start_bare(empty_workflow, specs["async"]),
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for round_ in range(warmup + runs):
        order = order[1:] + order[:1]  # rotate, so no kind always follows the same one
        for kind in order:
            elapsed, used = await timed_with_cpu(kinds[kind])
            if round_ >= warmup:
                times[kind].append(elapsed)
                cpu[kind].append(used)
        if round_ % 20 == 0:
            gc.collect()  # keep full collections out of the timed runs as much as possible
    # Each round's own ratio, durable checkpoint / bare step of the same kind: a machine that
    # speeds up or slows down between rounds moves both sides of it alike.
    per_round = {}
    for memory_kind, durable_kind, bare_kind in VARIANTS:
        rounds = zip(times[durable_kind], times[memory_kind], times[bare_kind], strict=True)
        per_round[durable_kind] = median([(d - m) / b for d, m, b in rounds])
    return {
        "steps": steps,
        "per_round": per_round,
        "counts": await count_kinds(kinds, count_runs),
        "cpu": {kind: median(values) for kind, values in cpu.items()},
        **{kind: median(values) for kind, values in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (few runs)")
    parser.add_argument("--runs", type=int, help="measured runs of each kind per database")
    parser.add_argument("--tool-steps", type=int, default=10, help="tool calls per run (K)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    runs = args.runs or (15 if args.quick else 200)
    warmup = 3 if args.quick else 20
    count_runs = 5 if args.quick else 50

    results: dict[str, dict[str, Any]] = {}
    traced: dict[str, dict[str, Any]] = {}
    with databases(postgres=not args.no_postgres) as dbs:
        for label, url in dbs:
            results[label] = asyncio.run(
                measure_database(url, args.tool_steps, runs, warmup, count_runs)
            )
            shutdown()  # DBOS is one per process: stop it before launching on the next database
    trace_everything()
    with databases(postgres=not args.no_postgres) as dbs:  # fresh ones, as for the first part
        for label, url in dbs:
            traced[label] = asyncio.run(measure_traced(url, args.tool_steps, runs, warmup))
            shutdown()

    k = args.tool_steps
    print(
        f"\nScenario: {k} tool calls, {k + 1} model calls = {2 * k + 1} effects per run; "
        f"median of {runs} runs each (after {warmup} warm-up rounds), kinds interleaved."
    )
    print_table(
        "Per run (ms)",
        [
            "database",
            "memory async",
            "durable async",
            "memory sync",
            "durable sync",
            f"bare sync ({2 * k + 1} steps)",
            "bare async",
            "bare (0 steps)",
        ],
        [
            [db] + [r[kind] * 1e3 for kind in
                    ("memory", "durable", "memory_sync", "durable_sync", "bare", "bare_async",
                     "empty")]
            for db, r in results.items()
        ],
    )  # fmt: skip
    rows = []
    for db, r in results.items():
        n = r["steps"]
        labels = ("sync client + sync tool", "async client + async tool")
        for label, (memory, durable, bare) in zip(labels, VARIANTS, strict=True):
            per_checkpoint = (r[durable] - r[memory]) / n
            # The same, without the fixed cost of a workflow (start + finish), per step only.
            marginal = (r[durable] - r[memory] - r["empty"]) / n
            rows.append(
                [
                    db,
                    label,
                    f"{per_checkpoint * 1e3:.3f}",
                    f"{r[bare] / n * 1e3:.3f}",
                    f"{per_checkpoint / (r[bare] / n):.2f}x",
                    f"{r['per_round'][durable]:.2f}x",
                    f"{marginal / ((r[bare] - r['empty']) / n):.2f}x",
                    # Each only where it differs from durable/bare ("-" where it is the same).
                    f"{per_checkpoint / (r['bare'] / n):.2f}x" if bare != "bare" else "-",
                    f"{(r[durable] - r['memory']) / r[bare]:.2f}x" if memory != "memory" else "-",
                    f"{(r['cpu'][durable] - r['cpu'][memory]) / r['cpu'][bare]:.2f}x",
                ]
            )
    print_table(
        "Per checkpoint (ms); baseline: a bare DBOS step of the same kind (sync steps for a sync "
        "client and tool, async steps for async ones); goal: durable/bare <= 1.10x",
        [
            "database",
            "client and tool",
            "durable/ckpt",
            "bare/step",
            "durable/bare",
            "by round",
            "ratio w/o wf",
            "durable/bare sync",
            "with hops",
            "CPU",
        ],
        rows,
    )
    print(
        "\ndurable/ckpt = (durable - memory) / steps; bare/step = bare / steps. 'by round': the "
        "median of each round's own ratio (steadier when the machine's speed drifts). "
        "'w/o wf' subtracts the 0-step workflow (start + finish) from both first. "
        "'durable/bare sync': every checkpoint against a bare sync step, whatever its kind "
        "(DBOS runs an async step in more thread hops than a sync one). 'with hops': "
        "(durable - memory async) / bare, i.e. the checkpoint with the thread hop a sync step "
        "takes (which the memory run with sync code takes too, and the first ratio subtracts). "
        "'CPU': durable/bare in process CPU (every thread) instead of wall time, median per run."
    )
    print_table(
        f"Counted per run ({count_runs} runs of each kind, one after another, after the timed "
        "rounds): SQL statements, event-loop callbacks, garbage collections per 100 runs",
        ["database", "kind", "SQL statements", "loop callbacks", "collections / 100 runs"],
        [
            [db, kind, f"{c['sql']:.1f}", f"{c['callbacks']:.1f}", f"{c['collections']:.0f}"]
            for db, r in results.items()
            for kind, c in r["counts"].items()
        ],
    )
    n = 2 * k + 1
    print_table(
        "Tracing (ms per run): off, provider set with spans dropped, spans recorded; "
        "added = (recorded - dropped) per model or tool call",
        ["database", "memory off", "dropped", "recorded", "added", "durable off", "dropped",
         "recorded", "added"],
        [
            [
                db,
                results[db]["memory"] * 1e3,
                traced[db]["memory_dropped"] * 1e3,
                traced[db]["memory"] * 1e3,
                (traced[db]["memory"] - traced[db]["memory_dropped"]) / n * 1e3,
                results[db]["durable"] * 1e3,
                traced[db]["durable_dropped"] * 1e3,
                traced[db]["durable"] * 1e3,
                (traced[db]["durable"] - traced[db]["durable_dropped"]) / n * 1e3,
            ]
            for db in results
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
