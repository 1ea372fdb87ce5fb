"""`DurableSwarm`: Swarm's API where every run is a durable DBOS workflow."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import tracing
from .._aio import in_event_loop, off_event_loop
from .._signature import takes_run
from ..compaction import check_compact_at
from ..errors import AgentNotFoundError, DurableSwarmError
from ..limits import Limits, check_limits
from ..loop import RunRequest, known_agents
from ..output import from_json as output_from_json
from ..sessions import check_session_name
from ..swarm import default_model
from ..types import Agent, Response
from ..usage import Budget, Prices, check_budget, check_prices
from . import _dbos
from ._control import RunCommands, RunControl
from ._database import resolve_database_url
from ._engine import DBOS, SetWorkflowID
from ._failures import DEFAULT_MODEL_RETRIES
from ._log import StoredResult, naming_run, spec_of
from ._ownership import timing
from ._parking import book, outcome
from ._retention import Retention
from ._runs import RunInfo, read_run, step_outputs
from ._sealing import configure as configure_keys
from ._sealing import require
from ._sessions import SessionCommands, SessionStore
from ._spec import DEFAULT_SWARM, RunSpec, check_swarm_name
from ._swarms import SwarmSettings, registry
from ._sweeper import start_sweeper
from ._values import DEFAULT_MAX_RESULT_CHARS, check_input, check_messages
from ._waits import WaitBook, live_status
from ._workflow import EVENTS_STREAM, HOST, WAITING_EVENT, run_workflow

__all__ = ["DurableSwarm", "RunHandle"]

_POLL_SECONDS = 0.05
_ENDED_AGAIN = ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")  # what resume restarts
_NOTICE_FIRST, _NOTICE_MAX = 0.2, 5.0
logger = logging.getLogger("durable_swarm")


def _response(run_id: str, output: dict[str, Any]) -> Response:
    """A run's stored result as a `Response`; the agent is the live object when there is one, and
    long tool results are read back from the steps that store them."""
    require(output, run_id, "its result")
    stored = StoredResult.read(output, lambda: step_outputs(DBOS, run_id))
    agent: Any = None
    if stored.agent:
        try:
            agent = HOST.lookup(run_id, stored.agent)
        except AgentNotFoundError:
            agent = stored.agent["name"]
    return Response(
        messages=stored.messages,
        agent=agent,
        context_variables=stored.context_variables,
        usage=stored.tally.total,
        usage_by_agent=stored.tally.by_agent,
        output=_typed_output(run_id, agent, stored.output),
    )


def _typed_output(run_id: str, agent: Any, data: Any) -> Any:
    """A run's stored structured output as its agent's `output_type` (the stored JSON when the
    agent is not defined here, or its type no longer fits the data, with a warning)."""
    if data is None or not isinstance(agent, Agent) or agent.output_type is None:
        return data
    try:
        return output_from_json(agent, data)
    except ValueError as e:  # pydantic's ValidationError: the agent's code changed
        logger.warning(
            "Run %s: its stored output no longer fits %s's output_type (%s); Response.output "
            "holds the stored JSON instead.",
            run_id,
            agent.name,
            (str(e).splitlines() or [""])[0],
        )
        return data


def _begin_trace(run_id: str, agent: Agent, spec: RunSpec) -> RunSpec:
    """Open the run's span (under the caller's current span); returns `spec` with its context,
    stored with the run, so every later execution of the run continues this trace."""
    trace = tracing.start_run(agent.name, run_id=run_id)
    if trace is None:
        return spec
    HOST.run_traces[run_id] = trace
    return spec.with_traceparent(trace.traceparent)


async def _start(run_id: str, spec: RunSpec) -> Any:
    """Start the run's workflow on the running event loop: it is a task there, not a thread."""
    _dbos.note_taken([run_id])
    with SetWorkflowID(run_id):
        return await DBOS.start_workflow_async(run_workflow, spec.to_json())


# The step, in an app's own workflow, that records the id of a run it starts without `run_id`.
NEW_RUN_ID_STEP = "durable_swarm.new_run_id"


def _refuse_inside_step() -> None:
    """Raise a clear error when `run`/`start` is called from inside a DBOS step (a tool of a
    durable run, or an app's step): DBOS cannot start a workflow there, and its own error is a
    bare assertion."""
    step = DBOS.step_id
    if step is not None:
        raise DurableSwarmError(
            f"DurableSwarm cannot start a run from inside a step (step {step} of run "
            f"{DBOS.workflow_id!r}: a tool of a durable run, or a step of your own workflow): "
            "DBOS starts workflows only from a workflow or outside one. Delegate to another "
            "agent as a sub-agent (durable_swarm.subagents), hand off to it, or start the run "
            "from the workflow itself."
        )


def _new_run_id() -> str:
    """A new run's id: a new UUID, recorded as a step when the caller is a DBOS workflow (an
    app's own workflow calling `run`/`start`), so that workflow's replay after a crash names the
    run it started then (its child workflow), not a new one: the session claim, settings and
    result then follow that run."""
    if DBOS.workflow_id is None:
        return str(uuid.uuid4())
    return str(DBOS.run_step({"name": NEW_RUN_ID_STEP}, lambda: str(uuid.uuid4())))


async def _new_run_id_async() -> str:
    """`_new_run_id` for async callers."""
    if DBOS.workflow_id is None:
        return str(uuid.uuid4())

    async def new() -> str:
        return str(uuid.uuid4())

    return str(await DBOS.run_step_async({"name": NEW_RUN_ID_STEP}, new))


def _through_thread(produce: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """Iterate `produce()` on a helper thread (for blocking reads inside an event loop)."""
    items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def pump() -> None:
        try:
            for item in produce():
                items.put(("item", item))
        except BaseException as e:
            items.put(("error", e))
        items.put(("end", None))

    threading.Thread(target=pump, name="durable-swarm-events", daemon=True).start()
    while True:
        kind, value = items.get()
        if kind == "end":
            return
        if kind == "error":
            raise value
        yield value


def _events(items: Iterator[Any], run_id: str) -> Iterator[dict[str, Any]]:
    for item in items:
        require(item, run_id, "its stream events")
        if isinstance(item, dict) and "event" in item:
            yield item["event"]


def run_arguments(
    agent: Agent,
    messages: list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    model_override: str | None = None,
    stream: bool = False,
    debug: bool = False,
    max_turns: float = float("inf"),
    execute_tools: bool = True,
    *,
    run_id: str | None = None,
    after_work: Any = None,
    agents: Sequence[Agent] = (),
    budget: Budget | None = None,
    session: str | None = None,
    compact_at: int | str | None = None,
) -> RunRequest:
    """The arguments of `DurableSwarm.run`, `start`, `arun` and `astart`: Swarm's `run`
    arguments, then the run's id, the swarm-level handoff options, its budget, its session and
    its compaction budget."""
    return RunRequest(
        agent, messages, context_variables, model_override, stream, debug, max_turns,
        execute_tools, after_work, agents, run_id, budget, session, compact_at,
    )  # fmt: skip


def streamed_run_arguments(
    agent: Agent,
    messages: list[dict[str, Any]],
    context_variables: dict[str, Any] | None = None,
    model_override: str | None = None,
    debug: bool = False,
    max_turns: float = float("inf"),
    execute_tools: bool = True,
    *,
    run_id: str | None = None,
    session: str | None = None,
    compact_at: int | str | None = None,
) -> RunRequest:
    """The arguments of `DurableSwarm.run_and_stream`: Swarm's, then the run's id, its
    session and its compaction budget."""
    return RunRequest(
        agent, messages, context_variables, model_override, True, debug, max_turns,
        execute_tools, run_id=run_id, session=session, compact_at=compact_at,
    )  # fmt: skip


def waiting_notice(run_id: str, waiting: dict[str, Any]) -> str:
    """What a blocked `run()` says when its run waits for the person: what for, and how to
    answer (from any process)."""
    if waiting.get("kind") == "approval":
        call = waiting.get("tool_call") or {}
        function, call_id = call.get("function") or {}, call.get("id")
        return (
            f"Run {run_id!r} is waiting for approval of "
            f"{function.get('name')}({function.get('arguments') or ''}) (tool call {call_id}). "
            f"Decide from any process: `durable-swarm runs approve {run_id} {call_id}` or "
            f"`durable-swarm runs reject {run_id} {call_id} -m WHY`, or in Python "
            f"swarm.approve({run_id!r}, {call_id!r}) / swarm.reject(...). "
            "run() returns when the run finishes."
        )
    prompt = waiting.get("prompt")
    asked = f" ({waiting['agent']} asks: {prompt})" if prompt and waiting.get("agent") else ""
    return (
        f"Run {run_id!r} is waiting for input from the person{asked}. Answer from any process: "
        f'`durable-swarm runs send {run_id} "..."`, or in Python '
        f"swarm.send_input({run_id!r}, text). run() returns when the run finishes."
    )


async def _result_noting_waits(run_id: str, handle: Any) -> Any:
    """The run's output; meanwhile, once per wait, logs `waiting_notice` (checked after 0.2 s,
    then less often, up to every 5 s)."""
    result = asyncio.ensure_future(outcome(run_id, handle))
    interval, noted = _NOTICE_FIRST, None
    while True:
        done, _ = await asyncio.wait({result}, timeout=interval)
        if done:
            return result.result()
        interval = min(interval * 2, _NOTICE_MAX)
        waiting = (await DBOS.get_all_events_async(run_id)).get(WAITING_EVENT)
        if waiting and waiting.get("wait_id") != noted:
            noted, interval = waiting.get("wait_id"), _NOTICE_FIRST
            logger.warning("%s", waiting_notice(run_id, waiting))


class RunHandle:
    """A durable run started with `DurableSwarm.start`: its id, result, status and events."""

    def __init__(self, run_id: str, handle: Any = None, *, on_loop: Any = None) -> None:
        self.run_id = run_id
        self._handle = handle  # the workflow's task on the caller's event loop (astart)
        self._on_loop = on_loop  # ... or on DBOS's own event loop (start)

    def __repr__(self) -> str:
        return f"RunHandle(run_id={self.run_id!r})"

    @off_event_loop
    def result(self) -> Response:
        """Wait for the run to finish and return its `Response` (raises the run's error)."""
        return self._result(notice=False)

    def _result(self, *, notice: bool) -> Response:
        """`result`; with `notice`, says once per wait what the run waits for (see `run`)."""
        with naming_run(self.run_id):
            if notice:
                output = _dbos.on_loop(_result_noting_waits(self.run_id, self._on_loop))
            else:  # its task here, else read through the database
                output = _dbos.on_loop(outcome(self.run_id, self._on_loop))
        response = _response(self.run_id, output)
        HOST.forget(self.run_id)
        return response

    async def aresult(self) -> Response:
        """`result` for async code."""
        with naming_run(self.run_id):
            output: Any = await outcome(self.run_id, self._handle)
        response = _response(self.run_id, output)
        HOST.forget(self.run_id)
        return response

    @off_event_loop
    def info(self) -> RunInfo:
        """The run as its log tells it now (see `DurableSwarm.get_run`)."""
        return read_run(self.run_id, DBOS, book())

    @property
    def status(self) -> str:
        """The run's current status (`pending`, `waiting_for_input`, ..., `succeeded`)."""
        return read_run(self.run_id, DBOS, book()).status

    def events(self) -> Iterator[dict[str, Any]]:
        """The run's stream events from the start (Swarm's shapes), then `{"response": ...}`.

        Works from any process and after a reconnect: events are read from the database. If a
        process died in the middle of a streamed turn, that turn starts again with a new
        `{"delim": "start"}` once the run resumes. Iterating inside a running event loop works
        too (the database is read on a helper thread); `aevents` is the async way.
        """
        if not in_event_loop():
            yield from self._events()
            return
        yield from _through_thread(self._events)

    def _events(self) -> Iterator[dict[str, Any]]:
        stream = DBOS.read_stream(self.run_id, EVENTS_STREAM, polling_interval_sec=_POLL_SECONDS)
        yield from _events(stream, self.run_id)
        yield {"response": self.result()}

    async def aevents(self) -> AsyncIterator[dict[str, Any]]:
        """`events` for async code."""
        stream = DBOS.read_stream_async(
            self.run_id, EVENTS_STREAM, polling_interval_sec=_POLL_SECONDS
        )
        async for item in stream:
            require(item, self.run_id, "its stream events")
            if isinstance(item, dict) and "event" in item:
                yield item["event"]
        yield {"response": await self.aresult()}


class DurableSwarm(RunCommands, SessionCommands):
    """Swarm's `run` on durable workflows: a killed process resumes from its last finished step.

    Args:
        client: any object with `chat.completions.create(**params)`; by default an
            `openai.OpenAI()` made when the first model call needs it.
        model: the model every run asks for instead of each agent's own (a run's
            `model_override` still wins); default `DURABLE_SWARM_MODEL`, else the agents'.
            It is stored with the run, so a recovered run keeps the model it started with.
        model_retries: how often a model step is retried after a transient error (timeout,
            dropped connection, 429, 5xx): at most `model_retries + 1` requests per model call,
            with backoff (1 s, 2 s, 4 s...; after a 429, at least what its `Retry-After` asks, up
            to 60 s). A 429 of a model with `limits` uses no retry: it pauses the model for
            every process and the call waits its turn again. These are the only retries: an
            `openai` client's own `max_retries` is not used in durable runs. Then the run fails
            with a `ModelCallError` that says how to resume it. Stored with the run.
        database_url: where runs are stored. Defaults to `DURABLE_SWARM_DATABASE_URL`, then
            `DBOS_SYSTEM_DATABASE_URL`, then the SQLite file `durable_swarm.sqlite` in the
            working directory; `postgresql://...` selects PostgreSQL.
        executor_id: this process's name among the processes sharing a database (DBOS executor
            id); default `process-<host>-<pid>-<random>`, new for every process. Pin it to have
            a restarted process resume its own unfinished runs at launch.
        poll_interval: how often (seconds) DBOS looks in the database for messages and events
            where it cannot be notified (SQLite): how soon a waiting run sees an answer. A
            `RunHandle` polls a run's result and stream every 0.05 s, whatever this is.
        heartbeat_interval: seconds between this process's heartbeats (and looks for dead
            processes); default `DURABLE_SWARM_HEARTBEAT_INTERVAL`, else 5.
        dead_after: seconds without a heartbeat after which a process counts as dead and its
            runs are taken over; default `DURABLE_SWARM_DEAD_AFTER`, else 6 heartbeats.
        budget: the default `Budget` of runs started without one (and of the runs a worker
            serving this swarm takes from clients that gave none).
        prices: your models' prices in USD per million tokens, e.g. `{"my-model": {"input":
            0.2, "output": 0.6}}`; they take precedence over the public price table and are
            stored with each run, so its cost is the same wherever it resumes.
        max_result_chars: the longest tool result (and input message) a run stores; a longer
            tool result reaches the model as an error instead (default 4,000,000 characters).
        name: the swarm's name (default "default"), recorded with every run it starts. A run
            belongs to its swarm: wherever it is recovered, taken over, resumed or dequeued, it
            uses the client, model, retries, budget, prices and limits of the `DurableSwarm` of
            that name in that process, never another's; a process with none of that name leaves
            the run pending, its `get_run(run_id).problem` saying which swarm to create. Give
            each swarm of a process (one per model endpoint, say) its own name, and build them
            the same way in every process that serves their runs. Settable: runs started later
            record the new name.
        limits: model limits shared by every process on the database: `{"gpt-4o":
            ModelLimits(requests_per_minute=500, tokens_per_minute=30_000, concurrent=8)}`,
            keyed by model name, base URL or "*" (see `ModelLimits`), or the same as text
            (`"gpt-4o:rpm=500,tpm=30000,concurrent=8"`). A model call waits for its turn
            without holding a worker slot, and a 429 pauses that model's calls in every
            process for as long as the provider asks, without using up `model_retries`.
            Default: the process's (a worker's `--limit`, else
            `DURABLE_SWARM_MODEL_LIMITS`); `{}`: none.
        compact_at: the token budget of runs that give none: past it, older messages are
            summarized before the next model call (tokens, or "auto": 80% of the model's
            context window when known; None: never). See `durable_swarm.compaction`.
        compactor: `compactor(messages) -> str` summarizes instead of a model call (the
            model call of the run's agent's model otherwise); like the client, it is the
            swarm's, used by its runs wherever they resume.

    `run(..., session="name")` continues the conversation of a session stored in the run
    database: the run starts from its messages and adds its own when it succeeds; a second run
    of a session held by a live run raises `SessionBusyError`. `list_sessions`, `get_session`,
    `clear_session` and `delete_session` read and change them (see `durable_swarm.sessions`).
        encryption_key: encrypt every payload this process stores (messages, context,
            tool arguments and results, answers, stream chunks) with AES-GCM: an `id:key` list
            (a comma-separated string or a sequence; the first key encrypts, all decrypt),
            instead of `DURABLE_SWARM_ENCRYPTION_KEY`. One keyring per process: the last one
            given wins. Needs `pip install 'durable-swarm[crypto]'`
            (docs/guides/encryption.md).
        retention: how long finished runs are kept: a `Retention`, a dict like
            `{"succeeded": "30d", "failed": "90d", "cancelled": "7d"}` or text like
            `"succeeded=30d,failed=90d"`; default `DURABLE_SWARM_RETENTION`, else none (runs
            are kept for good). Once DBOS is launched, this process deletes the runs past
            their age in the background, in small batches, one process of the database at a
            time; never a run in flight (see `durable_swarm.durable.Retention`).

    A swarm serves its name while the program holds it (or until `close()`). Two live swarms of
    one name in a process: the later one serves the runs recovered or dequeued here (a warning
    says so when their settings differ); each one's own runs started here keep its settings.

    Runs store only JSON: a run's input that is not JSON raises `NonJsonValueError` naming the
    key, before anything is stored; a tool whose result cannot be stored answers the model with
    an error naming the key, and its changes to `context_variables` are dropped.

    DBOS is launched lazily, once per process, at the first call that needs it. From then on
    this process finishes its own executor id's pending runs and takes over those of processes
    dead for `dead_after` seconds (never a live process's runs). If the app launched DBOS
    itself, its DBOS is used.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str | None = None,
        model_retries: int = DEFAULT_MODEL_RETRIES,
        database_url: str | None = None,
        executor_id: str | None = None,
        poll_interval: float = 0.1,
        heartbeat_interval: float | None = None,
        dead_after: float | None = None,
        budget: Budget | None = None,
        prices: Prices | None = None,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        name: str = DEFAULT_SWARM,
        limits: Limits | None = None,
        compact_at: int | str | None = None,
        compactor: Callable[[list[dict[str, Any]]], str] | None = None,
        encryption_key: str | Sequence[str] | None = None,
        retention: Retention | Mapping[str, Any] | str | None = None,
    ) -> None:
        if encryption_key is not None:
            configure_keys(encryption_key)
        if isinstance(max_result_chars, bool) or not isinstance(max_result_chars, int):
            raise TypeError(f"max_result_chars must be an int, got {max_result_chars!r}")
        if max_result_chars < 1:
            raise ValueError(f"max_result_chars must be at least 1, got {max_result_chars}")
        self.max_result_chars = max_result_chars
        self.client = client
        self.model = default_model(model)
        if not isinstance(model_retries, int) or model_retries < 0:
            raise DurableSwarmError(
                f"model_retries must be a whole number, 0 or more (got {model_retries!r})."
            )
        self.model_retries = model_retries
        self.database_url = resolve_database_url(database_url)
        self.executor_id = executor_id
        self.poll_interval = poll_interval
        self.heartbeat_interval, self.dead_after = timing(heartbeat_interval, dead_after)
        self.budget = check_budget(budget)
        self.prices = check_prices(prices)
        self.compact_at = check_compact_at(compact_at)
        self.compactor = compactor
        self._name = check_swarm_name(name)
        self.limits = check_limits(limits)
        self.retention = Retention.of(retention) if retention is not None else Retention.from_env()
        registry.add(self)

    def __repr__(self) -> str:
        return f"DurableSwarm(name={self._name!r}, database_url={self.database_url!r})"

    @property
    def name(self) -> str:
        """The name runs started here record, by which any process finds their swarm."""
        return self._name

    @name.setter
    def name(self, name: str) -> None:
        name = check_swarm_name(name)
        registry.remove(self)
        self._name = name
        registry.add(self)

    def run_settings(self) -> SwarmSettings:
        """What a run of this swarm takes from it, as they are now (its client, model,
        retries, budget, prices, result limit and model limits)."""
        return SwarmSettings(
            name=self._name,
            client=self.client,
            model=self.model,
            model_retries=self.model_retries,
            budget=self.budget,
            prices=self.prices,
            max_result_chars=self.max_result_chars,
            limits=self.limits,
            compactor=self.compactor,
        )

    def close(self) -> None:
        """Stop serving this swarm's name in this process: runs of that name recovered or
        dequeued here afterwards wait for another swarm of the name. Runs already executing go
        on; DBOS stays launched (it is the process's; see `durable_swarm.durable.shutdown`)."""
        registry.remove(self)

    def launch(self) -> DurableSwarm:
        """Start DBOS on this swarm's database now (otherwise done by the first call)."""
        _dbos.ensure_launched(
            self.database_url,
            executor_id=self.executor_id,
            poll_interval=self.poll_interval,
            heartbeat_interval=self.heartbeat_interval,
            dead_after=self.dead_after,
        )
        if self.retention is not None:
            url = _dbos.run_database_url() or self.database_url
            start_sweeper(DBOS, url, self.retention, _dbos.executor_id())
        return self

    # --- starting runs -------------------------------------------------------------------

    def _spec(self, run: RunRequest, new_id: str | None = None) -> tuple[str, RunSpec]:
        """Check `run`'s input, launch DBOS, and return the run's id (`run.run_id`, else
        `new_id`, else a new UUID) and its spec."""
        check_messages(run.messages)
        check_input(run.messages, run.context_variables, self.max_result_chars)  # JSON, first
        known_agents(run.agent, run.agents, run.after_work)  # one name, one agent: checked first
        check_budget(run.budget)
        check_compact_at(run.compact_at)
        if run.session is not None:
            check_session_name(run.session)
        self.launch()
        run_id = run.run_id or new_id or str(uuid.uuid4())
        for known in (run.agent, *run.agents):
            HOST.remember(run_id, known)
        spec = RunSpec.of_request(
            run,
            swarm=self._name,
            model=self.model,
            model_retries=self.model_retries,
            budget=self.budget,
            prices=self.prices,
            max_result_chars=self.max_result_chars,
            compact_at=self.compact_at,
        )
        return run_id, spec

    def _sessions(self) -> SessionStore:
        """This swarm's sessions (in its run database)."""
        self.launch()
        url = _dbos.run_database_url() or self.database_url
        return SessionStore(url, live_status(_dbos.run_status, WaitBook(url)))

    def _claim(self, run_id: str, spec: RunSpec) -> RunSpec:
        """The spec of new run `run_id`, which holds its session (if any) from now on: the
        session's messages first (raises `SessionBusyError` if a live run holds it)."""
        if spec.session is None:
            return spec
        prior, version = self._sessions().claim(spec.session, run_id)
        return replace(spec, messages=[*prior, *spec.messages], session_version=version)

    def _release(self, run_id: str, spec: RunSpec) -> None:
        """Free the session of run `run_id`, which could not be started."""
        if spec.session is not None:
            self._sessions().release(spec.session, run_id)

    def _begin(self, run_id: str, run: RunRequest, spec: RunSpec) -> RunSpec:
        """Bind the new run `run_id` to this swarm's settings while it executes here, and open
        its trace; returns the spec to store."""
        HOST.bind(run_id, self.run_settings())
        return _begin_trace(run_id, run.agent, spec)

    def _start(self, run: RunRequest) -> RunHandle:
        """`start`: the run's workflow on DBOS's event loop (or the existing run `run_id` names)."""
        _refuse_inside_step()
        run_id, spec = self._spec(run, None if run.run_id else _new_run_id())
        # a new UUID cannot name an existing run: only a given id is looked up
        if run.run_id is not None and DBOS.get_workflow_status(run_id) is not None:
            return RunHandle(run_id)  # attach: it runs (or is recovered) where it is
        spec = self._begin(run_id, run, self._claim(run_id, spec))
        try:
            return RunHandle(run_id, on_loop=_dbos.on_loop(_start(run_id, spec)))
        except BaseException:
            self._release(run_id, spec)
            raise

    async def _astart(self, run: RunRequest) -> RunHandle:
        """`astart`: the run's workflow as a task of the caller's event loop."""
        _refuse_inside_step()
        run_id, spec = self._spec(run, None if run.run_id else await _new_run_id_async())
        if run.run_id is not None and await DBOS.get_workflow_status_async(run_id) is not None:
            return RunHandle(run_id)  # attach: it runs (or is recovered) where it is
        spec = await asyncio.to_thread(self._claim, run_id, spec)
        spec = self._begin(run_id, run, spec)
        try:
            return RunHandle(run_id, await _start(run_id, spec))
        except BaseException:
            await asyncio.to_thread(self._release, run_id, spec)
            raise

    @off_event_loop
    @takes_run(run_arguments)
    def start(self, run: RunRequest) -> RunHandle:
        """Start a run without waiting for it; returns its `RunHandle`.

        With `run_id` of a run that already exists, attaches to that run: it is never executed
        twice (the other arguments are then ignored). `budget` limits this run's model calls,
        tokens and cost (default: the swarm's `budget`; see `Budget`).
        """
        return self._start(run)

    @takes_run(run_arguments)
    async def astart(self, run: RunRequest) -> RunHandle:
        """`start` for async code (the run executes on the caller's event loop)."""
        return await self._astart(run)

    @off_event_loop
    @takes_run(run_arguments)
    def run(self, run: RunRequest) -> Any:
        """Swarm's `run`, durably: same arguments, same `Response` (or stream of events).

        `run_id` names the run (default: a new UUID); running again with the id of an existing
        run returns that run's result, or waits for it, and never executes it twice. While the
        run waits for the person, a warning on the `durable_swarm` logger says once per wait
        what it waits for and how to answer (`send_input`, `approve`, `reject`, or the CLI).
        `budget` limits the run (see `start`); the `Response` carries its `usage`. With
        `stream=True` it returns a generator, as Swarm's does: the run starts at its first item.
        """
        return self._streamed(run) if run.stream else self._start(run)._result(notice=True)

    def _streamed(self, run: RunRequest) -> Iterator[dict[str, Any]]:
        """The events of `run`, started when the first one is asked for (not before)."""
        yield from off_event_loop(self._start)(run).events()

    @off_event_loop
    @takes_run(streamed_run_arguments)
    def run_and_stream(self, run: RunRequest) -> Iterator[dict[str, Any]]:
        """`run(..., stream=True)` (Swarm's name for it)."""
        return self._streamed(run)

    @takes_run(run_arguments)
    async def arun(self, run: RunRequest) -> Any:
        """`run` for async code; with `stream=True` returns an async iterator of events."""
        handle = await self._astart(run)
        return handle.aevents() if run.stream else await handle.aresult()

    # --- looking at runs -----------------------------------------------------------------

    @off_event_loop
    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run (raises `RunNotFoundError` for an unknown id)."""
        self.get_run(run_id)
        return RunHandle(run_id)

    @property
    def runs(self) -> RunControl:
        """Reading and steering runs (launches DBOS on this swarm's database if needed)."""
        self.launch()
        return RunControl(DBOS, _dbos.run_database_url() or self.database_url)

    @off_event_loop
    def get_run(self, run_id: str) -> RunInfo:
        """The run as its log tells it: status, current agent, messages, context, steps, and
        what it waits for. Raises `RunNotFoundError` for an unknown id."""
        return self.runs.get_run(run_id)

    async def aget_run(self, run_id: str) -> RunInfo:
        """`get_run` for async code."""
        return await asyncio.to_thread(self.get_run, run_id)

    async def alist_runs(self, **filters: Any) -> list[RunInfo]:
        """`list_runs` for async code (same keyword filters)."""
        return await asyncio.to_thread(lambda: self.list_runs(**filters))

    async def asend_input(self, run_id: str, text: str, *, by: str | None = None) -> None:
        """`send_input` for async code."""
        await asyncio.to_thread(self.send_input, run_id, text, by=by)

    async def aapprove(self, run_id: str, tool_call_id: str, *, by: str | None = None) -> None:
        """`approve` for async code."""
        await asyncio.to_thread(self.approve, run_id, tool_call_id, by=by)

    async def areject(
        self, run_id: str, tool_call_id: str, message: str | None = None, *, by: str | None = None
    ) -> None:
        """`reject` for async code."""
        await asyncio.to_thread(self.reject, run_id, tool_call_id, message, by=by)

    # --- steering runs -------------------------------------------------------------------

    @off_event_loop
    def resume(self, run_id: str, *, budget: Budget | None = None) -> RunHandle:
        """Continue a `cancelled` or `failed` run from its last finished step.

        A failed run is rewound to the step that failed (finished steps are kept), so once the
        cause is fixed (a model endpoint back up, a bug fixed in a tool) it goes on. A run
        stopped by its `Budget` goes on with `budget` (a higher one) in its place. The run
        goes on with the settings of its own swarm (this one, when it has this swarm's name and
        goes on in this process).
        """
        self.launch()
        status = DBOS.get_workflow_status(run_id)
        again = status is not None and status.status in _ENDED_AGAIN
        if again:
            self._bind_if_mine(run_id, status)
        try:
            return RunHandle(self.runs.resume(run_id, budget))
        except BaseException:
            if again:
                HOST.finished_here(run_id)
            raise

    @off_event_loop
    def fork(self, run_id: str, step: int, *, new_run_id: str | None = None) -> RunHandle:
        """A new run that copies `run_id`'s steps before `step` and runs the rest again, with
        the settings of `run_id`'s swarm (this one, when it has this swarm's name and the fork
        runs in this process)."""
        self.launch()
        new_run_id = new_run_id or str(uuid.uuid4())
        status = DBOS.get_workflow_status(run_id)
        if status is not None:
            self._bind_if_mine(new_run_id, status)
        try:
            return RunHandle(self.runs.fork(run_id, step, new_run_id))
        except BaseException:
            HOST.finished_here(new_run_id)
            raise

    def _bind_if_mine(self, run_id: str, status: Any) -> None:
        """Have `run_id` (resumed or forked from the run of `status`) execute with this swarm's
        settings if it executes here and belongs to this swarm's name; a run of another swarm
        finds its own by name."""
        if RunSpec.swarm_of(spec_of(status)) == self._name:
            HOST.bind(run_id, self.run_settings())

    async def acancel(self, run_id: str) -> None:
        """`cancel` for async code."""
        await asyncio.to_thread(self.cancel, run_id)

    async def aresume(self, run_id: str, *, budget: Budget | None = None) -> RunHandle:
        """`resume` for async code."""
        return await asyncio.to_thread(lambda: self.resume(run_id, budget=budget))

    async def afork(self, run_id: str, step: int, *, new_run_id: str | None = None) -> RunHandle:
        """`fork` for async code."""
        return await asyncio.to_thread(self.fork, run_id, step, new_run_id=new_run_id)
