"""Every code block of README.md runs as written (see `_support.markdown_blocks` for how: each
in a fresh interpreter and an empty directory against a fake model server; a block that cannot
run offline says why with `<!-- readme-test: not run (REASON) -->`). The docs/ pages have the
same test in test_docs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support.markdown_blocks import ROOT, Block, blocks, page_problems, run_block, runnable
from durable_swarm.testing import FakeOpenAIServer

README = ROOT / "README.md"
RUNNABLE = runnable([README])


@pytest.fixture(scope="module")
def fake_model():
    with FakeOpenAIServer() as server:
        yield server


def test_every_block_runs_or_says_why_not():
    assert blocks(README.read_text(encoding="utf-8")), "no code blocks found in README.md"
    assert page_problems(README) == []


def test_readme_is_short():
    """The README is the front door; the manual is the site in docs/."""
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= 200, f"README.md has {lines} lines: move the detail into docs/"


def test_readme_links_resolve():
    """Relative links of the README (into docs/, to files) point at files that exist."""
    text = README.read_text(encoding="utf-8")
    targets = {m.split("#")[0] for m in _links(text) if not m.startswith(("http", "#", "mailto:"))}
    missing = sorted(t for t in targets if not (ROOT / t).exists())
    assert missing == [], f"README.md links to missing files: {missing}"


def _links(text: str) -> list[str]:
    import re

    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs(block: Block, fake_model: FakeOpenAIServer, tmp_path: Path):
    run_block(block, fake_model, tmp_path)
