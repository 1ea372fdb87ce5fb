"""The scripted model the research example uses offline: a plan-then-execute researcher, a
searcher that reads the library, and a writer that drafts the report.

Each answer is a function of the request alone (who is speaking, what the tools answered so far),
as a real model's would be, so a durable run that resumes after a crash asks the same questions
and gets the same answers.
"""

import json
import re

from _common import last_user_text, tool_names

from durable_swarm.testing import ToolCall, calls, text

NOTHING = "The library has nothing on this."


def topic_of(request):
    """The subject of a request like "Write a short report on how bees communicate."."""
    found = re.search(r"\b(?:on|about)\s+(.+?)[.?!]*$", request.strip(), re.IGNORECASE)
    return (found.group(1) if found else request).strip().rstrip(".?!")


def sentences(text_):
    return [s for s in re.split(r"(?<=[.!?])\s+", text_.strip()) if s]


def todo(index, status, note=""):
    return ToolCall("update_todo", {"index": index, "status": status, "note": note})


def results_of(messages):
    """The tool results so far, in order, as (tool name, content)."""
    return [(m.get("tool_name"), str(m.get("content"))) for m in messages if m["role"] == "tool"]


def researcher(messages):
    """Plan, ask, search, write, save, answer; revise the plan if the library has nothing."""
    topic = topic_of(last_user_text(messages))
    results = results_of(messages)
    done = [name for name, _ in results]
    last, content = results[-1] if results else (None, "")
    answers = dict(results)
    if not results:
        plan = [
            "Ask who the report is for",
            f"Find what the library says about {topic}",
            "Have the report written for that reader",
            "Save the report as report.md",
        ]
        return calls(ToolCall("write_todos", {"todos": [{"content": c} for c in plan]}))
    if last == "write_todos" and done.count("write_todos") == 1:
        question = f"Who is the report on {topic} for (for example: a school class, experts)?"
        return calls(todo(1, "in_progress"), ToolCall("ask_user", {"question": question}))
    if last == "ask_user":
        task = f"Find the facts the library has about {topic}."
        return calls(
            todo(1, "done", f"for {content}"),
            todo(2, "in_progress"),
            ToolCall("delegate_to_searcher", {"task": task}),
        )
    if last == "delegate_to_searcher" and NOTHING in content:
        revised = [
            {"content": "Ask who the report is for", "status": "done"},
            {"content": f"Find what the library says about {topic}", "status": "failed"},
            {"content": "Tell the user the library cannot answer this"},
        ]
        return calls(
            todo(2, "failed", "the library has no document on it"),
            ToolCall("write_todos", {"todos": revised}),
        )
    if last == "write_todos":  # the revised plan
        return calls(todo(3, "done", "the library has nothing on it"))
    if done.count("write_todos") == 2:
        return text(
            f"I could not write a report on {topic}: the library has no document about it. "
            "Ask me about something it covers, such as honeybees, the Moon or tidal power."
        )
    if last == "delegate_to_searcher":
        title = topic[0].upper() + topic[1:]
        task = (
            f"Write a short report titled '{title}' for {answers['ask_user']} "
            f"from these notes:\n{content}"
        )
        sources = len(set(re.findall(r"\[([^\]]+)\]$", content, re.MULTILINE)))
        return calls(
            todo(2, "done", f"facts from {sources} document(s)"),
            todo(3, "in_progress"),
            ToolCall("delegate_to_writer", {"task": task}),
        )
    if last == "delegate_to_writer":
        return calls(
            todo(3, "done"),
            todo(4, "in_progress"),
            ToolCall("write_file", {"path": "report.md", "content": content}),
        )
    if last == "write_file":
        status = "failed" if content.startswith("Error") else "done"
        return calls(todo(4, status, content))
    report = answers.get("write_file", "")
    if report.startswith("Error"):
        return text(f"The report is written but could not be saved: {report}")
    return text(
        f"Done: your report on {topic} is saved as report.md in the workspace. It was written "
        f"for {answers['ask_user']} from the library's documents."
    )


def searcher(messages):
    """Search, read the two best documents, report their first sentences with the source."""
    task = last_user_text(messages)
    results = results_of(messages)
    if not results:
        return calls(ToolCall("search_corpus", {"query": topic_of(task)}))
    name, content = results[-1]
    if name == "search_corpus":
        if content.startswith("No document"):
            return text(NOTHING)
        names = [line.split(":")[0] for line in content.splitlines()][:2]
        return calls(*(ToolCall("read_document", {"name": n}) for n in names))
    arguments = {
        call["id"]: json.loads(call["function"]["arguments"])
        for message in messages
        for call in message.get("tool_calls") or []
    }
    notes = []
    for message in messages:
        if message["role"] == "tool" and message.get("tool_name") == "read_document":
            source = arguments[message["tool_call_id"]]["name"]
            body = str(message["content"]).split("\n", 2)[-1]
            notes += [f"- {s} [{source}]" for s in sentences(body)[:3]]
    return text("\n".join(notes) if notes else NOTHING)


def writer(messages):
    """A report in Markdown: title, reader, the notes as prose, sources."""
    task = last_user_text(messages)
    found = re.match(r"Write a short report titled '(.+)' for (.+?) from these notes:\n", task)
    title, reader = found.groups() if found else ("Report", "the reader")
    notes = re.findall(r"^- (.+) \[([^\]]+)\]$", task, re.MULTILINE)
    prose = " ".join(sentence for sentence, _ in notes)
    sources = "\n".join(f"- {s}" for s in dict.fromkeys(source for _, source in notes))
    return text(f"# {title}\n\n_Written for {reader}._\n\n{prose}\n\n## Sources\n\n{sources}\n")


def respond(messages, tools):
    """Answer as whichever agent is speaking (told apart by the tools it is offered)."""
    offered = tool_names(tools)
    if "write_todos" in offered:
        return researcher(messages)
    if "search_corpus" in offered:
        return searcher(messages)
    return writer(messages)
