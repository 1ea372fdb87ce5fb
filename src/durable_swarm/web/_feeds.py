"""Live run events for the console: one shared poller for every watched run, bounded streams.

Every `GET /api/runs/{id}/events` stream subscribes to the run's *feed*. One task (per app)
polls all watched runs at once with a single cheap query (`RunQuery.marks`: status, update time
and step count, no payloads) every `poll_interval`; only a run whose mark changed is read, and
then only its new steps (DBOS's `list_workflow_steps` from the offset already seen) and its
summary. What a read finds is serialized once and handed to each viewer's queue. So a viewer
costs no database query while its run does not change, however many watch it, and the poller
costs one query per interval for all watched runs together.

Streams are bounded: at most `max_streams` in all and `max_streams_per_client` per client
address (`StreamLimit` says which, and how to raise it); a viewer that does not read its events
(its queue of `QUEUE_SIZE` events full) is dropped and reconnects where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi.sse import format_sse_event

from ..durable._client import DurableClient
from ..durable._listing import RunMark
from ..durable._runs import step_record
from ..errors import RunNotFoundError
from ._views import step_json

__all__ = [
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_MAX_STREAMS_PER_CLIENT",
    "QUEUE_SIZE",
    "RunFeeds",
    "StreamLimit",
]

logger = logging.getLogger("durable_swarm.web")

DEFAULT_MAX_STREAMS = 256
DEFAULT_MAX_STREAMS_PER_CLIENT = 32
QUEUE_SIZE = 1000  # events waiting for one slow viewer before it is dropped
KEEPALIVE_SECONDS = 15.0
HOLD_POLLS = 4  # polls a step recorded past a gap waits for the gap to fill
_FINISHED = ("succeeded", "failed", "cancelled")


class StreamLimit(Exception):
    """An event stream refused because a cap is reached: `status` (429 for one client's cap,
    503 for the console's) and a message naming the cap and how to raise it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Event:
    kind: str  # "step", "status" or "end"
    data: str  # JSON, serialized once for every viewer
    step: int | None = None
    final: bool = False  # a status of a run that has finished


@dataclass(eq=False)
class _Viewer:
    client: str
    after: int
    queue: asyncio.Queue[_Event] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    dropped: bool = False


class _Feed:
    """One watched run: what the poller has read of it, and its viewers."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.viewers: set[_Viewer] = set()
        self.mark: RunMark | None = None
        self.read: set[int] = set()  # step numbers read from the database
        self.frontier = 0  # every step up to this one was sent (or given up on)
        self.held: list[Any] = []  # steps read after a gap, waiting for the gap to fill
        self.held_polls = 0
        self.arguments: dict[str, str] = {}  # tool call id -> arguments text
        self.handed_to: str | None = None  # the agent of the last handoff read
        self.status: _Event | None = None

    def steps_json(self, rows: list[Any]) -> list[_Event]:
        """New step rows as events, in step order (tool steps get their call's arguments)."""
        events = []
        for row in sorted(rows, key=lambda r: r["function_id"]):
            record = step_record(row)
            output = record.output if isinstance(record.output, dict) else {}
            message = output.get("message") if isinstance(output.get("message"), dict) else None
            if record.kind == "model" and message is not None:
                for call in message.get("tool_calls") or []:
                    if isinstance(call, dict):
                        function = call.get("function") or {}
                        self.arguments[str(call.get("id"))] = str(function.get("arguments", ""))
            if record.kind == "handoff" and isinstance(output.get("target"), str):
                self.handed_to = output["target"]
            data = json.dumps(step_json(record, self.arguments))
            events.append(_Event("step", data, record.step))
        return events

    def release(self, rows: list[Any], finished: bool) -> list[Any]:
        """The rows to send now, in step order. A step can be recorded after a later one (a
        wait's `DBOS.recv` after the `DBOS.sleep` of its timeout), so steps past a gap are
        held until it fills, for at most `HOLD_POLLS` polls (some numbers are never used),
        and never once the run finished (then every step is recorded)."""
        self.held = sorted([*self.held, *rows], key=lambda r: r["function_id"])
        out = []
        while self.held and self.held[0]["function_id"] <= self.frontier + 1:
            out.append(self.held.pop(0))
            self.frontier = max(self.frontier, out[-1]["function_id"])
        if self.held and (finished or self.held_polls >= HOLD_POLLS):
            out += self.held
            self.frontier = self.held[-1]["function_id"]
            self.held = []
        self.held_polls = self.held_polls + 1 if self.held else 0
        return out


def _new_rows(rows: list[Any], seen: set[int]) -> list[Any]:
    return [r for r in rows if r["function_id"] not in seen]


class RunFeeds:
    """The feeds of the runs being watched, their poller and the stream caps (see the module
    docstring). Create it inside the app; it starts its poller on the first subscriber."""

    def __init__(
        self,
        client: DurableClient,
        *,
        poll_interval: float = 0.25,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_streams_per_client: int = DEFAULT_MAX_STREAMS_PER_CLIENT,
    ) -> None:
        self._client = client
        self._poll_interval = poll_interval
        self.max_streams = max_streams
        self.max_streams_per_client = max_streams_per_client
        self._feeds: dict[str, _Feed] = {}
        self._per_client: dict[str, int] = {}
        self._open = 0
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.polls = 0

    # `polls`: how many times the poller looked at the watched runs (one query each time).

    @property
    def open_streams(self) -> int:
        """How many event streams are open."""
        return self._open

    @property
    def watched_runs(self) -> int:
        """How many runs have at least one viewer (each costs one share of a poll)."""
        return len(self._feeds)

    # --- viewers ---------------------------------------------------------------------------

    def reserve(self, client: str) -> None:
        """Count one more stream for `client`, or raise `StreamLimit` naming the cap reached."""
        mine = self._per_client.get(client, 0)
        if mine >= self.max_streams_per_client:
            raise StreamLimit(
                429,
                f"Too many event streams from {client}: {mine} are open and the limit per "
                f"client is {self.max_streams_per_client}. Close some console pages, or raise "
                "the limit with `durable-swarm serve --max-streams-per-client N`.",
            )
        if self._open >= self.max_streams:
            raise StreamLimit(
                503,
                f"Too many event streams: {self._open} are open and the console's limit is "
                f"{self.max_streams}. Try again later, or raise the limit with "
                "`durable-swarm serve --max-streams N`.",
            )
        self._per_client[client] = mine + 1
        self._open += 1

    def release(self, client: str) -> None:
        """Give back a stream `reserve` counted."""
        left = self._per_client.get(client, 0) - 1
        if left > 0:
            self._per_client[client] = left
        else:
            self._per_client.pop(client, None)
        self._open -= 1

    async def stream(self, run_id: str, client: str, after: int) -> AsyncIterator[bytes]:
        """The events of `run_id` after step `after` for one viewer (a stream `reserve`d for
        `client`): `step` events (id = step number), `status` at the start and at each change,
        then `end` once the run finished."""
        viewer = _Viewer(client, after)
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = _Feed(run_id)
        feed.viewers.add(viewer)
        catch_up = feed.mark is not None and after < feed.frontier
        if feed.status is not None:
            viewer.queue.put_nowait(feed.status)
        self._start()
        sent: set[int] = set()
        last_status = None
        try:
            yield format_sse_event(retry=1000, comment="durable-swarm run events")
            if catch_up:
                for event in await asyncio.to_thread(self._read_all, run_id, after):
                    sent.add(event.step or 0)
                    yield format_sse_event(event="step", id=str(event.step), data_str=event.data)
            while not viewer.dropped:
                try:
                    event = await asyncio.wait_for(viewer.queue.get(), KEEPALIVE_SECONDS)
                except asyncio.TimeoutError:
                    yield format_sse_event(comment="keep-alive")
                    continue
                if event.kind == "step":
                    assert event.step is not None
                    if event.step <= after or event.step in sent:
                        continue
                    sent.add(event.step)
                    yield format_sse_event(event="step", id=str(event.step), data_str=event.data)
                elif event.kind == "status":
                    if event.data != last_status:
                        last_status = event.data
                        yield format_sse_event(event="status", data_str=event.data)
                    if event.final:
                        yield format_sse_event(event="end", data_str=event.data)
                        return
                else:
                    yield format_sse_event(event="end", data_str=event.data)
                    return
        finally:
            feed.viewers.discard(viewer)
            if not feed.viewers and self._feeds.get(run_id) is feed:
                del self._feeds[run_id]

    def _read_all(self, run_id: str, after: int) -> list[_Event]:
        """A late viewer's catch-up: the steps after `after`, read once for it."""
        rows = list(self._client.runs.source.list_workflow_steps(run_id))
        return [e for e in _Feed(run_id).steps_json(rows) if (e.step or 0) > after]

    # --- the poller ------------------------------------------------------------------------

    def _start(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="durable-swarm run feeds")

    async def close(self) -> None:
        """Stop the poller (at the app's shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _poll(self) -> None:
        assert self._wake is not None
        while self._feeds:
            self._wake.clear()
            try:
                await self._tick()
            except Exception:  # the database may be away for a while: try again next time
                logger.exception("Reading the watched runs failed; trying again")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_interval)

    async def _tick(self) -> None:
        query = self._client.runs.query
        self.polls += 1
        watched = dict(self._feeds)  # a feed made during the query is read next time
        marks = await asyncio.to_thread(query.marks, list(watched))
        for run_id, feed in watched.items():
            if self._feeds.get(run_id) is not feed:
                continue  # its last viewer left meanwhile
            mark = marks.get(run_id)
            if mark is None:
                gone = {"status": "deleted", "error": f"Run {run_id!r} no longer exists."}
                self._publish(feed, [_Event("end", json.dumps(gone))])
            elif mark != feed.mark or feed.held:
                events = await asyncio.to_thread(self._read, feed, mark)
                if self._feeds.get(run_id) is feed:
                    self._publish(feed, events)

    def _read(self, feed: _Feed, mark: RunMark) -> list[_Event]:
        """What changed in `feed`'s run: its summary first (a finished status means every
        step is recorded), then the steps not read yet, then the status."""
        if mark == feed.mark and feed.status is not None:  # only steps held back to send
            return [*feed.steps_json(feed.release([], finished=False)), feed.status]
        info = self._client.runs.query.summaries([feed.run_id]).get(feed.run_id)
        if info is None:
            raise RunNotFoundError(feed.run_id)
        rows = []
        if mark.steps > len(feed.read):
            source = self._client.runs.source
            rows = list(source.list_workflow_steps(feed.run_id, offset=len(feed.read)))
            if len(_new_rows(rows, feed.read)) < len(rows):  # a lower step came in late
                rows = list(source.list_workflow_steps(feed.run_id))
            rows = _new_rows(rows, feed.read)
            feed.read.update(r["function_id"] for r in rows)
        events = feed.steps_json(feed.release(rows, finished=info.status in _FINISHED))
        agent = info.agent if info.status in _FINISHED else feed.handed_to or info.agent
        status = {
            "status": info.status,
            "agent": agent,
            "waiting_for": info.waiting_for,
            "error": info.error,
            "updated_at": info.updated_at.isoformat() if info.updated_at else None,
        }
        feed.status = _Event("status", json.dumps(status), final=info.status in _FINISHED)
        feed.mark = mark
        return [*events, feed.status]

    def _publish(self, feed: _Feed, events: list[_Event]) -> None:
        for viewer in list(feed.viewers):
            for event in events:
                try:
                    viewer.queue.put_nowait(event)
                except asyncio.QueueFull:
                    viewer.dropped = True  # it reconnects with Last-Event-ID
                    feed.viewers.discard(viewer)
                    break
