"""`DurableClient`: start and follow durable runs from a process that has none of the agents' code.

A thin client talks only to the run database (through DBOS's `DBOSClient` and this library's JSON
serializer). It enqueues a run of the `durable_swarm.run` workflow by agent *name* on a queue that
workers serve (`durable-swarm worker module:app --queue NAME`), then reads the run's result, its
event stream and its log, and answers the person-in-the-loop waits, exactly as `DurableSwarm`
does in the process that runs the agents. Nothing here imports agent or tool code, so a web
front end or a script can drive runs that only the workers can execute.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import tracing
from ..compaction import check_compact_at
from ..errors import DatabaseUnavailableError, DurableSwarmError, RunNotFoundError
from ..sessions import check_session_name
from ..usage import Budget, check_budget
from . import _dbos
from ._control import ClientSource, RunCommands, RunControl
from ._database import display_url, is_postgres, resolve_database_url, sqlite_path
from ._engine import DBOSClient, EnqueueOptions
from ._log import EVENTS_STREAM, WORKFLOW_NAME, JsonSerializer, StoredResult, naming_run
from ._parking import client_outcome
from ._runs import RunInfo, step_outputs
from ._sealing import configure as configure_keys
from ._sealing import require
from ._sessions import SessionCommands, SessionStore
from ._spec import DEFAULT_SWARM, RunSpec, check_swarm_name
from ._values import check_input, check_messages
from ._waits import live_status

if TYPE_CHECKING:
    from ..types import Response

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_QUEUE", "ClientRunHandle", "DurableClient"]

DEFAULT_QUEUE = "durable_swarm"
DEFAULT_CONCURRENCY = 10  # runs a worker serving a queue takes at a time
# seconds between a worker queue's looks while runs wait for slots (see `_pace`)
DEFAULT_BUSY_POLL_INTERVAL = 0.05
DEFAULT_SHUTDOWN_GRACE = 10.0  # seconds a worker may take to stop before it exits anyway
_FINISHED = {"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"}


def _connect(url: str) -> DBOSClient:
    """A `DBOSClient` on an existing run database, or `DatabaseUnavailableError`."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise DatabaseUnavailableError(
            display_url(url),
            "the SQLite file does not exist (nothing was created; a worker or a DurableSwarm "
            "creates the database when it starts)",
        )
    try:
        client = DBOSClient(
            system_database_url=url,
            serializer=JsonSerializer(),
            application_name=_dbos.APP_NAME,
            use_listen_notify=is_postgres(url),
        )
    except Exception as e:
        raise DatabaseUnavailableError(display_url(url), _cause(e)) from e
    try:
        client.list_workflows(limit=1, load_input=False, load_output=False)
    except Exception as e:
        client.destroy()
        raise DatabaseUnavailableError(
            display_url(url),
            f"it is not a run database yet ({_cause(e)}); start a worker (or any DurableSwarm) "
            "on it first",
        ) from e
    return client


def _cause(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


class ClientRunHandle:
    """A run seen from a thin client: its id, result, event stream and log."""

    def __init__(self, client: DurableClient, run_id: str) -> None:
        self.run_id = run_id
        self._client = client

    def __repr__(self) -> str:
        return f"ClientRunHandle(run_id={self.run_id!r})"

    def result(self, timeout: float | None = None) -> Response:
        """Wait for the run to finish and return its `Response` (raises the run's error).

        `Response.agent` is the *name* of the agent the run ended on (this process has no agent
        objects), and `Response.output` its structured output as stored JSON; `usage` and
        `usage_by_agent` are the run's, as `DurableSwarm` gives them.
        With `timeout` (seconds), raises `TimeoutError` if the run is not finished by then; the
        run itself goes on.
        """
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while not self._client._ended(self.run_id):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Run {self.run_id!r} did not finish within {timeout} s (it goes on; "
                        "check get_run(run_id).status, and that a worker serves its queue)."
                    )
                time.sleep(self._client.poll_interval)
        with naming_run(self.run_id):
            client = self._client
            waits, poll = client.runs.waits, client.poll_interval
            output = client_outcome(client._dbos, waits, self.run_id, poll)
        from ..types import Response  # the agent types load the tool machinery: only here

        require(output, self.run_id, "its result")
        source = self._client._dbos
        stored = StoredResult.read(output, lambda: step_outputs(source, self.run_id))
        return Response(
            messages=stored.messages,
            agent=(stored.agent or {}).get("name"),
            context_variables=stored.context_variables,
            usage=stored.tally.total,
            usage_by_agent=stored.tally.by_agent,
            output=stored.output,
        )

    def events(self) -> Iterator[dict[str, Any]]:
        """The run's stream events from the start (Swarm's shapes, for runs started with
        `stream=True`), then `{"response": Response}` once it finishes.

        If a worker died in the middle of a streamed turn, that turn starts again with a new
        `{"delim": "start"}` once another worker resumes the run.
        """
        items = self._client._dbos.read_stream(
            self.run_id, EVENTS_STREAM, polling_interval_sec=self._client.poll_interval
        )
        for item in items:
            require(item, self.run_id, "its stream events")
            if isinstance(item, dict) and "event" in item:
                yield item["event"]
        yield {"response": self.result()}

    def info(self) -> RunInfo:
        """The run as its log tells it now (see `DurableClient.get_run`)."""
        return self._client.get_run(self.run_id)

    @property
    def status(self) -> str:
        """The run's current status (`pending`, `waiting_for_input`, ..., `succeeded`)."""
        return self.info().status


class DurableClient(RunCommands, SessionCommands):
    """Starts and follows durable runs without importing any agent or tool code.

    Runs are enqueued on a queue that workers serve (`durable-swarm worker module:app --queue
    NAME`, or `durable_swarm.durable.run_worker`); the workers hold the agents, tools and model
    client. This process only reads and writes the run database. Reading, answering and
    steering runs (`list_runs`, `count_runs`, `list_approvals`, `send_input`, `approve`,
    `reject`, `cancel`, `delete_run`, `prune_runs`) work as `DurableSwarm`'s do: both inherit
    them from `RunCommands`.

    Args:
        database_url: the run database the workers use, resolved like `DurableSwarm`'s (the
            argument, else `DURABLE_SWARM_DATABASE_URL`, else `DBOS_SYSTEM_DATABASE_URL`, else
            `durable_swarm.sqlite` in the working directory). It must already exist: a worker
            creates it. Raises `DatabaseUnavailableError` when it cannot be opened.
        poll_interval: how often (seconds) waiting for a result or for stream events polls the
            database (on PostgreSQL stream reads are also woken by notifications).
        encryption_key: the keys that encrypt what this client stores and open the runs it
            reads (messages, context, tool arguments and results, answers, stream chunks;
            AES-GCM): an `id:key` list
            (a comma-separated string or a sequence; the first key encrypts, all decrypt),
            instead of `DURABLE_SWARM_ENCRYPTION_KEY`. One keyring per process: the last one
            given wins. Needs `pip install 'durable-swarm[crypto]'`
            (docs/guides/encryption.md).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        poll_interval: float = 0.1,
        encryption_key: str | Sequence[str] | None = None,
    ) -> None:
        if encryption_key is not None:
            configure_keys(encryption_key)
        self.database_url = resolve_database_url(database_url)
        self.poll_interval = poll_interval
        self._dbos = _connect(self.database_url)
        self._runs = RunControl(ClientSource(self._dbos), self.database_url)

    @property
    def runs(self) -> RunControl:
        """Reading and steering runs on this client's run database."""
        return self._runs

    def __repr__(self) -> str:
        return f"DurableClient(database_url={self.database_url!r})"

    def __enter__(self) -> DurableClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connections."""
        self._dbos.destroy()

    # --- starting runs -------------------------------------------------------------------

    def start(
        self,
        agent: str,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        run_id: str | None = None,
        model_override: str | None = None,
        max_turns: int | None = None,
        stream: bool = False,
        debug: bool = False,
        execute_tools: bool = True,
        budget: Budget | None = None,
        swarm: str = DEFAULT_SWARM,
        session: str | None = None,
        compact_at: int | str | None = None,
    ) -> ClientRunHandle:
        """Enqueue a run of the agent named `agent` on `queue`; returns its handle at once.

        A worker serving `queue` picks the run up (it waits in the queue until one does). If no
        worker has an agent of that name, the worker holding the run logs which module to import
        and the run stays `pending`, losing nothing, until a worker that has the agent takes it
        (cancel it with `cancel(run_id)` otherwise). With `run_id` of an existing run, attaches
        to that run: it is never executed twice. `max_turns=None` means no limit; `stream=True`
        makes the run publish its events (read them with `handle.events()`). `budget` limits the
        run (see `Budget`); without one, its swarm's default budget applies.

        `swarm` names the swarm the run belongs to (a `DurableSwarm`'s `name` in the workers,
        default "default"): the worker that runs it uses that swarm's model client, model,
        retries, prices and limits. A worker that has no swarm of that name leaves the run
        pending, its `get_run(run_id).problem` saying which swarm to create, until a worker
        that has it takes the run.

        `session` continues a session's conversation (see `DurableSwarm.run`): the run holds
        it from now on (`SessionBusyError` if a live run holds it) and adds its messages when
        it succeeds. `compact_at` is its token budget (see `durable_swarm.compaction`).
        """
        if not isinstance(agent, str) or not agent:
            raise DurableSwarmError(
                f"`agent` must be an agent's name (a non-empty str), not {agent!r}; a thin "
                "client starts runs by name. Nothing was started."
            )
        if run_id is not None and self.runs.source.get_workflow_status(run_id) is not None:
            # Attach. (Enqueueing again would attach too, but a run recovered off its queue
            # makes DBOS warn that the queue is not updated.)
            return ClientRunHandle(self, run_id)
        check_swarm_name(swarm)
        check_messages(messages)
        check_input(messages, context_variables)  # JSON only, before anything is stored
        check_compact_at(compact_at)
        if session is not None:
            check_session_name(session)
        spec = RunSpec.by_name(
            agent,
            messages,
            context_variables,
            swarm=swarm,
            model_override=model_override,
            stream=stream,
            debug=debug,
            max_turns=max_turns,
            execute_tools=execute_tools,
            budget=check_budget(budget),
            # the run's spans join the caller's trace
            traceparent=tracing.current_traceparent() or None,
            session=session,
            compact_at=compact_at,
        )
        options: EnqueueOptions = {
            "workflow_name": WORKFLOW_NAME,
            "queue_name": queue,
            "app_version": _dbos.APPLICATION_VERSION,
        }
        run_id = run_id or str(uuid.uuid4())
        options["workflow_id"] = run_id
        if session is not None:  # held from now on: its messages come first
            prior, version = self._sessions().claim(session, run_id)
            spec = replace(spec, messages=[*prior, *spec.messages], session_version=version)
        try:
            handle: Any = self._dbos.enqueue(options, spec.to_json())
        except BaseException:
            if session is not None:
                self._sessions().release(session, run_id)
            raise
        return ClientRunHandle(self, handle.get_workflow_id())

    def _sessions(self) -> SessionStore:
        """The sessions of this client's run database."""

        def status_of(run_id: str) -> str | None:
            status = self.runs.source.get_workflow_status(run_id)
            return None if status is None else str(status.status)

        return SessionStore(self.database_url, live_status(status_of, self.runs.waits))

    def handle(self, run_id: str) -> ClientRunHandle:
        """A handle on an existing run (raises `RunNotFoundError` for an unknown id)."""
        self._dbos_status(run_id)
        return ClientRunHandle(self, run_id)

    # --- looking at runs -----------------------------------------------------------------

    def _ended(self, run_id: str) -> bool:
        """Whether `run_id` has ended (a parked run has not: it waits)."""
        status = self._dbos_status(run_id).status
        if status == "CANCELLED":
            return not self.runs.waits.is_parked(run_id)
        return status in _FINISHED

    def _dbos_status(self, run_id: str) -> Any:
        status = self.runs.source.get_workflow_status(run_id)
        if status is None:
            raise RunNotFoundError(run_id)
        return status

    def get_run(self, run_id: str) -> RunInfo:
        """The run as its log tells it: status, current agent, messages, context, steps, and
        what it waits for. Raises `RunNotFoundError` for an unknown id."""
        return self.runs.get_run(run_id)

    # --- steering runs -------------------------------------------------------------------

    def resume(self, run_id: str, *, budget: Budget | None = None) -> ClientRunHandle:
        """Continue a cancelled or failed run (see `DurableSwarm.resume`); a worker runs it.
        With `budget`, a run stopped by its budget goes on under this one."""
        return ClientRunHandle(self, self.runs.resume(run_id, budget))

    def fork(self, run_id: str, step: int, *, new_run_id: str | None = None) -> ClientRunHandle:
        """A new run copying `run_id`'s steps before `step` (see `DurableSwarm.fork`)."""
        return ClientRunHandle(self, self.runs.fork(run_id, step, new_run_id))
