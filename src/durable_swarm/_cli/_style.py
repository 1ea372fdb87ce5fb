"""How the command writes for people: colours (only on a terminal, never with NO_COLOR), times,
durations, short one-line previews, and text from runs made safe for a terminal (`clean`)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, TextIO

from .._terminal import clean

__all__ = ["Style", "ago", "clean", "duration", "local_time", "preview", "use_color"]

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
STATUS_COLORS = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "pending": "cyan",
    "waiting_for_input": "magenta",
    "waiting_for_approval": "magenta",
}


def use_color(stream: TextIO, disabled: bool = False) -> bool:
    """Colours only for a person: `stream` is a terminal, `NO_COLOR` is unset or empty,
    `--no-color` was not given and `TERM` is not `dumb`; `FORCE_COLOR` forces them."""
    if disabled or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


class Style:
    """Paints text with ANSI colours when enabled, and leaves it alone otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, *styles: str) -> str:
        """`text` (made safe by `clean`) in the given styles (`bold`, `dim`, `red`, ...)."""
        text = clean(text, lines=True)
        if not self.enabled or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"

    def status(self, status: str) -> str:
        """A run status in its colour (green succeeded, red failed, ...)."""
        return self.paint(status, STATUS_COLORS.get(status, "bold"))


def local_time(moment: datetime | None) -> str:
    """`2024-05-21 15:04:05` in local time ("-" when unknown)."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago, in the largest unit that fits (`12s ago`, `5m ago`, `3h ago`, `2d ago`)."""
    if moment is None:
        return "-"
    seconds = ((now or datetime.now(timezone.utc)) - moment).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{max(int(seconds), 0)}s ago"


def duration(milliseconds: float | None) -> str:
    """`840 ms`, `2.4 s`, `3m 05s` ("" when unknown)."""
    if milliseconds is None:
        return ""
    if milliseconds < 1000:
        return f"{milliseconds:.0f} ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"


def preview(value: Any, width: int = 100) -> str:
    """`value` as one line of at most `width` characters (an ellipsis marks a cut), with its
    control characters shown visibly (see `clean`)."""
    text = clean(" ".join(str(value).split()))
    return text if len(text) <= width else text[: width - 1] + "…"
