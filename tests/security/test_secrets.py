"""A database password is never printed: not by a process that runs on the database (with every
log line on), not by the CLI reading it, not in errors about a database that cannot be reached.
PostgreSQL only (SQLite has no password); the server trusts any password, so the URL with one
works."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

import pytest

from _support.db import drop_database, new_database_name
from cli._helpers import TIMEOUT, child_env, cli_batch

pytestmark = pytest.mark.postgres

PASSWORD = "s3cret-pw-4711"
APP = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
from durable_swarm import Agent, DurableSwarm
from durable_swarm.testing import ScriptedClient, text
swarm = DurableSwarm(ScriptedClient([text("hello")]), database_url=sys.argv[1])
print(swarm.run(Agent(name="Secretive"), [{"role": "user", "content": "hi"}], run_id="r1")
      .messages[-1]["content"])
"""


def with_password(base: str, database: str, port: int | None = None) -> str:
    parts = urlsplit(base)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{parts.username or 'postgres'}:{PASSWORD}@{host}:{port or parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, f"/{database}", parts.query, parts.fragment))


@pytest.fixture
def secret_url(postgres_base_url):
    name = new_database_name("dswarm_secret", "pw")
    yield with_password(postgres_base_url, name)
    drop_database(postgres_base_url, name)


def test_the_password_is_never_printed(secret_url, postgres_base_url, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", APP, secret_url],
        env=child_env(DURABLE_SWARM_LOG_LEVEL="DEBUG"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "hello"
    assert len(done.stderr) > 0  # logging was on

    unreachable = with_password(postgres_base_url, "dswarm_nowhere", port=1)
    results = cli_batch(
        tmp_path,
        secret_url,
        ["runs", "list"],
        ["runs", "list", "--json"],
        ["runs", "show", "r1"],
        ["runs", "show", "no-such-run"],
        ["--database-url", unreachable, "runs", "list"],
    )
    outputs = [done.stdout, done.stderr] + [r.stdout + r.stderr for r in results]
    for output in outputs:
        assert PASSWORD not in output, output
    assert json.loads(results[1].stdout)["database"].startswith("postgresql://postgres:***@")
    assert results[3].status != 0 and "postgres:***@" in results[3].stderr
    assert results[4].status != 0 and "postgres:***@" in results[4].stderr
