# The two commands a new machine needs: `make demo` and `make test`.
# Each creates the local virtualenv (.venv) on first use and reuses it afterwards.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DURABLE_SWARM_TEST_POSTGRES_URL ?= postgresql://postgres@127.0.0.1:5432/postgres
export DURABLE_SWARM_TEST_POSTGRES_URL
PYTEST_WORKERS ?= 2

.PHONY: demo test test-faults test-chaos lint typecheck pytest browser fuse valgrind bench \
	bench-quick clean docs test-wheel

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	# Swarm itself, only to prove its Agent/Result objects are accepted (its pins are not ours).
	-$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps openai-swarm
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/durable-swarm demo refund --fresh --show-crash

test: lint typecheck pytest

# lint-imports checks the import contracts in pyproject.toml: the core never imports the durable
# layer, DBOS or SQLAlchemy (only the durable layer, the command and the console do), and no
# modules of the package import each other in a cycle.
lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks scripts
	$(BIN)/ruff format --check src tests examples benchmarks scripts
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Two pytest processes per test run (pytest-xdist; one per core here), a test file to each at
# a time, so a file's module-wide fixtures (its database, its launched DBOS) are set up once.
pytest: $(STAMP) browser
	$(BIN)/pytest -q -m "not faults" -n $(PYTEST_WORKERS) --dist loadfile

# The documentation site (docs/, mkdocs.yml) into site/, with warnings as errors: a broken link
# or anchor, a page missing from the nav or an API name that does not resolve fails the build.
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The built sdist and wheel work outside the source tree: the wheel (with the web, mcp and otel
# extras) in a new virtualenv runs the demo, --version, the console with its assets, and mypy
# on a program that uses its types (scripts/test_wheel.py says what it checks).
test-wheel: $(STAMP)
	$(BIN)/python scripts/test_wheel.py

# The slow fault-injection tests (real processes killed, paused, cut off from the database).
# The missing-agent test checks "not failed after 60 s" (DURABLE_SWARM_TEST_MISSING_HORIZON
# shortens it for a quick look by hand); it runs in a second pytest process beside the others,
# which run one at a time (tests/faults/conftest.py).
# The read-only SQLite test mounts a FUSE filesystem: Debian's libfuse3 is installed here when
# missing and running as root; otherwise that test skips and says why (fails under CI).
test-faults: $(STAMP) fuse
	$(BIN)/pytest -q -m faults tests/faults -n 2 --dist loadgroup

# The fleet chaos test alone, longer (150 s of faults instead of the 30 s `test-faults` gives
# it); DURABLE_SWARM_CHAOS_SEED picks another schedule of faults.
test-chaos: $(STAMP)
	DURABLE_SWARM_CHAOS_SECONDS=$${DURABLE_SWARM_CHAOS_SECONDS:-150} \
	  $(BIN)/pytest -q -s -m faults tests/faults/test_fleet_chaos.py -o timeout=1800

# The console's browser tests drive Debian's Chromium through Playwright (Playwright's own
# browser download needs the network). Installed here when missing and running as root;
# otherwise those tests skip and say why (CI sets DURABLE_SWARM_REQUIRE_BROWSER=1: they fail).
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "Could not install chromium: the browser tests will skip (fail under CI)."; \
	  else echo "No /usr/bin/chromium and not root: the browser tests will skip."; fi; }

fuse:
	@ldconfig -p | grep -q libfuse3 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse3-3 >/dev/null) \
	      || echo "Could not install libfuse3-3: the read-only SQLite test will skip (fail under CI)."; \
	  else echo "No libfuse3 and not root: the read-only SQLite test will skip."; fi; }

# `instructions.py` counts instructions under Valgrind's callgrind (Debian's valgrind, installed
# here when missing and running as root).
valgrind:
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null) \
	      || echo "Could not install valgrind: benchmarks/instructions.py will fail."; \
	  else echo "No valgrind and not root: benchmarks/instructions.py will fail."; fi; }

bench: $(STAMP) valgrind
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/runcost.py
	$(BIN)/python benchmarks/instructions.py
	$(BIN)/python benchmarks/owncost.py
	$(BIN)/python benchmarks/concurrency.py
	$(BIN)/python benchmarks/recovery.py
	$(BIN)/python benchmarks/workers.py
	$(BIN)/python benchmarks/idle_fleet.py --sqlite
	$(BIN)/python benchmarks/storage.py
	$(BIN)/python benchmarks/encryption.py
	$(BIN)/python benchmarks/limits.py
	$(BIN)/python benchmarks/waiting.py
	$(BIN)/python benchmarks/mcp_tools.py
	$(BIN)/python benchmarks/console.py
	$(BIN)/python benchmarks/import_time.py

# Small runs of the benchmarks (CI runs this once, so they cannot rot); the figures are noisy.
bench-quick: $(STAMP) valgrind
	$(BIN)/python benchmarks/overhead.py --quick
	$(BIN)/python benchmarks/runcost.py --quick
	$(BIN)/python benchmarks/instructions.py --quick
	$(BIN)/python benchmarks/owncost.py --quick
	$(BIN)/python benchmarks/recovery.py --quick
	$(BIN)/python benchmarks/workers.py --quick
	$(BIN)/python benchmarks/idle_fleet.py --quick
	$(BIN)/python benchmarks/storage.py --quick
	$(BIN)/python benchmarks/encryption.py --quick
	$(BIN)/python benchmarks/limits.py --n 30
	$(BIN)/python benchmarks/waiting.py --quick --idle 2 --sample 3
	$(BIN)/python benchmarks/mcp_tools.py --quick
	$(BIN)/python benchmarks/console.py --quick
	$(BIN)/python benchmarks/import_time.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
