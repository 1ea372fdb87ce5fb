"""The airline's function evals: does the agent pick the right function on its first move?

Each case is a conversation and the function expected (`"None"`: the agent should answer in
words, e.g. ask a question). Runs each case `n` times with `max_turns=1`, so the function runs but
the conversation stops there, and reads `tool_name` from the tool message. Offline it checks the
scripted model; with OPENAI_API_KEY or OPENAI_BASE_URL set it checks the real model.
Run: `python examples/airline/evals/function_evals.py [--n 5] [--save results.json]`
(exit status 1 if accuracy is below 100%). The test suite runs the same cases.
"""

import argparse
import datetime
import json
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # examples/, for `_common`

from _common import make_swarm, parse_args

from airline.agents import flight_modification, triage_agent
from airline.offline_model import respond

CASES_DIR = Path(__file__).parent / "eval_cases"


def load_cases(name):
    """The cases in eval_cases/<name>.json."""
    return json.loads((CASES_DIR / f"{name}.json").read_text())


def extract_response_info(response):
    """`{"tool_calls": <name of the first tool that ran>}` or `{"message": <the answer>}`."""
    results = {}
    for message in response.messages:
        if message["role"] == "tool":
            results["tool_calls"] = message["tool_name"]
            break
        if not message.get("tool_calls"):
            results["message"] = message["content"]
    return results


def run_function_evals(client, agent, test_cases, n=1):
    """Run every case `n` times; print each outcome; return (accuracy in %, per-case results)."""
    correct = 0
    results = []
    for case in test_cases:
        outcome = {"messages": case["conversation"], "expected_function": case["function"]}
        outcome["actual_function"] = []
        for _ in range(n):
            response = client.run(agent=agent, messages=case["conversation"], max_turns=1)
            info = extract_response_info(response)
            actual = info.get("tool_calls", "None")
            outcome["actual_function"].append(actual)
            correct += actual == case["function"]
        right = outcome["actual_function"].count(case["function"])
        outcome["case_accuracy"] = f"{right / n * 100:.2f}%"
        results.append(outcome)
        mark = "ok  " if right == n else "FAIL"
        print(
            f"{mark} {case['conversation'][-1]['content']!r}: expected {case['function']}, "
            f"got {outcome['actual_function']}"
        )
    accuracy = correct / (len(test_cases) * n) * 100
    print(f"{agent.name}: {correct}/{len(test_cases) * n} correct ({accuracy:.2f}%)")
    return accuracy, results


def main(argv=None):
    """Run the triage and flight modification evals; optionally save the results as JSON."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--n", type=int, default=1, help="runs per case (default 1)")
    extra.add_argument("--save", metavar="PATH", help="append the results to this JSON file")
    options, rest = extra.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    client = make_swarm(respond, args)  # Swarm, or DurableSwarm with --durable
    report = {"id": str(uuid.uuid4()), "timestamp": datetime.datetime.now().isoformat()}
    lowest = 100.0
    for agent, cases in (
        (triage_agent, "triage_cases"),
        (flight_modification, "flight_modification_cases"),
    ):
        accuracy, results = run_function_evals(client, agent, load_cases(cases), options.n)
        report[agent.name] = {"accuracy": accuracy, "results": results}
        lowest = min(lowest, accuracy)
    if options.save:
        path = Path(options.save)
        saved = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps([*saved, report], indent=2))
    return 0 if lowest == 100.0 else 1


if __name__ == "__main__":
    sys.exit(main())
