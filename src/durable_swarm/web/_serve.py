"""Serving the console: the bind check, and uvicorn."""

from __future__ import annotations

import ipaddress
import secrets
import sys
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from ..durable._client import DurableClient
from ..durable._database import display_url
from ..errors import DurableSwarmError
from ._feeds import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_CLIENT

__all__ = ["LoopbackHostsOnly", "check_bind", "new_token", "serve"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LoopbackHostsOnly:
    """ASGI wrapper of a console served without a token: it answers only requests addressed to
    a loopback name or address (their `Host` header), 421 to others. Bound to 127.0.0.1, the
    console is reachable from this machine only, but a page of another site whose DNS name is
    made to point at 127.0.0.1 (DNS rebinding) would reach it from the browser, sending its own
    name as `Host`; a request with no `Host` (not a browser's) is answered."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if host and not _loopback(urlsplit(f"//{host}").hostname or ""):
                response = JSONResponse(
                    {
                        "error": f"Refused: this console has no token, so it answers only "
                        f"requests addressed to localhost or a loopback address, not {host!r}. "
                        "Open it as http://127.0.0.1:<port>/, or serve it with --token T."
                    },
                    status_code=421,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_bind(host: str, token: str | None) -> None:
    """Refuse (`DurableSwarmError`) to serve on a non-loopback address without a token: anyone
    who can reach it could read every run and approve any tool call."""
    if not token and not _loopback(host):
        raise DurableSwarmError(
            f"Refusing to serve the console on {host!r} without a token: anyone who can reach "
            "that address could read every run and approve tool calls. Pass --token T (or set "
            "DURABLE_SWARM_TOKEN), or bind to 127.0.0.1."
        )


def new_token() -> str:
    """A fresh random console token (what `serve` makes when none is given)."""
    return secrets.token_urlsafe(24)


def serve(
    database_url: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    no_token: bool = False,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_streams_per_client: int = DEFAULT_MAX_STREAMS_PER_CLIENT,
    poll_interval: float = 0.25,
) -> None:
    """Serve the console and HTTP API on `host:port` until interrupted (see `create_app`).

    Without `token`, a loopback console makes a random one and prints, on stderr, a link
    holding it (opening it logs the browser in, as Jupyter's does); `no_token=True` serves
    a loopback console with no token at all, answering only requests addressed to a loopback
    name (any local process can then read and steer every run). The database must exist (a
    worker or a `DurableSwarm` creates it); raises `DatabaseUnavailableError` otherwise, and
    `DurableSwarmError` for a non-loopback `host` without `token`, or `token` with `no_token`.
    """
    import uvicorn

    from ._app import create_app

    if token and no_token:
        raise DurableSwarmError(
            "Both a token and no_token (--no-token) were given: choose one (is "
            "DURABLE_SWARM_TOKEN set?)."
        )
    check_bind(host, token)
    made = not token and not no_token
    if made:
        token = new_token()
    with DurableClient(database_url) as client:
        app = create_app(
            client,
            token=token,
            poll_interval=poll_interval,
            max_streams=max_streams,
            max_streams_per_client=max_streams_per_client,
        )
        where = f"[{host}]" if ":" in host else host
        lines = [
            f"durable-swarm console on http://{where}:{port}/ "
            f"(database: {display_url(client.database_url)})"
        ]
        if made:
            lines.append(
                "Open it with its token (made for this start; pass --token T or set "
                "DURABLE_SWARM_TOKEN to choose one, send 'Authorization: Bearer <token>' from "
                f"scripts):\n    http://{where}:{port}/?token={token}"
            )
        elif no_token:
            lines.append(
                "No token (--no-token): any process on this machine can read and steer runs."
            )
        print("\n".join(lines), file=sys.stderr, flush=True)
        served = app if token else LoopbackHostsOnly(app)
        uvicorn.run(served, host=host, port=port, log_level="warning")
