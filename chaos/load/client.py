"""One HTTP call -> an ``invoke`` op, then ``ok``, ``fail`` or ``info`` in the history.

The outcome contract is Jepsen's:
- ``ok``: a 2xx — it happened, and losing it later is a violation;
- ``fail``: a 4xx that guarantees no effect (validation, auth, conflict);
- ``info``: timeouts, resets, TLS errors and 5xx — it may or may not have happened.

After an ``info`` the caller continues as a new *process*, because the old request
may still be in flight; a retry re-sends the same Idempotency-Key, as a real exam
client must.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from chaos.history import History

__all__ = ["Call", "CallResult", "ExamClient", "classify"]


@dataclass(frozen=True)
class Call:
    f: str
    method: str
    path: str
    value: dict[str, Any]
    json: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    observe: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """What an ok reply adds to the completion's value (a read's result, a write's verdict)."""


@dataclass
class CallResult:
    type: str  # ok | fail | info
    status: int | None
    body: dict[str, Any]
    process: int
    tries: int


def classify(status: int | None) -> str:
    if status is None or status >= 500:
        return "info"
    if 200 <= status < 300:
        return "ok"
    return "fail"


class ExamClient:
    """Issues calls with bounded retries; every try is its own invoke/complete pair.
    Process numbers come from the history writer (``new_process``): one that saw ``info`` never issues again."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        history: History,
        max_tries: int = 6,
        retry_delay: float = 0.1,
        counts: Counter | None = None,
    ) -> None:
        self.http = http
        self.history = history
        self.max_tries = max_tries
        self.retry_delay = retry_delay
        self.retries = 0
        self.counts: Counter = Counter() if counts is None else counts  # completions by type, for progress

    async def call(self, process: int, call: Call) -> CallResult:
        """Try until ok or fail, retrying info outcomes as a new process each time."""
        result = CallResult("info", None, {}, process, 0)
        for attempt in range(1, self.max_tries + 1):
            result = await self._once(process, call)
            result.tries = attempt
            if result.type != "info":
                return result
            process = self.history.new_process()
            result.process = process
            if attempt < self.max_tries:
                self.retries += 1
                await asyncio.sleep(self.retry_delay * attempt)
        return result

    async def _once(self, process: int, call: Call) -> CallResult:
        invoked = self.history.invoke(process, call.f, call.value)
        status: int | None = None
        body: dict[str, Any] = {}
        node = error = None
        try:
            response = await self.http.request(call.method, call.path, json=call.json, headers=call.headers)
            status = response.status_code
            node = response.headers.get("x-proctor-node")
            body = _json_or_empty(response)
        except httpx.HTTPError as exc:  # timeouts, resets, refused, TLS: indeterminate
            error = f"{type(exc).__name__}: {exc}"[:300]
        kind = classify(status)
        self.counts[kind] += 1
        if kind != "ok" and error is None:
            error = str(body.get("detail", body))[:300] if body else f"HTTP {status}"
        value = {**call.value, **call.observe(body)} if call.observe and kind == "ok" else call.value
        self.history.complete(invoked, kind, value, status=status, node=node, receipt_id=body.get("receipt_id"),
                              error=error)
        return CallResult(kind, status, body, process, 0)


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {"data": data}
