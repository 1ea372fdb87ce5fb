"""A session chat that compacts: every line is its own run of one session, which carries the
conversation over; past `--compact-at` tokens the older turns are summarized.

Each `swarm.run(..., session=NAME)` starts from the session's messages and adds its own. With
`--durable` the session lives in the run database: run the script again and the conversation
goes on (`durable-swarm sessions show NAME`). Once the conversation would pass `--compact-at`
tokens (estimated), the older turns are summarized by a model call and the model sees the summary
plus the recent turns; every original message stays in the runs' logs.

Run: `python examples/session_chat.py` (add `--durable`, `--say TEXT` lines, `--compact-at N`).
"""

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/, for `_common`

from _common import input_lines, last_user_text, make_swarm, parse_args

from durable_swarm import Agent
from durable_swarm.compaction import SUMMARY_INSTRUCTIONS
from durable_swarm.testing import text

LINES = [
    "Hi! My name is Ada.",
    "I live in Lisbon.",
    "I like green tea.",
    "My order number is 4217.",
    "What do you know about me?",
]

agent = Agent(
    name="Concierge",
    instructions="You are a concierge. Remember what the customer tells you about themselves.",
)

FACT = re.compile(r"(?:my name is|i live in|i like|my order number is) ([^.!?]+)", re.IGNORECASE)


def facts(text_: str) -> list[str]:
    """The facts the customer stated in `text_` ("name is Ada", ...), in order."""
    return [m.group(0).rstrip() for m in FACT.finditer(text_)]


def offline_model(messages, tools):
    """The scripted model: summarizes by keeping the stated facts; answers from what it sees
    (the summary included), so a compacted conversation still knows them."""
    if messages[0]["content"] == SUMMARY_INSTRUCTIONS:
        kept = facts(messages[-1]["content"])
        return text("The customer said: " + "; ".join(kept) + "." if kept else "Small talk.")
    line = last_user_text(messages)
    if "know about me" in line:
        seen = " ".join(str(m.get("content") or "") for m in messages[1:] if m["role"] == "user")
        summaries = [m for m in messages[1:] if str(m.get("content", "")).startswith("[Summary")]
        known = list(dict.fromkeys(facts(seen)))
        via = " (some of it from the summary of our earlier talk)" if summaries else ""
        return text("You told me: " + "; ".join(known) + f"{via}.")
    return text("Noted, I will remember that.")


def options(argv):
    """This example's own options (`--session`, `--compact-at`), then the shared ones."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--session", default="demo-customer", help="the session's name")
    parser.add_argument(
        "--compact-at", type=int, default=90, help="summarize past this many tokens"
    )
    own, rest = parser.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest, interactive=True)
    args.session, args.compact_at = own.session, own.compact_at
    return args


def demo_lines(prompt):
    """Without --say: the demo's own lines, shown as if typed."""
    if not LINES_LEFT:
        raise EOFError
    line = LINES_LEFT.pop(0)
    print(f"{prompt}{line}")
    return line


LINES_LEFT: list[str] = []


def main(argv=None):
    """Chat line by line; each line is a run of the session."""
    args = options(sys.argv[1:] if argv is None else argv)
    swarm = make_swarm(offline_model, args)
    swarm.compact_at = args.compact_at  # the default budget of its runs
    LINES_LEFT[:] = LINES
    read = input_lines(args) or demo_lines
    compacted = False
    while True:
        try:
            line = read("User: ")
        except EOFError:
            break
        response = swarm.run(agent, [{"role": "user", "content": line}], session=args.session)
        print(f"{response.messages[-1].get('sender')}: {response.messages[-1]['content']}")
        session = swarm.get_session(args.session)
        if session.compacted and not compacted:
            print(
                f"(compacted: the session now keeps a summary + {len(session.messages) - 1} "
                "recent messages; the runs' logs keep every original)"
            )
        compacted = session.compacted
    session = swarm.get_session(args.session)
    first = str(session.messages[0]["content"]) if session.messages else ""
    starts = f", the first a summary: {first.splitlines()[-1]}" if session.compacted else ""
    print(f"(session {args.session}: {len(session.messages)} messages kept{starts})")


if __name__ == "__main__":
    main()
