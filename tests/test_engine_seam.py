"""One seam to DBOS (issue 32, DESIGN.md "The engine"): `durable/_engine.py` is the only module
of the package that imports `dbos` or reaches into it; every other module goes through it.

The private reaches are counted by `scripts/dbos_touches.py`: the count in `_engine.py` may only
go down, and none may appear anywhere else. SQL on DBOS's system tables outside the engine is
held to what is left of it today (the run listing's queries and key rotation's payload
rewrite, over the table definitions `_engine.system_tables` hands out), file by file, and may
only shrink.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "durable_swarm"
ENGINE = PACKAGE / "durable" / "_engine.py"

# The private reaches left in `_engine.py` (see its docstring and
# tests/durable/test_engine_contract.py). Lower it when one goes; never raise it.
ENGINE_TOUCHES = 8

# SQL on DBOS's tables still outside the engine, per file (`sql` touches of the script): the
# queries DBOS has no public call for that have not moved into `_engine.py` yet. Lower these
# as they move; a file not listed here may have none.
SQL_OUTSIDE_ENGINE = {
    "src/durable_swarm/durable/_listing.py": 26,
    "src/durable_swarm/durable/_rotation.py": 9,
}


def _script() -> ModuleType:
    path = ROOT / "scripts" / "dbos_touches.py"
    spec = importlib.util.spec_from_file_location("dbos_touches", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dbos_touches", module)
    spec.loader.exec_module(module)
    return module


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != ENGINE)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_only_the_engine_imports_dbos() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name == "dbos" or name.startswith("dbos."):
                    found.append(f"{_shown(path)}:{node.lineno} imports {name}")
    assert not found, (
        "Only durable/_engine.py may import dbos; go through durable/_engine.py (re-export the "
        "public name there, or add a function for what DBOS has no public call for):\n"
        + "\n".join(found)
    )


def test_no_private_dbos_touch_outside_the_engine() -> None:
    script = _script()
    found = [
        str(t)
        for t in script.touches(_modules(), ROOT)
        if t.kind != "sql"  # held by the test below
    ]
    assert not found, (
        "A private reach into DBOS outside durable/_engine.py; go through durable/_engine.py "
        "(and give it a contract test in tests/durable/test_engine_contract.py):\n"
        + "\n".join(found)
    )


def test_sql_on_dbos_tables_outside_the_engine_only_shrinks() -> None:
    script = _script()
    touches = [t for t in script.touches(_modules(), ROOT) if t.kind == "sql"]
    counts = Counter(t.path for t in touches)
    grown = [
        f"{path}: {count} (at most {SQL_OUTSIDE_ENGINE.get(path, 0)})"
        for path, count in sorted(counts.items())
        if count > SQL_OUTSIDE_ENGINE.get(path, 0)
    ]
    assert not grown, (
        "New SQL on DBOS's system tables outside durable/_engine.py; go through "
        "durable/_engine.py (a query DBOS has no public call for belongs there):\n"
        + "\n".join(grown)
        + "\n"
        + "\n".join(str(t) for t in touches if t.path in {g.split(":")[0] for g in grown})
    )


def test_the_private_reaches_in_the_engine_only_go_down() -> None:
    found = [t for t in _script().touches([PACKAGE], ROOT) if t.path == _shown(ENGINE)]
    assert len(found) <= ENGINE_TOUCHES, (
        f"durable/_engine.py has {len(found)} private DBOS touches, more than the "
        f"{ENGINE_TOUCHES} it had: use DBOS's public API, or, where it has no public call, "
        "document the reach in _engine.py's docstring, add a contract test and raise "
        "ENGINE_TOUCHES with a reason in the commit:\n" + "\n".join(map(str, found))
    )


def test_the_script_sees_a_private_reach() -> None:
    # The counter itself: each kind it reports, on a sample module.
    script = _script()
    source = (
        "import dbos._core as core\n"
        "from dbos import DBOS\n"
        "x = DBOS._recover_pending_workflows\n"
        "class A(core.ActiveWorkflowById): pass\n"
        "core.queue_worker_thread = None\n"
        "q = 'SELECT 1 FROM dbos.workflow_status'\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sample.py"
        path.write_text(source, encoding="utf-8")
        kinds = sorted(t.kind for t in script.touches([path]))
    assert kinds == ["monkeypatch", "private-attr", "private-import", "sql", "subclass"]
