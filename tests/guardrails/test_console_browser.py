"""The console's run page in a real headless Chromium shows guardrail verdicts in the timeline:
a `guardrail` step per verdict, what it checked, `passed` or `tripped: <reason>` and a *tripped*
chip; on SQLite and PostgreSQL. Skips (or fails with DURABLE_SWARM_REQUIRE_BROWSER=1) as the
console's browser tests do (`tests/web/test_browser.py`, whose `browser` fixture it uses)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from _support.procs import wait_for
from durable_swarm.testing import FakeOpenAIServer
from web.test_browser import WAIT_MS, browser  # noqa: F401 (the fixture)

from ._refunds import refunder, reply


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def console(database_url: str, durable_swarm_factory: Any) -> Iterator[str]:
    """The console over this module's database (made by `durable_swarm_factory`), under
    uvicorn in this process: its base URL."""
    uvicorn = pytest.importorskip("uvicorn", reason="the console needs the 'web' extra")
    from durable_swarm.durable import DurableClient
    from durable_swarm.web import create_app

    client = DurableClient(database_url)
    config = uvicorn.Config(
        create_app(client, poll_interval=0.05), host="127.0.0.1", port=_free_port(),
        log_level="warning",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the console to start")
    yield f"http://127.0.0.1:{config.port}"
    server.should_exit = True
    thread.join(60)
    client.close()


def test_the_timeline_shows_each_verdict(
    browser: Any,  # noqa: F811 (the fixture imported above)
    console: str,
    durable_swarm_factory,
    run_id,
    work_dir,
) -> None:
    with FakeOpenAIServer(reply) as server:
        swarm = durable_swarm_factory(server.client())
        swarm.run(refunder, [{"role": "user", "content": "refund 500"}], run_id=run_id)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{console}/runs/{run_id}")
        page.wait_for_selector(".msg.final")
        steps = page.locator('#timeline li[data-kind="guardrail"]')
        assert steps.count() == 3
        texts = steps.evaluate_all("items => items.map(i => i.innerText)")
        assert "screen" in texts[0] and "input" in texts[0] and "passed" in texts[0]
        assert "limit" in texts[1] and "tool_call refund" in texts[1]
        assert "tripped: refunds over 100 need a manager" in texts[1]
        assert steps.nth(1).locator(".chip.bad").inner_text().lower() == "tripped"
        assert steps.nth(0).locator(".chip").count() == 0
        assert "polite" in texts[2] and "output" in texts[2]
        assert "blocked by guardrail limit" in page.locator("#messages").inner_text()
    finally:
        context.close()
    assert errors == []
