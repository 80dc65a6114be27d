"""Finding 2 (high): `proctor up` ran on the token secret and admin token written in
stack/config.py; a token forged with the default secret was accepted and the default admin
token exported every answer. Now every run draws its own secrets, a node refuses a known
default unless a test-only flag allows it, and a forged token is a 401."""

from __future__ import annotations

import pytest
from web_support import TestClient, auth, token_for

from stack.config import KNOWN_DEFAULT_SECRETS, Settings, SettingsError, load_settings
from stack.deploy.secrets import run_secrets
from stack.web.app import create_app
from stack.web.auth import issue_token


def test_a_node_refuses_to_start_on_a_known_default_secret(settings: Settings, ledger) -> None:  # type: ignore[no-untyped-def]
    for field in ("token_secret", "admin_token", "roster_key"):
        for default in KNOWN_DEFAULT_SECRETS:
            with pytest.raises(SettingsError, match=r"PROCTOR_\w+: a known default"):
                create_app(settings.with_overrides(**{field: default}))
    # The repository's defaults themselves are refused...
    with pytest.raises(SettingsError):
        create_app(Settings(run_dir=settings.run_dir))
    # ...unless the test-only flag says so (the control: the refusal is the secrets' doing).
    create_app(Settings(run_dir=settings.run_dir).with_overrides(allow_default_secrets=True))
    assert load_settings({"PROCTOR_ALLOW_DEFAULT_SECRETS": "on"}).controls.allow_default_secrets


def test_every_run_draws_new_secrets() -> None:
    first, second = run_secrets(), run_secrets()
    assert set(first) == {"token_secret", "admin_token", "roster_key", "proxy_secret", "ai_client_token", "sms_client_token",
                          "log_store_token"}
    assert all(first[k] != second[k] and len(first[k]) >= 43 for k in first)  # 256 bits, base64url
    assert not set(first.values()) & KNOWN_DEFAULT_SECRETS


def test_a_token_forged_with_the_old_default_secret_is_refused(app_client: TestClient) -> None:
    forged, _ = issue_token("proctor-dev-secret", "s-1", "NOVA-101", ttl=600)
    assert app_client.post("/v1/attempts", headers=auth(forged)).status_code == 401
    # Control: a token signed with this node's secret is accepted by the same route.
    assert app_client.post("/v1/attempts", headers=auth(token_for(app_client))).status_code == 201


def test_the_old_default_admin_token_exports_nothing(admin_client: TestClient) -> None:
    assert admin_client.get("/admin/export/answers", headers={"X-Admin-Token": "proctor-admin"}).status_code == 403

