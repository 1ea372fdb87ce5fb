"""Bad input: an unknown run id, malformed arguments, a database that does not exist. Each gets
one clear line on stderr (no traceback) and a non-zero exit, and changes nothing."""

from __future__ import annotations

import pytest

from ._helpers import cli_batch, digest

UNKNOWN_RUN = [
    ["runs", "show", "nope"],
    ["runs", "watch", "nope"],
    ["runs", "send", "nope", "hello"],
    ["runs", "approve", "nope", "call_1"],
    ["runs", "reject", "nope", "call_1", "-m", "no"],
    ["runs", "cancel", "nope"],
    ["runs", "resume", "nope"],
    ["runs", "fork", "nope", "1"],
]
WRONG_STATE = {
    "send to a finished run": (["runs", "send", "run-ok", "hi"], "is not waiting for input"),
    "approve another call": (
        ["runs", "approve", "run-approval", "call_other"],
        "waits for approval of tool call 'call_refund_42', not 'call_other'",
    ),
    "reject while waiting for input": (
        ["runs", "reject", "run-input", "call_1"],
        "is not waiting for approval",
    ),
    "cancel a finished run": (["runs", "cancel", "run-ok"], "already succeeded"),
    "resume a finished run": (["runs", "resume", "run-ok"], "durable-swarm runs fork run-ok STEP"),
    "fork past the end": (["runs", "fork", "run-ok", "99"], "it has steps 1 to 6"),
}
MALFORMED = {
    "step is not a number": (["runs", "fork", "run-ok", "two"], "argument STEP"),
    "bad time": (["runs", "list", "--since", "yesterday"], "expected an ISO time"),
    "bad status": (["runs", "list", "--status", "done"], "unknown status 'done'"),
    "negative limit": (["runs", "list", "--limit", "-1"], "expected 0 or more"),
    "missing run id": (["runs", "show"], "the following arguments are required: RUN_ID"),
    "missing text": (["runs", "send", "run-input"], "required: TEXT"),
    "unknown action": (["runs", "explode"], "invalid choice: 'explode'"),
    "no command": ([], "the following arguments are required: COMMAND"),
    "zero interval": (["runs", "watch", "run-ok", "--interval", "0"], "positive number"),
    "NaN timeout": (["runs", "watch", "run-ok", "--timeout", "nan"], "positive number"),
    "chat without agent": (["chat", "json"], "chat expects MODULE:AGENT"),
}


@pytest.fixture(scope="module")
def errors(base_db, tmp_path_factory):
    """Every bad command once, in one child process, on a copy of the runs."""
    tmp_path = tmp_path_factory.mktemp("errors")
    missing = tmp_path / "nowhere" / "runs.sqlite"
    not_a_db = tmp_path / "notes.sqlite"
    not_a_db.write_text("these are my notes\n")
    from ._helpers import copy_db

    db = copy_db(base_db, tmp_path / "runs.sqlite")
    before = digest(db)
    commands = {
        **{" ".join(argv): argv for argv in UNKNOWN_RUN},
        **{name: argv for name, (argv, _) in WRONG_STATE.items()},
        **{name: argv for name, (argv, _) in MALFORMED.items()},
        "missing sqlite": ["runs", "list", "--database-url", str(missing)],
        "missing sqlite show": ["runs", "show", "run-ok", "--database-url", str(missing)],
        "directory": ["runs", "list", "--database-url", str(tmp_path)],
        "not a database": ["runs", "show", "run-ok", "--database-url", str(not_a_db)],
        "unsupported url": ["runs", "list", "--database-url", "mysql://db/runs"],
        "postgres unreachable": [
            "runs",
            "list",
            "--database-url",
            "postgresql://postgres@127.0.0.1:1/runs",
        ],
        "demo unknown": ["demo", "no_such_demo"],
    }
    results = dict(zip(commands, cli_batch(tmp_path, db, *commands.values()), strict=True))
    assert digest(db) == before, "a failed command changed the run database"
    assert not missing.parent.exists(), "a missing SQLite database was created"
    assert not_a_db.read_text() == "these are my notes\n"
    return results


def assert_clear_error(result, expected, status=1):
    """One line on stderr naming the problem, no traceback, the right exit status."""
    assert result.status == status, (result.stdout, result.stderr)
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    if status == 1:
        assert result.stderr.startswith("durable-swarm: error: ")
        assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("argv", UNKNOWN_RUN, ids=lambda argv: argv[1])
def test_unknown_run_id(errors, argv, base_db):
    result = errors[" ".join(argv)]
    assert_clear_error(result, "No run with id 'nope' exists")
    assert "(database: " in result.stderr


@pytest.mark.parametrize("name", WRONG_STATE)
def test_a_run_in_the_wrong_state(errors, name):
    assert_clear_error(errors[name], WRONG_STATE[name][1])
    assert "nothing" in errors[name].stderr.lower()


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_arguments(errors, name):
    assert_clear_error(errors[name], MALFORMED[name][1], status=2)
    usage = not name.startswith("chat")  # chat's target is checked after parsing
    assert errors[name].stderr.startswith("usage: durable-swarm" if usage else "durable-swarm:")


def test_a_sqlite_database_that_does_not_exist_is_not_created(errors):
    for name in ("missing sqlite", "missing sqlite show"):
        assert_clear_error(errors[name], "No run database at ")
        assert "the file does not exist, and nothing was created" in errors[name].stderr
        assert "--database-url" in errors[name].stderr
    assert_clear_error(errors["directory"], "it is a directory")


def test_a_file_that_is_not_a_run_database(errors):
    assert_clear_error(errors["not a database"], "is not a run database")


def test_an_unsupported_or_unreachable_database(errors):
    assert_clear_error(errors["unsupported url"], "Unsupported database URL 'mysql://db/runs'")
    result = errors["postgres unreachable"]
    assert_clear_error(result, "Cannot open the run database")
    assert "127.0.0.1:1" in result.stderr


def test_an_unknown_demo(errors):
    assert_clear_error(errors["demo unknown"], "No demo named 'no_such_demo'")
    assert "basic.bare_minimum" in errors["demo unknown"].stderr
