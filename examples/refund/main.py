"""The reliable refund agent: kill it at any point, run it again, and it carries on.

The agent asks your name, then processes a refund in several slow steps (look up the order,
reverse the payment, confirm with the bank, notify you) and applies a discount. Every model call
and every step is a checkpoint: stop it with Ctrl+C (or kill it) whenever you like, run the same
command again, and it resumes after the last finished step without asking your name again and
without repeating a step. `--show-crash` does that for you: it kills the agent's process with
SIGKILL in the middle of the refund and starts it again.

Run: `python examples/refund/main.py` (or `durable-swarm demo refund`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import make_client, my_tool_result, tools_called

from durable_swarm import Agent, DurableSwarm, RunNotFoundError, ask_user
from durable_swarm.testing import ToolCall, calls, text

LEDGER_ENV = "REFUND_DEMO_LEDGER"
STEP_SECONDS_ENV = "REFUND_DEMO_STEP_SECONDS"
CRASH_AT_ENV = "REFUND_DEMO_CRASH_AT"
DEFAULT_DATABASE = "refund_demo.sqlite"


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
    """Find the customer's most recent order."""
    _work("look_up_order", f"finding {customer}'s latest order", idempotency_key)
    return json.dumps(
        {"order_id": "A-1042", "amount": 89.90, "item": "noise-cancelling headphones"}
    )


def reverse_payment(order_id: str, amount: float, idempotency_key: str) -> str:
    """Reverse the payment of an order (the payment provider is slow)."""
    _work("reverse_payment", f"reversing {amount:.2f} EUR for {order_id}", idempotency_key)
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
    print(f"🤖 {question}", flush=True)
    if name is None and not sys.stdin.isatty():
        name = "Ada"  # no one at a terminal to ask (a pipe, CI): answer for them
    if name is not None:
        print(f"🙂 {name}", flush=True)
        return name
    return input("🙂 ").strip() or "there"


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
        shown = len(info.messages)
    except RunNotFoundError:
        print(f"▶ Starting run {run_id}")
        shown = 1
        swarm.start(
            refund_agent,
            [{"role": "user", "content": "Hi, I'd like a refund for my last order."}],
            run_id=run_id,
        )
    while True:
        info = swarm.get_run(run_id)
        for message in info.messages[shown:]:
            _show(message)
        shown = len(info.messages)
        if info.status == "waiting_for_input" and info.waiting_for:
            swarm.send_input(run_id, _answer(info.waiting_for.get("prompt") or "?", name))
            while swarm.get_run(run_id).status == "waiting_for_input":
                time.sleep(0.05)
        elif info.status in ("succeeded", "failed", "cancelled"):
            discount = info.context_variables.get("discount")
            print(f"■ Run {run_id} {info.status}; discount: {discount}%")
            print(f"  Its timeline: durable-swarm runs show {run_id} --database-url {where}")
            return 0 if info.status == "succeeded" else 1
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
    parser.add_argument("--fresh", action="store_true", help="start a new run (a new run id)")
    parser.add_argument("--name", help="answer the name question with this (no prompt)")
    parser.add_argument("--database-url", default=None, help=f"default: ./{DEFAULT_DATABASE}")
    parser.add_argument("--offline", action="store_true", help="scripted model even with a key")
    parser.add_argument(
        "--show-crash",
        nargs="?",
        const="reverse_payment",
        metavar="STEP",
        help="kill the process (SIGKILL) in the middle of STEP (default reverse_payment), then "
        "run again to show it resume",
    )
    args = parser.parse_args(argv)
    run_id = f"refund-{uuid.uuid4().hex[:8]}" if args.fresh else args.run_id
    database_url = (
        args.database_url or os.environ.get("DURABLE_SWARM_DATABASE_URL") or DEFAULT_DATABASE
    )
    if args.show_crash:
        child = ["--run-id", run_id, "--database-url", database_url]
        child += ["--name", args.name] if args.name else []
        child += ["--offline"] if args.offline else []
        return show_crash(child, args.show_crash)
    swarm = DurableSwarm(
        make_client(offline_model, offline=args.offline), database_url=database_url
    )

    def stop(signum: int, frame: Any) -> None:
        print(f"\n⏸ Stopped. Run the same command again to resume run {run_id}.", flush=True)
        os._exit(130)  # leave the run pending in the database; the next launch recovers it

    signal.signal(signal.SIGINT, stop)  # Ctrl+C stops at once, wherever the agent is
    return run_refund(swarm, run_id, args.name)


if __name__ == "__main__":
    sys.exit(main())
