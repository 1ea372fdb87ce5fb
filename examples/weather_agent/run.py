"""Weather agent: answers weather questions with a function, streaming its answers.

Run: `python examples/weather_agent/run.py` and chat (Ctrl-D ends), or non-interactively:
`python examples/weather_agent/run.py --say "What's the weather in Paris?"`.
Add `--durable` to run every turn on DurableSwarm.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, make_swarm, parse_args

from durable_swarm.repl import run_demo_loop
from weather_agent.agents import weather_agent
from weather_agent.offline_model import respond


def main(argv=None):
    """Chat with the weather agent (streamed)."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True, stream=True)
    swarm = make_swarm(respond, args)
    run_demo_loop(weather_agent, stream=args.stream, swarm=swarm, input_fn=input_lines(args))


if __name__ == "__main__":
    main()
