"""Finding 3 (medium): "loopback only" meant nothing behind the load balancer. HAProxy
forwarded a client's X-Forwarded-For, uvicorn trusted it, admin routes were reachable
through the load balancer, and drain had no undo. Now admin has its own loopback listener
that HAProxy never routes, HAProxy replaces X-Forwarded-For, nodes trust it only from the
configured proxy, and undrain exists. (The same through a real HAProxy: test_real_stack.py.)"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from web_support import ADMIN, LOOPBACK, TestClient

from stack.config import Settings
from stack.embedded.haproxy import write_haproxy_config
from stack.web.app import NodeApp, create_admin_app
from stack.web.guards import client_address


def test_the_public_listener_has_no_admin_routes(app_client: TestClient) -> None:
    for method, path in (("GET", "/admin/export/answers"), ("POST", "/admin/drain"), ("POST", "/admin/undrain")):
        assert app_client.request(method, path, headers={"X-Admin-Token": ADMIN}).status_code == 404
    assert not [p for p in app_client.app.openapi()["paths"] if p.startswith("/admin")]  # type: ignore[attr-defined]


def test_admin_requests_are_told_apart_by_the_listener_port(app_client: TestClient) -> None:
    node = NodeApp(app_client.app, create_admin_app(app_client.app), admin_port=7001)  # type: ignore[arg-type]
    with TestClient(node, base_url="http://127.0.0.1:7001", client=LOOPBACK) as admin_side:
        assert admin_side.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN}).status_code == 200
    with TestClient(node, base_url="http://127.0.0.1:7000", client=LOOPBACK) as public_side:
        assert public_side.get("/admin/export/attempts", headers={"X-Admin-Token": ADMIN}).status_code == 404


def test_drain_has_an_undrain(app_client: TestClient, admin_client: TestClient) -> None:
    assert admin_client.post("/admin/drain", headers={"X-Admin-Token": ADMIN}).json()["draining"] is True
    assert app_client.get("/readyz").status_code == 503
    assert admin_client.post("/admin/undrain", headers={"X-Admin-Token": ADMIN}).json()["draining"] is False
    assert app_client.get("/readyz").status_code == 200


SECRET = "proxy-secret-of-this-run"


def _request(peer: str, forwarded: str | None, proof: str | None) -> Request:
    class _App:
        class state:  # mimics FastAPI's app.state
            proctor = type("S", (), {"settings": Settings(proxy_secret=SECRET)})()

    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded is not None else []
    headers += [(b"x-proctor-proxy", proof.encode())] if proof is not None else []
    return Request({"type": "http", "client": (peer, 5000), "headers": headers, "app": _App()})


def test_forwarded_for_counts_only_with_the_proxys_secret() -> None:
    # A client talking to the node directly cannot spoof its address, from whatever loopback address.
    assert client_address(_request("127.0.0.1", "198.51.100.7", None)) == "127.0.0.1"
    assert client_address(_request("127.0.0.2", "198.51.100.7", None)) == "127.0.0.2"
    assert client_address(_request("127.0.0.2", "198.51.100.7", SECRET + "x")) == "127.0.0.2"
    assert client_address(_request("127.0.0.2", "198.51.100.7", "")) == "127.0.0.2"
    # Control: with the secret the header is honoured, and only its last (own) entry.
    assert client_address(_request("127.0.0.2", "6.6.6.6, 198.51.100.7", SECRET)) == "198.51.100.7"
    assert client_address(_request("127.0.0.2", None, SECRET)) == "127.0.0.2"


def test_haproxy_drops_the_clients_forwarded_for_and_never_routes_admin(tmp_path: Path) -> None:
    config, _ = write_haproxy_config(tmp_path, 8080, {"web_1": 9001}, source="127.0.0.2", proxy_secret=SECRET)
    lines = [line.strip() for line in config.read_text().splitlines()]
    assert f"http-request set-header X-Proctor-Proxy {SECRET}" in lines  # replaces any a client sent
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    delete = lines.index("http-request del-header X-Forwarded-For")
    assert "option forwardfor" in lines[delete:]  # deleted first, then HAProxy's own added
    assert "http-request deny deny_status 404 if { path_beg /admin }" in lines
    assert "server web_1 127.0.0.1:9001 check source 127.0.0.2" in lines
