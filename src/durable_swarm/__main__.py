"""`python -m durable_swarm`: the `durable-swarm` command."""

import sys

from .cli import main

sys.exit(main())
