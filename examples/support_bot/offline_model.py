"""The scripted model the support bot uses offline: it answers from the help center's articles."""

import re

from _common import has_words, last_user_text, my_tool_result, tool_names

from durable_swarm.testing import ToolCall, calls, text

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
TOPICS = (
    "api", "key", "keys", "limit*", "429", "bill*", "invoice*", "pay*", "refund*", "image*",
    "picture*", "audio", "speech", "transcri*", "fine-tun*", "finetun*", "train*", "password",
    "account", "data", "privacy", "delete", "ticket", "email",
)  # fmt: skip


def first_sentences(body, count=2):
    """The first `count` sentences of an article."""
    return " ".join(re.split(r"(?<=[.!?])\s+", body.strip())[:count])


def last_answer(messages):
    """The latest assistant text (what an email would send)."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("content"):
            return message["content"]
    return ""


def help_center(messages, said, result):
    """The help center agent: search, answer from the top article, ticket or email on request."""
    last = messages[-1].get("tool_name") if result is not None else None
    if last == "query_docs":
        found = re.match(r"Title: (.*)\nContent: (.*)\nURL: (.*)", result, re.DOTALL)
        if not found:
            return text("I found no article about that. Shall I open a support ticket for you?")
        title, body, url = found.groups()
        return text(f'From the help center, "{title}": {first_sentences(body)} ({url})')
    if last == "submit_ticket":
        return text(f"Done: {result}. Our team will get back to you by email.")
    if last == "send_email":
        return text("Done: it is on its way to your inbox.")
    if has_words(said, "ticket"):
        return calls(ToolCall("submit_ticket", {"description": said}))
    email = EMAIL.search(said)
    if email:
        message = last_answer(messages) or said
        return calls(ToolCall("send_email", {"email_address": email.group(0), "message": message}))
    return calls(ToolCall("query_docs", {"query": said}))


def respond(messages, tools):
    """Answer as whichever agent is speaking (told apart by the tools it is offered)."""
    offered, said = tool_names(tools), last_user_text(messages)
    if "transfer_to_help_center" in offered:  # the front desk
        if has_words(said, *TOPICS):
            return calls(ToolCall("transfer_to_help_center"))
        return text("Hello! I can help with questions about our API, your account and billing.")
    return help_center(messages, said, my_tool_result(messages, tools))
