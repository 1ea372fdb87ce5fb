"""The console's security: the token (Bearer or login cookie), the origin check on changing
requests, the refusal to serve on a non-loopback address without a token, and never creating a
database."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from durable_swarm.errors import DurableSwarmError
from durable_swarm.web import check_bind

from .conftest import TOKEN, Console, serve_argv


def test_every_api_request_needs_the_token(locked_console: Console, batch: str) -> None:
    http = locked_console.http
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        for path in ("/api/runs", f"/api/runs/{batch}-ok", "/api/approvals", "/metrics"):
            response = http.get(path, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert "token" in response.json()["error"]
        response = http.post(f"/api/runs/{batch}-ask/input", json={"text": "x"}, headers=headers)
        assert response.status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert http.get("/api/runs", headers=bearer).status_code == 200
    assert http.get(f"/api/runs/{batch}-ok", headers=bearer).json()["status"] == "succeeded"
    assert http.get("/api/openapi.json", headers=bearer).status_code == 200


def test_pages_need_a_login_that_sets_an_httponly_samesite_cookie(
    locked_console: Console, batch: str
) -> None:
    base = locked_console.base
    with httpx.Client(base_url=base, timeout=60) as browser:
        page = browser.get(f"/runs/{batch}-ok")
        assert (
            page.status_code == 303 and page.headers["location"] == f"/login?next=/runs/{batch}-ok"
        )
        assert browser.get("/login").status_code == 200
        assert browser.get("/static/app.js").status_code == 200  # assets hold no run data

        wrong = browser.post("/login", data={"token": "nope", "next": "/"})
        assert wrong.status_code == 401 and "not right" in wrong.text
        assert browser.get("/api/runs").status_code == 401

        right = browser.post("/login", data={"token": TOKEN, "next": f"/runs/{batch}-ok"})
        assert right.status_code == 303 and right.headers["location"] == f"/runs/{batch}-ok"
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert TOKEN.lower() not in cookie  # the cookie is derived from the token, not it
        assert browser.get(f"/runs/{batch}-ok").status_code == 200
        assert browser.get("/api/runs").status_code == 200

        # an off-site next= is not followed
        away = browser.post("/login", data={"token": TOKEN, "next": "//evil.example/x"})
        assert away.headers["location"] == "/"


def test_changing_requests_from_another_origin_are_refused(
    locked_console: Console, batch: str
) -> None:
    http = locked_console.http
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    path = f"/api/runs/{batch}-ask/cancel"
    for origin in ("http://evil.example", "http://127.0.0.1:1"):
        response = http.post(path, headers={**bearer, "Origin": origin})
        assert response.status_code == 403 and "Cross-origin" in response.json()["error"]
    response = http.post(path, headers={**bearer, "Referer": "http://evil.example/page"})
    assert response.status_code == 403
    bad = http.get(f"/api/runs/{batch}-ask", headers=bearer).json()
    assert bad["status"] == "waiting_for_input"  # nothing was cancelled
    same = http.post(
        "/api/runs/no-such-run/cancel", headers={**bearer, "Origin": locked_console.base}
    )
    assert same.status_code == 404


def test_binding_beyond_loopback_without_a_token_is_refused(db_url: str) -> None:
    done = subprocess.run(
        serve_argv(db_url, "--host", "0.0.0.0", "--port", "1"),
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "Refusing to serve the console on '0.0.0.0' without a token" in done.stderr
    with pytest.raises(DurableSwarmError, match="--token"):
        check_bind("192.168.1.20", None)
    check_bind("0.0.0.0", "a-token")
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, None)


def test_serve_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.sqlite"
    done = subprocess.run(
        serve_argv(str(missing), "--port", "1"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "does not exist" in done.stderr
    assert not missing.exists()
