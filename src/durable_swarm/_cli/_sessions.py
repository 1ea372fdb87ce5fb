"""`durable-swarm sessions ...`: list, show, clear, delete the sessions of the run database."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..durable._database import display_url, resolve_database_url
from ..errors import SessionNotFoundError
from ..sessions import SessionInfo
from ._render import JSON_SCHEMA_VERSION, dumps
from ._store import CliError, open_swarm
from ._style import Style, clean, preview

__all__ = ["SESSION_HANDLERS"]


def _database(args: argparse.Namespace) -> str:
    return resolve_database_url(getattr(args, "database_url", None))


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if getattr(args, "json", False):
        print(dumps({**data, "schema_version": JSON_SCHEMA_VERSION}))
    else:
        print("\n".join(lines))


def _when(info: SessionInfo) -> str:
    return info.updated_at.astimezone().strftime("%Y-%m-%d %H:%M") if info.updated_at else "-"


def _listing(args: argparse.Namespace, style: Style) -> int:
    """`sessions list`: every session, most recently changed first."""
    url = _database(args)
    with open_swarm(url) as client:
        sessions = client.list_sessions(limit=args.limit or None)
    if args.json:
        summary = [{k: v for k, v in s.to_json().items() if k != "messages"} for s in sessions]
        _emit(args, {"sessions": summary, "database": display_url(url)}, [])
        return 0
    if not sessions:
        print(f"No sessions in {display_url(url)} (a run with session=NAME makes one).")
        return 0
    header = f"{'SESSION':<28} {'MESSAGES':>8} {'RUNS':>5}  {'UPDATED':<16}  HELD BY"
    lines = [style.paint(header, "bold")]
    for s in sessions:
        held = style.paint(clean(s.held_by), "yellow") if s.held_by else "-"
        note = " (compacted)" if s.compacted else ""
        lines.append(
            f"{preview(s.name, 28):<28} {len(s.messages):>8} {s.runs:>5}  {_when(s):<16}  "
            f"{held}{note}"
        )
    print("\n".join(lines))
    return 0


def _get(client: Any, name: str, url: str) -> SessionInfo:
    try:
        info: SessionInfo = client.get_session(name)
    except SessionNotFoundError as e:
        raise CliError(f"{e} (database: {display_url(url)})") from e
    return info


def _show(args: argparse.Namespace, style: Style) -> int:
    """`sessions show NAME`: the conversation a session's next run starts from."""
    url = _database(args)
    with open_swarm(url) as client:
        info = _get(client, args.name, url)
    if args.json:
        _emit(args, {"session": info.to_json(), "database": display_url(url)}, [])
        return 0
    held = f"held by run {clean(info.held_by)}" if info.held_by else "free"
    lines = [
        f"{style.paint('Session', 'bold')} {clean(info.name)}: {len(info.messages)} messages, "
        f"{info.runs} run{'s' if info.runs != 1 else ''}, {held}; last run "
        f"{clean(info.last_run or '-')}, updated {_when(info)}",
        "",
    ]
    for message in info.messages:
        who = message.get("sender") or message.get("role", "?")
        content = message.get("content")
        calls = ", ".join(c["function"]["name"] for c in message.get("tool_calls") or [])
        text = clean(content, lines=True) if content else f"[calls {clean(calls)}]" if calls else ""
        lines.append(f"  {style.paint(str(who), 'bold')}: {text}")
    print("\n".join(lines))
    return 0


def _change(doing: str, method: str) -> Callable[[argparse.Namespace, Style], int]:
    def command(args: argparse.Namespace, style: Style) -> int:
        url = _database(args)
        with open_swarm(url) as client:
            _get(client, args.name, url)
            getattr(client, method)(args.name)
        _emit(
            args,
            {doing: args.name, "database": display_url(url)},
            [f"{style.paint('✓', 'green')} {doing.capitalize()} session {clean(args.name)}."],
        )
        return 0

    command.__doc__ = f"`sessions {method.split('_')[0]} NAME`."
    return command


SESSION_HANDLERS: dict[str, Callable[[argparse.Namespace, Style], int]] = {
    "list": _listing,
    "show": _show,
    "clear": _change("cleared", "clear_session"),
    "delete": _change("deleted", "delete_session"),
}
