"""The console's bounds, against real runs on SQLite and PostgreSQL: event streams share one
poller (an idle viewer costs no database query, however many watch), every viewer gets each
change once, streams are capped per client and in all (429/503 naming the `serve` option), the
runs list reads summaries and answers 304 to an unchanged page, and `serve` makes a token
unless told `--no-token`."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import uvicorn

from _support.procs import wait_for
from durable_swarm.durable import DurableClient
from durable_swarm.web import create_app
from durable_swarm.web._feeds import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_CLIENT, RunFeeds
from durable_swarm.web._views import run_summary

from .conftest import Console, Host, free_port, serve_argv, wait_status


class Viewer:
    """One event stream read in a thread: its status code, error body and parsed events."""

    def __init__(self, base: str, path: str, source: str | None = None) -> None:
        transport = httpx.HTTPTransport(local_address=source) if source else None
        self.http = httpx.Client(
            base_url=base, timeout=httpx.Timeout(60, read=None), transport=transport
        )
        self.path = path
        self.status: int | None = None
        self.error: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.ended = False
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self.http.stream("GET", self.path) as response:
                self._socket = response.extensions["network_stream"].get_extra_info("socket")
                if response.status_code != 200:
                    self.error = json.loads(response.read())
                self.status = response.status_code
                if response.status_code != 200:
                    return
                event: dict[str, Any] = {}
                for line in response.iter_lines():
                    if not line:
                        if "data" in event:
                            event["data"] = json.loads(event["data"])
                            self.events.append(event)
                            if event["event"] == "end":
                                self.ended = True
                                return
                        event = {}
                    elif not line.startswith(":"):
                        field, _, value = line.partition(":")
                        event[field] = value.removeprefix(" ")
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass  # closed by the test

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def close(self) -> None:
        """Hang up at once (a read blocked on a quiet stream returns)."""
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        self.http.close()
        self._thread.join(30)


class Watch:
    """A `processes` entry of `wait_for` that fails as soon as a viewer was refused, saying
    what each viewer got (a refused stream never gets its first status)."""

    name = "a viewer"

    def __init__(self, viewers: list[Viewer], feeds: RunFeeds) -> None:
        self.viewers, self.feeds = viewers, feeds

    def poll(self) -> int | None:
        return 1 if any(v.status not in (None, 200) for v in self.viewers) else None

    def output(self) -> str:
        got = [(v.status, v.error, len(v.events)) for v in self.viewers]
        return f"viewers: {got}; polls: {self.feeds.polls}, open: {self.feeds.open_streams}"


class Queries:
    """Every SQL statement this process sends to the console's run database (SQLAlchemy's
    engine events, all engines on it). Statements to other databases are left out: a
    process left running by an earlier test of this pytest worker (its heartbeat on its own
    database) is not the console's cost."""

    def __init__(self, database_url: str) -> None:
        self.count = 0
        self._url = sa.make_url(database_url)
        self._lock = threading.Lock()

    def __call__(self, conn: sa.Connection, *args: Any) -> None:
        url = conn.engine.url
        if (url.drivername.split("+")[0], url.database) != (
            self._url.drivername.split("+")[0],
            self._url.database,
        ):
            return
        with self._lock:
            self.count += 1


@pytest.fixture
def queries(db_url: str) -> Iterator[Queries]:
    counter = Queries(db_url)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", counter)
    yield counter
    sa.event.remove(sa.engine.Engine, "before_cursor_execute", counter)


@pytest.fixture
def in_process(db_url: str) -> Iterator[tuple[str, RunFeeds]]:
    """The console app under uvicorn in this process (to count its queries): base URL, feeds."""
    client = DurableClient(db_url)
    app = create_app(client, poll_interval=0.05)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the in-process console to start")
    yield f"http://127.0.0.1:{server.config.port}", app.state.feeds
    server.should_exit = True
    thread.join(60)
    client.close()


def test_idle_viewers_cost_no_queries_one_poll_serves_all(
    in_process: tuple[str, RunFeeds], queries: Queries, batch: str
) -> None:
    base, feeds = in_process
    viewers = [Viewer(base, f"/api/runs/{batch}-ask/events") for _ in range(20)]
    viewers += [Viewer(base, f"/api/runs/{batch}-pay/events") for _ in range(5)]
    try:
        watch = Watch(viewers, feeds)
        try:
            wait_for(lambda: all(v.of("status") for v in viewers), "statuses", processes=[watch])
        except AssertionError as e:
            raise AssertionError(f"{e}; {watch.output()}") from None
        assert feeds.open_streams == 25 and feeds.watched_runs == 2
        metrics = httpx.get(f"{base}/metrics", timeout=60).text
        assert "durable_swarm_console_streams 25.0" in metrics
        assert "durable_swarm_console_watched_runs 2.0" in metrics
        assert {v.of("status")[0]["data"]["status"] for v in viewers[:20]} == {"waiting_for_input"}
        assert viewers[-1].of("status")[0]["data"]["status"] == "waiting_for_approval"
        # Nothing changes: each poll is one query for both runs and all 25 viewers.
        before, polls = queries.count, feeds.polls
        wait_for(lambda: feeds.polls >= polls + 20, "20 polls")
        spent, made = queries.count - before, feeds.polls - polls
        assert spent <= made + 1, f"{spent} queries in {made} polls of 2 runs, 25 viewers"
        steps = [[e["id"] for e in v.of("step")] for v in viewers[:20]]
        assert steps[0] and all(s == steps[0] for s in steps)  # each viewer got each step
    finally:
        for viewer in viewers:
            viewer.close()
    wait_for(lambda: feeds.open_streams == 0, "the streams to be given back")
    wait_for(lambda: feeds.watched_runs == 0, "the feeds to stop")


def test_every_viewer_gets_each_change_once_in_order(
    console: Console, host: Host, batch: str
) -> None:
    path = f"/api/runs/{batch}-ask/events"
    viewers = [Viewer(console.base, path) for _ in range(5)]
    try:
        wait_for(lambda: all(v.of("status") for v in viewers), "every viewer's first status")
        assert console.http.post(f"/api/runs/{batch}-ask/input", json={"text": "Q-5"}).is_success
        wait_for(lambda: all(v.ended for v in viewers), "every viewer to see the end")
    finally:
        for viewer in viewers:
            viewer.close()
    run = console.http.get(f"/api/runs/{batch}-ask").json()
    everything = [str(s["step"]) for s in run["steps"]]
    for viewer in viewers:
        ids = [e["id"] for e in viewer.of("step")]
        assert ids == everything  # each step once, in order, none missing
        assert viewer.events[-1]["data"]["status"] == "succeeded"
        assert viewer.of("status")[-1]["data"]["status"] == "succeeded"
        last = viewer.of("step")[-1]["data"]
        assert last["adds_message"] and last["result"]["content"].endswith("Q-5 is on its way.")


def test_a_stream_after_a_step_sends_only_the_later_ones(console: Console, batch: str) -> None:
    run = console.http.get(f"/api/runs/{batch}-ok").json()
    numbers = [s["step"] for s in run["steps"]]
    middle = numbers[len(numbers) // 2]
    viewer = Viewer(console.base, f"/api/runs/{batch}-ok/events?after={middle}")
    try:
        wait_for(lambda: viewer.ended, "the stream of a finished run to end")
    finally:
        viewer.close()
    assert [int(e["id"]) for e in viewer.of("step")] == [n for n in numbers if n > middle]
    assert [e["event"] for e in viewer.events if e["event"] != "step"] == ["status", "end"]
    bad = console.http.get(f"/api/runs/{batch}-ok/events", params={"after": -1})
    assert bad.status_code == 422


@pytest.fixture(scope="module")
def capped(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    child = Console(
        db_url, tmp_path_factory.mktemp("capped") / "console.log", None,
        "--max-streams", "3", "--max-streams-per-client", "2",
    )  # fmt: skip
    yield child
    child.stop()


def test_streams_are_capped_per_client_and_in_all(capped: Console, batch: str) -> None:
    path = f"/api/runs/{batch}-pay/events"
    mine = [Viewer(capped.base, path), Viewer(capped.base, path)]
    others: list[Viewer] = []
    try:
        wait_for(lambda: all(v.of("status") for v in mine), "two streams")
        third = Viewer(capped.base, path)
        wait_for(lambda: third.status is not None, "the third stream's answer")
        assert third.status == 429
        assert "limit per client is 2" in third.error["error"]
        assert "--max-streams-per-client" in third.error["error"]
        third.close()

        others.append(Viewer(capped.base, path, source="127.0.0.2"))  # another client
        wait_for(lambda: others[0].of("status"), "another client's stream")
        over = Viewer(capped.base, path, source="127.0.0.3")
        wait_for(lambda: over.status is not None, "the fourth stream's answer")
        assert over.status == 503
        assert "limit is 3" in over.error["error"] and "--max-streams N" in over.error["error"]
        over.close()

        mine.pop().close()  # a closed stream gives its place back

        def again() -> bool:
            viewer = Viewer(capped.base, path)
            wait_for(lambda: viewer.status is not None, "an answer")
            if viewer.status == 200:
                mine.append(viewer)
                return True
            viewer.close()
            return False

        wait_for(again, "a place to be given back", interval=0.2)
    finally:
        for viewer in mine + others:
            viewer.close()


def test_the_cap_options_and_their_defaults(capped: Console) -> None:
    text = subprocess.run(
        serve_argv("sqlite:///x.sqlite", "--help"), capture_output=True, text=True
    ).stdout
    assert f"default: {DEFAULT_MAX_STREAMS};" in text
    assert f"default: {DEFAULT_MAX_STREAMS_PER_CLIENT};" in text
    done = subprocess.run(
        serve_argv("sqlite:///x.sqlite", "--max-streams", "0"), capture_output=True, text=True
    )
    assert done.returncode == 2 and "expected 1 or more, got '0'" in done.stderr


def test_the_runs_list_reads_summaries_and_answers_304_when_unchanged(
    console: Console, host: Host, batch: str, db_url: str
) -> None:
    page = console.http.get("/api/runs", params={"q": batch})
    assert page.status_code == 200 and page.headers["etag"]
    body = page.json()
    assert "messages" not in body["runs"][0] and "steps" not in body["runs"][0]
    # The same rows the durable client's listing gives, read without any payload.
    with DurableClient(db_url) as client:
        listed = client.list_runs(search=batch)
        usage = client.runs.query.model_usage([r.run_id for r in listed])
        expected = [run_summary(r, usage[r.run_id]) for r in listed]
    assert body["runs"] == expected
    ok = next(r for r in body["runs"] if r["run_id"] == f"{batch}-ok")
    assert ok["usage"]["model_calls"] == 2 and ok["cost_usd"] is not None

    etag = page.headers["etag"]
    same = console.http.get("/api/runs", params={"q": batch}, headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b""
    other = console.http.get("/api/runs", params={"q": batch, "limit": 3})
    assert other.headers["etag"] != etag  # another page, another tag

    console.http.post(f"/api/runs/{batch}-ask/input", json={"text": "E-1"})
    wait_status(console, host, f"{batch}-ask", "succeeded")
    changed = console.http.get("/api/runs", params={"q": batch}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    ask = next(r for r in changed.json()["runs"] if r["run_id"] == f"{batch}-ask")
    assert ask["status"] == "succeeded" and ask["model_calls"] == 2


def test_serve_makes_a_token_and_prints_a_link_that_logs_in(
    token_console: Console, batch: str
) -> None:
    link = token_console.link()
    token = link.split("?token=", 1)[1]
    assert len(token) >= 32
    http = token_console.http
    assert http.get("/api/runs").status_code == 401
    assert http.get("/api/approvals").status_code == 401
    posted = http.post(f"/api/runs/{batch}-pay/approve", json={"tool_call_id": "x"})
    assert posted.status_code == 401
    bearer = {"Authorization": f"Bearer {token}"}
    assert http.get("/api/approvals", headers=bearer).status_code == 200

    with httpx.Client(timeout=60) as browser:
        opened = browser.get(link.replace("/?", f"/runs/{batch}-ok?"))
        assert opened.status_code == 303
        assert opened.headers["location"] == f"/runs/{batch}-ok"  # the token leaves the URL
        assert "httponly" in opened.headers["set-cookie"].lower()
        assert browser.get(f"{token_console.base}/api/runs").status_code == 200
        wrong = httpx.get(f"{token_console.base}/?token=nope", timeout=60)
        assert wrong.status_code == 303 and wrong.headers["location"].startswith("/login")
    # A token in the URL is for opening pages, not for the API.
    assert http.get("/api/runs", params={"token": token}).status_code == 401


def test_a_link_with_a_token_opens_a_console_without_one(console: Console) -> None:
    opened = console.http.get("/approvals", params={"token": "anything"})
    assert opened.status_code == 303 and opened.headers["location"] == "/approvals"
    assert "set-cookie" not in opened.headers


def test_no_token_is_for_loopback_only_and_excludes_a_token(db_url: str) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        serve_argv(db_url, "--host", "0.0.0.0", "--port", "1", "--no-token"),
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 2 and "without a token" in done.stderr
    done = subprocess.run(
        serve_argv(db_url, "--port", "1", "--no-token", "--token", "t"),
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 2 and "--no-token and a token" in done.stderr
