"""`durable-swarm serve` that counts the SQL statements it sends (a child of console.py).

    python _console_serve.py COUNT_FILE SERVE_ARGS...

Every statement any SQLAlchemy engine of the process executes is counted (an engine event);
the count is written to COUNT_FILE ten times a second. The package is imported from the
`PYTHONPATH` the parent gives, so the same child measures another checkout (`--baseline-src`).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import sqlalchemy as sa

statements = 0


def _count(*args: object) -> None:
    global statements
    statements += 1


def _write(path: str) -> None:
    while True:
        with open(path + ".tmp", "w") as f:
            f.write(str(statements))
        os.replace(path + ".tmp", path)
        time.sleep(0.1)


def main() -> None:
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", _count)
    threading.Thread(target=_write, args=(sys.argv[1],), daemon=True).start()
    from durable_swarm.cli import main as cli

    sys.exit(cli(["serve", *sys.argv[2:]]))


if __name__ == "__main__":
    main()
