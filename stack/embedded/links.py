"""Network links behind named proxies of a fault proxy (``StackSpec.links``).

A *link* is one consumer -> service path of the stack. A requested link gets a
proxy, named after the link, on a fixed ``127.0.0.1:<port>``; its consumers are
pointed at that listen address instead of the real one. Links not requested stay
direct. The fault proxy is, in order of preference:

1. ``TOXIPROXY_URL`` set: that (real, local) Toxiproxy server; the proxies are created
   through its API (``POST /populate``) and deleted when the stack stops;
2. ``toxiproxy-server`` on PATH: started and supervised (``-host 127.0.0.1 -port P -config F``);
3. else our own ``python -m chaos.faultproxy`` (supervised, ``--seed``, ``--config``).

The populate file (``<run_dir>/faultproxy/proxies.json``) lists every proxy with its
fixed listen port and is rewritten whenever a proxy is added or removed, so a restart
of a supervised fault proxy re-creates the same proxies on the same ports (without
toxics, enabled).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from stack import loopback_http
from stack.embedded import StackError
from stack.embedded import valkey as vk
from stack.deploy.links import FIXED_LINKS, LINKS_OF_ROLE, NODE_LINKS, UPSTREAM_OF, WEB_WILDCARD, known_links, validate_links
from stack.deploy.ports import HOST, free_port

__all__ = [
    "COMPONENT",
    "FAULTPROXY_CREDENTIAL_ENV",
    "FIXED_LINKS",
    "LINKS_OF_ROLE",
    "UPSTREAM_OF",
    "WEB_WILDCARD",
    "Link",
    "LinkManager",
    "choose_backend",
    "known_links",
    "validate_links",
]

COMPONENT = "faultproxy"
"""Supervisor name of the fault proxy process."""

_WEB_LINK = re.compile(r"^web_([1-9][0-9]*)$")
FAULTPROXY_CREDENTIAL_ENV = "FAULTPROXY_API_CREDENTIAL"
"""chaos.faultproxy.auth.CREDENTIAL_ENV (the stack never imports the harness; a test keeps the two equal)."""

_API_TIMEOUT = 5.0


def choose_backend(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """("external", url) | ("toxiproxy-server", path) | ("faultproxy", python)."""
    env = os.environ if env is None else env
    url = env.get("TOXIPROXY_URL", "").strip()
    if url:
        return "external", url.rstrip("/")
    path = shutil.which("toxiproxy-server", path=env.get("PATH"))
    if path:
        return "toxiproxy-server", path
    return "faultproxy", sys.executable


@dataclass
class Link:
    name: str
    listen_port: int
    upstream_port: int

    def as_dict(self) -> dict[str, str]:
        return {"listen": f"{HOST}:{self.listen_port}", "upstream": f"{HOST}:{self.upstream_port}"}

    def populate_item(self) -> dict[str, Any]:
        return {"name": self.name, **self.as_dict(), "enabled": True}


class LinkManager:
    """The requested links, their proxies, the populate file and the fault proxy's API."""

    def __init__(self, requested: Sequence[str], run_dir: Path, seed: int | None,
                 env: Mapping[str, str] | None = None) -> None:
        self.requested = frozenset(requested)
        self.folder = run_dir / "faultproxy"
        self.config_path = self.folder / "proxies.json"
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.backend, self._where = choose_backend(env) if self.requested else ("none", "")
        self.api_port: int | None = None
        # Our fault proxy's API is a control plane: a per-run Basic credential (chaos/faultproxy/auth.py).
        # A real toxiproxy-server has no such option, an external one is the caller's own.
        self.api_credential = f"proctor:{secrets.token_urlsafe(32)}" if self.backend == "faultproxy" else ""
        self._links: dict[str, Link] = {}
        self._live = False  # the API is up: changes are pushed to it at once

    # ---------------------------------------------------------------- planning
    @property
    def active(self) -> bool:
        return bool(self.requested)

    @property
    def supervised(self) -> bool:
        return self.backend in ("faultproxy", "toxiproxy-server")

    @property
    def url(self) -> str:
        if self.backend == "external":
            return self._where
        userinfo = f"{self.api_credential}@" if self.api_credential else ""
        return f"http://{userinfo}{HOST}:{self.api_port}"

    def server_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The supervised server's environment: ``base`` plus its API credential (never in argv)."""
        env = {k: v for k, v in base.items() if k != FAULTPROXY_CREDENTIAL_ENV}
        if self.api_credential:
            env[FAULTPROXY_CREDENTIAL_ENV] = self.api_credential
        return env

    def wants(self, name: str) -> bool:
        return name in self.requested or (WEB_WILDCARD in self.requested and bool(_WEB_LINK.match(name)))

    def links(self) -> dict[str, dict[str, str]]:
        return {name: link.as_dict() for name, link in sorted(self._links.items())}

    def listen_port(self, name: str) -> int | None:
        link = self._links.get(name)
        return link.listen_port if link else None

    def plan_services(self, ports: Mapping[str, int]) -> None:
        """Proxies for the fixed links (Valkey, providers), from the real service ports."""
        for name, service in (*UPSTREAM_OF.items(), *NODE_LINKS.items()):
            if self.wants(name) and service in ports:
                self.add(name, ports[service], push=False)
        if self.supervised and self.api_port is None:
            self.api_port = free_port()
        if self.active:
            self.write_config()  # only web_N links requested: their proxies come later, the file must exist now

    def add(self, name: str, upstream_port: int, push: bool = True) -> int:
        """Create or re-point the proxy ``name``; its listen port never changes once chosen."""
        link = self._links.get(name)
        if link is None:
            link = self._links[name] = Link(name, free_port(), upstream_port)
        link.upstream_port = upstream_port
        self.write_config()
        if push and self._live:
            self.push()
        return link.listen_port

    def remove(self, name: str) -> None:
        if self._links.pop(name, None) is None:
            return
        self.write_config()
        if self._live:
            self._api("DELETE", f"/proxies/{name}", ok=(204, 404))

    def reallocate(self) -> None:
        """New API and listen ports (a bind race lost before any consumer started)."""
        for link in self._links.values():
            link.listen_port = free_port()
        if self.supervised:
            self.api_port = free_port()
        self.write_config()

    def write_config(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([link.populate_item() for _, link in sorted(self._links.items())], indent=2) + "\n")
        os.replace(tmp, self.config_path)

    # ---------------------------------------------------------------- consumers
    def env_for(self, role: str, valkey_url: str, ai_url: str, sms_url: str) -> dict[str, str]:
        """Environment overrides for a component of ``role`` (stack.components): the proxied
        addresses of its links."""
        env = {}
        for var, link_name in LINKS_OF_ROLE.get(role, {}).items():
            port = self.listen_port(link_name)
            if port is None:
                continue
            if var == "PROCTOR_VALKEY_URL":
                db = valkey_url.rsplit("/", 1)[1] if valkey_url.count("/") >= 3 else "0"
                env[var] = vk.valkey_url(port, int(db or 0))
            else:
                env[var] = f"http://{HOST}:{port}"
        return env

    # ---------------------------------------------------------------- the server
    def argv(self) -> list[str]:
        assert self.api_port is not None
        if self.backend == "toxiproxy-server":
            return [self._where, "-host", HOST, "-port", str(self.api_port), "-config", str(self.config_path)]
        return [self._where, "-m", "chaos.faultproxy", "--host", HOST, "--port", str(self.api_port),
                "--seed", str(self.seed), "--config", str(self.config_path)]

    def ready(self) -> bool:
        """The API answers and every planned proxy exists (the populate file was applied)."""
        with loopback_http.client(timeout=1.0) as client:  # polled while the stack starts: no SSL context per look
            response = client.get(f"{self.url}/proxies")
        if response.status_code != 200:
            return False
        return set(self._links) <= set(response.json())

    def mark_live(self) -> None:
        self._live = True

    def push(self) -> None:
        """``POST /populate`` with every proxy: unchanged ones are left alone (toxics kept)."""
        items = [link.populate_item() for _, link in sorted(self._links.items())]
        if items:
            self._api("POST", "/populate", json_body=items, ok=(201,))

    def cleanup_external(self) -> None:
        """Delete our proxies from an external Toxiproxy (best effort)."""
        if self.backend != "external" or not self._live:
            return
        for name in list(self._links):
            try:
                self._api("DELETE", f"/proxies/{name}", ok=(204, 404))
            except StackError:
                pass
        self._live = False

    def _api(self, method: str, path: str, json_body: Any = None, ok: tuple[int, ...] = (200,)) -> None:
        try:
            with loopback_http.client(timeout=_API_TIMEOUT) as client:
                response = client.request(method, f"{self.url}{path}", json=json_body)
        except httpx.HTTPError as exc:
            raise StackError(f"fault proxy {self.url}: {method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code not in ok:
            raise StackError(f"fault proxy {self.url}: {method} {path}: {response.status_code} {response.text.strip()}")

    def manifest(self) -> dict[str, Any]:
        return {"backend": self.backend, "url": self.url if self.active else None, "requested": sorted(self.requested),
                "seed": self.seed if self.backend == "faultproxy" else None,
                "config": str(self.config_path), "links": self.links()}
