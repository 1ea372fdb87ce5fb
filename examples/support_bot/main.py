"""Support bot: a front desk agent and a help center agent that searches articles (SQLite FTS5).

The help center's search runs embedded, with no vector server: see help_center.py for why FTS5.
Run: `python examples/support_bot/main.py` and chat (Ctrl-D ends), or non-interactively:
`python examples/support_bot/main.py --say "How do I rotate my API key?"`.
Add `--durable` to run every turn on DurableSwarm.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, make_swarm, parse_args

from durable_swarm.repl import run_demo_loop
from support_bot.agents import user_interface_agent
from support_bot.offline_model import respond


def main(argv=None):
    """Chat with the support bot's front desk."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True)
    swarm = make_swarm(respond, args)
    run_demo_loop(user_interface_agent, stream=args.stream, swarm=swarm, input_fn=input_lines(args))


if __name__ == "__main__":
    main()
