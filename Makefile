# The two commands: `make run` and `make test`. Both bootstrap .venv from a bare python3 (>= 3.11).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO   := config/identity.example.toml

.PHONY: run test test-fast test-harness test-system record-fixtures test-slow chaos fleet-chaos lint bench bench-quick docs docs-reference clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "agentd needs python3 >= 3.11, found " + sys.version.split()[0] + "; run: make PYTHON=python3.11 ...")'
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "'$(PYTHON) -m venv' failed: on Debian/Ubuntu, apt-get install python3-venv"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,fleet]'
	@touch $@ $(VENV)/.installed

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	@touch $@ $(VENV)/.installed

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,fleet,bench]'
	@touch $@ $(VENV)/.installed $(VENV)/.installed-test

## run: initialise var/demo from the embedded default config and run the services and the console in the foreground
run: $(VENV)/.installed
	$(BIN)/agentd --config $(DEMO) init
	@ws=$$($(BIN)/agentd --config $(DEMO) status --json | $(BIN)/python -c 'import json, sys; print(json.load(sys.stdin)["workspace"])'); \
	  mkdir -p "$$ws/inbox" "$$ws/goals"; \
	  [ -e "$$ws/inbox/hello.txt" ] || echo "hello from make run" > "$$ws/inbox/hello.txt"; \
	  [ -e "$$ws/goals/demo.txt" ] || echo "show the goal loop: plan, execute twice, verify" > "$$ws/goals/demo.txt"; \
	  echo "make run: dispatcher, sensors and the console in the foreground; Ctrl-C stops all three."; \
	  echo "  drop .txt files into $$ws/inbox (each a task) or $$ws/goals (each a goal-loop workflow)"
	@$(BIN)/agentd --config $(DEMO) web token add demo --replace --json | $(BIN)/python -c \
	  'import json, sys; print("  log in to the console with the demo token: %s" % json.load(sys.stdin)["token"])'
	$(BIN)/agentd --config $(DEMO) run --free-ports

# Tests keep their temp files in /dev/shm where it exists (RAM: the suite's thousands of SQLite fsyncs
# cost nothing there); elsewhere in $$TMPDIR.
TEST_TMP := $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo $${TMPDIR:-/tmp})
# Test runs keep Python's bytecode caches (the gitignored __pycache__ folders) even where the shell says
# PYTHONDONTWRITEBYTECODE: compiling agentd in each of the suite's hundreds of child processes, and
# re-rewriting every test module in each worker, costs more CPU than any test does. compileall warms
# agentd's caches once, before the workers start, so a fresh clone's first run has them too.
TEST_ENV := TMPDIR=$(TEST_TMP) PYTHONDONTWRITEBYTECODE=
WARM     := $(BIN)/python -m compileall -q agentd tests >/dev/null
# Each run of the suite names its 15 slowest tests (setup and teardown included), so the next slow one is seen
# the run it arrives (docs/decisions.md, "The suite's time").
SLOWEST  := --durations=15

## test: the whole default suite, both tiers, four workers (fails if no test ran)
test: $(VENV)/.installed-test
	@$(WARM)
	$(TEST_ENV) $(BIN)/python -m pytest -n 4 $(SLOWEST)

## test-fast: the fast tier only (no child processes): pure logic, store verbs, in-process adapters
test-fast: $(VENV)/.installed-test
	@$(WARM)
	AGENTD_TEST_TIER=fast $(TEST_ENV) $(BIN)/python -m pytest -n 2 $(SLOWEST) -m "not process and not slow and not harness and not system and not deep"

## test-harness: install the pinned claude, codex and hermes CLIs into .cache/harness, then run
## the adapter contract against them inside a loopback-only network namespace (with a temp root of its
## own: inside the namespace pytest could not clean files other suites left owned by other users)
test-harness: $(VENV)/.installed-test
	tests/harness/install.sh
	mkdir -p .cache
	tests/harness/isolated.sh $(BIN)/python -m pytest -m harness --basetemp=.cache/harness-tmp

## test-system: boot a Debian 12 machine with systemd as PID 1 (systemd-nspawn), install agentd's wheel in it as
## docs/install-and-deploy.md says, and live an operator's life with it: start, work, crashes, the watchdog, a
## real Prometheus with agentd's rules, reboot, upgrade, uninstall (needs root, debootstrap, systemd-container)
test-system: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m system tests/system

## record-fixtures: re-record tests/fixtures/harness/ (what the parsing tests read) with the pinned CLIs
## against tests/fakemodel, redacted, inside the same loopback-only namespace; review `git diff` after
record-fixtures: $(VENV)/.installed-test
	tests/harness/install.sh
	tests/harness/isolated.sh $(BIN)/python tests/harness/record.py

## test-slow: the short forms of the slow suites, and every property test at its full example count
test-slow: $(VENV)/.installed-test
	@$(WARM)
	AGENTD_TEST_TIER=slow $(TEST_ENV) $(BIN)/python -m pytest -n 4 $(SLOWEST) -m "slow or property or deep"

## chaos: real services under >= 50 SIGKILLs with poisoned input from every surface, then backups SIGKILLed
## mid-way (tests/backup_chaos.py: every published backup restores clean); prints the tables
chaos: $(VENV)/.installed-test
	$(BIN)/python tests/chaos.py --kills 60
	$(BIN)/python tests/backup_chaos.py --kills 20

## fleet-chaos: three real agents on one real PostgreSQL, 300 fleet tasks, >= 20 SIGKILLs, partitions and a
## PostgreSQL restart; prints the table (about 2 minutes; needs root and Debian's postgresql)
fleet-chaos: $(VENV)/.installed-test
	$(BIN)/python tests/fleet_chaos.py --tasks 300 --kills 24

## bench: issue #13's goals side by side (agentd, raw sqlite3, huey, persist-queue, a bare spawn) and issue #25's
## fleet row (8 claimers, one PostgreSQL), five interleaved repetitions, PASS/FAIL per goal, then issue 55's fleet
## at scale once (100, 300 and 1,000 simulated agents; about 10 minutes more); rewrites
## bench/BENCHMARKS.md (about 2½ minutes on 2 cores without the fleet at scale)
bench: $(VENV)/.installed-bench
	$(BIN)/python bench/run.py --write

## bench-quick: the same at tiny sizes, once: proves the suite runs (nothing judged, nothing written)
bench-quick: $(VENV)/.installed-bench
	$(BIN)/python bench/run.py --quick

## docs: build docs/ as a site into .cache/site with MkDocs, strict: a page missing from mkdocs.yml's nav, a
## link or anchor that does not resolve, any warning fails it (tests/test_docs.py checks the README's links)
docs: $(VENV)/.installed-docs
	$(BIN)/mkdocs build --strict --site-dir .cache/site

## docs-reference: write the reference pages that come from the code (tests/test_docs.py checks them)
docs-reference: $(VENV)/.installed
	$(BIN)/agentd config reference > docs/configuration.md
	$(BIN)/python -c 'from agentd.outlook.metric_specs import reference; print(reference(), end="")' > docs/metrics.md

lint: $(VENV)/.installed-test
	$(BIN)/ruff check agentd tests bench
	$(BIN)/mypy
	MYPYPATH=tests $(BIN)/mypy --strict tests/rig.py tests/inprocess.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
