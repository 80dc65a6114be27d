"""Security tests reuse the web tests' fixtures: an app on a tmp SQLite ledger with a roster."""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_TESTS / "unit" / "web"))
sys.path.insert(0, str(_TESTS / "integration"))  # pgserver, roster_client

from web_fixtures import admin_client, app_client, dispatcher, ledger, settings, valkey_server  # noqa: E402,F401
from lane_stack import lane_stack  # noqa: E402,F401 - one embedded stack for every round-two attack (session)
