"""What importing durable_swarm costs: each scenario in a fresh interpreter, interleaved, median.

Scenarios: `import durable_swarm`; `from durable_swarm import Swarm, Agent`; an in-memory run on
a scripted client (which imports `openai` for its reply objects); `from durable_swarm import
DurableSwarm` (the durable layer: DBOS, SQLAlchemy); `durable-swarm --version`. Baselines,
measured in the same rounds: an empty interpreter (`pass`), `import openai` (what any Swarm app
pays) and `import dbos`.

For each it prints the median wall time of the whole process, the same minus the empty
interpreter's, the median import time of the scenario's code as `python -X importtime` reports
it (the cumulative time of the modules it imports, those a run imports included; not the
interpreter's start-up), and which of DBOS, SQLAlchemy and `openai` the process loaded.
`--src DIR` measures another source tree (e.g. an older release unpacked with `git archive`);
given twice, both trees are measured in the same rounds, for before/after figures.

    .venv/bin/python benchmarks/import_time.py
    .venv/bin/python benchmarks/import_time.py --quick
    git archive b47b45a src | tar -x -C /tmp/before     # the tree before the lazy imports
    .venv/bin/python benchmarks/import_time.py --src /tmp/before/src --src src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import median, print_table

SRC = Path(__file__).resolve().parents[1] / "src"
WATCHED = ("dbos", "sqlalchemy", "openai")

SCENARIOS = {
    "import durable_swarm": "import durable_swarm",
    "from durable_swarm import Swarm, Agent": "from durable_swarm import Swarm, Agent",
    "in-memory run (scripted client)": (
        "from durable_swarm import Agent, Swarm\n"
        "from durable_swarm.testing import ScriptedClient, text\n"
        "Swarm(ScriptedClient([text('hi')])).run(Agent(), [{'role': 'user', 'content': 'x'}])"
    ),
    "from durable_swarm import DurableSwarm": "from durable_swarm import DurableSwarm",
    "durable-swarm --version": (
        "import contextlib, io\n"
        "from durable_swarm.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--version'])"
    ),
    "baseline: pass": "pass",
    "baseline: import openai": "import openai",
    "baseline: import dbos": "import dbos",
}


MARK = "@@scenario"  # written to stderr before and after the scenario's code


def _probe(code: str) -> str:
    """`code` between two marks, then one JSON line: which watched modules are loaded."""
    mark = f"sys.stderr.write({MARK!r} + '\\n'); sys.stderr.flush()"
    report = f"print(json.dumps([m for m in {WATCHED!r} if m in sys.modules]))"
    return f"import sys\n{mark}\n{code}\n{mark}\nimport json\n{report}"


def _run(code: str, src: Path, importtime: bool) -> tuple[float, float, list[str]]:
    """One fresh interpreter running `code`: wall seconds, import seconds, loaded modules."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    args = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", _probe(code)]
    start = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    # importtime lines: "import time: self | cumulative | name"; top-level ones are not indented.
    # Only the imports between the marks count (not the interpreter's own start-up).
    imported, inside = 0, False
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if line == MARK:
            inside = not inside
        elif inside and len(parts) == 3 and parts[1].strip().isdigit():
            imported += int(parts[1]) if not parts[2].startswith("  ") else 0
    return wall, imported / 1e6, json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, help="rounds of every scenario (default 15)")
    parser.add_argument(
        "--src",
        type=Path,
        action="append",
        help="a source tree to import from (repeat it to compare trees in the same rounds; "
        "default: this checkout's src)",
    )
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 15)
    sources: list[Path] = args.src or [SRC]

    # Bytecode is compiled once first, so every round measures a warm cache, as users see it.
    for src in sources:
        for code in SCENARIOS.values():
            env = {**os.environ, "PYTHONPATH": str(src)}
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    runs = [(src, name) for src in sources for name in SCENARIOS]
    walls: dict[tuple[Path, str], list[float]] = {run: [] for run in runs}
    imports: dict[tuple[Path, str], list[float]] = {run: [] for run in runs}
    loaded: dict[tuple[Path, str], list[str]] = {}
    for _ in range(rounds):  # interleaved: machine load hits every scenario and tree alike
        for src, name in runs:
            wall, _, loaded[src, name] = _run(SCENARIOS[name], src, importtime=False)
            walls[src, name].append(wall)
            imports[src, name].append(_run(SCENARIOS[name], src, importtime=True)[1])

    for src in sources:
        empty = median(walls[src, "baseline: pass"])
        rows = [
            (
                name,
                f"{median(walls[src, name]):.3f}",
                f"{median(walls[src, name]) - empty:.3f}",
                f"{median(imports[src, name]):.3f}",
                ", ".join(loaded[src, name]) or "-",
            )
            for name in SCENARIOS
        ]
        print_table(
            f"Import time, {rounds} interleaved rounds, median seconds (source: {src})",
            ("scenario", "wall", "wall - pass", "importtime", "loads"),
            rows,
        )


if __name__ == "__main__":
    main()
