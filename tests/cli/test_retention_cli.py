"""`durable-swarm retention show | apply` on a SQLite run database (run-ok, run-failed, run-input,
run-approval): the dry run reports per status and changes nothing, `apply` asks for --yes off a
terminal and then deletes only finished runs past their age, `show` tells the totals; bad policy
values (here and on `worker --retention`) are exit status 2 with the key and the accepted form."""

from __future__ import annotations

import time
from pathlib import Path

from ._helpers import cli_batch, digest

POLICY = "succeeded=1s,failed=1s,cancelled=1s"


def test_dry_run_apply_and_show(db: Path, tmp_path: Path) -> None:
    time.sleep(2.1)  # every finished run of the database is older than a second (and its margin)
    before = digest(db)
    dry, dry_json, refused = cli_batch(
        tmp_path,
        db,
        ["retention", "apply", "--policy", POLICY, "--dry-run", "--verbose"],
        ["retention", "apply", "--policy", POLICY, "--dry-run", "--json"],
        ["retention", "apply", "--policy", POLICY],  # not a terminal, no --yes
    )
    assert dry.status == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("Would delete 2 finished runs past their age in ")
    assert lines[0].endswith("(runs in flight are never deleted):")
    assert lines[1].split()[:3] == ["succeeded", "1", "run"] and "finished 20" in lines[1]
    assert lines[2].split()[:3] == ["failed", "1", "run"]
    assert lines[3].split()[:3] == ["cancelled", "0", "runs"]
    assert {line.split()[0] for line in lines[4:]} == {"run-ok", "run-failed"}  # --verbose
    report = dry_json.json()
    assert report["dry_run"] is True and report["deleted"] == 2
    assert report["statuses"]["succeeded"]["runs"] == 1
    assert report["statuses"]["succeeded"]["oldest_finished_at"] is not None
    assert sorted(r["run_id"] for r in report["runs"]) == ["run-failed", "run-ok"]
    assert refused.status == 2
    assert "retention would delete 2 finished runs; not on a terminal" in refused.stderr
    assert digest(db) == before  # nothing was deleted

    done, listed, shown, shown_json = cli_batch(
        tmp_path,
        db,
        ["retention", "apply", "--policy", POLICY, "--yes"],
        ["runs", "list", "--json"],
        ["retention", "show", "--policy", POLICY],
        ["retention", "show", "--json"],
    )
    assert done.status == 0, done.stderr
    assert done.stdout.startswith("Deleted 2 finished runs past their age from ")
    assert {r["run_id"] for r in listed.json()["runs"]} == {"run-input", "run-approval"}
    assert "no process applies a policy here" in shown.stdout
    assert "deleted so far: 1 succeeded, 1 failed, 0 cancelled" in shown.stdout
    assert "policy given: deletes succeeded after 1s, failed after 1s, cancelled after 1s" in (
        shown.stdout
    )
    assert "Due now (0 runs):" in shown.stdout
    data = shown_json.json()
    assert data["deleted"] == {"succeeded": 1, "failed": 1, "cancelled": 0}
    assert data["sweepers"] == [] and data["due"] is None


def test_without_a_policy_apply_says_how_to_give_one(db: Path, tmp_path: Path) -> None:
    (result,) = cli_batch(tmp_path, db, ["retention", "apply", "--dry-run"])
    assert result.status == 1
    assert "No retention policy to apply: none was given and none is recorded" in result.stderr
    assert "--policy succeeded=30d,failed=90d" in result.stderr


def test_bad_policy_values_name_the_key_and_the_form(db: Path, tmp_path: Path) -> None:
    results = cli_batch(
        tmp_path,
        db,
        ["retention", "apply", "--policy", "succeeded=30"],
        ["retention", "show", "--policy", "finished=30d"],
        ["worker", "_app:swarm", "--retention", "failed=soon"],
        ["worker", "_app:swarm", "--retention", "pending=1d"],
        ["worker", "_app:swarm", "--retention-interval", "5s"],
        ["worker", "_app:swarm", "--retention", "succeeded=1d", "--retention-batch-size", "0"],
    )
    assert [r.status for r in results] == [2] * 6, [r.stderr for r in results]
    errors = [r.stderr for r in results]
    assert (
        "argument --policy: Retention 'succeeded': '30' is not a duration; write a number "
        in (errors[0])
    )
    assert '(e.g. "90m", "12h", "30d", "2w")' in errors[0]
    assert "Retention 'finished' is not a key of a policy; use succeeded, failed" in errors[1]
    assert "--retention: Retention 'failed': 'soon' is not a duration" in errors[2]
    assert "runs in flight (pending, waiting for a person) are never deleted" in errors[3]
    assert "--retention-batch-size and --retention-interval need a policy" in errors[4]
    assert "--retention-batch-size: expected 1 or more, got '0'" in errors[5]
