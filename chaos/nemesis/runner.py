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
    starts when the earlier one has ended; the history records the real times. A fault
    ``inside`` another keeps its offsets to it (``_Nesting``).
    """
    check_nesting(faults)
    locks = {key: asyncio.Lock() for fault in faults for key in _lock_keys(fault)}
    started_events = [_Started() for _ in faults]
    await asyncio.gather(*(_play(nemesis, fault_id, fault, history, started, [locks[k] for k in _lock_keys(fault)],
                                 _Nesting.of(fault_id, faults, started_events))
                           for fault_id, fault in enumerate(faults)))


def check_nesting(faults: Sequence[FaultSpec]) -> None:
    """A fault can only be inside an earlier-starting fault it shares no target or group with
    (else it would wait for the end that waits for it), and that fault must not be inside another."""
    for fault_id, fault in enumerate(faults):
        if fault.inside is None:
            continue
        if not 0 <= fault.inside < len(faults) or fault.inside == fault_id:
            raise ValueError(f"fault {fault_id}: inside={fault.inside} names no other fault of the schedule")
        outer = faults[fault.inside]
        if outer.inside is not None:
            raise ValueError(f"fault {fault_id}: fault {fault.inside} is itself inside another fault")
        if not outer.at <= fault.at < outer.at + outer.duration:
            raise ValueError(f"fault {fault_id}: at={fault.at} is not within fault {fault.inside} "
                             f"({outer.at} to {outer.at + outer.duration})")
        if set(_lock_keys(fault)) & set(_lock_keys(outer)):
            raise ValueError(f"fault {fault_id}: shares a target or group with fault {fault.inside}, so it "
                             f"could never start inside it")


class _Started:
    """When a fault's start returned (monotonic), for the faults nested with it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.at = 0.0

    def mark(self) -> None:
        if not self.event.is_set():
            self.at = time.monotonic()
            self.event.set()

    async def wait(self) -> float:
        await self.event.wait()
        return self.at


class _Nesting:
    """A fault's ties to the faults it is inside of, or that are inside it (``FaultSpec.inside``)."""

    def __init__(self, own: _Started, outer: tuple[FaultSpec, _Started] | None,
                 inner: list[tuple[FaultSpec, _Started]]) -> None:
        self.own, self.outer, self.inner = own, outer, inner

    @classmethod
    def of(cls, fault_id: int, faults: Sequence[FaultSpec], started: list[_Started]) -> "_Nesting":
        fault = faults[fault_id]
        outer = None if fault.inside is None else (faults[fault.inside], started[fault.inside])
        inner = [(f, started[i]) for i, f in enumerate(faults) if f.inside == fault_id]
        return cls(started[fault_id], outer, inner)

    async def wait_to_start(self, fault: FaultSpec) -> dict[str, Any]:
        """Inside a fault: ``fault.at - outer.at`` after the outer fault's start returned."""
        if self.outer is None:
            return {}
        outer, outer_started = self.outer
        landed = await outer_started.wait()
        await _sleep_until(landed + fault.at - outer.at)
        return {"started_after_outer": round(time.monotonic() - landed, 3)}

    async def wait_to_end(self, fault: FaultSpec) -> dict[str, Any]:
        """Around faults: until each inner fault's start returned, plus what the schedule left after it."""
        waited = {}
        for inner, inner_started in self.inner:
            landed = await inner_started.wait()
            before = time.monotonic()
            await _sleep_until(landed + fault.at + fault.duration - inner.at)
            waited[inner.kind] = round(time.monotonic() - before, 3)
        return {"outlasted_inner": waited} if waited else {}


def _lock_keys(fault: FaultSpec) -> list[str]:
    """Always taken in this (sorted) order, so two faults sharing both never wait on each other."""
    return sorted({f"target:{fault.target}"} | ({f"group:{fault.exclusive}"} if fault.exclusive else set()))


async def _play(
    nemesis: Nemesis, fault_id: int, fault: FaultSpec, history: History, started: float, locks: list[asyncio.Lock],
    nesting: _Nesting,
) -> None:
    try:
        await _sleep_until(started + fault.at)
        nested = await nesting.wait_to_start(fault)
        async with contextlib.AsyncExitStack() as held:
            for lock in locks:
                await held.enter_async_context(lock)
            await _start_and_end(nemesis, fault_id, fault, history, nesting, nested)
    finally:
        nesting.own.mark()  # a fault that failed or was cut short never holds its outer fault forever


async def _start_and_end(nemesis: Nemesis, fault_id: int, fault: FaultSpec, history: History,
                         nesting: _Nesting, nested: dict[str, Any]) -> None:
    try:
        detail = await asyncio.to_thread(nemesis.start, fault)
    except Exception as exc:
        log_fault(history, "start", fault_id, fault, {"error": f"{type(exc).__name__}: {exc}"})
        raise
    nesting.own.mark()
    log_fault(history, "start", fault_id, fault, {**detail, **nested})
    end_detail: dict[str, Any] = {}
    try:
        await _sleep_until(time.monotonic() + fault.duration)
        end_detail = await nesting.wait_to_end(fault)
    finally:
        # Ending a fault is also what cancellation does, so a cut-short run still undoes it.
        end_detail = {**end_detail, **await asyncio.shield(asyncio.to_thread(nemesis.end, fault))}
        log_fault(history, "end", fault_id, fault, end_detail)


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
