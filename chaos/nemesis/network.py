"""Network faults on the stack's links, through the fault proxy (``StackSpec.links``).

Drives the fault proxy (ours or a real Toxiproxy) with the unchanged
``toxiproxy-python`` 0.1.1 client:

- ``FaultSpec(kind="toxic", target="<link>", params={"type": "latency", "stream": "downstream",
  "toxicity": 1.0, "attributes": {"latency": 300}, "name": optional})`` adds the toxic at
  start and removes it at end;
- ``FaultSpec(kind="link_down", target="<link>")`` disables the proxy (listener closed,
  open connections dropped) and re-enables it at end;
- ``heal()``: ``POST /reset`` (every toxic removed, every proxy enabled); idempotent.

Client quirks handled here: its host and port are class-level globals (set under a
lock before every call), its requests have no timeout (each call runs in a daemon
thread and is abandoned after ``timeout`` seconds), ``add_toxic`` returns None (the
toxic is read back), and statuses other than 400/404/409 pass silently (checked by
reading the state back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy

from chaos.nemesis.base import FaultSpec, NemesisError

if TYPE_CHECKING:
    from chaos.deployment import Deployment

__all__ = ["STREAMS", "TOXIC_TYPES", "NetworkNemesis"]

TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data", "noop",
               "slow_open")  # slow_open: our fault proxy's own (docs/faultproxy.md); a real Toxiproxy refuses it
STREAMS = ("downstream", "upstream")
_CLIENT_LOCK = threading.Lock()  # the client's host/port are process-wide
T = TypeVar("T")


class NetworkNemesis:
    kinds = frozenset({"toxic", "link_down"})

    def __init__(self, stack: Deployment, timeout: float = 10.0) -> None:
        self.stack = stack
        self.timeout = timeout
        url = stack.urls.get("faultproxy")
        if not url:
            raise NemesisError("the stack has no fault proxy: start it with StackSpec(links=[...])")
        parts = urlsplit(url)
        if not parts.hostname or not parts.port:
            raise NemesisError(f"fault proxy URL {url!r} has no host:port")
        # toxiproxy-python builds "http://%s:%s" % (host, port): a credential in the URL rides in the host
        # as "user:password@host", which its requests sends as Basic (chaos/faultproxy/auth.py).
        userinfo = f"{parts.username}:{parts.password}@" if parts.username else ""
        self.host, self.port = parts.hostname, parts.port  # what messages name (never the credential)
        self._api_host = f"{userinfo}{parts.hostname}"
        self.client = Toxiproxy()
        self._toxics: dict[tuple[str, str], str] = {}  # (link, toxic name) -> type
        self._down: set[str] = set()

    # ------------------------------------------------------------ protocol
    def start(self, fault: FaultSpec) -> dict[str, Any]:
        link = self._check_link(fault.target)
        if fault.kind == "toxic":
            return {**self._link_detail(link), **self._add_toxic(link, fault.params)}
        if fault.kind == "link_down":
            self._call(lambda: self._proxy(link).disable())
            self._down.add(link)
            return {**self._link_detail(link), "enabled": self._call(lambda: self._proxy(link).enabled)}
        raise NemesisError(f"NetworkNemesis handles {sorted(self.kinds)}, not {fault.kind!r}")

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        link = fault.target
        if fault.kind == "toxic":
            name = self._toxic_name(fault.params)
            if (link, name) not in self._toxics:
                return {"link": link, "toxic": name, "removed": False}
            self._toxics.pop((link, name))
            try:
                removed = self._call(lambda: self._proxy(link).destroy_toxic(name))
            except NotFound:  # already gone (heal, or a fault proxy restart dropped it)
                removed = False
            return {"link": link, "toxic": name, "removed": removed}
        if fault.kind == "link_down" and link in self._down:
            self._call(lambda: self._proxy(link).enable())
            self._down.discard(link)
            return {"link": link, "enabled": self._call(lambda: self._proxy(link).enabled)}
        return {"link": link}

    def heal(self) -> None:
        """``POST /reset``: removes every toxic and re-enables every proxy; idempotent.

        Waits up to ``timeout`` for a fault proxy that is being restarted by the supervisor
        (a restarted one comes back without toxics, enabled: already healed)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self._call(self.client.reset):
                    break
                error = "POST /reset did not answer 2xx"
            except Exception as exc:  # noqa: BLE001 - requests' ConnectionError and friends
                error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise NemesisError(f"heal: fault proxy {self.host}:{self.port}: {error}")
            time.sleep(0.2)
        self._toxics.clear()
        self._down.clear()

    # ------------------------------------------------------------ helpers
    def known_links(self) -> list[str]:
        return sorted(self.stack.links())

    def _check_link(self, name: str) -> str:
        if name not in self.stack.links():
            raise NemesisError(f"unknown link {name!r}; known links (StackSpec.links): {self.known_links()}")
        return name

    def _link_detail(self, link: str) -> dict[str, Any]:
        return {"link": link, **self.stack.links()[link]}

    @staticmethod
    def _toxic_name(params: dict[str, Any]) -> str:
        return str(params.get("name") or f"{params.get('type')}_{params.get('stream', 'downstream')}")

    def _add_toxic(self, link: str, params: dict[str, Any]) -> dict[str, Any]:
        kind = params.get("type")
        if kind not in TOXIC_TYPES:
            raise NemesisError(f"unknown toxic type {kind!r}; known: {list(TOXIC_TYPES)}")
        stream = params.get("stream", "downstream")
        if stream not in STREAMS:
            raise NemesisError(f"toxic stream must be one of {list(STREAMS)}, not {stream!r}")
        name = self._toxic_name(params)
        toxicity = float(params.get("toxicity", 1.0))
        attributes = dict(params.get("attributes") or {})
        try:
            self._call(lambda: self._proxy(link).add_toxic(type=kind, stream=stream, name=name,
                                                             toxicity=toxicity, attributes=attributes))
        except ProxyExists as exc:
            raise NemesisError(f"toxic {name!r} already exists on link {link!r}: {exc}") from None
        except InvalidToxic as exc:
            raise NemesisError(f"toxic {name!r} on link {link!r} refused: {_text(exc)}") from None
        toxic = self._call(lambda: self._proxy(link).get_toxic(name))  # add_toxic returns None
        if toxic is None:  # e.g. a 500 that the client lets pass silently
            raise NemesisError(f"toxic {name!r} was not created on link {link!r}")
        self._toxics[(link, name)] = kind
        return {"toxic": name, "type": kind, "stream": stream, "toxicity": toxicity,
                "attributes": dict(getattr(toxic, "attributes", attributes) or attributes)}

    def _proxy(self, link: str) -> Proxy:
        proxy = self.client.get_proxy(link)
        if proxy is None:
            raise NemesisError(f"link {link!r} has no proxy on the fault proxy {self.host}:{self.port}")
        return proxy

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a client call with the host/port set, abandoned after ``timeout`` (no timeout of its own)."""
        box: dict[str, Any] = {}

        def run() -> None:
            with _CLIENT_LOCK:
                self.client.update_api_consumer(self._api_host, self.port)
                try:
                    box["value"] = fn()
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    box["error"] = exc

        thread = threading.Thread(target=run, name="toxiproxy-call", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            raise NemesisError(f"fault proxy {self.host}:{self.port} did not answer within {self.timeout}s")
        if "error" in box:
            raise box["error"]
        return box["value"]


def _text(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode(errors="replace").strip() if isinstance(arg, bytes) else str(arg)
