from __future__ import annotations

import os
from pathlib import Path

import pytest

import suite_passes
from chaos.deployment import compose_nets
import suite_time
from stack.deploy.ports import PORT_RANGE_ENV, listen_ports, port_slice

# The chaos plugin (chaos/pytest_plugin.py) comes from the `pytest11` entry point in pyproject.toml,
# as in a user's repo: not loaded here (that would register it twice).
# pytester (tests/plugin) must be named in the top-level conftest: pytest refuses `pytest_plugins` lower down.
pytest_plugins = ["pytester"]

# Folders and markers agree: a test in one of these folders starts real servers (Valkey,
# HAProxy, workers, PostgreSQL), and so does any test using one of these fixtures. Such a
# test is marked `integration` here, so `make test-fast` (-m "not integration and not slow")
# needs none of those binaries. tests/unit/test_markers.py checks the selection.
INTEGRATION_FOLDERS = ("tests/integration", "chaos")
SERVER_FIXTURES = frozenset({"valkey_server"})  # tests/unit/web/web_fixtures.py: a real valkey-server


def _starts_servers(item: pytest.Item) -> bool:
    rel = Path(item.path).resolve().relative_to(item.config.rootpath.resolve()).as_posix()
    in_folder = any(rel.startswith(folder + "/") for folder in INTEGRATION_FOLDERS)
    return in_folder or bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_itemcollected(item: pytest.Item) -> None:
    if _starts_servers(item):
        item.add_marker(pytest.mark.integration)


def pytest_configure(config: pytest.Config) -> None:
    # `make test` runs on pytest-xdist workers (gw0, gw1, ...): each draws its stacks' ports
    # from a slice of its own, inherited by every process it starts, so two stacks never
    # race for a port between its draw and its bind (stack/deploy/ports.py). The slices split the range
    # the pass was given (suite_passes.py gives the compose pass, running alongside, a part of its own).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        os.environ[PORT_RANGE_ENV] = port_slice(int(worker[2:]), count, listen_ports())
        os.environ.update(compose_nets.for_worker(int(worker[2:])))  # the compose pass's projects side by side
    suite_time.register(config)  # where the wall time goes, per file: results/suite-time.tsv
    # `--compose tail`: the pytest that hands out the main pass's tests says when its scenario files are done.
    # Popped, so no pytest this one starts (its xdist workers, a test's own run) writes the file too.
    scenarios_done = os.environ.pop(suite_passes.SCENARIOS_DONE_ENV, "")
    if scenarios_done and not hasattr(config, "workerinput"):  # the controller, or the one process without workers
        config.pluginmanager.register(suite_passes.ScenariosDone(Path(scenarios_done)), "suite-scenarios-done")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: xdist requires one order
        items[:] = suite_passes.long_files_first(items)
