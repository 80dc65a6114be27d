"""Tokens: signed, expiring, and nothing else identifies a student."""

from __future__ import annotations

import pytest

from stack.web.auth import InvalidToken, Principal, issue_token, verify_token


def test_round_trip() -> None:
    token, expires_at = issue_token("k", "s-1", "NOVA-101", ttl=60, now=1000.0)
    assert expires_at == 1060.0
    assert verify_token("k", token, now=1059.0) == Principal("s-1", "NOVA-101", 1060.0)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t.replace("v1.", "v2.", 1),
        lambda t: t.rsplit(".", 1)[0] + ".AAAA",
        lambda t: t.split(".")[0] + "." + t.split(".")[2],
        lambda t: "",
        lambda t: t + "x",
    ],
    ids=["version", "signature", "missing-part", "empty", "trailing"],
)
def test_tampered_tokens_are_refused(mutate) -> None:  # type: ignore[no-untyped-def]
    token, _ = issue_token("k", "s-1", "NOVA-101", ttl=60, now=1000.0)
    with pytest.raises(InvalidToken):
        verify_token("k", mutate(token), now=1001.0)


def test_other_secret_and_expiry_are_refused() -> None:
    token, _ = issue_token("k", "s-1", "NOVA-101", ttl=60, now=1000.0)
    with pytest.raises(InvalidToken, match="signature"):
        verify_token("other", token, now=1001.0)
    with pytest.raises(InvalidToken, match="expired"):
        verify_token("k", token, now=1060.0)


def test_a_signed_payload_that_is_not_json_is_refused() -> None:
    from stack.web import auth

    payload = auth._b64(b"not json")
    token = f"v1.{payload}.{auth._sign('k', f'v1.{payload}')}"
    with pytest.raises(InvalidToken, match="malformed"):
        verify_token("k", token, now=0.0)
