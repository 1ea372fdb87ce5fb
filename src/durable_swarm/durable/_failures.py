"""How a durable model step fails: one retry budget, one error that says what to do, and one
log line per failed attempt.

A model step is retried by DBOS only (`model_retries` times, so `model_retries + 1` requests at
most); the `openai` client's own retries are switched off for durable calls, so the two never
multiply. When the budget is spent, or the endpoint refuses the request for good (400, 401,
404...), the run fails with a `ModelCallError` naming the run, step, agent, model, base URL and
cause, and saying how to resume.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..errors import ModelCallError, RunError
from ._engine import DBOS, DBOSMaxStepRetriesExceeded

__all__ = ["DEFAULT_MODEL_RETRIES", "model_failure", "quiet_tracebacks", "without_retries"]

DEFAULT_MODEL_RETRIES = 3


@functools.lru_cache(maxsize=64)
def _no_retries(client: Any) -> Any:
    return client.with_options(max_retries=0)


def without_retries(client: Any) -> Any:
    """`client` with its own retries off: an `openai.OpenAI`/`AsyncOpenAI` (Azure's too) as
    `with_options(max_retries=0)`, made once per client; any other client as it is."""
    import openai

    if isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        return _no_retries(client)
    return client


def base_url_of(client: Any) -> str | None:
    """The endpoint a client calls, when it has one (an `openai` client's `base_url`)."""
    url = getattr(client, "base_url", None)
    return str(url) if url else None


def _cause(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def model_failure(
    error: BaseException,
    *,
    run_id: str,
    step: int | None,
    agent: str,
    model: str | None,
    client: Any,
) -> BaseException:
    """The error a failed model step ends its run with: a `ModelCallError` for a spent retry
    budget or an error of the endpoint (also when replayed from the log), else `error`."""
    import openai

    fields: dict[str, Any] = {
        "run_id": run_id, "step": step, "agent": agent, "model": model,
        "base_url": base_url_of(client),
    }  # fmt: skip
    if isinstance(error, DBOSMaxStepRetriesExceeded):
        last = error.errors[-1] if error.errors else error
        return ModelCallError(**fields, cause=_cause(last), requests=len(error.errors) or 1)
    if isinstance(error, openai.APIError):
        return ModelCallError(**fields, cause=_cause(error), requests=1)
    if isinstance(error, RunError) and error.error_type.startswith(("openai.", "dbos.")):
        return ModelCallError(**fields, cause=str(error), requests=1)
    return error


class _OneLine(logging.Filter):
    """Folds a log record's traceback into one line unless the logger shows DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return True
        error = record.exc_info[1]
        text = record.getMessage().rstrip(": ")
        try:
            run_id = DBOS.workflow_id
        except Exception:  # outside a workflow: no run to name
            run_id = None
        where = f" (run {run_id})" if run_id and run_id not in text else ""
        record.msg = f"{text}{where}: {_cause(error) if error else 'unknown error'}"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        return True


_FILTER = _OneLine()


def quiet_tracebacks() -> None:
    """Make DBOS log one line per failure (a failed attempt, a failed run); the full
    traceback only when its log level is DEBUG (`DURABLE_SWARM_LOG_LEVEL=DEBUG`)."""
    logger = logging.getLogger("dbos")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
