"""`runs list` pages and searches many runs (120 here), `runs delete` and `runs prune` keep
the database small and refuse live runs; on SQLite and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ._helpers import HERE, TIMEOUT, child_env, cli_batch

COUNT = 120
TOTAL = COUNT + 2  # and run-live, run-recent
NEWEST_FIRST = ["run-recent", "run-live", *(f"run-{i:03d}" for i in reversed(range(COUNT)))]


@pytest.fixture(scope="module")
def many(make_database_url, tmp_path_factory):
    """A database with 122 runs, and the time between the older ones and `run-recent`."""
    url = make_database_url("many")
    done = subprocess.run(
        [sys.executable, str(HERE / "_many_runs.py"), url, str(COUNT)],
        env=child_env(DURABLE_SWARM_LOG_LEVEL="ERROR"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
    )
    assert done.returncode == 0, done.stderr
    return url, done.stdout.strip(), tmp_path_factory.mktemp("many")


@pytest.fixture(scope="module")
def listed(many):
    url, _, tmp = many
    db = ["--database-url", url]
    return cli_batch(
        tmp,
        None,
        ["runs", "list", *db, "--no-color"],
        ["runs", "list", *db, "--no-color", "--limit", "50", "--offset", "100"],
        ["runs", "list", *db, "--json", "--limit", "10", "--offset", "5"],
        ["runs", "list", *db, "--json", "--search", "PARCEL was lost", "--limit", "0"],
        ["runs", "list", *db, "--no-color", "--search", "no such words"],
        ["runs", "list", *db, "--json", "--search", "parcel", "--limit", "5", "--offset", "10"],
    )


def _ids(result):
    return [r["run_id"] for r in result.json()["runs"]]


def test_list_shows_one_page_and_says_how_many_more(listed):
    first = listed[0]
    assert first.status == 0, first.stderr
    rows = [line.split()[0] for line in first.stdout.splitlines()[1:51]]
    assert rows == NEWEST_FIRST[:50]
    assert f"Runs 1-50 of {TOTAL}; {TOTAL - 50} more: add --offset 50 for the next page" in (
        first.stdout
    )
    last = listed[1]
    rows = [line.split()[0] for line in last.stdout.splitlines()[1:] if line.startswith("run-")]
    assert rows == NEWEST_FIRST[100:]
    assert f"Runs 101-{TOTAL} of {TOTAL}." in last.stdout
    assert "more" not in last.stdout


def test_list_json_pages(listed):
    data = listed[2].json()
    assert _ids(listed[2]) == NEWEST_FIRST[5:15]
    assert (data["total"], data["offset"], data["more"]) == (TOTAL, 5, TOTAL - 15)


def test_search_finds_text_in_messages_in_any_case(listed):
    parcels = [f"run-{i:03d}" for i in reversed(range(0, COUNT, 10))]
    assert _ids(listed[3]) == parcels
    assert listed[3].json()["total"] == len(parcels)
    assert "No runs match these filters" in listed[4].stdout
    assert _ids(listed[5]) == parcels[10:]
    assert listed[5].json()["more"] == 0


def test_delete_refuses_live_runs_and_prune_never_touches_them(many):
    url, before_recent, tmp = many
    db = ["--database-url", url]
    results = cli_batch(
        tmp,
        None,
        ["runs", "delete", "run-live", *db],
        ["runs", "delete", "run-000", *db],
        ["runs", "show", "run-000", *db],
        ["runs", "prune", *db, "--older-than", before_recent, "--dry-run", "--json"],
        ["runs", "prune", *db, "--older-than", before_recent],
        ["runs", "list", *db, "--json"],
        ["runs", "prune", *db, "--older-than", before_recent, "--yes"],
        ["runs", "list", *db, "--json", "--limit", "0"],
        ["runs", "delete", "run-live", *db, "--force"],
        ["runs", "list", *db, "--json", "--limit", "0"],
    )
    refused, deleted, gone, dry, unconfirmed, untouched, pruned, kept, forced, left = results
    assert refused.status == 1
    assert "Run 'run-live' is waiting_for_input: it is live, so it was not deleted" in (
        refused.stderr
    )
    assert "durable-swarm runs cancel run-live" in refused.stderr
    assert deleted.status == 0 and "Deleted run run-000" in deleted.stdout
    assert gone.status == 1 and "No run with id 'run-000'" in gone.stderr

    older = [f"run-{i:03d}" for i in reversed(range(1, COUNT))]
    assert dry.status == 0, dry.stderr
    assert dry.json()["deleted"] == older and dry.json()["dry_run"] is True
    assert unconfirmed.status == 2
    assert f"prune would delete {len(older)} finished runs" in unconfirmed.stderr
    assert "Add --yes to confirm" in unconfirmed.stderr
    assert untouched.json()["total"] == TOTAL - 1  # neither dry run nor refusal deleted a run

    assert pruned.status == 0, pruned.stderr
    assert f"Deleted {len(older)} finished runs created before" in pruned.stdout
    assert _ids(kept) == ["run-recent", "run-live"]  # newer, and live: kept

    assert forced.status == 0 and "Deleted run run-live" in forced.stdout
    assert _ids(left) == ["run-recent"]
