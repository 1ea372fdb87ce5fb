"""Shared fixtures: `make_swarm` builds the Swarm-like object every behavioural test runs on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import durable_swarm

# Every implementation the behavioural tests (tests/core) must hold for: name -> client -> swarm.
SWARM_IMPLEMENTATIONS: dict[str, Callable[[Any], Any]] = {
    "memory": lambda client: durable_swarm.Swarm(client=client),
}


@pytest.fixture(params=sorted(SWARM_IMPLEMENTATIONS))
def make_swarm(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """A factory `client -> Swarm-like object` with the same `run` (and `arun`) as Swarm's."""
    return SWARM_IMPLEMENTATIONS[request.param]
