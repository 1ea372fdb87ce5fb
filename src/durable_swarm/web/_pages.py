"""The console's pages: server-rendered Jinja2 shells that the one script fills in from the JSON
API, the login page, and the assets they load (templates and `/static`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from .._terminal import clean
from ..durable._retention import Retention
from ..durable._runs import STATUSES
from ._console import Console, ConsoleDep
from ._security import COOKIE, logged_in, safe_next, same_secret

_HERE = Path(__file__).parent

router = APIRouter(include_in_schema=False)
"""The HTML pages, `/login` and `/logout` (none of them in the API's schema)."""


def templates() -> Jinja2Templates:
    """The page templates, with the `visible` filter (control and invisible characters
    shown as escapes)."""
    found = Jinja2Templates(directory=str(_HERE / "templates"))
    found.env.filters["visible"] = clean
    return found


def mount_static(app: FastAPI) -> None:
    """Serve the packaged scripts and styles under `/static` on `app`."""
    app.mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static")


def _page(console: Console, request: Request, name: str, **context: Any) -> HTMLResponse:
    context.update(statuses=STATUSES, locked=console.token is not None)
    return console.templates.TemplateResponse(request, name, context)


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, console: ConsoleDep) -> HTMLResponse:
    return _page(console, request, "runs.html", title="Runs")


@router.get("/runs/{run_id:path}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, console: ConsoleDep) -> HTMLResponse:
    console.client.handle(run_id)  # 404 for an unknown run
    return _page(console, request, "run.html", title=f"Run {clean(run_id)}", run_id=run_id)


@router.get("/approvals", response_class=HTMLResponse)
def approvals_page(request: Request, console: ConsoleDep) -> HTMLResponse:
    return _page(console, request, "approvals.html", title="Approvals")


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(request: Request, console: ConsoleDep) -> HTMLResponse:
    return _page(console, request, "sessions.html", title="Sessions")


@router.get("/sessions/{name:path}", response_class=HTMLResponse)
def session_page(request: Request, name: str, console: ConsoleDep) -> HTMLResponse:
    console.client.get_session(name)  # 404 for an unknown session
    title = f"Session {clean(name)}"
    return _page(console, request, "session.html", title=title, session_name=name)


@router.get("/retention", response_class=HTMLResponse)
def retention_page(request: Request, console: ConsoleDep) -> HTMLResponse:
    status = console.client.retention_status()
    policies = [Retention.of(p) for p in status.policies]
    return _page(
        console, request, "retention.html", title="Retention", status=status, policies=policies
    )


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, console: ConsoleDep, next: str = "/") -> HTMLResponse:
    return _page(console, request, "login.html", title="Log in", next=safe_next(next), failed=False)


@router.post("/login")
async def login(request: Request, console: ConsoleDep) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    given = (form.get("token") or [""])[0]
    target = safe_next((form.get("next") or ["/"])[0])
    token, session = console.token, console.session
    if token is None or session is None or not same_secret(given, token):
        response = _page(console, request, "login.html", title="Log in", next=target, failed=True)
        response.status_code = 401
        return response
    return logged_in(request, target, session)


@router.post("/logout")
def logout() -> Response:
    redirect = RedirectResponse("/login", status_code=303)
    redirect.delete_cookie(COOKIE)
    return redirect
