"""What the file tools and the shell tool cost at the sizes that used to exhaust a worker.

Each case runs in a fresh Python process and prints: the time the tool call took, the process's
RSS just before the call (imports and setup done), its peak RSS during the call (Linux VmHWM,
reset before the call through /proc/self/clear_refs), and the start of the answer. The cases:

  * edit 1 MB x 10k: `edit_file` on 1 MB of "a", `replace_all` with a 10,000-character text (a
    10 GB result; the process gets 4 GiB of address space, so building it fails fast);
  * edit 100 KB x 500: the same on 100 KB with 500 characters (a 50 MB result);
  * read / search 1 MB of short lines: `read_file(max_lines=10)` and `search_files` on a 1 MB
    file of 2-character lines;
  * search 300 folders, 256 fds: `search_files` over 300 folders with a match each, under
    RLIMIT_NOFILE 256 (matches found out of 300);
  * list 50,000 entries: `list_dir` of a folder of 50,000 empty files;
  * shell `true`: the first `ShellTool` call of the process, then the median of 20 more;
  * shell setsid timeout: `sh -c "setsid sleep infinity & sleep 100"` with timeout=2 (the call is
    abandoned after 20 s if it has not answered);
  * shell setsid background: `setsid sleep 10 & echo started; sleep 0.2` (the pause lets the
    child leave the process group before the command exits);
  * shell `yes`: `yes` for its whole timeout (3 s), its output cut at 20,000 characters.

    .venv/bin/python benchmarks/toolkit_bounds.py
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python benchmarks/toolkit_bounds.py  # compare
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _common import print_table

SETUP = """
import json, os, resource, statistics, sys, tempfile, threading, time
from pathlib import Path
from durable_swarm.toolkit import FileTools, ShellTool
root = Path(tempfile.mkdtemp())
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
def reset_peak():  # Linux: VmHWM starts again from the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
"""

CASES = {
    "edit 1 MB x 10k": """
(root / "f.txt").write_text("a" * 1_000_000)
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
call = lambda: FileTools(root).edit_file("f.txt", "a", "b" * 10_000, replace_all=True)
""",
    "edit 100 KB x 500": """
(root / "f.txt").write_text("a" * 100_000)
call = lambda: FileTools(root).edit_file("f.txt", "a", "b" * 500, replace_all=True)
""",
    "read 1 MB of short lines": """
(root / "f.txt").write_text("a\\n" * 500_000)
call = lambda: FileTools(root).read_file("f.txt", max_lines=10)
""",
    "search 1 MB of short lines": """
(root / "f.txt").write_text("a\\n" * 500_000)
call = lambda: FileTools(root).search_files("b")
""",
    "search 300 folders, 256 fds": """
for i in range(300):
    (root / f"d{i:03}").mkdir()
    (root / f"d{i:03}" / "f.txt").write_text("needle\\n")
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
def call():
    answer = FileTools(root, max_matches=1000, max_result_chars=100_000).search_files("needle")
    found = sum(": needle" in line for line in answer.splitlines())
    return f"{found} of 300 matches; last line: {answer.splitlines()[-1]}"
""",
    "list 50,000 entries": """
for i in range(50_000):
    (root / f"f{i:05}").touch()
call = lambda: FileTools(root).list_dir()
""",
    "shell true (21 calls)": """
shell = ShellTool(root, sandbox=False)
def call():
    started = time.monotonic()
    shell(["true"])  # the first call of a process starts the runner server
    first = time.monotonic() - started
    times = []
    for _ in range(20):
        started = time.monotonic()
        answer = shell(["true"])
        times.append(time.monotonic() - started)
    median = statistics.median(times) * 1000
    return f"{answer}; first call {first * 1000:.1f} ms, then median {median:.1f} ms"
""",
    "shell setsid timeout": """
shell = ShellTool(root, timeout=2, shell=True, sandbox=False)
def call():
    answers = []
    threading.Thread(target=lambda: answers.append(shell(
        "setsid sh -c 'echo $$ > pid; exec sleep infinity' & sleep 100")), daemon=True).start()
    end = time.monotonic() + 20
    while not answers and time.monotonic() < end:
        time.sleep(0.01)
    pid = int((root / "pid").read_text())
    try:
        left = open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        left = False
    os.system(f"kill -9 {pid} 2>/dev/null")
    answer = answers[0] if answers else "no answer after 20 s"
    return f"escaped child left running: {left}; {answer}"
""",
    "shell setsid background": """
shell = ShellTool(root, shell=True, sandbox=False)
call = lambda: shell("setsid sleep 10 & echo started; sleep 0.2")
""",
    "shell yes (3 s)": """
shell = ShellTool(root, timeout=3, sandbox=False)
call = lambda: shell(["yes"])
""",
}

MEASURE = """
before = status("VmRSS")
reset_peak()
started = time.monotonic()
try:
    answer = call()
except BaseException as e:
    answer = f"raised {type(e).__name__}: {e}"
seconds = time.monotonic() - started
peak = status("VmHWM")
print(json.dumps({"seconds": seconds, "before": before, "after": peak, "answer": answer}))
"""


def run(case: str) -> dict[str, object]:
    code = SETUP + CASES[case] + MEASURE
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ
    )
    if done.returncode != 0 or not done.stdout.strip():
        return {"seconds": 0.0, "before": 0.0, "after": 0.0, "answer": done.stderr[-200:]}
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    rows = []
    for case in CASES:
        result = run(case)
        answer = " ".join(str(result["answer"]).split())
        rows.append(
            [
                case,
                f"{result['seconds']:.2f}",
                f"{result['before']:.0f}",
                f"{result['after']:.0f}",
                answer[:110],
            ]
        )
    print_table(
        "Toolkit bounds (MiB: RSS of a fresh process before the call, its peak during it)",
        ["case", "seconds", "RSS before", "peak during", "answer"],
        rows,
    )


if __name__ == "__main__":
    main()
