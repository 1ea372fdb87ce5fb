"""The run log's format: what a durable run stores, how it is written and how it is read back.

Every payload DBOS stores for a run (the workflow's input, each step's output, events, stream
items, messages sent to the run, the result, errors) goes through `JsonSerializer` as
`{"schema_version": N, "value": ...}`: JSON, never pickle, so the CLI, the web console and SQL can
read the log. Reading a payload parses JSON and calls nothing named by it, except to rebuild a
stored error as one of this library's own error classes (looked up by name in
`durable_swarm.errors`, built from its stored fields); nothing is imported or evaluated. A
library that meets a newer `schema_version` than it writes refuses it with an error that says
to upgrade.

Versions (what changed in the stored shapes; this library reads every one of them):
1. A tool step's output holds the whole context after the tool (`context_variables`); the run's
   result holds every tool message's content.
2. A tool step's output holds only the changes the tool made (`context_changes`: `set` and
   `removed`), or the whole context (`context_variables`) when the tool's changes were refused
   (the context as it was before); a tool result longer than `INLINE_CHARS` is stored once, in
   its step's output (`step` names that step), and the run's result keeps that tool message with
   `content: None` and `IN_STEP: <step>`.
3. A tool step's output holds the context updates of the `Result` the tool returned apart from
   its own changes (`updates`): they are merged once every tool call of the message has run,
   as Swarm does (in versions 1 and 2 they were merged at once, into `context_changes`).
4. A sealed payload (encryption at rest, written only while a key is set; see `_sealing`):
   `sealed` holds the whole value encrypted, and `value` only its fields that stay readable
   without the key (`public_fields`: agent names, usage, costs, what a run waits for, the
   run's options). A release that reads up to version 3 refuses it instead of taking the
   readable fields for the whole value.

The shapes, by where they are stored:
- the workflow's input (`spec`): `agent` (name and fingerprint), `messages`,
  `context_variables`, and the run's options (`spec_of` reads it back);
- a model step `model:<agent>`: `message`, `usage`, `model`, `cost_usd`;
- a tool step `tool:<name>`: `message`, and when present `context_changes` or
  `context_variables`, `updates`, `handoff`, `ask`, `step` (`context_after` applies the
  changes; the loop, and `read_run` for a run's context so far, merge `updates` after the
  message's last tool step);
- a handoff step `handoff:<from>-><to>`, a tool list `tools:<server>`, a budget refusal
  `budget:<limit>`;
- a guardrail's verdict `guardrail:<name>`: `guardrail`, `kind` (`input`, `output`,
  `tool_call`, `tool_result`), `agent`, `tripped`, `reason`; a tool guardrail's `tool`,
  `tool_call_id` and, when it tripped, the rejection `message` the model reads; a guardrail
  agent's `usage` (a new kind of step, not a new shape: no version change);
- a wait for a person: DBOS's patch marker `WATCHED_WAITS`, the `WAITING_EVENT` event, DBOS's
  patch marker `PARKED_WAITS`, then an `answer:<kind>` step whose output is the answer (the run
  parks until there is one: `durable._waits`). Logs of earlier releases hold a plain
  `DBOS.recv` (before `WATCHED_WAITS`), or a `watch:<kind>` step and a `DBOS.recv` where
  `PARKED_WAITS` is now;
- the join of a sub-agent run: DBOS's patch marker `PARKED_JOINS`, then a `join:<child run id>`
  step whose output is the sub-agent's result (earlier releases: `DBOS.getResult`);
- the `WAITING_EVENT` event: what the run waits for (`wait_id`, `kind`, `agent`, `prompt`,
  `tool_call`, `digest`), None while it does not wait; the answers it receives (`answer:<kind>`
  steps, `DBOS.recv` in earlier logs): `{"text", "by", "at"}` or a decision;
- the result: `messages` (new ones only), `agent`, `context_variables`, `usage`
  (`restore_contents` puts long tool results back), a sub-agent's `tool_call_id` (the
  parent's call it answers, also in its input: `read_run` puts its answer there), and `output`
  (`{"value": <JSON>}`) when the agent the run ended on has an `output_type`: its validated
  answer as JSON, read back as that type through the agent's `output_type` (the log names no
  type). An addition readers of schema 3 without it ignore, so it keeps the version.

`REPLAY_VERSION` is separate from `SCHEMA_VERSION`: it names DBOS's `application_version`, which
decides which processes recover and dequeue a run, and changes only when this library can no
longer continue a run started by an earlier one, so upgrading never orphans runs in flight.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from .. import errors
from ..errors import DurableSwarmError, EncryptionKeyError, RunCancelledError, RunError
from ..usage import Tally, Usage
from ._engine import DBOSAwaitedWorkflowCancelledError, Serializer
from ._sealing import SealedValue, keyring, sealed_key_id

__all__ = [
    "BUDGET_TOPIC",
    "EVENTS_STREAM",
    "INLINE_CHARS",
    "IN_STEP",
    "MESSAGE_STEPS",
    "PARKED_JOINS",
    "PARKED_WAITS",
    "REPLAY_VERSION",
    "SCHEMA_VERSION",
    "SEALED_SCHEMA_VERSION",
    "WAITING_EVENT",
    "WATCHED_WAITS",
    "WORKFLOW_NAME",
    "JsonSerializer",
    "RunError",
    "StoredResult",
    "call_usage",
    "context_after",
    "context_changes",
    "context_snapshot",
    "model_output",
    "naming_run",
    "public_fields",
    "raise_unread",
    "restore_contents",
    "result_output",
    "spec_of",
    "step_kind",
    "stored_in_step",
    "unread_sealed",
]

# The version of the stored shapes this library writes (see the module docstring).
SCHEMA_VERSION = 3
# The version of a sealed payload (encrypted at rest; see the module docstring).
SEALED_SCHEMA_VERSION = 4
# DBOS's application version is `durable-swarm-log-v{REPLAY_VERSION}` (see the module docstring).
REPLAY_VERSION = 1

WORKFLOW_NAME = "durable_swarm.run"
EVENTS_STREAM = "events"
WAITING_EVENT = "waiting_for"
BUDGET_TOPIC = "budget"  # messages raising a run's budget (see `DurableRuntime._check_budget`)
# A tool result longer than this is stored once, in its step's output: the run's result keeps
# `{"role": "tool", ..., "content": None, IN_STEP: step}` (see `restore_contents`).
IN_STEP = "content_in_step"
INLINE_CHARS = 1000
# The DBOS patch a run's log holds before each wait watched by a process's watcher (releases
# before parked waits; a run of those releases replays its `watch:<kind>` and `DBOS.recv` steps).
WATCHED_WAITS = "durable-swarm-watched-waits"
# The DBOS patches a run's log holds at each wait that parks (see `durable._waits`): a wait for a
# person (after its `waiting_for` event, before its `answer:<kind>` step) and the join of a
# sub-agent run (before its `join:<child>` step, which logs before them read `DBOS.getResult`).
PARKED_WAITS = "durable-swarm-parked-waits"
PARKED_JOINS = "durable-swarm-parked-joins"
# Steps whose stored output holds a message (`message`): model and tool calls (SQL LIKE patterns).
MESSAGE_STEPS = ("model:%", "tool:%")

# DBOS's own operations, by what they mean in a run.
_DBOS_KINDS = {
    "DBOS.recv": "wait",
    "DBOS.sleep": "timer",
    "DBOS.setEvent": "event",
    "DBOS.getResult": "join",
    "DBOS.writeStream": "stream",
    "DBOS.closeStream": "stream",
    WORKFLOW_NAME: "subagent",
}


# Steps of this library named after what they record: a person's answer taken at a parked wait
# (`answer:input`, `answer:approval`) is a wait, as DBOS's `DBOS.recv` was.
_NAMED_KINDS = {"answer": "wait"}


def step_kind(function_name: str) -> tuple[str, str]:
    """A step's kind and short name from the name DBOS records for it: `tool:lookup` is
    `("tool", "lookup")`; DBOS's own operations get their meaning (`DBOS.recv` is `"wait"`)."""
    if ":" in function_name:
        kind, _, short = function_name.partition(":")
        return _NAMED_KINDS.get(kind, kind), short
    return _DBOS_KINDS.get(function_name, "dbos"), function_name


# --- the workflow's input -----------------------------------------------------------------------


def spec_of(status: Any) -> dict[str, Any]:
    """The workflow input (`spec`) of a run from its DBOS status row; `{}` if it has none."""
    inputs = status.input or {}
    args = inputs.get("args") if isinstance(inputs, dict) else None
    spec = args[0] if args else {}
    return spec if isinstance(spec, dict) else {}


# --- tool steps: the context ---------------------------------------------------------------------


def context_snapshot(context: dict[str, Any]) -> dict[str, str]:
    """Each context variable as JSON text (non-JSON values by their repr: the tool step refuses
    them), to find what a tool step changed."""
    return {key: json.dumps(value, default=repr) for key, value in context.items()}


def context_changes(before: dict[str, str], context: dict[str, Any]) -> dict[str, Any] | None:
    """What a tool step did to the context, as stored in its output: the variables it set (new
    or changed values) and the names it removed; None if nothing changed. Storing the change,
    not the whole context, keeps a long run's log linear in its length."""
    changed = {
        key: value
        for key, value in context.items()
        if before.get(key) != json.dumps(value, default=repr)
    }
    removed = [key for key in before if key not in context]
    if not changed and not removed:
        return None
    return {"set": changed, **({"removed": removed} if removed else {})}


def context_after(context: dict[str, Any], output: dict[str, Any]) -> dict[str, Any]:
    """The context after a recorded tool step: `context` (the context before it, updated in
    place as the tool itself did) with the step's `context_changes` applied; the step's whole
    context instead when it stores one (every schema-1 tool step; a refused tool's in schema 2)."""
    if "context_variables" in output:
        whole: dict[str, Any] = output["context_variables"]
        return whole
    changes = output.get("context_changes")
    if changes:
        for key in changes.get("removed", ()):
            context.pop(key, None)
        context.update(changes["set"])
    return context


# --- model steps ----------------------------------------------------------------------------------


def model_output(
    message: dict[str, Any], usage: dict[str, Any] | None, model: Any, cost_usd: float | None
) -> dict[str, Any]:
    """A model step's output: the assistant message, the token usage the server reported, the
    model name requested and the call's price in USD (None if unknown)."""
    return {"message": message, "usage": usage, "model": model, "cost_usd": cost_usd}


def call_usage(output: dict[str, Any]) -> Usage:
    """The usage a model step's output records."""
    return Usage.of_call(output.get("usage"), output.get("cost_usd"))


# --- the result ----------------------------------------------------------------------------------


def result_output(
    messages: list[dict[str, Any]],
    agent: dict[str, Any] | None,
    context_variables: dict[str, Any],
    tally: Tally,
    output: Any = None,
) -> dict[str, Any]:
    """A run's result: the messages it added (long tool results left in their steps: see
    `stored_in_step`), the reference of the agent it ended on, its context and its usage; and
    its structured `output` as JSON, when it has one (None: it has none)."""
    result = {
        "messages": messages,
        "agent": agent,
        "context_variables": context_variables,
        "usage": tally.to_json(),
    }
    if output is not None:
        result["output"] = {"value": output}
    return result


@dataclass
class StoredResult:
    """A run's result as read back: the messages it added (long tool results restored), the
    reference (`name`, `fingerprint`) of the agent it ended on, its context and usage, and its
    structured output as stored (JSON data; None when it has none)."""

    messages: list[dict[str, Any]]
    agent: dict[str, Any] | None
    context_variables: dict[str, Any]
    tally: Tally
    output: Any = None

    @classmethod
    def read(
        cls, output: dict[str, Any], steps: Callable[[], Iterable[tuple[int, Any]]]
    ) -> StoredResult:
        """The result `output` stores; `steps()` gives the run's `(step number, output)`, read
        only when a long tool result must be restored from them."""
        return cls(
            restore_contents(list(output.get("messages") or []), steps),
            output.get("agent") or None,
            output.get("context_variables") or {},
            Tally.from_json(output.get("usage")),
            (output.get("output") or {}).get("value"),
        )


# --- long tool results stored once ---------------------------------------------------------------


def stored_in_step(message: dict[str, Any], step: int) -> dict[str, Any]:
    """How the run's result keeps a tool message whose content its step `step` stores."""
    return {**message, "content": None, IN_STEP: step}


def restore_contents(
    messages: list[dict[str, Any]], steps: Callable[[], Iterable[tuple[int, Any]]]
) -> list[dict[str, Any]]:
    """`messages` from a run's result with each tool message's content taken back from the step
    that stored it (`steps()` gives `(step number, output)`, read only when needed)."""
    if not any(isinstance(m, dict) and IN_STEP in m for m in messages):
        return messages
    outputs = dict(steps())
    restored = []
    for message in messages:
        step = message.get(IN_STEP) if isinstance(message, dict) else None
        if step is not None and message.get("role") == "tool":
            output = outputs.get(step)
            stored = output.get("message") if isinstance(output, dict) else None
            content = stored.get("content") if isinstance(stored, dict) else None
            message = {k: v for k, v in message.items() if k != IN_STEP}
            message["content"] = content
        restored.append(message)
    return restored


# --- the serializer ------------------------------------------------------------------------------

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


# Values stored as they are. Checked by exact type first: every stored payload passes through
# `_encode`, and most of its keys and values are plain strings, numbers and None.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _encode(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:  # the usual key (a str that cannot be a marker) without a regex
        return {
            (k if type(k) is str and not k.endswith(_ERROR) else _escape(k)): (
                v if type(v) in _PLAIN else _encode(v)
            )
            for k, v in value.items()
        }
    if kind is list:
        return [v if type(v) in _PLAIN else _encode(v) for v in value]
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


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_ERROR}:
            return _decode_error(value[_ERROR])
        return {_unescape(k): _decode(v) for k, v in value.items()}
    return value


@contextmanager
def naming_run(run_id: str) -> Iterator[None]:
    """Fill in `run_id` on a library error raised in this block that does not name its run (a
    run's error read back from the database does not know which run it belongs to), and say
    `RunCancelledError` for DBOS's word that the run awaited here was cancelled."""
    try:
        yield
    except EncryptionKeyError as e:
        if e.run_id is not None or not e.reason:
            raise
        raise EncryptionKeyError(e.reason, key_id=e.key_id, run_id=run_id) from None
    except DurableSwarmError as e:
        if "run_id" in e._fields and e._fields["run_id"] is None:
            e._fields["run_id"] = e.run_id = run_id  # type: ignore[attr-defined]
        raise
    except DBOSAwaitedWorkflowCancelledError as e:
        if e.workflow_id != run_id:
            raise
        raise RunCancelledError(run_id) from None


# What stays readable in a sealed payload: these keys of a stored dict (with their whole
# values), and the run's options in a workflow input (`args`, without `_SPEC_CONTENTS`).
_PUBLIC_KEYS = (
    "agent",  # a step's, result's or wait's agent name or reference
    "usage",  # token counts (and, in a result, per agent name)
    "model",
    "cost_usd",
    "kind",  # what a run waits for: input or approval
    "wait_id",
    "source",  # a handoff's agents, rule and reason
    "target",
    "rule",
    "reason",
)
_SPEC_CONTENTS = ("messages", "context_variables")


def public_fields(value: Any) -> Any:
    """The part of an encoded payload that a sealed payload keeps readable (see
    `_PUBLIC_KEYS`): never a message, a context variable, a tool's arguments or result, a
    person's answer or a stream chunk; an error keeps only its type name."""
    if not isinstance(value, dict):
        return None
    if set(value) == {_ERROR} and isinstance(value[_ERROR], dict):
        return {_ERROR: {"type": value[_ERROR].get("type")}}
    public = {key: value[key] for key in _PUBLIC_KEYS if key in value}
    if isinstance(value.get("args"), list):  # a workflow's input: the run's spec and options
        public["args"] = [
            {k: v for k, v in arg.items() if k not in _SPEC_CONTENTS}
            if isinstance(arg, dict)
            else None
            for arg in value["args"]
        ]
        public["kwargs"] = {}
    return public


def _locked(public: Any, key_id: str) -> Any:
    """A sealed payload read without its key: the error for a stored error (so that raising
    it says why), else its readable fields as a `SealedValue`."""
    if isinstance(public, dict) and set(public) == {_ERROR}:
        kind = (public[_ERROR] or {}).get("type") if isinstance(public[_ERROR], dict) else None
        return EncryptionKeyError(
            f"its error ({kind or 'unknown type'}) is encrypted and this process has not got "
            "the key",
            key_id=key_id,
        )
    locked = SealedValue(_decode(public), key_id)
    args = locked.get("args")
    if isinstance(args, list):
        locked["args"] = [SealedValue(a, key_id) if isinstance(a, dict) else a for a in args]
    return locked


_SEALED_PREFIX = json.dumps({"schema_version": SEALED_SCHEMA_VERSION})[:-1]


def unread_sealed(value: Any) -> str | None:
    """The key id of `value` if it is a sealed payload that DBOS could not read and handed back
    as its stored text (DBOS's listings return a payload that fails to deserialize as text,
    with a warning): the key of that id is here but does not open it."""
    if isinstance(value, str) and value.startswith(_SEALED_PREFIX):
        try:
            sealed = json.loads(value).get("sealed")
        except (ValueError, AttributeError):
            return None
        return sealed_key_id(sealed) if isinstance(sealed, str) and sealed.count(".") >= 2 else ""
    return None


def raise_unread(run_id: str, *values: Any) -> None:
    """Raise the `EncryptionKeyError` of the first of `values` that is a sealed payload DBOS
    could not read (see `unread_sealed`), naming `run_id`."""
    for value in values:
        if unread_sealed(value) is not None:
            with naming_run(run_id):
                JsonSerializer().deserialize(value)  # raises why it cannot be read
            raise EncryptionKeyError("the stored payload cannot be read", run_id=run_id)


class JsonSerializer(Serializer):
    """DBOS serializer storing versioned JSON (see the module docstring).

    Values are JSON data (tuples are stored as lists; datetimes as ISO text; pydantic models as
    their JSON dump) and exceptions (their type name, message and, for this library's errors,
    fields); anything else raises `TypeError`. Reading a payload parses JSON and rebuilds only
    this library's error classes; any other stored error comes back as `RunError` with the
    original type name.

    With an encryption key (`_sealing.keyring()`), every payload but None is sealed (schema
    version 4). A sealed payload read without its key comes back as a `SealedValue` holding its
    readable fields (an error as `EncryptionKeyError`); with a key of its id that does not open
    it (another key, changed bytes), reading raises `EncryptionKeyError`.
    """

    def serialize(self, data: Any) -> str:
        encoded = _encode(data)
        ring = keyring() if encoded is not None else None
        if ring is None:
            return json.dumps({"schema_version": SCHEMA_VERSION, "value": encoded})
        sealed = ring.seal_bytes(json.dumps(encoded).encode())
        return json.dumps(
            {
                "schema_version": SEALED_SCHEMA_VERSION,
                "value": public_fields(encoded),
                "sealed": sealed,
            }
        )

    def deserialize(self, serialized_data: str) -> Any:
        payload = json.loads(serialized_data)
        if not isinstance(payload, dict) or "schema_version" not in payload:
            raise ValueError(
                "This payload was not written by durable-swarm (no schema_version); was the "
                "database shared with another DBOS application?"
            )
        sealed = payload.get("sealed")
        readable = SEALED_SCHEMA_VERSION if isinstance(sealed, str) else SCHEMA_VERSION
        if payload["schema_version"] > readable:
            raise ValueError(
                f"This run was written by a newer durable-swarm (log schema "
                f"{payload['schema_version']}, this one reads up to {readable}); "
                "upgrade durable-swarm to read it."
            )
        if isinstance(sealed, str):
            ring = keyring()
            key_id = sealed_key_id(sealed) if sealed.count(".") >= 2 else ""
            if key_id and (ring is None or not ring.has(key_id)):
                return _locked(payload.get("value"), key_id)
            if ring is None:
                raise EncryptionKeyError("the stored text is not a sealed payload")
            return _decode(json.loads(ring.open_bytes(sealed)))
        return _decode(payload["value"])

    def name(self) -> str:
        return "durable_swarm_json"
