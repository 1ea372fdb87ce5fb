"""The console against what a hostile page, client or stored value sends it: a page of another
site rebound to 127.0.0.1 (the console without a token answers loopback names only), framing
(refused by headers), headers and tokens that are not ASCII, numbers and NUL bytes in the URL,
run ids holding "/", and actions that would report success when nothing happened."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from .conftest import TOKEN, Console, Host, wait_status


def test_without_a_token_only_loopback_hosts_are_answered(console: Console) -> None:
    http, port = console.http, console.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        response = http.get("/api/runs", headers={"Host": host})
        assert response.status_code == 421, host
        assert "loopback" in response.json()["error"] and "--token" in response.json()["error"]
        posted = http.post(
            "/api/runs/x/input",
            json={"text": "hi"},
            headers={"Host": host, "Origin": f"http://{host}"},
        )
        assert posted.status_code == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert http.get("/api/runs", headers={"Host": host}).status_code == 200, host


def test_a_console_with_a_token_answers_any_host(locked_console: Console) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}", "Host": "console.example.com"}
    assert locked_console.http.get("/api/runs", headers=bearer).status_code == 200


def test_pages_and_answers_may_not_be_framed_or_sniffed(console: Console, batch: str) -> None:
    for path in ("/", f"/runs/{batch}-ok", "/api/runs", "/static/app.js", "/api/runs/nope"):
        headers = console.http.get(path).headers
        assert headers["x-frame-options"] == "DENY", path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
        assert headers["x-content-type-options"] == "nosniff", path


def test_tokens_and_headers_that_are_not_ascii_are_wrong_not_errors(
    locked_console: Console,
) -> None:
    http = locked_console.http
    for value in ("Bearer tök".encode(), b"Bearer \xff\xfe", "Bearer 令牌".encode()):
        response = http.get("/api/runs", headers={"Authorization": value})
        assert response.status_code == 401, value
    wrong = http.post("/login", data={"token": "pässwort", "next": "/"})
    assert wrong.status_code == 401
    cookie = http.get("/api/runs", headers={"Cookie": "durable_swarm_session=café".encode()})
    assert cookie.status_code == 401


def test_numbers_and_nul_bytes_out_of_range_are_bad_requests(console: Console, batch: str) -> None:
    http = console.http
    assert http.get("/api/runs", params={"offset": 10**20}).status_code == 422
    for path in ("/api/runs/a%00b", "/runs/a%00b"):
        response = http.get(path)
        assert response.status_code == 422 and "NUL" in response.json()["error"], path
    assert http.get("/api/runs", params={"q": "a\x00b"}).status_code == 422
    for step in (True, "1", 1.5):
        forked = http.post(f"/api/runs/{batch}-ok/fork", json={"step": step})
        assert forked.status_code == 422, step
    run = f"/api/runs/{batch}-ok/events"
    for last in ("²", "9" * 5000, "-1", "12abc"):
        headers = {"Last-Event-ID": last.encode()}
        with http.stream("GET", run, headers=headers) as stream:
            assert stream.status_code == 200, last
            body = "".join(stream.iter_text())
        assert "event: step" in body and "event: end" in body, last  # from the first step


def test_run_ids_holding_a_slash_can_be_opened_and_answered(console: Console, host: Host) -> None:
    prefix = host.start(within="team/a/")
    ok, ask = f"{prefix}-ok", f"{prefix}-ask"
    wait_status(console, host, quote(ok, safe=""), "succeeded")
    wait_status(console, host, quote(ask, safe=""), "waiting_for_input")
    http = console.http
    detail = http.get(f"/api/runs/{quote(ok, safe='')}")
    assert detail.status_code == 200 and detail.json()["run_id"] == ok
    assert http.get(f"/runs/{quote(ok, safe='')}").status_code == 200
    with http.stream("GET", f"/api/runs/{quote(ok, safe='')}/events") as stream:
        assert "event: end" in "".join(stream.iter_text())
    sent = http.post(f"/api/runs/{quote(ask, safe='')}/input", json={"text": "A-9"})
    assert sent.status_code == 200 and sent.json()["run_id"] == ask
    done = wait_status(console, host, quote(ask, safe=""), "succeeded")
    assert done["messages"][-1]["content"] == "Thanks! Order A-9 is on its way."


def test_cancel_and_resume_say_when_nothing_happened(console: Console, batch: str) -> None:
    http = console.http
    cancelled = http.post(f"/api/runs/{batch}-ok/cancel")
    assert cancelled.status_code == 409
    assert "already succeeded" in cancelled.json()["error"]
    assert http.get(f"/api/runs/{batch}-ok").json()["status"] == "succeeded"
    resumed = http.post(f"/api/runs/{batch}-ask/resume")
    assert resumed.status_code == 409 and "has not ended" in resumed.json()["error"]
    assert http.get(f"/api/runs/{batch}-ask").json()["status"] == "waiting_for_input"


def test_a_long_tool_call_id_is_told_apart_not_an_error(console: Console, batch: str) -> None:
    """Tool call ids come from the model and have no length limit."""
    response = console.http.post(f"/api/runs/{batch}-pay/approve", json={"tool_call_id": "c" * 300})
    assert response.status_code == 409 and "waits for approval of tool call" in response.text


def test_the_login_redirect_keeps_the_query_and_an_encoded_run_id(
    locked_console: Console,
) -> None:
    with httpx.Client(base_url=locked_console.base, timeout=60) as browser:
        page = browser.get("/?status=failed")
        assert page.headers["location"] == "/login?next=/%3Fstatus%3Dfailed"
        page = browser.get("/runs/a%23b")
        assert page.headers["location"] == "/login?next=/runs/a%2523b"
        right = browser.post("/login", data={"token": TOKEN, "next": "/runs/a%23b"})
        assert right.headers["location"] == "/runs/a%23b"


def test_invisible_characters_in_a_run_id_are_shown_on_its_page(
    console: Console, host: Host
) -> None:
    prefix = host.start(within="zero\u200bwidth\u202e-")
    ok = f"{prefix}-ok"
    wait_status(console, host, quote(ok, safe=""), "succeeded")
    page = console.http.get(f"/runs/{quote(ok, safe='')}").text
    assert '<h1 class="run-id">zero\\u200bwidth\\u202e-' in page
    assert "\u200b" not in page.split("data-run-id")[0]  # the title too
