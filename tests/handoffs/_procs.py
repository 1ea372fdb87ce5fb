"""Child processes for the restart tests: forked by the shared fork server (`_support.zygote`),
running `handoffs._child.run(config)`; a test starts them, lets them go, kills them, waits for
them, reads them. The machinery is `_support.procs`; this adds what these children leave."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _support import procs
from _support.procs import TIMEOUT


class Zygote(procs.Zygote):
    """The fork server that starts the children of a test session."""

    def __init__(self, log: Path) -> None:
        super().__init__(log, "handoffs._child")


class Child(procs.Child):
    """One child process; its output is in `<work>/<name>.log`."""

    def __init__(self, zygote: procs.Zygote, name: str, work: Path, config: dict[str, Any]) -> None:
        self.waits_path = work / f"{name}.waiting.jsonl"
        super().__init__(zygote, name, work, config)

    def go(self) -> None:
        """Let a child started with `wait_for_go=True` touch the database."""
        (self.work / f"{self.name}.go").write_text("go")

    def waits(self) -> list[dict[str, Any]]:
        """The waits the child saw so far (complete lines only)."""
        if not self.waits_path.exists():
            return []
        return [json.loads(x) for x in self.waits_path.read_text().split("\n")[:-1]]


def wait_for(
    condition: Callable[[], Any], what: str, *children: Child, timeout: float = TIMEOUT
) -> Any:
    """Poll `condition` until it is truthy; fail early, with its output, if one of `children`
    exits meanwhile."""
    return procs.wait_for(condition, what, timeout=timeout, processes=children)


@contextmanager
def children(zygote: procs.Zygote, work: Path, **base: Any) -> Iterator[procs.Children]:
    """The children of one test, all killed at its end."""
    with procs.children(zygote, work, base, Child) as group:
        yield group
