"""Chaos on a fleet: three workers on PostgreSQL (through a loopback proxy) serve runs with a
tool, a handoff or a question for a person, while, at random moments, a worker is SIGKILLed and
replaced, SIGTERMed (a deploy) and replaced, frozen (SIGSTOP, then SIGCONT), or every worker is
cut off from the database; people answer the questions, sometimes two at once.

Checked at the end: every run succeeded with the transcript of an undisturbed run; no finished
step ran again (no tool body began, no model request for a step arrived, after the step's
recorded completion); no tool body ran in two processes at the same moment; every accepted
answer is the one in its run's transcript. Seeded (`DURABLE_SWARM_CHAOS_SEED`) and repeatable in
its schedule; its length is `DURABLE_SWARM_CHAOS_SECONDS` (30 s; `make test-chaos`: 150 s).
The figures (runs, faults by kind, violations) are printed.

Freezes stay shorter than `dead_after` here: a process frozen for longer is taken for dead and
a tool body it was in goes on for a moment when it thaws (its result is refused); see the
partition tests for that case.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_swarm.durable import DurableClient
from durable_swarm.errors import DurableSwarmError
from durable_swarm.testing import Fault, Reply, ToolCall, calls, text

from ._proxy import TcpProxy
from .conftest import TIMEOUT, Proc, overlaps, timed_step_lines, worker_settings

BEAT, DEAD = 0.3, 4.0
QUEUE = "fleet"
WORKERS = 3
SECONDS = float(os.environ.get("DURABLE_SWARM_CHAOS_SECONDS", "30"))
SEED = os.environ.get("DURABLE_SWARM_CHAOS_SEED", "fleet-1")
KINDS = ("step", "handoff", "ask")


class ChaosModel:
    """`step <tag>`: `step(tag)`, then `done <tag>`. `handoff <tag>`: `step(tag)`, then
    `transfer_to_closer`, then (the closer) `closed <tag>`. `ask <tag>`: `ask_user`, then
    `hello <answer>`. Each request's arrival time is kept by (tag, stage), stage = the number
    of tool results in the request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.arrivals: dict[tuple[str, int], list[float]] = {}

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        user = next(str(m.get("content")) for m in messages if m.get("role") == "user")
        kind, _, tag = user.partition(" ")
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        stage = len(results)
        with self._lock:
            self.arrivals.setdefault((tag, stage), []).append(time.time())
        if kind == "ask":
            reply = calls(ToolCall("ask_user", {"question": f"name for {tag}?"}))
            if stage:
                reply = text(f"hello {results[-1]}")
        elif stage == 0:
            reply = calls(ToolCall("step", {"tag": tag}))
        elif kind == "handoff" and stage == 1:
            reply = calls(ToolCall("transfer_to_closer"))
        else:
            reply = text(f"{'closed' if kind == 'handoff' else 'done'} {tag}")
        return Fault.delay(0.15, reply)


@pytest.fixture
def model() -> ChaosModel:
    return ChaosModel()


def _expected(kind: str, tag: str, answer: str | None) -> list[tuple[str, str | None]]:
    """(role, content) of an undisturbed run's messages (None: a tool call's empty content)."""
    if kind == "ask":
        return [("assistant", None), ("tool", answer), ("assistant", f"hello {answer}")]
    done = [("assistant", None), ("tool", f"stepped {tag}")]
    if kind == "step":
        return [*done, ("assistant", f"done {tag}")]
    return [*done, ("assistant", None), ("tool", '{"assistant": "Closer"}'),
            ("assistant", f"closed {tag}")]  # fmt: skip


class Answerer:
    """People answering the questions of the `ask` runs: each waiting run is answered once by
    one person, or by two at the same moment (each with their own answer)."""

    def __init__(self, client: DurableClient, chance: random.Random) -> None:
        self.client = client
        self.chance = chance
        self.accepted: dict[str, set[str]] = {}  # run id -> answers told "sent"
        self.pending: dict[str, str] = {}  # run id -> tag, not answered yet
        self.twice = 0  # questions two people answered at the same moment
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="answerer", daemon=True)
        self._thread.start()

    def add(self, run_id: str, tag: str) -> None:
        with self._lock:
            self.pending[run_id] = tag

    def _send(self, run_id: str, text_: str, by: str) -> None:
        with contextlib.suppress(DurableSwarmError):  # the other person was first, or no wait
            self.client.send_input(run_id, text_, by=by)
            with self._lock:
                self.accepted.setdefault(run_id, set()).add(text_)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                waiting = list(self.pending.items())
            for run_id, tag in waiting:
                try:
                    if self.client.get_run(run_id).status != "waiting_for_input":
                        continue
                except Exception:  # the client's database connection failed: next round
                    continue
                people = ["ann", "bob"] if self.chance.random() < 0.5 else ["ann"]
                self.twice += len(people) == 2
                threads = [
                    threading.Thread(target=self._send, args=(run_id, f"{who}-{tag}", who))
                    for who in people
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                with self._lock:
                    if run_id in self.accepted:
                        del self.pending[run_id]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def test_a_fleet_under_kills_deploys_freezes_and_cuts_finishes_every_run_once(
    start: Callable[..., Proc],
    cut_database: tuple[str, str, TcpProxy],
    model: ChaosModel,
    work_dir: Path,
) -> None:
    direct, proxied, proxy = cut_database
    settings = {**worker_settings(proxied, QUEUE, BEAT, DEAD), "shutdown_grace": 15.0}
    chance = random.Random(SEED)
    numbered = iter(range(1000))
    workers = [start(f"w{next(numbered)}", "_serve.py", **settings) for _ in range(WORKERS)]
    for worker in workers:
        worker.wait_output("serving queue")
    supervisor = Supervisor(workers, lambda: start(f"w{next(numbered)}", "_serve.py", **settings))
    faults: Counter[str] = Counter()
    runs: dict[str, tuple[str, str]] = {}  # run id -> (kind, tag)
    stopping: list[Proc] = []
    with DurableClient(direct) as client:
        answerer = Answerer(client, random.Random(f"{SEED}-people"))
        try:
            deadline = time.monotonic() + SECONDS
            next_fault = time.monotonic() + chance.uniform(1.0, 3.0)
            while time.monotonic() < deadline:
                kind = chance.choice(KINDS)
                tag = f"{kind[0]}{len(runs)}"
                handle = client.start(
                    "Stepper", [{"role": "user", "content": f"{kind} {tag}"}], queue=QUEUE
                )
                runs[handle.run_id] = (kind, tag)
                if kind == "ask":
                    answerer.add(handle.run_id, tag)
                if time.monotonic() >= next_fault:
                    with supervisor.lock:
                        _fault(chance.choice(["kill", "term", "freeze", "cut"]), chance,
                               workers, stopping, proxy, faults, supervisor.start)  # fmt: skip
                    next_fault = time.monotonic() + chance.uniform(1.0, 3.0)
                time.sleep(chance.uniform(0.1, 0.5))
            finished = {run_id: _result(client, run_id, runs, workers) for run_id in runs}
            steps = {run_id: client._dbos.list_workflow_steps(run_id) for run_id in runs}
            infos = {run_id: client.get_run(run_id) for run_id in runs}
            assert client._dbos.list_workflows(status=["PENDING", "ENQUEUED"]) == []
        finally:
            answerer.close()
            supervisor.close()
    for proc in stopping:  # a deploy's old worker: it exited by itself, cleanly
        code = proc.proc.wait(timeout=TIMEOUT)
        assert code == 0 or "serving queue" not in proc.output(), proc.output()  # or starting

    violations: list[str] = []
    for run_id, (kind, tag) in runs.items():
        accepted = answerer.accepted.get(run_id, set())
        messages = finished[run_id].messages
        answer = str(messages[1].get("content")) if kind == "ask" else None
        if kind == "ask" and answer not in accepted:
            violations.append(f"{tag}: answer {answer!r} is not one accepted {accepted}")
        got = [(m.get("role"), m.get("content") or None) for m in messages]
        if got != _expected(kind, tag, answer) or infos[run_id].status != "succeeded":
            violations.append(f"{tag}: transcript {got}")
        violations += _repeats(tag, steps[run_id], model, work_dir)
    violations += [f"overlap: {o}" for o in overlaps(work_dir)]
    print(
        f"fleet chaos ({SECONDS:g} s, seed {SEED!r}): {len(runs)} runs "
        f"({dict(Counter(k for k, _ in runs.values()))}), faults {dict(faults)}, workers "
        f"that could not start (the database cut) and were started again {supervisor.restarts}, "
        f"questions answered by two people at once {answerer.twice}; "
        f"violations: {len(violations)}"
    )
    assert violations == [], "\n".join(violations)


class Supervisor:
    """What runs a fleet (systemd, Kubernetes): a worker that exits by itself (one that could
    not reach the database at its start, during a cut) is started again."""

    def __init__(self, workers: list[Proc], start: Callable[[], Proc]) -> None:
        self.workers = workers
        self.start = start
        self.lock = threading.Lock()
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with self.lock:
                for worker in [w for w in self.workers if w.poll() is not None]:
                    self.workers.remove(worker)
                    self.workers.append(self.start())
                    self.restarts += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _result(
    client: DurableClient, run_id: str, runs: dict[str, tuple[str, str]], workers: list[Proc]
) -> Any:
    """The run's result; if it does not come, a failure that says where the run stands."""
    try:
        return client.handle(run_id).result(timeout=TIMEOUT * 3)
    except TimeoutError:
        info = client.get_run(run_id)
        rows = client._dbos.list_workflows(workflow_ids=[run_id])
        steps = [(s.kind, s.name) for s in info.steps]
        outputs = "\n\n".join(w.output()[-3000:] for w in workers)
        pytest.fail(
            f"run {runs[run_id]} {run_id}: {info.status}, problem {info.problem!r}, "
            f"waiting for {info.waiting_for!r}, steps {steps}, DBOS row {rows}\n{outputs}"
        )


def _fault(
    kind: str,
    chance: random.Random,
    workers: list[Proc],
    stopping: list[Proc],
    proxy: TcpProxy,
    faults: Counter[str],
    replace: Callable[[], Proc],
) -> None:
    """Do one fault of `kind` (see the module docs)."""
    live = [w for w in workers if w.poll() is None]
    faults[kind] += 1
    if kind == "cut":
        proxy.cut()
        threading.Timer(chance.uniform(0.5, 4.0), proxy.restore).start()
        return
    if kind == "term":  # a deploy stops a worker that serves (before that, SIGTERM kills)
        live = [w for w in live if "serving queue" in w.output()] or live
    victim = chance.choice(live)
    if kind == "freeze":
        victim.signal(signal.SIGSTOP)
        threading.Timer(chance.uniform(0.3, 1.5), victim.signal, (signal.SIGCONT,)).start()
        return
    workers.remove(victim)
    if kind == "kill":
        victim.kill()
    else:  # a deploy: the old one stops while its replacement starts
        victim.signal(signal.SIGCONT)
        victim.signal(signal.SIGTERM)
        stopping.append(victim)
    workers.append(replace())


def _recorded(step: Any) -> float:
    """When a step's completion was recorded (`time.time()`), rounded up: DBOS stores it in
    whole milliseconds, and a tool may begin and end within one."""
    return (int(step["completed_at_epoch_ms"] or 0) + 1) / 1000


def _repeats(tag: str, steps: list[Any], model: ChaosModel, work_dir: Path) -> list[str]:
    """A finished step that ran again: a tool body that began, or a model request that
    arrived, after the step's recorded completion."""
    found = []
    models = [s for s in steps if str(s["function_name"]).startswith("model:")]
    for stage, step in enumerate(models):
        done = _recorded(step)
        late = [at for at in model.arrivals.get((tag, stage), []) if at > done]
        if late:
            found.append(
                f"{tag}: model step {stage} requested again after it was recorded ({step}; "
                f"requested {late})"
            )
    tools = [s for s in steps if s["function_name"] == "tool:step"]
    for step in tools:
        done = _recorded(step)
        starts = [
            at for kind, t, _, at in timed_step_lines(work_dir) if t == tag and kind == "start"
        ]
        if any(at > done for at in starts):
            found.append(
                f"{tag}: tool step began again after it was recorded ({step}; began {starts})"
            )
    return found
