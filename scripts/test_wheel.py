"""`make test-wheel`: the built package works outside the source tree.

Builds the sdist and the wheel (`python -m build`), checks that the wheel holds `py.typed` and
the console's templates and static assets, installs the wheel with the `web`, `mcp` and `otel`
extras into a new virtualenv in a temporary directory, and there, away from the checkout:

1. checks that `durable_swarm` is imported from that virtualenv, not from the source tree;
2. runs `durable-swarm --version` (it must print the version of the built wheel);
3. runs the refund demo (`durable-swarm demo refund --fresh`; `make demo` adds `--show-crash`,
   whose kill and recovery the test suite covers), with a copy of `examples/` (the demos are
   not part of the package) and short pauses in its slow steps;
4. serves the console on the demo's database (`durable-swarm serve`), fetches the runs page and
   every static asset it links to over HTTP, then stops it;
5. type-checks a small program that uses the package's types with mypy, strict, against the
   installed package (so `py.typed` is what makes it typed), then runs it.

Prints what it does, and exits non-zero at the first failure.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "web,mcp,otel"
WHEEL_MUST_HOLD = (
    "durable_swarm/py.typed",
    "durable_swarm/web/templates/base.html",
    "durable_swarm/web/templates/run.html",
    "durable_swarm/web/static/app.js",
    "durable_swarm/web/static/app.css",
)

TYPED_PROGRAM = '''\
"""Uses durable_swarm's types; mypy --strict must accept it and reject the wrong call below."""
from durable_swarm import Agent, Budget, DurableSwarm, Response, RunInfo, Swarm, tool
from durable_swarm.testing import ScriptedClient, text


@tool(timeout=5)
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"Order {order_id}: shipped."


def answer(swarm: Swarm, agent: Agent) -> str:
    response: Response = swarm.run(agent, [{"role": "user", "content": "Where is 42?"}])
    content = response.messages[-1]["content"]
    return str(content)


def status(swarm: DurableSwarm, run_id: str) -> str:
    info: RunInfo = swarm.get_run(run_id)
    return info.status


agent = Agent(name="Support", functions=[lookup])
print(answer(Swarm(ScriptedClient([text("Shipped.")])), agent))
budget: Budget = Budget(max_model_calls=3)

if budget.max_model_calls is None:  # never: a call the package's annotations forbid, which
    # mypy must flag (strict mode reports the ignore below as unused if it does not)
    DurableSwarm().get_run(42)  # type: ignore[arg-type]
'''


STARTED = time.monotonic()


# The package's own modules are checked in full; the big libraries under it (openai, DBOS,
# SQLAlchemy, pydantic, ...) are read as untyped, which keeps mypy to seconds.
MYPY_CONFIG = """\
[mypy]
[mypy-openai.*,dbos.*,sqlalchemy.*,pydantic.*,pydantic_core.*,mcp.*,fastapi.*,starlette.*]
follow_imports = skip
[mypy-opentelemetry.*,genai_prices.*,re2.*,h11.*,shtab.*,jinja2.*,uvicorn.*,httpx.*,anyio.*]
follow_imports = skip
"""


def say(message: str) -> None:
    print(f"test-wheel [{time.monotonic() - STARTED:5.1f} s] {message}", flush=True)


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    say("$ " + " ".join(argv))
    done = subprocess.run(argv, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        raise SystemExit(f"test-wheel: failed with status {done.returncode}: {' '.join(argv)}")
    return done


def build(out: Path) -> tuple[Path, Path]:
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [n for n in WHEEL_MUST_HOLD if n not in names]
    if missing:
        raise SystemExit(f"test-wheel: {wheel.name} lacks {missing}")
    say(f"built {sdist.name} and {wheel.name} ({len(names)} files, py.typed and console assets in)")
    return wheel, sdist


def install(wheel: Path, where: Path) -> Path:
    """A new virtualenv at `where` with the wheel and its extras; its python.

    This environment's pip installs into it (`pip --python`), which spares the copy of pip
    that a virtualenv would otherwise get; modules are compiled when first imported."""
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    python = where / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    run([*pip, "--disable-pip-version-check", "--no-compile", f"{wheel}[{EXTRAS}]"])
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TOKEN = "test-wheel-token"  # `serve` needs a token (it makes one when given none)


def fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 200:
            raise SystemExit(f"test-wheel: {url} answered {answer.status}")
        return bytes(answer.read())


def serve_and_fetch(tool_bin: Path, database: Path, work: Path) -> None:
    port = free_port()
    argv = [
        str(tool_bin), "serve", "--port", str(port), "--database-url", f"sqlite:///{database}",
        "--token", TOKEN,
    ]  # fmt: skip
    say("$ " + " ".join(argv))
    server = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = fetch(f"{base}/").decode()
                break
            except OSError as e:
                if server.poll() is not None or time.monotonic() > deadline:
                    output = server.stdout.read().decode() if server.stdout else ""
                    raise SystemExit(f"test-wheel: the console did not answer:\n{output}") from e
                time.sleep(0.2)
        if "durable-swarm" not in page:
            raise SystemExit("test-wheel: the runs page does not look like the console's")
        assets = sorted(set(re.findall(r'(?:href|src)="[^"]*?(/static/[^"]+)"', page)))
        if not any(a.endswith(".js") for a in assets) or not any(
            a.endswith(".css") for a in assets
        ):
            raise SystemExit(f"test-wheel: the runs page links no script or stylesheet: {assets}")
        for asset in assets:
            body = fetch(base + asset)
            if not body:
                raise SystemExit(f"test-wheel: {asset} is empty")
            say(f"GET {asset}: 200, {len(body)} bytes")
        say(f"GET /: 200, {len(page)} characters, {len(assets)} assets")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    say("console stopped")


def typecheck(python: Path, work: Path) -> None:
    """mypy --strict on a program that uses the installed package's types. Without py.typed,
    mypy refuses the import ("missing library stubs or py.typed marker") and, seeing no types,
    would not flag the wrong call the program holds, so its `type: ignore` would be unused."""
    program = work / "uses_types.py"
    program.write_text(TYPED_PROGRAM, encoding="utf-8")
    config = work / "mypy.ini"
    config.write_text(MYPY_CONFIG, encoding="utf-8")
    mypy = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(work / ".mypy_cache")]
    mypy += ["--python-executable", str(python), "--config-file", str(config)]
    run([*mypy, program.name], cwd=work)
    say("mypy --strict: the installed package is typed")
    run([str(python), program.name], cwd=work)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="durable-swarm-wheel-") as tmp:
        work = Path(tmp)
        wheel, _ = build(work / "dist")
        python = install(wheel, work / "venv")
        tool_bin = work / "venv" / "bin" / "durable-swarm"
        home = work / "home"
        shutil.copytree(ROOT / "examples", home / "examples")
        where = run([str(python), "-c", "import durable_swarm; print(durable_swarm.__file__)"],
                    cwd=home).stdout.strip()  # fmt: skip
        if not where.startswith(str(work / "venv")):
            raise SystemExit(f"test-wheel: durable_swarm came from {where}, not the new venv")
        say(f"durable_swarm imported from {where}")
        version = run([str(tool_bin), "--version"], cwd=home).stdout.strip()
        wheel_version = wheel.name.split("-")[1]
        if version != f"durable-swarm {wheel_version}":
            raise SystemExit(f"test-wheel: --version says {version!r}, the wheel {wheel_version}")
        say(f"--version: {version}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_"))}
        env["REFUND_DEMO_STEP_SECONDS"] = "0.05"  # the demo's pause in each slow step (1 s)
        demo = run([str(tool_bin), "demo", "refund", "--fresh"], cwd=home, env=env)
        tail = demo.stdout.strip().splitlines()[-3:]
        say("demo refund: ok; its last lines:\n    " + "\n    ".join(tail))
        serve_and_fetch(tool_bin, home / "refund_demo.sqlite", home)
        typecheck(python, home)
    say("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
