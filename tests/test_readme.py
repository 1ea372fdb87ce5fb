"""Every code block of README.md runs as written.

Python blocks run one by one, each in a fresh interpreter and an empty working directory, with
`OPENAI_BASE_URL`/`OPENAI_API_KEY` pointing at a `FakeOpenAIServer` (offline; the default
database is then `./durable_swarm.sqlite` in that directory). Shell blocks run line by line in
bash the same way, with this environment's `durable-swarm` on PATH. A block that cannot run
offline (it needs PostgreSQL, a real model server, placeholders such as RUN_ID, or is `make`
itself) is preceded by the marker `<!-- readme-test: not run (REASON) -->`; the marker needs a
reason, and a marker that no block follows fails the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from durable_swarm.testing import FakeOpenAIServer

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"^<!-- readme-test: not run \((?P<reason>[^)]+)\) -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
RUN = {"python": "python", "sh": "shell", "bash": "shell", "console": "shell"}
TIMEOUT = 180
SCRUBBED = ("DURABLE_SWARM_DATABASE_URL", "DBOS_SYSTEM_DATABASE_URL", "DURABLE_SWARM_MODEL")


@dataclass
class Block:
    line: int
    lang: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        first = next((x for x in self.code.splitlines() if x.strip()), "")
        return f"line{self.line}-{self.lang}-{re.sub(r'[^A-Za-z0-9]+', '_', first)[:30]}"


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of `text`, with the reason of a marker just before one."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or not opening["lang"]:
            i += 1
            continue
        marker = MARKER.match(lines[i - 1]) if i else None
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(i + 1, opening["lang"], code, marker["reason"] if marker else None))
        i = end + 1
    return found


BLOCKS = blocks(README.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fake_model():
    with FakeOpenAIServer() as server:
        yield server


def _env(server: FakeOpenAIServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="readme-test",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONIOENCODING="utf-8",
    )
    return env


def test_every_block_runs_or_says_why_not():
    assert BLOCKS, "no code blocks found in README.md"
    for block in BLOCKS:
        assert block.lang in RUN or block.skip_reason, (
            f"README.md line {block.line}: a ```{block.lang} block can be neither run nor is it "
            "marked `<!-- readme-test: not run (REASON) -->`"
        )
    markers = [n for n, x in enumerate(README.read_text().splitlines(), 1) if MARKER.match(x)]
    marked = {b.line - 1 for b in BLOCKS if b.skip_reason}
    assert set(markers) <= marked, f"markers not followed by a block: {set(markers) - marked}"


RUNNABLE = [b for b in BLOCKS if b.skip_reason is None and b.lang in RUN]


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs(block: Block, fake_model: FakeOpenAIServer, tmp_path: Path):
    if RUN[block.lang] == "python":
        script = tmp_path / "readme_block.py"
        script.write_text(block.code, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        env=_env(fake_model),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, (
        f"README.md line {block.line} ({block.lang}) failed with status {done.returncode}:\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
