"""The console's guard: the login token (bearer header or session cookie), the same-origin
check on requests that change something, the `?token=` login link, and the headers sent with
every answer."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from ._console import Console, console_of, error

_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
COOKIE = "durable_swarm_session"
_PUBLIC = ("/static/", "/login")

# Sent with every answer: no page of the console may be framed by another site (a click in an
# invisible frame would approve a call), nor post a form or load a plugin elsewhere.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def same_secret(given: str | bytes, secret: str) -> bool:
    """`given` equals `secret`, compared in constant time as UTF-8 bytes (any text a client
    sends, non-ASCII included, is simply not the secret)."""
    if isinstance(given, str):
        given = given.encode("utf-8", "surrogatepass")
    return hmac.compare_digest(given, secret.encode("utf-8", "surrogatepass"))


def session_value(token: str) -> str:
    """The login cookie's value: derived from the token, never the token itself."""
    return hmac.new(token.encode(), b"durable-swarm console session", hashlib.sha256).hexdigest()


def safe_next(target: str | None) -> str:
    """Only a path of this site (never `//host`) after logging in."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return "/"


def logged_in(request: Request, target: str, session: str) -> RedirectResponse:
    """A redirect to `target` setting the login cookie (to `session`)."""
    redirect = RedirectResponse(target, status_code=303)
    redirect.set_cookie(
        COOKIE, session, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return redirect


def _authorized(console: Console, request: Request) -> bool:
    token, session = console.token, console.session
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # Header values arrive decoded as Latin-1: encoded back, they are the bytes sent.
    sent = given.strip().encode("latin-1", "replace")
    if scheme.lower() == "bearer" and same_secret(sent, token):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return session is not None and same_secret(cookie, session)


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True  # not a browser: CSRF needs one, and browsers send Origin on POST
    parts = urlsplit(origin)
    return f"{parts.scheme}://{parts.netloc}" == f"{request.url.scheme}://{request.url.netloc}"


def _token_login(console: Console, request: Request, given: str) -> Response:
    """A page opened with `?token=T` (the link `serve` prints): the login cookie is set and
    the browser sent on to the same page without the token in its address."""
    token, session = console.token, console.session
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    sent = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
    target = safe_next(sent) + (f"?{urlencode(rest)}" if rest else "")
    if token is None or session is None:  # an open console: nothing to log in to
        return RedirectResponse(target, status_code=303)
    if not same_secret(given, token):
        return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)
    return logged_in(request, target, session)


async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
    """The console's HTTP middleware: refuses what `_checked` refuses, and adds the security
    headers to every answer."""
    response = await _checked(request, call_next)
    response.headers.update(SECURITY_HEADERS)
    return response


async def _checked(request: Request, call_next: Callable[[Request], Any]) -> Response:
    console = console_of(request)
    path = request.url.path
    if request.method not in _SAFE_METHODS and not _same_origin(request):
        return error(
            403,
            "Cross-origin request refused: a request that changes something must come "
            "from this console's own pages (or a client that sends no Origin header).",
        )
    given = request.query_params.get("token")
    if given is not None and request.method == "GET" and not path.startswith("/api/"):
        return _token_login(console, request, given)
    if not path.startswith(_PUBLIC) and not _authorized(console, request):
        if path.startswith("/api/") or path == "/metrics":
            return error(
                401,
                "Missing or wrong token: send 'Authorization: Bearer <token>' (the token "
                "given to durable-swarm serve, or DURABLE_SWARM_TOKEN).",
            )
        # The path as sent (still encoded: a run id may hold "#", "?" or "/").
        sent = request.scope.get("raw_path", b"").decode("latin-1") or path
        back = sent + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(back, safe='/')}", status_code=303)
    if "\x00" in path or "%00" in request.url.query:
        return error(
            422, "Bad request: the URL contains a NUL character (%00). Nothing was changed."
        )
    response: Response = await call_next(request)
    return response
