"""`durable-swarm retention show | apply`: the retention policies in force on a run database,
what they deleted, what is due, and applying a policy once by hand."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..durable._database import display_url, resolve_database_url
from ..durable._retention import RETENTION_STATUSES, Retention, RetentionReport
from ..durable._sweeper import RetentionStatus
from ..errors import DurableSwarmError
from ._render import JSON_SCHEMA_VERSION, dumps
from ._store import confirm_deletion, open_swarm
from ._style import Style

__all__ = ["HANDLERS", "policy_option"]


def policy_option(text: str) -> Retention:
    """An argparse type: a policy as text (`succeeded=30d,failed=90d,cancelled=7d`)."""
    try:
        policy = Retention.of(text)
    except DurableSwarmError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    assert policy is not None
    return policy


def _when(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if getattr(args, "json", False):
        print(dumps({**data, "schema_version": JSON_SCHEMA_VERSION}))
    else:
        print("\n".join(lines))


def _report_lines(report: RetentionReport, style: Style, *, verbose: bool) -> list[str]:
    """Per status: how many runs, the oldest and newest finish times; with `verbose`, the
    run ids."""
    lines = []
    for status in RETENTION_STATUSES:
        n = report.counts.get(status, 0)
        oldest, newest = report.span(status)
        span = f"  finished {_when(oldest)} .. {_when(newest)}" if oldest else ""
        lines.append(f"  {status:<10} {n:>6} run{'s' if n != 1 else ' '}{span}")
    if verbose:
        for run in report.runs:
            subs = f" (+{len(run.sub_runs)} sub-agent runs)" if run.sub_runs else ""
            lines.append(f"    {style.paint(run.run_id, 'bold')}  {run.status}  "
                         f"finished {_when(run.finished_at)}{subs}")  # fmt: skip
    if report.kept:
        lines.append(
            f"  kept: {len(report.kept)} run(s) past their age with a sub-agent still in flight"
            f"{': ' + ', '.join(report.kept) if verbose else ''}"
        )
    return lines


def _status_lines(status: RetentionStatus, url: str) -> list[str]:
    lines = [f"Retention on {display_url(url)}:"]
    if not status.sweepers:
        lines.append(
            "  no process applies a policy here (start workers with --retention, or give "
            "DurableSwarm(retention=...) / DURABLE_SWARM_RETENTION)"
        )
    for policy in status.policies:
        lines.append(f"  policy: {Retention.of(policy).describe()}")  # type: ignore[union-attr]
    if len(status.policies) > 1:
        lines.append(
            "  warning: processes apply different policies; the one holding the sweep lease "
            "applies its own. Give every process the same policy."
        )
    for s in status.sweepers:
        last = (
            f"last swept {_when(s.swept_at)} ({s.last_deleted} deleted)"
            if s.swept_at
            else "not swept yet"
        )
        lines.append(f"  process {s.executor_id}: seen {_when(s.seen_at)}, {last}")
    deleted = ", ".join(f"{n} {k}" for k, n in status.deleted.items())
    lines.append(f"  deleted so far: {deleted}")
    return lines


def cmd_show(args: argparse.Namespace, style: Style) -> int:
    """`retention show`: the policies in force, the processes applying them, the runs deleted
    so far, and (with one policy, or --policy) what is due now."""
    url = resolve_database_url(getattr(args, "database_url", None))
    with open_swarm(url) as swarm:
        status = swarm.retention_status()
        policy = args.policy or (
            Retention.of(status.policies[0]) if len(status.policies) == 1 else None
        )
        due = swarm.apply_retention(policy, dry_run=True) if policy is not None else None
    lines = _status_lines(status, url)
    if args.policy is not None:
        lines.append(f"  policy given: {args.policy.describe()}")
    if due is not None:
        lines.append(f"Due now ({due.deleted} run{'s' if due.deleted != 1 else ''}):")
        lines += _report_lines(due, style, verbose=args.verbose)
    data = {**status.to_json(), "database": display_url(url)}
    data["due"] = due.to_json() if due is not None else None
    _emit(args, data, lines)
    return 0


def _runs(n: int) -> str:
    return f"{n} finished run{'s' if n != 1 else ''}"


def cmd_apply(args: argparse.Namespace, style: Style) -> int:
    """`retention apply`: apply a policy once, now (--dry-run: report what would go); on a
    terminal it asks first unless --yes."""
    url = resolve_database_url(getattr(args, "database_url", None))
    where = display_url(url)
    with open_swarm(url) as swarm:
        due = swarm.apply_retention(args.policy, dry_run=True)
        if args.dry_run or not due.runs:
            head = "Would delete" if due.runs else "Nothing is due:"
            lines = [
                f"{head} {_runs(due.deleted)} past their age in {where} (runs in flight are "
                "never deleted):",
                *_report_lines(due, style, verbose=args.verbose),
            ]
            _emit(args, {"database": where, **due.to_json()}, lines)
            return 0
        what = _runs(due.deleted)
        if not confirm_deletion("retention", what, where, yes=args.yes, first="see them"):
            return 1
        done = swarm.apply_retention(args.policy)
    lines = [
        f"Deleted {_runs(done.deleted)} past their age from {where}:",
        *_report_lines(done, style, verbose=args.verbose),
    ]
    _emit(args, {"database": where, **done.to_json()}, lines)
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace, Style], int]] = {
    "show": cmd_show,
    "apply": cmd_apply,
}
