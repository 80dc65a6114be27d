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

# The containerized stack (docker-compose.yml; docs/compose.md). Set-up installs the engine when
# missing (root, Debian 12), builds the images without a registry, draws the secrets.
.PHONY: compose-up compose-down
compose-up: setup
	@scripts/compose-setup.sh --up

compose-down:
	@scripts/compose-down.sh
