"""What every route of the console shares, kept on `app.state.console`, and the FastAPI
dependencies that hand it to a route (instead of closures over `create_app`'s locals)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.templating import Jinja2Templates

from ..durable._client import DurableClient
from ._feeds import RunFeeds


@dataclass(frozen=True)
class Console:
    """One console app's shared parts: the client over the run database, the event streams'
    poller, the login token (None: an open console), the session cookie's value derived from
    it, and the page templates."""

    client: DurableClient
    feeds: RunFeeds
    token: str | None
    session: str | None
    templates: Jinja2Templates


def console_of(request: Request) -> Console:
    """The console serving `request` (set by `create_app`)."""
    console: Console = request.app.state.console
    return console


async def _console(request: Request) -> Console:
    # async: a plain function dependency would be run on a worker thread for nothing.
    return console_of(request)


async def _client(request: Request) -> DurableClient:
    return console_of(request).client


async def _feeds(request: Request) -> RunFeeds:
    return console_of(request).feeds


ConsoleDep = Annotated[Console, Depends(_console)]
"""A route parameter receiving the console serving the request."""

ClientDep = Annotated[DurableClient, Depends(_client)]
"""A route parameter receiving the console's `DurableClient`."""

FeedsDep = Annotated[RunFeeds, Depends(_feeds)]
"""A route parameter receiving the console's event stream poller."""


def error(status: int, message: str) -> JSONResponse:
    """The console's error answer: `{"error": message}` with `status`."""
    return JSONResponse({"error": message}, status_code=status)
