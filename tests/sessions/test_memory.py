"""Sessions of the in-memory `Swarm`: kept in the `Swarm` object, same behaviour as durable
ones (carried over runs, one run at a time, list/read/clear/delete), sync, async and streamed."""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest

from durable_swarm import SessionBusyError, SessionNotFoundError, Swarm
from durable_swarm.testing import FakeOpenAIServer, Fault

from ._model import SessionModel, clerk


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def server():
    with FakeOpenAIServer(SessionModel()) as fake:
        yield fake


def test_a_session_carries_over_runs_sync_async_and_streamed(server):
    swarm = Swarm(server.client())
    assert swarm.run(clerk, user("one"), session="s").messages[-1]["content"] == "seen 2: one"

    async def second() -> str:
        response = await swarm.arun(clerk, user("two"), session="s")
        return str(response.messages[-1]["content"])

    assert asyncio.run(second()) == "seen 4: two"
    events = list(swarm.run(clerk, user("three"), session="s", stream=True))
    assert events[-1]["response"].messages[-1]["content"] == "seen 6: three"
    info = swarm.get_session("s")
    assert info.runs == 3 and len(info.messages) == 6 and info.held_by is None
    assert [s.name for s in swarm.list_sessions()] == ["s"]
    # other sessions and runs without one are apart
    assert swarm.run(clerk, user("alone")).messages[-1]["content"] == "seen 2: alone"
    assert swarm.run(clerk, user("x"), session="t").messages[-1]["content"] == "seen 2: x"


def test_a_stream_never_read_holds_nothing(server):
    swarm = Swarm(server.client())
    swarm.run(clerk, user("unread"), session="s", stream=True)  # never iterated
    assert swarm.run(clerk, user("hi"), session="s").messages[-1]["content"] == "seen 2: hi"


def test_a_second_run_while_one_holds_the_session_is_refused():
    model = SessionModel()
    model.hold("slow", seconds=1.5)
    with FakeOpenAIServer(model) as server:
        swarm = Swarm(server.client())
        first = threading.Thread(
            target=swarm.run, args=(clerk, user("slow")), kwargs={"session": "s"}
        )
        first.start()
        while not server.requests:
            threading.Event().wait(0.01)
        with pytest.raises(SessionBusyError) as refused:
            swarm.run(clerk, user("me too"), session="s")
        assert refused.value.session == "s" and "memory-1" in str(refused.value)
        with pytest.raises(SessionBusyError):
            swarm.delete_session("s")
        first.join()
    assert len(swarm.get_session("s").messages) == 2


def test_a_failed_run_adds_nothing_and_frees_the_session(server):
    swarm = Swarm(server.client())
    swarm.run(clerk, user("one"), session="s")
    server.inject(Fault.status(400, "refused"))
    with pytest.raises(openai.BadRequestError):
        swarm.run(clerk, user("two"), session="s")
    assert len(swarm.get_session("s").messages) == 2
    assert swarm.get_session("s").held_by is None


def test_clear_and_delete(server):
    swarm = Swarm(server.client())
    swarm.run(clerk, user("one"), session="s")
    swarm.clear_session("s")
    assert swarm.get_session("s").messages == []
    swarm.delete_session("s")
    with pytest.raises(SessionNotFoundError):
        swarm.get_session("s")
    with pytest.raises(Exception, match="session's name"):
        swarm.run(clerk, user("x"), session="")
