"""Every code block of every page of the documentation site (docs/**/*.md) runs as written,
as the README's do (see `_support.markdown_blocks`): each in a fresh interpreter and an empty
directory against a fake model server, or marked `<!-- readme-test: not run (REASON) -->`.
Also: every page is in the site's navigation, and the pages the other docs point at exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _support.markdown_blocks import ROOT, Block, page_problems, run_block, runnable
from durable_swarm.testing import FakeOpenAIServer

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
RUNNABLE = runnable(PAGES)


@pytest.fixture(scope="module")
def fake_model():
    with FakeOpenAIServer() as server:
        yield server


def test_pages_found():
    names = {str(p.relative_to(DOCS)) for p in PAGES}
    for page in ("index.md", "getting-started.md", "guarantees.md", "security.md",
                 "performance.md", "upgrading.md", "guides/workers.md"):  # fmt: skip
        assert page in names, f"docs/{page} is missing"
    assert len(RUNNABLE) >= 10, "the docs should show runnable examples"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_block_runs_or_says_why_not(page: Path):
    assert page_problems(page) == []


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, flags=re.MULTILINE))
    unlisted = [str(p.relative_to(DOCS)) for p in PAGES if str(p.relative_to(DOCS)) not in listed]
    assert unlisted == [], f"pages missing from mkdocs.yml's nav: {unlisted}"


def test_every_public_module_has_a_reference_page():
    """The API reference covers `durable_swarm` and each public submodule (their `__all__`)."""
    reference = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md"))
    documented = set(re.findall(r"^::: ([\w.]+)", reference, flags=re.MULTILINE))
    public = {"durable_swarm", "durable_swarm.durable", "durable_swarm.errors",
              "durable_swarm.testing", "durable_swarm.toolkit", "durable_swarm.types",
              "durable_swarm.util", "durable_swarm.repl", "durable_swarm.ag2",
              "durable_swarm.usage", "durable_swarm.tracing", "durable_swarm.web",
              "durable_swarm.guardrails", "durable_swarm.output"}  # fmt: skip
    assert public - documented == set()


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs(block: Block, fake_model: FakeOpenAIServer, tmp_path: Path):
    run_block(block, fake_model, tmp_path)
