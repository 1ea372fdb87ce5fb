"""A model endpoint that answers with more than `DURABLE_SWARM_MAX_RESPONSE_BYTES` (32 MiB by
default): reading stops at the limit with `ModelResponseError` naming it, streamed or not, in
`Swarm` and in durable runs (SQLite and PostgreSQL), and the worker's memory does not grow with
the answer. Real `openai` clients over real HTTP against the fake server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from _support.wait import wait_for
from durable_swarm import Agent, Swarm
from durable_swarm.errors import ModelResponseError
from durable_swarm.testing import FakeOpenAIServer, text

LIMIT = 1_000_000
AGENT = Agent(name="response-limit-agent", instructions="Answer.")
HUGE = "x" * (3 * LIMIT)


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_SWARM_MAX_RESPONSE_BYTES", str(LIMIT))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer([text("small"), text(HUGE)] * 4) as fake:
        yield fake


def _client(server: FakeOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="fake", max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_swarm_refuses_an_answer_over_the_limit(
    limited: None, server: FakeOpenAIServer, stream: bool
) -> None:
    swarm = Swarm(_client(server))
    messages = [{"role": "user", "content": "hi"}]
    if stream:
        events = list(swarm.run(AGENT, messages, stream=True))
        assert events[-1]["response"].messages[-1]["content"] == "small"
        with pytest.raises(ModelResponseError) as caught:
            list(swarm.run(AGENT, messages, stream=True))
    else:
        assert swarm.run(AGENT, messages).messages[-1]["content"] == "small"
        with pytest.raises(ModelResponseError) as caught:
            swarm.run(AGENT, messages)
    said = str(caught.value)
    assert f"more than {LIMIT} bytes" in said and "DURABLE_SWARM_MAX_RESPONSE_BYTES" in said
    assert "response-limit-agent" in said


def test_a_durable_run_fails_with_the_limit_named_and_resumes_once_it_is_raised(
    limited: None,
    server: FakeOpenAIServer,
    durable_swarm_factory: Any,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    swarm = durable_swarm_factory(_client(server))
    messages = [{"role": "user", "content": "hi"}]
    assert swarm.run(AGENT, messages).messages[-1]["content"] == "small"
    with pytest.raises(Exception) as caught:
        swarm.run(AGENT, messages, run_id=run_id)
    assert f"more than {LIMIT} bytes" in str(caught.value)
    info = swarm.get_run(run_id)
    assert info.status == "failed"
    monkeypatch.setenv("DURABLE_SWARM_MAX_RESPONSE_BYTES", str(10 * LIMIT))
    swarm.resume(run_id)  # the failed model step again: the script's next answer is small
    wait_for(lambda: swarm.get_run(run_id).status == "succeeded", "the resumed run to finish")
    assert swarm.get_run(run_id).messages[-1]["content"] == "small"


CHILD = textwrap.dedent(
    """
    import json, os, sys
    import openai
    from durable_swarm import model

    def peak():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    client = openai.OpenAI(base_url=sys.argv[1], api_key="fake", max_retries=0)
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    model.create(client, request)  # warm: the client and its connection
    before = peak()
    try:
        model.create(client, request)
        said = "read whole"
    except Exception as e:
        said = type(e).__name__
    print(json.dumps({"said": said, "grew": peak() - before}))
    """
)


def test_the_memory_of_a_worker_does_not_grow_with_a_huge_answer() -> None:
    body = "y" * 200_000_000
    with FakeOpenAIServer([text("small"), text(body)]) as fake:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, fake.base_url],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "DURABLE_SWARM_MAX_RESPONSE_BYTES": "8000000"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["said"] == "ModelResponseError"
    assert seen["grew"] < 64 * 1024 * 1024, seen  # a 200 MB answer, 8 MB read at most
