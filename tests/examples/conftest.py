"""Fixtures for the examples' tests: the examples directory on `sys.path` (as the examples put
it themselves), no real model configured, and output without colour codes."""

from __future__ import annotations

import logging
import sys

import pytest

from ._helpers import ANSI

_MODEL_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "DURABLE_SWARM_MODEL",
    "EXAMPLES_DURABLE",
)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Examples use their scripted model: no real model is configured."""
    for name in (*_MODEL_ENV, "EXAMPLES_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run_example(capsys):
    """Call an example's `main(argv)` and return what it printed, without colour codes."""

    def run(main, *argv):
        main(list(argv))
        return ANSI.sub("", capsys.readouterr().out)

    return run


@pytest.fixture(autouse=True)
def no_dbos_left_behind():
    """An example run with `--durable` launches DBOS on its own database: stop it after the
    test, so the next test's example can launch on another one. DBOS's console log handler
    was made on the test's captured stderr, closed now: it goes back to the real one."""
    yield
    from durable_swarm.durable import _dbos

    if _dbos.launched_url() is not None:
        _dbos.shutdown()
    for handler in logging.getLogger("dbos").handlers:
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", 0):
            handler.stream = sys.__stderr__  # (setStream would flush the closed one)
