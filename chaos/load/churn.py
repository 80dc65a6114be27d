"""The seed's anti-pattern as a load: a fresh TLS connection to Valkey per operation.

NovaCommerce's 6 October load test recorded 2,854 connection timeouts with fresh
TLS connections to managed Valkey. ``churn_generator(ChurnSpec(...))`` returns a
Scenario ``background`` generator that, beside the exam load, opens a new
TCP + TLS connection for every operation at a fixed rate, runs one small command
(``PING``, or ``SET``/``GET`` on its own key prefix), and closes it again. The
stack's own pooled clients keep working next to it.

Every operation ends in exactly one outcome:

| outcome | meaning |
|---|---|
| ``ok`` | connected, handshake done, command answered |
| ``connect_timeout`` | TCP connect + TLS handshake not done within ``connect_timeout`` |
| ``timeout`` | connected, but no reply within ``socket_timeout`` |
| ``reset`` | the peer reset or closed the connection (RST, EOF) |
| ``tls`` | the TLS handshake failed (certificate, protocol, EOF inside the handshake) |
| ``refused`` | TCP connect refused |
| ``max_clients`` | Valkey answered ``-ERR max number of clients reached`` |
| ``error`` | any other error reply or exception (its text is kept, up to 8) |
| ``skipped`` | not started: ``concurrency`` operations were already in flight (the generator itself was saturated) |

Bounded: at most ``max_ops`` operations, at most ``duration`` seconds, at most
``concurrency`` in flight; it stops when ``stop`` is set and waits at most
``connect_timeout + 2 * socket_timeout`` for the ones in flight. Every
``sample_interval`` seconds a cumulative ``churn-sample`` goes into the history
(``process: "monitor"``), which the connections checker reads; the returned dict
(``scenario.json["background"][name]``) adds latency quantiles.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from chaos.history import History

__all__ = ["CHURN_OUTCOMES", "ChurnSpec", "churn_generator", "churn_op", "quantiles"]

CHURN_OUTCOMES = ("ok", "connect_timeout", "timeout", "reset", "tls", "refused", "max_clients", "error", "skipped")
CLIENT_NAME = "proctor-churn"


@dataclass(frozen=True)
class ChurnSpec:
    rate: float = 20.0  # operations started per second
    duration: float = 30.0  # at most this many seconds
    max_ops: int = 1000  # at most this many operations
    concurrency: int = 16  # at most this many in flight
    connect_timeout: float = 1.0  # TCP connect + TLS handshake
    socket_timeout: float = 1.0  # each reply
    op: str = "ping"  # "ping" | "setget"
    key_prefix: str = "proctor:churn:"
    sample_interval: float = 1.0
    url_key: str = "valkey"  # stack.urls[url_key]: the direct Valkey address

    def __post_init__(self) -> None:
        if self.op not in ("ping", "setget"):
            raise ValueError(f"ChurnSpec.op={self.op!r}: 'ping' or 'setget'")
        if not (self.rate > 0 and self.duration > 0 and self.max_ops > 0 and self.concurrency > 0):
            raise ValueError(f"ChurnSpec: rate, duration, max_ops and concurrency must be > 0: {self}")


def _resp(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _commands(spec: ChurnSpec, n: int, password: str = "", user: str = "") -> tuple[bytes, int]:
    """The bytes of one op (AUTH [user] password when Valkey wants one, then CLIENT SETNAME, pipelined)
    and how many replies to read."""
    auth = _resp("AUTH", *([user] if user else []), password) if password else b""
    setname = auth + _resp("CLIENT", "SETNAME", CLIENT_NAME)
    first = 2 if password else 1
    if spec.op == "ping":
        return setname + _resp("PING"), first + 1
    key = f"{spec.key_prefix}{n % 64}"
    return setname + _resp("SET", key, str(n), "PX", "10000") + _resp("GET", key), first + 2


async def _read_reply(reader: asyncio.StreamReader) -> bytes:
    """One RESP reply line (+, -, :) or bulk string ($); enough for SETNAME/PING/SET/GET."""
    line = await reader.readuntil(b"\r\n")
    if line.startswith(b"$"):
        size = int(line[1:-2])
        if size >= 0:
            await reader.readexactly(size + 2)
    return line


class _ErrorReply(Exception):
    pass


def _classify(exc: BaseException, phase: str) -> str:
    if isinstance(exc, _ErrorReply):
        return "max_clients" if "max number of clients" in str(exc).lower() else "error"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "connect_timeout" if phase == "connect" else "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError)):
        return "reset"
    if isinstance(exc, ssl.SSLError):
        # EOF inside the handshake: the server (or a proxy) dropped us mid-handshake.
        return "tls" if phase == "connect" else "reset"
    if isinstance(exc, OSError) and phase == "connect" and "refused" in str(exc).lower():
        return "refused"
    return "error"


async def churn_op(host: str, port: int, context: ssl.SSLContext | None, spec: ChurnSpec, n: int,
                   password: str = "", user: str = "") -> tuple[str, float, float | None, str]:
    """One fresh-connection op: (outcome, total seconds, handshake seconds or None, error text).

    ``context`` None: plaintext (a non-TLS Valkey, tests); "handshake" is then the TCP connect."""
    started = time.monotonic()
    phase = "connect"
    handshake: float | None = None
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None,
                                    ssl_handshake_timeout=spec.connect_timeout if context else None),
            spec.connect_timeout)
        handshake = time.monotonic() - started
        phase = "io"
        payload, replies = _commands(spec, n, password, user)
        writer.write(payload)
        for _ in range(replies):
            line = await asyncio.wait_for(_read_reply(reader), spec.socket_timeout)
            if line.startswith(b"-"):
                raise _ErrorReply(line[1:].decode(errors="replace").strip())
        return "ok", time.monotonic() - started, handshake, ""
    except Exception as exc:  # noqa: BLE001 - every failure is an outcome
        return _classify(exc, phase), time.monotonic() - started, handshake, f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if writer is not None:
            writer.transport.abort()  # no close_notify round trip: the op is over


def quantiles(values: list[float]) -> dict[str, float | int | None]:
    ordered = sorted(values)
    out: dict[str, float | int | None] = {"count": len(ordered)}
    for label, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        out[label] = round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 6) if ordered else None
    out["max"] = round(ordered[-1], 6) if ordered else None
    return out


class _Tally:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter({k: 0 for k in CHURN_OUTCOMES})
        self.latencies: list[float] = []
        self.handshake_latencies: list[float] = []
        self.errors: list[str] = []
        self.started = time.monotonic()

    def add(self, outcome: str, total: float, handshake: float | None, error: str) -> None:
        self.outcomes[outcome] += 1
        if outcome == "ok":
            self.latencies.append(total)
        if handshake is not None:
            self.handshake_latencies.append(handshake)
        if error and len(self.errors) < 8:
            self.errors.append(f"{outcome}: {error}")

    def sample(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        done = sum(v for k, v in self.outcomes.items() if k != "skipped")
        return {"ops": done, "outcomes": dict(self.outcomes), "handshakes": len(self.handshake_latencies),
                "elapsed": round(elapsed, 3),
                "handshakes_per_second": round(len(self.handshake_latencies) / elapsed, 2)}


def churn_generator(spec: ChurnSpec = ChurnSpec()):
    """A Scenario background generator ``gen(stack, history, stop) -> dict``."""

    async def gen(stack: Any, history: History, stop: asyncio.Event) -> dict[str, Any]:
        url = urlparse(stack.urls[spec.url_key])
        host, port = url.hostname or "127.0.0.1", int(url.port or 6379)
        context = ssl.create_default_context(cafile=stack.settings.valkey_ca or None) if url.scheme == "rediss" else None
        settings = stack.settings
        if settings.valkey_user:  # the harness's own ACL user (stack/valkey_acl.py): keys under proctor:*
            return await run_churn(host, port, context, spec, history, stop, settings.valkey_password, settings.valkey_user)
        return await run_churn(host, port, context, spec, history, stop, unquote(url.password or ""))

    gen.spec = spec  # type: ignore[attr-defined]
    return gen


async def run_churn(host: str, port: int, context: ssl.SSLContext | None, spec: ChurnSpec, history: History | None,
                    stop: asyncio.Event, password: str = "", user: str = "") -> dict[str, Any]:
    tally = _Tally()
    in_flight: set[asyncio.Task] = set()
    next_sample = tally.started + spec.sample_interval

    def emit() -> None:
        if history is not None:
            history.churn_sample(tally.sample())

    def finished(task: asyncio.Task) -> None:
        in_flight.discard(task)
        if not task.cancelled() and task.exception() is None:
            tally.add(*task.result())

    n = 0
    while n < spec.max_ops and not stop.is_set():
        due = tally.started + n / spec.rate
        if due - tally.started > spec.duration:
            break
        now = time.monotonic()
        if now >= next_sample:
            emit()
            next_sample = now + spec.sample_interval
        if due > now:
            try:
                await asyncio.wait_for(stop.wait(), due - now)
                break
            except TimeoutError:
                pass
        if len(in_flight) >= spec.concurrency:
            tally.outcomes["skipped"] += 1
        else:
            task = asyncio.create_task(churn_op(host, port, context, spec, n, password, user))
            in_flight.add(task)
            task.add_done_callback(finished)
        n += 1
    if in_flight:
        _, late = await asyncio.wait(set(in_flight), timeout=spec.connect_timeout + 2 * spec.socket_timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
    emit()
    result = tally.sample()
    result.update(spec=asdict(spec), latency=quantiles(tally.latencies),
                  handshake_latency=quantiles(tally.handshake_latencies), errors=tally.errors,
                  target=f"{host}:{port}")
    return result
