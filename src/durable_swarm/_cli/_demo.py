"""`durable-swarm demo [NAME]`: find the examples and run one of them."""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

from ._render import JSON_SCHEMA_VERSION, dumps
from ._store import CliError
from ._style import Style, clean

__all__ = ["DEFAULT_DEMO", "cmd_demo", "discover", "examples_dir"]

DEFAULT_DEMO = "refund"
# The script that runs a directory's example, in order of preference.
ENTRY_POINTS = ("main.py", "run.py", "demo.py", "__main__.py")


def examples_dir() -> Path | None:
    """Where the examples are: `DURABLE_SWARM_EXAMPLES`, else `./examples`, else the examples
    beside this package's source (a clone of the repository)."""
    candidates = []
    if os.environ.get("DURABLE_SWARM_EXAMPLES"):
        candidates.append(Path(os.environ["DURABLE_SWARM_EXAMPLES"]))
    candidates.append(Path.cwd() / "examples")
    candidates.append(Path(__file__).resolve().parents[3] / "examples")
    for candidate in candidates:
        if (candidate / "_common.py").is_file():
            return candidate.resolve()
    return None


def _runnable(path: Path) -> bool:
    """A script meant to be run: it has an `if __name__ == "__main__":` block."""
    try:
        return '__name__ == "__main__"' in path.read_text(encoding="utf-8")
    except OSError:
        return False


def describe(path: Path) -> str:
    """The first line of a script's docstring."""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def discover(root: Path) -> dict[str, Path]:
    """Every runnable example by name: a script at the top under its name, a directory's entry
    script (main.py, run.py, ...) under the directory's name (`airline`), other scripts under
    their dotted path (`basic.bare_minimum`, `airline.evals.function_evals`)."""
    demos = {p.stem: p for p in sorted(root.glob("*.py")) if not p.name.startswith("_")}
    demos = {name: path for name, path in demos.items() if _runnable(path)}
    for directory in sorted(p for p in root.iterdir() if p.is_dir()):
        if directory.name.startswith((".", "_")):
            continue
        entry = next(
            (directory / n for n in ENTRY_POINTS if _runnable(directory / n)),
            directory / f"{directory.name}.py",
        )
        if _runnable(entry):
            demos[directory.name] = entry
        for script in sorted(directory.rglob("*.py")):
            parts = script.relative_to(root).with_suffix("").parts
            if script == entry or any(p.startswith(("_", ".")) for p in parts):
                continue
            if _runnable(script):
                demos[".".join(parts)] = script
    return demos


def cmd_demo(args: argparse.Namespace, style: Style) -> int:
    """`demo`: list the examples, or run one (by default the refund demo) with its options."""
    root = examples_dir()
    if root is None:
        raise CliError(
            "Cannot find the examples: run this from a clone of the durable-swarm repository "
            "(the directory that holds examples/), or set DURABLE_SWARM_EXAMPLES to its "
            "examples directory."
        )
    demos = discover(root)
    if args.list:
        if args.json:
            listed = [
                {"name": n, "path": str(p), "description": describe(p)} for n, p in demos.items()
            ]
            print(dumps({"demos": listed, "schema_version": JSON_SCHEMA_VERSION}))
            return 0
        width = max(map(len, demos), default=0)
        print(style.paint(f"Demos in {root} (run one with: durable-swarm demo NAME):", "bold"))
        for name, path in demos.items():
            print(f"  {clean(name).ljust(width)}  {style.paint(describe(path), 'dim')}")
        return 0
    name = args.name or DEFAULT_DEMO
    if name not in demos:
        available = ", ".join(demos) or "none"
        if name == DEFAULT_DEMO:
            raise CliError(
                f"The refund demo is not available: {root / DEFAULT_DEMO} does not exist (yet). "
                f"Run another demo with `durable-swarm demo NAME`; available: {available}."
            )
        raise CliError(f"No demo named {name!r} in {root}. Available: {available}.")
    env = dict(os.environ)
    if getattr(args, "database_url", None):
        env["DURABLE_SWARM_DATABASE_URL"] = args.database_url
    if args.model:
        env["DURABLE_SWARM_MODEL"] = args.model
    if args.base_url:
        env["OPENAI_BASE_URL"] = args.base_url
    command = [sys.executable, str(demos[name]), *args.args]
    try:
        return subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return 130
