"""Count the places where durable-swarm reaches into DBOS's private parts (issue 32).

Usage: python scripts/dbos_touches.py [PATH ...]   (default: src/durable_swarm)

Prints one line per touch, `file:line  kind  detail`, then the count per kind and in all, and
the count of places (a file's SQL on DBOS's tables counted once).
AST-based; the kinds are:

* private-import: `import dbos._x`, `from dbos._x import ...`, `from dbos import _x`.
* private-attr: an underscore attribute read on a DBOS object: on a name bound to a `dbos`
  import, or a name DBOS defines privately (collected from the installed `dbos` package) that
  this package does not define itself; also `getattr`/`hasattr`/`setattr` with such a name.
* subclass: a class whose base is a class from a private `dbos` module.
* monkeypatch: an assignment to an attribute of a DBOS module or object (a name bound to a
  `dbos` import, or a variable or parameter whose name says it holds one: `dbos`, `sys_db`).
* sql: text naming one of DBOS's system tables (a string that is a table name, or SQL text
  naming one), or a table object read from DBOS's table definitions (`.tables.workflow_status`).
* module-path: a reading of where DBOS's code lives (`dbos.__file__`).

`tests/test_engine_seam.py` imports `touches()` to hold the count in `durable/_engine.py` down.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# DBOS's system tables (dbos/_schemas/system_database.py, DBOS 3.4).
DBOS_TABLES = (
    "workflow_status",
    "workflow_input",
    "workflow_inputs",
    "workflow_output",
    "operation_outputs",
    "notifications",
    "workflow_events",
    "workflow_events_history",
    "streams",
    "workflow_schedules",
    "application_versions",
    "queues",
)
_TABLE_WORD = re.compile(r"\b(?:dbos\.)?(" + "|".join(DBOS_TABLES) + r")\b")
_SQL_TABLE = re.compile(
    r"\b(?:from|join|update|into|table)\s+(?:dbos\.)?(" + "|".join(DBOS_TABLES) + r")\b",
    re.IGNORECASE,
)
# Table names that are also common words: counted as attributes only on a table collection.
_AMBIGUOUS_TABLES = {"queues", "streams"}
# Variable and parameter names that hold a DBOS instance or its system database.
_DBOS_HOLDERS = {"dbos", "sys_db", "dbos_internals", "dbos_queue", "core", "queue_module"}


@dataclass(frozen=True)
class Touch:
    path: str
    line: int
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}  {self.kind:<14} {self.detail}"


def _dbos_dir() -> Path | None:
    try:
        import dbos
    except ImportError:
        return None
    return Path(dbos.__file__).parent


@cache
def dbos_private_names() -> tuple[frozenset[str], frozenset[str]]:
    """The underscore names DBOS defines (attributes, functions, module names) and the class
    names its private modules define, read from the installed package."""
    names: set[str] = set()
    classes: set[str] = set()
    root = _dbos_dir()
    if root is None:
        return frozenset(), frozenset()
    for file in root.rglob("*.py"):
        names.add(file.stem)
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.add(node.name)
                names.add(node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    private = {n for n in names if n.startswith("_") and not n.endswith("__")}
    return frozenset(private), frozenset(classes)


def _own_names(files: Iterable[Path]) -> frozenset[str]:
    """The underscore names this package defines itself (so `self._lock` is not DBOS's)."""
    own: set[str] = set()
    for file in files:
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
    return frozenset(n for n in own if n.startswith("_"))


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            ids.add(id(node.value))
    return ids


def _in_dbos_subclass(tree: ast.AST, private_bound: set[str], classes: frozenset[str]) -> set[int]:
    """ids of the nodes inside classes that subclass a private DBOS class (their own
    `self._key` is DBOS's, counted once as the subclass)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            _private_base(b, private_bound, classes) for b in node.bases
        ):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


def _private_base(base: ast.expr, private_bound: set[str], classes: frozenset[str]) -> bool:
    if isinstance(base, ast.Name):
        return base.id in private_bound
    if isinstance(base, ast.Attribute):
        root = _root(base)
        return (root in private_bound or root in _DBOS_HOLDERS) and base.attr in classes
    return False


def _table_collection(base: ast.expr, table: str) -> bool:
    """Whether `base.<table>` reads a table from a collection of DBOS's table definitions."""
    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
        return False
    named = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return table not in _AMBIGUOUS_TABLES or named in ("tables", "_tables", "t")


def _file_touches(file: Path, shown: str, own: frozenset[str]) -> Iterator[Touch]:
    private, classes = dbos_private_names()
    tree = ast.parse(file.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    bound: set[str] = set()  # names bound to anything imported from dbos
    private_bound: set[str] = set()  # names bound to dbos's private modules or their members
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "dbos" or alias.name.startswith("dbos."):
                    name = alias.asname or alias.name.split(".")[0]
                    bound.add(name)
                    if alias.name.startswith("dbos._"):
                        private_bound.add(name)
                        yield Touch(shown, node.lineno, "private-import", f"import {alias.name}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and (node.module == "dbos" or node.module.startswith("dbos."))
        ):
            for alias in node.names:
                name = alias.asname or alias.name
                bound.add(name)
                if node.module.startswith("dbos._") or alias.name.startswith("_"):
                    private_bound.add(name)
                    yield Touch(
                        shown,
                        node.lineno,
                        "private-import",
                        f"from {node.module} import {alias.name}",
                    )
    in_subclass = _in_dbos_subclass(tree, private_bound, classes)
    holders = bound | _DBOS_HOLDERS
    for node in ast.walk(tree):
        if id(node) in in_subclass:
            continue
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if _private_base(base, private_bound, classes):
                    yield Touch(shown, node.lineno, "subclass", f"{node.name}({ast.unparse(base)})")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and _root(target) in holders:
                    yield Touch(shown, node.lineno, "monkeypatch", ast.unparse(target))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            attr, root = node.attr, _root(node.value)
            if attr == "__file__" and root in bound:
                yield Touch(shown, node.lineno, "module-path", ast.unparse(node))
            elif attr.startswith("_") and not attr.endswith("__"):
                if root in bound or (attr in private and attr not in own):
                    yield Touch(shown, node.lineno, "private-attr", ast.unparse(node))
            elif attr == "tables" and _root(node.value) in holders | {"system_database"}:
                yield Touch(shown, node.lineno, "sql", f"{ast.unparse(node)} (DBOS's tables)")
            elif attr in DBOS_TABLES and _table_collection(node.value, attr):
                yield Touch(shown, node.lineno, "sql", ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "setattr" and node.args and _root(node.args[0]) in holders:
                shown_args = ", ".join(ast.unparse(a) for a in node.args[:2])
                yield Touch(shown, node.lineno, "monkeypatch", f"setattr({shown_args}, ...)")
            elif node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2:
                name = node.args[1]
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and name.value.startswith("_")
                    and (name.value in private or _root(node.args[0]) in holders)
                ):
                    yield Touch(
                        shown, node.lineno, "private-attr", f"{node.func.id}(..., {name.value!r})"
                    )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docs:
                continue
            text = node.value.strip()
            match = _TABLE_WORD.search(text)
            if match is None:
                continue
            if _TABLE_WORD.fullmatch(text):
                yield Touch(shown, node.lineno, "sql", f"table name {match.group(1)}")
            elif found := _SQL_TABLE.search(text):
                yield Touch(shown, node.lineno, "sql", f"SQL naming {found.group(1)}")


def _files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def touches(paths: Iterable[Path], base: Path | None = None) -> list[Touch]:
    """The private DBOS touches in the Python files at `paths` (directories are walked)."""
    files = _files(paths)
    own = _own_names(files)
    found: set[Touch] = set()
    for file in files:
        shown = str(file.relative_to(base)) if base is not None else str(file)
        found.update(_file_touches(file, shown, own))
    return sorted(found, key=lambda t: (t.path, t.line, t.kind, t.detail))


def main(argv: list[str]) -> int:
    base = Path(__file__).resolve().parent.parent
    paths = [Path(a).resolve() for a in argv] or [base / "src" / "durable_swarm"]
    found = touches(paths, base)
    for touch in found:
        print(touch)
    print()
    for kind, count in sorted(Counter(t.kind for t in found).items()):
        print(f"{kind:<14} {count}")
    print(f"{'total':<14} {len(found)}")
    # The same touches as places in the code: each non-SQL touch on its own, and the SQL of one
    # file as one place (its queries depend on DBOS's schema together, through one set of
    # table definitions).
    places = {(t.path, t.line) for t in found if t.kind != "sql"}
    places |= {(t.path, 0) for t in found if t.kind == "sql"}
    sql_files = sorted({t.path for t in found if t.kind == "sql"})
    print(f"{'places':<14} {len(places)} (SQL counted once per file: {', '.join(sql_files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
