"""The worker and thin-client names `durable_swarm.durable` exports."""

from __future__ import annotations

import durable_swarm.durable as durable

WORKER_AND_CLIENT_NAMES = {
    "DEFAULT_CONCURRENCY",
    "DEFAULT_QUEUE",
    "PROCESSES_TABLE",
    "ClientRunHandle",
    "DurableClient",
    "Worker",
    "run_worker",
}


def test_worker_and_client_names_are_exported() -> None:
    assert set(durable.__all__) >= WORKER_AND_CLIENT_NAMES
    for name in durable.__all__:
        assert getattr(durable, name) is not None
    for name in ("ClientRunHandle", "DurableClient", "Worker", "run_worker"):
        assert getattr(durable, name).__doc__
