"""The `durable-swarm` command: look at and steer durable runs, run the demos, chat.

    durable-swarm runs list [--status S] [--agent A] [--search TEXT] [--since T] [--until T]
                            [--limit N] [--offset N]
    durable-swarm runs show RUN_ID [--messages] [--all]
    durable-swarm runs watch RUN_ID [--interval S] [--timeout S]
    durable-swarm runs send RUN_ID TEXT
    durable-swarm runs approve RUN_ID TOOL_CALL_ID
    durable-swarm runs reject RUN_ID TOOL_CALL_ID [--message M]
    durable-swarm runs cancel RUN_ID | resume RUN_ID [BUDGET] | fork RUN_ID STEP
    durable-swarm runs delete RUN_ID [--force] | prune --older-than 30d [--dry-run] [--yes]
    durable-swarm sessions list [--limit N] | show NAME | clear NAME | delete NAME
    durable-swarm demo [NAME] [--model M] [--base-url URL] [ARGS...] | demo --list
    durable-swarm chat MODULE:AGENT [--model M] [--base-url URL] [--stream] [--context JSON]
                       [--session NAME] [--compact-at TOKENS] [BUDGET]
    durable-swarm completion bash|zsh|tcsh
    durable-swarm --version
    durable-swarm worker MODULE[:ATTR] [--queue NAME] [--concurrency N] [--executor-id ID]
                         [--shutdown-grace SECONDS] [--retention POLICY] [BUDGET]
    durable-swarm retention show [--policy POLICY] [--verbose]
    durable-swarm retention apply [--policy POLICY] [--dry-run] [--verbose] [--yes]
    durable-swarm serve [--host 127.0.0.1] [--port 8000] [--token T]

BUDGET is `--max-model-calls N --max-total-tokens N --max-cost-usd X` (any of them): a run
stops, failed, before a model call once it has reached one (see `durable_swarm.Budget`).
POLICY is `succeeded=30d,failed=90d,cancelled=7d` (any of them; ages in s, m, h, d or w), with
optional `batch_size=N` and `interval=60s` (see `durable_swarm.durable.Retention`).

A thin layer over the library (`runs` commands use the thin `DurableClient`, so they never run
or recover a run themselves): the database is found as the library finds it
(`--database-url`, else DURABLE_SWARM_DATABASE_URL, else DBOS_SYSTEM_DATABASE_URL, else
`durable_swarm.sqlite` in the working directory). `--json` gives stable JSON for programs.
Colours only on a terminal, and never with NO_COLOR. Exit status: 0 done, 1 error, 2 bad usage,
130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

# Only what reads runs is imported here; a command that runs agents (`chat`, `worker`, `serve`)
# imports the turn loop, the worker or the web app when it is chosen.
from . import __version__
from ._cli._budget import add_budget_options, budget_of
from ._cli._demo import DEFAULT_DEMO, cmd_demo
from ._cli._retention import HANDLERS as RETENTION_HANDLERS
from ._cli._retention import policy_option
from ._cli._runs import HANDLERS, parse_time
from ._cli._sessions import SESSION_HANDLERS
from ._cli._store import CliError
from ._cli._style import Style, clean, use_color
from .durable import DEFAULT_CONCURRENCY, DEFAULT_QUEUE
from .durable._client import DEFAULT_BUSY_POLL_INTERVAL, DEFAULT_SHUTDOWN_GRACE
from .durable._runs import STATUSES
from .errors import DurableSwarmError

if TYPE_CHECKING:
    from .durable._retention import Retention

__all__ = ["build_parser", "main"]

PROG = "durable-swarm"


def _common(json_output: bool) -> argparse.ArgumentParser:
    """Options every command accepts, before or after its name."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--database-url",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="the run database: a SQLite file path or postgresql://... (default: "
        "DURABLE_SWARM_DATABASE_URL, DBOS_SYSTEM_DATABASE_URL, else ./durable_swarm.sqlite)",
    )
    parent.add_argument(
        "--no-color", action="store_true", default=argparse.SUPPRESS, help="no colours"
    )
    if json_output:
        parent.add_argument("--json", action="store_true", help="print JSON for programs")
    return parent


T = TypeVar("T", int, float)
Handler = Callable[[argparse.Namespace, Style], int]


def _number(text: str, convert: Callable[[str], T], kind: str) -> T:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None


def _seconds(text: str, *, zero: bool) -> float:
    """A duration option: a number of seconds above 0 (`zero`: 0 or above); never NaN, which
    `float` accepts and every comparison lets through."""
    value = _number(text, float, "a number of seconds")
    if math.isnan(value) or value < 0 or (value == 0 and not zero):
        wanted = "0 or more seconds" if zero else "a positive number of seconds"
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
    return value


def _positive(text: str) -> float:
    return _seconds(text, zero=False)


def _non_negative(text: str) -> float:
    return _seconds(text, zero=True)


def _positive_int(text: str) -> int:
    if (value := _number(text, int, "a whole number")) < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {text!r}")
    return value


def _count(text: str) -> int:
    if (value := _number(text, int, "a whole number")) < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def _status(text: str) -> str:
    for status in text.split(","):
        if status and status not in STATUSES:
            raise argparse.ArgumentTypeError(
                f"unknown status {status!r}; choose from {', '.join(STATUSES)}"
            )
    return text


def _add_runs(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    runs = commands.add_parser(
        "runs", help="look at and steer durable runs", description="Look at and steer runs."
    )
    sub = runs.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(handler=HANDLERS[name])
        return parser

    listing = action("list", "list runs, newest first")
    listing.add_argument(
        "--status",
        action="append",
        type=_status,
        metavar="STATUS",
        help=f"only runs with this status (repeatable or comma-separated): {', '.join(STATUSES)}",
    )
    listing.add_argument("--agent", help="only runs on (or ended on) this agent")
    listing.add_argument(
        "--since", type=parse_time, metavar="TIME", help="created at or after: ISO time or 2h, 7d"
    )
    listing.add_argument(
        "--until", type=parse_time, metavar="TIME", help="created at or before: ISO time or 30m"
    )
    listing.add_argument(
        "--search", metavar="TEXT", help="only runs whose messages contain TEXT (any case)"
    )
    listing.add_argument(
        "--limit", type=_count, default=50, metavar="N", help="at most N runs (0: all; default 50)"
    )
    listing.add_argument(
        "--offset", type=_count, default=0, metavar="N", help="skip the first N runs (paging)"
    )

    show = action("show", "a run's summary and timeline: model calls, tool calls, handoffs, waits")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--messages", action="store_true", help="also print the conversation")
    show.add_argument("--all", action="store_true", help="also show DBOS bookkeeping steps")

    watch = action("watch", "follow a live run: print its steps as they finish, until it ends")
    watch.add_argument("run_id", metavar="RUN_ID")
    watch.add_argument(
        "--interval", type=_positive, default=0.5, metavar="S", help="poll every S seconds"
    )
    watch.add_argument(
        "--timeout", type=_positive, metavar="S", help="give up after S seconds (exit 1)"
    )
    watch.add_argument("--all", action="store_true", help="also show DBOS bookkeeping steps")

    send = action("send", "answer the question a run waits on (status waiting_for_input)")
    send.add_argument("run_id", metavar="RUN_ID")
    send.add_argument("text", metavar="TEXT")
    send.add_argument("--by", help="who answers (recorded; default: your user name)")

    approve = action("approve", "approve the tool call a run waits on")
    approve.add_argument("run_id", metavar="RUN_ID")
    approve.add_argument("tool_call_id", metavar="TOOL_CALL_ID")
    approve.add_argument("--by", help="who approves (recorded; default: your user name)")

    reject = action("reject", "reject the tool call a run waits on")
    reject.add_argument("run_id", metavar="RUN_ID")
    reject.add_argument("tool_call_id", metavar="TOOL_CALL_ID")
    reject.add_argument("--message", "-m", help="why: the model reads it as the tool's result")
    reject.add_argument("--by", help="who rejects (recorded; default: your user name)")

    cancel = action("cancel", "cancel a run: it stops before its next step")
    cancel.add_argument("run_id", metavar="RUN_ID")

    resume = action("resume", "continue a cancelled or failed run from its last finished step")
    resume.add_argument("run_id", metavar="RUN_ID")
    add_budget_options(resume, "the run goes on under this budget (e.g. a higher one)")

    fork = action("fork", "start a new run from a run's steps before STEP")
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument("step", type=_count, metavar="STEP", help="the first step to run again")
    fork.add_argument("--new-run-id", metavar="ID", help="the new run's id (default: a UUID)")

    delete = action("delete", "delete a run and its sub-agent runs (a live run only with --force)")
    delete.add_argument("run_id", metavar="RUN_ID")
    delete.add_argument(
        "--force", action="store_true", help="also a live run: it is cancelled, then deleted"
    )

    prune = action("prune", "delete finished runs older than a time, to keep the database small")
    prune.add_argument(
        "--older-than",
        type=parse_time,
        required=True,
        metavar="TIME",
        help="created before this: a time ago like 30d, 12h, or an ISO time",
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    prune.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    rotate = action(
        "rotate-keys",
        "re-encrypt stored runs with the first key of DURABLE_SWARM_ENCRYPTION_KEY "
        "(in batches; safe while workers run; run it again to resume)",
    )
    rotate.add_argument(
        "--batch-size",
        type=_count,
        default=500,
        metavar="N",
        help="rows re-encrypted per transaction (default: 500)",
    )


def _add_retention(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    retention = commands.add_parser(
        "retention",
        help="the retention policies in force, what they deleted and what is due",
        description="Finished runs past their age are deleted by the processes given a policy "
        "(workers with --retention, DurableSwarm(retention=...), DURABLE_SWARM_RETENTION). "
        "Runs in flight are never deleted.",
    )
    sub = retention.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(handler=RETENTION_HANDLERS[name])
        parser.add_argument(
            "--policy", type=policy_option, metavar="POLICY",
            help="e.g. succeeded=30d,failed=90d,cancelled=7d (default: the one the database's "
            "processes apply)",
        )  # fmt: skip
        parser.add_argument("--verbose", "-v", action="store_true", help="also list the run ids")
        return parser

    action(
        "show",
        "the policies in force, the processes applying them, the runs deleted so far, and "
        "what is due now",
    )
    apply = action("apply", "apply a policy once, now: delete the finished runs past their age")
    apply.add_argument(
        "--dry-run", action="store_true", help="report what would go; delete nothing"
    )
    apply.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def _add_model_options(parser: argparse.ArgumentParser, whose: str) -> None:
    parser.add_argument(
        "--model",
        metavar="NAME",
        help=f"the model every agent asks for (default: DURABLE_SWARM_MODEL, else {whose} own)",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 (default: "
        "OPENAI_BASE_URL, else OpenAI's API)",
    )


def _add_sessions(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list, read, clear and delete sessions (conversations carried across runs)",
        description="The sessions of the run database: conversations that runs with "
        "session=NAME carry over.",
    )
    sub = sessions.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(handler=SESSION_HANDLERS[name])
        return parser

    listing = action("list", "list sessions, most recently changed first")
    listing.add_argument(
        "--limit", type=_count, default=50, metavar="N", help="at most N (0: all; default 50)"
    )
    action("show", "a session's conversation (what its next run starts from)").add_argument(
        "name", metavar="NAME"
    )
    action("clear", "empty a session's conversation (refused while a run holds it)").add_argument(
        "name", metavar="NAME"
    )
    action("delete", "delete a session (refused while a run holds it)").add_argument(
        "name", metavar="NAME"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    common = _common(json_output=True)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Look at and steer durable-swarm runs, run the demos, chat with an agent.",
        parents=[_common(json_output=False)],
        epilog="Run `durable-swarm COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_runs(commands, common)
    _add_sessions(commands, common)
    _add_retention(commands, common)

    def command(
        name: str, handler: Handler, help_text: str, description: str
    ) -> argparse.ArgumentParser:
        """A command that takes the common options and is run by `handler`."""
        sub = commands.add_parser(name, parents=[common], help=help_text, description=description)
        sub.set_defaults(handler=handler)
        return sub

    demo = command(
        "demo",
        cmd_demo,
        f"run an example by name (default: {DEFAULT_DEMO}); --list lists them",
        "Run an example offline (or with a real model if OPENAI_API_KEY or OPENAI_BASE_URL is "
        "set). Arguments after NAME go to the example, e.g. "
        "`durable-swarm demo triage_agent --durable --say 'I want a refund'`.",
    )
    demo.add_argument("--list", action="store_true", help="list the demos")
    _add_model_options(demo, "the example's")
    demo.add_argument("name", nargs="?", metavar="NAME", help=f"default: {DEFAULT_DEMO}")
    demo.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="for the example")

    chat = command(
        "chat",
        _cmd_chat,
        "chat with an agent in the terminal; every turn is a durable run",
        "Import MODULE (a dotted name or a .py file) and chat with its AGENT; every turn is a "
        "durable run. Needs a model: OPENAI_API_KEY, or OPENAI_BASE_URL.",
    )
    chat.add_argument("target", metavar="MODULE:AGENT")
    chat.add_argument("--stream", action="store_true", help="print answers as they arrive")
    _add_model_options(chat, "the agents'")
    chat.add_argument("--context", metavar="JSON", help="initial context_variables (an object)")
    chat.add_argument(
        "--session",
        metavar="NAME",
        help="continue the session NAME (made if new): every turn is a run of it, and the "
        "conversation carries over to the next chat with the same NAME",
    )
    chat.add_argument(
        "--compact-at",
        type=_positive_int,
        metavar="TOKENS",
        help="summarize older turns once the conversation would pass TOKENS (estimated)",
    )
    add_budget_options(chat, "each run (turn or session) stops once it reaches this budget")

    worker = command(
        "worker",
        _cmd_worker,
        "serve runs from a queue (PostgreSQL; several workers share one database)",
        "Import MODULE (a DurableSwarm, its model client, or just the module that defines the "
        "agents) and run the runs that thin clients put on QUEUE, at most N at a time. Runs of a "
        "worker that died are finished by a live one.",
    )
    worker.add_argument("target", metavar="MODULE[:ATTR]")
    worker.add_argument("--queue", default=DEFAULT_QUEUE, help=f"default: {DEFAULT_QUEUE}")
    worker.add_argument(
        "--concurrency", type=_count, default=DEFAULT_CONCURRENCY, metavar="N",
        help=f"runs at a time (default: {DEFAULT_CONCURRENCY})",
    )  # fmt: skip
    worker.add_argument(
        "--poll-interval", type=_positive, default=0.5, metavar="SECONDS",
        help="seconds between looks at the queue when idle (default: 0.5)",
    )  # fmt: skip
    worker.add_argument(
        "--busy-poll-interval", type=_positive, default=DEFAULT_BUSY_POLL_INTERVAL,
        metavar="SECONDS",
        help="the shortest interval between looks while runs wait for slots: a full worker "
        "has its queue looked at every twentieth of its runs' time, never more often than "
        f"this (default: {DEFAULT_BUSY_POLL_INTERVAL:g})",
    )  # fmt: skip
    worker.add_argument("--executor-id", help="this worker's name (default: host, pid, random)")
    worker.add_argument(
        "--on-executor-id-taken", choices=["error", "fresh", "wait"], default=None,
        help="when a live process holds --executor-id: refuse to start (error), take a fresh "
        "id (fresh) or start once it has stopped (wait) (default: "
        "$DURABLE_SWARM_ON_EXECUTOR_ID_TAKEN, else error)",
    )  # fmt: skip
    worker.add_argument(
        "--heartbeat-interval", type=float, metavar="SECONDS",
        help="seconds between heartbeats (default: $DURABLE_SWARM_HEARTBEAT_INTERVAL, else 5)",
    )  # fmt: skip
    worker.add_argument(
        "--dead-after", type=float, metavar="SECONDS",
        help="seconds without a heartbeat before a process counts as dead and its runs are "
        "taken over (default: $DURABLE_SWARM_DEAD_AFTER, else 6 heartbeats)",
    )  # fmt: skip
    worker.add_argument(
        "--shutdown-grace", type=_non_negative, default=DEFAULT_SHUTDOWN_GRACE, metavar="SECONDS",
        help="seconds to stop in once asked (SIGTERM, Ctrl-C): it takes no more runs and lets "
        "the steps running here finish; past them, with a step still running or the database "
        "unreachable, it exits with status 1 and names the steps it leaves, whose runs are "
        "taken over once it is gone; set it above your longest tool (default: "
        f"{DEFAULT_SHUTDOWN_GRACE:g})",
    )  # fmt: skip
    worker.add_argument(
        "--retention", metavar="POLICY",
        help="delete finished runs past their age in the background, e.g. "
        "succeeded=30d,failed=90d,cancelled=7d (default: the DurableSwarm's, else "
        "$DURABLE_SWARM_RETENTION, else keep every run)",
    )  # fmt: skip
    worker.add_argument(
        "--retention-batch-size", type=_positive_int, metavar="N",
        help="top-level runs deleted per batch (default: 100)",
    )  # fmt: skip
    worker.add_argument(
        "--retention-interval", metavar="DURATION",
        help="time between sweeps, e.g. 60s, 5m (default: 60s)",
    )  # fmt: skip
    add_budget_options(worker, "the budget of runs whose client gave none")
    worker.add_argument(
        "--limit", action="append", metavar="KEY:rpm=N,tpm=N,concurrent=N",
        help="a model's limits, shared by every process on the database (KEY: a model name, "
        "a base URL or '*'; window=SECONDS counts them over another window than a minute); "
        "repeat for several models (default: $DURABLE_SWARM_MODEL_LIMITS)",
    )  # fmt: skip

    serve = command(
        "serve",
        _cmd_serve,
        "the web console and HTTP API (needs the 'web' extra)",
        "Serve the web console and HTTP API on the run database: see runs live, answer "
        "questions, approve tool calls. It never runs a run itself; workers do. Binding to an "
        "address other than loopback needs a token.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="default: 8000")
    serve.add_argument(
        "--token",
        default=os.environ.get("DURABLE_SWARM_TOKEN") or None,
        help="require 'Authorization: Bearer T' (or a login) on every request (default: "
        "DURABLE_SWARM_TOKEN, else a random token made at start and printed in a link to open)",
    )
    serve.add_argument(
        "--no-token",
        action="store_true",
        help="no token at all (loopback only): any process on this machine can read and steer runs",
    )
    serve.add_argument(
        "--max-streams", type=_positive_int, metavar="N",
        help="live event streams open at once, in all (default: 256; past it: 503)",
    )  # fmt: skip
    serve.add_argument(
        "--max-streams-per-client", type=_positive_int, metavar="N",
        help="live event streams open at once from one client address (default: 32; past "
        "it: 429)",
    )  # fmt: skip

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or tcsh)",
        description="Print the tab-completion script for SHELL. Install it with e.g. "
        "`durable-swarm completion bash > ~/.local/share/bash-completion/completions/"
        "durable-swarm`, or for zsh `durable-swarm completion zsh > ~/.zfunc/_durable-swarm` "
        "(with ~/.zfunc on $fpath).",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"), metavar="SHELL")
    completion.set_defaults(handler=_cmd_completion)
    return parser


def _cmd_serve(args: argparse.Namespace, style: Style) -> int:
    """`serve`: the web console until Ctrl-C."""
    try:
        from .web import check_bind, serve
    except ImportError as e:
        raise CliError(str(e)) from e
    if args.no_token and args.token:
        raise CliError(
            "--no-token and a token (--token, or DURABLE_SWARM_TOKEN) were both given: choose one.",
            status=2,
        )
    try:
        check_bind(args.host, args.token)
    except DurableSwarmError as e:
        raise CliError(str(e), status=2) from e
    url = getattr(args, "database_url", None)
    caps = {
        name: value
        for name in ("max_streams", "max_streams_per_client")
        if (value := getattr(args, name)) is not None
    }
    serve(url, host=args.host, port=args.port, token=args.token, no_token=args.no_token, **caps)
    return 0


def _cmd_completion(args: argparse.Namespace, style: Style) -> int:
    """`completion`: the shell's completion script for this command, made by shtab from the
    argument parser (so it always matches the commands and options)."""
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0


def _cmd_chat(args: argparse.Namespace, style: Style) -> int:
    """`chat`: see `_cli._chat.cmd_chat`."""
    from ._cli._chat import cmd_chat

    return cmd_chat(args, style)


def _cmd_worker(args: argparse.Namespace, style: Style) -> int:
    """`worker`: serve a queue until SIGTERM or Ctrl-C."""
    from .durable import run_worker
    from .durable._workflow import HOST

    HOST.default_budget = budget_of(args) or HOST.default_budget
    retention = _worker_retention(args)
    run_worker(
        args.target,
        queue=args.queue,
        concurrency=args.concurrency,
        database_url=getattr(args, "database_url", None),
        executor_id=args.executor_id,
        poll_interval=args.poll_interval,
        busy_poll_interval=args.busy_poll_interval,
        heartbeat_interval=args.heartbeat_interval,
        dead_after=args.dead_after,
        shutdown_grace=args.shutdown_grace,
        on_executor_id_taken=args.on_executor_id_taken,
        limits="; ".join(args.limit) if args.limit else None,
        retention=retention,
    )
    return 0


def _worker_retention(args: argparse.Namespace) -> Retention | None:
    """The worker's policy from --retention (else $DURABLE_SWARM_RETENTION) and the batch size
    and interval options; None when no policy is given (the DurableSwarm's then, if any)."""
    from .durable._retention import Retention

    text = args.retention
    pace = {
        key: value
        for key, value in (
            ("batch_size", args.retention_batch_size),
            ("interval", args.retention_interval),
        )
        if value is not None
    }
    if text is None:
        if not pace:
            return None
        text = os.environ.get("DURABLE_SWARM_RETENTION", "")
        if not text.strip():
            raise CliError(
                "--retention-batch-size and --retention-interval need a policy: give "
                "--retention succeeded=30d,... (or set DURABLE_SWARM_RETENTION).",
                status=2,
            )
    try:
        policy = Retention.of(text)
        assert policy is not None
        if pace:
            policy = Retention(
                policy.succeeded,
                policy.failed,
                policy.cancelled,
                batch_size=pace.get("batch_size", policy.batch_size),
                interval=pace.get("interval", policy.interval),
            )
    except DurableSwarmError as e:
        raise CliError(f"--retention: {e}", status=2) from e
    return policy


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with `argv` (default: the process's arguments); return the exit status."""
    args = build_parser().parse_args(argv)
    style = Style(use_color(sys.stdout, getattr(args, "no_color", False)))
    try:
        return int(args.handler(args, style) or 0)
    except CliError as e:
        print(f"{PROG}: error: {clean(e, lines=True)}", file=sys.stderr)
        return e.status
    except DurableSwarmError as e:
        print(f"{PROG}: error: {clean(e, lines=True)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`durable-swarm runs list | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if os.environ.get("DURABLE_SWARM_DEBUG"):
            raise
        print(
            f"{PROG}: error: unexpected {type(e).__name__}: {clean(e, lines=True)} "
            "(set DURABLE_SWARM_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
