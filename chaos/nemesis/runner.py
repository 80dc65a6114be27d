"""Plays a fault schedule against a nemesis and writes each fault into the history.

Faults are history ops (``process: "nemesis"``, ``f: "fault-start"/"fault-end"``)
so reports can shade fault windows and checkers can relate anomalies to faults.
Nemesis calls block (kills wait for processes), so they run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Sequence

from chaos.history import History
from chaos.nemesis.base import FaultSpec, Nemesis

__all__ = ["run_schedule", "log_fault"]


def log_fault(history: History, phase: str, fault_id: int, fault: FaultSpec, detail: dict[str, Any]) -> None:
    value = {"fault_id": fault_id, **fault.as_dict(), **detail}
    {"start": history.fault_start, "end": history.fault_end}[phase](value)


async def run_schedule(nemesis: Nemesis, faults: Sequence[FaultSpec], history: History, started: float) -> None:
    """Start and end every fault on time (times relative to ``started``, a monotonic clock).

    Faults on one target never overlap: a second kill of a component that is still
    being restarted would fight the first fault's end. Nor do faults of one ``exclusive``
    group (the web pool: one node down at a time). A fault whose target or group is busy
    starts when the earlier one has ended; the history records the real times.
    """
    locks = {key: asyncio.Lock() for fault in faults for key in _lock_keys(fault)}
    await asyncio.gather(*(_play(nemesis, fault_id, fault, history, started, [locks[k] for k in _lock_keys(fault)])
                           for fault_id, fault in enumerate(faults)))


def _lock_keys(fault: FaultSpec) -> list[str]:
    """Always taken in this (sorted) order, so two faults sharing both never wait on each other."""
    return sorted({f"target:{fault.target}"} | ({f"group:{fault.exclusive}"} if fault.exclusive else set()))


async def _play(
    nemesis: Nemesis, fault_id: int, fault: FaultSpec, history: History, started: float, locks: list[asyncio.Lock]
) -> None:
    await _sleep_until(started + fault.at)
    async with contextlib.AsyncExitStack() as held:
        for lock in locks:
            await held.enter_async_context(lock)
        await _start_and_end(nemesis, fault_id, fault, history)


async def _start_and_end(nemesis: Nemesis, fault_id: int, fault: FaultSpec, history: History) -> None:
    try:
        detail = await asyncio.to_thread(nemesis.start, fault)
    except Exception as exc:
        log_fault(history, "start", fault_id, fault, {"error": f"{type(exc).__name__}: {exc}"})
        raise
    log_fault(history, "start", fault_id, fault, detail)
    try:
        await _sleep_until(time.monotonic() + fault.duration)
    finally:
        # Ending a fault is also what cancellation does, so a cut-short run still undoes it.
        end_detail = await asyncio.shield(asyncio.to_thread(nemesis.end, fault))
        log_fault(history, "end", fault_id, fault, end_detail)


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
