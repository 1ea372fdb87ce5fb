"""Sessions of `DurableSwarm` and `DurableClient`, stored in the run database: a conversation
carried over runs (the fake server, over real HTTP, sees the earlier messages), one run of a
session at a time (never interleaved), and reading, clearing and deleting sessions. On SQLite
and PostgreSQL."""

from __future__ import annotations

import threading
import uuid

import pytest

from durable_swarm import (
    DurableClient,
    DurableSwarmError,
    SessionBusyError,
    SessionNotFoundError,
)
from durable_swarm.durable._sessions import SessionStore, decode_payload, encode_payload
from durable_swarm.testing import FakeOpenAIServer, Fault

from ._model import SessionModel, clerk


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def server():
    with FakeOpenAIServer(SessionModel()) as fake:
        yield fake


@pytest.fixture
def session() -> str:
    return f"customer-{uuid.uuid4().hex[:8]}"


def test_a_session_carries_the_conversation_over_three_runs(durable_swarm_factory, server, session):
    swarm = durable_swarm_factory(server.client())
    first = swarm.run(clerk, user("hello"), session=session)
    second = swarm.run(clerk, user("my name is Ada"), session=session)
    third = swarm.run(clerk, user("what is my name?"), session=session)

    # the model saw every earlier message (system + 1, + 3, + 5)
    assert [r.messages[-1]["content"] for r in (first, second, third)] == [
        "seen 2: hello",
        "seen 4: my name is Ada",
        "seen 6: what is my name?",
    ]
    last = server.requests[-1]["messages"]
    assert [m["content"] for m in last[1:]] == [
        "hello", "seen 2: hello", "my name is Ada", "seen 4: my name is Ada", "what is my name?",
    ]  # fmt: skip
    # each Response holds only its run's new messages, as Swarm's does
    assert [m["role"] for m in third.messages] == ["assistant"]
    info = swarm.get_session(session)
    assert info.runs == 3 and info.held_by is None and not info.compacted
    contents = [m["content"] for m in info.messages]
    assert contents[-2:] == ["what is my name?", "seen 6: what is my name?"]
    assert len(info.messages) == 6
    assert session in [s.name for s in swarm.list_sessions()]


def test_a_run_without_a_session_is_unchanged(durable_swarm_factory, server, run_id):
    swarm = durable_swarm_factory(server.client())
    response = swarm.run(clerk, user("hello"), run_id=run_id)
    assert response.messages[-1]["content"] == "seen 2: hello"
    spec = swarm.get_run(run_id)
    assert spec.input_messages == 1
    assert not any(s.kind == "session" for s in spec.steps)


def test_the_session_run_logs_its_earlier_messages_and_a_session_step(
    durable_swarm_factory, server, session
):
    swarm = durable_swarm_factory(server.client())
    swarm.run(clerk, user("look up tea please"), session=session)
    handle = swarm.start(clerk, user("thanks"), session=session)
    handle.result()
    info = swarm.get_run(handle.run_id)
    assert info.input_messages == 5  # user, tool call, tool result, answer, then "thanks"
    assert [m["role"] for m in info.messages] == [
        "user", "assistant", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip
    step = info.steps[-1]
    assert (step.kind, step.name) == ("session", session)
    assert step.output == {"session": session, "messages": 6, "added": True}
    assert swarm.get_session(session).last_run == handle.run_id


def test_a_second_run_of_a_busy_session_is_refused_naming_the_run_that_holds_it(
    durable_swarm_factory, session
):
    model = SessionModel()
    model.hold("slow question", seconds=3.0)
    with FakeOpenAIServer(model) as server:
        swarm = durable_swarm_factory(server.client())
        first = swarm.start(clerk, user("slow question"), session=session)
        with pytest.raises(SessionBusyError) as refused:
            swarm.run(clerk, user("me too"), session=session)
        error = refused.value
        assert error.session == session and error.run_id == first.run_id
        assert first.run_id in str(error) and "Nothing was started" in str(error)
        assert swarm.get_session(session).held_by == first.run_id
        with pytest.raises(SessionBusyError):
            swarm.clear_session(session)
        with pytest.raises(SessionBusyError):
            swarm.delete_session(session)
        first.result()
        # free again: the next run starts after the first one's messages
        assert swarm.run(clerk, user("me too"), session=session).messages[-1]["content"] == (
            "seen 4: me too"
        )
        assert "me too" not in str(server.requests[0])


def test_concurrent_runs_of_one_session_never_interleave(durable_swarm_factory, server, session):
    swarm = durable_swarm_factory(server.client())
    refusals: list[SessionBusyError] = []
    errors: list[BaseException] = []

    def chat(who: int) -> None:
        for turn in range(3):
            while True:
                try:
                    swarm.run(clerk, user(f"user {who} turn {turn}"), session=session)
                    break
                except SessionBusyError as e:
                    refusals.append(e)
                except BaseException as e:
                    errors.append(e)
                    return

    threads = [threading.Thread(target=chat, args=(who,)) for who in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    messages = swarm.get_session(session).messages
    assert len(messages) == 18
    # every run's answer follows its own line, and saw exactly the messages before it
    for position in range(0, 18, 2):
        line, answer = messages[position], messages[position + 1]
        assert answer["content"] == f"seen {position + 2}: {line['content']}"
    lines = sorted(m["content"] for m in messages[::2])
    assert lines == sorted(f"user {w} turn {t}" for w in range(3) for t in range(3))
    assert swarm.get_session(session).runs == 9


def test_list_read_clear_and_delete_sessions(durable_swarm_factory, server, session):
    swarm = durable_swarm_factory(server.client())
    swarm.run(clerk, user("hello"), session=session)
    assert len(swarm.get_session(session).messages) == 2
    swarm.clear_session(session)
    cleared = swarm.get_session(session)
    assert cleared.messages == [] and cleared.runs == 1
    assert swarm.run(clerk, user("again"), session=session).messages[-1]["content"] == (
        "seen 2: again"
    )
    swarm.delete_session(session)
    assert session not in [s.name for s in swarm.list_sessions()]
    with pytest.raises(SessionNotFoundError) as missing:
        swarm.get_session(session)
    assert session in str(missing.value)
    with pytest.raises(SessionNotFoundError):
        swarm.delete_session(session)
    with pytest.raises(SessionNotFoundError):
        swarm.clear_session(session)


def test_a_thin_client_reads_and_changes_the_same_sessions(
    durable_swarm_factory, server, session, database_url
):
    swarm = durable_swarm_factory(server.client())
    swarm.run(clerk, user("hello"), session=session)
    with DurableClient(database_url) as client:
        assert [m["content"] for m in client.get_session(session).messages] == [
            "hello", "seen 2: hello",
        ]  # fmt: skip
        assert session in [s.name for s in client.list_sessions()]
        client.clear_session(session)
        assert swarm.get_session(session).messages == []
        client.delete_session(session)
    with pytest.raises(SessionNotFoundError):
        swarm.get_session(session)


def test_the_append_is_done_once_per_run(durable_swarm_factory, session, database_url):
    durable_swarm_factory()
    from durable_swarm.durable import _dbos

    store = SessionStore(_dbos.launched_url() or database_url, _dbos.run_status)
    assert store.claim(session, "run-a") == ([], 0)
    with pytest.raises(SessionBusyError):
        # a claim by a run that does not exist (yet) holds for the start grace period
        store.claim(session, "run-b")
    assert store.finish(session, "run-a", user("one"), 0) is True
    # the same run's append again (a step re-executed after a crash): nothing changes
    assert store.finish(session, "run-a", user("one") + user("two"), 0) is False
    info = store.get(session)
    assert info.messages == user("one") and info.runs == 1 and info.held_by is None
    # a run that started from version 0 (a fork of run-a, say) finds the session moved on
    with pytest.raises(DurableSwarmError, match="moved on without it"):
        store.finish(session, "run-c", user("other"), 0)
    assert store.get(session).messages == user("one")


def test_a_failed_session_run_resumed_adds_its_messages_and_a_fork_does_not_overwrite(
    durable_swarm_factory, server, session
):
    swarm = durable_swarm_factory(server.client(), model_retries=0)
    first = swarm.run(clerk, user("hello"), session=session)
    assert first.messages[-1]["content"] == "seen 2: hello"
    server.inject(Fault.status(400, "refused once"))
    handle = swarm.start(clerk, user("again"), session=session)
    with pytest.raises(Exception, match="refused once"):
        handle.result()
    assert swarm.get_session(session).held_by is None  # a failed run's hold does not count
    resumed = swarm.resume(handle.run_id).result()
    assert resumed.messages[-1]["content"] == "seen 4: again"
    stored = swarm.get_session(session)
    assert stored.runs == 2 and [m["content"] for m in stored.messages][-1] == "seen 4: again"
    # a fork of the first run started from an older session: it does not overwrite the session
    steps = swarm.get_run(handle.run_id).steps
    model_step = next(s.step for s in steps if s.kind == "model")
    fork = swarm.fork(handle.run_id, model_step)
    with pytest.raises(DurableSwarmError, match="moved on without it"):
        fork.result()
    assert swarm.get_session(session).messages == stored.messages


def test_the_stored_payload_is_json_with_a_schema_version():
    stored = encode_payload(user("hé"), "s")
    assert '"schema_version": 1' in stored
    assert decode_payload(stored, "s") == user("hé")


def test_with_an_encryption_key_a_session_is_stored_sealed(
    durable_swarm_factory, server, session, database_url
):
    # With a key, the session's row holds no plain text, reads back with the key, and without
    # it is a clear error naming the key it needs; a payload moved to another session's row
    # does not open (it is bound to its session's name).
    import base64
    import os

    import sqlalchemy as sa

    from durable_swarm.durable import _dbos, _sealing
    from durable_swarm.errors import EncryptionKeyError

    secret = "the-vault-code-31337"
    key = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    _sealing.configure(key)
    try:
        swarm = durable_swarm_factory(server.client())
        swarm.run(clerk, user(f"remember {secret}"), session=session)
        assert secret in swarm.get_session(session).messages[0]["content"]
        engine = sa.create_engine(_dbos.launched_url() or database_url)
        with engine.begin() as conn:
            stored = conn.execute(
                sa.text("SELECT payload FROM durable_swarm_sessions WHERE name = :n"),
                {"n": session},
            ).scalar_one()
        engine.dispose()
        assert secret not in stored and stored.startswith("dsx1.k1.")
        with pytest.raises(EncryptionKeyError):
            decode_payload(stored, session + "-other")
        _sealing.configure(None)
        with pytest.raises(EncryptionKeyError) as caught:
            swarm.get_session(session)
        assert caught.value.key_id == "k1"
        _sealing.configure(key)
        swarm.delete_session(session)  # the module's other tests list sessions without a key
    finally:
        _sealing.configure(None)


def test_key_rotation_re_seals_sessions(make_database_url):
    # `runs rotate-keys` re-seals sessions too (SessionStore.reseal): written under k1, re-sealed
    # with k2 first in the list, then read with k2 alone. A database of its own: no run of it
    # is open without the key afterwards.
    import base64
    import os

    from durable_swarm.durable import _sealing
    from durable_swarm.durable._database import resolve_database_url

    url = resolve_database_url(make_database_url("session-keys"))
    if url.startswith("postgresql"):  # DBOS would create it at launch; nothing launches here
        from _support.db import postgres_execute

        base, name = url.rsplit("/", 1)
        postgres_execute(base + "/postgres", f'CREATE DATABASE "{name}"')
    k1 = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
    k2 = f"k2:{base64.b64encode(os.urandom(32)).decode()}"
    store = SessionStore(url, lambda run_id: None)
    try:
        _sealing.configure(k1)
        for name in ("a", "b", "c"):
            store.claim(name, f"run-{name}")
            store.finish(name, f"run-{name}", user(f"secret of {name}"), 0)
        _sealing.configure([k2, k1])
        assert store.reseal(batch_size=2) == (3, {})
        assert store.reseal(batch_size=2) == (0, {})  # resumable: nothing left to do
        _sealing.configure(k2)
        assert [store.get(n).messages for n in "abc"] == [user(f"secret of {n}") for n in "abc"]
        _sealing.configure(f"k3:{base64.b64encode(os.urandom(32)).decode()}")
        assert store.reseal(batch_size=2) == (0, {"k2": 3})  # their key is missing here
    finally:
        _sealing.configure(None)


def test_a_session_run_is_stored_as_spec_version_3_and_round_trips():
    from durable_swarm.durable._spec import SPEC_VERSION, RunSpec
    from durable_swarm.loop import RunRequest

    run = RunRequest(clerk, user("hi"), session="s", compact_at=500)
    spec = RunSpec.of_request(
        run, swarm="default", model=None, model_retries=0, budget=None, prices={},
        max_result_chars=10,
    )  # fmt: skip
    stored = spec.to_json()
    assert stored["schema_version"] == SPEC_VERSION == 3
    assert (stored["session"], stored["compact_at"]) == ("s", 500)
    assert RunSpec.from_json(stored) == spec
    plain = RunSpec.of_request(
        RunRequest(clerk, user("hi")), swarm="default", model=None, model_retries=0,
        budget=None, prices={}, max_result_chars=10,
    ).to_json()  # fmt: skip
    assert plain["schema_version"] == 2 and "session" not in plain and "compact_at" not in plain


def test_async_and_streamed_runs_of_a_session(durable_swarm_factory, server, session):
    import asyncio

    swarm = durable_swarm_factory(server.client())

    async def two() -> list[str]:
        first = await swarm.arun(clerk, user("one"), session=session)
        handle = await swarm.astart(clerk, user("two"), session=session)
        second = await handle.aresult()
        return [first.messages[-1]["content"], second.messages[-1]["content"]]

    assert asyncio.run(two()) == ["seen 2: one", "seen 4: two"]
    assert len(asyncio.run(swarm.aget_session(session)).messages) == 4
    assert session in [s.name for s in asyncio.run(swarm.alist_sessions())]
    events = list(swarm.run(clerk, user("three"), session=session, stream=True))
    assert events[-1]["response"].messages[-1]["content"] == "seen 6: three"
    assert swarm.get_session(session).runs == 3
