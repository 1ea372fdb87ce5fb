"""The web console and HTTP API: `durable-swarm serve`, or `create_app` in your own server.

Needs the `web` extra (`pip install "durable-swarm[web]"`: FastAPI, uvicorn, Jinja2 and the
Prometheus client). The console is built on the thin `DurableClient`: it never runs or recovers
a run and never creates a database; workers (or any `DurableSwarm`) run the runs it shows.
"""

from __future__ import annotations

try:
    from ._app import create_app
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"The web console needs the 'web' extra ({e.name} is missing): "
        'pip install "durable-swarm[web]"'
    ) from e
from ._serve import check_bind, serve

__all__ = ["check_bind", "create_app", "serve"]
