"""SPEC "`Swarm(client=None)`", the client surface, and objects made by the real `swarm` package."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from durable_swarm import Agent, Swarm

from ._mock import calling, completion, mock_client, requests, text_stream, tool_call


def test_swarm_without_client_creates_openai_client(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")

    swarm = Swarm()

    assert isinstance(swarm.client, openai.OpenAI)
    assert swarm.client.api_key == "sk-test"
    assert str(swarm.client.base_url).startswith("http://127.0.0.1:9/v1")


def test_swarm_keeps_given_client():
    client = mock_client(completion("hi"))

    assert Swarm(client=client).client is client


class _OnlyCreate:
    """A client with exactly one thing on it: `chat.completions.create`."""

    __slots__ = ("calls", "chat")

    def __init__(self, *responses: Any) -> None:
        self.calls: list[dict[str, Any]] = []
        queue = list(responses)

        def create(**params: Any) -> Any:
            self.calls.append(params)
            return queue.pop(0)

        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))


def test_client_with_only_chat_completions_create_works(make_swarm):
    def lookup(city: str) -> str:
        return f"sunny in {city}"

    client = _OnlyCreate(calling(tool_call("lookup", {"city": "Oslo"})), completion("Sunny."))
    agent = Agent(functions=[lookup])

    response = make_swarm(client).run(agent=agent, messages=[{"role": "user", "content": "hi"}])

    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.messages[1]["content"] == "sunny in Oslo"
    assert len(client.calls) == 2


def test_client_with_only_create_works_when_streaming(make_swarm):
    client = _OnlyCreate(text_stream("Hel", "lo"))

    events = list(make_swarm(client).run(agent=Agent(), messages=[], stream=True))

    assert events[-1]["response"].messages[0]["content"] == "Hello"


def test_real_swarm_agent_accepted(make_swarm):
    swarm_pkg = pytest.importorskip("swarm")

    def greet(name: str) -> str:
        return f"hello {name}"

    agent = swarm_pkg.Agent(name="Theirs", instructions="Be brief.", functions=[greet])
    client = mock_client(calling(tool_call("greet", {"name": "Ann"})), completion("done"))

    response = make_swarm(client).run(agent=agent, messages=[{"role": "user", "content": "hi"}])

    first = requests(client)[0]
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["tools"][0]["function"]["name"] == "greet"
    assert response.messages[1]["content"] == "hello Ann"
    assert response.messages[-1]["sender"] == "Theirs"
    assert response.agent is agent


def test_real_swarm_agent_returned_as_handoff(make_swarm):
    swarm_pkg = pytest.importorskip("swarm")
    target = swarm_pkg.Agent(name="Their Target")

    def transfer():
        return target

    agent = Agent(name="Ours", functions=[transfer])
    client = mock_client(calling(tool_call("transfer")), completion("hi from target"))

    response = make_swarm(client).run(agent=agent, messages=[])

    assert response.agent is target
    assert json.loads(response.messages[1]["content"]) == {"assistant": "Their Target"}
    assert response.messages[-1]["sender"] == "Their Target"


def test_real_swarm_result_accepted(make_swarm):
    swarm_types = pytest.importorskip("swarm.types")
    target = swarm_types.Agent(name="Result Target")

    def act():
        return swarm_types.Result(value="acted", agent=target, context_variables={"k": "v"})

    client = mock_client(calling(tool_call("act")), completion("ok"))

    response = make_swarm(client).run(agent=Agent(functions=[act]), messages=[])

    assert response.messages[1]["content"] == "acted"
    assert response.agent is target
    assert response.context_variables == {"k": "v"}


@pytest.fixture
def completions_server():
    """A tiny local Chat Completions endpoint; yields (base_url, received request bodies)."""
    received: list[dict[str, Any]] = []
    body = completion("served over HTTP").model_dump_json().encode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            received.append(
                {
                    "path": self.path,
                    "auth": self.headers.get("authorization"),
                    "json": json.loads(self.rfile.read(length)),
                }
            )
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    server.shutdown()
    server.server_close()


def test_swarm_without_client_uses_openai_env(monkeypatch, completions_server):
    base_url, received = completions_server
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)

    response = Swarm().run(
        agent=Agent(instructions="Be brief."), messages=[{"role": "user", "content": "hi"}]
    )

    assert response.messages[0]["content"] == "served over HTTP"
    assert len(received) == 1
    assert received[0]["path"] == "/v1/chat/completions"
    assert received[0]["auth"] == "Bearer sk-from-env"
    sent = received[0]["json"]
    assert sent["model"] == "gpt-4o"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
