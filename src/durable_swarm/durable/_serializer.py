"""The JSON serializer DBOS uses for every payload of a durable run: never pickle.

Each stored payload is `{"schema_version": N, "value": ...}` so the log can be read by the CLI, the
web view and SQL, and reading it can never execute code. Exceptions are stored as their type name,
message and (for this library's own errors) their fields; only this library's error classes are
rebuilt on reading, anything else comes back as `RunError` carrying the original type name.
An error is stored under the marker key `__error__`; a user's dict key that looks like the marker
is escaped (one more leading underscore) so that no user value is ever read back as an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any

from dbos._serialization import Serializer

from .. import errors
from ..errors import DurableSwarmError, RunError

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "JsonSerializer", "RunError", "naming_run"]


# The internal marker of a stored error. A user's key that looks like it (`__error__`, or it with
# more leading underscores) is stored with one more leading underscore and loses it on reading,
# so no user value can be mistaken for an error, and every key comes back as it was.
_ERROR = "__error__"
_LOOKS_LIKE_MARKER = re.compile(r"_*__error__")


def _escape(key: Any) -> str:
    key = str(key)
    return "_" + key if _LOOKS_LIKE_MARKER.fullmatch(key) else key


def _unescape(key: str) -> str:
    return key[1:] if key != _ERROR and _LOOKS_LIKE_MARKER.fullmatch(key) else key


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {_escape(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, BaseException):
        fields = value._kwargs() if isinstance(value, DurableSwarmError) else {}
        message = str(value)
        causes = getattr(value, "errors", None)  # DBOS's retries-exhausted error keeps them
        if isinstance(causes, list) and causes and isinstance(causes[-1], BaseException):
            message += f" (last error: {type(causes[-1]).__name__}: {causes[-1]})"
        return {
            _ERROR: {
                "type": f"{type(value).__module__}.{type(value).__qualname__}",
                "message": message,
                "fields": _encode(fields),
            }
        }
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _encode(dump(mode="json"))
    raise TypeError(
        f"{type(value).__name__} is not JSON-compatible ({value!r:.80}); durable runs store only "
        "JSON data (str, numbers, bools, None, lists, dicts)"
    )


def _decode_error(data: Any) -> BaseException:
    if not isinstance(data, dict):
        return RunError(f"a malformed error record: {data!r:.200}", error_type="Exception")
    type_name = str(data.get("type", "Exception"))
    module, _, name = type_name.rpartition(".")
    cls = getattr(errors, name, None) if module.startswith("durable_swarm") else None
    if isinstance(cls, type) and issubclass(cls, DurableSwarmError):
        try:
            return cls(**data.get("fields") or {})
        except TypeError:
            pass
    return RunError(str(data.get("message", "")), error_type=type_name)


@contextmanager
def naming_run(run_id: str) -> Iterator[None]:
    """Fill in `run_id` on a library error raised in this block that does not name its run (a
    run's error read back from the database does not know which run it belongs to)."""
    try:
        yield
    except DurableSwarmError as e:
        if "run_id" in e._fields and e._fields["run_id"] is None:
            e._fields["run_id"] = e.run_id = run_id  # type: ignore[attr-defined]
        raise


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_ERROR}:
            return _decode_error(value[_ERROR])
        return {_unescape(k): _decode(v) for k, v in value.items()}
    return value


class JsonSerializer(Serializer):
    """DBOS serializer storing versioned JSON (see the module docstring)."""

    def serialize(self, data: Any) -> str:
        return json.dumps({"schema_version": SCHEMA_VERSION, "value": _encode(data)})

    def deserialize(self, serialized_data: str) -> Any:
        payload = json.loads(serialized_data)
        if not isinstance(payload, dict) or "schema_version" not in payload:
            raise ValueError(
                "This payload was not written by durable-swarm (no schema_version); was the "
                "database shared with another DBOS application?"
            )
        if payload["schema_version"] > SCHEMA_VERSION:
            raise ValueError(
                f"This run was written by a newer durable-swarm (log schema "
                f"{payload['schema_version']}, this one reads up to {SCHEMA_VERSION}); upgrade "
                "durable-swarm to read it."
            )
        return _decode(payload["value"])

    def name(self) -> str:
        return "durable_swarm_json"
