"""A fault ``inside`` another keeps its offsets to it however late either call runs (chaos/nemesis/runner.py).

The ledger stall's kill must land inside the lock hold. With two independent clocks a kill
whose thread started 1.7 s late landed after a fixed 2 s hold (rehearsal run 22); nested, the
hold lasts until its remaining second after the kill returned.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.history import FAULT_END, FAULT_START, History, read_history
from chaos.nemesis import FaultSpec, run_schedule
from chaos.nemesis.runner import check_nesting


class SlowStarts:
    """Records (event, target, monotonic time); a target's start takes ``delays[target]`` seconds,
    as a kill on a saturated machine does."""

    kinds = frozenset({"ledger_lock", "kill"})

    def __init__(self, delays: dict[str, float]) -> None:
        self.delays = delays
        self.events: list[tuple[str, str, float]] = []

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        time.sleep(self.delays.get(fault.target, 0.0))
        self.events.append(("start", fault.target, time.monotonic()))
        return {}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        self.events.append(("end", fault.target, time.monotonic()))
        return {}

    def heal(self) -> None:
        pass


def _hold_and_kill(inside: int | None) -> list[FaultSpec]:
    return [FaultSpec(at=0.0, kind="ledger_lock", target="ledger", duration=0.4),
            FaultSpec(at=0.2, kind="kill", target="web_1", duration=0.1, inside=inside)]


def _play(tmp_path: Path, faults: list[FaultSpec], delays: dict[str, float]) -> dict[tuple[str, str], float]:
    nemesis = SlowStarts(delays)
    with History(tmp_path / "history.jsonl") as history:
        asyncio.run(run_schedule(nemesis, faults, history, time.monotonic()))
    return {(event, target): at for event, target, at in nemesis.events}


def test_a_late_kill_inside_the_hold_still_lands_inside_it(tmp_path: Path) -> None:
    times = _play(tmp_path, _hold_and_kill(inside=0), {"web_1": 0.5})  # the kill returns 0.5 s late
    killed, held_until = times[("start", "web_1")], times[("end", "ledger")]
    assert held_until - killed >= 0.2 - 0.01  # the hold's 0.2 s after the kill, as scheduled
    ops = read_history(tmp_path / "history.jsonl").ops
    [end] = [op.value for op in ops if op.f == FAULT_END and op.value["target"] == "ledger"]
    assert end["outlasted_inner"]["kill"] >= 0.19, end


def test_a_late_hold_delays_the_kill_by_as_much(tmp_path: Path) -> None:
    times = _play(tmp_path, _hold_and_kill(inside=0), {"ledger": 0.5})  # the hold's start returns 0.5 s late
    assert times[("start", "web_1")] - times[("start", "ledger")] >= 0.2 - 0.01
    ops = read_history(tmp_path / "history.jsonl").ops
    [start] = [op.value for op in ops if op.f == FAULT_START and op.value["target"] == "web_1"]
    assert start["inside"] == 0 and start["started_after_outer"] >= 0.19, start


def test_without_nesting_the_same_late_kill_lands_after_the_hold(tmp_path: Path) -> None:
    """The control: the two clocks of an unnested schedule let the kill miss the hold."""
    times = _play(tmp_path, _hold_and_kill(inside=None), {"web_1": 0.5})
    assert times[("start", "web_1")] > times[("end", "ledger")]


@pytest.mark.parametrize("faults, message", [
    ([FaultSpec(at=0.0, kind="kill", target="web_1", duration=1.0, inside=1)], "names no other fault"),
    ([FaultSpec(at=0.0, kind="ledger_lock", target="ledger", duration=1.0),
      FaultSpec(at=1.5, kind="kill", target="web_1", duration=1.0, inside=0)], "not within fault 0"),
    ([FaultSpec(at=0.0, kind="kill", target="web_1", duration=1.0),
      FaultSpec(at=0.5, kind="kill", target="web_1", duration=1.0, inside=0)], "shares a target"),
    ([FaultSpec(at=0.0, kind="ledger_lock", target="ledger", duration=2.0),
      FaultSpec(at=0.5, kind="kill", target="web_1", duration=1.0, inside=0),
      FaultSpec(at=0.6, kind="kill", target="web_2", duration=0.1, inside=1)], "itself inside another"),
])
def test_a_schedule_that_could_never_play_is_refused_before_the_load(faults: list[FaultSpec], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_nesting(faults)
