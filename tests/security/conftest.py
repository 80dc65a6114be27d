"""Security tests reuse the web tests' fixtures: an app on a tmp SQLite ledger with a roster."""

from web_fixtures import admin_client, app_client, dispatcher, ledger, settings, valkey_server  # noqa: F401 - fixtures
from lane_stack import lane_stack  # noqa: F401 - one embedded stack for every round-two attack (session)
