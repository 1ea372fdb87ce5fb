"""Everything the command prints from a run is safe for a terminal: escape sequences, BEL, C1
controls, backspaces, carriage returns, bidirectional overrides and invisible characters in run
ids, agent and tool names, arguments, results, context, errors and prompts are shown visibly, in
every column of every command, on SQLite and PostgreSQL; JSON output keeps them exactly (as
escapes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli._helpers import cli_batch, run_script
from durable_swarm._cli._render import dumps
from durable_swarm._cli._style import clean

from ._hostile_app import CALL_ID, EVIL, RUN_IDS

APP = Path(__file__).with_name("_hostile_app.py")
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)
# The only escape sequences the command writes itself: colours, and clearing the spinner line.
OURS = re.compile(r"\x1b\[[0-9;]*m|\r\x1b\[K")
# How EVIL looks once escaped, up to its carriage return (which a one-line preview makes a space).
SHOWN = clean(EVIL.split("\r")[0])
FULL = clean(EVIL)


@pytest.fixture(scope="module")
def hostile_db(make_database_url) -> str:
    url = make_database_url("hostile")
    assert run_script(APP, url) == {
        "ok": "succeeded",
        "failed": "failed",
        "input": "waiting_for_input",
        "approval": "waiting_for_approval",
    }
    return url


PEOPLE = {
    "list": ["runs", "list"],
    **{
        f"show_{name}": ["runs", "show", run_id, "--all", "--messages"]
        for name, run_id in RUN_IDS.items()
    },
    "watch_ok": ["runs", "watch", RUN_IDS["ok"]],
    "watch_failed": ["runs", "watch", RUN_IDS["failed"]],
    "missing": ["runs", "show", "missing" + EVIL],
    "cancel_done": ["runs", "cancel", RUN_IDS["ok"]],
    "reject": ["runs", "reject", RUN_IDS["approval"], CALL_ID, "--message", EVIL],
}
PROGRAMS = {
    "list_json": ["runs", "list", "--json"],
    "show_ok_json": ["runs", "show", RUN_IDS["ok"], "--json"],
    "watch_json": ["runs", "watch", RUN_IDS["failed"], "--json"],
}


@pytest.fixture(scope="module")
def outputs(hostile_db, tmp_path_factory):
    commands = [
        *PEOPLE.values(),
        *({"argv": argv, "env": {"FORCE_COLOR": "1"}} for argv in PEOPLE.values()),
        *PROGRAMS.values(),
    ]
    results = cli_batch(tmp_path_factory.mktemp("hostile"), hostile_db, *commands)
    n = len(PEOPLE)
    plain = dict(zip(PEOPLE, results[:n], strict=True))
    coloured = dict(zip(PEOPLE, results[n : 2 * n], strict=True))
    programs = dict(zip(PROGRAMS, results[2 * n :], strict=True))
    return plain, coloured, programs


def test_no_control_character_reaches_the_terminal_in_a_pipe(outputs):
    plain, _, _ = outputs
    for name, result in plain.items():
        for stream in (result.stdout, result.stderr):
            assert UNSAFE.findall(stream) == [], (name, stream)


def test_with_colours_only_the_commands_own_sequences_reach_the_terminal(outputs):
    _, coloured, _ = outputs
    for name, result in coloured.items():
        for stream in (result.stdout, result.stderr):
            assert UNSAFE.findall(OURS.sub("", stream)) == [], (name, stream)
    assert "\x1b[" in coloured["list"].stdout  # colours were on


def test_every_column_shows_the_hostile_text_escaped(outputs):
    plain, _, _ = outputs
    listing = plain["list"].stdout
    assert "ok" + SHOWN in listing and "Agent" + SHOWN in listing
    assert "asks: prompt" + SHOWN[:6] in listing  # the NOTE column (cut to fit)
    assert 'approve? pay(note="' in listing
    shown = plain["show_ok"].stdout
    for piece in ("Run ok", "Agent", "Second", "result", "extra", "missing", "answer"):
        assert piece + SHOWN in shown, piece
    assert f"note={clean(dumps(EVIL))}" in plain["show_approval"].stdout
    assert "prompt" + SHOWN in plain["show_input"].stdout
    # The scripted model's error quotes the exception's repr: escaped already, and no worse.
    assert "the model says\\x1b]0;pwned" in plain["show_failed"].stdout
    assert "the model says\\x1b]0;pwned" in plain["watch_failed"].stdout
    assert "answer" + SHOWN in plain["watch_ok"].stdout
    approval = plain["show_approval"].stdout
    assert f"runs approve approval{FULL} call{FULL}" in approval
    assert "input" + SHOWN in plain["show_input"].stdout
    assert "missing" + SHOWN in plain["missing"].stderr
    assert plain["reject"].status == 0, plain["reject"].stderr
    assert f"Rejected tool call call{FULL} of run approval{FULL}" in plain["reject"].stdout


def test_json_output_keeps_every_value_exactly_and_escaped(outputs):
    _, _, programs = outputs
    for name, result in programs.items():
        assert UNSAFE.findall(result.stdout) == [], name
    runs = {run["run_id"]: run for run in programs["list_json"].json()["runs"]}
    assert set(runs) == set(RUN_IDS.values())
    assert runs[RUN_IDS["ok"]]["agent"] == "Second" + EVIL
    shown = programs["show_ok_json"].json()
    assert shown["context_variables"] == {"given" + EVIL: EVIL, "key" + EVIL: "value" + EVIL}
    assert shown["messages"][-1]["content"] == "answer" + EVIL
    error = programs["watch_json"].json_lines()[-1]["run"]["error"]
    assert "the model says\\x1b]0;pwned" in error  # the model's exception, as its repr
