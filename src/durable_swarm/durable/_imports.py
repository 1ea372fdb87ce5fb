"""Importing the user's code named on a command line (`module` or `module:attr`)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ..errors import DurableSwarmError

__all__ = ["is_model_client", "load_target"]


def load_target(target: str) -> Any:
    """Import `module` or `module:attr` (the working directory is importable) and return the
    module or the attribute (dotted paths allowed)."""
    module_name, _, attr = target.partition(":")
    if not module_name or (":" in target and not attr):
        raise DurableSwarmError(
            f"Worker target {target!r} is not `module:attribute` (e.g. `myapp.agents:swarm`)."
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise  # a module the app imports is missing: the traceback says which
        raise DurableSwarmError(
            f"Cannot import module {module_name!r} for the worker ({e}). Run the worker from "
            "the directory that holds it, or install the package that provides it."
        ) from e
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise DurableSwarmError(
                f"Module {module_name!r} has no attribute {attr!r}; the worker target names a "
                "DurableSwarm, a model client, an Agent, or any object the module defines."
            ) from e
    return obj


def is_model_client(obj: Any) -> bool:
    """Whether `obj` looks like an OpenAI client (`obj.chat.completions.create` is callable)."""
    chat = getattr(obj, "chat", None)
    return callable(getattr(getattr(chat, "completions", None), "create", None))
