"""The reliable refund agent: kill it at any point, run it again, and it carries on.

The agent asks your name, then processes a refund in several slow steps (look up the order,
reverse the payment, confirm with the bank, notify you) and applies a discount. Every model call
and every step is a checkpoint: stop it with Ctrl+C (or kill it) whenever you like, run the same
command again, and it resumes after the last finished step without asking your name again and
without repeating a step. `--show-crash` does that for you: it kills the agent's process with
SIGKILL in the middle of the refund and starts it again.

Effects are idempotent per order, as a real refund must be: the payment provider (a small SQLite
file, `refund_demo_payments.sqlite`) reverses an order's payment once, however often
`reverse_payment` is called for it. Small local models do call the same tool several times in
one reply; the scripted model does it too, to show it. `--fresh` starts a new run, unless the
last `--fresh` run is unfinished: then it resumes that one, so "run the same command again"
always resumes.

Run: `python examples/refund/main.py` (or `durable-swarm demo refund`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import add_model_options, make_client, my_tool_result, tools_called

from durable_swarm import (
    Agent,
    DatabaseUnavailableError,
    DurableClient,
    DurableSwarm,
    RunNotFoundError,
    ask_user,
)
from durable_swarm.testing import ToolCall, calls, text

LEDGER_ENV = "REFUND_DEMO_LEDGER"
STEP_SECONDS_ENV = "REFUND_DEMO_STEP_SECONDS"
CRASH_AT_ENV = "REFUND_DEMO_CRASH_AT"
PAYMENTS_ENV = "REFUND_DEMO_PAYMENTS"
DEFAULT_DATABASE = "refund_demo.sqlite"
DEFAULT_PAYMENTS = "refund_demo_payments.sqlite"
FRESH_PREFIX = "refund-"
MAX_TURNS = 40  # a model that keeps asking or calling stops here instead of looping forever


# --- the slow steps -----------------------------------------------------------------------


def _work(step: str, detail: str, idempotency_key: str | None = None) -> None:
    """Do one slow step: say so, take time, and write it to the ledger (what tests count)."""
    print(f"   … {step}: {detail}", flush=True)
    if os.environ.get(CRASH_AT_ENV) == step:
        print(f"   💥 the process dies in the middle of {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(os.environ.get(STEP_SECONDS_ENV, "1.0")))
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "key": idempotency_key}) + "\n")
    print(f"   ✓ {step} done", flush=True)


def look_up_order(customer: str, idempotency_key: str) -> str:
    """Find the customer's most recent order (each refund run is about its own order)."""
    _work("look_up_order", f"finding {customer}'s latest order", idempotency_key)
    run_id = idempotency_key.rsplit(":", 1)[0]
    number = 1000 + int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % 9000
    return json.dumps(
        {"order_id": f"A-{number}", "amount": 89.90, "item": "noise-cancelling headphones"}
    )


def _payments() -> sqlite3.Connection:
    """The payment provider's book of reversals: one row per order, ever."""
    conn = sqlite3.connect(os.environ.get(PAYMENTS_ENV, DEFAULT_PAYMENTS), timeout=30)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS reversals (order_id TEXT PRIMARY KEY, amount REAL, "
        "idempotency_key TEXT)"
    )
    return conn


def reverse_payment(order_id: str, amount: float, idempotency_key: str) -> str:
    """Reverse the payment of an order (the payment provider is slow). Idempotent per order:
    an order whose payment was already reversed is not refunded again."""
    with _payments() as conn:
        done = conn.execute(
            "SELECT amount FROM reversals WHERE order_id = ?", (order_id,)
        ).fetchone()
    if done:
        print(f"   = reverse_payment: {order_id} was already reversed: no second refund")
        return f"The payment for {order_id} was already reversed ({done[0]:.2f} EUR); nothing done."
    _work("reverse_payment", f"reversing {amount:.2f} EUR for {order_id}", idempotency_key)
    with _payments() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO reversals VALUES (?, ?, ?)", (order_id, amount, idempotency_key)
        )
    return f"Payment of {amount:.2f} EUR for {order_id} reversed."


def confirm_with_bank(order_id: str, idempotency_key: str) -> str:
    """Wait for the bank to confirm the reversal."""
    _work("confirm_with_bank", f"waiting for the bank to confirm {order_id}", idempotency_key)
    return f"The bank confirmed the refund of {order_id}."


def notify_customer(customer: str, order_id: str, idempotency_key: str) -> str:
    """Email the customer that the refund is done."""
    _work("notify_customer", f"emailing {customer} about {order_id}", idempotency_key)
    return f"{customer} was emailed about the refund of {order_id}."


def apply_discount(customer: str, percent: int, context_variables: dict[str, Any]) -> str:
    """Give the customer a discount on their next order."""
    _work("apply_discount", f"{percent}% off {customer}'s next order")
    context_variables["discount"] = percent
    return f"{customer} gets {percent}% off the next order."


refund_agent = Agent(
    name="Refund Agent",
    instructions=(
        "You process refunds. First ask the customer's name with ask_user. Then, one tool at a "
        "time: look_up_order, reverse_payment, confirm_with_bank, notify_customer, and finally "
        "apply_discount of 10 percent. Then tell the customer what was done."
    ),
    functions=[
        ask_user,
        look_up_order,
        reverse_payment,
        confirm_with_bank,
        notify_customer,
        apply_discount,
    ],
)


# --- the scripted model (offline) -----------------------------------------------------------


def _customer(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_name") == "ask_user":
            return str(message.get("content") or "").strip() or "there"
    return "there"


def offline_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
    """Ask the name, then one step per turn, in order, reading each step's result."""
    done = tools_called(messages)
    customer = _customer(messages)
    order = next(
        (
            json.loads(m["content"])
            for m in messages
            if m.get("role") == "tool" and m.get("tool_name") == "look_up_order"
        ),
        None,
    )
    plan: list[tuple[str, dict[str, Any]]] = [
        ("ask_user", {"question": "Before I start the refund: what is your name?"}),
        ("look_up_order", {"customer": customer}),
    ]
    if order:
        plan += [
            ("reverse_payment", {"order_id": order["order_id"], "amount": order["amount"]}),
            ("confirm_with_bank", {"order_id": order["order_id"]}),
            ("notify_customer", {"customer": customer, "order_id": order["order_id"]}),
            ("apply_discount", {"customer": customer, "percent": 10}),
        ]
    for name, args in plan:
        if name == "reverse_payment" and name not in done:
            # as small local models do: the same call twice in one reply (refunded once)
            return calls(ToolCall(name, args), ToolCall(name, args))
        if name not in done:
            return calls(ToolCall(name, args))
    if my_tool_result(messages, tools) is not None and order:
        return text(
            f"All done, {customer}: order {order['order_id']} ({order['item']}) is refunded "
            f"({order['amount']:.2f} EUR, confirmed by the bank), you have an email, and your "
            "next order is 10% off."
        )
    return text("How can I help you with a refund?")


# --- running it -----------------------------------------------------------------------------


def _show(message: dict[str, Any]) -> None:
    """Print what the agent says (each step prints its own progress as it runs)."""
    if message.get("role") == "assistant" and message.get("content"):
        print(f"🤖 {message.get('sender')}: {message['content']}", flush=True)


def _answer(question: str, name: str | None) -> str:
    """The customer's name: asked once at a terminal; a question asked again gets the same."""
    print(f"🤖 {question}", flush=True)
    if name is None and not sys.stdin.isatty():
        name = "Ada"  # no one at a terminal to ask (a pipe, CI): answer for them
    if name is not None:
        print(f"🙂 {name}", flush=True)
        return name
    return input("🙂 ").strip() or "there"


def _current_fresh_run(database_url: str) -> str | None:
    """The newest run started with `--fresh` if it has not finished (pending, waiting or
    failed): running the same `--fresh` command again resumes it. Read with the thin client,
    which never runs or recovers a run itself."""
    try:
        with DurableClient(database_url) as client:
            runs = client.list_runs(limit=200)
    except DatabaseUnavailableError:  # no database yet: no run to resume
        return None
    for info in runs:
        if info.run_id.startswith(FRESH_PREFIX) and info.parent is None:
            return info.run_id if info.status not in ("succeeded", "cancelled") else None
    return None


def _ending(info: Any, run_id: str, where: str) -> int:
    """Say how the run ended, and what to do next."""
    discount = info.context_variables.get("discount")
    given = f"discount: {discount}%" if discount is not None else "no discount was applied"
    print(f"■ Run {run_id} {info.status}; {given}")
    if info.status == "failed":
        print(f"  Why: {info.error}")
        print("  Fix the cause, then run the same command again: it resumes the run.")
    print(f"  Its timeline: durable-swarm runs show {run_id} --database-url {where}")
    return 0 if info.status == "succeeded" else 1


def run_refund(swarm: DurableSwarm, run_id: str, name: str | None) -> int:
    """Start (or resume) the refund run `run_id` and follow it to the end."""
    where = swarm.database_url.removeprefix("sqlite:///")
    try:
        info = swarm.get_run(run_id)
        if info.status == "succeeded":
            print(f"Run {run_id} already finished; pass --fresh to start a new one.")
            print(f"🤖 {info.messages[-1].get('content')}")
            return 0
        done = [s.name for s in info.steps if s.kind == "tool" and s.completed_at]
        print(f"↻ Resuming run {run_id}: finished steps {done or 'none'} are not run again.")
        if info.status in ("failed", "cancelled"):
            swarm.resume(run_id)  # continues from the step that failed
        shown = len(info.messages)
    except RunNotFoundError:
        print(f"▶ Starting run {run_id}")
        shown = 1
        swarm.start(
            refund_agent,
            [{"role": "user", "content": "Hi, I'd like a refund for my last order."}],
            run_id=run_id,
            max_turns=MAX_TURNS,
        )
    answered: set[Any] = set()  # the waits answered, so a question asked again is answered again
    while True:
        info = swarm.get_run(run_id)
        for message in info.messages[shown:]:
            _show(message)
        shown = len(info.messages)
        waiting = info.waiting_for or {}
        if info.status == "waiting_for_input" and waiting.get("wait_id") not in answered:
            if answered:
                print("   (the model asked again: it gets the same answer)", flush=True)
            answered.add(waiting.get("wait_id"))
            name = _answer(waiting.get("prompt") or "?", name)
            swarm.send_input(run_id, name)
        elif info.status in ("succeeded", "failed", "cancelled"):
            return _ending(info, run_id, where)
        time.sleep(0.1)


def show_crash(argv: list[str], crash_at: str) -> int:
    """Run the demo in a child process, let it die (SIGKILL) at `crash_at`, run it again."""
    command = [sys.executable, __file__, *argv]
    print(f"=== 1st process: it will be killed (SIGKILL) in the middle of {crash_at}", flush=True)
    first = subprocess.run(command, env={**os.environ, CRASH_AT_ENV: crash_at})
    print(f"=== the process died (exit {first.returncode}); starting it again…", flush=True)
    second = subprocess.run(command, env={k: v for k, v in os.environ.items() if k != CRASH_AT_ENV})
    return second.returncode


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run (or resume) the refund."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", default="refund-demo", help="the run to start or resume")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run (a new run id), unless the last --fresh run is unfinished: then "
        "resume it",
    )
    parser.add_argument("--name", help="answer the name question with this (no prompt)")
    parser.add_argument("--database-url", default=None, help=f"default: ./{DEFAULT_DATABASE}")
    parser.add_argument("--offline", action="store_true", help="scripted model even with a key")
    add_model_options(parser)
    parser.add_argument(
        "--show-crash",
        nargs="?",
        const="reverse_payment",
        metavar="STEP",
        help="kill the process (SIGKILL) in the middle of STEP (default reverse_payment), then "
        "run again to show it resume",
    )
    args = parser.parse_args(argv)
    database_url = (
        args.database_url or os.environ.get("DURABLE_SWARM_DATABASE_URL") or DEFAULT_DATABASE
    )
    run_id = args.run_id
    if args.fresh:
        run_id = _current_fresh_run(database_url) or f"{FRESH_PREFIX}{uuid.uuid4().hex[:8]}"
    if args.show_crash:
        child = ["--run-id", run_id, "--database-url", database_url]
        child += ["--name", args.name] if args.name else []
        child += ["--offline"] if args.offline else []
        child += ["--model", args.model] if args.model else []
        child += ["--base-url", args.base_url] if args.base_url else []
        return show_crash(child, args.show_crash)
    client = make_client(
        offline_model, offline=args.offline, base_url=args.base_url, model=args.model
    )
    model = None if args.offline else args.model
    swarm = DurableSwarm(client, model=model, database_url=database_url)

    def stop(signum: int, frame: Any) -> None:
        print(f"\n⏸ Stopped. Run the same command again to resume run {run_id}.", flush=True)
        os._exit(130)  # leave the run pending in the database; the next launch recovers it

    signal.signal(signal.SIGINT, stop)  # Ctrl+C stops at once, wherever the agent is
    return run_refund(swarm, run_id, args.name)


if __name__ == "__main__":
    sys.exit(main())
