"""`durable-swarm runs ...`: list, show, watch, send, approve, reject, cancel, resume, fork,
delete, prune."""

from __future__ import annotations

import argparse
import getpass
import inspect
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from ..durable._client import DurableClient
from ..durable._control import FINISHED
from ..durable._database import display_url, resolve_database_url
from ..durable._runs import RunInfo, encrypted_text
from ..errors import DurableSwarmError, RunNotFoundError
from ._budget import budget_of
from ._render import (
    JSON_SCHEMA_VERSION,
    dumps,
    new_timeline,
    run_json,
    run_table,
    step_json,
    step_lines,
    summary_lines,
    waiting_hint,
)
from ._store import CliError, confirm_deletion, open_swarm
from ._style import Style, clean, duration, preview

__all__ = ["HANDLERS", "parse_time"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def parse_time(text: str) -> datetime:
    """An argparse type: an ISO time (`2024-05-21`, `2024-05-21T15:00`, with or without a zone;
    local time without one) or a time relative to now (`30s`, `15m`, `2h`, `7d`, `1w` ago)."""
    relative = _RELATIVE.match(text.strip().lower())
    if relative:
        seconds = float(relative.group(1)) * _UNITS[relative.group(2)]
        return datetime.now(timezone.utc) - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO time like 2024-05-21T15:00 or a time ago like 30m, 2h, 7d; "
            f"got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def _database(args: argparse.Namespace) -> str:
    return resolve_database_url(getattr(args, "database_url", None))


def _get_run(swarm: DurableClient, run_id: str, url: str) -> RunInfo:
    try:
        return swarm.get_run(run_id)
    except RunNotFoundError as e:
        raise CliError(f"{e} (database: {display_url(url)})") from e


@contextmanager
def _open_run(args: argparse.Namespace) -> Iterator[tuple[DurableClient, RunInfo]]:
    """A thin client on the command's run database and the run `args.run_id` read from it
    (`CliError` naming the database when there is no such run); closed when the block ends."""
    url = _database(args)
    with open_swarm(url) as swarm:
        yield swarm, _get_run(swarm, args.run_id, url)


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if getattr(args, "json", False):
        print(dumps({**data, "schema_version": JSON_SCHEMA_VERSION}))
    else:
        print("\n".join(lines))


def _done(args: argparse.Namespace, style: Style, data: dict[str, Any], text: str) -> int:
    """Report a change made to a run: `data` as JSON with --json, else `✓ text`; exit status 0."""
    _emit(args, data, [f"{style.paint('✓', 'green')} {text}"])
    return 0


# --- looking ------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, style: Style) -> int:
    """`runs list`: one page of runs, newest first, filtered by status, agent, text in their
    messages and creation time; says how many more there are and how to see them."""
    url = _database(args)
    statuses = [s for value in args.status or [] for s in value.split(",") if s]
    filters: dict[str, Any] = {
        "status": statuses or None,
        "agent": args.agent,
        "search": args.search,
        "since": args.since,
        "until": args.until,
    }
    with open_swarm(url) as swarm:
        runs = swarm.list_runs(**filters, limit=args.limit or None, offset=args.offset)
        total = swarm.count_runs(**filters)
        swarm.runs.read_usage(runs)
    more = max(total - args.offset - len(runs), 0)
    if args.json:
        data = {
            "runs": [run_json(r, detail=False) for r in runs],
            "total": total,
            "offset": args.offset,
            "more": more,
            "database": display_url(url),
        }
        _emit(args, data, [])
        return 0
    if not runs:
        filtered = statuses or args.agent or args.search or args.since or args.until
        which = "match these filters" if filtered else "yet"
        beyond = f" after the first {args.offset} ({total} in all)" if args.offset else ""
        print(f"No runs {which}{beyond} in {clean(display_url(url))}.")
        return 0
    print("\n".join(run_table(runs, style)))
    first, last = args.offset + 1, args.offset + len(runs)
    if more:
        print(
            style.paint(
                f"Runs {first}-{last} of {total}; {more} more: add --offset {last} for the next "
                "page (--limit 0 lists all).",
                "dim",
            )
        )
    elif args.offset:
        print(style.paint(f"Runs {first}-{last} of {total}.", "dim"))
    return 0


def cmd_show(args: argparse.Namespace, style: Style) -> int:
    """`runs show`: a run's summary and timeline (model calls, tool calls, handoffs, waits)."""
    url = _database(args)
    with open_swarm(url) as swarm:
        info = _get_run(swarm, args.run_id, url)
    if args.json:
        _emit(args, run_json(info, detail=True), [])
        return 0
    lines = summary_lines(info, style)
    if info.output is not None:  # a structured answer (its agent's output_type), as stored
        lines += ["", style.paint("Output", "bold"), f"  {clean(json.dumps(info.output))}"]
    timeline = step_lines(info.steps, style, everything=args.all)
    lines += ["", style.paint("Timeline", "bold"), *(timeline or ["  (no steps yet)"])]
    hint = waiting_hint(info, style)
    if hint:
        lines += ["", *hint]
    if args.messages:
        lines += ["", style.paint("Messages", "bold")]
        if info.encrypted:
            lines.append(f"  {encrypted_text(info.encrypted)}")
        # where a compaction cut: the model saw its summary in place of the messages above
        cuts = {
            s.output["upto"]: s.step
            for s in info.steps
            if s.kind == "compact" and isinstance(s.output, dict) and "upto" in s.output
        }
        for position, message in enumerate(info.messages):
            if position in cuts:
                marker = f"  ⋯ summarized above (step #{cuts[position]}): the model saw the summary"
                lines.append(style.paint(marker, "green"))
            who = message.get("sender") or message.get("role", "?")
            content = message.get("content")
            calls = ", ".join(c["function"]["name"] for c in message.get("tool_calls") or [])
            text = (
                clean(content, lines=True)
                if content
                else f"[calls {clean(calls)}]"
                if calls
                else ""
            )
            lines.append(f"  {style.paint(str(who), 'bold')}: {text}")
    print("\n".join(lines))
    return 0


class _Progress:
    """A one-line spinner on a terminal while `watch` waits; nothing when not on one."""

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.frame = 0

    def show(self, text: str) -> None:
        if self.enabled:
            self.frame = (self.frame + 1) % len(self.FRAMES)
            sys.stdout.write(f"\r\033[K{self.FRAMES[self.frame]} {text}")
            sys.stdout.flush()

    def clear(self) -> None:
        if self.enabled:
            sys.stdout.write("\r\033[K")
            sys.stdout.flush()


def cmd_watch(args: argparse.Namespace, style: Style) -> int:
    """`runs watch`: print a run's steps as they finish, until it ends (exit 0 if it succeeded,
    1 if it failed or was cancelled)."""
    url = _database(args)
    emit_json = args.json
    progress = _Progress(style.enabled and not emit_json)
    started = time.monotonic()
    seen: set[int] = set()
    timeline = new_timeline(style)
    with open_swarm(url) as swarm:
        return _watch(swarm, args, style, url, progress, started, seen, timeline)


def _watch(
    swarm: DurableClient,
    args: argparse.Namespace,
    style: Style,
    url: str,
    progress: _Progress,
    started: float,
    seen: set[int],
    timeline: Any,
) -> int:
    emit_json = args.json
    status = None
    check = True
    while True:
        info = _get_run(swarm, args.run_id, url)
        if check and not emit_json:
            print(
                f"Watching run {style.paint(info.run_id, 'bold')} (Ctrl-C stops watching; "
                "the run goes on)"
            )
        check = False
        fresh = [s for s in info.steps if s.step not in seen and (s.completed_at or s.error)]
        for step in fresh:
            seen.add(step.step)
            if emit_json:
                print(dumps({"event": "step", "run_id": info.run_id, "step": step_json(step)}))
                continue
            progress.clear()
            for line in step_lines([step], style, everything=args.all, timeline=timeline):
                print(line)
        if info.status != status:
            status = info.status
            if emit_json:
                event = {"event": "status", "run_id": info.run_id, "status": status}
                print(dumps({**event, "waiting_for": info.waiting_for}))
            else:
                progress.clear()
                print(f"● {style.status(status)}")
                for line in waiting_hint(info, style):
                    print(line)
        sys.stdout.flush()
        if status in FINISHED:
            break
        elapsed = time.monotonic() - started
        if args.timeout and elapsed >= args.timeout:
            progress.clear()
            raise CliError(
                f"Stopped watching run {info.run_id} after {args.timeout:g} s: it is still "
                f"{status}. Nothing was changed."
            )
        progress.show(f"{status} · {len(seen)} steps · {duration(elapsed * 1000)}")
        time.sleep(args.interval)
    answer = next(
        (m.get("content") for m in reversed(info.new_messages) if m.get("role") == "assistant"),
        None,
    )
    if emit_json:
        print(dumps({"event": "end", "run": run_json(info, detail=False)}))
    elif status == "succeeded" and answer:
        print(f"{style.paint('answer', 'dim')} {preview(answer, 300)}")
    elif info.error:
        print(style.paint(f"error: {preview(info.error, 300)}", "red"))
    return 0 if status == "succeeded" else 1


# --- steering -----------------------------------------------------------------------------------


def _by(method: Callable[..., Any], args: argparse.Namespace) -> dict[str, Any]:
    """`by=<who>` when the library method records who decided."""
    if "by" not in inspect.signature(method).parameters:
        return {}
    if args.by:
        return {"by": args.by}
    try:
        return {"by": f"{getpass.getuser()} (durable-swarm CLI)"}
    except Exception:
        return {"by": "durable-swarm CLI"}


_GOES_ON = (
    "The run goes on in the process that holds it, or when your app next starts on this database "
    "(it needs the agents' code)."
)


def cmd_send(args: argparse.Namespace, style: Style) -> int:
    """`runs send`: answer the question a run waits on."""
    with _open_run(args) as (swarm, _):
        swarm.send_input(args.run_id, args.text, **_by(swarm.send_input, args))
    data = {"run_id": args.run_id, "action": "send", "text": args.text}
    return _done(args, style, data, f"Sent your answer to run {clean(args.run_id)}. {_GOES_ON}")


def cmd_approve(args: argparse.Namespace, style: Style) -> int:
    """`runs approve`: approve the tool call a run waits on."""
    with _open_run(args) as (swarm, _):
        swarm.approve(args.run_id, args.tool_call_id, **_by(swarm.approve, args))
    data = {"run_id": args.run_id, "action": "approve", "tool_call_id": args.tool_call_id}
    call, run = clean(args.tool_call_id), clean(args.run_id)
    return _done(args, style, data, f"Approved tool call {call} of run {run}. {_GOES_ON}")


def cmd_reject(args: argparse.Namespace, style: Style) -> int:
    """`runs reject`: reject the tool call a run waits on (the model reads `--message`)."""
    with _open_run(args) as (swarm, _):
        by = _by(swarm.reject, args)
        swarm.reject(args.run_id, args.tool_call_id, message=args.message, **by)
    data = {
        "run_id": args.run_id,
        "action": "reject",
        "tool_call_id": args.tool_call_id,
        "message": args.message,
    }
    call, run = clean(args.tool_call_id), clean(args.run_id)
    return _done(args, style, data, f"Rejected tool call {call} of run {run}. {_GOES_ON}")


def cmd_cancel(args: argparse.Namespace, style: Style) -> int:
    """`runs cancel`: stop a run before its next step (it can be resumed later)."""
    with _open_run(args) as (swarm, info):
        if info.status in ("succeeded", "failed"):
            raise CliError(
                f"Run {clean(args.run_id)} already {info.status}: there is nothing to cancel, and "
                "nothing was changed."
            )
        if info.status != "cancelled":
            swarm.cancel(args.run_id)
    already = info.status == "cancelled"
    text = "was already cancelled" if already else "is cancelled: it stops before its next step"
    return _done(
        args,
        style,
        {"run_id": args.run_id, "action": "cancel", "changed": not already},
        f"Run {clean(args.run_id)} {text}. "
        f"Resume it with: durable-swarm runs resume {clean(args.run_id)}",
    )


def cmd_resume(args: argparse.Namespace, style: Style) -> int:
    """`runs resume`: continue a cancelled or failed run from its last finished step."""
    with _open_run(args) as (swarm, info):
        if info.status == "succeeded":
            raise CliError(
                f"Run {args.run_id} already succeeded: there is nothing to resume, and nothing "
                f"was changed. To run it again from a step: durable-swarm runs fork "
                f"{args.run_id} STEP"
            )
        budget = budget_of(args)
        swarm.resume(args.run_id, budget=budget)
    kept = [s.step for s in info.steps if s.error is None and s.completed_at]
    where = f"after step {max(kept)}" if kept else "from the start"
    limits = f" under budget {budget.to_json()}" if budget is not None else ""
    return _done(
        args,
        style,
        {
            "run_id": args.run_id,
            "action": "resume",
            "previous_status": info.status,
            "budget": budget.to_json() if budget is not None else None,
        },
        f"Run {clean(args.run_id)} ({info.status}) is queued to go on {where}{limits}; finished "
        "steps are not run again. A worker with its agents picks it up: your app, when it runs "
        "on this database.",
    )


def cmd_fork(args: argparse.Namespace, style: Style) -> int:
    """`runs fork`: a new run that copies a run's steps before STEP and runs the rest again."""
    with _open_run(args) as (swarm, _):
        try:
            handle = swarm.fork(args.run_id, args.step, new_run_id=args.new_run_id)
        except DurableSwarmError as e:
            unchanged = "" if "nothing was changed" in str(e).lower() else " Nothing was changed."
            raise CliError(
                f"{e} (`durable-swarm runs show {args.run_id}` lists them.){unchanged}"
            ) from e
    return _done(
        args,
        style,
        {"run_id": handle.run_id, "action": "fork", "forked_from": args.run_id, "step": args.step},
        f"Forked run {clean(args.run_id)} at step {args.step} as run "
        f"{style.paint(handle.run_id, 'bold')}: steps before {args.step} are copied, the rest "
        "runs again in a worker (your app, when it runs on this database).",
    )


# --- deleting ----------------------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace, style: Style) -> int:
    """`runs delete`: delete a run and its sub-agent runs (a live run only with --force)."""
    url = _database(args)
    with open_swarm(url) as swarm:
        _get_run(swarm, args.run_id, url)
        deleted = swarm.delete_run(args.run_id, force=args.force)
    children = len(deleted) - 1
    more = f" and its {children} sub-agent run{'s' if children != 1 else ''}" if children else ""
    _emit(
        args,
        {"deleted": deleted, "database": display_url(url)},
        [f"Deleted run {style.paint(args.run_id, 'bold')}{more} from {display_url(url)}."],
    )
    return 0


def cmd_prune(args: argparse.Namespace, style: Style) -> int:
    """`runs prune`: delete the finished runs created before --older-than (never a live one);
    --dry-run lists them; on a terminal it asks first unless --yes."""
    url = _database(args)
    cutoff = args.older_than.astimezone().strftime("%Y-%m-%d %H:%M")
    with open_swarm(url) as swarm:
        doomed = swarm.prune_runs(args.older_than, dry_run=True)
        if not doomed:
            _emit(
                args,
                {"deleted": [], "dry_run": args.dry_run, "database": display_url(url)},
                [f"No finished runs created before {cutoff} in {display_url(url)}."],
            )
            return 0
        what = (
            f"{len(doomed)} finished run{'s' if len(doomed) != 1 else ''} created before {cutoff}"
        )
        if args.dry_run:
            ids = [r.run_id for r in doomed]
            lines = [
                f"Would delete {what} (live runs are never pruned):",
                *run_table(doomed, style),
            ]
            _emit(args, {"deleted": ids, "dry_run": True, "database": display_url(url)}, lines)
            return 0
        where = display_url(url)
        if not confirm_deletion("prune", what, where, yes=args.yes, first="list them"):
            return 1
        deleted = swarm.prune_runs(args.older_than)
    ids = [r.run_id for r in deleted]
    _emit(
        args,
        {"deleted": ids, "dry_run": False, "database": display_url(url)},
        [f"Deleted {len(ids)} finished run{'s' if len(ids) != 1 else ''} created before {cutoff}."],
    )
    return 0


def cmd_rotate_keys(args: argparse.Namespace, style: Style) -> int:
    """`runs rotate-keys`: re-seal every run's stored payloads with the first key of
    DURABLE_SWARM_ENCRYPTION_KEY, in batches; safe while workers run, and resumable."""
    url = _database(args)
    say = None if args.json else (lambda line: print(style.paint(line, "dim")))
    with open_swarm(url) as swarm:
        report = swarm.runs.rotate_keys(batch_size=args.batch_size, say=say)
    lines = [
        f"Re-sealed {report.resealed} payloads with key {report.key_id!r} in {display_url(url)}."
    ]
    if report.changed:
        lines.append(f"{report.changed} changed while being read: run it again to take them.")
    for key_id, n in report.missing_keys.items():
        lines.append(
            f"{n} payloads are sealed with the key {key_id!r}, which is not in this process's "
            "keys: add it to DURABLE_SWARM_ENCRYPTION_KEY (after the new key) and run it again."
        )
    data = {
        "key_id": report.key_id,
        "resealed": report.resealed,
        "changed": report.changed,
        "missing_keys": report.missing_keys,
        "by_table": report.by_table,
        "database": display_url(url),
    }
    _emit(args, data, lines)
    return 1 if report.missing_keys else 0


HANDLERS: dict[str, Callable[[argparse.Namespace, Style], int]] = {
    "list": cmd_list,
    "show": cmd_show,
    "watch": cmd_watch,
    "send": cmd_send,
    "approve": cmd_approve,
    "reject": cmd_reject,
    "cancel": cmd_cancel,
    "resume": cmd_resume,
    "fork": cmd_fork,
    "delete": cmd_delete,
    "prune": cmd_prune,
    "rotate-keys": cmd_rotate_keys,
}
