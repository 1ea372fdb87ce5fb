"""The durable run: a DBOS workflow that drives the shared turn loop through DBOS steps.

Each model call is one step (`model:<agent>`), each tool call one step (`tool:<name>`), each
guardrail verdict one step (`guardrail:<name>`), and the
tool list of each MCP server the run meets one step (`tools:<server>`), so a replay offers the
same tools even if the server changed. Step outputs are JSON: the assistant message, the token
usage the server reported, the model name requested and the call's price in USD (None if
unknown); the tool message, the changes the tool made to the context (so in-place changes
replay without running the tool) and the handoff target by agent name and fingerprint.
Replaying the recorded outputs through the same loop rebuilds the run's state exactly, which is
how a killed process resumes. `_log` owns these shapes, their versions and how they are read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import copy
import inspect
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import sqlalchemy as sa

from .. import _registry, guardrails, model, tracing
from .._aio import blocking_executor, is_async_callable, run_in
from ..compaction import Summarize, session_messages
from ..errors import (
    AgentNotFoundError,
    BudgetExceededError,
    DatabaseFaultError,
    DurableSwarmError,
    EncryptionKeyError,
    SwarmNotFoundError,
    ToolResultNotSerializableError,
)
from ..guardrails import CheckGuardrail, Parallel
from ..handoffs import AfterWorkOption
from ..human import arguments_digest
from ..limits import estimate_tokens, limits_for, retry_after
from ..loop import (
    ListTools,
    ModelCall,
    RunRequest,
    ToolInvocation,
    Transition,
    WaitForInput,
    turn_loop,
)
from ..output import to_json as output_json
from ..runtime import InMemoryRuntime, _debug_tool, _no_person, _unless_failed, adrive
from ..subagents import delegation_task, final_answer, is_delegation
from ..tools import (
    ToolOutcome,
    execute_tool,
    execute_tool_async,
    is_agent,
    tool_message,
    tool_spec,
    unknown_tool,
)
from ..usage import Budget, Tally, call_cost
from . import _dbos, _drain
from ._database import describe_fault, display_url, transient_fault
from ._dbos import executor_for_tool, note_tool_time
from ._engine import (
    DBOS,
    DBOS_DIR,
    DBOSAwaitedWorkflowCancelledError,
    DBOSBaseException,
    DBOSWorkflowCancelledError,
    DBOSWorkflowConflictIDError,
    SetWorkflowID,
    StepOptions,
    outside_run_async,
)
from ._failures import base_url_of, model_failure, without_retries
from ._limits import (
    LimitedCall,
    Limiter,
    Parker,
    call_limited,
    limiter_for,
    rate_limited_seconds,
)
from ._log import (
    BUDGET_TOPIC,
    EVENTS_STREAM,
    INLINE_CHARS,
    PARKED_JOINS,
    PARKED_WAITS,
    WAITING_EVENT,
    WATCHED_WAITS,
    WORKFLOW_NAME,
    call_usage,
    context_after,
    context_changes,
    context_snapshot,
    model_output,
    result_output,
    stored_in_step,
)
from ._parking import book, cancel_self, end_join, park, resume_at
from ._sealing import SealedValue, require
from ._sessions import SessionStore
from ._spec import RunSpec, agent_ref, encode_target
from ._swarms import DEFAULTS, SwarmSettings, registry
from ._values import json_problem
from ._waits import CANCELLED_STATES, MISSING, Wait, WaitBook, join_key, live_status, person_key

logger = logging.getLogger("durable_swarm")
# One line per run event (a worker prints them; elsewhere they are INFO records of this logger).
run_log = logging.getLogger("durable_swarm.runs")
T = TypeVar("T")

# A wait re-arms after this long; it may go on for as long as it takes (runs logged before
# waits were watched, see `durable._waits`).
WAIT_SECONDS = 7 * 24 * 3600.0
JOIN_POLL_SECONDS = 0.1
FAULT_RETRY_SECONDS = 5.0  # how often a run stopped by a database fault tries to go on
RETRY_AFTER_CAP = 60.0  # the longest a 429 of a model without limits delays its step's retry
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SQLALCHEMY_DIR = os.path.dirname(os.path.abspath(sa.__file__))
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))


class RunHost:
    """What a run needs from the process it runs in: its swarm's settings and the live agents.

    A run started here (or a sub-agent of a run executing here) is bound to the settings of the
    swarm that started it until its execution here ends; any other run finds its swarm by the
    name its spec records (`_swarms.registry`). Live agents are dropped when a run's result is
    read, and the oldest go first past `LIMIT` runs (an agent not found live is resolved through
    the agent registry), so a long-lived process does not grow without bound.
    """

    LIMIT = 10_000

    def __init__(self) -> None:
        self.live_agents: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.bound: dict[str, SwarmSettings] = {}  # runs started here, while they execute
        self.run_traces: dict[str, tracing.Run] = {}  # spans of runs started here, not begun

    @property
    def default_client(self) -> Any:
        """The model client of runs of the swarm "default" when no `DurableSwarm` of that name
        lives in this process (a worker's model client); None: `openai.OpenAI()`."""
        return DEFAULTS.client

    @default_client.setter
    def default_client(self, client: Any) -> None:
        DEFAULTS.client = client

    @property
    def default_budget(self) -> Budget | None:
        """The budget of runs started without one whose swarm has none (a worker's
        `--budget`)."""
        return DEFAULTS.budget

    @default_budget.setter
    def default_budget(self, budget: Budget | None) -> None:
        DEFAULTS.budget = budget

    def bind(self, run_id: str, settings: SwarmSettings) -> None:
        """Run `run_id`, about to start here, with `settings` (its starter's) while it executes."""
        self.bound[run_id] = settings

    async def await_swarm(self, run_id: str, name: str) -> SwarmSettings:
        """The settings `run_id` runs with: its starter's when it started here, else those of
        the swarm named `name` in this process, waiting (as `await_agent` does, the run pending
        with a notice) until one exists."""
        bound = self.bound.get(run_id)
        if bound is not None:
            return bound
        settings: SwarmSettings = await self.await_known(
            run_id, lambda: registry.settings(name, run_id=run_id), f'swarm "{name}"'
        )
        return settings

    def finished_here(self, run_id: str) -> None:
        """`run_id`'s execution here ended (finished, failed, cancelled or handed back)."""
        self.bound.pop(run_id, None)

    def remember(self, run_id: str, agent: Any) -> None:
        self.live_agents.setdefault(run_id, {})[agent.name] = agent
        while len(self.live_agents) > self.LIMIT:
            self.live_agents.popitem(last=False)

    def forget(self, run_id: str) -> None:
        self.live_agents.pop(run_id, None)

    def lookup(self, run_id: str, ref: Mapping[str, Any]) -> Any:
        """The agent `ref` names: the object this run met in this process, else the registry."""
        live = self.live_agents.get(run_id, {}).get(ref["name"])
        if live is not None:
            return live
        return _registry.resolve(ref["name"], ref.get("fingerprint"), run_id=run_id)

    async def await_agent(self, run_id: str, ref: Mapping[str, Any]) -> Any:
        """`lookup`; while this process has not got the agent's code, the run parks (see
        `await_known`) and a process that has it resumes it."""
        name = ref["name"]
        agent = await self.await_known(run_id, lambda: self.lookup(run_id, ref), f'agent "{name}"')
        self.remember(run_id, agent)
        return agent

    async def await_key(self, run_id: str, value: Any, what: str) -> None:
        """Go on only if `value`, read from the run's log, was opened: a payload sealed with a
        key this process has not got parks the run as `await_agent` does (a process that has
        the key resumes it), never run on its readable fields alone."""
        if isinstance(value, SealedValue):
            await self.await_known(run_id, lambda: require(value, run_id, what), "its key")

    async def await_known(self, run_id: str, lookup: Callable[[], Any], what: str) -> Any:
        """`lookup()`; while it raises `AgentNotFoundError` (or `SwarmNotFoundError`, or
        `EncryptionKeyError`), this process does not know `what` it names (an agent, a function
        of a handoff rule, a swarm, the key of the run's stored data): the run parks at a
        `missing` wait, which says what it misses (`get_run(...).problem` in any process), and
        the sweep of a process that knows it resumes it (`durable._sweeps`). Nothing is lost."""
        try:
            return lookup()
        except (AgentNotFoundError, SwarmNotFoundError, EncryptionKeyError) as e:
            notice = self._notice(run_id, what, e)
            detail = {**missing_of(e, what), "notice": notice}
        waits = book()
        offered = await asyncio.to_thread(waits.look, run_id, MISSING)
        handed = handed_on(offered, detail)
        hand_on = handed is not None and handed < HAND_ONS
        detail["handed_on"] = handed + 1 if hand_on and handed is not None else 0
        await asyncio.to_thread(waits.arrive, run_id, MISSING, "missing", detail)

        async def known() -> bool:
            try:
                lookup()
            except (AgentNotFoundError, SwarmNotFoundError, EncryptionKeyError):
                return False
            return True

        async def known_or_hand_on() -> bool:
            nonlocal hand_on
            if hand_on:  # parked: resume it at once, for the next process that looks
                hand_on = False
                return True
            return await known()

        while not await known():
            await park(run_id, MISSING, "missing", known_or_hand_on, why=what, detail=detail)
        return lookup()

    def _notice(
        self,
        run_id: str,
        what: str,
        error: AgentNotFoundError | SwarmNotFoundError | EncryptionKeyError,
    ) -> str:
        """Tell the log that the run waits for `what`; returns the notice, which the run's
        `missing` wait keeps for every reader (`get_run(...).problem`)."""
        if isinstance(error, SwarmNotFoundError):
            remedy = f"create DurableSwarm(..., name={error.swarm_name!r}) in a worker"
        elif isinstance(error, EncryptionKeyError):
            remedy = f"give a worker the encryption key {error.key_id!r}"
        else:
            remedy = "import it in a worker"
        notice = (
            f"waiting for {what}: {remedy} (or the process that runs this run); the run "
            f"stays pending and loses nothing. ({error})"
        )
        logger.warning("Run %s is %s", run_id, notice)
        return notice


HOST = RunHost()
# Set while the effects of a `Parallel` run at the same time (see `DurableRuntime.aparallel`).
_IN_PARALLEL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durable_swarm_in_parallel", default=False
)


def missing_of(
    error: AgentNotFoundError | SwarmNotFoundError | EncryptionKeyError, what: str
) -> dict[str, Any]:
    """What a run misses, as its `missing` wait records it (so a process that has it resumes
    the run): `{"agent": name}`, `{"function": name}`, `{"swarm": name}` or `{"key": key id}`."""
    if isinstance(error, SwarmNotFoundError):
        return {"swarm": error.swarm_name}
    if isinstance(error, EncryptionKeyError):
        return {"key": error.key_id}
    return {"function" if what.startswith("function") else "agent": error.agent_name}


# How many times in a row a run resumed for what it misses is handed on by processes that miss
# it too, before it waits for the next sweep of a process that has it (see `handed_on`).
HAND_ONS = 8


def handed_on(offered: Wait | None, detail: Mapping[str, Any]) -> int | None:
    """How many processes that miss what `detail` names handed this run on since a process
    that has it resumed it (`offered`: its `missing` wait as this execution found it), or None
    if nobody resumed it for that (a first arrival, or it misses something else now).

    A process whose sweep finds it has what a parked run misses resumes the run onto its queue,
    and whichever process looks at that queue first takes it: often one that misses it too,
    and the same one round after round (queue threads look at fixed intervals, so their order
    barely changes between two sweeps). Such a process parks the run and resumes it again at
    once, for the next process that looks (it just looked itself): the run reaches one that
    has what it misses within a few hand-ons, not a sweep each. `HAND_ONS` in a row at most,
    then it waits for the next sweep (no busy loop once that process is gone)."""
    if offered is None or offered.state != "resuming" or offered.kind != "missing":
        return None
    was = offered.detail or {}
    if any(was.get(k) != v for k, v in detail.items() if k not in ("notice", "handed_on")):
        return None
    count = was.get("handed_on", 0)
    return count if isinstance(count, int) else 0


def _transient(error: BaseException) -> bool:
    import openai

    return isinstance(
        error,
        (
            openai.APIConnectionError,
            openai.APITimeoutError,
            openai.RateLimitError,
            openai.InternalServerError,
        ),
    )


def _raiser(error: BaseException) -> Any:
    def refuse() -> None:
        raise error

    return refuse


def _escapes(error: BaseException) -> bool:
    """Whether `error` is a BaseException from user code that would otherwise escape the run
    and stop DBOS's event loop (KeyboardInterrupt, SystemExit, GeneratorExit, a user's own
    subclass). DBOS's own control exceptions and asyncio's cancellation pass through."""
    return not isinstance(error, (Exception, DBOSBaseException, asyncio.CancelledError))


def _where(error: BaseException) -> str:
    """Where user code raised `error`: ` in name (file:line)` of the innermost frame of its
    traceback outside this package ("" if there is none)."""
    found = ""
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            found = f" in {code.co_name} ({os.path.basename(code.co_filename)}:{tb.tb_lineno})"
        tb = tb.tb_next
    return found


def _from_dbos(error: BaseException) -> bool:
    """Whether DBOS (writing the run's log) made the database call that raised `error`, rather
    than user code with a database of its own: the last frame before SQLAlchemy's, standard
    library frames (`with` blocks) aside, is DBOS's."""
    caller = None
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(_SQLALCHEMY_DIR):
            return caller is not None and caller.startswith(DBOS_DIR)
        stdlib = filename.startswith(_STDLIB_DIR) and "-packages" not in filename
        if not stdlib:
            caller = filename
        tb = tb.tb_next
    return False


def user_code_failed(error: BaseException, run_id: str, what: str) -> DurableSwarmError:
    """The error recorded on a run whose user code (`what`) raised the BaseException `error`."""
    detail = f": {error}" if str(error) else ""
    return DurableSwarmError(
        f"{what} in run {run_id!r} raised {type(error).__name__}{detail}{_where(error)}; the run "
        "failed here (the process goes on serving other runs). Fix the code, then "
        "resume(run_id).",
        run_id=run_id,
        error_type=type(error).__name__,
    )


@contextlib.contextmanager
def user_code(run_id: str, what: str) -> Iterator[None]:
    """Run the block's user code (`what`): a BaseException from it that would escape the run
    (see `_escapes`) fails the run instead, with `user_code_failed`'s error.

    One is let through: the GeneratorExit that `close()` throws into the coroutine running the
    block when that coroutine is dropped from outside (its task garbage-collected while
    pending): the user's code did not fail, and turning it into an error would have DBOS record
    the step as failed. It is told from a GeneratorExit the user's code raises by the task
    running when it arrives: not the task that entered the block."""
    owner = _current_task()
    try:
        yield
    except BaseException as e:
        if not _escapes(e) or (
            isinstance(e, GeneratorExit) and owner is not None and _current_task() is not owner
        ):
            raise
        raise user_code_failed(e, run_id, what) from None


def _current_task() -> asyncio.Task[Any] | None:
    """The task running in this thread's event loop, None outside one."""
    loop = asyncio._get_running_loop()
    return None if loop is None else asyncio.current_task(loop)


def _restored(before: dict[str, str]) -> dict[str, Any]:
    """The context a `context_snapshot` was taken of (its JSON values; a run's context holds no
    others, since every value is checked where it enters)."""
    restored = {}
    for key, text in before.items():
        try:
            restored[key] = json.loads(text)
        except ValueError:
            continue
    return restored


def _check_json(tool: str, run_id: str, payload: dict[str, Any]) -> None:
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ToolResultNotSerializableError(tool, str(e), run_id=run_id) from e


class DurableRuntime:
    """Performs the loop's effects as DBOS steps of the current workflow.

    `tally` counts the usage recorded by the run's model steps (and its sub-agents' results), so
    replaying the log after a crash rebuilds it exactly; `budget` is checked against it before
    each model call.
    """

    def __init__(
        self,
        run: RunRequest,
        spec: RunSpec,
        settings: SwarmSettings,
        trace: tracing.Run | None = None,
    ) -> None:
        assert run.run_id is not None
        self.run_id: str = run.run_id
        self.spec = spec
        self.settings = settings  # the run's swarm's, as this execution began
        self.client = registry.client_of(settings)
        # The options the spec stores, else its swarm's.
        retries = spec.model_retries
        self.model_retries = settings.model_retries if retries is None else retries
        self.budget = run.budget  # raised by `resume(run_id, budget=...)` while the run waits
        prices = settings.prices if spec.prices is None else spec.prices
        self.prices: dict[str, Mapping[str, float]] = dict(prices)
        self.tally = Tally()
        self.trace = trace  # this execution's run span (ended by `adrive`)
        self.max_result_chars = spec.max_result_chars or settings.max_result_chars
        self.limits = registry.limits_of(settings)  # shared by every process on the database
        # id(call) -> child handle or error message; calls live in the history, so ids stay unique
        self._children: dict[int, Any] = {}
        self._child_count = 0
        self._waits = 0  # numbers this run's waits (the same again on replay)
        # id(tool message) -> (the message, the step storing it): kept alive, so ids stay unique
        self._stored: dict[int, tuple[dict[str, Any], int]] = {}
        self.compaction: tuple[int, str] | None = None  # the latest: (cut, summary)

    async def _check_budget(self, effect: ModelCall) -> None:
        """Stop the run before this model call if its budget is spent.

        Before failing, the run takes a raised budget sent by `resume(run_id, budget=...)` (a
        DBOS message); the refusal is a step of its own (`budget:<limit>`); resume rewinds to
        the look for a raised budget just before it.
        """
        while self.budget is not None:
            try:
                self.budget.check(
                    self.tally.total,
                    model=str(effect.request.get("model")),
                    prices=self.prices,
                    run_id=self.run_id,
                    agent=effect.agent.name,
                )
                return
            except BudgetExceededError as e:
                exceeded = e
            raised = await DBOS.recv_async(BUDGET_TOPIC, timeout_seconds=0)
            if isinstance(raised, dict) and "budget" in raised:
                self.budget = Budget.from_json(raised["budget"])
                continue
            await DBOS.run_step_async({"name": f"budget:{exceeded.limit}"}, _raiser(exceeded))

    async def acall_model(self, effect: ModelCall) -> dict[str, Any]:
        sender = effect.agent.name
        await self._check_budget(effect)
        client = self.client
        requester = without_retries(client)  # the step's retries are the only ones
        model_name = effect.request.get("model")
        step: list[int | None] = []
        limited = limits_for(self.limits, model_name, base_url_of(client))
        tries = [0]  # attempts of the step in this execution (a 429 waits if one is left)

        what = f"The model client of agent {sender!r}"
        gate = _drain.Admission(f"run {self.run_id}, step 'model:{sender}'", self.run_id)

        def output_of(completion: Any, span: Any) -> dict[str, Any]:
            message = model.completion_message(completion, sender, run_id=self.run_id)
            usage = model.usage_of(completion)
            cost = call_cost(model_name, usage, self.prices)
            tracing.record_completion(span, completion, usage, cost, message)
            return model_output(message, usage, model_name, cost)

        # The span is made inside the step: a step replayed from the log makes none.
        async def attempt() -> dict[str, Any]:
            with tracing.chat(self.trace, effect.request) as span, user_code(self.run_id, what):
                if effect.request.get("stream"):
                    return await self._streamed(requester, effect, span)
                completion = await model.acreate(
                    requester, effect.request, sender=sender, run_id=self.run_id
                )
                return output_of(completion, span)

        async def model_step() -> dict[str, Any]:
            step[:] = [DBOS.step_id]
            if limited is not None:  # waits for its turn first, holding no worker slot
                call = LimitedCall(
                    limited[0], limited[1], self.run_id, f"{self.run_id}:{DBOS.step_id}",
                    sender, estimate_tokens(effect.request),
                )  # fmt: skip
                # Beside guardrails asked at the same time, a park would leave their steps
                # running while the run is resumed elsewhere: the call waits here instead.
                park_call = None if _IN_PARALLEL.get() else self._limit_parker(sender, DBOS.step_id)
                return await call_limited(
                    self.limiter(), call, gate.aenter, gate.leave, attempt, park_call
                )
            await gate.aenter()  # a stopping process begins no new step (`_drain`)
            tries[0] += 1
            try:
                return await attempt()
            except Exception as e:
                if (seconds := self._retry_after(e, tries[0])) is not None:
                    await asyncio.sleep(seconds)
                raise

        def sync_model_step() -> dict[str, Any]:
            gate.enter()
            step[:] = [DBOS.step_id]
            tries[0] += 1
            with tracing.chat(self.trace, effect.request) as span, user_code(self.run_id, what):
                try:
                    completion = model.create(
                        requester, effect.request, sender=sender, run_id=self.run_id
                    )
                except Exception as e:
                    if (seconds := self._retry_after(e, tries[0])) is not None:
                        time.sleep(seconds)
                    raise
                return output_of(completion, span)

        options: StepOptions = {
            "name": f"model:{sender}",
            "retries_allowed": self.model_retries > 0,
            "max_attempts": self.model_retries + 1,
            "interval_seconds": 1.0,
            "backoff_rate": 2.0,
            "should_retry": _transient,
        }
        asynchronous = effect.request.get("stream") or limited is not None
        try:
            if asynchronous or is_async_callable(requester.chat.completions.create):
                output = await DBOS.run_step_async(options, model_step)
            else:  # a sync client: the whole step in one thread, as a sync DBOS step
                output = await sync_step(options, sync_model_step, blocking_executor())
        except Exception as e:
            failure = model_failure(
                e, run_id=self.run_id, step=step[0] if step else None, agent=sender,
                model=model_name, client=client,
            )  # fmt: skip
            if failure is e:
                raise
            raise failure from None
        finally:
            gate.leave()  # recorded (or failed): no longer in flight
        await HOST.await_key(self.run_id, output, f"step 'model:{sender}'")
        self.tally.add(sender, call_usage(output))
        message: dict[str, Any] = output["message"]
        return message

    def _limit_parker(self, sender: str, step_id: int | None) -> Parker:
        """How the model step `step_id` of agent `sender` parks while its call waits for its
        turn under a model limit (see `Limiter.admit`): a `limit` wait, resumed by this
        process when the turn may have come (else by any process's sweep)."""
        run_id = self.run_id

        async def park_for(seconds: float, waiting: dict[str, Any]) -> None:
            key = f"limit:{step_id}"
            until = time.time() + seconds
            detail = {"until": until, "rate_limit": {**waiting, "agent": sender}}
            await asyncio.to_thread(book().arrive, run_id, key, "limit", detail)
            resume_at(run_id, key, seconds)

            async def never() -> bool:
                return False

            why = f"its turn under the model limit {waiting.get('key')!r}"
            await park(run_id, key, "limit", never, why=why, detail=detail)
            # (it returns only when the wait could not park: the caller asks for a turn again)

        return park_for

    def limiter(self) -> Limiter:
        """The shared model limits of the run database."""
        url = _dbos.run_database_url()
        assert url is not None  # a run executes here: DBOS is launched
        return limiter_for(url)

    def _retry_after(self, error: BaseException, tries: int) -> float | None:
        """How long a model call of no limits waits after the 429 `error` before the step's
        next attempt (which DBOS makes after its own backoff): what the provider's headers ask,
        at most `RETRY_AFTER_CAP` s; None if it is no 429 or no attempt is left."""
        import openai

        if tries > self.model_retries or not isinstance(error, openai.RateLimitError):
            return None  # another error, or the step's last attempt: it fails now
        if rate_limited_seconds(error, 0) is None:
            return None  # a spent quota: waiting does not help
        seconds = retry_after(getattr(getattr(error, "response", None), "headers", None))
        return None if seconds is None else min(seconds, RETRY_AFTER_CAP)

    async def asummarize(self, effect: Summarize) -> str:
        """A compaction, recorded as a step (`compact:<agent>`): the swarm's `compactor`
        function's summary, else a model call's (its usage counts as the run's). A replay
        reads the recorded summary: a compaction is never paid for twice."""
        sender, compactor = effect.agent.name, self.settings.compactor
        requester = without_retries(self.client)
        model_name = effect.request.get("model")
        gate = _drain.Admission(f"run {self.run_id}, step 'compact:{sender}'", self.run_id)

        async def compact_step() -> dict[str, Any]:
            await gate.aenter()  # a stopping process begins no new step (`_drain`)
            output: dict[str, Any] = {"upto": effect.upto, "summarized": len(effect.messages)}
            if compactor is not None:
                with user_code(self.run_id, f"The compactor of swarm {self.settings.name!r}"):
                    summary = await run_in(None, compactor, copy.deepcopy(effect.messages))
                return {**output, "summary": str(summary)}
            with user_code(self.run_id, f"The model client of agent {sender!r}"):
                completion = await model.acreate(
                    requester, effect.request, sender=sender, run_id=self.run_id
                )
            message = model.completion_message(completion, sender, run_id=self.run_id)
            usage = model.usage_of(completion)
            cost = call_cost(model_name, usage, self.prices)
            summary = str(message.get("content") or "")
            return {**output, **model_output(message, usage, model_name, cost), "summary": summary}

        options: StepOptions = {
            "name": f"compact:{sender}",
            "retries_allowed": self.model_retries > 0,
            "max_attempts": self.model_retries + 1,
            "interval_seconds": 1.0,
            "backoff_rate": 2.0,
            "should_retry": _transient,
        }
        try:
            output = await DBOS.run_step_async(options, compact_step)
        finally:
            gate.leave()
        if "usage" in output:
            self.tally.add(sender, call_usage(output))
        self.compaction = (effect.upto, str(output["summary"]))
        return str(output["summary"])

    async def _streamed(self, client: Any, effect: ModelCall, span: Any) -> dict[str, Any]:
        """A streamed model call: events go to the run's DBOS stream as they arrive."""
        step, attempt = DBOS.step_id, uuid.uuid4().hex[:8]
        assembler = model.StreamAssembler(effect.agent.name)

        async def publish(event: dict[str, Any]) -> None:
            item = {"step": step, "attempt": attempt, "event": event}
            await DBOS.write_stream_async(EVENTS_STREAM, item)

        # The turn's start is published with its first chunk: an attempt that fails before
        # any (a 429, a refused connection) and is retried leaves readers nothing to undo.
        started = False
        chunks = model.astream_chunks(
            client, effect.request, sender=effect.agent.name, run_id=self.run_id
        )
        async for chunk in chunks:
            if not started:
                await publish({"delim": "start"})
                started = True
            if (event := assembler.feed(chunk)) is not None:
                await publish(event)
        if not started:
            await publish({"delim": "start"})
        await publish({"delim": "end"})
        requested, message = effect.request.get("model"), assembler.message()
        cost = call_cost(requested, assembler.usage, self.prices)
        tracing.record_completion(span, assembler.last_chunk, assembler.usage, cost, message)
        return model_output(message, assembler.usage, requested, cost)

    async def await_input(self, effect: WaitForInput) -> Any:
        """A durable wait for the person: published as the run's `waiting_for` event, answered
        by `send_input`/`approve`/`reject` from any process. The run parks until the answer
        is in (see `durable._waits`): it holds nothing in any process meanwhile."""
        digest = arguments_digest(effect.call) if effect.call else None
        self._waits += 1
        waiting = {
            "wait_id": self._waits,
            "kind": effect.kind,
            "agent": effect.agent.name,
            "prompt": effect.prompt,
            "tool_call": effect.call,
            "digest": digest,
        }
        # DBOS's patch markers keep the logs of earlier releases replaying as they were written:
        # a plain `recv` (before WATCHED_WAITS), a `watch:` step and a `recv` (before
        # PARKED_WAITS). A run of an earlier release waiting now takes the parked path.
        watched = await DBOS.patch_async(WATCHED_WAITS)
        await DBOS.set_event_async(WAITING_EVENT, waiting)
        parked = watched and await DBOS.patch_async(PARKED_WAITS)
        key = person_key(self._waits)
        while True:
            if parked:
                step: StepOptions = {"name": f"answer:{effect.kind}"}
                message = await DBOS.run_step_async(step, self._answer, effect, key)
                await asyncio.to_thread(book().leave, self.run_id, key)
            elif watched:  # recorded by an earlier release: replayed, never executed
                await DBOS.run_step_async({"name": f"watch:{effect.kind}"}, _watched)
                message = await DBOS.recv_async(effect.kind, timeout_seconds=0)
            else:
                message = await DBOS.recv_async(effect.kind, timeout_seconds=WAIT_SECONDS)
            await HOST.await_key(self.run_id, message, "an answer")
            if not isinstance(message, dict):
                continue
            if effect.kind == "input":
                answer: Any = str(message.get("text", ""))
                break
            if message.get("tool_call_id") == (effect.call or {}).get("id") and (
                message.get("digest") == digest
            ):
                answer = message
                break
            logger.warning(
                "Run %s ignored a decision for tool call %s: it waits for %s with other arguments.",
                self.run_id,
                message.get("tool_call_id"),
                (effect.call or {}).get("id"),
            )
        await DBOS.set_event_async(WAITING_EVENT, None)
        return answer

    async def _answer(self, effect: WaitForInput, key: str) -> Any:
        """The body of an `answer:<kind>` step: the answer to the wait `key` if it is in, else
        the run parks (DBOS records nothing for the step, which runs again once resumed)."""
        waits = book()
        await asyncio.to_thread(waits.arrive, self.run_id, key, effect.kind)

        async def answered() -> bool:
            again = await self._look(key)
            return again is not None and again.answered

        while True:
            found = await self._look(key)
            if found is not None and found.answered:
                return found.answer
            await park(self.run_id, key, effect.kind, answered, why=f"{effect.kind} from a person")

    async def _look(self, key: str) -> Any:
        """This run's wait `key` as the table has it; a person's cancellation ends the run."""
        found = await asyncio.to_thread(book().look, self.run_id, key)
        if found is not None and found.state in CANCELLED_STATES:
            await cancelled(self.run_id)
        if found is not None and found.answered:
            answer = found.answer
            await HOST.await_key(self.run_id, answer, "an answer")
        return found

    async def arecord(self, effect: Transition) -> None:
        """A handoff, recorded as a step of its own (visible in the run's timeline)."""
        event = effect.to_json()

        def handoff_step() -> dict[str, Any]:
            if self.trace is not None:
                self.trace.handoff(event)
            return event

        await DBOS.run_step_async(
            {"name": f"handoff:{effect.source}->{effect.target or effect.reason}"}, handoff_step
        )

    async def alist_tools(self, effect: ListTools) -> list[dict[str, Any]]:
        """A tool list, recorded as a step: replays see the list the run first met."""
        name = f"tools:{effect.source.name}"

        async def list_step() -> list[dict[str, Any]]:
            await gate.aenter()  # a stopping process begins no new step (`_drain`)
            return await effect.source.alist_tools()

        with _drain.step(self.run_id, name) as gate:
            listing: list[dict[str, Any]] = await DBOS.run_step_async({"name": name}, list_step)
        return listing

    async def acheck_guardrail(
        self, effect: CheckGuardrail, reservation: Any = None
    ) -> dict[str, Any]:
        """A guardrail's verdict, recorded as a step (`guardrail:<name>`; at `reservation`, a
        step id drawn earlier, when given): a replay reads it and never asks again. A guardrail
        agent's conversation runs inside the step, with the run's client; its usage is part of
        the verdict, so the run's tally counts it on replay too."""
        name = f"guardrail:{effect.guardrail.name}"
        what = f"Guardrail {effect.guardrail.name!r}"
        gate = _drain.Admission(f"run {self.run_id}, step '{name}'", self.run_id)
        used = Tally()

        async def ask(agent: Any, messages: list[dict[str, Any]]) -> str:
            child = InMemoryRuntime(self.client, _no_person(agent), prices=self.prices)
            response = await adrive(turn_loop(RunRequest(agent, messages)), child)
            used.merge(child.tally)
            return final_answer(response.messages)

        async def guardrail_step() -> dict[str, Any]:
            await gate.aenter()  # a stopping process begins no new step (`_drain`)
            with user_code(self.run_id, what):
                verdict = await guardrails.acheck(effect, ask)
            if used.by_agent:
                verdict["usage"] = used.to_json()
            return verdict

        options: StepOptions = {"name": name}
        try:
            if reservation is not None:
                verdict = await reservation.run_async(options, guardrail_step)
            else:
                verdict = await DBOS.run_step_async(options, guardrail_step)
        finally:
            gate.leave()
        if verdict.get("usage"):
            self.tally.merge(Tally.from_json(verdict["usage"]))
        run_log.info(
            "run %s: guardrail %s %s%s", self.run_id, effect.guardrail.name,
            "tripped" if verdict.get("tripped") else "passed",
            f": {verdict.get('reason')}" if verdict.get("tripped") else "",
        )  # fmt: skip
        return verdict

    async def aparallel(self, effect: Parallel) -> list[Any]:
        """The first model call with the input guardrails asked at the same time. Each
        guardrail's step id is drawn first (`DBOS.reserve_step`), then the model call takes
        the next ones, so the log's step order is the same however the two interleave."""
        call, *checks = effect.effects
        reserved = [DBOS.reserve_step() for _ in checks]
        together = _IN_PARALLEL.set(True)  # its model call waits for a limit, never parks
        try:
            results = await asyncio.gather(
                self.acall_model(call),
                *(self.acheck_guardrail(c, r) for c, r in zip(checks, reserved, strict=True)),
                return_exceptions=True,
            )
        finally:
            _IN_PARALLEL.reset(together)
        return _unless_failed(list(results))

    async def acall_tool(self, effect: ToolInvocation) -> ToolOutcome:
        name = effect.call["function"]["name"]
        _debug_tool(effect)  # Swarm's debug lines, as the in-memory runtime prints them
        if effect.function is None:
            return unknown_tool(effect.call, effect.context_variables)
        if is_delegation(effect.function):
            return await self._delegate(effect)
        function = effect.function

        def payload_of(outcome: ToolOutcome, before: dict[str, str]) -> dict[str, Any]:
            refusal = self._refusal(name, outcome)
            if refusal is not None:  # the model reads why; the context is as it was before
                logger.warning("Run %s: %s", self.run_id, refusal)
                return {
                    "message": {**outcome.message, "content": refusal},
                    "context_variables": _restored(before),
                }
            if is_agent(outcome.agent):
                HOST.remember(self.run_id, outcome.agent)
            payload: dict[str, Any] = {"message": outcome.message}
            content = outcome.message.get("content")
            if isinstance(content, str) and len(content) > INLINE_CHARS:
                payload["step"] = DBOS.step_id  # the run's result names this step (`compact`)
            if changes := context_changes(before, outcome.context_variables):
                payload["context_changes"] = changes
            if outcome.updates:  # a copy: as stored, whatever later calls do to its values
                payload["updates"] = copy.deepcopy(outcome.updates)
            if (handoff := encode_target(outcome.agent)) is not None:
                payload["handoff"] = handoff
            if outcome.ask is not None:
                payload["ask"] = outcome.ask
            _check_json(name, self.run_id, payload)
            return payload

        what, context = f"Tool {name!r}", effect.context_variables
        gate = _drain.Admission(f"run {self.run_id}, step 'tool:{name}'", self.run_id)

        # Spans are made inside the steps: a step replayed from the log makes none.
        async def tool_step() -> dict[str, Any]:
            await gate.aenter()  # a stopping process begins no new step (`_drain`)
            key, before = f"{self.run_id}:{DBOS.step_id}", context_snapshot(context)
            with user_code(self.run_id, what), tracing.tool(self.trace, effect.call) as span:
                outcome = await execute_tool_async(
                    function, effect.call, context, idempotency_key=key
                )
                tracing.tool_result(span, outcome.message)
            return payload_of(outcome, before)

        def sync_tool_step() -> dict[str, Any]:
            gate.enter()
            key, before = f"{self.run_id}:{DBOS.step_id}", context_snapshot(context)
            with user_code(self.run_id, what), tracing.tool(self.trace, effect.call) as span:
                started = time.perf_counter()
                outcome = execute_tool(function, effect.call, context, idempotency_key=key)
                note_tool_time(function, time.perf_counter() - started)
                tracing.tool_result(span, outcome.message)
            return payload_of(outcome, before)

        options: StepOptions = {"name": f"tool:{name}"}
        try:
            if inspect.iscoroutinefunction(function):
                output = await DBOS.run_step_async(options, tool_step)
            else:  # a sync tool: checked, run and recorded in one thread, as a sync DBOS step
                output = await sync_step(options, sync_tool_step, executor_for_tool(function))
        finally:
            gate.leave()  # recorded (or failed): no longer in flight
        await HOST.await_key(self.run_id, output, f"step 'tool:{name}'")
        target = await decode_target(self.run_id, output.get("handoff"))
        context = context_after(effect.context_variables, output)
        if isinstance(output.get("step"), int):
            self._stored[id(output["message"])] = (output["message"], output["step"])
        updates = output.get("updates") or {}
        return ToolOutcome(output["message"], context, target, output.get("ask"), updates)

    def compact(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` for the run's result, with each long tool result left in the step output
        that already stores it (the result names the step instead), so it is stored once."""
        compacted = []
        for message in messages:
            kept, step = self._stored.get(id(message), (None, None))
            content = message.get("content")
            long = isinstance(content, str) and len(content) > INLINE_CHARS
            if kept is message and step is not None and long:
                message = stored_in_step(message, step)
            compacted.append(message)
        return compacted

    def _refusal(self, name: str, outcome: ToolOutcome) -> str | None:
        """Why `outcome` cannot be stored (its context is not JSON, its result is too long), as
        the error observation the model reads instead; None when it can."""
        content = outcome.message.get("content")
        problem = json_problem(outcome.context_variables, "context_variables") or json_problem(
            outcome.updates, "context_variables"
        )
        if problem is not None:
            return (
                f"Error: tool {name} left a value in context_variables that cannot be stored: "
                f"{problem}. Its changes to the context were dropped; store JSON values only "
                "(str, finite numbers, bools, None, lists, dicts with str keys)."
            )
        if isinstance(content, str) and len(content) > self.max_result_chars:
            return (
                f"Error: tool {name} returned {len(content)} characters, over the "
                f"{self.max_result_chars}-character limit of a stored result; ask it for less "
                "(a narrower query, a smaller page)."
            )
        return None

    async def _start_children(self, effect: ToolInvocation) -> None:
        """Start, in call order, every sub-agent of the message not started yet (fan-out)."""
        started = False
        for call, function in effect.batch:
            if function is None or not is_delegation(function) or id(call) in self._children:
                continue
            task, error = delegation_task(function, call)
            if error is not None or task is None:
                self._children[id(call)] = error
                continue
            self._child_count += 1
            child_id = f"{self.run_id}-sub{self._child_count}"
            delegate = tool_spec(function).delegate
            HOST.remember(child_id, delegate)
            HOST.bind(child_id, self.settings)
            spec = self.spec.sub_agent(
                delegate,
                task,
                parent=self.run_id,
                tool_call_id=call.get("id"),
                model_retries=self.model_retries,
                prices=self.prices,
                max_result_chars=self.max_result_chars,
                # A sub-agent draws on what is left of its parent's budget when it starts.
                budget=None if self.budget is None else self.budget.remaining(self.tally.total),
                traceparent=self.trace.traceparent if self.trace is not None else None,
            )
            _dbos.note_taken([child_id])
            with SetWorkflowID(child_id):
                self._children[id(call)] = await DBOS.start_workflow_async(
                    run_workflow, spec.to_json()
                )
            started = True
        if started:
            # One turn of the loop: each new sub-agent's task registers with DBOS (and joins
            # this run's worker-slot accounting) before this run joins any of them.
            await asyncio.sleep(0)

    async def _delegate(self, effect: ToolInvocation) -> ToolOutcome:
        """A sub-agent call: a child workflow, joined here (see `durable_swarm.subagents`)."""
        await self._start_children(effect)
        child = self._children[id(effect.call)]
        if isinstance(child, dict):
            return ToolOutcome(child, effect.context_variables)
        child_id = child.get_workflow_id()
        if await DBOS.patch_async(PARKED_JOINS):
            output = await DBOS.run_step_async({"name": f"join:{child_id}"}, self._joined, child)
        else:  # recorded by an earlier release (a `DBOS.getResult` step): replayed
            output = await child.get_result(polling_interval_sec=JOIN_POLL_SECONDS)
        self.tally.merge(Tally.from_json(output.get("usage")))
        answer = final_answer(output.get("messages") or [])
        return ToolOutcome(tool_message(effect.call, answer), effect.context_variables)

    async def _joined(self, child: Any) -> Any:
        """The body of a `join:<child>` step: the sub-agent run's result (its error raised),
        once it ends. While it waits for a person (it parked), this run parks too, and the
        sub-agent's end resumes it (`end_join`)."""
        child_id = str(child.get_workflow_id())
        key = join_key(child_id)
        waits = book()
        handle = child
        while True:
            try:
                output = await _result_outside_run(handle)
            except DBOSAwaitedWorkflowCancelledError:
                if not await asyncio.to_thread(waits.is_parked, child_id):
                    raise  # cancelled by a person: the join's recorded error, as DBOS's own
            else:
                await asyncio.to_thread(waits.leave, self.run_id, key)
                return output
            await asyncio.to_thread(waits.arrive, self.run_id, key, "join")
            found = await self._look(key)
            if found is None or not found.answered:

                async def ended() -> bool:
                    again = await self._look(key)
                    if again is not None and again.answered:
                        return True
                    return not await asyncio.to_thread(waits.is_parked, child_id)

                why = f"its sub-agent run {child_id}"
                await park(self.run_id, key, "join", ended, why=why)
            # it ended (or runs again) meanwhile: read its result through the database
            handle = await outside_run_async(DBOS.retrieve_workflow, child_id)


async def _result_outside_run(handle: Any) -> Any:
    """`await handle.get_result()` in a task of its own with an empty context, so that DBOS
    records no `DBOS.getResult` step for it (the caller's step records the result)."""
    waiting = contextvars.Context().run(
        asyncio.ensure_future, handle.get_result(polling_interval_sec=JOIN_POLL_SECONDS)
    )
    return await waiting


async def cancelled(run_id: str) -> NoReturn:
    """A person cancelled `run_id` (its wait says so): end this execution without recording
    anything more (`_parking.cancel_self`)."""
    await cancel_self(book(), run_id, "a person cancelled it")


async def _watched() -> None:
    """The body of a `watch:<kind>` step of a log recorded by an earlier release (such steps
    are only ever replayed: the wait that reaches this point now parks instead)."""
    raise DurableSwarmError(
        "A `watch:` step of an earlier release ran again instead of replaying; this run's log "
        "does not match its code. Report it with the run's id."
    )


async def sync_step(
    options: StepOptions, body: Callable[[], T], executor: concurrent.futures.Executor | None
) -> T:
    """`body` as a sync DBOS step of the current workflow, run from async code.

    DBOS runs an `async def` step in three thread hops (look up its recorded result, enter the
    step, record the result), plus one more when the body is blocking code; a sync step is looked
    up, run and recorded in one thread. That thread comes from `executor` (sync tools:
    `_dbos.executor_for_tool(...)`, sync model clients: `_aio.blocking_executor()`; None: the
    event loop's default, DBOS's executor), so a slow tool or model call never holds one of
    DBOS's executor threads for long.
    """
    return await run_in(executor, DBOS.run_step, options, body)


async def decode_target(run_id: str, data: Mapping[str, Any] | None) -> Any:
    """The inverse of `encode_target` (an agent is looked up as in `RunHost.await_agent`)."""
    if not data:
        return None
    if "option" in data:
        return AfterWorkOption(data["option"])
    if "callable" in data:  # only a function this process registered: the log never imports
        name = str(data["callable"])
        return await HOST.await_known(
            run_id, lambda: _registry.resolve_function(name, run_id=run_id), f'function "{name}"'
        )
    return await HOST.await_agent(run_id, data)


@DBOS.workflow(name=WORKFLOW_NAME)
async def run_workflow(stored: dict[str, Any]) -> dict[str, Any]:
    """One durable conversation: Swarm's `run` with every effect checkpointed. `stored` is the
    run's spec as `RunSpec.to_json` (or an earlier release) wrote it."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    _dbos.note_entered(run_id)  # it runs here now (see `_dbos.busy_runs` and `_dbos.admit`)
    spec: RunSpec | None = None
    try:
        await HOST.await_key(run_id, stored, "its input")
        spec = RunSpec.from_json(stored)
        run_log.info(
            "run %s: agent %s of swarm %s, running here", run_id, spec.agent["name"], spec.swarm
        )
        output = await _checked(run_id, spec)
    except (DBOSWorkflowCancelledError, DBOSWorkflowConflictIDError):
        raise  # parked or cancelled, or put back to be run again: it has not ended
    except Exception as e:
        reason = (str(e).splitlines() or [""])[0][:200]
        run_log.info("run %s failed: %s: %s", run_id, type(e).__name__, reason)
        await _ended(run_id, spec)
        raise
    finally:
        HOST.finished_here(run_id)
        _dbos.note_left(run_id)
    run_log.info("run %s succeeded", run_id)
    await _ended(run_id, spec)
    return output


async def _ended(run_id: str, spec: RunSpec | None) -> None:
    """`run_id` ends (its outcome is recorded next): a sub-agent run resumes its parent if the
    parent parked waiting for it. Done before the outcome is recorded, so a crash in between
    leaves the parent resumed (it then reads the result once this run, recovered, records it),
    never parked for good."""
    if spec is None or not spec.parent:
        return
    try:
        await asyncio.to_thread(end_join, spec.parent, run_id)
    except Exception as e:  # the run's outcome comes first; its parent's sweep retries
        logger.warning("Run %s could not resume its parent run %s: %s", run_id, spec.parent, e)


async def _checked(run_id: str, spec: RunSpec) -> dict[str, Any]:
    """`_run`, with a database fault or a user's BaseException turned into the run's error."""
    try:
        with user_code(run_id, "User code"):  # outside steps: instructions, conditions, handoffs
            return await _run(run_id, spec)
    except sa.exc.DBAPIError as e:
        if not _from_dbos(e):
            raise  # a user tool's own database
        # the run database refused a checkpoint
        url = _dbos.launched_url() or ""
        fault = DatabaseFaultError(display_url(url), describe_fault(e, url), run_id=run_id)
        logger.error("%s", fault)
        if transient_fault(e) and await _handed_back_after_fault(run_id):
            raise DBOSWorkflowConflictIDError(run_id) from None  # DBOS records nothing
        raise fault from None


async def _handed_back_after_fault(run_id: str) -> bool:
    """Wait until the run database takes writes again (and this process's ownership is
    confirmed), then put `run_id` back on its queue to be run again from its last checkpoint
    (this execution, which may have lost a write, ends without recording anything). True once
    it is back on its queue, or no longer this process's to put back (another process took it
    over, or it was cancelled); False if DBOS stopped here meanwhile (the run is then recovered
    like any other)."""
    delay = 0.5
    while _dbos.launched_url() is not None:
        try:
            moved = await asyncio.to_thread(_dbos.put_back, run_id, execution=True)
        except sa.exc.DBAPIError:
            moved = None  # the fault is still there
        if moved is not None:
            return True
        await asyncio.sleep(delay)
        delay = min(delay * 2, FAULT_RETRY_SECONDS)
    return False


async def _run(run_id: str, spec: RunSpec) -> dict[str, Any]:
    settings = await HOST.await_swarm(run_id, spec.swarm)
    agent = await HOST.await_agent(run_id, spec.agent)
    agents = [await HOST.await_agent(run_id, ref) for ref in spec.agents]
    # A run without a model of its own takes its swarm's; a sub-agent its agent's (as in memory).
    model_override = spec.model_override or (None if spec.parent else settings.model)
    run = RunRequest(
        agent,
        spec.messages,
        spec.context_variables,
        model_override=model_override,
        stream=spec.stream,
        debug=spec.debug,
        max_turns=float("inf") if spec.max_turns is None else spec.max_turns,
        execute_tools=spec.execute_tools,
        after_work=await decode_target(run_id, spec.after_work),
        agents=agents,
        run_id=run_id,
        budget=spec.budget if spec.budget is not None else registry.budget_of(settings),
        session=spec.session,
        compact_at=spec.compact_at,
    )
    # The span opened when the run was started in this process, else a new one in the run's
    # trace (a recovered or resumed execution continues the trace stored with the run).
    trace = HOST.run_traces.pop(run_id, None) or tracing.start_run(
        agent.name, run_id=run_id, traceparent=spec.traceparent
    )
    runtime = DurableRuntime(run, spec, settings, trace)
    try:
        response = await adrive(turn_loop(run), runtime)
    except Exception:
        if run.stream:  # the run failed: its stream ends (a parked run's goes on once resumed)
            await DBOS.close_stream_async(EVENTS_STREAM)
        raise
    if run.stream:
        await DBOS.close_stream_async(EVENTS_STREAM)
    typed = response.output  # the answer of `response.agent`, in its output_type
    result = result_output(
        runtime.compact(response.messages),
        agent_ref(response.agent) if response.agent is not None else None,
        response.context_variables,
        runtime.tally,
        None if typed is None else output_json(response.agent, typed),
    )
    if spec.tool_call_id:  # a sub-agent: the parent's call it answers (see `read_run`)
        result["tool_call_id"] = spec.tool_call_id
    if spec.session is not None:
        history = [*spec.messages, *response.messages]
        kept = session_messages(history, runtime.compaction)
        await _finish_session(run_id, spec.session, kept, spec.session_version)
    return result


async def _finish_session(
    run_id: str, name: str, messages: list[dict[str, Any]], version: int | None
) -> None:
    """The run's last step (`session:<name>`): session `name` keeps `messages` and is free.
    The write is keyed by the run's id (see `SessionStore.finish`): done once, even if the
    process dies between the write and the step's record."""

    def finish() -> dict[str, Any]:
        url = _dbos.run_database_url()  # the app's own DBOS: its system database
        assert url is not None
        store = SessionStore(url, live_status(_dbos.run_status, WaitBook(url)))
        added = store.finish(name, run_id, messages, version)
        return {"session": name, "messages": len(messages), "added": added}

    async def finish_step() -> dict[str, Any]:
        return await asyncio.to_thread(finish)

    await DBOS.run_step_async({"name": f"session:{name}"}, finish_step)
