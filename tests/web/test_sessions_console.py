"""The console's sessions: the API (`/api/sessions`, one session, clear, delete: 404 for an
unknown one, 409 while a run holds it, cross-site posts refused) and the pages in a real
headless Chromium (list, one session's conversation, clear and delete). On SQLite and
PostgreSQL; sessions made by `tests/sessions/_app.py` in a child process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli._helpers import run_script
from durable_swarm.durable._sessions import SessionStore

from .conftest import Console
from .test_browser import WAIT_MS, Page, browser  # noqa: F401  (the browser fixture)

APP = Path(__file__).resolve().parents[1] / "sessions" / "_app.py"


@pytest.fixture(scope="module")
def sessions_url(database_url: str) -> str:
    assert run_script(APP, database_url) == {"done": True}
    return database_url if "://" in database_url else f"sqlite:///{database_url}"


@pytest.fixture(scope="module")
def sessions_console(
    sessions_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    child = Console(sessions_url, tmp_path_factory.mktemp("sessions-console") / "console.log")
    yield child
    child.stop()


def test_the_api_lists_reads_clears_and_deletes_sessions(sessions_console, sessions_url):
    http = sessions_console.http
    listed = {s["name"]: s for s in http.get("/api/sessions").json()["sessions"]}
    assert {"support", "other"} <= set(listed)
    assert listed["support"]["message_count"] == 3 and listed["support"]["compacted"] is True
    assert "messages" not in listed["support"]
    one = http.get("/api/sessions/other").json()
    assert [m["content"] for m in one["messages"]] == ["hi", "noted: hi"]
    assert http.get("/api/sessions/nobody").status_code == 404
    assert "No session named 'nobody'" in http.get("/api/sessions/nobody").json()["error"]
    # a change from another site is refused
    refused = http.post("/api/sessions/other/clear", headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403
    assert len(http.get("/api/sessions/other").json()["messages"]) == 2
    # a session a live run holds is not cleared (409, naming the run)
    store = SessionStore(sessions_url, lambda run_id: "PENDING")
    store.claim("held", "run-holding-it")
    busy = http.post("/api/sessions/held/delete")
    assert busy.status_code == 409 and "run-holding-it" in busy.json()["error"]
    assert http.post("/api/sessions/other/clear").json() == {"session": "other", "cleared": True}
    assert http.get("/api/sessions/other").json()["messages"] == []
    assert http.post("/api/sessions/other/delete").json()["deleted"] is True
    assert http.get("/api/sessions/other").status_code == 404


@pytest.fixture
def tab(browser: Any, sessions_console: Console) -> Iterator[Page]:  # noqa: F811
    page = Page(browser, sessions_console)
    yield page
    page.context.close()
    assert page.errors == [], f"JavaScript errors: {page.errors}"


def test_the_sessions_pages_show_the_conversation_and_clear_it(tab: Page) -> None:
    page = tab.open("/sessions")
    row = page.wait_for_selector('tr[data-session="support"]')
    assert "compacted" in row.inner_text()
    page.click('a[href="/sessions/support"]')
    page.wait_for_selector("#messages li.msg")
    text = page.locator("#messages").inner_text()
    assert "THE-SUMMARY" in text and "any news?" in text
    assert page.locator('#facts a[href="/runs/support-3"]').count() == 1
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#clear")
    page.wait_for_function(
        "document.querySelector('#messages').innerText.includes('starts afresh')", timeout=WAIT_MS
    )
    page.click("#delete")
    page.wait_for_url("**/sessions", timeout=WAIT_MS)
    page.wait_for_selector("#sessions tbody tr")
    assert page.locator('tr[data-session="support"]').count() == 0
