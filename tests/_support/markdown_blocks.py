"""Running the code blocks of Markdown pages (README.md, docs/): shared by test_readme.py and
test_docs.py.

Python blocks run one by one, each in a fresh interpreter and an empty working directory, with
`OPENAI_BASE_URL`/`OPENAI_API_KEY` pointing at a `FakeOpenAIServer` (offline; the default
database is then `./durable_swarm.sqlite` in that directory). Shell blocks run in bash the same
way, with this environment's `durable-swarm` on PATH. A block that cannot run offline (it needs
PostgreSQL, a real model server, placeholders such as RUN_ID, or is `make` itself) is preceded
by the marker `<!-- readme-test: not run (REASON) -->`; the marker needs a reason, a marker that
no block follows is an error, and so is a block in a language that cannot be run without one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from durable_swarm.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- readme-test: not run \((?P<reason>[^)]+)\) -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
RUN = {"python": "python", "sh": "shell", "bash": "shell", "console": "shell"}
TIMEOUT = 180
SCRUBBED = ("DURABLE_SWARM_DATABASE_URL", "DBOS_SYSTEM_DATABASE_URL", "DURABLE_SWARM_MODEL")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        first = next((x for x in self.code.splitlines() if x.strip()), "")
        slug = re.sub(r"[^A-Za-z0-9]+", "_", first)[:30]
        return f"{self.page}:line{self.line}-{self.lang}-{slug}"


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced code blocks of `text`, with the reason of a marker just before one."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if opening["lang"]:
            marker = MARKER.match(lines[i - 1]) if i else None
            code = "\n".join(lines[i + 1 : end]) + "\n"
            reason = marker["reason"] if marker else None
            found.append(Block(page, i + 1, opening["lang"], code, reason))
        i = end + 1
    return found


def page_problems(path: Path) -> list[str]:
    """What is wrong with the markers of one page: blocks that can neither run nor say why,
    markers that no block follows."""
    text = path.read_text(encoding="utf-8")
    page = str(path.relative_to(ROOT))
    found = blocks(text, page)
    problems = [
        f"{page} line {b.line}: a ```{b.lang} block can be neither run nor is it marked "
        "`<!-- readme-test: not run (REASON) -->`"
        for b in found
        if b.lang not in RUN and not b.skip_reason
    ]
    markers = [n for n, x in enumerate(text.splitlines(), 1) if MARKER.match(x)]
    marked = {b.line - 1 for b in found if b.skip_reason}
    problems += [
        f"{page} line {n}: a marker that no block follows" for n in markers if n not in marked
    ]
    return problems


def runnable(paths: list[Path]) -> list[Block]:
    """Every block of `paths` that runs."""
    return [
        b
        for path in paths
        for b in blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
        if b.skip_reason is None and b.lang in RUN
    ]


def _env(server: FakeOpenAIServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="readme-test",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONIOENCODING="utf-8",
    )
    return env


def run_block(block: Block, server: FakeOpenAIServer, directory: Path) -> None:
    """Run `block` in `directory` against `server`; fail the test with its output if it fails."""
    if RUN[block.lang] == "python":
        script = directory / "doc_block.py"
        script.write_text(block.code, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(
        argv,
        cwd=directory,
        env=_env(server),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, (
        f"{block.page} line {block.line} ({block.lang}) failed with status {done.returncode}:\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
