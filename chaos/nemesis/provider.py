"""Provider faults: set a fake provider's knobs (stack/providers/faults.py) for a while.

``FaultSpec(kind="provider", target="ai", params={"calls_per_minute": 8})`` merges the
params into the provider's current knobs through its admin API (``PUT /admin/faults``)
and puts back the knobs it found when the fault ends, so a credit shortage, a revoked
key, a 429 storm, invalid payloads or lost responses are each one scheduled fault.
The end restores knobs as a whole: a credit balance spent during the fault is what
the fault set, not what was left.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from chaos.nemesis.base import FaultSpec, NemesisError
from stack import loopback_http
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["ProviderNemesis", "after_effect_timing", "wait_after_effect", "wait_new_effect"]


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


def wait_new_effect(provider_url: str, admin_token: str, timeout: float) -> dict[str, Any] | None:
    """Wait until the provider's effect ledger grows, and return the newest effect (its
    ``created_at`` is the provider's wall clock): a side effect just committed whose caller,
    held by the provider's ``delay_after_effect_seconds``, has not heard yet. None on timeout.

    A fault timed by this lands between a job's side effect and its caller's next step,
    which a worker's process tree cannot show: a horse seen alive may be past its commit."""
    url = f"{provider_url}/admin/ledger"
    # One client for the whole wait: a client per look cost ~20 CPU ms and as much delay (stack/loopback_http.py).
    with loopback_http.client(headers={ADMIN_TOKEN_HEADER: admin_token}, timeout=5) as http:

        def effects() -> list[dict[str, Any]]:
            return http.get(url).json()["effects"]

        baseline = len(effects())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = effects()
            if len(current) > baseline:
                return max(current, key=lambda effect: effect["id"])
            time.sleep(0.02)
    return None


def wait_after_effect(stack: Any, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """A kill's ``after_effect_at`` (a provider's name): wait up to ``wait_busy`` seconds for
    that provider's next effect (``chaos.deployment.Deployment`` ``stack``). None without it."""
    if "after_effect_at" not in params:
        return None
    return wait_new_effect(stack.urls[str(params["after_effect_at"])], stack.settings.admin_token,
                           float(params.get("wait_busy", 5)))


def after_effect_timing(params: Mapping[str, Any], effect: dict[str, Any] | None, killed_at: float) -> dict[str, Any]:
    """What a fault start records of it: whether an effect came (``after_effect``) and how long
    after its commit the kill landed (``effect_age_at_kill``), which must stay below the
    provider's hold for the kill to fall before the answer."""
    if "after_effect_at" not in params:
        return {}
    age = None if effect is None else round(killed_at - float(effect["created_at"]), 4)
    return {"after_effect": effect is not None, "effect_age_at_kill": age}
