"""The API's per-run credential: HTTP Basic, which the unchanged toxiproxy-python client carries.

Toxiproxy's API has no authentication; it is a control plane (whoever reaches it can cut or
slow every link), so it binds loopback and, here, also wants a credential when one is set:
``FAULTPROXY_API_CREDENTIAL=user:password`` in the server's environment (never argv, which
every local user can read in /proc). Clients put it in the API URL
(``http://user:password@127.0.0.1:8474``): requests and httpx turn that into
``Authorization: Basic ...``, and toxiproxy-python takes ``user:password@127.0.0.1`` as its
host. With no credential configured the server stays a Toxiproxy drop-in.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from typing import Mapping

__all__ = ["CREDENTIAL_ENV", "ApiCredential", "CredentialError", "draw_credential"]

CREDENTIAL_ENV = "FAULTPROXY_API_CREDENTIAL"
USER = "proctor"


class CredentialError(ValueError):
    """A credential that is not ``user:password``."""


def draw_credential() -> str:
    """A fresh ``proctor:<256-bit URL-safe password>`` for one run."""
    return f"{USER}:{secrets.token_urlsafe(32)}"


class ApiCredential:
    """What the API checks on every request; ``None`` = no check (the Toxiproxy drop-in)."""

    def __init__(self, credential: str | None) -> None:
        self.required = bool(credential)
        self.text = credential or ""
        if credential:
            user, sep, password = credential.partition(":")
            if not sep or not user or not password or any(c in credential for c in "@/\r\n "):
                raise CredentialError(f"{CREDENTIAL_ENV} must be user:password (no '@', '/' or spaces)")
            self._expected = b"Basic " + base64.b64encode(credential.encode())

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "ApiCredential":
        return cls(environ.get(CREDENTIAL_ENV) or None)

    def allows(self, headers: Mapping[str, str]) -> bool:
        if not self.required:
            return True
        presented = headers.get("authorization", "").strip().encode("latin-1", "replace")
        return hmac.compare_digest(presented, self._expected)  # constant time
