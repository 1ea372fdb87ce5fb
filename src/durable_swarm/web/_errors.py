"""How the console answers errors: `{"error": <what happened and the fix>}`, with the status
the error's class decides."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import DurableSwarmError, RunNotFoundError, SessionNotFoundError
from ._console import error
from ._feeds import StreamLimit
from ._security import SECURITY_HEADERS


class BadRequest(Exception):
    """A request whose content cannot be acted on (answered 422)."""


def _answer_with(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """An exception handler answering `{"error": <the exception's message>}` with `status`."""

    async def answer(request: Request, exc: Exception) -> JSONResponse:
        return error(status, str(exc))

    return answer


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "Bad request: " + "; ".join(parts) + ". Nothing was changed."


async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error(422, _validation_message(exc))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return error(exc.status_code, str(exc.detail))


async def _server_error(request: Request, exc: Exception) -> JSONResponse:
    # Logged with its traceback by the server; the client learns what failed, not how.
    response = error(
        500,
        f"Internal error in {request.method} {request.url.path}: {type(exc).__name__}. "
        "Nothing may have been changed; see the console's log, and check the run "
        "(GET /api/runs/<run_id>) before trying again.",
    )
    response.headers.update(SECURITY_HEADERS)  # this answer bypasses `guard`
    return response


async def _too_many(request: Request, exc: StreamLimit) -> JSONResponse:
    response = error(exc.status, str(exc))
    response.headers["Retry-After"] = "10"
    return response


def add_error_handlers(app: FastAPI) -> None:
    """Install the console's exception handlers on `app`."""
    app.exception_handler(RequestValidationError)(_bad_request)
    app.exception_handler(StarletteHTTPException)(_http_error)
    app.exception_handler(Exception)(_server_error)
    # An error's message is the answer's; the most specific class decides the status.
    for cls, status in (
        (BadRequest, 422),
        (RunNotFoundError, 404),
        (SessionNotFoundError, 404),
        (DurableSwarmError, 409),
    ):
        app.add_exception_handler(cls, _answer_with(status))
    app.exception_handler(StreamLimit)(_too_many)
