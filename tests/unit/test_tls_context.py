"""One TLS client context per CA, built once and shared by every Valkey connection of a
process tree (an RQ horse must not rebuild it: ~0.1 s per job)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import stack.valkey_client as connection
from stack.config import Settings
from stack.embedded.certs import make_certs
from stack.valkey_client import CountingSSLConnection, tls_context, warm_tls


def test_the_same_ca_gives_the_same_context_and_only_that_ca_is_trusted(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "tls")
    first = tls_context(str(certs.ca_cert), ssl.CERT_REQUIRED, True)
    assert tls_context(str(certs.ca_cert), ssl.CERT_REQUIRED, True) is first
    assert tls_context(str(certs.ca_cert), ssl.CERT_REQUIRED, False) is not first
    assert len(first.get_ca_certs()) == 1  # not every system CA


def test_warm_tls_builds_the_context_valkey_connections_then_use(tmp_path: Path, monkeypatch) -> None:
    certs = make_certs(tmp_path / "tls")
    monkeypatch.setattr(connection, "_TLS_CONTEXTS", {})
    warm_tls(Settings(valkey_url="rediss://127.0.0.1:1", valkey_ca=str(certs.ca_cert)))
    warmed = dict(connection._TLS_CONTEXTS)
    assert len(warmed) == 1
    conn = CountingSSLConnection(host="127.0.0.1", port=1, ssl_ca_certs=str(certs.ca_cert), ssl_cert_reqs="required",
                                 ssl_check_hostname=True)
    used = []
    monkeypatch.setattr(ssl.SSLContext, "wrap_socket", lambda self, sock, **kw: used.append(self) or sock)
    with socket.socket() as sock:  # a real one: the handshake runs under the connect timeout set on it
        conn._wrap_socket_with_ssl(sock)
    assert used == list(warmed.values())  # the warmed context, no new one
    assert len(connection._TLS_CONTEXTS) == 1
