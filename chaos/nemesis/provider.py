"""Provider faults: set a fake provider's knobs (stack/providers/faults.py) for a while.

``FaultSpec(kind="provider", target="ai", params={"calls_per_minute": 8})`` merges the
params into the provider's current knobs through its admin API (``PUT /admin/faults``)
and puts back the knobs it found when the fault ends, so a credit shortage, a revoked
key, a 429 storm, invalid payloads or lost responses are each one scheduled fault.
The end restores knobs as a whole: a credit balance spent during the fault is what
the fault set, not what was left.

``answer_held`` times a kill, a failover or a cut between a job's side effect and its
caller's next step, through the provider's answer hold (stack/providers/hold.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Mapping

from chaos.nemesis.base import FaultSpec, NemesisError
from stack import loopback_http
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["HeldAnswer", "ProviderNemesis", "after_effect_timing", "answer_held"]


class ProviderNemesis:
    kinds = frozenset({"provider"})

    def __init__(self, urls: Mapping[str, str], admin_token: str, timeout: float = 10.0) -> None:
        self.urls = dict(urls)
        self.admin_token = admin_token
        self.timeout = timeout
        self._before: dict[str, dict[str, Any]] = {}

    def _url(self, target: str) -> str:
        if target not in self.urls:
            raise NemesisError(f"unknown provider {target!r}; known: {sorted(self.urls)}")
        return f"{self.urls[target]}/admin/faults"

    def _request(self, method: str, target: str, knobs: dict[str, Any] | None = None) -> dict[str, Any]:
        response = loopback_http.request(method, self._url(target), json=knobs, timeout=self.timeout,
                                         headers={ADMIN_TOKEN_HEADER: self.admin_token})
        if response.status_code != 200:
            raise NemesisError(f"provider {target!r} refused knobs {knobs}: {response.status_code} {response.text}")
        return response.json()

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        current = self._request("GET", fault.target)
        self._before.setdefault(fault.target, current)
        return {"knobs": self._request("PUT", fault.target, {**current, **fault.params})}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        before = self._before.pop(fault.target, None)
        if before is None:
            return {}
        return {"knobs": self._request("PUT", fault.target, before)}

    def heal(self) -> None:
        for target in list(self._before):
            self._request("PUT", target, self._before.pop(target))


@dataclass
class HeldAnswer:
    """What ``answer_held`` found: the new effect whose answer the provider holds (``id``,
    ``created_at`` on the provider's wall clock; None if none came in time), and when the
    provider let its answers go: at ``release()``, which a strike may call as soon as it
    landed, else when the block is left."""

    effect: dict[str, Any] | None = None
    released_at: float | None = None
    _let_go: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def release(self) -> None:
        """Let the held answers go, once (later calls do nothing)."""
        with self._lock:
            if self.released_at is None and self._let_go is not None:
                self.released_at = float(self._let_go()["released_at"])


@contextmanager
def answer_held(stack: Any, params: Mapping[str, Any]) -> Iterator[HeldAnswer | None]:
    """A strike's ``after_effect_at`` (a provider's name): arm that provider's answer hold
    (stack/providers/hold.py), wait up to ``wait_busy`` seconds for a new effect whose answer
    it holds, run the block (the strike), then let every held answer go. The caller of that
    effect has committed its side effect and hears of it only after the strike, however long
    the strike took to land: what a process tree cannot show (a horse seen alive may be past
    its commit) and a fixed hold cannot promise (a slow kill outlived a 1 s one).
    Yields None without ``after_effect_at`` (``chaos.deployment.Deployment`` ``stack``)."""
    if "after_effect_at" not in params:
        yield None
        return
    url = f"{stack.urls[str(params['after_effect_at'])]}/admin/hold"
    # One client for the whole wait: a client per look cost ~20 CPU ms and as much delay (stack/loopback_http.py).
    with loopback_http.client(headers={ADMIN_TOKEN_HEADER: stack.settings.admin_token}, timeout=5) as http:
        held = HeldAnswer(_let_go=lambda: _admin(http.delete(url)))
        _admin(http.post(url))
        try:
            held.effect = _first_held(http, url, float(params.get("wait_busy", 5)))
            yield held
        finally:
            held.release()


def _admin(response: Any) -> dict[str, Any]:
    if response.status_code != 200:
        raise NemesisError(f"{response.request.method} {response.request.url}: {response.status_code} {response.text}")
    return response.json()


def _first_held(http: Any, url: str, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = _admin(http.get(url))["held"]
        if held:
            return held[0]
        time.sleep(0.02)
    return None


def after_effect_timing(held: HeldAnswer | None, struck_at: float) -> dict[str, Any]:
    """What a fault start records of ``answer_held``: whether an answer was held
    (``after_effect``), how long after its effect's commit the strike landed
    (``effect_age_at_kill``, measured only), and how long after the strike the provider let
    the answer go (``answer_released_after_kill``: at or above 0 when the caller heard only
    after the strike). Nothing without ``after_effect_at``."""
    if held is None:
        return {}
    effect = held.effect
    age = None if effect is None else round(struck_at - float(effect["created_at"]), 4)
    released = None if held.released_at is None else round(held.released_at - struck_at, 4)
    return {"after_effect": effect is not None, "effect_age_at_kill": age, "answer_released_after_kill": released}
