"""The shop's database: customers, products and purchases in a SQLite file made on the fly.

`initialize_database()` creates the file (in a new temporary directory unless given a path) with
a few customers, products and purchases; the tools then read and change it.
"""

import sqlite3
import tempfile
from pathlib import Path

USERS = [
    (1, "Alice", "Smith", "alice@example.com", "+1-555-0101"),
    (2, "Bob", "Jones", "bob@example.com", "+1-555-0102"),
    (3, "Carmen", "Diaz", "carmen@example.com", None),
    (4, "Deepak", "Rao", None, "+1-555-0104"),
]
PRODUCTS = [
    (7, "Rain jacket", 89.0),
    (8, "Wool socks", 12.5),
    (9, "Trail shoes", 120.0),
    (10, "Water bottle", 18.0),
]
PURCHASES = [  # user_id, date_of_purchase, item_id, product_id, amount
    (1, "2024-05-02", 11, 9, 120.0),
    (1, "2024-05-20", 12, 8, 12.5),
    (2, "2024-06-01", 13, 7, 89.0),
    (3, "2024-06-03", 14, 10, 18.0),
]

_path = None


def initialize_database(path=None):
    """Create (or re-create) the database and fill it; returns its path."""
    global _path
    _path = Path(path) if path else Path(tempfile.mkdtemp(prefix="personal_shopper-")) / "shop.db"
    _path.unlink(missing_ok=True)
    with get_connection() as conn:
        conn.executescript(
            """
            CREATE TABLE users (
                user_id INTEGER PRIMARY KEY, first_name TEXT, last_name TEXT,
                email TEXT, phone TEXT);
            CREATE TABLE products (
                product_id INTEGER PRIMARY KEY, product_name TEXT NOT NULL, price REAL NOT NULL);
            CREATE TABLE purchases (
                item_id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, date_of_purchase TEXT,
                product_id INTEGER NOT NULL, amount REAL NOT NULL, refunded INTEGER DEFAULT 0);
            """
        )
        conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?)", USERS)
        conn.executemany("INSERT INTO products VALUES (?, ?, ?)", PRODUCTS)
        conn.executemany(
            "INSERT INTO purchases (user_id, date_of_purchase, item_id, product_id, amount) "
            "VALUES (?, ?, ?, ?, ?)",
            PURCHASES,
        )
    return _path


def get_connection():
    """A new connection to the database (one per call: tools may run on any thread)."""
    if _path is None:
        raise RuntimeError("call initialize_database() first")
    return sqlite3.connect(_path)


def add_purchase(user_id, date_of_purchase, product_id, amount):
    """Record a purchase; returns its new item id."""
    with get_connection() as conn:
        cursor = conn.execute(
            "INSERT INTO purchases (user_id, date_of_purchase, product_id, amount) "
            "VALUES (?, ?, ?, ?)",
            (user_id, date_of_purchase, product_id, amount),
        )
        return cursor.lastrowid


def preview_table(table, limit=5):
    """Print the first rows of a table."""
    with get_connection() as conn:
        cursor = conn.execute(f"SELECT * FROM {table} LIMIT ?", (limit,))
        columns = [d[0] for d in cursor.description]
        print(f"{table}: {', '.join(columns)}")
        for row in cursor.fetchall():
            print("  ", row)
