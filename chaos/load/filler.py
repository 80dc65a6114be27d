"""Memory pressure as a load: fill Valkey to ``maxmemory`` beside the exam, hold it full, free it.

``filler_generator(FillerSpec(...))`` returns a Scenario ``background`` generator. At
``start_at`` seconds it writes ``value_bytes`` strings under ``proctor-filler:`` as the
``filler`` ACL user (its own user and key prefix, stack/valkey_acl.py) until Valkey refuses
with ``OOM`` under ``noeviction`` (or ``max_bytes`` are written: bounded either way), holds it
full for ``hold`` seconds while probing that it stays full, then deletes every key it wrote.

The returned dict (``scenario.json["background"]["filler"]``) says what happened, measured:
``bytes_written``, ``full`` (Valkey refused a write), ``full_at``/``freed_at`` (run seconds),
``refusals`` (OOM answers to the filler itself, the proof Valkey was full) and ``freed``.
Embedded only: it needs the deployment's ``valkey_as``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from redis.exceptions import OutOfMemoryError, RedisError

from chaos.history import History

__all__ = ["FILLER_PREFIX", "FillerSpec", "filler_generator"]

FILLER_PREFIX = "proctor-filler:"


@dataclass(frozen=True)
class FillerSpec:
    start_at: float = 3.0  # run seconds (from the load's start) before filling
    hold: float = 4.0  # seconds Valkey stays full
    value_bytes: int = 256 * 1024
    max_bytes: int = 128 * 1024 * 1024  # never write more than this, whatever maxmemory says
    probe_interval: float = 0.05  # between top-ups while held: less room left for the stack's writes


def filler_generator(spec: FillerSpec):
    async def gen(stack: Any, history: History, stop: asyncio.Event) -> dict[str, Any]:
        if not hasattr(stack, "valkey_as"):
            return {"error": "the memory filler needs the embedded deployment (valkey_as)", **asdict(spec)}
        client = stack.valkey_as("filler")
        started = time.monotonic()
        try:
            return await asyncio.to_thread(_fill_hold_free, client, spec, started, stop)
        finally:
            client.close()

    return gen


def _fill_hold_free(client: Any, spec: FillerSpec, started: float, stop: asyncio.Event) -> dict[str, Any]:
    result: dict[str, Any] = {"bytes_written": 0, "keys": 0, "full": False, "full_at": None, "freed_at": None,
                              "refusals": 0, "freed": 0, "errors": [], **asdict(spec)}
    _sleep_until(started + spec.start_at, stop)
    value = b"x" * spec.value_bytes
    keys: list[str] = []
    while result["bytes_written"] + spec.value_bytes <= spec.max_bytes and not stop.is_set():
        key = f"{FILLER_PREFIX}{len(keys)}"
        try:
            client.set(key, value)
        except OutOfMemoryError:
            result.update(full=True, full_at=round(time.monotonic() - started, 3))
            result["refusals"] += 1
            break
        except RedisError as exc:
            result["errors"].append(f"{type(exc).__name__}: {str(exc)[:120]}")
            break
        keys.append(key)
        result["bytes_written"] += spec.value_bytes
    if result["full"]:
        result["refusals"] += _hold(client, spec, keys)
    result["keys"] = len(keys)
    result["freed"] = _free(client, keys, result["errors"])
    result["freed_at"] = round(time.monotonic() - started, 3)
    return result


def _hold(client: Any, spec: FillerSpec, keys: list[str]) -> int:
    """Stay full for ``spec.hold`` seconds: whenever Valkey made room, top up with full-size writes,
    then with ever smaller ones (``_TOP_UP_SIZES``) until each size is refused, so what an AOF
    buffer flush frees is taken before a small write of the stack's fits in it. Each write goes
    into ``keys``; the OOM refusals are counted."""
    refusals, until = 0, time.monotonic() + spec.hold
    written = len(keys) * spec.value_bytes
    while time.monotonic() < until:
        for size in (spec.value_bytes, *_TOP_UP_SIZES):
            while written + size <= spec.max_bytes and time.monotonic() < until:
                key = f"{FILLER_PREFIX}{len(keys)}"
                try:
                    client.set(key, b"x" * size)
                except OutOfMemoryError:
                    refusals += 1
                    break
                except RedisError:
                    break
                keys.append(key)
                written += size
        time.sleep(spec.probe_interval)
    return refusals


_TOP_UP_SIZES = (16 * 1024, 1024, 64)
"""Bytes of the smaller top-ups, down to less than one enqueue of a job (a job hash is ~1 KiB)."""


def _free(client: Any, keys: list[str], errors: list[str]) -> int:
    """Delete what was written, in batches; retried until it goes through (30 s at most)."""
    freed, todo = 0, list(keys)
    deadline = time.monotonic() + 30.0
    while todo and time.monotonic() < deadline:
        batch = todo[:100]
        try:
            freed += int(client.delete(*batch))
            todo = todo[100:]
        except RedisError as exc:
            errors.append(f"free: {type(exc).__name__}: {str(exc)[:120]}")
            time.sleep(0.2)
    return freed


def _sleep_until(deadline: float, stop: asyncio.Event) -> None:
    while time.monotonic() < deadline and not stop.is_set():
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
