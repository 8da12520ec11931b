# The two commands: `make run` and `make test`. Both bootstrap .venv from a bare python3 (>= 3.11).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO   := config/identity.example.toml

.PHONY: run test test-slow lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "agentd needs python3 >= 3.11, found " + sys.version.split()[0] + "; run: make PYTHON=python3.11 ...")'
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "'$(PYTHON) -m venv' failed: on Debian/Ubuntu, apt-get install python3-venv"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@ $(VENV)/.installed

## run: initialise var/demo from the embedded default config and run the dispatcher in the foreground
run: $(VENV)/.installed
	$(BIN)/agentd --config $(DEMO) init
	$(BIN)/agentd --config $(DEMO) task add --type example --subject "hello from make run" --payload '{"note": "hi", "write": "hello.txt"}'
	@echo "make run: dispatching in the foreground; Ctrl-C stops it. Watch: $(BIN)/agentd --config $(DEMO) events --follow"
	$(BIN)/agentd --config $(DEMO) dispatch

## test: the whole default suite (fails if no test ran)
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

## test-slow: the long forms of the slow suites
test-slow: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m slow

lint: $(VENV)/.installed-test
	$(BIN)/ruff check agentd tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
