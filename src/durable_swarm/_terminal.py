"""Text from runs made safe to print on a terminal: what a model, a tool or a database row says
must never move the cursor, retitle the window, hide text or ring the bell."""

from __future__ import annotations

import re

__all__ = ["clean"]

# What a terminal could take as a command, or that hides or reorders text: C0 controls (ESC, BEL,
# CR, backspace, ...), DEL, C1 controls (CSI, OSC, ...) and the bidirectional overrides.
_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: object, *, lines: bool = False) -> str:
    """`str(text)` with every character a terminal could act on written visibly instead
    (`\\x1b`, `\\x07`, `\\x9b`, `\\u202e`): control characters and bidirectional
    overrides. Tabs are kept, and newlines too when the text may span several `lines`."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE).sub(_visible, str(text))
