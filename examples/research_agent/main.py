"""Research agent: plans, has a sub-agent search a small library, another write the report, and
saves it to a file in its workspace. Durable by default.

The researcher is made with `create_durable_agent` (durable_swarm.planning): it writes a plan
(a todo list), asks who the report is for, delegates the search to `Searcher` and the writing to
`Writer` (each a child run of its own), and saves `report.md` with file tools that cannot leave
the workspace. The plan's progress is printed as the run goes, read from the run's log.

Run: `python examples/research_agent/main.py` (it asks who the report is for), or
`python examples/research_agent/main.py "Write a report on water on the Moon." --say "my class"`.
Runs are stored in `durable_swarm.sqlite` in the working directory (or `--database-url`); see
them with `durable-swarm runs list`. Interrupted, it carries on when run again with the same
`--run-id`. `--in-memory` runs on plain `Swarm` instead.
"""

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import add_model_options, make_client

from durable_swarm import DurableSwarm, Swarm
from durable_swarm.planning import PLAN_KEY, render_plan
from research_agent.agents import build_researcher
from research_agent.offline_model import respond

DEFAULT_REQUEST = "Write a short report on how honeybees communicate."
NO_ANSWER = "No preference: use your judgement."


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("request", nargs="?", default=DEFAULT_REQUEST, help="what to research")
    parser.add_argument(
        "--workspace",
        default="research_workspace",
        help="the directory the agent's file tools are confined to; the report is saved there "
        "(default: ./research_workspace)",
    )
    parser.add_argument("--say", action="append", metavar="TEXT", help="answer to a question")
    parser.add_argument("--run-id", help="the durable run's id (again: carry on with that run)")
    parser.add_argument(
        "--database-url",
        help="where runs are stored (default: DURABLE_SWARM_DATABASE_URL, else "
        "durable_swarm.sqlite in the working directory)",
    )
    parser.add_argument("--in-memory", action="store_true", help="run on Swarm, not durably")
    parser.add_argument(
        "--offline",
        action="store_true",
        help="use the scripted model even if OPENAI_API_KEY or OPENAI_BASE_URL is set",
    )
    add_model_options(parser)
    return parser.parse_args(argv)


def answerer(say):
    """The person's answers: the `--say` lines, then the keyboard (end of input: no answer)."""
    lines = list(say or [])

    def answer(question):
        print(f"\n{question}")
        if lines:
            line = lines.pop(0)
            print(f"> {line}")
            return line
        try:
            return input("> ")
        except EOFError:
            print(f"> ({NO_ANSWER})")
            return NO_ANSWER

    return answer


def show_progress(plan, shown):
    """Print the plan the first time, then only the items that changed."""
    lines = render_plan(plan).splitlines()
    if not shown:
        print("\nPlan:\n" + "\n".join(f"  {line}" for line in lines))
    else:
        old = render_plan(shown).splitlines()
        for number, line in enumerate(lines):
            if number >= len(old) or old[number] != line:
                print(f"  {line}")


def run_durably(client, model, researcher, messages, args, answer):
    """Start (or attach to) the durable run, answer its questions, show its plan as it goes."""
    swarm = DurableSwarm(client, model=model, database_url=args.database_url)
    run_id = args.run_id or f"research-{uuid.uuid4().hex[:8]}"
    print(
        f"(durable: run {run_id} in {swarm.database_url}; if interrupted, run again with "
        f"--run-id {run_id} to carry on)"
    )
    handle = swarm.start(researcher, messages, run_id=run_id)
    shown, answered = None, set()
    while True:
        info = swarm.get_run(run_id)
        plan = info.context_variables.get(PLAN_KEY)
        if plan and plan != shown:
            show_progress(plan, shown)
            shown = plan
        waiting = info.waiting_for or {}
        key = (waiting.get("tool_call") or {}).get("id") or waiting.get("prompt")
        if info.status == "waiting_for_input" and key not in answered:
            answered.add(key)
            swarm.send_input(run_id, answer(waiting.get("prompt", "")))
        elif info.status in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    response = handle.result()
    print(
        f"\n(see the whole run with `durable-swarm runs show {run_id}`; its sub-agents' runs "
        f"are {', '.join(info.children) or 'none'})"
    )
    return response


def main(argv=None):
    """Research the request and save a report in the workspace."""
    args = parse_args(argv)
    workspace = Path(args.workspace).resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    client = make_client(respond, offline=args.offline, base_url=args.base_url, model=args.model)
    model = None if args.offline else args.model
    researcher = build_researcher(workspace)
    messages = [{"role": "user", "content": args.request}]
    answer = answerer(args.say)
    report = workspace / "report.md"
    before = report.stat().st_mtime_ns if report.exists() else None
    print(f"Request: {args.request}")
    if args.in_memory:
        response = Swarm(client, model=model, input_fn=answer).run(researcher, messages)
        if response.context_variables.get(PLAN_KEY):
            show_progress(response.context_variables[PLAN_KEY], None)
    else:
        response = run_durably(client, model, researcher, messages, args, answer)
    print(f"\n{response.messages[-1]['content']}")
    if report.exists() and report.stat().st_mtime_ns != before:
        print(f"\n--- {report} ---\n{report.read_text()}")


if __name__ == "__main__":
    main()
