"""The help center's search: an embedded SQLite FTS5 full-text index of the articles.

Swarm's support bot searched its articles with embeddings stored in a Qdrant server. Here the
search runs embedded, with SQLite's FTS5 extension:

* zero extra dependency: `sqlite3` ships with Python, and its SQLite is built with FTS5 on all
  common platforms (no server to start, no embedding model to call, works offline);
* ranked search that is good enough for a help center: BM25 relevance with the title weighted
  above the body, and the Porter stemmer, so "rotating keys" finds "Rotate a key".

The index lives in memory and is built from data/articles.json at start (a few milliseconds).
"""

import json
import re
import sqlite3
import threading
from pathlib import Path

ARTICLES = Path(__file__).parent / "data" / "articles.json"
STOP_WORDS = {
    "a", "an", "and", "are", "can", "do", "does", "for", "how", "i", "in", "is", "it", "me",
    "my", "of", "on", "or", "the", "to", "what", "when", "where", "why", "with", "you", "your",
}  # fmt: skip


class HelpCenter:
    """Articles in an in-memory FTS5 index, searched by relevance (BM25)."""

    def __init__(self, articles):
        self._lock = threading.Lock()  # tools may run on worker threads
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE articles USING fts5("
            "title, body, url UNINDEXED, tokenize = 'porter unicode61')"
        )
        self._db.executemany(
            "INSERT INTO articles (title, body, url) VALUES (?, ?, ?)",
            [(a["title"], a["body"], a["url"]) for a in articles],
        )

    @classmethod
    def load(cls, path=ARTICLES):
        """The help center built from a JSON list of {title, body, url} articles."""
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def search(self, query, limit=3):
        """The best matching articles for a question in plain words, best first, as
        (title, body, url) tuples. Any word of the question may match."""
        words = [w for w in re.findall(r"\w+", query.lower()) if w not in STOP_WORDS]
        if not words:
            return []
        match = " OR ".join(f'"{word}"' for word in words)
        with self._lock:
            return self._db.execute(
                "SELECT title, body, url FROM articles WHERE articles MATCH ? "
                "ORDER BY bm25(articles, 10.0, 1.0) LIMIT ?",
                (match, limit),
            ).fetchall()
