"""Shared fixtures: `make_swarm` builds the Swarm-like object every behavioural test runs on; the
database fixtures of every durable test (SQLite and PostgreSQL) come from `_support.db`.

`_support` is importable because pytest (default "prepend" import mode) puts `tests/` on
`sys.path` for this conftest, which has no package above it.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import durable_swarm
from _support.db import (  # noqa: F401  (the fixtures, for every test directory; helpers)
    backend,
    database_url,
    drop_database,
    durable_swarm_factory,
    make_database_url,
    new_database_name,
    postgres_base_url,
    run_id,
    shutdown_settled,
    use_database,
    with_database,
)
from durable_swarm.durable import shutdown

# Every implementation the behavioural tests (tests/core) must hold for: name -> (client,
# database URL) -> swarm. The durable ones run on a fresh database per module (see `swarm_kind`).
SWARM_IMPLEMENTATIONS: dict[str, Callable[[Any, str | None], Any]] = {
    "memory": lambda client, url: durable_swarm.Swarm(client=client),
    "durable-sqlite": lambda client, url: durable_swarm.DurableSwarm(client, database_url=url),
    "durable-postgres": lambda client, url: durable_swarm.DurableSwarm(client, database_url=url),
}

MEMORY_ONLY = "memory_only"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MEMORY_ONLY}(reason): a behavioural test `make_swarm` runs on the in-memory Swarm only",
    )


# How long the test process may take to exit once the session is over.
EXIT_GRACE_SECONDS = 120.0


def pytest_unconfigure(config: pytest.Config) -> None:
    """Make a test process that cannot exit fail with the stacks of its threads instead of
    hanging until CI gives up: at exit the interpreter waits for every executor thread, and one
    a test left blocked (e.g. retrying a connection to a database already dropped) would hold it
    forever. The watchdog is a daemon thread, so a normal exit ends it."""

    def watchdog() -> None:
        time.sleep(EXIT_GRACE_SECONDS)
        sys.stderr.write(
            f"\nThe test process did not exit within {EXIT_GRACE_SECONDS:g} s of the end of the "
            "session: a thread a test left running holds it (the stacks of every thread "
            "follow). Find the test that started it and let it end before its teardown.\n"
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(1)

    threading.Thread(target=watchdog, name="test-exit-watchdog", daemon=True).start()


@pytest.fixture(
    scope="module",
    params=[
        "memory",
        "durable-sqlite",
        pytest.param("durable-postgres", marks=pytest.mark.postgres),
    ],
)
def swarm_kind(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str | None]]:
    """`(implementation, database URL)`: module-scoped, so pytest groups the tests by it and DBOS
    switches databases once per module and implementation, not per test."""
    kind = str(request.param)
    if kind == "memory":
        yield kind, None
        return
    if kind == "durable-sqlite":
        yield kind, str(tmp_path_factory.mktemp("swarm-db") / "runs.sqlite")
        shutdown()
        return
    base = request.getfixturevalue("postgres_base_url")
    name = new_database_name("dswarm_spec", "runs")
    yield kind, with_database(base, name)
    shutdown_settled()
    drop_database(base, name)


@pytest.fixture
def make_swarm(
    swarm_kind: tuple[str, str | None], request: pytest.FixtureRequest
) -> Callable[[Any], Any]:
    """A factory `client -> Swarm-like object` with the same `run` (and `arun`) as Swarm's."""
    kind, url = swarm_kind
    if url is not None:
        marker = request.node.get_closest_marker(MEMORY_ONLY)
        if marker is not None:
            pytest.skip(f"in-memory Swarm only: {marker.args[0] if marker.args else ''}")
        use_database(url)
    implementation = SWARM_IMPLEMENTATIONS[kind]
    return lambda client: implementation(client, url)
