"""Personal shopper: triage, sales and refunds agents over a SQLite shop database.

Swarm's version could not run (it imported a helper that never existed); this one works. The
database of customers, products and purchases is created on the fly in a temporary directory.
Run: `python examples/personal_shopper/main.py` and chat (Ctrl-D ends), or non-interactively:
`python examples/personal_shopper/main.py --say "I want a refund" --say "user 1, item 11"`.
Add `--durable` to run every turn on DurableSwarm.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, make_swarm, parse_args

from durable_swarm.repl import run_demo_loop
from personal_shopper import database
from personal_shopper.agents import triage_agent
from personal_shopper.offline_model import respond


def main(argv=None):
    """Create the shop database, show it, and chat with the triage agent."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True)
    path = database.initialize_database()
    print(f"Shop database: {path}")
    for table in ("users", "products", "purchases"):
        database.preview_table(table)
    swarm = make_swarm(respond, args)
    run_demo_loop(triage_agent, stream=args.stream, swarm=swarm, input_fn=input_lines(args))


if __name__ == "__main__":
    main()
