"""HTTP clients for the project's own calls to its services on 127.0.0.1 (admin APIs, probes, polls).

httpx builds an SSL context from the system's CA bundle for every ``Client``, also for an
``http://`` URL, and ``httpx.get`` builds a ``Client`` per call: about 20 CPU ms each, measured.
A poll every 20 ms (the nemesis that waits for a provider's effect) spent most of its CPU there,
and paid it again as latency before each look. Clients made here share one default context,
built once per process, and never route through a proxy from the environment.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx

__all__ = ["client", "default_tls", "request"]


@functools.cache
def default_tls() -> ssl.SSLContext:
    """httpx's own default verifying context (what every ``httpx.Client()`` built for itself), once per
    process; the lane workers' provider client shares it too (stack/lanes/jobs.py)."""
    return httpx.create_ssl_context()


def client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` that reuses :func:`default_tls` and ignores proxy variables."""
    return httpx.Client(verify=default_tls(), trust_env=False, **options)


def request(method: str, url: str, *, timeout: float = 5.0, **options: Any) -> httpx.Response:
    """One request on a client of its own (for one-off calls; a loop should hold a :func:`client`)."""
    with client(timeout=timeout) as http:
        return http.request(method, url, **options)
