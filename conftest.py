from __future__ import annotations

from pathlib import Path

import pytest

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
