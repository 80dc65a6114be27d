# The two commands of the README. Both set up what they need first (idempotent).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup setup-python demo test test-fast clean-runs

setup:
	@scripts/setup.sh

setup-python:  # .venv only: test-fast starts no server, so needs no valkey-server/haproxy/postgresql
	@scripts/setup.sh --python-only

demo: setup
	$(PY) -m chaos.cli demo

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup-python
	$(PY) -m pytest -m "not integration and not slow" $(PYTEST_ARGS)

clean-runs:
	rm -rf results/runs results/bench
