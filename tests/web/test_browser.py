"""The console's pages in a real headless Chromium (Debian's `chromium`, driven by Playwright),
against real runs on SQLite and PostgreSQL: the runs list, a run page with tool calls and the
final answer, a person answering a question and approving a tool call from the pages and seeing
the runs finish without reloading, the approvals inbox, and no JavaScript errors on the way.

Without Chromium or Playwright these tests skip and say why; with
DURABLE_SWARM_REQUIRE_BROWSER=1 (CI) they fail instead. DURABLE_SWARM_UPDATE_SCREENSHOTS=1 also
writes the run page's screenshot to docs/console-run.png (the README shows it)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Console

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REQUIRE_ENV = "DURABLE_SWARM_REQUIRE_BROWSER"
DOCS = Path(__file__).resolve().parents[2] / "docs"
WAIT_MS = 60_000  # generous: a small, shared machine


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(
            f"The browser tests are required ({REQUIRE_ENV}=1) but {reason}.", pytrace=False
        )
    pytest.skip(f"Browser tests skipped: {reason}.")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium under Playwright (skips, or fails in CI, when missing)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(
            f"Chromium is not at {CHROMIUM} (install Debian's package: apt-get install -y "
            "chromium; make test does it when run as root)"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """A browser page on the console that records JavaScript errors."""

    def __init__(self, browser: Any, console: Console, width: int = 1280) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.base = console.base
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        self.page.evaluate("window.__notReloaded = true")
        return self.page

    def not_reloaded(self) -> bool:
        return bool(self.page.evaluate("window.__notReloaded === true"))


@pytest.fixture
def tab(browser: Any, console: Console) -> Iterator[Page]:
    page = Page(browser, console)
    yield page
    page.context.close()
    assert page.errors == [], f"JavaScript errors: {page.errors}"


def test_the_runs_list_shows_the_runs_and_filters_them(tab: Page, batch: str) -> None:
    page = tab.open(f"/?q={batch}")
    for name in ("ok", "ask", "pay", "sub"):
        page.wait_for_selector(f'tr[data-run-id="{batch}-{name}"]')
    row = page.locator(f'tr[data-run-id="{batch}-pay"]')
    assert "waiting for approval" in row.inner_text()
    assert "Support" in row.inner_text()
    assert page.locator("#range").inner_text() == "1–4 of 4"

    page.select_option("select[name=status]", "succeeded")
    page.wait_for_function(
        "document.querySelectorAll('tr[data-run-id]').length === 2", timeout=WAIT_MS
    )
    shown = page.locator("tr[data-run-id]").evaluate_all("rows => rows.map(r => r.dataset.runId)")
    assert sorted(shown) == sorted([f"{batch}-ok", f"{batch}-sub"])
    assert "status=succeeded" in page.url

    page.click(f'a[href="/runs/{batch}-ok"]')
    page.wait_for_selector("#timeline li.step")
    assert page.url.endswith(f"/runs/{batch}-ok")


def test_a_run_page_shows_the_tool_calls_and_the_final_answer(tab: Page, batch: str) -> None:
    page = tab.open(f"/runs/{batch}-ok")
    final = page.wait_for_selector(".msg.final")
    assert "Done: Sunny and 21°C in Paris" in final.inner_text()
    tool = page.locator('#timeline li[data-kind="tool"]')
    assert "get_weather" in tool.inner_text() and "Paris" in tool.inner_text()
    assert page.locator('#timeline li[data-kind="model"]').count() == 2
    assert page.locator("#status").inner_text() == "succeeded"
    assert page.locator("#wait-input").is_hidden() and page.locator("#wait-approval").is_hidden()
    cost = tab.page.evaluate(
        f"fetch('/api/runs/{batch}-ok').then(r => r.json()).then(r => r.cost_usd)"
    )
    assert f"${cost:.4f}" in page.locator("#facts").inner_text()

    parent = tab.open(f"/runs/{batch}-sub")
    parent.wait_for_selector(f'#facts a[href="/runs/{batch}-sub-sub1"]')
    parent.click(f'#facts a[href="/runs/{batch}-sub-sub1"]')
    parent.wait_for_selector(f'#facts a[href="/runs/{batch}-sub"]')  # linked back to its parent
    assert "Octopuses have three hearts." in parent.wait_for_selector(".msg.final").inner_text()


def test_a_person_answers_and_approves_from_the_pages_and_sees_the_runs_finish(
    tab: Page, batch: str
) -> None:
    page = tab.open(f"/runs/{batch}-ask")
    page.wait_for_selector("#wait-input:not([hidden])")
    assert page.locator("#prompt").inner_text() == "What is your order number?"
    page.fill("#reply", "A-17")
    page.click("#reply-form button[type=submit]")
    final = page.wait_for_selector(".msg.final")
    assert "Thanks! Order A-17 is on its way." in final.inner_text()
    assert page.locator("#status").inner_text() == "succeeded"
    assert page.locator("#wait-input").is_hidden()
    assert tab.not_reloaded()

    page = tab.open(f"/runs/{batch}-pay")
    page.wait_for_selector("#wait-approval:not([hidden])")
    assert page.locator("#approval-tool").inner_text() == "refund"
    shown = page.locator("#approval-args").inner_text()
    assert '"amount": 42' in shown and '"order": "A-17"' in shown
    assert re.fullmatch(r"\d+", page.locator("#approval-count").inner_text())
    page.click("#approve")
    final = page.wait_for_selector(".msg.final")
    assert "Done: Refunded $42 on order A-17" in final.inner_text()
    assert page.locator("#wait-approval").is_hidden()
    assert tab.not_reloaded()
    page.locator('#timeline li[data-kind="tool"]').filter(has_text="refund").wait_for()
    _screenshot(page)


def test_the_run_page_applies_events_without_reading_the_run_again(tab: Page, batch: str) -> None:
    """While a run moves, its page reads the run once at the start and then only when a step
    changes earlier messages (here the person's decision) and at the end: each step the stream
    sends is appended to the timeline, whose earlier entries stay as they were drawn."""
    path = f"/api/runs/{batch}-pay"
    reads: list[str] = []
    tab.page.on("request", lambda r: reads.append(r.url) if r.url.endswith(path) else None)
    page = tab.open(f"/runs/{batch}-pay")
    page.wait_for_selector("#wait-approval:not([hidden])")
    page.wait_for_selector("#live:not([hidden])")
    drawn = page.evaluate(
        "() => { window.__drawn = [...document.querySelectorAll('#timeline li.step')];"
        " return window.__drawn.length; }"
    )
    assert drawn >= 1 and len(reads) == 1
    page.click("#approve")
    page.wait_for_selector(".msg.final")
    page.locator('#timeline li[data-kind="tool"]').filter(has_text="refund").wait_for()
    kept = page.evaluate("() => window.__drawn.every((node) => node.isConnected)")
    assert kept, "the timeline was drawn again instead of appended to"
    steps = page.locator("#timeline li.step").evaluate_all("s => s.map(n => +n.dataset.step)")
    assert steps == sorted(steps) and len(steps) > drawn
    assert page.locator("#status").inner_text() == "succeeded"
    assert page.locator("#wait-approval").is_hidden() and page.locator("#live").is_hidden()
    assert len(reads) <= 3, f"the run was read {len(reads)} times"  # start, decision, end
    assert tab.not_reloaded()


def test_the_runs_list_reads_nothing_again_while_nothing_changes(tab: Page, batch: str) -> None:
    answers: list[int] = []
    tab.page.on("response", lambda r: answers.append(r.status) if "/api/runs?" in r.url else None)
    page = tab.open(f"/?q={batch}")
    page.wait_for_selector(f'tr[data-run-id="{batch}-ok"]')
    for _ in range(2):  # polls every 2 s: the same page, answered 304 with no body
        page.wait_for_event("response", lambda r: "/api/runs?" in r.url and r.status == 304)
    assert answers[0] == 200 and 304 in answers
    assert page.locator("tr[data-run-id]").count() == 4


def test_the_link_serve_prints_logs_the_browser_in(browser: Any, token_console: Console) -> None:
    visitor = Page(browser, token_console)
    try:
        page = visitor.page
        page.goto(token_console.base + "/")
        assert "/login" in page.url  # no token, no console
        page.goto(token_console.link())
        page.wait_for_selector("tr[data-run-id], #runs-body td")
        assert page.url == token_console.base + "/"  # the token left the address bar
        cookies = visitor.context.cookies()
        assert any(c["name"] == "durable_swarm_session" and c["httpOnly"] for c in cookies)
    finally:
        visitor.context.close()
    assert visitor.errors == []


def _screenshot(page: Any) -> None:
    """The run page as the README shows it."""
    page.wait_for_function(
        "!document.querySelector('#live') || document.querySelector('#live').hidden"
    )
    target = DOCS / "console-run.png"
    if os.environ.get("DURABLE_SWARM_UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        page.screenshot(path=str(target), full_page=True)
    else:
        assert page.screenshot(full_page=True)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_approvals_inbox_approves_and_rejects_with_the_exact_arguments(
    tab: Page, batch: str, host: Any, console: Console
) -> None:
    from .conftest import wait_status

    page = tab.open("/approvals")
    card = page.wait_for_selector(f'li.approval[data-run-id="{batch}-pay"]')
    assert '"order": "A-17"' in card.inner_text() and "refund" in card.inner_text()
    card.query_selector("input").fill("not this one")
    card.query_selector("button.danger").click()
    page.wait_for_selector(f'li.approval[data-run-id="{batch}-pay"]', state="detached")
    assert "Rejected refund" in page.locator("#notice").inner_text()
    run = wait_status(console, host, f"{batch}-pay", "succeeded")
    assert "not this one" in run["messages"][-1]["content"]


def test_the_pages_are_readable_on_a_phone(browser: Any, console: Console, batch: str) -> None:
    phone = Page(browser, console, width=390)
    try:
        page = phone.open(f"/runs/{batch}-pay")
        page.wait_for_selector("#wait-approval:not([hidden])")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the run page is {width}px wide on a 390px screen"
        assert page.locator("#approve").is_visible()
        page = phone.open("/")
        page.wait_for_selector("tr[data-run-id]")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        phone.context.close()
    assert phone.errors == []


def test_arguments_show_as_written_and_control_characters_as_escapes(tab: Page) -> None:
    """What an approval shows is the text the call was made with (JSON.parse would round a
    large number), and a right-to-left override cannot reorder it."""
    tab.open("/approvals")
    shown = tab.page.evaluate(
        """() => {
            const args = '{"to":"bob\\u202emoc.live@",'
                + '"amount":12345678901234567890,"n":1e400,"e":{}}';
            const box = el("pre", { text: pretty(args) });
            return box.textContent;
        }"""
    )
    assert shown == (
        '{\n  "to": "bob\\u202emoc.live@",\n  "amount": 12345678901234567890,\n  "n": 1e400,\n'
        '  "e": {}\n}'
    )
    assert tab.page.evaluate("() => pretty('not json, {')") == "not json, {"
    hidden = tab.page.evaluate("() => visible('a\\u200bb\\ufeffc\\u{e0041}d\\u200de')")
    assert hidden == "a\\u200bb\\ufeffc\\u{e0041}d\u200de"  # a joiner stays: emoji need it
