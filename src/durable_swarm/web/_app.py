"""The web console and HTTP API: a FastAPI app over a thin `DurableClient`.

The app only reads the run database and writes messages and commands to it (answers,
decisions, cancel, resume, fork), exactly as the CLI does; the workers that hold the agents run
the runs. Pages are server-rendered Jinja2 shells filled in by one small script from the JSON
API; the run page follows its run over Server-Sent Events. Every asset ships in the package.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import anyio
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import StreamingResponse

from .._terminal import clean
from ..durable._client import DurableClient
from ..durable._listing import RunFilter
from ..durable._retention import Retention
from ..durable._runs import STATUSES
from ..errors import DurableSwarmError, RunNotFoundError, SessionNotFoundError
from ._feeds import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_CLIENT, RunFeeds, StreamLimit
from ._metrics import metrics_text
from ._views import approval_json, run_detail, run_summary

__all__ = ["create_app"]

_HERE = Path(__file__).parent
_FINISHED = ("succeeded", "failed", "cancelled")
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
COOKIE = "durable_swarm_session"
_PUBLIC = ("/static/", "/login")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputBody(_Strict):
    """The person's answer to the question a run waits on."""

    text: str


class ApproveBody(_Strict):
    """Approve the tool call a run waits on (its id, from `waiting_for.tool_call.id`)."""

    tool_call_id: str = Field(min_length=1)


class RejectBody(_Strict):
    """Reject the tool call a run waits on; the model reads `message` as the tool's result."""

    tool_call_id: str = Field(min_length=1)
    message: str | None = None


class ForkBody(_Strict):
    """Fork a run: a new run copying the steps before `step`."""

    step: int = Field(strict=True)  # `true` is not step 1


class _BadRequest(Exception):
    """A request whose content cannot be acted on (answered 422)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _answer_with(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """An exception handler answering `{"error": <the exception's message>}` with `status`."""

    async def answer(request: Request, exc: Exception) -> JSONResponse:
        return _error(status, str(exc))

    return answer


def _same_secret(given: str | bytes, secret: str) -> bool:
    """`given` equals `secret`, compared in constant time as UTF-8 bytes (any text a client
    sends, non-ASCII included, is simply not the secret)."""
    if isinstance(given, str):
        given = given.encode("utf-8", "surrogatepass")
    return hmac.compare_digest(given, secret.encode("utf-8", "surrogatepass"))


def _last_event(header: str | None) -> int:
    """The step a reconnecting event stream resumes after (`Last-Event-ID`); 0 when the header
    is missing or not a step number."""
    value = (header or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0


# Sent with every answer: no page of the console may be framed by another site (a click in an
# invisible frame would approve a call), nor post a form or load a plugin elsewhere.
_SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _session_value(token: str) -> str:
    """The login cookie's value: derived from the token, never the token itself."""
    return hmac.new(token.encode(), b"durable-swarm console session", hashlib.sha256).hexdigest()


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "Bad request: " + "; ".join(parts) + ". Nothing was changed."


def _safe_next(target: str | None) -> str:
    """Only a path of this site (never `//host`) after logging in."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return "/"


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


def create_app(
    client: DurableClient,
    *,
    token: str | None = None,
    poll_interval: float = 0.25,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_streams_per_client: int = DEFAULT_MAX_STREAMS_PER_CLIENT,
) -> FastAPI:
    """The console and HTTP API over `client` (see `durable-swarm serve`).

    With `token`, every request but the login page and static assets needs
    `Authorization: Bearer <token>` or the HttpOnly, SameSite=Strict cookie the login page (or
    opening a page with `?token=<token>`) sets. Requests that change something are refused
    (403) when their `Origin` (or `Referer`) is another site.

    Event streams share one poller: every `poll_interval` seconds one query looks at all the
    runs being watched, and only a run that changed is read (its new steps). At most
    `max_streams` streams are open at once (503 past it) and `max_streams_per_client` from one
    client address (429 past it).
    """
    for name, value in (
        ("max_streams", max_streams),
        ("max_streams_per_client", max_streams_per_client),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DurableSwarmError(
                f"`{name}` must be a whole number of at least 1, not {value!r}."
            )
    if not poll_interval > 0:
        raise DurableSwarmError(
            f"`poll_interval` must be a number of seconds above 0, not {poll_interval!r}."
        )
    feeds = RunFeeds(
        client,
        poll_interval=poll_interval,
        max_streams=max_streams,
        max_streams_per_client=max_streams_per_client,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await feeds.close()

    app = FastAPI(
        title="durable-swarm",
        summary="Look at and steer durable-swarm runs.",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.feeds = feeds
    templates = Jinja2Templates(directory=str(_HERE / "templates"))
    templates.env.filters["visible"] = clean  # control and invisible characters as escapes
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")
    session = _session_value(token) if token else None

    # --- security --------------------------------------------------------------------------

    def authorized(request: Request) -> bool:
        if token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # Header values arrive decoded as Latin-1: encoded back, they are the bytes sent.
        sent = given.strip().encode("latin-1", "replace")
        if scheme.lower() == "bearer" and _same_secret(sent, token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return session is not None and _same_secret(cookie, session)

    def same_origin(request: Request) -> bool:
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin:
            return True  # not a browser: CSRF needs one, and browsers send Origin on POST
        parts = urlsplit(origin)
        return f"{parts.scheme}://{parts.netloc}" == f"{request.url.scheme}://{request.url.netloc}"

    def token_login(request: Request, given: str) -> Response:
        """A page opened with `?token=T` (the link `serve` prints): the login cookie is set and
        the browser sent on to the same page without the token in its address."""
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        sent = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
        target = _safe_next(sent) + (f"?{urlencode(rest)}" if rest else "")
        if token is None or session is None:  # an open console: nothing to log in to
            return RedirectResponse(target, status_code=303)
        if not _same_secret(given, token):
            return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)
        redirect = RedirectResponse(target, status_code=303)
        redirect.set_cookie(
            COOKIE, session, httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )
        return redirect

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response = await checked(request, call_next)
        response.headers.update(_SECURITY_HEADERS)
        return response

    async def checked(request: Request, call_next: Callable[[Request], Any]) -> Response:
        path = request.url.path
        if request.method not in _SAFE_METHODS and not same_origin(request):
            return _error(
                403,
                "Cross-origin request refused: a request that changes something must come "
                "from this console's own pages (or a client that sends no Origin header).",
            )
        given = request.query_params.get("token")
        if given is not None and request.method == "GET" and not path.startswith("/api/"):
            return token_login(request, given)
        if not path.startswith(_PUBLIC) and not authorized(request):
            if path.startswith("/api/") or path == "/metrics":
                return _error(
                    401,
                    "Missing or wrong token: send 'Authorization: Bearer <token>' (the token "
                    "given to durable-swarm serve, or DURABLE_SWARM_TOKEN).",
                )
            # The path as sent (still encoded: a run id may hold "#", "?" or "/").
            sent = request.scope.get("raw_path", b"").decode("latin-1") or path
            back = sent + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(back, safe='/')}", status_code=303)
        if "\x00" in path or "%00" in request.url.query:
            return _error(
                422, "Bad request: the URL contains a NUL character (%00). Nothing was changed."
            )
        response: Response = await call_next(request)
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the client learns what failed, not how.
        response = _error(
            500,
            f"Internal error in {request.method} {request.url.path}: {type(exc).__name__}. "
            "Nothing may have been changed; see the console's log, and check the run "
            "(GET /api/runs/<run_id>) before trying again.",
        )
        response.headers.update(_SECURITY_HEADERS)  # this answer bypasses `guard`
        return response

    # An error's message is the answer's; the most specific class decides the status.
    for error, status in (
        (_BadRequest, 422),
        (RunNotFoundError, 404),
        (SessionNotFoundError, 404),
        (DurableSwarmError, 409),
    ):
        app.add_exception_handler(error, _answer_with(status))

    @app.exception_handler(StreamLimit)
    async def too_many(request: Request, exc: StreamLimit) -> JSONResponse:
        response = _error(exc.status, str(exc))
        response.headers["Retry-After"] = "10"
        return response

    # --- reading -----------------------------------------------------------------------------

    def detail(run_id: str) -> dict[str, Any]:
        info = client.get_run(run_id)
        usage = client.runs.query.model_usage([run_id])[run_id]
        status = client.runs.source.get_workflow_status(run_id)
        return run_detail(info, usage, getattr(status, "recovery_attempts", None))

    @app.get("/api/runs", tags=["runs"])
    def list_runs(
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
            raise _BadRequest(f"Unknown status {unknown[0]!r}; use one of {', '.join(STATUSES)}.")
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
    @app.get("/api/runs/{run_id:path}/events", tags=["runs"])
    async def run_events(
        run_id: str,
        request: Request,
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

    @app.get("/api/runs/{run_id:path}", tags=["runs"])
    def get_run(run_id: str) -> dict[str, Any]:
        """The run with its messages, steps, transitions, decisions and what it waits for."""
        return detail(run_id)

    @app.get("/api/approvals", tags=["approvals"])
    def approvals(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
        """Tool calls waiting for a person's approval, longest waiting first:
        `{"approvals": [...], "total": N}` (the first `limit` of them)."""
        found = client.list_approvals(limit=limit)
        total = client.count_runs(status="waiting_for_approval") if len(found) == limit else None
        return {
            "approvals": [approval_json(a) for a in found],
            "total": len(found) if total is None else total,
        }

    @app.get("/api/retention", tags=["retention"])
    def retention() -> dict[str, Any]:
        """Retention on the run database: the policies in force, the processes applying them
        (when each last swept, how many runs that deleted) and the runs deleted so far by
        status."""
        return client.retention_status().to_json()

    @app.get("/metrics", tags=["metrics"], response_class=Response)
    def metrics() -> Response:
        """Prometheus text format: runs by status, steps, model calls, tokens, latency, runs
        deleted by retention, the model limits shared by the fleet (calls waiting and in
        flight, requests and tokens of the last minute), and the console's live streams
        (open, runs watched, polls)."""
        runs = client.runs
        text = metrics_text(
            runs.query, feeds, client.retention_status(), limits=runs.limits.snapshot
        )
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.get("/api/sessions", tags=["sessions"])
    def list_sessions(limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
        """Sessions, most recently changed first, without their messages: `{"sessions":
        [{"name", "message_count", "runs", "last_run", "held_by", "compacted", ...}]}`."""
        found = client.list_sessions(limit=limit)
        return {
            "sessions": [{k: v for k, v in s.to_json().items() if k != "messages"} for s in found]
        }

    @app.get("/api/sessions/{name:path}", tags=["sessions"])
    def get_session(name: str) -> dict[str, Any]:
        """One session with its messages (what its next run starts from); 404 if none."""
        return client.get_session(name).to_json()

    @app.post("/api/sessions/{name:path}/clear", tags=["sessions"])
    def clear_session(name: str) -> dict[str, Any]:
        """Empty the session's conversation (409 while a run holds it)."""
        client.clear_session(name)
        return {"session": name, "cleared": True}

    @app.post("/api/sessions/{name:path}/delete", tags=["sessions"])
    def delete_session(name: str) -> dict[str, Any]:
        """Delete the session (409 while a run holds it)."""
        client.delete_session(name)
        return {"session": name, "deleted": True}

    # --- acting ------------------------------------------------------------------------------

    @app.post("/api/runs/{run_id:path}/input", tags=["actions"])
    def send_input(run_id: str, body: InputBody) -> dict[str, Any]:
        """Answer the question the run waits on (409 when it does not wait for one)."""
        client.send_input(run_id, body.text, by="console")
        return {"run_id": run_id, "sent": "input"}

    @app.post("/api/runs/{run_id:path}/approve", tags=["actions"])
    def approve(run_id: str, body: ApproveBody) -> dict[str, Any]:
        """Approve the tool call the run waits on, with exactly the arguments it shows."""
        client.approve(run_id, body.tool_call_id, by="console")
        return {"run_id": run_id, "sent": "approval", "tool_call_id": body.tool_call_id}

    @app.post("/api/runs/{run_id:path}/reject", tags=["actions"])
    def reject(run_id: str, body: RejectBody) -> dict[str, Any]:
        """Reject the tool call the run waits on; the model reads `message`."""
        client.reject(run_id, body.tool_call_id, body.message, by="console")
        return {"run_id": run_id, "sent": "rejection", "tool_call_id": body.tool_call_id}

    @app.post("/api/runs/{run_id:path}/cancel", tags=["actions"])
    def cancel(run_id: str) -> dict[str, Any]:
        """Cancel the run and its sub-agents (409 when it had already finished)."""
        client.cancel(run_id)
        status = client.get_run(run_id).status
        if status != "cancelled":
            raise DurableSwarmError(
                f"Run {run_id!r} had already {status} (or did just now): nothing was cancelled."
            )
        return {"run_id": run_id, "cancelled": True}

    @app.post("/api/runs/{run_id:path}/resume", tags=["actions"])
    def resume(run_id: str) -> dict[str, Any]:
        """Continue a cancelled run, or a failed one from the step that failed (409 for a run
        that has not ended: it goes on where it is)."""
        status = client.get_run(run_id).status
        if status not in _FINISHED:
            raise DurableSwarmError(
                f"Run {run_id!r} is {status}: it has not ended, so it goes on where it is; "
                "nothing was resumed."
            )
        client.resume(run_id)  # a succeeded run raises, saying to fork it instead
        return {"run_id": run_id, "resumed": True}

    @app.post("/api/runs/{run_id:path}/fork", tags=["actions"])
    def fork(run_id: str, body: ForkBody) -> dict[str, Any]:
        """A new run copying this run's steps before `step`: `{"run_id": <new id>}`."""
        last = max((s.step for s in client.get_run(run_id).steps), default=0)
        if body.step < 1 or body.step > last + 1:
            raise _BadRequest(
                f"Cannot fork run {run_id!r} at step {body.step}: it has steps 1 to {last}. "
                "Nothing was changed.",
            )
        return {"run_id": client.fork(run_id, body.step).run_id, "forked_from": run_id}

    # --- pages -------------------------------------------------------------------------------

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        context.update(statuses=STATUSES, locked=token is not None)
        return templates.TemplateResponse(request, name, context)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def runs_page(request: Request) -> HTMLResponse:
        return page(request, "runs.html", title="Runs")

    @app.get("/runs/{run_id:path}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        client.handle(run_id)  # 404 for an unknown run
        return page(request, "run.html", title=f"Run {clean(run_id)}", run_id=run_id)

    @app.get("/approvals", response_class=HTMLResponse, include_in_schema=False)
    def approvals_page(request: Request) -> HTMLResponse:
        return page(request, "approvals.html", title="Approvals")

    @app.get("/sessions", response_class=HTMLResponse, include_in_schema=False)
    def sessions_page(request: Request) -> HTMLResponse:
        return page(request, "sessions.html", title="Sessions")

    @app.get("/sessions/{name:path}", response_class=HTMLResponse, include_in_schema=False)
    def session_page(request: Request, name: str) -> HTMLResponse:
        client.get_session(name)  # 404 for an unknown session
        return page(request, "session.html", title=f"Session {clean(name)}", session_name=name)

    @app.get("/retention", response_class=HTMLResponse, include_in_schema=False)
    def retention_page(request: Request) -> HTMLResponse:
        status = client.retention_status()
        policies = [Retention.of(p) for p in status.policies]
        return page(request, "retention.html", title="Retention", status=status, policies=policies)

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_page(request: Request, next: str = "/") -> HTMLResponse:
        return page(request, "login.html", title="Log in", next=_safe_next(next), failed=False)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0]
        target = _safe_next((form.get("next") or ["/"])[0])
        if token is None or session is None or not _same_secret(given, token):
            response = page(request, "login.html", title="Log in", next=target, failed=True)
            response.status_code = 401
            return response
        redirect = RedirectResponse(target, status_code=303)
        redirect.set_cookie(
            COOKIE, session, httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )
        return redirect

    @app.post("/logout", include_in_schema=False)
    def logout() -> Response:
        redirect = RedirectResponse("/login", status_code=303)
        redirect.delete_cookie(COOKIE)
        return redirect

    return app
