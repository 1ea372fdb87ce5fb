"""Sessions: one conversation carried across runs (`run(..., session="customer-42")`).

A run of a session starts from the session's messages, followed by the messages passed in, and
when it succeeds the session keeps the conversation as the model last saw it: the messages
passed in and the run's own added, or, if the run compacted its conversation (see
`durable_swarm.compaction`), the summary followed by the recent messages, so the session's next
run starts compact (every original message stays in the run's log). A run that fails or is
cancelled adds nothing.

Two runs of one session never run at once: while a run holds its session, starting another run
of it raises `SessionBusyError` naming the run that holds it.

`DurableSwarm` and `DurableClient` keep sessions in the run database (`durable._sessions`);
`Swarm` keeps them in memory, in the `Swarm` object (`MemorySessions`): they last as long as it
does, as everything else about an in-memory run.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .compaction import SUMMARY_PREFIX, session_messages
from .errors import DurableSwarmError, SessionBusyError, SessionNotFoundError

__all__ = ["MemorySessions", "SessionInfo", "check_session_name", "session_loop"]

MAX_NAME_CHARS = 200


def check_session_name(name: Any) -> str:
    """`name` if it can name a session (a non-empty str of at most 200 characters)."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise DurableSwarmError(
            f"A session's name must be a non-empty str of at most {MAX_NAME_CHARS} characters, "
            f"not {name!r} (e.g. session='customer-42')."
        )
    return name


@dataclass
class SessionInfo:
    """A session as stored: its `messages` (the conversation its next run starts from),
    `held_by` (the run that holds it now, None when free), how many `runs` added to it and
    the latest (`last_run`), and when it was made and last changed."""

    name: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    held_by: str | None = None
    runs: int = 0
    last_run: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def compacted(self) -> bool:
        """Whether the conversation starts with a summary of earlier messages."""
        first = self.messages[0].get("content") if self.messages else None
        return isinstance(first, str) and first.startswith(f"[{SUMMARY_PREFIX}")

    def to_json(self) -> dict[str, Any]:
        """The session as JSON (the CLI's `--json`, the console's API)."""
        return {
            "name": self.name,
            "messages": self.messages,
            "message_count": len(self.messages),
            "held_by": self.held_by,
            "runs": self.runs,
            "last_run": self.last_run,
            "compacted": self.compacted,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def _now() -> datetime:
    return datetime.now(timezone.utc)


class MemorySessions:
    """The sessions of an in-memory `Swarm`, kept in this process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionInfo] = {}
        self._ids = itertools.count(1)

    def new_run_id(self) -> str:
        """A name for an in-memory run (in `SessionBusyError`s and `SessionInfo.last_run`)."""
        return f"memory-{next(self._ids)}"

    def claim(self, name: str, run_id: str) -> list[dict[str, Any]]:
        """Hold session `name` for `run_id` (made if new); returns a copy of its messages."""
        with self._lock:
            now = _now()
            info = self._sessions.setdefault(
                name, SessionInfo(name, created_at=now, updated_at=now)
            )
            if info.held_by is not None and info.held_by != run_id:
                raise SessionBusyError(
                    name,
                    info.held_by,
                    message=f"Session {name!r} is busy: run {info.held_by!r} of this Swarm holds "
                    "it until that run ends (two runs of one session never run at once). Wait "
                    "for it to finish and run again, or use another session name. Nothing was "
                    "run.",
                )
            info.held_by = run_id
            return copy.deepcopy(info.messages)

    def release(self, name: str, run_id: str) -> None:
        """Let go of `name` if `run_id` holds it (the run failed or stopped: nothing added)."""
        with self._lock:
            info = self._sessions.get(name)
            if info is not None and info.held_by == run_id:
                info.held_by = None

    def finish(self, name: str, run_id: str, messages: list[dict[str, Any]]) -> None:
        """`run_id` succeeded: the session keeps `messages` and is free again."""
        with self._lock:
            info = self._sessions.get(name)
            if info is None or info.held_by != run_id:
                return  # deleted or cleared meanwhile: refused while held, so not reached
            info.messages = copy.deepcopy(messages)
            info.held_by, info.last_run, info.updated_at = None, run_id, _now()
            info.runs += 1

    def list(self) -> list[SessionInfo]:
        """Every session, most recently changed first (messages included)."""
        with self._lock:
            found = [copy.deepcopy(info) for info in self._sessions.values()]
        return sorted(found, key=lambda s: s.updated_at or _now(), reverse=True)

    def get(self, name: str) -> SessionInfo:
        """Session `name` (raises `SessionNotFoundError`)."""
        with self._lock:
            info = self._sessions.get(name)
            if info is None:
                raise SessionNotFoundError(name)
            return copy.deepcopy(info)

    def _idle(self, name: str, doing: str) -> SessionInfo:
        info = self._sessions.get(name)
        if info is None:
            raise SessionNotFoundError(name)
        if info.held_by is not None:
            raise SessionBusyError(
                name,
                info.held_by,
                message=f"Session {name!r} is held by run {info.held_by!r} of this Swarm; it "
                f"was not {doing}. Wait for that run to end, then try again.",
            )
        return info

    def clear(self, name: str) -> None:
        """Forget the messages of session `name` (it stays, empty)."""
        with self._lock:
            info = self._idle(name, "cleared")
            info.messages, info.updated_at = [], _now()

    def delete(self, name: str) -> None:
        """Delete session `name`."""
        with self._lock:
            self._idle(name, "deleted")
            del self._sessions[name]


def session_loop(
    claim: Callable[[], list[dict[str, Any]]],
    start: Callable[[list[dict[str, Any]]], tuple[Generator[Any, Any, Any], list[dict[str, Any]]]],
    runtime: Any,
    finish: Callable[[list[dict[str, Any]]], None],
    release: Callable[[], None],
) -> Generator[Any, Any, Any]:
    """A session's run as a turn loop: when first advanced, `claim()`s the session (its
    messages), and runs the loop `start(messages)` makes with the history it starts from. When
    that loop returns, `finish` gets what the session keeps (see
    `compaction.session_messages`, with `runtime.compaction`); when it raises or is closed,
    `release` is called. (A stream never read holds nothing.)"""
    loop, history = start(claim())
    try:
        response = yield from loop
    except BaseException:
        release()
        raise
    finish(session_messages([*history, *response.messages], runtime.compaction))
    return response
