"""Encryption at rest, on SQLite and PostgreSQL, across real processes.

A child process (`_encryption_child.py`) runs `Keeper` with a key against the fake OpenAI
server in this process: its user message, the tool's argument, the tool's result and a context
variable each carry a known secret. Other child processes then read the run with the key,
without it, with a wrong key and with a rotated key list; `runs rotate-keys` re-seals it; the
raw database (the SQLite file's bytes, every row of every PostgreSQL table) never holds a
secret. A run killed (SIGKILL) during a model call is recovered with its key, with no finished
model call repeated and the tool run once.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from _support.procs import CHILD_ENV, ScriptProcess, wait_for
from durable_swarm import Agent, DurableClient, ask_user
from durable_swarm.durable import _sealing, resolve_database_url
from durable_swarm.durable._decisions import DecisionLog, DecisionRecord
from durable_swarm.durable._log import JsonSerializer
from durable_swarm.durable._sealing import Keyring, SealedValue, open_sealed, seal
from durable_swarm.errors import DurableSwarmError, EncryptionKeyError
from durable_swarm.testing import (
    FakeOpenAIServer,
    Fault,
    Reply,
    ScriptedClient,
    ToolCall,
    calls,
    text,
)
from durable_swarm.toolkit import tool

from ._encryption_child import SECRETS

TIMEOUT = 90.0
TESTS_DIR = Path(__file__).resolve().parents[1]


def key(key_id: str) -> str:
    """A new random key `id:base64` (AES-256)."""
    return f"{key_id}:{base64.b64encode(os.urandom(32)).decode()}"


# --- the sealing itself (no database) -----------------------------------------------------------


def test_seal_opens_with_its_key_and_only_with_it():
    ring = Keyring([key("a")])
    sealed = seal({"x": SECRETS["message"]}, bind="run-1", ring=ring)
    assert sealed.startswith("dsx1.a.") and SECRETS["message"] not in sealed
    assert open_sealed(sealed, bind="run-1", ring=ring) == {"x": SECRETS["message"]}
    # another binding (a payload moved to another run), another key of the same id, changed bytes
    with pytest.raises(EncryptionKeyError, match="does not open it"):
        open_sealed(sealed, bind="run-2", ring=ring)
    with pytest.raises(EncryptionKeyError, match="does not open it"):
        open_sealed(sealed, bind="run-1", ring=Keyring([key("a")]))
    marker, key_id, blob = sealed.split(".")
    raw = bytearray(base64.urlsafe_b64decode(blob))
    raw[20] ^= 1
    changed = f"{marker}.{key_id}.{base64.urlsafe_b64encode(bytes(raw)).decode()}"
    with pytest.raises(EncryptionKeyError, match="changed") as caught:
        open_sealed(changed, bind="run-1", run_id="run-1", ring=ring)
    assert "run-1" in str(caught.value) and caught.value.key_id == "a"
    # a key id moved onto the text of another key does not open either
    with pytest.raises(EncryptionKeyError):
        open_sealed(f"dsx1.b.{blob}", bind="run-1", ring=Keyring([key("b")]))
    error = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(error, EncryptionKeyError) and str(error) == str(caught.value)


def test_keys_rotate_first_seals_all_open():
    old, new = key("old"), key("new")
    sealed_old = seal("hello", ring=Keyring([old]))
    both = Keyring([new, old])
    assert open_sealed(sealed_old, ring=both) == "hello"
    assert seal("x", ring=both).startswith("dsx1.new.")
    with pytest.raises(EncryptionKeyError, match="'old'") as caught:
        open_sealed(sealed_old, run_id="r-9", ring=Keyring([new]))
    assert caught.value.key_id == "old" and "r-9" in str(caught.value)


def test_bad_keys_are_refused_with_what_to_do():
    with pytest.raises(DurableSwarmError, match="16, 24 or 32 bytes"):
        Keyring(["a:c2hvcnQ="])
    with pytest.raises(DurableSwarmError, match="given twice"):
        Keyring([key("a"), key("a")])
    with pytest.raises(DurableSwarmError, match="key id"):
        Keyring(["a b:" + base64.b64encode(os.urandom(32)).decode()])
    bare = base64.b64encode(os.urandom(16)).decode()
    assert Keyring([bare]).primary.startswith("k")  # an id derived from the key


def test_a_key_without_the_cryptography_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(EncryptionKeyError, match=r"durable-swarm\[crypto\]"):
        Keyring([key("a")])


def test_the_serializer_keeps_only_listing_fields_readable(monkeypatch):
    serializer = JsonSerializer()
    monkeypatch.setenv(_sealing.ENV_VAR, key("a"))
    spec = {
        "args": [
            {
                "agent": {"name": "Keeper", "fingerprint": "f"},
                "swarm": "default",
                "messages": [{"role": "user", "content": SECRETS["message"]}],
                "context_variables": {"token": SECRETS["context"]},
            }
        ],
        "kwargs": {},
    }
    stored = serializer.serialize(spec)
    assert SECRETS["message"] not in stored and SECRETS["context"] not in stored
    assert json.loads(stored)["value"]["args"][0]["agent"]["name"] == "Keeper"
    assert serializer.deserialize(stored) == spec
    error = serializer.serialize(ValueError(SECRETS["result"]))
    assert SECRETS["result"] not in error
    # read where the key is missing: the readable fields, marked; an error says it is sealed
    monkeypatch.setenv(_sealing.ENV_VAR, key("b"))
    locked = serializer.deserialize(stored)
    assert isinstance(locked, SealedValue) and locked.key_id == "a"
    assert locked["args"][0]["agent"]["name"] == "Keeper" and "messages" not in locked["args"][0]
    assert isinstance(serializer.deserialize(error), EncryptionKeyError)
    # without any key, payloads are written as before
    monkeypatch.delenv(_sealing.ENV_VAR)
    assert json.loads(serializer.serialize({"a": 1})) == {"schema_version": 3, "value": {"a": 1}}


# --- runs in other processes ----------------------------------------------------------------------


class Model:
    """First a call of `stash` with the secret argument, then a final answer. `hold` makes the
    first request of the second call wait at the server (a test kills its caller meanwhile)."""

    def __init__(self, hold: bool = False) -> None:
        self.arrivals: Counter[int] = Counter()
        self.hold = hold
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        stage = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.arrivals[stage] += 1
            first = self.arrivals[stage] == 1
        usage = {"prompt_tokens": 10, "completion_tokens": 5}
        if stage == 0:
            return calls(ToolCall("stash", {"note": SECRETS["argument"]}), usage=usage)
        answer = text("kept it", usage=usage)
        return Fault.delay(300.0, answer) if self.hold and first else answer


class Child(ScriptProcess):
    def __init__(self, name: str, work: Path, config: dict[str, Any]) -> None:
        self.result_path = work / f"{name}.result.json"
        config = {**config, "result": str(self.result_path)}
        super().__init__(name, "durable._encryption_child", work, CHILD_ENV, config)

    def result(self) -> dict[str, Any]:
        code = self.proc.wait(timeout=TIMEOUT)
        assert code == 0, f"{self.name} exited with {code}:\n{self.output()[-6000:]}"
        data: dict[str, Any] = json.loads(self.result_path.read_text())
        return data


@contextmanager
def children(database_url: str, work: Path) -> Iterator[Callable[..., Child]]:
    started: list[Child] = []

    def start(name: str, **config: Any) -> Child:
        child = Child(
            f"{name}-{uuid.uuid4().hex[:6]}",
            work,
            {"database_url": database_url, "tool_log": str(work / "tool.log"), **config},
        )
        started.append(child)
        return child

    try:
        yield start
    finally:
        for child in started:
            child.kill()


@pytest.fixture(autouse=True)
def no_key_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_sealing.ENV_VAR, raising=False)
    _sealing.configure(None)


@pytest.fixture(scope="module")
def enc_database_url(make_database_url: Callable[[str], str]) -> str:
    return make_database_url("encryption")


def write_run(database_url: str, work: Path, run_key: str) -> str:
    """A finished run of `Keeper` written with `run_key` by a child process; its id."""
    run_id = f"enc-{uuid.uuid4().hex[:10]}"
    with FakeOpenAIServer(Model()) as server, children(database_url, work) as start:
        result = start(
            "writer",
            action="run",
            key=run_key,
            base_url=server.base_url,
            executor_id=f"enc-{uuid.uuid4().hex[:8]}",
            run_id=run_id,
        ).result()
    assert result == {"status": "succeeded", "error": None}
    return run_id


def read_run(database_url: str, work: Path, run_id: str, run_key: str | None) -> dict[str, Any]:
    with children(database_url, work) as start:
        return start("reader", action="read", key=run_key, run_id=run_id).result()


def assert_readable(seen: dict[str, Any], run_id: str) -> None:
    assert "error" not in seen, seen
    assert seen["status"] == "succeeded" and seen["encrypted"] is None
    contents = json.dumps(seen["messages"])
    for what in ("message", "argument", "result"):
        assert SECRETS[what] in contents, what
    assert seen["context_variables"] == {"token": SECRETS["context"], "kept": SECRETS["argument"]}
    assert seen["messages"][-1]["content"] == "kept it"
    assert run_id in seen["listed"]


def raw_database_text(database_url: str) -> str:
    """Everything the database holds, as text: the SQLite file's bytes (with its WAL), or every
    row of every table of every schema of the PostgreSQL database."""
    if not database_url.startswith("postgresql"):
        path = Path(database_url.removeprefix("sqlite:///"))
        files = [str(p) for p in (path, Path(f"{path}-wal")) if p.exists()]
        assert files
        # Read by another process: closing a file descriptor of the database in this one would
        # drop the POSIX locks of this process's own SQLite connections to it (a way to corrupt
        # SQLite that its documentation warns about).
        read = subprocess.run(["cat", *files], capture_output=True, check=True, timeout=60)
        return read.stdout.decode("latin-1")
    engine = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    found = []
    with engine.connect() as conn:
        tables = conn.execute(
            sa.text(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE "
                "table_schema NOT IN ('pg_catalog', 'information_schema') "
                "AND table_type = 'BASE TABLE'"
            )
        ).all()
        assert any(name == "operation_outputs" for _, name in tables)
        for schema, name in tables:
            rows = conn.execute(sa.text(f'SELECT t::text FROM "{schema}"."{name}" t')).all()
            found.extend(row[0] for row in rows)
    engine.dispose()
    return "\n".join(found)


def assert_no_secret(database_url: str) -> None:
    raw = raw_database_text(database_url)
    assert "Keeper" in raw  # the listing fields are there to read
    for what, secret in SECRETS.items():
        assert secret not in raw, f"the {what} secret is stored in plain text"


@pytest.fixture(scope="module")
def sealed_run(
    enc_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, Path]:
    work = tmp_path_factory.mktemp("encryption")
    run_key = key("first")
    return write_run(enc_database_url, work, run_key), run_key, work


def test_a_run_reads_in_another_process_with_its_key(enc_database_url, sealed_run):
    run_id, run_key, work = sealed_run
    seen = read_run(enc_database_url, work, run_id, run_key)
    assert_readable(seen, run_id)
    assert seen["agent"] == "Keeper" and seen["total_tokens"] == 30


def test_the_database_holds_no_secret_in_plain_text(enc_database_url, sealed_run):
    assert_no_secret(enc_database_url)


def test_without_the_key_contents_say_encrypted_and_listings_work(enc_database_url, sealed_run):
    run_id, _, work = sealed_run
    seen = read_run(enc_database_url, work, run_id, None)
    assert "error" not in seen, seen
    assert seen["encrypted"] == "first"
    assert seen["status"] == "succeeded" and seen["agent"] == "Keeper"
    assert seen["total_tokens"] == 30  # usage stays readable
    assert run_id in seen["listed"]
    assert not any(secret in json.dumps(seen) for secret in SECRETS.values())
    assert ["tool", "stash"] in seen["steps"]

    env = {k: v for k, v in os.environ.items() if k != _sealing.ENV_VAR}
    shown = cli(env, "runs", "show", run_id, "--messages", "--database-url", enc_database_url)
    assert shown.returncode == 0, shown.stderr
    assert "encrypted (needs key 'first')" in shown.stdout and "Keeper" in shown.stdout
    listed = cli(env, "runs", "list", "--database-url", enc_database_url)
    assert listed.returncode == 0 and run_id in listed.stdout
    as_json = cli(env, "runs", "show", run_id, "--json", "--database-url", enc_database_url)
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["encrypted"] == "first"

    # the console's views of the run, read in this process (which has no key)
    from durable_swarm.web._views import run_detail

    with DurableClient(enc_database_url) as client:
        detail = run_detail(client.get_run(run_id))
    assert detail["encrypted"] == "first" and detail["agent"] == "Keeper"
    tool = next(s for s in detail["steps"] if s["kind"] == "tool")
    assert tool["result"] == "encrypted (needs key 'first')"
    assert not any(secret in json.dumps(detail, default=str) for secret in SECRETS.values())


def test_a_wrong_key_of_the_same_id_is_a_clear_error(enc_database_url, sealed_run):
    run_id, _, work = sealed_run
    seen = read_run(enc_database_url, work, run_id, key("first"))
    assert seen.get("error_type") == "EncryptionKeyError", seen
    assert run_id in seen["error"] and "'first'" in seen["error"]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_swarm", *args],
        env={**env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_rotation_re_seals_runs_with_the_new_key(enc_database_url, tmp_path):
    old, new = key("old"), key("new")
    run_id = write_run(enc_database_url, tmp_path, old)
    # the new key first, the old one second: the run still reads
    assert_readable(read_run(enc_database_url, tmp_path, run_id, f"{new},{old}"), run_id)
    assert read_run(enc_database_url, tmp_path, run_id, new)["encrypted"] == "old"

    env = {**os.environ, _sealing.ENV_VAR: f"{new},{old}"}
    rotated = cli(
        env, "runs", "rotate-keys", "--batch-size", "2", "--database-url", enc_database_url
    )
    # exit code 1: the other tests' runs, sealed with keys this process lacks, are left as they are
    assert rotated.returncode == 1, rotated.stdout + rotated.stderr
    assert "Re-sealed" in rotated.stdout and "'new'" in rotated.stdout
    assert "sealed with the key 'first', which is not in this process's keys" in rotated.stdout
    again = cli(env, "runs", "rotate-keys", "--json", "--database-url", enc_database_url)
    report = json.loads(again.stdout)
    assert report["resealed"] == 0, report  # resumable: nothing is left to do
    # runs sealed with keys this process lacks (the other tests' runs) are reported, untouched
    assert set(report["missing_keys"]) <= {"first"}

    assert_readable(read_run(enc_database_url, tmp_path, run_id, new), run_id)
    assert read_run(enc_database_url, tmp_path, run_id, old)["encrypted"] == "new"
    assert_no_secret(enc_database_url)


def test_rotation_encrypts_runs_written_without_a_key(enc_database_url, tmp_path):
    run_id = write_run(enc_database_url, tmp_path, None)  # type: ignore[arg-type]
    assert SECRETS["context"] in raw_database_text(enc_database_url)
    new = key("later")
    env = {**os.environ, _sealing.ENV_VAR: new}
    rotated = cli(env, "runs", "rotate-keys", "--json", "--database-url", enc_database_url)
    assert json.loads(rotated.stdout)["by_table"]["operation_outputs"] >= 2, rotated.stderr
    assert_readable(read_run(enc_database_url, tmp_path, run_id, new), run_id)
    assert_no_secret(enc_database_url)


def test_tampered_ciphertext_is_a_clear_error(enc_database_url, tmp_path):
    run_key = key("tamper")
    run_id = write_run(enc_database_url, tmp_path, run_key)
    url = enc_database_url
    engine = sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://")
        if url.startswith("postgresql")
        else f"sqlite:///{url}"
    )
    table = "dbos.operation_outputs" if url.startswith("postgresql") else "operation_outputs"
    with engine.begin() as conn:
        function_id, output = conn.execute(
            sa.text(
                f"SELECT function_id, output FROM {table} WHERE workflow_uuid = :id "
                "AND function_name = 'tool:stash'"
            ),
            {"id": run_id},
        ).one()
        payload = json.loads(output)
        marker, key_id, blob = payload["sealed"].split(".")
        raw = bytearray(base64.urlsafe_b64decode(blob))
        raw[-1] ^= 0x40
        payload["sealed"] = f"{marker}.{key_id}.{base64.urlsafe_b64encode(bytes(raw)).decode()}"
        conn.execute(
            sa.text(
                f"UPDATE {table} SET output = :out WHERE workflow_uuid = :id AND function_id = :f"
            ),
            {"out": json.dumps(payload), "id": run_id, "f": function_id},
        )
    engine.dispose()
    seen = read_run(enc_database_url, tmp_path, run_id, run_key)
    assert seen["error_type"] == "EncryptionKeyError"
    assert "changed" in seen["error"] and run_id in seen["error"]


def test_a_decision_message_is_stored_sealed(enc_database_url, sealed_run, monkeypatch):
    run_id = f"enc-decision-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(_sealing.ENV_VAR, key("d"))
    log = DecisionLog(resolve_database_url(enc_database_url))
    log.record(DecisionRecord(run_id, 1, "call-1", False, SECRETS["message"] + "!", "ann", "now"))
    assert SECRETS["message"] + "!" not in raw_database_text(enc_database_url)
    found = log.find(run_id, wait_id=1)
    assert found is not None and found.message == SECRETS["message"] + "!"
    monkeypatch.setenv(_sealing.ENV_VAR, key("other"))
    with pytest.raises(EncryptionKeyError, match=run_id):
        log.find(run_id, wait_id=1)


@pytest.mark.crash
def test_a_run_killed_mid_call_recovers_with_its_key(enc_database_url, tmp_path):
    run_key = key("crash")
    model = Model(hold=True)
    base = {
        "executor_id": f"enc-crash-{uuid.uuid4().hex[:8]}",
        "run_id": f"enc-crash-{uuid.uuid4().hex[:10]}",
        "key": run_key,
    }
    with FakeOpenAIServer(model) as server, children(enc_database_url, tmp_path) as start:
        first = start("first", action="run", wait=True, base_url=server.base_url, **base)
        wait_for(lambda: model.arrivals[1], "the held model call", processes=[first])
        first.kill()
        assert first.proc.returncode == -signal.SIGKILL
        result = start("second", action="recover", base_url=server.base_url, **base).result()
    assert result == {"status": "succeeded", "error": None}
    assert model.arrivals == Counter({0: 1, 1: 2})  # the finished call was not made again
    assert (tmp_path / "tool.log").read_text() == SECRETS["argument"] + "\n"  # the tool ran once
    assert_readable(read_run(enc_database_url, tmp_path, base["run_id"], run_key), base["run_id"])
    assert_no_secret(enc_database_url)


@pytest.mark.crash
def test_a_process_without_the_key_leaves_the_run_pending_and_one_with_it_finishes(
    enc_database_url, tmp_path
):
    run_key = key("pending")
    model = Model(hold=True)
    base = {
        "executor_id": f"enc-nokey-{uuid.uuid4().hex[:8]}",
        "run_id": f"enc-nokey-{uuid.uuid4().hex[:10]}",
    }
    with FakeOpenAIServer(model) as server, children(enc_database_url, tmp_path) as start:
        first = start(
            "first", action="run", wait=True, base_url=server.base_url, key=run_key, **base
        )
        wait_for(lambda: model.arrivals[1], "the held model call", processes=[first])
        first.kill()
        reader = DurableClient(enc_database_url)  # this process has no key
        try:
            # recovered by a process without the key: it waits, saying for what, and runs nothing
            keyless = start("keyless", action="recover", base_url=server.base_url, **base)
            info = wait_for(
                lambda: (lambda i: i if i.problem else None)(reader.get_run(base["run_id"])),
                "the run's notice",
                processes=[keyless],
            )
            assert info.status == "pending" and info.encrypted == "pending"
            assert "encryption key 'pending'" in info.problem
            assert model.arrivals[1] == 1  # the keyless process called no model
            keyless.kill()
        finally:
            reader.close()
        result = start(
            "keyed", action="recover", base_url=server.base_url, key=run_key, **base
        ).result()
    assert result == {"status": "succeeded", "error": None}
    assert model.arrivals == Counter({0: 1, 1: 2})
    assert (tmp_path / "tool.log").read_text() == SECRETS["argument"] + "\n"


def test_contract_the_dbos_payload_columns_rotation_rewrites():
    """`_rotation._rewrite_dbos_payloads` is this library's one write to DBOS's tables: it
    re-seals the payload columns of `DBOS_PAYLOAD_COLUMNS`. A DBOS release that renames them,
    changes their keys, or stores payloads in a column not listed fails here."""
    from dbos._schemas.system_database import SystemSchema

    from durable_swarm.durable._rotation import DBOS_PAYLOAD_COLUMNS

    listed = {name: (keys, run, columns) for name, keys, run, columns in DBOS_PAYLOAD_COLUMNS}
    for name, (keys, run, columns) in listed.items():
        table = getattr(SystemSchema, name, None)
        assert table is not None, f"DBOS no longer has the table {name}: update rotation"
        found = {c.name for c in table.columns}
        missing = [c for c in (*keys, run, *columns) if c not in found]
        assert not missing, f"DBOS's {name} has no column {missing}: update DBOS_PAYLOAD_COLUMNS"
        primary = tuple(c.name for c in table.primary_key.columns)
        assert set(primary) == set(keys), (
            f"DBOS's {name} is keyed by {primary}, not {keys}: update DBOS_PAYLOAD_COLUMNS"
        )
    # every table of DBOS's that records how its payloads are serialized is listed
    serialized = {
        t.name for t in SystemSchema.metadata_obj.sorted_tables if "serialization" in t.columns
    }
    assert serialized <= set(listed), (
        f"DBOS stores serialized payloads in {sorted(serialized - set(listed))}, which key "
        "rotation does not re-seal: add them to DBOS_PAYLOAD_COLUMNS"
    )


@tool(needs_approval=True)
def transfer(amount: int, to: str) -> str:
    """Transfer money."""
    return f"sent {amount} to {to}"


def _waiting_script(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "user" and "question" in str(last["content"]):
        return calls(ToolCall("ask_user", {"question": f"Which {SECRETS['argument']}?"}))
    if last["role"] == "user" and "pay" in str(last["content"]):
        return calls(ToolCall("transfer", {"amount": 42, "to": SECRETS["context"]}))
    return f"You said: {last['content']}"


def _wait(client: DurableClient, run_id: str, status: str) -> None:
    wait_for(lambda: client.get_run(run_id).status == status, f"{run_id} to be {status}")


def test_without_the_key_no_one_answers_blind_or_reads_a_result_or_stream(
    durable_swarm_factory, database_url, run_id, monkeypatch
):
    live = key("live")
    monkeypatch.setenv(_sealing.ENV_VAR, live)
    swarm = durable_swarm_factory(ScriptedClient(_waiting_script))
    agent = Agent(name="Teller", functions=[ask_user, transfer])
    asks, pays, streamed = f"{run_id}-ask", f"{run_id}-pay", f"{run_id}-stream"
    swarm.start(agent, [{"role": "user", "content": "a question"}], run_id=asks)
    swarm.start(agent, [{"role": "user", "content": "please pay"}], run_id=pays)
    chunks = swarm.run(
        agent, [{"role": "user", "content": SECRETS["message"]}], run_id=streamed, stream=True
    )
    assert list(chunks)[-1]["response"].messages  # a stream: Swarm's generator
    with DurableClient(database_url) as client:
        _wait(client, asks, "waiting_for_input")
        _wait(client, pays, "waiting_for_approval")
        call_id = client.get_run(pays).waiting_for["tool_call"]["id"]
        assert list(client.handle(streamed).events())[-1]["response"].messages

        monkeypatch.delenv(_sealing.ENV_VAR)  # this process has no key from here on
        with pytest.raises(EncryptionKeyError, match=asks):
            client.send_input(asks, "blue")
        with pytest.raises(EncryptionKeyError, match=pays):
            client.approve(pays, call_id)
        [approval] = [a for a in client.list_approvals() if a.run_id == pays]
        assert approval.tool == "encrypted" and SECRETS["context"] not in approval.arguments
        with pytest.raises(EncryptionKeyError, match=streamed):
            client.handle(streamed).result()
        with pytest.raises(EncryptionKeyError, match=streamed):
            list(client.handle(streamed).events())
        assert client.get_run(asks).status == "waiting_for_input"  # listing fields still read

        monkeypatch.setenv(_sealing.ENV_VAR, live)
        client.send_input(asks, "blue")
        client.approve(pays, call_id)
        _wait(client, asks, "succeeded")
        _wait(client, pays, "succeeded")
        assert client.get_run(asks).messages[-1]["content"] == "You said: blue"
    raw = raw_database_text(database_url)
    assert "Teller" in raw
    for secret in (SECRETS["message"], SECRETS["argument"], SECRETS["context"]):
        assert secret not in raw  # the question, the tool call waiting, the stream chunks


APP_DBOS = """
import sys, tempfile
from dbos import DBOS
from durable_swarm import Agent, DurableSwarm
from durable_swarm.durable import JsonSerializer
from durable_swarm.errors import DurableSwarmError
from durable_swarm.testing import ScriptedClient, text

url = "sqlite:///" + tempfile.mkdtemp() + "/app.sqlite"
config = {"name": "my-app", "system_database_url": url, "application_version": "v1"}
if sys.argv[1] == "json":
    config["serializer"] = JsonSerializer()
DBOS(config=config)
DBOS.launch()
swarm = DurableSwarm(ScriptedClient([text("Hello!")]), encryption_key=sys.argv[2])
try:
    swarm.run(Agent(name="Support"), [{"role": "user", "content": "Hi"}], run_id="hi")
except DurableSwarmError as e:
    print("REFUSED", e)
else:
    print("RAN", swarm.get_run("hi").messages[-1]["content"])
DBOS.destroy()
"""


@pytest.mark.parametrize("serializer", ["default", "json"])
def test_an_app_dbos_without_the_serializer_is_refused_with_a_key(serializer, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", APP_DBOS, serializer, key("app")],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if serializer == "json":
        assert done.stdout.startswith("RAN Hello!")
    else:
        assert done.stdout.startswith("REFUSED") and "JsonSerializer()" in done.stdout


@pytest.mark.crash
def test_rotation_while_a_run_is_in_flight_leaves_it_needing_only_the_new_key(
    enc_database_url, tmp_path
):
    old, new = key("flight-old"), key("flight-new")
    model = Model(hold=True)
    base = {
        "executor_id": f"enc-flight-{uuid.uuid4().hex[:8]}",
        "run_id": f"enc-flight-{uuid.uuid4().hex[:10]}",
    }
    with FakeOpenAIServer(model) as server, children(enc_database_url, tmp_path) as start:
        first = start("first", action="run", wait=True, base_url=server.base_url, key=old, **base)
        wait_for(lambda: model.arrivals[1], "the held model call", processes=[first])
        env = {**os.environ, _sealing.ENV_VAR: f"{new},{old}"}
        rotated = cli(env, "runs", "rotate-keys", "--json", "--database-url", enc_database_url)
        assert json.loads(rotated.stdout)["resealed"] >= 3, rotated.stderr  # input, 2 steps
        first.kill()
        # a process with only the new key takes the run over: every payload it reads opens
        result = start("second", action="recover", base_url=server.base_url, key=new, **base)
        assert result.result() == {"status": "succeeded", "error": None}
    assert model.arrivals == Counter({0: 1, 1: 2})
    assert (tmp_path / "tool.log").read_text() == SECRETS["argument"] + "\n"
    assert_readable(read_run(enc_database_url, tmp_path, base["run_id"], new), base["run_id"])
    assert read_run(enc_database_url, tmp_path, base["run_id"], old)["encrypted"] == "flight-new"
