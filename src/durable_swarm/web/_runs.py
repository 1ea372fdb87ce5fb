"""The runs API: the runs listing, one run, and its live feed (Server-Sent Events)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.responses import StreamingResponse

from ..durable._listing import RunFilter
from ..durable._runs import STATUSES
from ..errors import RunNotFoundError
from ._console import ClientDep, FeedsDep
from ._errors import BadRequest
from ._views import run_detail, run_summary

router = APIRouter(tags=["runs"])
"""`/api/runs` and `/api/runs/<run_id>` (with `/events`)."""


def _last_event(header: str | None) -> int:
    """The step a reconnecting event stream resumes after (`Last-Event-ID`); 0 when the header
    is missing or not a step number."""
    value = (header or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0


class _EventStream(StreamingResponse):
    """An event stream that gives its reserved place back however it ends (finished, client
    gone, or never started)."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Stop at once when the client hangs up (a quiet stream would otherwise notice only
        # at its next write, the keep-alive), whatever ASGI version the server speaks.
        try:
            async with anyio.create_task_group() as group:

                async def hang_up() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(hang_up)
                await super().__call__(scope, receive, send)
                group.cancel_scope.cancel()
        finally:
            self._release()


def _etag(*parts: Any) -> str:
    return '"' + hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32] + '"'


@router.get("/api/runs")
def list_runs(
    client: ClientDep,
    status: Annotated[list[str] | None, Query(description="one or more statuses")] = None,
    agent: str | None = None,
    q: Annotated[str | None, Query(description="text in the run's messages")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """Runs, newest first, one page: `{"runs": [...], "total": N, "limit", "offset"}`.

    Each run is its summary (status, agent, times, usage; no messages). The answer has an
    `ETag`: sent back in `If-None-Match`, it gets a 304 with no body while neither the
    page's runs nor the total changed (checked without reading any run's payloads)."""
    statuses = [s for value in status or [] for s in value.split(",") if s]
    unknown = [s for s in statuses if s not in STATUSES]
    if unknown:
        raise BadRequest(f"Unknown status {unknown[0]!r}; use one of {', '.join(STATUSES)}.")
    runs = RunFilter.of(status=statuses or None, agent=agent or None, search=q or None)
    query = client.runs.query
    ids = query.run_ids(runs, limit, offset)
    marks = query.marks(ids)
    total = query.count(runs)
    etag = _etag(runs, limit, offset, total, [(i, marks.get(i)) for i in ids])
    if if_none_match is not None and etag in (t.strip() for t in if_none_match.split(",")):
        return Response(status_code=304, headers={"ETag": etag, "Cache-Control": "no-cache"})
    found = query.summaries(ids)
    usage = query.usage_totals(ids)
    body = {
        "runs": [run_summary(found[i], usage[i]) for i in ids if i in found],
        "total": total,
        "limit": limit,
        "offset": offset,
    }
    return JSONResponse(body, headers={"ETag": etag, "Cache-Control": "no-cache"})


# Run ids may hold "/" (DBOS allows any text): `{run_id:path}`, and the routes with a suffix
# are declared before the plain one, which would take the suffix as part of the id.
@router.get("/api/runs/{run_id:path}/events")
async def run_events(
    run_id: str,
    request: Request,
    client: ClientDep,
    feeds: FeedsDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int, Query(ge=0, le=2**62, description="the last step already shown")] = 0,
) -> StreamingResponse:
    """Server-Sent Events: `step` events (id = step number) as steps are recorded after
    step `after`, a `status` event (status, agent, waiting_for, error, updated_at) at the
    start and at each change, then `end` when the run finishes. Reconnecting with
    `Last-Event-ID` resumes after that step. 429 when this client has too many streams
    open, 503 when the console has (see `durable-swarm serve --max-streams`)."""
    if not await asyncio.to_thread(client.runs.query.marks, [run_id]):
        raise RunNotFoundError(run_id)  # 404 before the stream starts
    who = request.client.host if request.client else "unknown"
    feeds.reserve(who)
    start = max(after, _last_event(last_event_id))
    return _EventStream(feeds.stream(run_id, who, start), lambda: feeds.release(who))


@router.get("/api/runs/{run_id:path}")
def get_run(run_id: str, client: ClientDep) -> dict[str, Any]:
    """The run with its messages, steps, transitions, decisions and what it waits for."""
    info = client.get_run(run_id)
    usage = client.runs.query.model_usage([run_id])[run_id]
    status = client.runs.source.get_workflow_status(run_id)
    return run_detail(info, usage, getattr(status, "recovery_attempts", None))
