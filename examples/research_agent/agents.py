"""The research example's agents: a planning researcher with two sub-agents and file tools.

* `Searcher` looks things up in a small library bundled with the example (`corpus/*.md`) with
  `search_corpus` and `read_document`, and reports the facts with their sources.
* `Writer` turns notes into a short report in Markdown.
* `Researcher` is made with `create_durable_agent`: it writes a plan, asks the person who the
  report is for, delegates the search and the writing to the two sub-agents (each a child run
  of its own in a durable run), and saves the report with the file tools, which are confined to
  the workspace directory.
"""

import re
from pathlib import Path

from durable_swarm import Agent, FileTools
from durable_swarm.planning import create_durable_agent

CORPUS = Path(__file__).resolve().parent / "corpus"
STOP_WORDS = {
    "the", "and", "for", "how", "what", "why", "with", "about", "does", "from", "that", "this",
    "are", "its", "their", "report", "short", "write", "find", "says", "corpus", "library",
}  # fmt: skip


def _documents():
    """name -> (title, text) for every document of the library."""
    documents = {}
    for path in sorted(CORPUS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip()
        documents[path.stem] = (title, text)
    return documents


def _stems(text):
    """The words of `text` that matter, cut to 5 letters (so "bees" finds "bee", "dancing"
    finds "dance")."""
    words = re.findall(r"[a-z]+", text.lower())
    return [w[:5].rstrip("s") for w in words if len(w) > 2 and w not in STOP_WORDS]


def search_corpus(query):
    """Search the library for documents about a subject; returns the best matches (name, title
    and first sentence), best first. Read a match in full with read_document.

    Args:
        query: a few keywords, e.g. "honeybee dance communication".
    """
    wanted = set(_stems(query))
    scored = []
    for name, (title, text) in _documents().items():
        body = _stems(text)
        score = sum(body.count(w) for w in wanted) + 3 * len(wanted & set(_stems(title)))
        if score:
            scored.append((-score, name, title, text))
    if not scored:
        return f"No document matches {query!r}. Try other keywords."
    lines = []
    for _, name, title, text in sorted(scored)[:3]:
        first = re.split(r"(?<=[.!?])\s+", text.split("\n", 2)[-1].strip())[0]
        lines.append(f"{name}: {title}. {first}")
    return "\n".join(lines)


def read_document(name):
    """Read one document of the library in full.

    Args:
        name: the document's name, as search_corpus gives it (e.g. "honeybee-dance").
    """
    documents = _documents()
    if name not in documents:
        return f"Error: there is no document {name!r}; the library has: {', '.join(documents)}."
    return documents[name][1]


searcher = Agent(
    name="Searcher",
    instructions=(
        "You are Searcher. You find facts in a small library of documents. Search it with "
        "search_corpus, read the best matches with read_document, and answer with the facts that "
        "answer the task, each followed by its source in brackets, e.g. [honeybee-dance]. Use only "
        "what the documents say."
    ),
    functions=[search_corpus, read_document],
)

writer = Agent(
    name="Writer",
    instructions=(
        "You are Writer. You write a short report in Markdown from the notes in your task: a "
        "title, a paragraph or two for the intended reader, and a Sources section listing the "
        "sources in brackets. Answer with the report only."
    ),
)

SYSTEM_PROMPT = """\
You are Researcher. You answer research questions with a short written report, using only the
facts your Searcher sub-agent finds in the library. Ask the user who the report is for before
you write it. Have the Writer sub-agent write the report from the Searcher's notes, save it with
write_file as report.md in the workspace, and end with a short answer that says where it is."""


def build_researcher(workspace, model="gpt-4o"):
    """The researcher, its file tools confined to `workspace` (an existing directory)."""
    files = FileTools(workspace)
    return create_durable_agent(
        model=model,
        skills=[files.skill],
        sub_agents=[searcher, writer],
        system_prompt=SYSTEM_PROMPT,
        name="Researcher",
    )
