"""A terminal chat with an agent: Swarm's `run_demo_loop` and its two printing helpers.

`from swarm.repl import run_demo_loop` becomes `from durable_swarm.repl import run_demo_loop`.
Unlike Swarm's, the loop carries `context_variables` over from one turn to the next (as it does
the agent) and ends quietly on end of input (Ctrl-D) or Ctrl-C.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from ._terminal import clean
from .errors import RunNotFoundError, SessionNotFoundError
from .handoffs import AfterWork, AfterWorkOption
from .swarm import Swarm
from .types import Response

__all__ = ["pretty_print_messages", "process_and_print_streaming_response", "run_demo_loop"]

_SENDER = "\033[94m{}\033[0m:"
_TOOL = "\033[95m{}\033[0m({})"


def _arguments_text(arguments: str | None) -> str:
    """`{"city": "Paris"}` as `"city"= "Paris"` (Swarm's display); unparsable text as it is."""
    try:
        text = json.dumps(json.loads(arguments or "{}"))
    except (TypeError, ValueError):
        return arguments or ""
    text = text.replace(":", "=")
    return text[1:-1] if text.startswith("{") and text.endswith("}") else text


def _tool_call_line(tool_call: dict[str, Any]) -> str:
    function = tool_call.get("function") or {}
    name, arguments = function.get("name", ""), _arguments_text(function.get("arguments"))
    return _TOOL.format(clean(name), clean(arguments))


def _print_tool_calls(tool_calls: list[dict[str, Any]]) -> None:
    """The tool call lines that follow `<sender>: [content]` (a blank line first if several)."""
    if len(tool_calls) > 1:
        print()
    for tool_call in tool_calls:
        print(_tool_call_line(tool_call))


def pretty_print_messages(messages: Iterable[dict[str, Any]]) -> None:
    """Print the assistant messages of `messages` as `<sender>: <content>` and their tool calls.

    Other roles (user, tool, system) are skipped. The sender is shown in blue and each tool
    call in purple as `name("arg"= value)`, as Swarm's REPL does; control characters in what the
    model wrote are shown visibly (`\\x1b`), never sent to the terminal.
    """
    for message in messages:
        if message.get("role") != "assistant":
            continue
        print(_SENDER.format(clean(message.get("sender", ""))), end=" ")
        if message.get("content"):
            print(clean(message["content"], lines=True))
        tool_calls = message.get("tool_calls") or []
        _print_tool_calls(tool_calls)
        if not message.get("content") and not tool_calls:
            print()


def process_and_print_streaming_response(events: Iterable[dict[str, Any]]) -> Response | None:
    """Print a streamed run as it arrives and return its final `Response`.

    `events` is what `run(..., stream=True)` yields. Content is printed chunk by chunk after the
    speaking agent's name; the tool calls of a message are printed once the message has ended
    (their arguments arrive in pieces). Returns None if the stream ends without a response.
    """
    sender = ""
    printed_content = False
    tool_calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if "response" in event:
            return event["response"]
        if event.get("delim") == "start":
            printed_content, tool_calls = False, {}
            continue
        if event.get("delim") == "end":
            calls = [tool_calls[i] for i in sorted(tool_calls)]
            if printed_content:
                print()
            elif calls:
                print(_SENDER.format(clean(sender)), end=" ")
            _print_tool_calls(calls)
            continue
        if event.get("sender"):
            sender = event["sender"]
        if event.get("content"):
            if not printed_content:
                print(_SENDER.format(clean(sender)), end=" ", flush=True)
                printed_content = True
            print(clean(event["content"], lines=True), end="", flush=True)
        for position, delta in enumerate(event.get("tool_calls") or []):
            call = tool_calls.setdefault(
                delta.get("index", position), {"function": {"name": "", "arguments": ""}}
            )
            function = delta.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
    return None


def run_demo_loop(
    starting_agent: Any,
    context_variables: dict[str, Any] | None = None,
    stream: bool = False,
    debug: bool = False,
    *,
    swarm: Any = None,
    input_fn: Callable[[str], str] | None = None,
    session_id: str | None = None,
    session: str | None = None,
) -> None:
    """Chat with `starting_agent` in the terminal until end of input (Ctrl-D) or Ctrl-C.

    Each line read with `input_fn("User: ")` is added to the conversation and run; assistant
    messages are printed as `<sender>: <content>`, tool calls as `name("arg"= value)`, and with
    `stream=True` content is printed as it arrives. The agent the run ended on and the updated
    `context_variables` carry over to the next turn.

    `swarm` is the client that runs each turn: a new `Swarm()` (which needs `OPENAI_API_KEY`)
    when None, or any object with Swarm's `run` (a `DurableSwarm`, a `Swarm` with a test client).
    `input_fn` reads a line given a prompt; None means the builtin `input` (looked up at each
    call, so a patched `builtins.input` is used too).

    With a `DurableSwarm` and a `session_id`, the whole conversation is one durable run that
    waits for each of your lines (`REVERT_TO_USER`): kill the REPL at any point, start it again
    with the same `session_id`, and the conversation continues where it was, its history shown.

    With `session` (a `Swarm` or a `DurableSwarm`), every line is a run of that session (see
    `durable_swarm.sessions`): the conversation starts from the session's messages (shown
    first) and carries over to the next chat of the same session.
    """
    if swarm is None:
        swarm = Swarm()
    print("Starting Swarm CLI 🐝")
    if session is not None:
        try:
            _session_chat(swarm, starting_agent, context_variables, session, stream, input_fn)
        except (EOFError, KeyboardInterrupt):
            print()
        return
    if session_id is not None:
        try:
            _durable_session(swarm, starting_agent, context_variables, session_id, input_fn)
        except (EOFError, KeyboardInterrupt):
            print()
        return
    messages: list[dict[str, Any]] = []
    agent = starting_agent
    context = dict(context_variables or {})
    try:
        while True:
            line = input_fn("User: ") if input_fn else builtins.input("User: ")
            messages.append({"role": "user", "content": line})
            result = swarm.run(
                agent=agent,
                messages=messages,
                context_variables=context,
                stream=stream,
                debug=debug,
            )
            if stream:
                response = process_and_print_streaming_response(result)
            else:
                response = result
                pretty_print_messages(response.messages)
            if response is None:
                continue
            messages.extend(response.messages)
            agent = response.agent or agent
            context = dict(response.context_variables)
    except (EOFError, KeyboardInterrupt):
        print()


def _session_chat(
    swarm: Any,
    agent: Any,
    context_variables: dict[str, Any] | None,
    session: str,
    stream: bool,
    input_fn: Callable[[str], str] | None,
) -> None:
    """The REPL on a session: each line is a run of it (its earlier messages shown first)."""
    try:
        earlier = swarm.get_session(session).messages
    except SessionNotFoundError:
        earlier = []
    if earlier:
        print(f"(session {session}: {len(earlier)} earlier messages)")
        _print_history(earlier)
    context = dict(context_variables or {})
    while True:
        line = _read(input_fn, "User: ")
        result = swarm.run(
            agent, [{"role": "user", "content": line}], context, stream=stream, session=session
        )
        if stream:
            response = process_and_print_streaming_response(result)
        else:
            response = result
            pretty_print_messages(response.messages)
        if response is not None:
            if response.agent is not None and not isinstance(response.agent, str):
                agent = response.agent
            context = dict(response.context_variables)


_WAITING = ("waiting_for_input", "waiting_for_approval")
_POLL_SECONDS = 0.05


def _read(input_fn: Callable[[str], str] | None, prompt: str) -> str:
    return input_fn(prompt) if input_fn else builtins.input(prompt)


def _print_history(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        if message.get("role") == "user":
            print(f"User: {message.get('content') or ''}")
        else:
            pretty_print_messages([message])


def _settle(swarm: Any, session_id: str, after: int) -> Any:
    """Wait until the run has more than `after` messages and waits for the person, or ended."""
    while True:
        info = swarm.get_run(session_id)
        if info.status in _WAITING and len(info.messages) > after:
            return info
        if info.status in ("succeeded", "failed", "cancelled"):
            return info
        time.sleep(_POLL_SECONDS)


def _durable_session(
    swarm: Any,
    agent: Any,
    context_variables: dict[str, Any] | None,
    session_id: str,
    input_fn: Callable[[str], str] | None,
) -> None:
    """The REPL as one durable run that waits for the person after every answer."""
    if not hasattr(swarm, "send_input"):
        raise TypeError("session_id needs a DurableSwarm (pass swarm=DurableSwarm(...)).")
    try:
        info = swarm.get_run(session_id)
    except RunNotFoundError:
        line = _read(input_fn, "User: ")
        swarm.start(
            agent,
            [{"role": "user", "content": line}],
            context_variables,
            run_id=session_id,
            after_work=AfterWork(AfterWorkOption.REVERT_TO_USER),
        )
        shown = after = 1
    else:
        print(f"(resuming session {session_id}: {info.status})")
        _print_history(info.messages)
        shown = len(info.messages)
        after = shown - 1
    while True:
        info = _settle(swarm, session_id, after)
        pretty_print_messages(info.messages[shown:])
        shown = len(info.messages)
        if info.status == "waiting_for_approval":
            call = info.waiting_for["tool_call"]
            answer = _read(input_fn, f"Approve {_tool_call_line(call)}? [y/N] ")
            if answer.strip().lower() in ("y", "yes"):
                swarm.approve(session_id, call["id"])
            else:
                swarm.reject(session_id, call["id"], message="The user said no.")
            after = shown
            continue
        if info.status != "waiting_for_input":
            print(f"(session {session_id} {info.status}{': ' + info.error if info.error else ''})")
            return
        swarm.send_input(session_id, _read(input_fn, "User: "))
        shown += 1  # the line just typed
        after = shown
