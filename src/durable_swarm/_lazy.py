"""Public names imported on first use (PEP 562), and names that moved elsewhere."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REMOVED_IN = "0.2"


def attribute_loader(package: str, homes: Mapping[str, Iterable[str]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: each name is imported from its home module (a
    relative module name such as `".swarm"`; `homes` maps each home to its names) when it is
    first used, then kept in the package's namespace, so later uses cost a dictionary lookup."""
    home_of = {name: home for home, names in homes.items() for name in names}
    namespace = sys.modules[package].__dict__

    def load(name: str) -> Any:
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value

    return load


def warn_moved(old_module: str, name: str, new_module: str) -> None:
    """Warn the code importing `name` from `old_module` that it now lives in `new_module`.

    Called from a module's `__getattr__`, so the warning points at the importing line.
    """
    warnings.warn(
        f"`{old_module}.{name}` has moved and the old name will be removed in durable-swarm "
        f"{REMOVED_IN}: use `from {new_module} import {name}`.",
        DeprecationWarning,
        stacklevel=3,
    )
