# The two commands of the README. Both set up what they need first (idempotent).
PY := .venv/bin/python
PYTEST_ARGS ?=
# The suite mostly waits (stacks starting, settle periods, time-scaled schedules): three pytest-xdist
# workers overlap those waits on 2 cores (--dist loadfile keeps a file's tests, and its module-scoped
# stack, on one worker). TEST_WORKERS=0 runs everything in one process (docs/harness.md).
TEST_WORKERS ?= 3

.PHONY: setup setup-python demo lint test test-compose-all test-fast clean-runs

setup:
	@scripts/setup.sh

setup-python:  # .venv only: test-fast starts no server, so needs no valkey-server/haproxy/postgresql
	@scripts/setup.sh --python-only

demo: setup
	$(PY) -m chaos.cli demo

# make test = two pytest passes (suite_passes.py): the main pass on TEST_WORKERS pytest-xdist workers, and
# the compose pass (the container tests: scenarios against docker-compose.yml, the compose stack test) on
# COMPOSE_WORKERS, skipped with one line when no engine answers and none can be installed. Its set-up (engine,
# base and stack images) runs ahead, beside the main pass, in the CPU the main pass leaves idle, and holds the
# engine it started until the compose pass is done (results/compose-setup-ahead.log). The compose pass starts
# once that set-up is ready and the main pass's scenario files (chaos/, handed out first) are done, beside the
# rest of the main pass (COMPOSE_PASS=tail; its output in results/compose-pass.log, shown when it ends).
# COMPOSE_PASS=after runs it after the main pass, =alongside as soon as its set-up is ready, =skip not at all
# (docs/harness.md).
# --durations and the junit files say where the suite's wall time goes, every CI run.
COMPOSE_PASS ?= tail
COMPOSE_WORKERS ?= 2
test: setup lint
	$(PY) suite_passes.py --workers $(TEST_WORKERS) --compose $(COMPOSE_PASS) --compose-workers $(COMPOSE_WORKERS) -- $(PYTEST_ARGS)

# ruff, configured in pyproject.toml ([tool.ruff]): seconds, before any test runs.
lint: setup-python
	$(PY) -m ruff check .

test-compose-all: setup
	$(PY) -m pytest --chaos-target compose --timeout 1500 --junitxml=results/junit-compose.xml chaos $(PYTEST_ARGS)

test-fast: setup-python
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
