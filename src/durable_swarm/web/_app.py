"""The web console and HTTP API: a FastAPI app over a thin `DurableClient`.

The app only reads the run database and writes messages and commands to it (answers,
decisions, cancel, resume, fork), exactly as the CLI does; the workers that hold the agents run
the runs. Pages are server-rendered Jinja2 shells filled in by one small script from the JSON
API; the run page follows its run over Server-Sent Events. Every asset ships in the package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..durable._client import DurableClient
from ..errors import DurableSwarmError
from . import _decisions, _observe, _pages, _runs, _sessions
from ._console import Console
from ._errors import add_error_handlers
from ._feeds import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_CLIENT, RunFeeds
from ._security import guard, session_value

__all__ = ["create_app"]


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.console.feeds.close()  # stops the event streams' poller


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

    app = FastAPI(
        title="durable-swarm",
        summary="Look at and steer durable-swarm runs.",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan,
    )
    app.state.feeds = feeds
    app.state.console = Console(
        client=client,
        feeds=feeds,
        token=token,
        session=session_value(token) if token else None,
        templates=_pages.templates(),
    )
    _pages.mount_static(app)
    app.middleware("http")(guard)  # the token, same-origin writes, security headers
    add_error_handlers(app)
    # In this order the API document lists the routes. Run ids may hold "/", so the routes
    # with a suffix after `{run_id:path}` (`/events`) come before the plain one (see _runs).
    for router in (
        _runs.router,
        _decisions.inbox,
        _observe.router,
        _sessions.router,
        _decisions.commands,
        _pages.router,
    ):
        app.include_router(router)
    return app
