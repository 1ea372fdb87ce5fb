"""Triage agent: routes the user to sales or refunds; each can send them back.

Run: `python examples/triage_agent/run.py` and chat (Ctrl-D ends), or non-interactively:
`python examples/triage_agent/run.py --say "I want a refund for item_42" --say "Too expensive"`.
Add `--durable` to run every turn on DurableSwarm.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, make_swarm, parse_args

from durable_swarm.repl import run_demo_loop
from triage_agent.agents import triage_agent
from triage_agent.offline_model import respond


def main(argv=None):
    """Chat with the triage agent."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True)
    swarm = make_swarm(respond, args)
    run_demo_loop(triage_agent, stream=args.stream, swarm=swarm, input_fn=input_lines(args))


if __name__ == "__main__":
    main()
