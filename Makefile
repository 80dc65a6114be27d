# The two commands of the README. Both set up what they need first (idempotent).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast clean-runs

setup:
	@scripts/setup.sh

demo: setup
	$(PY) -m chaos.cli demo

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not integration and not slow" $(PYTEST_ARGS)

clean-runs:
	rm -rf results/runs results/bench
