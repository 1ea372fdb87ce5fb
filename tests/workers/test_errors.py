"""Bad input to workers and thin clients: clear errors, nothing created, nothing lost."""

from __future__ import annotations

import io
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_swarm import DatabaseUnavailableError, DurableSwarmError
from durable_swarm.durable import DurableClient, Worker, run_worker
from durable_swarm.durable._imports import load_target
from durable_swarm.durable._ownership import ProcessRegistry, ProcessRow
from durable_swarm.durable._workflow import HOST

from .conftest import wait_for

CLOSED_PORT_URL = "postgresql://postgres@127.0.0.1:1/durable_swarm"


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory for throwaway app modules, importable as the worker's working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HOST, "default_client", HOST.default_client)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("errapp_"):
            del sys.modules[name]


def write_module(directory: Path, source: str) -> str:
    name = f"errapp_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(source)
    return name


def test_a_client_on_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing.sqlite"
    with pytest.raises(DatabaseUnavailableError, match="does not exist"):
        DurableClient(str(path))
    assert not path.exists()


def test_a_client_on_a_database_no_worker_set_up(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    path.touch()
    with pytest.raises(DatabaseUnavailableError, match="not a run database yet"):
        DurableClient(str(path))


def test_a_client_on_an_unreachable_server() -> None:
    with pytest.raises(DatabaseUnavailableError, match=r"127\.0\.0\.1") as caught:
        DurableClient(CLOSED_PORT_URL)
    assert "Check that the server is running" in str(caught.value)


def test_a_client_on_a_postgres_database_that_does_not_exist(postgres_base_url: str) -> None:
    url = postgres_base_url.rsplit("/", 1)[0] + f"/dswarm_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(DatabaseUnavailableError, match="does not exist"):
        DurableClient(url)


def test_a_worker_on_an_unreachable_database(app_dir: Path) -> None:
    name = write_module(app_dir, "from durable_swarm import Agent\nagent = Agent(name='E')\n")
    with pytest.raises(DatabaseUnavailableError, match="Cannot open the run database"):
        run_worker(f"{name}:agent", queue="q", concurrency=1, database_url=CLOSED_PORT_URL)
    missing_dir = app_dir / "no" / "such" / "dir" / "runs.sqlite"
    with pytest.raises(DatabaseUnavailableError):
        run_worker(name, queue="q", concurrency=1, database_url=str(missing_dir))


def test_worker_targets_that_cannot_be_loaded(app_dir: Path) -> None:
    with pytest.raises(DurableSwarmError, match="Cannot import module 'errapp_nope'"):
        load_target("errapp_nope:app")
    name = write_module(app_dir, "app = 1\n")
    assert load_target(f"{name}:app") == 1
    with pytest.raises(DurableSwarmError, match="has no attribute 'swarm'"):
        load_target(f"{name}:swarm")
    with pytest.raises(DurableSwarmError, match="is not `module:attribute`"):
        load_target(f"{name}:")
    broken = write_module(app_dir, "import errapp_dependency_that_is_missing\n")
    with pytest.raises(ModuleNotFoundError, match="errapp_dependency_that_is_missing"):
        load_target(broken)  # the app's own missing import is reported as is


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"queue": ""}, "needs a queue name"),
        ({"concurrency": 0}, "concurrency must be a whole number"),
        ({"heartbeat_interval": 0}, "must be > 0"),
        ({"heartbeat_interval": 2.0, "dead_after": 1.0}, "must be longer than"),
    ],
)
def test_worker_settings_are_checked(settings: dict[str, object], message: str) -> None:
    with pytest.raises(DurableSwarmError, match=message):
        Worker("anything", **settings)  # type: ignore[arg-type]


def test_a_module_that_sets_up_dbos_itself_is_refused(app_dir: Path) -> None:
    from dbos import DBOS

    url = "sqlite:///" + str(app_dir / "own.sqlite")
    config = {"name": "own", "system_database_url": url}
    name = write_module(app_dir, f"from dbos import DBOS\nDBOS(config={config!r})\n")
    try:
        with pytest.raises(DurableSwarmError, match="set up or launched DBOS"):
            run_worker(name, queue="q", concurrency=1)
    finally:
        DBOS.destroy()


def test_a_durable_swarm_target_gives_the_worker_its_client_database_and_executor_id(
    app_dir: Path,
) -> None:
    url = "sqlite:///" + str(app_dir / "runs.sqlite")
    name = write_module(
        app_dir,
        "from durable_swarm import Agent, DurableSwarm\n"
        "from durable_swarm.testing import ScriptedClient\n"
        "agent = Agent(name='Target Agent')\n"
        "model = ScriptedClient(['hi'])\n"
        f"swarm = DurableSwarm(model, database_url={url!r}, executor_id='pinned-x')\n",
    )
    out = io.StringIO()
    worker = Worker(f"{name}:swarm", queue="q", concurrency=3, heartbeat_interval=0.2, out=out)
    try:
        worker.start()
        module = sys.modules[name]
        assert HOST.default_client is module.model
        assert (worker.database_url, worker.executor_id) == (url, "pinned-x")
        assert "serving queue 'q'" in out.getvalue()
        assert "Target Agent" in out.getvalue()
    finally:
        worker.shutdown()
    assert out.getvalue().splitlines()[-1].endswith("executor 'pinned-x' stopped")


def test_a_worker_taken_for_dead_registers_again_and_keeps_serving(
    app_dir: Path,
) -> None:
    url = "sqlite:///" + str(app_dir / "runs.sqlite")
    name = write_module(app_dir, "from durable_swarm import Agent\nagent = Agent(name='Paused')\n")
    out = io.StringIO()
    worker = Worker(
        name, queue="q", concurrency=1, database_url=url, heartbeat_interval=0.1, out=out
    )
    worker.start()
    # What a live process does to one silent for too long (here: at once, dead_after=0).
    intruder = ProcessRegistry(url, "intruder", "q", dead_after=0.0)
    intruder.register(lambda seconds: False)  # only a live, registered process claims
    try:
        claimed: list[ProcessRow] = []

        def claim() -> bool:  # the worker may beat between the read and the claim: again
            row = next(r for r in intruder.dead() if r.executor_id == worker.executor_id)
            if intruder.claim(row):
                claimed.append(row)
            return bool(claimed)

        wait_for(claim, "a claim on the live worker's row")
        wait_for(lambda: "was taken for dead" in out.getvalue(), "the worker to notice")
        intruder.release(claimed[0])  # the claimer put its runs back on their queues
        wait_for(
            lambda: any(
                r.executor_id == worker.executor_id and r.claimed_by is None
                for r in intruder._rows("1 = 1")
            ),
            "the worker to register again",
        )
        worker.request_stop()
        worker.serve()  # returns normally: the worker was never stopped
    finally:
        worker.shutdown()
        intruder.close()
    assert "Registering again for new runs" in out.getvalue()
    assert "stopped" in out.getvalue().splitlines()[-1]
