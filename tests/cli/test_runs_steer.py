"""`runs send/approve/reject/cancel/resume/fork`: the command changes what it says, and a worker
(the app, in another process) then carries the runs on; `runs watch` follows them live."""

from __future__ import annotations

import pytest

from ._helpers import copy_db, finish, start_batch, start_worker


def final_answer(show):
    """The last assistant message of a `runs show --json` result."""
    data = show.json()
    return next(m["content"] for m in reversed(data["messages"]) if m["role"] == "assistant")


WATCH = ["--interval", "0.5", "--timeout", "60"]


@pytest.fixture(scope="module")
def steered(base_db, tmp_path_factory):
    """Two copies of the runs, steered side by side. A: send, approve, fork, resume a failed
    run. B: reject with a message, cancel (twice) and resume a waiting run. Then a worker per
    copy carries the runs on while `runs watch` follows them."""
    tmp_path = tmp_path_factory.mktemp("steered")
    db_a = copy_db(base_db, tmp_path / "a.sqlite")
    db_b = copy_db(base_db, tmp_path / "b.sqlite")
    steer_a = start_batch(
        tmp_path,
        db_a,
        ["runs", "send", "run-input", "Ada", "--json"],
        ["runs", "approve", "run-approval", "call_refund_42", "--by", "Grace"],
        ["runs", "fork", "run-ok", "4", "--new-run-id", "fork-4", "--json"],
        ["runs", "fork", "run-ok", "1"],
        ["runs", "resume", "run-failed", "--json"],
    )
    steer_b = start_batch(
        tmp_path,
        db_b,
        ["runs", "reject", "run-approval", "call_refund_42", "-m", "Too much", "--json"],
        ["runs", "cancel", "run-input"],
        ["runs", "show", "run-input", "--json"],
        ["runs", "cancel", "run-input", "--json"],
        ["runs", "resume", "run-input"],
    )
    a, b = {"steer": steer_a.results()}, {"steer": steer_b.results()}
    worker_a = start_worker(db_a, "run-input", "run-approval", "fork-4", "run-failed", fixed=True)
    worker_b = start_worker(db_b, "run-approval", "run-input=waiting_for_input")
    follow_a = start_batch(
        tmp_path,
        db_a,
        ["runs", "watch", "run-failed", *WATCH],
        ["runs", "watch", "fork-4", "--json", *WATCH],
        ["runs", "watch", "run-input", *WATCH],
        ["runs", "watch", "run-approval", *WATCH],
        ["runs", "show", "run-input", "--json"],
        ["runs", "show", "run-approval", "--json"],
        ["runs", "show", "run-approval"],
        ["runs", "show", "fork-4", "--json"],
    )
    follow_b = start_batch(
        tmp_path,
        db_b,
        ["runs", "watch", "run-approval", *WATCH],
        ["runs", "show", "run-approval", "--json"],
    )
    try:
        a["follow"], b["follow"] = follow_a.results(), follow_b.results()
    finally:
        a["statuses"], b["statuses"] = finish(worker_a), finish(worker_b)
    return a, b


@pytest.fixture
def answered(steered):
    a, _ = steered
    return a["steer"], a["follow"], a["statuses"]


@pytest.fixture
def rejected(steered):
    _, b = steered
    return b["steer"], b["statuses"], b["follow"]


def test_send_answers_the_question_and_the_run_goes_on(answered):
    steer, follow, statuses = answered
    sent = steer[0]
    assert sent.status == 0, sent.stderr
    assert sent.json() == {
        "action": "send",
        "run_id": "run-input",
        "schema_version": 1,
        "text": "Ada",
    }
    assert statuses["run-input"] == "succeeded"
    assert follow[2].status == 0, follow[2].stderr
    assert final_answer(follow[4]) == "Nice to meet you, Ada!"


def test_approve_lets_the_tool_run_and_records_who(answered):
    steer, follow, statuses = answered
    assert steer[1].status == 0, steer[1].stderr
    assert "Approved tool call call_refund_42 of run run-approval" in steer[1].stdout
    assert statuses["run-approval"] == "succeeded"
    assert final_answer(follow[5]) == "Done: Refunded $42"
    timeline = follow[6].stdout
    assert "approved" in timeline and "(by Grace)" in timeline
    assert "refund(amount=42) = Refunded $42" in timeline


def test_fork_copies_the_steps_before_and_runs_the_rest(answered):
    steer, follow, statuses = answered
    assert steer[2].json()["run_id"] == "fork-4"
    assert steer[2].json()["forked_from"] == "run-ok"
    assert steer[3].status == 0 and "Forked run run-ok at step 1 as run" in steer[3].stdout
    assert statuses["fork-4"] == "succeeded"
    fork = follow[7].json()
    assert fork["forked_from"] == "run-ok"
    assert [s["kind"] for s in fork["steps"]] == [
        "model",
        "tool",
        "handoff",
        "model",
        "tool",
        "model",
    ]
    assert final_answer(follow[7]) == "Done: Sunny and 21°C in Paris"
    events = follow[1].json_lines()
    assert events[-1]["event"] == "end" and events[-1]["run"]["status"] == "succeeded"


def test_resume_a_failed_run_and_watch_it_finish_live(answered):
    steer, follow, statuses = answered
    assert steer[4].json()["previous_status"] == "failed"
    assert statuses["run-failed"] == "succeeded"
    watched = follow[0]
    assert watched.status == 0, watched.stderr
    assert "● succeeded" in watched.stdout
    assert "answer Hello!" in watched.stdout


def test_reject_tells_the_model_why(rejected):
    steer, statuses, after = rejected
    assert steer[0].status == 0, steer[0].stderr
    assert steer[0].json()["message"] == "Too much"
    assert statuses["run-approval"] == "succeeded"
    assert after[0].status == 0, after[0].stderr
    answer = final_answer(after[1])
    assert "rejected" in answer and "Too much" in answer
    assert "Refunded" not in answer


def test_cancel_then_resume_a_waiting_run(rejected):
    steer, statuses, _ = rejected
    assert steer[1].status == 0, steer[1].stderr
    assert "Run run-input is cancelled" in steer[1].stdout
    assert steer[2].json()["status"] == "cancelled"
    assert steer[3].json()["changed"] is False
    assert "queued to go on after step" in steer[4].stdout
    assert statuses["run-input"] == "waiting_for_input"
