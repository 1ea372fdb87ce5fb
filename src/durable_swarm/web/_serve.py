"""Serving the console: the bind check, and uvicorn."""

from __future__ import annotations

import ipaddress
import sys
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from ..durable._client import DurableClient
from ..durable._database import display_url
from ..errors import DurableSwarmError

__all__ = ["LoopbackHostsOnly", "check_bind", "serve"]


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


def serve(
    database_url: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
) -> None:
    """Serve the console and HTTP API on `host:port` until interrupted (see `create_app`).

    The database must exist (a worker or a `DurableSwarm` creates it); raises
    `DatabaseUnavailableError` otherwise, and `DurableSwarmError` for a non-loopback `host`
    without `token`.
    """
    import uvicorn

    from ._app import create_app

    check_bind(host, token)
    with DurableClient(database_url) as client:
        app = create_app(client, token=token)
        where = f"[{host}]" if ":" in host else host
        print(
            f"durable-swarm console on http://{where}:{port}/ "
            f"(database: {display_url(client.database_url)})",
            file=sys.stderr,
            flush=True,
        )
        served = app if token else LoopbackHostsOnly(app)
        uvicorn.run(served, host=host, port=port, log_level="warning")
