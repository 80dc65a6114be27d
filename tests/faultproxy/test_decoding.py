"""Request bodies as Go's encoding/json reads them, and the request body size limit."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from chaos.faultproxy.gojson import BadBody, decode
from chaos.faultproxy.server import MAX_BODY, ThreadedFaultProxy

from .helpers import Upstream, make_proxy
from .test_api import assert_error

pytestmark = pytest.mark.timeout(60)

POPULATE_ITEM = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'


@pytest.mark.parametrize("body, msg", [
    (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
    (b"nul", "unexpected EOF"),
    (b"  ", "EOF"),
    (b'{"enabled" true}', "invalid character 't' after object key"),
    (b'{"enabled":true,}', "invalid character '}' looking for beginning of object key string"),
    (b'{"enabled":true "x":1}', "invalid character '\"' after object key:value pair"),
    (b'{"listen":[1 2]}', "invalid character '2' after array element"),
    (b'{"enabled":tx}', "invalid character 'x' in literal true (expecting 'r')"),
    (b'{"enabled":1.e5}', "invalid character 'e' after decimal point in numeric literal"),
    (b'{"enabled":1e+}', "invalid character '}' in exponent of numeric literal"),
    (b'{"enabled":-x}', "invalid character 'x' in numeric literal"),
    (b'{"enabled":NaN}', "invalid character 'N' looking for beginning of value"),
    (b'{"name":"a\x01"}', "invalid character '\\x01' in string literal"),
    (b'{"name":"\\q"}', "invalid character 'q' in string escape code"),
    (b'{"name":"\\u12g4"}', "invalid character 'g' in \\u hexadecimal character escape"),
    (b"\xc3\xa9", "invalid character '\u00c3' looking for beginning of value"),  # a byte, as a rune
    (b"'", "invalid character '\\'' looking for beginning of value"),
])
def test_patch_syntax_errors_are_go_texts(api: httpx.Client, upstream: Upstream,
                                          body: bytes, msg: str) -> None:
    make_proxy(api, upstream.addr)
    assert_error(api.patch("/proxies/p", content=body), 400, f"bad request body: {msg}")


def test_only_the_first_value_is_read() -> None:
    # Go's Decoder stops after the first value: what follows is never looked at.
    assert decode(b'{"a":1} nope') == {"a": 1}
    assert decode(b"01") == 0 and decode(b"truex") is True
    assert decode(b'{"a":"\\ud800"}') == {"a": "\ufffd"}  # lone surrogate, as Go replaces it


def test_populate_type_errors_name_gos_types(api: httpx.Client) -> None:
    r = api.post("/populate", json={"name": "x"})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert r.json() == {"error": "bad request body: json: cannot unmarshal object into Go value "
                                 f"of type []{POPULATE_ITEM}", "status": 400, "proxies": None}
    r = api.post("/populate", json=[1])
    assert r.json()["error"] == ("bad request body: json: cannot unmarshal number into Go value "
                                 f"of type {POPULATE_ITEM}")
    r = api.post("/populate", json=[{"name": 5}])  # a promoted field of the anonymous struct
    assert r.json()["error"] == ("bad request body: json: cannot unmarshal number into Go struct "
                                 "field .name of type string")


def _nested(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def test_deep_nesting_answers_like_go(api: httpx.Client) -> None:
    assert_error(api.post("/proxies", content=_nested(5000)), 400,
                 "bad request body: json: cannot unmarshal array into Go value of type "
                 "toxiproxy.Proxy")
    assert_error(api.post("/proxies", content=b"[" * 10_000), 400, "bad request body: unexpected EOF")
    assert_error(api.post("/proxies", content=_nested(10_001)), 400,
                 "bad request body: invalid character '[' exceeded max depth")
    deep_object = b'{"x":' * 10_000 + b"1" + b"}" * 10_000
    assert_error(api.post("/proxies", content=deep_object), 400, "missing required field: name")


def test_deep_value_under_an_unknown_key_is_ignored(api: httpx.Client) -> None:
    body = b'{"name":"d","listen":"127.0.0.1:0","upstream":"u","x":' + _nested(9_999) + b"}"
    r = api.post("/proxies", content=body)
    assert r.status_code == 201 and r.json()["name"] == "d"


def _raw_request(url: str, head: bytes, body: bytes) -> bytes:
    """Send ``head`` + ``body`` and read the answer until the server closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head + body)
        answer = bytearray()
        while chunk := sock.recv(65536):
            answer += chunk
    return bytes(answer)


def test_oversized_content_length_is_refused_before_the_body(fp: ThreadedFaultProxy) -> None:
    # Only the headers and 4 of the announced 10 MB are sent: the answer cannot wait for them.
    head = (b"POST /proxies HTTP/1.1\r\nHost: fp\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10485760\r\n\r\n")
    answer = _raw_request(fp.url, head, b"nope")
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    assert b"Connection: close" in rest and b"Content-Type: text/plain; charset=utf-8" in rest
    assert rest.endswith(json.dumps({"error": f"request body too large: the limit is {MAX_BODY} bytes",
                                     "status": 413}, separators=(",", ":")).encode() + b"\n")


def test_oversized_chunked_body_is_refused_at_the_limit(fp: ThreadedFaultProxy) -> None:
    # One chunk announced past the limit, never followed by the last chunk: refused as announced.
    head = b"POST /proxies HTTP/1.1\r\nHost: fp\r\nTransfer-Encoding: chunked\r\n\r\n"
    first = b"%x\r\n" % (MAX_BODY + 1)
    assert _raw_request(fp.url, head, first + b"x" * 1000).startswith(b"HTTP/1.1 413 ")


def test_body_at_the_limit_is_read(api: httpx.Client) -> None:
    # Negative control for the limit: exactly MAX_BODY bytes is a normal request.
    obj = b'{"name":"big","listen":"127.0.0.1:0","upstream":"u"}'
    body = obj + b" " * (MAX_BODY - len(obj))
    assert len(body) == MAX_BODY
    assert api.post("/proxies", content=body).status_code == 201
    r = api.post("/proxies", content=b"nope" + b"x" * (MAX_BODY - 4))  # garbage within the limit
    assert_error(r, 400, "bad request body: invalid character 'o' in literal null (expecting 'u')")


def test_scanner_errors_are_exceptions_not_crashes() -> None:
    with pytest.raises(BadBody, match="exceeded max depth"):
        decode(b"{" + b'"a":{' * 10_000)


def test_module_exports_are_exact() -> None:
    from chaos.faultproxy import api, gojson, link, server, stage, toxics

    expected = {
        gojson: ["BadBody", "GoNumber", "MAX_DEPTH", "decode", "kind", "field", "want", "want_object",
                 "dumps", "float32", "float32_json"],
        api: ["VERSION", "Response", "Api", "BadBody", "decode", "error_response"],
        stage: ["Chunk", "Emit", "Timer", "StageContext", "Stage"],
        link: ["UPSTREAM", "DOWNSTREAM", "Endpoint", "Link", "Owner"],
        toxics: ["Toxic", "NoopToxic", "LatencyToxic", "BandwidthToxic", "SlowCloseToxic",
                 "TimeoutToxic", "ResetPeerToxic", "SlicerToxic", "LimitDataToxic", "SlowOpenToxic", "TOXIC_TYPES"],
        server: ["MAX_BODY", "FaultProxyServer", "ThreadedFaultProxy", "start_faultproxy_process",
                 "stop_faultproxy_process", "main"],
    }
    for module, names in expected.items():
        assert module.__all__ == names
        assert all(hasattr(module, name) for name in names)
