"""HTTP API of the fault proxy: status codes, bodies, content types and error texts."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from .helpers import Upstream, add_toxic, connect, make_proxy

pytestmark = pytest.mark.timeout(30)

ERR_CT = "text/plain; charset=utf-8"


def assert_error(r: httpx.Response, status: int, msg: str) -> None:
    assert r.status_code == status
    assert r.headers["content-type"] == ERR_CT
    assert r.headers["x-content-type-options"] == "nosniff"
    # Go's json.Marshal leaves non-ASCII raw (no \u escapes).
    assert r.content == json.dumps({"error": msg, "status": status}, separators=(",", ":"),
                                   ensure_ascii=False).encode() + b"\n"


def test_version_exact_bytes(api: httpx.Client) -> None:
    r = api.get("/version")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json;charset=utf-8"
    assert r.content == b'{"version": "2.12.0"}\n'
    assert len(r.headers["x-toxiproxy-request-id"]) == 20


def test_router_errors(api: httpx.Client) -> None:
    for path in ("/nope", "/proxies/", "/version/"):
        r = api.get(path)
        assert r.status_code == 404
        assert r.headers["content-type"] == ERR_CT
        assert r.content == b"404 page not found\n"
        assert "x-toxiproxy-request-id" not in r.headers
    for method, path in (("PUT", "/proxies"), ("HEAD", "/version"), ("DELETE", "/reset")):
        r = api.request(method, path)
        assert r.status_code == 405
        assert r.content == b""
        assert "content-type" not in r.headers


def test_browser_user_agent_forbidden(api: httpx.Client) -> None:
    r = api.get("/proxies", headers={"User-Agent": "Mozilla/5.0 (X11)"})
    assert r.status_code == 403
    assert r.headers["content-type"] == ERR_CT
    assert r.content == b"User agent not allowed\n"


def test_proxy_crud(api: httpx.Client, upstream: Upstream) -> None:
    assert api.get("/proxies").json() == {}
    r = api.post("/proxies", json={"name": "b", "listen": "localhost:0", "upstream": upstream.addr})
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["listen"].startswith("127.0.0.1:") and not body["listen"].endswith(":0")
    assert list(body) == ["name", "listen", "upstream", "enabled", "Logger", "toxics"]
    assert body["enabled"] is True and body["Logger"] == {} and body["toxics"] == []
    assert not r.content.endswith(b"\n")
    make_proxy(api, upstream.addr, "a")
    listing = api.get("/proxies").json()
    assert list(listing) == ["a", "b"] and listing["b"] == body
    assert api.get("/proxies/b").json() == body
    r = api.delete("/proxies/b")
    assert r.status_code == 204 and r.content == b"" and "content-type" not in r.headers
    assert_error(api.get("/proxies/b"), 404, "proxy not found")
    assert_error(api.delete("/proxies/b"), 404, "proxy not found")


def test_proxy_create_errors(api: httpx.Client, upstream: Upstream) -> None:
    assert_error(api.post("/proxies", content=b""), 400, "bad request body: EOF")
    assert_error(api.post("/proxies", json={"name": "x", "upstream": "u", "enabled": "yes"}), 400,
                 "bad request body: json: cannot unmarshal string into Go struct field "
                 "Proxy.enabled of type bool")
    assert_error(api.post("/proxies", json={"upstream": "u"}), 400, "missing required field: name")
    assert_error(api.post("/proxies", json={"name": "x"}), 400, "missing required field: upstream")
    port = make_proxy(api, upstream.addr, "x")
    assert_error(api.post("/proxies", json={"name": "x", "upstream": "u"}), 409,
                 "proxy already exists")
    assert_error(api.post("/proxies", json={"name": "y", "upstream": "u",
                                            "listen": f"127.0.0.1:{port}"}), 500,
                 f"listen tcp 127.0.0.1:{port}: bind: address already in use")
    assert "y" not in api.get("/proxies").json()
    # Trailing garbage and unknown keys are accepted, as by Go's decoder.
    r = api.post("/proxies", content=b'{"name":"z","upstream":"u","listen":"127.0.0.1:0","x":1} junk')
    assert r.status_code == 201


def test_upstream_not_dialed_at_create(api: httpx.Client) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    port = make_proxy(api, dead)
    with connect(port) as c:  # accepted, then closed: EOF, not refused
        assert c.recv(10) == b""


def test_disabled_proxy_and_reenable(api: httpx.Client, upstream: Upstream) -> None:
    r = api.post("/proxies", json={"name": "d", "listen": "127.0.0.1:0",
                                   "upstream": upstream.addr, "enabled": False})
    assert r.status_code == 201 and r.json()["listen"] == "127.0.0.1:0"
    assert r.json()["enabled"] is False
    port = make_proxy(api, upstream.addr)
    c = connect(port)
    c.sendall(b"hi")
    assert c.recv(2) == b"hi"
    r = api.patch("/proxies/p", json={"enabled": False})
    assert r.status_code == 200 and r.json()["listen"] == f"127.0.0.1:{port}"
    c.settimeout(3)
    assert c.recv(10) == b""  # open connections are closed too
    c.close()
    with pytest.raises(ConnectionRefusedError):
        connect(port).close()
    r = api.post("/proxies/p", json={"enabled": True})  # deprecated POST form
    assert r.status_code == 200 and r.json()["listen"] == f"127.0.0.1:{port}"
    with connect(port) as c2:
        c2.sendall(b"ok")
        assert c2.recv(2) == b"ok"


def test_patch_listen_and_upstream(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "noop")
    assert_error(api.patch("/proxies/p", json={"listen": "bad::addr::"}), 500,
                 "address bad::addr::: too many colons in address")
    r = api.patch("/proxies/p", json={"listen": "127.0.0.1:0"})  # ":0" always moves the port
    new = r.json()["listen"]
    assert r.status_code == 200 and new != f"127.0.0.1:{port}" and r.json()["toxics"]
    r = api.patch("/proxies/p", json={"listen": new, "name": "ignored"})
    assert r.json()["listen"] == new and r.json()["name"] == "p"
    assert_error(api.patch("/proxies/nope", json={}), 404, "proxy not found")


def test_toxic_crud_and_defaults(api: httpx.Client, upstream: Upstream) -> None:
    make_proxy(api, upstream.addr)
    r = api.post("/proxies/p/toxics", json={"type": "latency", "attributes": {"latency": 100}})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"attributes": {"latency": 100, "jitter": 0}, "name": "latency_downstream",
                        "type": "latency", "stream": "downstream", "toxicity": 1}
    t = add_toxic(api, "bandwidth", stream="UpStream", toxicity=0.5, attributes={"rate": 10})
    assert t["name"] == "bandwidth_UpStream" and t["stream"] == "UpStream"
    assert t["toxicity"] == 0.5
    noop = add_toxic(api, "noop", name="n", toxicity=0.1, attributes=None)
    assert noop["attributes"] == {} and noop["toxicity"] == 0.1
    names = [x["name"] for x in api.get("/proxies/p/toxics").json()]
    assert names == ["bandwidth_UpStream", "latency_downstream", "n"]  # upstream first
    r = api.patch("/proxies/p/toxics/latency_downstream",
                  json={"attributes": {"jitter": 5}, "name": "x", "type": "timeout"})
    assert r.status_code == 200
    assert r.json()["attributes"] == {"latency": 100, "jitter": 5}
    assert r.json()["name"] == "latency_downstream" and r.json()["toxicity"] == 1
    r = api.post("/proxies/p/toxics/latency_downstream", json={"toxicity": 0.25})
    assert r.json()["toxicity"] == 0.25 and r.json()["attributes"]["jitter"] == 5
    assert api.get("/proxies/p/toxics/n").json() == noop
    r = api.delete("/proxies/p/toxics/n")
    assert r.status_code == 204 and r.content == b""
    assert_error(api.get("/proxies/p/toxics/n"), 404, "toxic not found")
    assert_error(api.delete("/proxies/p/toxics/n"), 404, "toxic not found")
    assert_error(api.patch("/proxies/p/toxics/n", json={}), 404, "toxic not found")
    assert_error(api.get("/proxies/q/toxics"), 404, "proxy not found")
    assert api.get("/proxies/p").json()["toxics"][0]["name"] == "bandwidth_UpStream"


def test_toxic_errors(api: httpx.Client, upstream: Upstream) -> None:
    make_proxy(api, upstream.addr)
    post = lambda body: api.post("/proxies/p/toxics", json=body)  # noqa: E731
    stream_err = "stream was invalid, can be either upstream or downstream"
    assert_error(post({"type": "latency", "stream": ""}), 400, stream_err)
    assert_error(post({"type": "latency", "stream": "sideways"}), 400, stream_err)
    assert_error(post({"type": "bogus"}), 400, "invalid toxic type")
    assert_error(post({}), 400, "invalid toxic type")
    assert_error(post({"type": "latency", "attributes": {"latency": 1.5}}), 400,
                 "bad request body: json: cannot unmarshal number 1.5 into Go struct field "
                 "LatencyToxic.attributes.latency of type int64")
    assert_error(post({"type": "latency", "attributes": {"latency": "100"}}), 400,
                 "bad request body: json: cannot unmarshal string into Go struct field "
                 "LatencyToxic.attributes.latency of type int64")
    assert_error(api.post("/proxies/p/toxics", content=b"{"), 400,
                 "bad request body: unexpected EOF")
    add_toxic(api, "latency", name="same")
    assert_error(post({"type": "timeout", "name": "same", "stream": "upstream"}), 409,
                 "toxic already exists")
    # Guards where the real server crashes or black-holes.
    assert_error(post({"type": "bandwidth", "attributes": {"rate": 0}}), 400,
                 "bandwidth rate must be greater than 0 (KB/s)")
    assert_error(post({"type": "slicer", "attributes": {"average_size": 0}}), 400,
                 "slicer average_size must be greater than 0")
    t = add_toxic(api, "slicer", attributes={"average_size": 10})
    assert_error(api.patch(f"/proxies/p/toxics/{t['name']}",
                           json={"attributes": {"average_size": 0}}), 400,
                 "slicer average_size must be greater than 0")
    # Accepted without validation, as by the real server.
    assert add_toxic(api, "latency", name="neg", toxicity=3,
                     attributes={"latency": -5, "jitter": 0, "zzz": 1})["toxicity"] == 3


def test_populate(api: httpx.Client, upstream: Upstream) -> None:
    r = api.post("/populate", json=[])
    assert r.status_code == 201 and r.json() == {"proxies": None}
    items = [{"name": "a", "listen": "127.0.0.1:0", "upstream": upstream.addr},
             {"name": "b", "listen": "127.0.0.1:0", "upstream": upstream.addr, "enabled": False}]
    r = api.post("/populate", json=items)
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    got = r.json()["proxies"]
    assert [p["name"] for p in got] == ["a", "b"] and got[1]["enabled"] is False
    a_listen = got[0]["listen"]
    add_toxic(api, "noop", proxy="a")
    # Same resolved listen + upstream: untouched (toxics kept).  Changed: replaced bare.
    again = [{"name": "a", "listen": a_listen.replace("127.0.0.1", "localhost"),
              "upstream": upstream.addr, "enabled": False},
             {"name": "b", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}]
    r = api.post("/populate", json=again)
    a, b = r.json()["proxies"]
    assert a["toxics"] and a["enabled"] is True and a["listen"] == a_listen
    assert b["upstream"] == "127.0.0.1:1" and b["enabled"] is True
    r = api.post("/populate", json=[{"name": "c", "upstream": "u"}, {"upstream": "u"}])
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert r.content == (b'{"error":"missing required field: name at proxy 2",'
                         b'"status":400,"proxies":null}')
    assert "c" not in api.get("/proxies").json()  # validated before applying
    taken = int(a_listen.rsplit(":", 1)[1])
    r = api.post("/populate", json=[{"name": "c", "listen": "127.0.0.1:0", "upstream": "u"},
                                     {"name": "d", "listen": f"127.0.0.1:{taken}",
                                      "upstream": "u"}])
    assert r.status_code == 500
    body = r.json()
    assert body["error"].endswith("bind: address already in use")
    assert [p["name"] for p in body["proxies"]] == ["c"]
    assert "c" in api.get("/proxies").json()
    assert r.json()["status"] == 500
    r = api.post("/populate", json={"name": "x"})
    assert r.status_code == 400 and r.json()["proxies"] is None


def test_reset(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 10})
    api.post("/proxies", json={"name": "off", "listen": "127.0.0.1:0", "upstream": "u",
                               "enabled": False})
    api.patch("/proxies/p", json={"enabled": False})
    r = api.post("/reset")
    assert r.status_code == 204 and r.content == b"" and "content-type" not in r.headers
    proxies = api.get("/proxies").json()
    assert proxies["p"]["enabled"] and proxies["p"]["toxics"] == []
    assert proxies["p"]["listen"] == f"127.0.0.1:{port}"
    assert proxies["off"]["enabled"] and proxies["off"]["listen"] != "127.0.0.1:0"


def test_keep_alive_and_request_ids(api: httpx.Client) -> None:
    ids = {api.get("/proxies").headers["x-toxiproxy-request-id"] for _ in range(5)}
    assert len(ids) == 5
