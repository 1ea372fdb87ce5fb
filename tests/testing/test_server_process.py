"""FakeOpenAIServer across processes: as its own process, and counting a killed client's call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import durable_swarm.testing
from _support.wait import wait_for
from durable_swarm.testing import FakeOpenAIServer

SRC = Path(durable_swarm.testing.__file__).resolve().parents[2]
Spawn = Callable[..., tuple["subprocess.Popen[str]", str]]


def _env(*paths: Path) -> dict[str, str]:
    path = os.pathsep.join([*map(str, paths), str(SRC), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_for(condition, what, timeout=15.0)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start ``python -m durable_swarm.testing.server ARGS``; return (process, base_url)."""
    processes: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[subprocess.Popen[str], str]:
        port_file = tmp_path / f"port-{len(processes)}"
        command = [
            sys.executable,
            "-m",
            "durable_swarm.testing.server",
            "--port-file",
            str(port_file),
        ]
        process = subprocess.Popen(
            [*command, *args],
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        _wait_for(lambda: port_file.exists() or process.poll() is not None, "the port file")
        assert process.poll() is None, process.communicate()
        return process, f"http://127.0.0.1:{int(port_file.read_text())}/v1"

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _client(base_url: str, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="fake-key", max_retries=max_retries)


def test_process_echoes_by_default_and_stops_on_sigterm(spawn: Spawn) -> None:
    process, base_url = spawn("--latency", "0.05")
    completion = _client(base_url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "You said: hi"
    stats = httpx.get(base_url.removesuffix("/v1") + "/_fake/stats").json()
    assert stats["requests"] == stats["answered"] == 1

    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=10)
    assert process.returncode == 0
    assert f"listening on {base_url}" in stdout


def test_process_with_script_file(spawn: Spawn, tmp_path: Path) -> None:
    script = [
        {"fault": "status", "status": 429},
        {"tool_calls": [{"name": "f", "arguments": {"a": 1}}]},
        "done",
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    _, base_url = spawn("--script-file", str(tmp_path / "script.json"))
    client = _client(base_url, max_retries=2)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model="m", messages=messages)
    (tool_call,) = [c.model_dump() for c in first.choices[0].message.tool_calls or []]
    assert tool_call["function"]["name"] == "f"
    assert json.loads(tool_call["function"]["arguments"]) == {"a": 1}
    second = client.chat.completions.create(model="m", messages=messages)
    assert second.choices[0].message.content == "done"
    stats = httpx.get(base_url.removesuffix("/v1") + "/_fake/stats").json()
    assert (stats["requests"], stats["faults"], stats["answered"]) == (3, 1, 2)


def test_process_with_script_module(spawn: Spawn, tmp_path: Path) -> None:
    (tmp_path / "my_script.py").write_text(
        "def shout(messages, tools):\n    return messages[-1]['content'].upper()\n"
    )
    _, base_url = spawn("--script", "my_script:shout")
    completion = _client(base_url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "quiet"}]
    )
    assert completion.choices[0].message.content == "QUIET"


def test_request_of_a_killed_child_is_counted(tmp_path: Path) -> None:
    with FakeOpenAIServer(latency=0.3) as server:
        child_code = (
            "import openai\n"
            f"client = openai.OpenAI(base_url={server.base_url!r}, api_key='k', max_retries=0)\n"
            "client.chat.completions.create(model='m', messages=[{'role': 'user'}])\n"
            "import time; time.sleep(60)\n"
        )
        child = subprocess.Popen([sys.executable, "-c", child_code], env=_env())
        try:
            _wait_for(lambda: server.request_count == 1, "the child's request")
        finally:
            child.kill()
            child.wait()
        assert server.request_count == 1
        _wait_for(lambda: server.stats["in_flight"] == 0, "the killed request to finish")
        assert server.client(max_retries=0).models.list().data[0].id == "fake-model"
