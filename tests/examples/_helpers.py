"""What the examples' tests share: where the examples are, and colour codes to strip.

Importing this puts the examples directory on `sys.path`, as each example does for itself, so
tests import `basic.bare_minimum`, `triage_agent.agents`, `_common`, ...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

ANSI = re.compile(r"\x1b\[[0-9;]*m")
