"""The web tests' fixtures live in web_fixtures.py, shared with tests/security."""

from web_fixtures import admin_client, app_client, dispatcher, ledger, settings, valkey_server  # noqa: F401
