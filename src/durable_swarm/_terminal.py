"""Text from runs made safe to print on a terminal: what a model, a tool or a database row says
must never move the cursor, retitle the window, hide text or ring the bell."""

from __future__ import annotations

import re

__all__ = ["clean"]

# What a terminal could take as a command, or that hides or reorders text: C0 controls (ESC, BEL,
# CR, backspace, ...), DEL, C1 controls (CSI, OSC, ...), the bidirectional marks and overrides,
# and the invisible format characters (zero-width space and non-joiner, word joiner, byte order
# mark, soft hyphen, line and paragraph separators, the tag characters that can hide text; not
# the zero-width joiner, which emoji sequences need).
# The web console's script (`web/static/app.js`, `UNSAFE`) shows the same set.
INVISIBLE = (
    "\u00ad\u061c\u180e\u200b\u200c\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
    "\ufff9-\ufffb\U000e0000-\U000e007f"
)
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{INVISIBLE}]")
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{INVISIBLE}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean(text: object, *, lines: bool = False) -> str:
    """`str(text)` with every character a terminal could act on written visibly instead
    (`\\x1b`, `\\x07`, `\\x9b`, `\\u202e`): control characters and bidirectional
    overrides. Tabs are kept, and newlines too when the text may span several `lines`."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE).sub(_visible, str(text))
