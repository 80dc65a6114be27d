"""The Toxiproxy 2.12.0 HTTP API: routing and handlers, and the Go struct names that
request bodies decode into.  Go's ``encoding/json`` behaviour itself (first value only,
case-insensitive keys, Go's error texts, which clients match on) is in ``gojson``;
``server.py`` does the HTTP/1.1 framing around :meth:`Api.handle`."""

from __future__ import annotations

import asyncio
import base64
import os
import re
from dataclasses import dataclass, field as dc_field
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

from .gojson import BadBody, decode, dumps, field, float32, kind, want, want_object
from .proxy import Proxy, ProxyError, resolve_listen
from .toxics import TOXIC_TYPES, Toxic

__all__ = ["VERSION", "Response", "Api", "BadBody", "decode", "error_response"]

VERSION = "2.12.0"
"""The Toxiproxy release this server speaks for: ``/version``, the start log, ``--help``."""

_THREAD_DECODE_AT = 64 << 10  # bytes

# Go's reflect spelling of PopulateJson's element type: an anonymous struct embedding
# Proxy (embedded field names are not printed) and a nullable Enabled with its tag.
_POPULATE_ITEM = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = dc_field(default_factory=list)


def _json(status: int, obj: Any) -> Response:
    return Response(status, dumps(obj), [("Content-Type", "application/json")])


def error_response(status: int, msg: str) -> Response:
    """``{"error":…,"status":…}`` + newline as text/plain, like Go's ``http.Error``
    around ``json.Marshal`` (so non-ASCII stays raw UTF-8 and ``<>&`` are escaped)."""
    body = dumps({"error": msg, "status": status}) + b"\n"
    return Response(status, body, _PLAIN_HEADERS.copy())


_PLAIN_HEADERS = [("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff")]


def _plain(status: int, text: str) -> Response:
    return Response(status, text.encode(), _PLAIN_HEADERS.copy())


def _request_id() -> str:
    """20 base32hex characters, like the xid Toxiproxy puts in X-Toxiproxy-Request-Id."""
    return base64.b32hexencode(os.urandom(12)).decode().lower()[:20]


# --- routing -----------------------------------------------------------------------------
Handler = Callable[..., Awaitable[Response]]
_NAME = "([^/]+)"


class Api:
    """Proxy collection plus the HTTP handlers that manipulate it."""

    def __init__(self, seed: str) -> None:
        self.seed = seed
        self.proxies: dict[str, Proxy] = {}
        self._lock = asyncio.Lock()  # one mutation at a time, like the Go collection lock
        one_p = {"GET": self.get_proxy, "POST": self.update_proxy,
                 "PATCH": self.update_proxy, "DELETE": self.delete_proxy}
        one_t = {"GET": self.get_toxic, "POST": self.update_toxic,
                 "PATCH": self.update_toxic, "DELETE": self.delete_toxic}
        self._routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
            (re.compile(p), m) for p, m in (
                (r"/version", {"GET": self.version}), (r"/reset", {"POST": self.reset}),
                (r"/populate", {"POST": self.populate}),
                (r"/proxies", {"GET": self.list_proxies, "POST": self.create_proxy}),
                (rf"/proxies/{_NAME}", one_p),
                (rf"/proxies/{_NAME}/toxics", {"GET": self.list_toxics, "POST": self.create_toxic}),
                (rf"/proxies/{_NAME}/toxics/{_NAME}", one_t))]

    async def handle(self, method: str, path: str, headers: dict[str, str],
                     body: bytes) -> Response:
        for pattern, methods in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            handler = methods.get(method)
            if handler is None:
                return Response(405)  # gorilla/mux: empty body, no content type
            resp = await self._matched(handler, match, headers, body)
            resp.headers.append(("X-Toxiproxy-Request-Id", _request_id()))
            return resp
        return _plain(404, "404 page not found\n")

    async def _matched(self, handler: Handler, match: re.Match[str],
                       headers: dict[str, str], body: bytes) -> Response:
        if headers.get("user-agent", "").startswith("Mozilla/"):
            return _plain(403, "User agent not allowed\n")
        args = [unquote(g) for g in match.groups()]
        async with self._lock:
            try:
                return await handler(*args, body=body)
            except BadBody as exc:
                return error_response(400, f"bad request body: {exc}")
            except ProxyError as exc:
                return error_response(500, str(exc))
            except _NotFound as exc:
                return error_response(404, str(exc))

    async def shutdown(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()

    def _get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise _NotFound("proxy not found")
        return proxy

    # --- server-wide ---------------------------------------------------------------
    async def version(self, body: bytes) -> Response:
        return Response(200, b'{"version": "%s"}\n' % VERSION.encode(),
                        [("Content-Type", "application/json;charset=utf-8")])

    async def reset(self, body: bytes) -> Response:
        for name in sorted(self.proxies):
            proxy = self.proxies[name]
            await proxy.start()  # re-enables; a failure is a 500 (ProxyError)
            proxy.remove_all_toxics()
        return Response(204)

    async def populate(self, body: bytes) -> Response:
        try:
            items = _populate_items(await _decode(body))
        except (BadBody, _Missing) as exc:
            bad = isinstance(exc, BadBody)
            return _populate_error(400, f"bad request body: {exc}" if bad else str(exc), None)
        done: list[dict[str, Any]] = []
        for name, listen, upstream, enabled in items:
            try:
                proxy = await self._add_or_replace(name, listen, upstream, enabled)
            except ProxyError as exc:
                return _populate_error(500, str(exc), done)
            done.append(proxy.to_json())
        return _json(201, {"proxies": done or None})

    async def _add_or_replace(self, name: str, listen: str, upstream: str,
                              enabled: bool) -> Proxy:
        existing = self.proxies.get(name)
        if existing is not None:
            try:
                same = resolve_listen(listen) == existing.listen and upstream == existing.upstream
            except ProxyError:
                same = False
            if same:
                return existing  # untouched: toxics and enabled state kept
            existing.stop()
        proxy = Proxy(name, listen, upstream, self.seed)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    # --- proxies ------------------------------------------------------------------------
    async def list_proxies(self, body: bytes) -> Response:
        return _json(200, {n: self.proxies[n].to_json() for n in sorted(self.proxies)})

    async def create_proxy(self, body: bytes) -> Response:
        obj = want_object(await _decode(body), "toxiproxy.Proxy")
        name = want(obj, "name", "Proxy.name", "string") or ""
        listen = want(obj, "listen", "Proxy.listen", "string") or ""
        upstream = want(obj, "upstream", "Proxy.upstream", "string") or ""
        enabled = want(obj, "enabled", "Proxy.enabled", "bool")
        if not name:
            return error_response(400, "missing required field: name")
        if not upstream:
            return error_response(400, "missing required field: upstream")
        if name in self.proxies:
            return error_response(409, "proxy already exists")
        proxy = Proxy(name, listen, upstream, self.seed)
        if enabled is not False:
            await proxy.start()
        self.proxies[name] = proxy
        return _json(201, proxy.to_json())

    async def get_proxy(self, name: str, body: bytes) -> Response:
        return _json(200, self._get(name).to_json())

    async def update_proxy(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        obj = want_object(await _decode(body), "toxiproxy.Proxy")
        want(obj, "name", "Proxy.name", "string")  # type-checked, ignored: names are immutable
        listen = _or(want(obj, "listen", "Proxy.listen", "string"), proxy.listen)
        upstream = _or(want(obj, "upstream", "Proxy.upstream", "string"), proxy.upstream)
        enabled = _or(want(obj, "enabled", "Proxy.enabled", "bool"), proxy.enabled)
        # Go resolves the new listen and compares it with the bound one, so a ":0"
        # listen always differs and moves the port.
        if resolve_listen(listen) != proxy.listen or upstream != proxy.upstream:
            proxy.stop()
            proxy.listen, proxy.upstream = listen, upstream
        if enabled != proxy.enabled:
            if enabled:
                await proxy.start()
            else:
                proxy.stop()
        return _json(200, proxy.to_json())

    async def delete_proxy(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        del self.proxies[name]
        proxy.stop()
        return Response(204)

    # --- toxics --------------------------------------------------------------------------
    async def list_toxics(self, name: str, body: bytes) -> Response:
        return _json(200, self._get(name).toxics_json())

    async def create_toxic(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        obj = want_object(await _decode(body), "toxics.ToxicWrapper")
        tname = want(obj, "name", "ToxicWrapper.name", "string") or ""
        ttype = want(obj, "type", "ToxicWrapper.type", "string") or ""
        stream = want(obj, "stream", "ToxicWrapper.stream", "string")
        toxicity = want(obj, "toxicity", "ToxicWrapper.toxicity", "float32")
        stream = "downstream" if stream is None else stream
        if stream.lower() not in ("upstream", "downstream"):
            return error_response(400, "stream was invalid, can be either upstream or downstream")
        tname = tname or f"{ttype}_{stream}"
        cls = TOXIC_TYPES.get(ttype)
        if cls is None:
            return error_response(400, "invalid toxic type")
        if tname in proxy.toxics:
            return error_response(409, "toxic already exists")
        toxic = cls(tname, stream, float32(1.0 if toxicity is None else toxicity), 0)
        attrs = _attributes(toxic, field(obj, "attributes"))
        if (problem := toxic.check(attrs)) is not None:
            return error_response(400, problem)
        toxic.attributes = attrs
        proxy.add_toxic(toxic)
        return _json(200, toxic.to_json())

    def _toxic(self, pname: str, tname: str) -> Toxic:
        toxic = self._get(pname).toxics.get(tname)
        if toxic is None:
            raise _NotFound("toxic not found")
        return toxic

    async def get_toxic(self, pname: str, tname: str, body: bytes) -> Response:
        return _json(200, self._toxic(pname, tname).to_json())

    async def update_toxic(self, pname: str, tname: str, body: bytes) -> Response:
        found = self._toxic(pname, tname)
        obj = want_object(await _decode(body), "struct { Attributes interface {}; Toxicity float32 }")
        attrs = _attributes(found, field(obj, "attributes"))  # merged into current values
        toxicity = want(obj, "toxicity", ".toxicity", "float32")
        if (problem := found.check(attrs)) is not None:
            return error_response(400, problem)
        found.attributes = attrs
        if toxicity is not None:
            found.toxicity = float32(toxicity)
        self.proxies[pname].update_toxic(found)  # restarts the stage on every live link
        return _json(200, found.to_json())

    async def delete_toxic(self, pname: str, tname: str, body: bytes) -> Response:
        self._toxic(pname, tname)
        self.proxies[pname].remove_toxic(tname)
        return Response(204)


class _Missing(Exception):  # a required field is missing from a /populate item
    pass


class _NotFound(Exception):  # answered with 404 and this message
    pass


async def _decode(body: bytes) -> Any:
    # Explaining a syntax error walks the body in Python (~1 s per MiB, see gojson), so
    # large bodies are decoded in a thread and the proxies' data path keeps flowing.
    if len(body) < _THREAD_DECODE_AT:
        return decode(body)
    return await asyncio.to_thread(decode, body)


def _or(value: Any, default: Any) -> Any:  # partial decode: absent or null keeps
    return default if value is None else value


def _attributes(toxic: Toxic, value: Any) -> dict[str, int]:
    """Current attributes with the given ones merged in (unknown keys ignored)."""
    attrs = dict(toxic.attributes)
    if value is None:
        return attrs
    if not isinstance(value, dict):
        raise BadBody(f"json: cannot unmarshal {kind(value)} into Go struct field "
                      f".attributes of type toxics.{toxic.struct_name}")
    for key in toxic.fields:
        got = want(value, key, f"{toxic.struct_name}.attributes.{key}", "int64")
        if got is not None:
            attrs[key] = got
    return attrs


def _populate_items(value: Any) -> list[tuple[str, str, str, bool]]:
    if value is None:
        value = []
    if not isinstance(value, list):
        raise BadBody(f"json: cannot unmarshal {kind(value)} into Go value of type []{_POPULATE_ITEM}")
    items = []
    for item in value:
        obj = want_object(item, _POPULATE_ITEM)
        # Go names the anonymous struct "" in field errors, promoted fields included.
        enabled = want(obj, "enabled", ".enabled", "bool")
        items.append((want(obj, "name", ".name", "string") or "",
                      want(obj, "listen", ".listen", "string") or "",
                      want(obj, "upstream", ".upstream", "string") or "", enabled is not False))
    for i, (name, _, upstream, _) in enumerate(items, 1):  # all checked before any apply
        if not name:
            raise _Missing(f"missing required field: name at proxy {i}")
        if not upstream:
            raise _Missing(f"missing required field: upstream at proxy {i}")
    return items


def _populate_error(status: int, msg: str, done: list[dict[str, Any]] | None) -> Response:
    # /populate errors differ from the rest: application/json, no newline, + "proxies".
    return _json(status, {"error": msg, "status": status, "proxies": done or None})
