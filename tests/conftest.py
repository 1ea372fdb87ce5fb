"""Shared fixtures: `make_swarm` builds the Swarm-like object every behavioural test runs on; the
database fixtures of every durable test (SQLite and PostgreSQL) come from `_support.db`.

`_support` is importable because pytest (default "prepend" import mode) puts `tests/` on
`sys.path` for this conftest, which has no package above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import durable_swarm
from _support.db import (  # noqa: F401  (fixtures, for every test directory)
    backend,
    database_url,
    durable_swarm_factory,
    make_database_url,
    postgres_base_url,
    run_id,
)

# Every implementation the behavioural tests (tests/core) must hold for: name -> client -> swarm.
SWARM_IMPLEMENTATIONS: dict[str, Callable[[Any], Any]] = {
    "memory": lambda client: durable_swarm.Swarm(client=client),
}


@pytest.fixture(params=sorted(SWARM_IMPLEMENTATIONS))
def make_swarm(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """A factory `client -> Swarm-like object` with the same `run` (and `arun`) as Swarm's."""
    return SWARM_IMPLEMENTATIONS[request.param]
